//! The drop-in proxy: the providers' own endpoints, same wire format in and out.
//!
//! `POST /v1/chat/completions`, `/v1/responses` and `/v1/messages` are checked, logged and
//! forwarded — unchanged in `observe` mode, with the conversation rendered by Loom for the model's
//! window in `fit` mode — and their replies relayed as they arrive (see `upstream`).
//! `POST /v1/messages/count_tokens` is answered locally; `GET /v1/models` and
//! `POST /v1/responses/compact` are forwarded.
//!
//! Headers Loom reads: `X-Loom-Session` (the conversation; derived from the key and the
//! conversation's opening when absent), `X-Loom-Mode` (`fit` or `observe`), `X-Loom-Budget`
//! (input tokens). Headers Loom adds to the reply: `X-Loom-Session`, `X-Loom-Mode`,
//! `X-Loom-Call` (the receipt's model call), `X-Loom-Diverged` (the session this call's history
//! departed from, when it started a new one) and `X-Loom-Warning`. Errors are in the provider's
//! own shape, so SDKs raise their usual exceptions.

mod fit;
pub(crate) mod ingest;
mod recall;
mod splice;
pub(crate) mod sync;
mod upstream;

pub use upstream::assistant_event;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use loom_core::render::ToolSpec;
use loom_core::Api;
use loom_core::{AgentId, SessionId};
use loom_provider::client::{credential_headers, endpoint};
use loom_store::{NewModelCall, ProxyMode, StoreError};
use loom_wire::{check_request, error_body};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::auth::Principal;
use crate::config::AuthMode;
use crate::error::ApiError;
use crate::metrics::Phase;
use crate::state::{now_ms, AppState};
use loom_session::engine::{ModelLimits, RenderSpec};
use upstream::LogTarget;

/// The proxy's routes.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/responses", post(responses))
        .route("/v1/responses/compact", post(responses_compact))
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/v1/models", get(models))
}

/// The provider API whose error shape a proxy path answers in (`None` off the proxy).
pub(crate) fn api_of_path(path: &str) -> Option<Api> {
    if path.starts_with("/v1/messages") {
        Some(Api::Anthropic)
    } else if path.starts_with("/v1/responses") {
        Some(Api::OpenaiResponses)
    } else if path.starts_with("/v1/") {
        Some(Api::OpenaiChat)
    } else {
        None
    }
}

/// A Loom error in the provider's shape.
pub(crate) fn provider_error(api: Api, e: &ApiError) -> Response {
    // Anthropic's shape has no slot for the field and puts it in front of the message; a message
    // that already names it is not given it twice.
    let field = e
        .field
        .as_deref()
        .filter(|f| !(api == Api::Anthropic && e.message.starts_with(&format!("{f}: "))));
    let body = error_body(api, e.status.as_u16(), &e.message, field);
    (e.status, Json(body)).into_response()
}

async fn chat(state: State<Arc<AppState>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    proxy(state.0, Api::OpenaiChat, uri, headers, body).await
}

async fn responses(
    state: State<Arc<AppState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    proxy(state.0, Api::OpenaiResponses, uri, headers, body).await
}

async fn messages(
    state: State<Arc<AppState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    proxy(state.0, Api::Anthropic, uri, headers, body).await
}

/// What one proxied call decided before it goes upstream.
struct Prepared {
    body: Bytes,
    model: String,
    mode: ProxyMode,
    target: LogTarget,
    reply_headers: HeaderMap,
    /// Set when the request offers `loom_recall`, which Loom answers itself.
    recall: Option<recall::Rounds>,
}

