//! The HTTP API under `/loom/v1`: everything the CLI does, for programs in any language.
//!
//! Sessions (list, create, read), appending events in Loom's JSON form, importing OpenAI Chat,
//! Anthropic Messages and OpenAI Responses histories, log reads, render (body and receipt),
//! explain, steps, recall of an offloaded output's original bytes, usage reports and receipts.
//! Every id in a path or body is the tenant's own (see `auth`); every error is an [`ApiError`].

mod body;
pub mod explain;
mod extract;
pub(crate) mod import;
pub(crate) mod inspect;
pub(crate) mod memory;
mod results;
pub(crate) mod schema;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use loom_core::render::{Format, ToolSpec};
use loom_core::{AgentId, NewEvent, SessionInfo};
use loom_store::{NewSession, Offloader, Resolution, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::auth::Principal;
use crate::error::{ApiError, ErrorBody, Result};
use crate::state::{now_ms, AppState};
pub(crate) use body::parse_json;
pub(crate) use extract::SessionPath;
use extract::{Caller, Owned};
use loom_session::engine::RenderSpec;
use schema::Appended;

pub use loom_session::history::{append_history, DEFAULT_AGENT};

/// The `/loom/v1` routes; each request ends within `timeout` (a 503 past it).
pub fn routes(timeout: std::time::Duration) -> Router<Arc<AppState>> {
    Router::new()
        .route("/loom/v1/sessions", get(list_sessions).post(create_session))
        .route(
            "/loom/v1/sessions/{id}",
            get(get_session).delete(delete_session),
        )
        .route(
            "/loom/v1/sessions/{id}/events",
            get(read_events).post(append_events),
        )
        .route("/loom/v1/import", post(import::import))
        .route("/loom/v1/sessions/{id}/history", post(import::history))
        .route("/loom/v1/sessions/{id}/render", post(render))
        .route("/loom/v1/sessions/{id}/explain", get(explain::explain))
        .route("/loom/v1/sessions/{id}/steps", get(steps))
        .route("/loom/v1/sessions/{id}/recall", get(recall))
        .route("/loom/v1/sessions/{id}/usage", post(usage))
        .route("/loom/v1/sessions/{id}/receipts", get(receipts))
        .route("/loom/v1/sessions/{id}/receipts/{call}", get(receipt))
        .route("/loom/v1/inspect/sessions", get(inspect::sessions))
        .route("/loom/v1/inspect/sessions/{id}", get(inspect::session))
        .route(
            "/loom/v1/inspect/sessions/{id}/calls/{call}",
            get(inspect::request::call),
        )
        .route("/loom/v1/inspect/usage", get(inspect::usage))
        .route("/loom/v1/memory/search", post(memory::search))
        .route("/loom/v1/memory/items", post(memory::save))
        .route(
            "/loom/v1/memory/items/{id}",
            get(memory::get_item).delete(memory::forget_item),
        )
        .route(
            "/loom/v1/kb/files",
            get(memory::kb_list).post(memory::kb_add),
        )
        .route("/loom/v1/kb/remove", post(memory::kb_remove))
        .route("/loom/v1/kb/search", post(memory::kb_search))
        .layer((
            axum::error_handling::HandleErrorLayer::new(move |_: axum::BoxError| async move {
                ApiError::unavailable(format!(
                    "the request took longer than {} s; retry",
                    timeout.as_secs()
                ))
            }),
            tower::timeout::TimeoutLayer::new(timeout),
        ))
}

/// A session as the tenant sees it: its own id, and its parent's when that is its own too.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Session {
    id: String,
    agent: String,
    parent: Option<String>,
    created_ms: i64,
    event_count: u64,
}

