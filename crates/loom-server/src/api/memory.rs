//! Memory and knowledge-base endpoints under `/loom/v1`: search by tier, save a note, read and
//! forget an item, and the knowledge base's files and search.
//!
//! Everything is the caller's tenant's only: agents are keyed by tenant
//! ([`crate::memory::memory_agent`]), sessions are scoped like every other id, and an item of
//! another tenant is a 404 like one that does not exist. A key made for one agent reaches that
//! agent's memory only.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use loom_core::AgentId;
use loom_memory::{Hit, Memory, MemoryError, NewNote, Recall, Tier};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::body::parse_json;
use super::extract::existing;
use super::extract::Caller;
use super::schema;
use crate::auth::Principal;
use crate::error::{ApiError, ErrorBody, Result};
use crate::memory::{memory_agent, tenant_agent};
use crate::state::{now_ms, AppState};

/// The budget of a search that names none, in tokens.
const DEFAULT_BUDGET: u64 = 1_000;

/// The largest budget one search may ask for.
pub(crate) const MAX_BUDGET: u64 = 100_000;

/// The largest knowledge-base file accepted, in bytes.
const MAX_KB_FILE_BYTES: usize = 8 * 1024 * 1024;

/// A memory error as the API reports it: the caller's mistakes are 4xx naming the field.
fn api_error(e: MemoryError) -> ApiError {
    match e {
        MemoryError::InvalidInput { field, reason } => ApiError::invalid_field(field, reason),
        MemoryError::ItemNotFound(id) => ApiError::not_found(format!("memory item {id} not found")),
        MemoryError::SessionNotFound(s) => ApiError::not_found(format!("session `{s}` not found")),
        // What this server's memory backend cannot do: the request is well formed, so it is a
        // conflict with the server's setup, named, not a failure.
        e @ MemoryError::Unsupported(_) => ApiError::conflict(e.to_string()),
        other => {
            tracing::error!("memory: {other}");
            ApiError::internal("working on memory")
        }
    }
}

/// The server's memory, or a 503 saying why there is none.
fn memory(state: &AppState) -> Result<Arc<dyn Memory>> {
    state.memory.clone().ok_or_else(|| {
        ApiError::unavailable("this server keeps no memory: it was started with --no-memory")
    })
}

/// The agent a request names (or the key's agent) and its memory key; a key made for one agent
/// cannot name another.
fn agent_key(p: &Principal, named: Option<&str>) -> Result<(AgentId, AgentId)> {
    let agent = match (named, &p.agent) {
        (Some(a), Some(own)) if a != own.as_str() => {
            return Err(ApiError::invalid_field(
                "agent",
                format!("this key is for agent `{own}`, not `{a}`"),
            ))
        }
        (Some(a), _) => Principal::agent(a, "agent")?,
        (None, Some(own)) => own.clone(),
        // The agent a session gets when none is named.
        (None, None) => AgentId::new(loom_session::history::DEFAULT_AGENT)
            .map_err(|e| ApiError::invalid_field("agent", e.to_string()))?,
    };
    let key = memory_agent(p.tenant.as_ref(), &agent)
        .ok_or_else(|| ApiError::invalid_field("agent", "cannot be keyed for this tenant"))?;
    Ok((agent, key))
}

/// A search's hit, its sources' sessions as the tenant names them.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MemoryHit {
    /// The item's id; absent for L1 hits (the log itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    id: Option<i64>,
    text: String,
    tokens: u64,
    score: f64,
    #[schema(schema_with = schema::tier)]
    tier: &'static str,
    sources: Vec<HitSource>,
}

/// Where a hit comes from: a session's event, or a range of its events.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HitSource {
    session: String,
    seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    to_seq: Option<u64>,
}