async fn proxy(
    state: Arc<AppState>,
    api: Api,
    uri: Uri,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let started = Instant::now();
    let deadline = started + state.config.limits.request_timeout;
    let principal = match state.authenticate(&headers).await {
        Ok(p) => p,
        Err(e) => return provider_error(api, &e),
    };
    // A slot first: a request turned away for want of one has written nothing.
    let permit = match tokio::time::timeout(
        state.config.limits.queue_timeout,
        state.upstream_slots.acquire(),
    )
    .await
    {
        Ok(Ok(permit)) => permit,
        _ => {
            return provider_error(
                api,
                &ApiError::unavailable("too many upstream calls in flight; retry shortly"),
            )
        }
    };
    let prepared = match prepare(&state, api, &principal, &headers, raw).await {
        Ok(p) => p,
        Err(e) => return provider_error(api, &e),
    };
    state.metrics.overhead(route(api), started.elapsed());
    let rounds = prepared.recall.map(|mut r| {
        r.principal = Some(principal.clone());
        r.headers = headers.clone();
        r.query = uri.query().map(str::to_owned);
        r
    });
    let request = match upstream_request(
        &state,
        api,
        &principal,
        &headers,
        uri.query(),
        prepared.body,
    ) {
        Ok(r) => r,
        Err(e) => return provider_error(api, &e),
    };
    let sent = tokio::time::timeout_at(deadline.into(), request.send()).await;
    let upstream = match sent {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            let kind = if e.is_timeout() { "timeout" } else { "connect" };
            state.metrics.upstream_error(upstream::provider(api), kind);
            tracing::warn!("upstream {}: {e}", upstream::provider(api));
            let status = if e.is_timeout() {
                StatusCode::GATEWAY_TIMEOUT
            } else {
                StatusCode::BAD_GATEWAY
            };
            let mut r = provider_error(
                api,
                &ApiError::upstream(
                    status,
                    format!("the upstream could not be reached: {}", without_url(&e)),
                ),
            );
            r.headers_mut().extend(prepared.reply_headers);
            return r;
        }
        Err(_) => {
            state
                .metrics
                .upstream_error(upstream::provider(api), "timeout");
            return provider_error(
                api,
                &ApiError::upstream(
                    StatusCode::GATEWAY_TIMEOUT,
                    "the upstream did not answer in time",
                ),
            );
        }
    };
    let mut extra = prepared.reply_headers;
    set(&mut extra, "x-loom-mode", prepared.mode.as_str());
    let response = upstream::relay(
        Arc::clone(&state),
        api,
        prepared.model,
        upstream,
        extra,
        prepared.target,
        deadline,
        rounds,
    )
    .await;
    drop(permit);
    response
}

/// A reqwest error's text without the URL (which may name a private upstream).
fn without_url(e: &reqwest::Error) -> String {
    let text = e.to_string();
    match e.url() {
        Some(url) => text.replace(url.as_str(), "upstream"),
        None => text,
    }
}

pub(crate) fn route(api: Api) -> &'static str {
    match api {
        Api::OpenaiChat => "/v1/chat/completions",
        Api::OpenaiResponses => "/v1/responses",
        Api::Anthropic => "/v1/messages",
    }
}

fn set(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(HeaderName::from_static(name), v);
    }
}