impl Session {
    pub(crate) fn of(p: &Principal, info: &SessionInfo) -> Self {
        Self {
            id: p.unscope(&info.id).unwrap_or(info.id.as_str()).to_owned(),
            agent: info.agent.as_str().to_owned(),
            parent: info
                .parent
                .as_ref()
                .and_then(|id| p.unscope(id))
                .map(str::to_owned),
            created_ms: info.created_ms,
            event_count: info.event_count,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SessionList {
    sessions: Vec<Session>,
}

/// List the tenant's sessions.
#[utoipa::path(get, path = "/loom/v1/sessions",
    responses((status = 200, body = SessionList), schema::Errors))]
pub(crate) async fn list_sessions(
    State(state): State<Arc<AppState>>,
    Caller(p): Caller,
) -> Result<Response> {
    let all = state
        .blocking("listing sessions", |s| Ok(s.store.sessions()?))
        .await?;
    let sessions = all
        .iter()
        .filter(|info| p.unscope(&info.id).is_some())
        .map(|info| Session::of(&p, info))
        .collect();
    Ok(Json(SessionList { sessions }).into_response())
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateSession {
    #[schema(schema_with = schema::id)]
    id: String,
    #[schema(schema_with = schema::id_or_null)]
    agent: Option<String>,
    #[schema(schema_with = schema::id_or_null)]
    parent: Option<String>,
    #[serde(default)]
    #[schema(schema_with = schema::first_events)]
    events: Vec<NewEvent>,
}

/// Create a session, optionally with its first events.
#[utoipa::path(post, path = "/loom/v1/sessions", request_body = CreateSession,
    responses((status = 201, body = Session), (status = 409, body = ErrorBody), schema::Errors))]
pub(crate) async fn create_session(
    State(state): State<Arc<AppState>>,
    Caller(p): Caller,
    body: Bytes,
) -> Result<Response> {
    let req: CreateSession = parse_json(&body)?;
    let id = p.scope(&req.id, "id")?;
    let agent = match (&req.agent, &p.agent) {
        (Some(a), _) => Principal::agent(a, "agent")?,
        (None, Some(a)) => a.clone(),
        (None, None) => {
            AgentId::new(DEFAULT_AGENT).map_err(|e| ApiError::invalid(e.to_string()))?
        }
    };
    let parent = req
        .parent
        .as_deref()
        .map(|parent| p.scope(parent, "parent"))
        .transpose()?;
    let new = NewSession {
        id,
        agent,
        parent,
        created_ms: now_ms(),
    };
    let events = req.events;
    let local = p.tenant.is_none();
    let info = state
        .blocking("creating a session", move |s| {
            results::check(&events, "events", s.blobs.as_ref(), local)?;
            if let Some(parent) = &new.parent {
                if s.store.session(parent)?.is_none() {
                    let mut e = ApiError::not_found(format!("parent session `{parent}` not found"));
                    e.field = Some("parent".into());
                    return Err(e);
                }
            }
            Ok(s.store.create_session(&new, &events)?)
        })
        .await
        .map_err(|e| e.context(format!("session `{}`", req.id)))?;
    if info.event_count > 0 {
        state.index_later(&p, &info.id);
    }
    Ok((StatusCode::CREATED, Json(Session::of(&p, &info))).into_response())
}

/// One session.
#[utoipa::path(get, path = "/loom/v1/sessions/{id}", params(SessionPath),
    responses((status = 200, body = Session), schema::Errors))]
pub(crate) async fn get_session(Owned { p, info, .. }: Owned) -> Result<Response> {
    Ok(Json(Session::of(&p, &info)).into_response())
}

/// What deleting a session removed.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Deleted {
    /// The session, as the caller names it.
    #[schema(schema_with = schema::id)]
    id: String,
    /// The events its log held.
    events: u64,
    /// The memory items only it gave, now forgotten (items other sessions gave too keep
    /// those sources).
    memory_items_forgotten: usize,
    /// Whether its folder of saved outputs (`recall = "files"`) was removed.
    files_removed: bool,
}

/// Delete a session: its log, receipts, summaries, steps and aliases, the memory only it gave,
/// and its folder of saved outputs. Blobs stay (content-addressed, possibly another session's).
/// The id may be used again, for a new log.
#[utoipa::path(delete, path = "/loom/v1/sessions/{id}", params(SessionPath),
    responses((status = 200, body = Deleted), schema::Errors))]