impl MemoryHit {
    fn of(p: &Principal, h: &Hit) -> Self {
        let sources = h
            .sources
            .iter()
            .filter_map(|s| {
                Some(HitSource {
                    session: p.unscope(&s.session)?.to_owned(),
                    seq: s.seq,
                    to_seq: s.to_seq,
                })
            })
            .collect();
        Self {
            id: (h.id > 0).then_some(h.id),
            text: h.text.clone(),
            tokens: h.tokens,
            score: h.score,
            tier: h.tier.as_str(),
            sources,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MemoryHits {
    hits: Vec<MemoryHit>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = MemorySearch)]
pub(crate) struct SearchRequest {
    query: String,
    /// Default: the key's agent, else `agent` (the agent a session gets when none is named).
    #[schema(schema_with = schema::id_or_null)]
    agent: Option<String>,
    /// The current session: L1 and L2 need one.
    #[schema(schema_with = schema::id_or_null)]
    session: Option<String>,
    #[schema(schema_with = schema::tier_or_null)]
    tier: Option<String>,
    /// Tokens (default 1,000).
    #[schema(schema_with = schema::search_budget_or_null)]
    budget: Option<u64>,
    #[schema(schema_with = schema::count_or_null)]
    limit: Option<usize>,
    /// Include items that were superseded.
    #[serde(default)]
    history: bool,
    /// Only items valid from this time on (UTC milliseconds).
    from_ms: Option<i64>,
    /// Only items that became valid at or before this time (UTC milliseconds).
    to_ms: Option<i64>,
}

/// Search an agent's memory by tier (L1 recent log, L2 notes, L3 summaries, L4 long-term)
/// within a token budget.
#[utoipa::path(post, path = "/loom/v1/memory/search", request_body = SearchRequest,
    responses((status = 200, body = MemoryHits), (status = 503, body = ErrorBody), schema::Errors))]
pub(crate) async fn search(
    State(state): State<Arc<AppState>>,
    Caller(p): Caller,
    body: Bytes,
) -> Result<Response> {
    let req: SearchRequest = parse_json(&body)?;
    let memory = memory(&state)?;
    let (plain, agent) = agent_key(&p, req.agent.as_deref())?;
    let tier = req
        .tier
        .as_deref()
        .map(str::parse::<Tier>)
        .transpose()
        .map_err(api_error)?;
    let budget = req.budget.unwrap_or(DEFAULT_BUDGET);
    if budget == 0 || budget > MAX_BUDGET {
        return Err(ApiError::invalid_field(
            "budget",
            format!("expected 1..={MAX_BUDGET} tokens, not {budget}"),
        ));
    }
    let session = match &req.session {
        Some(s) => Some(existing(&state, &p, s).await?),
        None => None,
    };
    let recall = Recall {
        query: req.query,
        agent,
        session: session.as_ref().map(|(sid, _)| sid.clone()),
        tier,
        budget,
        limit: req.limit.unwrap_or_else(|| loom_memory::limit_for(budget)),
        history: req.history,
        from_ms: req.from_ms,
        to_ms: req.to_ms,
    };
    // L1 is read from the session's own log: the session is the tenant's (scoped above), and
    // it must be the agent's.
    let l1_owned = session
        .as_ref()
        .is_some_and(|(_, info)| info.agent == plain);
    let hits = state
        .blocking("searching memory", move |s| {
            // Read your writes: what was appended before the search is indexed first (the
            // indexer's backlog is short; searches are not on the proxy's path).
            if let Some(indexer) = &s.indexer {
                indexer.flush();
            }
            match (recall.tier, &recall.session) {
                (Some(Tier::L1), Some(sid)) if l1_owned => loom_memory::recent(
                    memory.as_ref(),
                    s.store.as_ref(),
                    &plain,
                    sid,
                    &recall.query,
                    recall.budget,
                    recall.limit,
                )
                .map_err(api_error),
                (Some(Tier::L1), Some(_)) => Ok(Vec::new()),
                _ => loom_memory::recall(memory.as_ref(), Some(s.store.as_ref()), &recall)
                    .map_err(api_error),
            }
        })
        .await?;
    let hits = hits.iter().map(|h| MemoryHit::of(&p, h)).collect();
    Ok(Json(MemoryHits { hits }).into_response())
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SaveNote)]
pub(crate) struct SaveRequest {
    #[schema(schema_with = schema::text)]
    text: String,
    #[schema(schema_with = schema::id)]
    session: String,
    #[schema(schema_with = schema::id_or_null)]
    agent: Option<String>,
    /// Default: the session's last event.
    #[schema(schema_with = schema::seq_or_null)]
    seq: Option<u64>,
    #[schema(schema_with = schema::positive_or_null)]
    ttl_seconds: Option<u64>,
}

/// A note saved.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SavedNote {
    id: i64,
    /// `false` when the same note was already saved in this session.
    created: bool,
    expires_ms: Option<i64>,
}

