//! Calling the upstream provider (its URL, credentials and the client's provider headers) and
//! relaying its answer: bytes reach the client unchanged and as they arrive, while Loom parses
//! them into the assistant turn it logs.
//!
//! A stream is relayed chunk by chunk, except for the chunk that completes it (`[DONE]`,
//! `message_stop`, `response.completed`): that one is held until the turn and its usage are
//! durably logged, so a client that has received the whole reply can rely on it being in the
//! log, even if the server dies right after. A stream that breaks off is relayed as broken (the
//! client's SDK sees the error) and no partial turn is logged. Nothing is retried: once a byte
//! has reached the client the answer is the upstream's.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;
use loom_core::{Api, NewEvent, SessionId};
use loom_provider::client::{credential_headers, endpoint};
use loom_session::live::Live;
use loom_store::Usage;
use loom_wire::{AssistantReply, SseParser, StreamAssembler};
use tokio::sync::OwnedMutexGuard;

use crate::auth::Principal;
use crate::config::AuthMode;
use crate::error::ApiError;
use crate::state::{now_ms, AppState};
use loom_telemetry::{Attempt, Call};

/// Largest non-streaming reply read into memory.
const MAX_REPLY_BYTES: usize = 64 << 20;

/// Response headers of the upstream that are relayed to the client.
pub(super) fn relayed(name: &str) -> bool {
    name == "content-type"
        || name == "retry-after"
        || name == "request-id"
        || name == "x-request-id"
        || name.starts_with("openai-")
        || name.starts_with("anthropic-")
        || name.starts_with("x-ratelimit-")
}

/// Request headers of the client that are forwarded upstream (credentials are handled apart).
pub(crate) fn forwarded(name: &str) -> bool {
    // Hop-by-hop headers are the connection's, not the request's (RFC 9110, 7.6.1); the
    // credentials are put on by `credentials`; the body's framing and encoding are the upstream
    // request's own (a compressed reply could not be read into the log); Loom's own headers
    // are for Loom. Everything else a client sends (its version and beta headers, `x-app`,
    // `user-agent`, its own session ids) goes on as it came.
    !matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
            | "content-type"
            | "content-encoding"
            | "accept-encoding"
            | "authorization"
            | "x-api-key"
            | "x-goog-api-key"
            | "api-key"
            | "cookie"
    ) && !name.starts_with("x-loom-")
}

/// What the call is logged against.
#[derive(Debug)]
pub(crate) struct LogTarget {
    /// The session (stored id).
    pub session: SessionId,
    /// The model call recorded for this request.
    pub call: Option<u64>,
    /// The session's live state, which the reply is written through (one write, and the next
    /// call finds it held).
    pub live: Option<Arc<Mutex<Live>>>,
    /// The conversation's lock, held until the reply is logged.
    pub guard: Option<OwnedMutexGuard<()>>,
    /// Whether the reply is logged: not when the request's history could not be read (an
    /// `observe` call forwarded as it came), since the reply would answer nothing in the log.
    pub logged: bool,
    /// The call's span (inert with telemetry off): it ends when the reply is logged, or when
    /// this target is dropped without a reply.
    pub span: Call,
    /// The span of the request the upstream is answering.
    pub attempt: Attempt,
}

/// The provider's name in metrics.
pub(crate) fn provider(api: Api) -> &'static str {
    loom_wire::dialect(api).provider().as_str()
}