pub(crate) async fn delete_session(
    State(state): State<Arc<AppState>>,
    Owned { p, id, sid, info }: Owned,
) -> Result<Response> {
    // No call of the session's runs while it goes.
    let lock = state.session_locks.get(&sid);
    let _guard = lock.lock().await;
    let agent = crate::memory::memory_agent(p.tenant.as_ref(), &info.agent);
    let events = info.event_count;
    let shown = id.clone();
    let out = state
        .blocking("deleting a session", move |s| {
            loom_session::history::delete_session(s.backend(), &sid)
                .map_err(|_| ApiError::not_found(format!("session `{shown}` not found")))?;
            // The log is gone, so the indexer reads nothing more of it; what it was writing
            // lands before the session's memory is forgotten.
            if let Some(indexer) = &s.indexer {
                indexer.flush();
            }
            let memory_items_forgotten = match (&s.memory, &agent) {
                (Some(m), Some(agent)) => m
                    .forget_session(agent, &sid)
                    .map_err(|e| {
                        tracing::error!("forgetting the memory of deleted session {sid}: {e}");
                        ApiError::internal("forgetting a deleted session's memory")
                    })?
                    .len(),
                _ => 0,
            };
            let files_removed = match &s.config.recall.folder {
                Some(folder) => crate::recall_files::remove_session(folder, &sid).map_err(|e| {
                    tracing::error!("removing the files of deleted session {sid}: {e}");
                    ApiError::internal("removing a deleted session's files")
                })?,
                None => false,
            };
            Ok((memory_items_forgotten, files_removed))
        })
        .await?;
    Ok(Json(Deleted {
        id,
        events,
        memory_items_forgotten: out.0,
        files_removed: out.1,
    })
    .into_response())
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct Range {
    /// The first seq to read (default 1).
    #[param(value_type = Option<schema::SeqBound>, inline)]
    from: Option<u64>,
    /// The last seq to read (default: the last event).
    #[param(value_type = Option<schema::SeqBound>, inline)]
    to: Option<u64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventList {
    #[schema(value_type = Vec<schema::Event>)]
    events: Vec<loom_core::Event>,
}

/// Read the log (seqs from..=to).
#[utoipa::path(get, path = "/loom/v1/sessions/{id}/events", params(SessionPath, Range),
    responses((status = 200, body = EventList), schema::Errors))]
pub(crate) async fn read_events(
    State(state): State<Arc<AppState>>,
    Owned { sid, .. }: Owned,
    query: std::result::Result<Query<Range>, QueryRejection>,
) -> Result<Response> {
    let Query(range) = query.map_err(body::query_error)?;
    let from = range.from.unwrap_or(1).max(1);
    let to = range.to.unwrap_or(u64::MAX);
    let events = state
        .blocking("reading events", move |s| {
            Ok(s.store.read(&sid, from..=to)?)
        })
        .await?;
    Ok(Json(EventList { events }).into_response())
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = AppendEvents)]
pub(crate) struct Append {
    #[schema(schema_with = schema::some_new_events)]
    events: Vec<NewEvent>,
}

/// Append events in Loom's JSON form (all or nothing).
#[utoipa::path(post, path = "/loom/v1/sessions/{id}/events", params(SessionPath),
    request_body = Append, responses((status = 200, body = Appended), schema::Errors))]
pub(crate) async fn append_events(
    State(state): State<Arc<AppState>>,
    Owned { p, id, sid, .. }: Owned,
    body: Bytes,
) -> Result<Response> {
    let req: Append = parse_json(&body)?;
    if req.events.is_empty() {
        return Err(ApiError::invalid_field("events", "no events to append"));
    }
    let lock = state.session_locks.get(&sid);
    let _guard = lock.lock().await;
    let local = p.tenant.is_none();
    let index_id = sid.clone();
    let seqs = state
        .blocking("appending events", move |s| {
            results::check(&req.events, "events", s.blobs.as_ref(), local)?;
            Ok(s.store.append(&sid, &req.events)?)
        })
        .await
        .map_err(|e| e.context(format!("session `{id}`")))?;
    state.index_later(&p, &index_id);
    Ok(Json(Appended::of(&seqs)).into_response())
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RenderRequest)]
pub(crate) struct RenderBody {
    #[schema(min_length = 1)]
    model: String,
    #[schema(schema_with = schema::positive_or_null)]
    budget: Option<u64>,
    #[schema(schema_with = schema::render_format_or_null)]
    format: Option<String>,
    #[schema(value_type = Option<Vec<Object>>)]
    tools: Option<Value>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Rendered {
    /// The request, in the format asked for.
    #[schema(value_type = Object)]
    body: Value,
    #[schema(value_type = schema::Receipt)]
    receipt: loom_core::render::Receipt,
    /// The model call recorded for it, when the render was one.
    model_call: Option<u64>,
}

/// Render the next model call's request (body and receipt), recorded as a model call.
#[utoipa::path(post, path = "/loom/v1/sessions/{id}/render", params(SessionPath),
    request_body = RenderBody, responses((status = 200, body = Rendered), schema::Errors))]