/// Checks the request, syncs its history into the log, and renders it in `fit` mode.
async fn prepare(
    state: &Arc<AppState>,
    api: Api,
    principal: &Principal,
    headers: &HeaderMap,
    raw: Bytes,
) -> Result<Prepared, ApiError> {
    loom_headers_are_text(headers)?;
    let split = Instant::now();
    let body = Arc::new(ingest::RequestBody::parse(api, raw)?);
    state.metrics.phase(Phase::Split, split.elapsed());
    let client = &body.fields;
    let model = body.model().to_owned();
    let mut warnings: Vec<String> = Vec::new();
    let mut mode = match header(headers, "x-loom-mode") {
        Some(text) => text.parse::<ProxyMode>().map_err(|_| {
            ApiError::invalid_field("X-Loom-Mode", format!("`{text}`: expected fit or observe"))
        })?,
        None => principal.mode.unwrap_or(state.config.default_mode),
    };
    let budget = match header(headers, "x-loom-budget") {
        Some(text) => Some(text.parse::<u64>().ok().filter(|b| *b > 0).ok_or_else(|| {
            ApiError::invalid_field(
                "X-Loom-Budget",
                format!("`{text}`: expected a positive number of tokens"),
            )
        })?),
        None => state.config.default_budget,
    };
    if api == Api::OpenaiResponses
        && (client.contains_key("previous_response_id") || client.contains_key("conversation"))
        && mode == ProxyMode::Fit
    {
        mode = ProxyMode::Observe;
        warnings.push(
            "the request relies on server-side state (previous_response_id or conversation): \
             forwarded unfitted"
                .into(),
        );
    }
    let tools = match client.get("tools") {
        Some(list) if mode == ProxyMode::Fit => budget_tools(list),
        _ => Vec::new(),
    };
    let client_session = match header(headers, "x-loom-session") {
        Some(id) => id.to_owned(),
        None => match client_session_id(headers, client) {
            Some(id) => client_conversation(id, &body),
            None => derived_session(principal, api, &body, state).await?,
        },
    };
    let base = principal.scope(&client_session, "X-Loom-Session")?;
    let agent = match &principal.agent {
        Some(a) => a.clone(),
        None => AgentId::new(loom_session::history::DEFAULT_AGENT)
            .map_err(|e| ApiError::invalid(e.to_string()))?,
    };
    let offers_recall = mode == ProxyMode::Fit && recall::may_offer(state, client);
    let mut spec = RenderSpec {
        model: model.clone(),
        budget,
        format: loom_core::render::Format::from(api),
        tools,
        always_record: true,
        injections: Vec::new(),
        limits: limits(api, client, headers),
        recall: None,
    };
    if let Some(note) = state.engine.model_note(&model) {
        warnings.push(note);
    }
    if mode == ProxyMode::Fit {
        // An unknown model or an impossible budget is refused before anything is stored.
        state.engine.prepare(&spec)?;
    }
    if offers_recall {
        recall::count_in(state, &base, &mut spec);
    }
    let lock = state.session_locks.get(&base).lock_owned().await;
    let unread_raw = body.raw().clone();
    let unread_session = base.clone();
    let observe_receipt = json!({"observe": {"model": model, "api": route(api)}});
    let synced_body = Arc::clone(&body);
    let render_spec = spec.clone();
    let synced = state
        .blocking("syncing the conversation", move |s| {
            // The history's new events are held by the live session and written with the
            // call's receipt as one turn. A turn the store refuses because another writer moved
            // the session on meanwhile is prepared again from what the store holds.
            let mut attempt = 1;
            loop {
                let started = Instant::now();
                let synced = sync::sync(s.backend(), &base, &agent, &synced_body)?;
                s.metrics.phase(Phase::Sync, started.elapsed());
                s.metrics.history_read(synced.continued);
                tracing::debug!("{base}: {} new events", synced.appended);
                let mut live = loom_session::live::lock_live(&synced.live);
                let (outcome, receipt) = if mode == ProxyMode::Fit {
                    let started = Instant::now();
                    let counted;
                    let spec = if offers_recall && recall::past_a_point(&live) {
                        counted = recall::counted(render_spec.clone());
                        &counted
                    } else {
                        &render_spec
                    };
                    match s.engine.render(&mut live, spec) {
                        Ok((outcome, receipt)) => {
                            s.metrics.phase(Phase::Render, started.elapsed());
                            (Some(outcome), receipt)
                        }
                        Err(e) => {
                            // The one 4xx after which something is stored (docs/serve.md,
                            // "Errors"): the history, so that the session shows what could
                            // not be fitted.
                            live.commit(s.backend(), None, None)?;
                            return Err(e
                                .context("not forwarded (the history is logged in the session)")
                                .into());
                        }
                    }
                } else {
                    let receipt = NewModelCall {
                        session: live.id().clone(),
                        at_seq: live.last_seq(),
                        created_ms: now_ms(),
                        receipt: observe_receipt.clone(),
                    };
                    (None, Some(receipt))
                };
                let started = Instant::now();
                match live.commit(s.backend(), receipt.as_ref(), None) {
                    Ok(call) => {
                        s.metrics.phase(Phase::Record, started.elapsed());
                        let session = live.id().clone();
                        drop(live);
                        let stubs = outcome.as_ref().is_some_and(|o| !whole(&o.receipt));
                        if let (true, Some(loom_core::render::RecallRefs::Files { dir })) =
                            (stubs, &render_spec.recall)
                        {
                            // The stubs name these files: they exist before the model reads them.
                            // (A whole render names none: the client's own bytes go.)
                            if let Err(e) = crate::recall_files::write_outputs(
                                s.store.as_ref(),
                                s.blobs.as_ref(),
                                &s.engine.reduce,
                                &session,
                                dir,
                            ) {
                                tracing::warn!("{session}: offloaded outputs not written: {e}");
                            }
                        }
                        return Ok(((session, synced.diverged_from), outcome, call, synced.live));
                    }
                    Err(StoreError::Moved { .. })
                        if attempt < loom_session::live::TURN_ATTEMPTS =>
                    {
                        tracing::debug!("{base}: the session moved on; preparing the call again");
                        attempt += 1;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        })
        .await;
    let (synced, outcome, call, live) = match synced {
        Ok(s) => s,
        // `observe` forwards what the provider would judge: a history Loom cannot read is
        // forwarded as it came, unlogged, and says so.
        Err(e)
            if mode == ProxyMode::Observe
                && e.status.is_client_error()
                && provider_accepts(api, &unread_raw) =>
        {
            state
                .metrics
                .upstream_error(upstream::provider(api), "observe_unread");
            let why = format!(
                "the history could not be read into the log ({}): forwarded unlogged",
                e.message
            );
            tracing::warn!("{unread_session}: {why}");
            let mut reply_headers = HeaderMap::new();
            set(&mut reply_headers, "x-loom-warning", &why);
            return Ok(Prepared {
                body: unread_raw,
                model,
                mode,
                target: LogTarget {
                    session: unread_session,
                    call: None,
                    live: None,
                    guard: Some(lock),
                    logged: false,
                },
                reply_headers,
                recall: None,
            });
        }
        Err(e) => return Err(e),
    };
    let (session, diverged_from) = synced;
    // The history's new events become memory off the request path.
    state.index_later(principal, &session);
    // How much more the provider counts than Loom's estimate: the budget was divided by it.
    let anchor = outcome.as_ref().and_then(|o| o.anchor);
    let anchored = |mut prepared: Prepared| {
        if let Some(factor) = anchor {
            set(
                &mut prepared.reply_headers,
                "x-loom-anchor",
                &format!("{factor:.4}"),
            );
        }
        prepared
    };
    let mut rounds = None;
    let body = match outcome {
        Some(out) => {
            let assembling = Instant::now();
            if out.receipt.compaction.is_some() {
                state.metrics.compaction_point();
            }
            if whole(&out.receipt) {
                // Nothing was left out or changed: the client's own bytes go, in its own shape
                // (its system blocks and cache breakpoints, ids, fields Loom does not model).
                state.metrics.phase(Phase::Assemble, assembling.elapsed());
                return finish(
                    state,
                    principal,
                    body.raw().clone(),
                    model,
                    mode,
                    session,
                    diverged_from,
                    call,
                    live,
                    lock,
                    warnings,
                )
                .map(anchored);
            }
            let offer = offers_recall.then_some(&spec);
            match assemble(api, &body, &live, &out.body, offer) {
                Ok(bytes) => {
                    state.metrics.phase(Phase::Assemble, assembling.elapsed());
                    if offers_recall {
                        rounds = Some(recall::Rounds::new(state, spec.clone(), Arc::clone(&body)));
                    }
                    bytes
                }
                Err(why) => {
                    tracing::error!("{session}: the fitted request failed its check ({why}); forwarding the client's own");
                    state
                        .metrics
                        .upstream_error(upstream::provider(api), "fit_check_failed");
                    warnings.push(format!(
                        "the fitted request failed Loom's check ({why}): forwarded unfitted"
                    ));
                    mode = ProxyMode::Observe;
                    body.raw().clone()
                }
            }
        }
        None => body.raw().clone(),
    };
    finish(
        state,
        principal,
        body,
        model,
        mode,
        session,
        diverged_from,
        call,
        live,
        lock,
        warnings,
    )
    .map(|mut p| {
        if let Some(r) = rounds {
            set(&mut p.reply_headers, "x-loom-recall", "offered");
            p.recall = Some(r);
        }
        p
    })
    .map(anchored)
}

/// The request to send for a render that is not the client's own: the render merged into the
/// client's request (its fields Loom does not model, its items where they are unchanged), with
/// the recall tool when `offer` gives the spec that counted it; checked against Loom's and the
/// provider's rules. The error says which check failed.
fn assemble(
    api: Api,
    body: &ingest::RequestBody,
    live: &Arc<Mutex<loom_session::live::Live>>,
    rendered: &Value,
    offer: Option<&RenderSpec>,
) -> Result<Bytes, String> {
    let mut merged = fit::merge(api, &body.fields, rendered);
    {
        let mut held = loom_session::live::lock_live(live);
        let mut items = ClientItems {
            body,
            memo: &mut held.meanings,
        };
        fit::restore(api, &body.fields, &mut items, &mut merged);
    }
    if offer.is_some() {
        recall::offer(api, &mut merged);
    }
    // The render pairs every call with its result by construction; this check is the net under
    // it. Should it ever fail, the client's own (valid) request goes instead of a malformed
    // one, and the failure is loud.
    loom_core::render::check_request(api.into(), &merged)
        .map_err(|v| v.to_string())
        .and_then(|()| check_request(api, &merged).map_err(|e| e.to_string()))?;
    serde_json::to_vec(&merged)
        .map(Bytes::from)
        .map_err(|e| format!("serialising the request: {e}"))
}

/// A request's items for [`fit::restore`], with the session's memo of what each says.
struct ClientItems<'a> {
    body: &'a ingest::RequestBody,
    memo: &'a mut HashMap<u128, u64>,
}

impl fit::Items for ClientItems<'_> {
    fn len(&self) -> usize {
        self.body.item_count()
    }

    fn meaning(&mut self, i: usize) -> Option<u64> {
        let raw = self.body.item_hash(i)?;
        if let Some(&h) = self.memo.get(&raw) {
            return Some(h);
        }
        let h = fit::meaning_hash(&self.body.item_value(i)?);
        self.memo.insert(raw, h);
        Some(h)
    }

    fn value(&self, i: usize) -> Option<Value> {
        self.body.item_value(i)
    }
}

/// Whether the provider's published rules accept `raw` (Loom's check of them): what `observe`
/// forwards even when Loom cannot read it into its log.
fn provider_accepts(api: Api, raw: &[u8]) -> bool {
    serde_json::from_slice::<Value>(raw).is_ok_and(|body| check_request(api, &body).is_ok())
}

/// Whether a render sent every event of the client's conversation as it is: nothing stubbed,
/// folded, summarised or dropped (what the client replaced itself aside), and no compaction
/// point yet.
fn whole(receipt: &loom_core::render::Receipt) -> bool {
    receipt.points == 0
        && receipt
            .lists()
            .iter()
            .all(|(name, runs)| matches!(*name, "verbatim" | "replaced") || runs.is_empty())
}

/// The prepared call: its body, the reply's headers and what the reply is logged against.
#[expect(
    clippy::too_many_arguments,
    reason = "the parts of one call, each used once"
)]
fn finish(
    state: &Arc<AppState>,
    principal: &Principal,
    body: Bytes,
    model: String,
    mode: ProxyMode,
    session: SessionId,
    diverged_from: Option<SessionId>,
    call: Option<u64>,
    live: Arc<std::sync::Mutex<loom_session::live::Live>>,
    lock: tokio::sync::OwnedMutexGuard<()>,
    warnings: Vec<String>,
) -> Result<Prepared, ApiError> {
    let mut reply_headers = HeaderMap::new();
    let shown = principal
        .unscope(&session)
        .unwrap_or(session.as_str())
        .to_owned();
    set(&mut reply_headers, "x-loom-session", &shown);
    if let Some(call) = call {
        set(&mut reply_headers, "x-loom-call", &call.to_string());
    }
    if let Some(from) = &diverged_from {
        state.metrics.diverged();
        set(
            &mut reply_headers,
            "x-loom-diverged",
            principal.unscope(from).unwrap_or(from.as_str()),
        );
    }
    if !warnings.is_empty() {
        for w in &warnings {
            tracing::warn!("{shown}: {w}");
        }
        set(&mut reply_headers, "x-loom-warning", &warnings.join("; "));
    }
    Ok(Prepared {
        body,
        model,
        mode,
        target: LogTarget {
            session,
            call,
            live: Some(live),
            guard: Some(lock),
            logged: true,
        },
        reply_headers,
        recall: None,
    })
}