pub(super) fn respond(status: StatusCode, headers: HeaderMap, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// Reads a whole (bounded) body before the deadline.
pub(super) async fn read_limited(
    upstream: reqwest::Response,
    deadline: Instant,
) -> Result<Bytes, ProxyFault> {
    let mut out = Vec::new();
    let mut chunks = upstream.bytes_stream();
    loop {
        let next = tokio::time::timeout_at(deadline.into(), chunks.next()).await;
        match next {
            Err(_) => return Err(ProxyFault::Timeout),
            Ok(None) => return Ok(Bytes::from(out)),
            Ok(Some(Err(e))) => return Err(ProxyFault::Broken(e.to_string())),
            Ok(Some(Ok(chunk))) => {
                if out.len() + chunk.len() > MAX_REPLY_BYTES {
                    return Err(ProxyFault::TooLarge);
                }
                out.extend_from_slice(&chunk);
            }
        }
    }
}

/// Reads a whole (bounded) body before the deadline; the failure as the API reports it.
pub(crate) async fn read_all(
    upstream: reqwest::Response,
    deadline: Instant,
) -> Result<Bytes, ApiError> {
    read_limited(upstream, deadline)
        .await
        .map_err(ProxyFault::into_error)
}

/// An upstream failure before anything reached the client.
#[derive(Debug)]
pub(crate) enum ProxyFault {
    Timeout,
    Broken(String),
    TooLarge,
}

impl ProxyFault {
    fn into_error(self) -> ApiError {
        match self {
            Self::Timeout => ApiError::upstream(
                StatusCode::GATEWAY_TIMEOUT,
                "the upstream did not answer in time",
            ),
            Self::Broken(why) => ApiError::upstream(
                StatusCode::BAD_GATEWAY,
                format!("the upstream's reply broke off: {why}"),
            ),
            Self::TooLarge => ApiError::upstream(
                StatusCode::BAD_GATEWAY,
                "the upstream's reply is larger than Loom relays",
            ),
        }
    }

    pub(super) fn into_provider_response(self, api: Api) -> Response {
        super::provider_error(api, &self.into_error())
    }
}

#[expect(clippy::too_many_arguments, reason = "one relay, its parts named")]
pub(super) fn stream(
    state: Arc<AppState>,
    api: Api,
    model: String,
    upstream: reqwest::Response,
    status: StatusCode,
    headers: HeaderMap,
    target: LogTarget,
    deadline: Instant,
) -> Response {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(32);
    tokio::spawn(async move {
        let session = target.session.clone();
        let mut target = Some(target);
        let mut parser = SseParser::new();
        let mut assembler = Some(StreamAssembler::new(api));
        let mut chunks = upstream.bytes_stream();
        let mut parse_failed = false;
        loop {
            let chunk = match next_chunk(&state, api, &mut chunks, deadline).await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) => {
                    if let Some(t) = &target {
                        t.span.fail(stream_error(&e));
                    }
                    let _ = tx.send(Err(e)).await;
                    break;
                }
            };
            if let Some(asm) = assembler.as_mut() {
                for event in parser.push(&chunk) {
                    if let Err(e) = asm.push(&event) {
                        if !parse_failed {
                            tracing::warn!("{session}: stream not understood: {e}");
                        }
                        parse_failed = true;
                    }
                }
            }
            if assembler.as_ref().is_some_and(StreamAssembler::is_complete) {
                // Log before the client can see the end of the reply.
                if let (Some(asm), Some(target)) = (assembler.take(), target.take()) {
                    match asm.finish() {
                        Ok(reply) => log_reply(&state, api, &model, target, reply).await,
                        Err(e) => {
                            state.metrics.unlogged_reply();
                            tracing::warn!("{session}: stream not logged: {e}");
                        }
                    }
                }
            }
            if tx.send(Ok(chunk)).await.is_err() {
                // The client went away; nothing more to relay.
                break;
            }
        }
        if assembler.is_some() {
            if let Some(t) = &target {
                t.span.fail("incomplete_stream");
            }
            // The stream ended before it completed: nothing partial is logged.
            tracing::warn!("{session}: the upstream stream ended before it completed; not logged");
        }
    });
    let body = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    respond(status, headers, Body::from_stream(body))
}

/// The upstream stream's next chunk before the deadline (`None` at its end); a stream that broke
/// off or ran out of time is counted and is the error the client's stream ends with.
pub(crate) async fn next_chunk(
    state: &AppState,
    api: Api,
    chunks: &mut (impl futures_util::Stream<Item = reqwest::Result<Bytes>> + Unpin),
    deadline: Instant,
) -> Result<Option<Bytes>, std::io::Error> {
    match tokio::time::timeout_at(deadline.into(), chunks.next()).await {
        Ok(Some(Ok(chunk))) => Ok(Some(chunk)),
        Ok(None) => Ok(None),
        Ok(Some(Err(e))) => {
            state
                .metrics
                .upstream_error(provider(api), "dropped_stream");
            Err(std::io::Error::other(e.to_string()))
        }
        Err(_) => {
            state.metrics.upstream_error(provider(api), "timeout");
            Err(std::io::Error::other("the upstream stream timed out"))
        }
    }
}

/// The `error.type` of a stream that [`next_chunk`] ended with `e`.
pub(crate) fn stream_error(e: &std::io::Error) -> &'static str {
    if e.to_string().contains("timed out") {
        "timeout"
    } else {
        "dropped_stream"
    }
}