/// Save a note into a session's working memory (L2), optionally with a time to live.
#[utoipa::path(post, path = "/loom/v1/memory/items", request_body = SaveRequest,
    responses((status = 200, body = SavedNote), (status = 409, body = ErrorBody),
        (status = 503, body = ErrorBody), schema::Errors))]
pub(crate) async fn save(
    State(state): State<Arc<AppState>>,
    Caller(p): Caller,
    body: Bytes,
) -> Result<Response> {
    let req: SaveRequest = parse_json(&body)?;
    let memory = memory(&state)?;
    let (sid, info) = existing(&state, &p, &req.session).await?;
    let named = req.agent.as_deref().unwrap_or(info.agent.as_str());
    let (plain, agent) = agent_key(&p, Some(named))?;
    if plain != info.agent {
        // The request contradicts what is stored: a conflict, not a malformed request.
        let mut e = ApiError::conflict(format!(
            "session `{}` belongs to agent `{}`, not `{plain}`",
            req.session, info.agent
        ));
        e.field = Some("agent".into());
        return Err(e);
    }
    let seq = req.seq.unwrap_or(info.event_count);
    if seq > info.event_count {
        let mut e = ApiError::not_found(format!(
            "session `{}` has no event {seq} (it has {})",
            req.session, info.event_count
        ));
        e.field = Some("seq".into());
        return Err(e);
    }
    let ttl_ms = match req.ttl_seconds {
        Some(0) => return Err(ApiError::invalid_field("ttl_seconds", "must be at least 1")),
        Some(t) => Some(i64::try_from(t.saturating_mul(1000)).unwrap_or(i64::MAX)),
        None => None,
    };
    let note = NewNote {
        agent,
        text: req.text,
        session: sid,
        seq,
        saved_ms: now_ms(),
        ttl_ms,
    };
    let saved = state
        .blocking("saving a note", move |_| {
            memory.save(&note).map_err(api_error)
        })
        .await?;
    Ok(Json(SavedNote {
        id: saved.id,
        created: saved.created,
        expires_ms: saved.expires_ms,
    })
    .into_response())
}

/// Item `id` when it is the caller's (its agent keyed for the caller's tenant, and the key's
/// agent when the key has one); a 404 otherwise.
fn owned_item(p: &Principal, memory: &dyn Memory, id: i64) -> Result<loom_memory::Item> {
    let missing = || ApiError::not_found(format!("memory item {id} not found"));
    let item = memory.item(id).map_err(|e| match e {
        MemoryError::ItemNotFound(_) => missing(),
        other => api_error(other),
    })?;
    let agent = tenant_agent(p.tenant.as_ref(), item.agent.as_str()).ok_or_else(missing)?;
    if p.agent.as_ref().is_some_and(|own| own.as_str() != agent) {
        return Err(missing());
    }
    Ok(item)
}

/// An item as the tenant sees it: its agent and sessions in the tenant's names.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MemoryItem {
    id: i64,
    agent: Option<String>,
    #[schema(schema_with = schema::tier)]
    tier: &'static str,
    kind: &'static str,
    text: String,
    tokens: u64,
    valid_from: i64,
    valid_to: Option<i64>,
    superseded_by: Option<i64>,
    expires_ms: Option<i64>,
    sources: Vec<ItemSource>,
}

/// The events an item was drawn from.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ItemSource {
    session: String,
    from_seq: u64,
    to_seq: u64,
    ts_ms: i64,
}

impl MemoryItem {
    fn of(p: &Principal, item: &loom_memory::Item, expires_ms: Option<i64>) -> Self {
        let sources = item
            .sources
            .iter()
            .filter_map(|s| {
                Some(ItemSource {
                    session: p.unscope(&s.session)?.to_owned(),
                    from_seq: s.from_seq,
                    to_seq: s.to_seq,
                    ts_ms: s.ts_ms,
                })
            })
            .collect();
        Self {
            id: item.id,
            agent: tenant_agent(p.tenant.as_ref(), item.agent.as_str()).map(str::to_owned),
            tier: item.tier.as_str(),
            kind: item.kind.as_str(),
            text: item.text.clone(),
            tokens: item.tokens,
            valid_from: item.valid_from,
            valid_to: item.valid_to,
            superseded_by: item.superseded_by,
            expires_ms,
            sources,
        }
    }
}