pub(crate) async fn render(
    State(state): State<Arc<AppState>>,
    Owned { p, id, sid, .. }: Owned,
    body: Bytes,
) -> Result<Response> {
    let req: RenderBody = parse_json(&body)?;
    let format = match req.format.as_deref() {
        None => Format::OPENAI_CHAT,
        Some(name) => Format::parse(name).ok_or_else(|| {
            ApiError::invalid_field(
                "format",
                format!("unknown format `{name}`; expected openai-chat, openai-responses, anthropic or react"),
            )
        })?,
    };
    let tools = match &req.tools {
        None => Vec::new(),
        Some(list) => ToolSpec::parse_list(list)
            .map_err(|e| ApiError::invalid_field("tools", e.to_string()))?,
    };
    let id = id.clone();
    let spec = RenderSpec {
        model: req.model,
        budget: req.budget,
        format,
        tools,
        always_record: false,
        injections: Vec::new(),
        limits: Default::default(),
        recall: None,
    };
    let lock = state.session_locks.get(&sid);
    let _guard = lock.lock().await;
    let kept = sid.clone();
    let out = state
        .blocking("rendering", move |s| {
            s.engine
                .render_session(s.backend(), &sid, &spec)?
                .ok_or_else(|| ApiError::not_found(format!("session `{id}` not found")))
        })
        .await?;
    // The caller sends this body: the inspector shows it as the request sent.
    if let Some(call) = out.model_call {
        if let Ok(bytes) = serde_json::to_vec(&out.body) {
            let tenant = p.tenant.as_ref();
            state
                .sent
                .keep(tenant, &kept, call, &bytes.into(), now_ms());
        }
    }
    if out.receipt.compaction.is_some() && out.model_call.is_some() {
        state.metrics.compaction_point();
    }
    Ok(Json(Rendered {
        body: out.body,
        receipt: out.receipt,
        model_call: out.model_call,
    })
    .into_response())
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct StepList {
    #[schema(value_type = Vec<schema::Step>)]
    steps: Vec<loom_core::Step>,
}

/// The session's tool results as reduced steps.
#[utoipa::path(get, path = "/loom/v1/sessions/{id}/steps", params(SessionPath),
    responses((status = 200, body = StepList), schema::Errors))]
pub(crate) async fn steps(
    State(state): State<Arc<AppState>>,
    Owned { sid, .. }: Owned,
) -> Result<Response> {
    let steps = state
        .blocking("deriving steps", move |s| {
            let off = Offloader::new(s.store.as_ref(), s.blobs.as_ref(), &s.engine.reduce);
            Ok(off.steps(&sid)?)
        })
        .await?;
    Ok(Json(StepList { steps }).into_response())
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct RecallQuery {
    /// An output's alias (`outputs/shell_001.log`) or a blob's hash (`sha256:...`).
    #[serde(rename = "ref")]
    #[param(value_type = schema::Reference, inline)]
    reference: String,
}

/// The original bytes behind a reference (outputs/... or sha256:...).
#[utoipa::path(get, path = "/loom/v1/sessions/{id}/recall", params(SessionPath, RecallQuery),
    responses((status = 200, body = schema::Bytes, content_type = "application/octet-stream"),
        schema::Errors))]
pub(crate) async fn recall(
    State(state): State<Arc<AppState>>,
    Owned { sid, .. }: Owned,
    query: std::result::Result<Query<RecallQuery>, QueryRejection>,
) -> Result<Response> {
    let Query(q) = query.map_err(body::query_error)?;
    let bytes = state
        .blocking("recalling an output", move |s| {
            let off = Offloader::new(s.store.as_ref(), s.blobs.as_ref(), &s.engine.reduce);
            // Aliases are made when steps are derived.
            off.run(&sid, false)?;
            let not_here = || {
                ApiError::not_found(format!(
                    "`{}` is not an output of this session",
                    q.reference
                ))
            };
            let blob = match off.resolve(Some(&sid), &q.reference) {
                Ok(Resolution::Found(blob)) => blob,
                Ok(Resolution::Ambiguous(_)) | Err(loom_store::StoreError::BlobNotFound(_)) => {
                    return Err(not_here())
                }
                Err(e) if e.is_bad_input() => {
                    return Err(ApiError::invalid_field("ref", e.to_string()))
                }
                Err(e) => return Err(e.into()),
            };
            // A content address names bytes, not a session: it is this tenant's only when this
            // session's log or steps refer to it.
            if !loom_store::recall::refers_to(
                s.store.as_ref(),
                s.blobs.as_ref(),
                &s.engine.reduce,
                &sid,
                &blob,
            )? {
                return Err(not_here());
            }
            let mut out = Vec::new();
            off.recall(&blob, &mut out)?;
            Ok(out)
        })
        .await?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = UsageReport)]