/// The client's tools as the render budgets them. Tools go upstream exactly as the client sent
/// them; here they are only counted. A tool Loom does not model (Codex's `namespace` tools, a
/// provider's built-in `web_search`, a kind added later) is counted as the JSON it is.
fn budget_tools(list: &Value) -> Vec<ToolSpec> {
    if let Ok(tools) = ToolSpec::parse_list(list) {
        return tools;
    }
    let Some(list) = list.as_array() else {
        return Vec::new();
    };
    list.iter()
        .enumerate()
        .map(
            |(i, entry)| match ToolSpec::parse_list(&Value::Array(vec![entry.clone()])) {
                Ok(mut one) if one.len() == 1 => one.remove(0),
                _ => ToolSpec {
                    name: format!(
                        "{}_{i}",
                        entry.get("type").and_then(Value::as_str).unwrap_or("tool")
                    ),
                    description: String::new(),
                    parameters: entry.clone(),
                },
            },
        )
        .collect()
}

/// The window Anthropic's 1M-context beta gives.
const ONE_MILLION: u64 = 1_000_000;

/// What the request says of its model's limits: the reply it asks for (its reserve) and a
/// larger window when it opts into one.
fn limits(api: Api, client: &serde_json::Map<String, Value>, headers: &HeaderMap) -> ModelLimits {
    let asked = |key: &str| client.get(key).and_then(Value::as_u64).filter(|n| *n > 0);
    let reserve = match api {
        Api::Anthropic => asked("max_tokens"),
        Api::OpenaiChat => asked("max_completion_tokens").or_else(|| asked("max_tokens")),
        Api::OpenaiResponses => asked("max_output_tokens"),
    };
    let one_million = api == Api::Anthropic
        && headers
            .get_all("anthropic-beta")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|beta| beta.trim().starts_with("context-1m"));
    ModelLimits {
        reserve,
        window: one_million.then_some(ONE_MILLION),
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .map(str::trim)
}