/// The path of one memory item.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Read by the handlers; here for the description.
pub(crate) struct ItemPath {
    /// The item's id.
    #[param(value_type = schema::ItemId, inline)]
    id: i64,
}

fn item_id(raw: &str) -> Result<i64> {
    raw.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::invalid_field("id", format!("`{raw}` is not a memory item id")))
}

/// One memory item with its provenance.
#[utoipa::path(get, path = "/loom/v1/memory/items/{id}", params(ItemPath),
    responses((status = 200, body = MemoryItem), (status = 503, body = ErrorBody), schema::Errors))]
pub(crate) async fn get_item(
    State(state): State<Arc<AppState>>,
    Caller(p): Caller,
    Path(raw): Path<String>,
) -> Result<Response> {
    let id = item_id(&raw)?;
    let memory = memory(&state)?;
    let v = state
        .blocking("reading a memory item", move |_| {
            let item = owned_item(&p, memory.as_ref(), id)?;
            let expires = memory.note_expiry(id).map_err(api_error)?;
            // An expired note is as good as gone (it is purged at the next save).
            if expires.is_some_and(|at| at <= now_ms()) {
                return Err(ApiError::not_found(format!("memory item {id} not found")));
            }
            Ok(MemoryItem::of(&p, &item, expires))
        })
        .await?;
    Ok(Json(v).into_response())
}

/// An item forgotten, as it was, and the items it had superseded (current again).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Forgotten {
    forgotten: MemoryItem,
    restored: Vec<i64>,
}

/// Forget a memory item (the only delete); returns it as it was.
#[utoipa::path(delete, path = "/loom/v1/memory/items/{id}", params(ItemPath),
    responses((status = 200, body = Forgotten), (status = 503, body = ErrorBody), schema::Errors))]
pub(crate) async fn forget_item(
    State(state): State<Arc<AppState>>,
    Caller(p): Caller,
    Path(raw): Path<String>,
) -> Result<Response> {
    let id = item_id(&raw)?;
    let memory = memory(&state)?;
    let v = state
        .blocking("forgetting a memory item", move |_| {
            owned_item(&p, memory.as_ref(), id)?;
            let gone = memory.forget(id).map_err(api_error)?;
            Ok(Forgotten {
                forgotten: MemoryItem::of(&p, &gone.item, None),
                restored: gone.restored,
            })
        })
        .await?;
    Ok(Json(v).into_response())
}

/// The knowledge base's scope of the caller: its tenant's, or the local user's.
fn kb_scope(p: &Principal) -> String {
    p.tenant
        .as_ref()
        .map_or_else(String::new, |t| t.as_str().to_owned())
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = KbFile)]
pub(crate) struct KbFileRequest {
    #[schema(schema_with = schema::text)]
    path: String,
    content: String,
}

/// A file added.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct KbAdded {
    path: String,
    /// How it was chunked.
    #[schema(pattern = "^(markdown|code|json|text)$")]
    kind: &'static str,
    chunks: usize,
    /// Chunks of an earlier version that were replaced.
    replaced: usize,
    /// The same content was already stored: nothing changed.
    unchanged: bool,
}

/// Add (or replace) a file of the knowledge base, chunked on its structure.
#[utoipa::path(post, path = "/loom/v1/kb/files", request_body = KbFileRequest,
    responses((status = 200, body = KbAdded), (status = 503, body = ErrorBody), schema::Errors))]
pub(crate) async fn kb_add(
    State(state): State<Arc<AppState>>,
    Caller(p): Caller,
    body: Bytes,
) -> Result<Response> {
    let req: KbFileRequest = parse_json(&body)?;
    if req.path.trim().is_empty() {
        return Err(ApiError::invalid_field("path", "name the file"));
    }
    if req.content.len() > MAX_KB_FILE_BYTES {
        return Err(ApiError::invalid_field(
            "content",
            format!("at most {MAX_KB_FILE_BYTES} bytes per file"),
        ));
    }
    let memory = memory(&state)?;
    let scope = kb_scope(&p);
    let added = state
        .blocking("adding to the knowledge base", move |_| {
            memory
                .kb_add(&scope, &req.path, &req.content, now_ms())
                .map_err(api_error)
        })
        .await?;
    Ok(Json(KbAdded {
        path: added.path,
        kind: added.kind.as_str(),
        chunks: added.chunks,
        replaced: added.replaced,
        unchanged: added.unchanged,
    })
    .into_response())
}