pub(crate) struct UsageBody {
    #[schema(schema_with = schema::seq)]
    call: u64,
    #[schema(schema_with = schema::count)]
    input_tokens: u64,
    #[schema(schema_with = schema::count_or_null)]
    cached_input_tokens: Option<u64>,
    #[schema(schema_with = schema::count_or_null)]
    output_tokens: Option<u64>,
}

/// Record the usage a provider reported for a model call.
#[utoipa::path(post, path = "/loom/v1/sessions/{id}/usage", params(SessionPath),
    request_body = UsageBody,
    responses((status = 200, body = ModelCall), (status = 409, body = ErrorBody), schema::Errors))]
pub(crate) async fn usage(
    State(state): State<Arc<AppState>>,
    Owned { p, id, sid, .. }: Owned,
    body: Bytes,
) -> Result<Response> {
    let req: UsageBody = parse_json(&body)?;
    let usage = Usage {
        input_tokens: req.input_tokens,
        cached_input_tokens: req.cached_input_tokens,
        output_tokens: req.output_tokens,
        reported_ms: now_ms(),
    };
    let call = state
        .blocking("recording usage", move |s| {
            Ok(s.store.report_usage(&sid, req.call, &usage)?)
        })
        .await
        .map_err(|e| e.context(format!("session `{id}`")))?;
    Ok(Json(ModelCall::of(&p, &call)).into_response())
}

/// A recorded model call as the API shows it (the session as the tenant names it).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ModelCall {
    id: u64,
    session: String,
    at_seq: u64,
    created_ms: i64,
    /// The render's receipt; `null` for a call proxied in observe mode.
    receipt: Value,
    #[schema(value_type = schema::Usage)]
    usage: Option<Usage>,
}

impl ModelCall {
    fn of(p: &Principal, call: &loom_store::ModelCall) -> Self {
        Self {
            id: call.id,
            session: p
                .unscope(&call.call.session)
                .unwrap_or(call.call.session.as_str())
                .to_owned(),
            at_seq: call.call.at_seq,
            created_ms: call.call.created_ms,
            receipt: call.call.receipt["receipt"].clone(),
            usage: call.usage,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ModelCallList {
    receipts: Vec<ModelCall>,
}

/// Every model call's receipt and usage.
#[utoipa::path(get, path = "/loom/v1/sessions/{id}/receipts", params(SessionPath),
    responses((status = 200, body = ModelCallList), schema::Errors))]
pub(crate) async fn receipts(
    State(state): State<Arc<AppState>>,
    Owned { p, sid, .. }: Owned,
) -> Result<Response> {
    let calls = state
        .blocking("reading receipts", move |s| {
            Ok(s.store.model_calls(&sid)?)
        })
        .await?;
    let receipts = calls.iter().map(|c| ModelCall::of(&p, c)).collect();
    Ok(Json(ModelCallList { receipts }).into_response())
}

/// The path of one model call.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Read by the handler; here for the description.
pub(crate) struct CallPath {
    /// The session, as the tenant names it.
    #[param(value_type = schema::Id, inline)]
    id: String,
    /// The model call's number.
    #[param(value_type = schema::Seq, inline)]
    call: u64,
}

/// One model call's receipt and usage.
#[utoipa::path(get, path = "/loom/v1/sessions/{id}/receipts/{call}", params(CallPath),
    responses((status = 200, body = ModelCall), schema::Errors))]
pub(crate) async fn receipt(
    State(state): State<Arc<AppState>>,
    Owned { p, id, sid, .. }: Owned,
    Path((_, call)): Path<(String, String)>,
) -> Result<Response> {
    let call: u64 = call
        .parse()
        .map_err(|_| ApiError::invalid_field("call", format!("`{call}` is not a call number")))?;
    let calls = state
        .blocking("reading receipts", move |s| {
            Ok(s.store.model_calls(&sid)?)
        })
        .await?;
    let found = calls
        .iter()
        .find(|c| c.id == call)
        .ok_or_else(|| ApiError::not_found(format!("session `{id}` has no model call {call}")))?;
    Ok(Json(ModelCall::of(&p, found)).into_response())
}