/// Refuses an `X-Loom-*` header that is not UTF-8 text: ignoring it would log the call in a
/// session (or a mode) the client did not ask for.
fn loom_headers_are_text(headers: &HeaderMap) -> Result<(), ApiError> {
    for (name, value) in headers {
        let name = name.as_str();
        if name.starts_with("x-loom-") && std::str::from_utf8(value.as_bytes()).is_err() {
            return Err(ApiError::invalid_field(
                shown_header(name),
                "is not UTF-8 text",
            ));
        }
    }
    Ok(())
}

/// A header's name as the documentation writes it (`X-Loom-Session`).
fn shown_header(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |c| {
                c.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// Headers in which clients name their own session: Claude Code, opencode, Codex (`session-id`,
/// and `session_id` in older versions).
const CLIENT_SESSION_HEADERS: [&str; 4] = [
    "x-claude-code-session-id",
    "x-session-id",
    "session-id",
    "session_id",
];

/// The session id a client gives its conversation itself, in a header or in the body's
/// `client_metadata.session_id` (Codex), prefixed with where it came from so that ids of
/// different clients never meet. Each run of a client has its own, so parallel runs of one task
/// are separate sessions.
fn client_session_id(
    headers: &HeaderMap,
    client: &serde_json::Map<String, Value>,
) -> Option<String> {
    let valid = |id: &str| {
        let id = id.trim();
        (!id.is_empty() && id.len() <= 200 && !id.chars().any(char::is_control))
            .then(|| id.to_owned())
    };
    for name in CLIENT_SESSION_HEADERS {
        if let Some(id) = header(headers, name).and_then(valid) {
            return Some(format!("client-{id}"));
        }
    }
    client
        .get("client_metadata")
        .and_then(|m| m.get("session_id"))
        .and_then(Value::as_str)
        .and_then(valid)
        .map(|id| format!("client-{id}"))
}

/// A stable session id for a conversation that names none: the key and the conversation's
/// opening (its system prompt and first user message), hashed.
/// The session of one of a client's conversations under its own session id: the id and the
/// conversation's system prompt, hashed. A client sends side requests under the same id (a
/// title, a summary, a sub-agent), each with a system prompt of its own: each is its own
/// session, and none is taken for a departure of the main conversation.
///
/// The system prompt is hashed by what it says ([`fit::meaning_hash`]: cache breakpoints, ids
/// and the string-or-blocks form aside), from the body's own fields and leading items, so this
/// reads nothing but the body and costs no import on a client's every call.
fn client_conversation(id: String, body: &ingest::RequestBody) -> String {
    let mut h = Sha256::new();
    for key in ["system", "instructions"] {
        if let Some(v) = body.fields.get(key).filter(|v| !v.is_null()) {
            h.update(fit::meaning_hash(v).to_le_bytes());
        }
    }
    for i in 0..body.item_count() {
        let Some(item) = body.item_value(i) else {
            break;
        };
        // The leading system and developer items (Codex's `additional_tools` among them).
        if !matches!(
            item.get("role").and_then(Value::as_str),
            Some("system" | "developer")
        ) {
            break;
        }
        h.update(fit::meaning_hash(&item).to_le_bytes());
    }
    format!("{id}.{}", &hex::encode(h.finalize())[..8])
}

async fn derived_session(
    principal: &Principal,
    api: Api,
    body: &Arc<ingest::RequestBody>,
    state: &Arc<AppState>,
) -> Result<String, ApiError> {
    let body = Arc::clone(body);
    let opening = state
        .blocking("reading the conversation", move |s| {
            let opening = body.opening(s.backend())?;
            serde_json::to_vec(&opening).map_err(|_| ApiError::internal("hashing the conversation"))
        })
        .await?;
    let mut h = Sha256::new();
    h.update(principal.key_id.as_deref().unwrap_or("local").as_bytes());
    h.update([0]);
    h.update(route(api).as_bytes());
    h.update([0]);
    h.update(&opening);
    Ok(format!("auto-{}", &hex::encode(h.finalize())[..16]))
}

/// The upstream request: URL, credentials and the client's provider headers. The URL and the
/// credential headers follow the provider client's rules (`loom_provider::client`), so the proxy
/// and the agent runtime call a provider the same way.
fn upstream_request(
    state: &AppState,
    api: Api,
    principal: &Principal,
    headers: &HeaderMap,
    query: Option<&str>,
    body: Bytes,
) -> Result<reqwest::RequestBuilder, ApiError> {
    let base = match api {
        Api::OpenaiChat | Api::OpenaiResponses => &state.config.openai,
        Api::Anthropic => &state.config.anthropic,
    };
    // The config checked the URL at start-up; this only fails if that check and the client's
    // rules ever disagree.
    let mut url = endpoint(api, &base.base_url)
        .map_err(|e| ApiError::internal(format!("building the upstream URL: {e}")))?;
    // The client's query (Anthropic's `?beta=true`) goes on as it came.
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        url.set_query(Some(q));
    }
    let mut req = state
        .http
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    for (name, value) in headers {
        if upstream::forwarded(name.as_str()) {
            req = req.header(name.as_str(), value.as_bytes());
        }
    }
    credentials(state, api, principal, headers, req)
}

/// Puts the right credentials on an upstream request: the client's own under `--auth none`, the
/// tenant's or the server's under `--auth keys` (with the API's version header when the client
/// sent none of its own).
fn credentials(
    state: &AppState,
    api: Api,
    principal: &Principal,
    client_headers: &HeaderMap,
    mut req: reqwest::RequestBuilder,
) -> Result<reqwest::RequestBuilder, ApiError> {
    if state.config.auth == AuthMode::None {
        for (name, value) in &principal.forwarded {
            req = req.header(name.as_str(), value.as_bytes());
        }
        return Ok(req);
    }
    let tenant = principal
        .tenant
        .as_ref()
        .and_then(|t| state.config.tenant_keys.get(t));
    let key = match api {
        Api::OpenaiChat | Api::OpenaiResponses => tenant
            .and_then(|t| t.openai.clone())
            .or_else(|| state.config.openai.key.clone()),
        Api::Anthropic => tenant
            .and_then(|t| t.anthropic.clone())
            .or_else(|| state.config.anthropic.key.clone()),
    };
    let Some(key) = key else {
        return Ok(req);
    };
    // The error names the field, never the key.
    let mut creds = credential_headers(api, Some(&key))
        .map_err(|e| ApiError::internal(format!("sending the configured key: {e}")))?;
    if client_headers.contains_key("anthropic-version") {
        creds.remove("anthropic-version");
    }
    Ok(req.headers(creds))
}

/// `POST /v1/messages/count_tokens`, answered locally: Loom's calibrated estimate for Claude
/// models (which have no public tokenizer), exact counts for models that have one.
///
/// The estimate is anchored on what the provider reported for the conversation: when the
/// session's last call was rendered by Loom (its receipt holds Loom's estimate of what it sent)
/// and its usage is known, the estimate is scaled by the provider's count over Loom's for that
/// call, so the answer tracks the provider's own tokenizer as the conversation goes. The factor
/// used is returned in `X-Loom-Anchor`.
async fn count_tokens(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let api = Api::Anthropic;
    let principal = match state.authenticate(&headers).await {
        Ok(p) => p,
        Err(e) => return provider_error(api, &e),
    };
    let counted = (|| {
        let value: Value = serde_json::from_slice(&raw)
            .map_err(|e| ApiError::invalid(format!("the body is not valid JSON: {e}")))?;
        let model = value
            .get("model")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::invalid_field("model", "model: expected a string"))?;
        if !value.get("messages").is_some_and(Value::is_array) {
            return Err(ApiError::invalid_field(
                "messages",
                "messages: expected a list",
            ));
        }
        // The rules `/v1/messages` holds the same conversation to (pairing, duplicate ids, the
        // fields' types); the count needs no `max_tokens`, so a stand-in one is checked.
        let mut probe = value.clone();
        if let Some(map) = probe.as_object_mut() {
            map.entry("max_tokens").or_insert(Value::from(1));
        }
        check_request(api, &probe).map_err(|e| {
            ApiError::invalid_field(e.field.clone(), format!("{}: {}", e.field, e.reason))
        })?;
        let (tokenizer, _) = state.engine.model(model, "model", false)?;
        let images = state.engine.model_info(model)?.image;
        let count =
            loom_tokens::count_request(loom_core::Api::Anthropic, &value, &tokenizer, &images)
                .map_err(|e| ApiError::invalid(e.to_string()))?;
        Ok((
            count.messages + count.tool_calls + count.tools + count.images + count.overhead,
            count.exact,
        ))
    })();
    let (estimate, exact) = match counted {
        Ok(c) => c,
        Err(e) => return provider_error(api, &e),
    };
    let anchor = if exact {
        None
    } else {
        anchor(&state, &principal, &headers, &raw).await
    };
    let tokens = anchor.map_or(estimate, |f| (estimate as f64 * f).ceil() as u64);
    let mut response = Json(json!({ "input_tokens": tokens })).into_response();
    if let Some(f) = anchor {
        set(response.headers_mut(), "x-loom-anchor", &format!("{f:.4}"));
    }
    response
}