/// Appends the assistant turn and records its usage against the call; a failure is counted and
/// logged, never turned into an error for a client that already has its reply.
pub(crate) async fn log_reply(
    state: &Arc<AppState>,
    api: Api,
    model: &str,
    target: LogTarget,
    mut reply: AssistantReply,
) {
    if target.span.is_on() {
        target.span.reply(&loom_telemetry::Reply::of(&reply));
        // After hidden recall rounds the reply is recorded against the last round's call.
        if let Some(call) = target.call {
            target.span.set(|| {
                vec![loom_telemetry::Attribute::new(
                    loom_telemetry::attr::RECEIPT,
                    loom_telemetry::attr::n(call),
                )]
            });
        }
    }
    if !target.logged {
        return;
    }
    if let Some(u) = &reply.usage {
        state.metrics.tokens(
            model,
            u.input_tokens,
            u.cached_input_tokens.unwrap_or(0),
            u.output_tokens.unwrap_or(0),
        );
    }
    let LogTarget {
        session,
        call,
        live,
        guard,
        span,
        attempt,
        ..
    } = target;
    // The call's spans end when its reply is logged (a stream's, when the stream ends).
    let spans = (span, attempt);
    let items = std::mem::take(&mut reply.items);
    let event = assistant_event(api, reply.clone());
    let usage = reply.usage.map(|u| Usage {
        input_tokens: u.input_tokens,
        cached_input_tokens: u.cached_input_tokens,
        output_tokens: u.output_tokens,
        reported_ms: now_ms(),
    });
    let logged = state
        .blocking("logging a reply", move |s| {
            let report = call.zip(usage.as_ref());
            // Output items Loom does not model are read as the client will send them back.
            let mut events = match reply_events(s.backend(), &session, &items) {
                Some(events) => events,
                None => vec![event],
            };
            // Through the live session: the reply and its usage in one write. When another
            // writer moved the session on since the call was prepared, or the reply does not
            // fit the state held, the store's own append decides (the state is read again on
            // its next use).
            if let Some(live) = live {
                let mut live = loom_session::live::lock_live(&live);
                live.alias_calls(&mut events, "");
                let staged = live.stage(s.backend(), &events);
                if staged.is_ok() && live.commit(s.backend(), None, report).is_ok() {
                    return Ok(());
                }
                live.discard();
                // A write whose connection broke after it applied is refused when run again
                // (the log moved on): the log then already ends with this reply, and its usage
                // went with it.
                let latest = s.store.latest_seq(&session)?;
                let last = s.store.read(&session, latest..=latest)?;
                let ends_with = events.last().map(|e| &e.body);
                if last.last().is_some_and(|e| Some(&e.body) == ends_with) {
                    return Ok(());
                }
            }
            s.store.append_reply(&session, &events, report)?;
            Ok(())
        })
        .await;
    drop(guard);
    if let Err(e) = logged {
        state.metrics.unlogged_reply();
        spans.0.fail("unlogged_reply");
        tracing::warn!("a reply was relayed but not logged: {e}");
    }
    spans.1.end();
    spans.0.end();
}

/// The events of a Responses reply whose output holds items Loom does not model, read as a
/// client's request holding those items is read (so the next request extends the log); `None`
/// when there are none or they cannot be read.
fn reply_events(
    b: loom_session::live::Backend<'_>,
    session: &SessionId,
    items: &[serde_json::Value],
) -> Option<Vec<NewEvent>> {
    if items.is_empty() {
        return None;
    }
    let doc = serde_json::to_vec(&serde_json::json!({ "input": items })).ok()?;
    let mut opts = loom_import::ParseOptions::new(now_ms());
    opts.format = Some(Api::OpenaiResponses);
    opts.session = Some(session.clone());
    opts.keep_unknown = true;
    let mut sessions = loom_import::parse_slice("reply", "reply", &doc, &opts, b.blobs).ok()?;
    sessions.pop().map(|s| s.events).filter(|e| !e.is_empty())
}

pub use loom_session::history::assistant_event;

/// The upstream request: URL, credentials and the client's provider headers. The URL and the
/// credential headers follow the provider client's rules (`loom_provider::client`), so the proxy
/// and the agent runtime call a provider the same way.
pub(super) fn upstream_request(
    state: &AppState,
    api: Api,
    principal: &Principal,
    headers: &HeaderMap,
    path: &str,
    query: Option<&str>,
    body: Bytes,
) -> Result<reqwest::RequestBuilder, ApiError> {
    let dialect = loom_wire::dialect(api);
    let base = state.config.upstream(dialect.provider());
    // The config checked the URL at start-up; this only fails if that check and the client's
    // rules ever disagree.
    let mut url = endpoint(api, &base.base_url)
        .map_err(|e| ApiError::internal(format!("building the upstream URL: {e}")))?;
    // Gemini names the model and the method in the path, below the API's route.
    if dialect.routed_by_model() {
        let tail = path.strip_prefix(dialect.route()).unwrap_or_default();
        let full = format!("{}{tail}", url.as_str().trim_end_matches('/'));
        url = reqwest::Url::parse(&full)
            .map_err(|e| ApiError::internal(format!("building the upstream URL: {e}")))?;
    }
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
        if forwarded(name.as_str()) {
            req = req.header(name.as_str(), value.as_bytes());
        }
    }
    credentials(state, api, principal, headers, req)
}

/// Puts the right credentials on an upstream request: the client's own under `--auth none`, the
/// tenant's or the server's under `--auth keys` (with the API's version header when the client
/// sent none of its own).
pub(super) fn credentials(
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
    let provider = loom_wire::dialect(api).provider();
    let key = tenant
        .and_then(|t| t.key(provider).cloned())
        .or_else(|| state.config.upstream(provider).key.clone());
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