/// A file of the knowledge base.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct KbFileInfo {
    path: String,
    kind: String,
    chunks: usize,
    tokens: u64,
    added_ms: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct KbFileList {
    files: Vec<KbFileInfo>,
}

/// The knowledge base's files.
#[utoipa::path(get, path = "/loom/v1/kb/files",
    responses((status = 200, body = KbFileList), (status = 503, body = ErrorBody), schema::Errors))]
pub(crate) async fn kb_list(
    State(state): State<Arc<AppState>>,
    Caller(p): Caller,
) -> Result<Response> {
    let memory = memory(&state)?;
    let scope = kb_scope(&p);
    let files = state
        .blocking("listing the knowledge base", move |_| {
            memory.kb_list(&scope).map_err(api_error)
        })
        .await?;
    let files = files
        .into_iter()
        .map(|f| KbFileInfo {
            path: f.path,
            kind: f.kind,
            chunks: f.chunks,
            tokens: f.tokens,
            added_ms: f.added_ms,
        })
        .collect();
    Ok(Json(KbFileList { files }).into_response())
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = KbRemove)]
pub(crate) struct KbRemoveRequest {
    #[schema(schema_with = schema::text)]
    path: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct KbRemoved {
    /// The chunks removed.
    removed: usize,
}

/// Remove a file of the knowledge base.
#[utoipa::path(post, path = "/loom/v1/kb/remove", request_body = KbRemoveRequest,
    responses((status = 200, body = KbRemoved), (status = 503, body = ErrorBody), schema::Errors))]
pub(crate) async fn kb_remove(
    State(state): State<Arc<AppState>>,
    Caller(p): Caller,
    body: Bytes,
) -> Result<Response> {
    let req: KbRemoveRequest = parse_json(&body)?;
    let memory = memory(&state)?;
    let scope = kb_scope(&p);
    let chunks = state
        .blocking("removing from the knowledge base", move |_| {
            memory.kb_remove(&scope, &req.path).map_err(|e| match e {
                MemoryError::InvalidInput { reason, .. } => ApiError::not_found(reason),
                other => api_error(other),
            })
        })
        .await?;
    Ok(Json(KbRemoved { removed: chunks }).into_response())
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = KbSearch)]
pub(crate) struct KbSearchRequest {
    query: String,
    /// Tokens (default 1,000).
    #[schema(schema_with = schema::search_budget_or_null)]
    budget: Option<u64>,
    #[schema(schema_with = schema::count_or_null)]
    limit: Option<usize>,
}

/// A chunk found.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct KbHit {
    path: String,
    /// First line, 1-based.
    from_line: u32,
    /// Last line, inclusive.
    to_line: u32,
    /// The section heading or JSON key, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    heading: Option<String>,
    text: String,
    tokens: u64,
    score: f64,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct KbHits {
    hits: Vec<KbHit>,
}

/// Search the knowledge base within a token budget.
#[utoipa::path(post, path = "/loom/v1/kb/search", request_body = KbSearchRequest,
    responses((status = 200, body = KbHits), (status = 503, body = ErrorBody), schema::Errors))]
pub(crate) async fn kb_search(
    State(state): State<Arc<AppState>>,
    Caller(p): Caller,
    body: Bytes,
) -> Result<Response> {
    let req: KbSearchRequest = parse_json(&body)?;
    let budget = req.budget.unwrap_or(DEFAULT_BUDGET);
    if budget == 0 || budget > MAX_BUDGET {
        return Err(ApiError::invalid_field(
            "budget",
            format!("expected 1..={MAX_BUDGET} tokens, not {budget}"),
        ));
    }
    let memory = memory(&state)?;
    let scope = kb_scope(&p);
    let limit = req.limit.unwrap_or(loom_memory::DEFAULT_LIMIT);
    let hits = state
        .blocking("searching the knowledge base", move |_| {
            memory
                .kb_search(&scope, &req.query, budget, limit)
                .map_err(api_error)
        })
        .await?;
    let hits = hits
        .into_iter()
        .map(|h| KbHit {
            path: h.path,
            from_line: h.from_line,
            to_line: h.to_line,
            heading: h.heading,
            text: h.text,
            tokens: h.tokens,
            score: h.score,
        })
        .collect();
    Ok(Json(KbHits { hits }).into_response())
}