/// The provider's count over Loom's estimate for the conversation's last rendered call.
async fn anchor(
    state: &Arc<AppState>,
    principal: &Principal,
    headers: &HeaderMap,
    raw: &Bytes,
) -> Option<f64> {
    let id = match header(headers, "x-loom-session") {
        Some(id) => id.to_owned(),
        None => {
            let body = Arc::new(ingest::RequestBody::parse(Api::Anthropic, raw.clone()).ok()?);
            derived_session(principal, Api::Anthropic, &body, state)
                .await
                .ok()?
        }
    };
    let session = principal.scope(&id, "X-Loom-Session").ok()?;
    let last = state
        .blocking("reading the last call", move |s| {
            if s.store.session(&session)?.is_none() {
                return Ok(None);
            }
            Ok(s.store.last_model_call(&session)?)
        })
        .await
        .ok()??;
    loom_session::engine::reported_ratio(&last)
}

/// `GET /v1/models`, forwarded to the OpenAI upstream (to Anthropic's with its version header).
async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    // Anthropic's SDKs list models at the same path, with their version header.
    let (api, url) = if headers.contains_key("anthropic-version") {
        (
            Api::Anthropic,
            format!("{}/v1/models", state.config.anthropic.base_url),
        )
    } else {
        (
            Api::OpenaiChat,
            format!("{}/models", state.config.openai.base_url),
        )
    };
    passthrough(&state, api, url, None, headers, None).await
}

/// `POST /v1/responses/compact`, OpenAI's compaction of a conversation (Codex's remote
/// compaction), forwarded as it came: the provider compacts, and the `compaction` item it returns
/// comes back in later requests, where Loom keeps it as it came and never compacts it again.
async fn responses_compact(
    State(state): State<Arc<AppState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let url = format!("{}/responses/compact", state.config.openai.base_url);
    passthrough(
        &state,
        Api::OpenaiResponses,
        url,
        uri.query(),
        headers,
        Some(body),
    )
    .await
}

/// Forwards a request Loom neither logs nor fits (a GET without a body, or a POST with one), with
/// the client's headers and the deployment's credentials, and relays the answer.
async fn passthrough(
    state: &Arc<AppState>,
    api: Api,
    mut url: String,
    query: Option<&str>,
    headers: HeaderMap,
    body: Option<Bytes>,
) -> Response {
    let principal = match state.authenticate(&headers).await {
        Ok(p) => p,
        Err(e) => return provider_error(api, &e),
    };
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        url.push('?');
        url.push_str(q);
    }
    let mut req = match body {
        Some(body) => state
            .http
            .post(url)
            .header("content-type", "application/json")
            .body(body),
        None => state.http.get(url),
    };
    for (name, value) in &headers {
        if upstream::forwarded(name.as_str()) {
            req = req.header(name.as_str(), value.as_bytes());
        }
    }
    let req = match credentials(state, api, &principal, &headers, req) {
        Ok(r) => r,
        Err(e) => return provider_error(api, &e),
    };
    match tokio::time::timeout(state.config.limits.request_timeout, req.send()).await {
        Ok(Ok(r)) => {
            let status =
                StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let content_type = r.headers().get("content-type").cloned();
            match r.bytes().await {
                Ok(body) => {
                    let mut response = (status, body).into_response();
                    if let Some(ct) = content_type {
                        response.headers_mut().insert("content-type", ct);
                    }
                    response
                }
                Err(e) => provider_error(
                    api,
                    &ApiError::upstream(
                        StatusCode::BAD_GATEWAY,
                        format!("reading the upstream's answer: {}", without_url(&e)),
                    ),
                ),
            }
        }
        Ok(Err(e)) => {
            state
                .metrics
                .upstream_error(upstream::provider(api), "connect");
            provider_error(
                api,
                &ApiError::upstream(
                    StatusCode::BAD_GATEWAY,
                    format!("the upstream could not be reached: {}", without_url(&e)),
                ),
            )
        }
        Err(_) => provider_error(
            api,
            &ApiError::upstream(
                StatusCode::GATEWAY_TIMEOUT,
                "the upstream did not answer in time",
            ),
        ),
    }
}
