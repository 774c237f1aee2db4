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
//!
//! Where things are: the handlers here; `prepare` (the session a call belongs to, its history
//! synced into the log, the render in `fit` mode), with `ingest` and `sync` for reading a
//! client's history and `fit` for what the render keeps of the client's items; `upstream` (the
//! call and the relay); `recall` and `splice` (`loom_recall`, answered in hidden rounds, streamed
//! or not); `side` (`count_tokens`, `models`, `responses/compact`).

mod fit;
pub(crate) mod ingest;
mod prepare;
mod recall;
mod relay;
mod side;
mod splice;
pub(crate) mod sync;
mod upstream;

use prepare::*;
use side::*;
pub use upstream::assistant_event;
use upstream::{credentials, upstream_request};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use loom_core::render::ToolSpec;
use loom_core::Api;
use loom_core::{AgentId, SessionId};
use loom_store::{NewModelCall, ProxyMode, StoreError};
use loom_wire::{check_request, error_body};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::auth::Principal;
use crate::error::ApiError;
use crate::metrics::Phase;
use crate::state::{now_ms, AppState};
use loom_session::engine::{ModelLimits, RenderSpec};
use loom_telemetry::CallKind;
use upstream::LogTarget;

/// The proxy's routes: each API's own (its dialect's route), and the side endpoints.
pub fn routes() -> Router<Arc<AppState>> {
    let mut router = Router::new();
    for api in Api::ALL {
        let dialect = loom_wire::dialect(api);
        if dialect.routed_by_model() {
            // `/v1beta/models/{model}:{method}`.
            router = router.route(&format!("{}/{{target}}", dialect.route()), post(gemini));
            continue;
        }
        router = router.route(
            dialect.route(),
            post(
                move |state: State<Arc<AppState>>, uri: Uri, headers: HeaderMap, body: Bytes| {
                    proxy(state.0, api, None, uri, headers, body)
                },
            ),
        );
    }
    router
        .route("/v1/responses/compact", post(responses_compact))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/v1/models", get(models))
}

/// The provider API whose error shape a proxy path answers in (`None` off the proxy).
pub(crate) fn api_of_path(path: &str) -> Option<Api> {
    loom_wire::api_of_path(path)
}

/// A Loom error in the provider's shape.
pub(crate) fn provider_error(api: Api, e: &ApiError) -> Response {
    // Anthropic's shape has no slot for the field and puts it in front of the message; a message
    // that already names it is not given it twice.
    let field = e
        .field
        .as_deref()
        .filter(|f| !e.message.starts_with(&format!("{f}: ")));
    let body = error_body(api, e.status.as_u16(), &e.message, field);
    (e.status, Json(body)).into_response()
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
    /// What the call's span says of the render (empty when spans are not recorded).
    facts: Vec<loom_telemetry::Attribute>,
}

/// A Gemini call: `generateContent` and `streamGenerateContent` go through the proxy with the
/// model their path names; `countTokens` is forwarded as it came.
async fn gemini(
    state: State<Arc<AppState>>,
    axum::extract::Path(target): axum::extract::Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match loom_wire::gemini_target(&target) {
        Ok((_, loom_wire::GeminiMethod::CountTokens)) => {
            side::gemini_count_tokens(state.0, uri, headers, body).await
        }
        Ok((model, _)) => {
            let model = model.to_owned();
            proxy(state.0, Api::Gemini, Some(model), uri, headers, body).await
        }
        Err(reason) => provider_error(
            Api::Gemini,
            &ApiError::not_found(format!("no such method: {reason}")),
        ),
    }
}

/// A proxied call; `model` is the one the path names, for an API that names it there.
async fn proxy(
    state: Arc<AppState>,
    api: Api,
    model: Option<String>,
    uri: Uri,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let started = Instant::now();
    let started_at = SystemTime::now();
    let deadline = started + state.config.limits.request_timeout;
    let principal = match state.authenticate(&headers).await {
        Ok(p) => p,
        Err(e) => return refused(&state, api, &headers, started_at, &e),
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
            return refused(
                &state,
                api,
                &headers,
                started_at,
                &ApiError::unavailable("too many upstream calls in flight; retry shortly"),
            )
        }
    };
    let mut prepared = match prepare(&state, api, model, &principal, &headers, raw).await {
        Ok(p) => p,
        Err(e) => return refused(&state, api, &headers, started_at, &e),
    };
    state.metrics.overhead(route(api), started.elapsed());
    let span = call_span(&state, api, &headers, started_at, &mut prepared);
    let attempt = span.attempt("upstream");
    let rounds = prepared.recall.map(|mut r| {
        r.principal = Some(principal.clone());
        r.headers = headers.clone();
        r.path = uri.path().to_owned();
        r.query = uri.query().map(str::to_owned);
        r
    });
    // The body is final here: what the inspector shows as the request sent.
    if let Some(call) = prepared.target.call {
        let session = &prepared.target.session;
        let tenant = principal.tenant.as_ref();
        state
            .sent
            .keep(tenant, session, call, &prepared.body, now_ms());
    }
    let request = match upstream_request(
        &state,
        api,
        &principal,
        &headers,
        uri.path(),
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
            attempt.fail(kind);
            span.fail(kind);
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
            attempt.fail("timeout");
            span.fail("timeout");
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
    attempt.status(upstream.status().as_u16());
    let mut target = prepared.target;
    target.span = span;
    target.attempt = attempt;
    let mut extra = prepared.reply_headers;
    set(&mut extra, "x-loom-mode", prepared.mode.as_str());
    let response = relay::relay(
        Arc::clone(&state),
        api,
        prepared.model,
        upstream,
        extra,
        target,
        deadline,
        rounds,
    )
    .await;
    drop(permit);
    response
}

/// A call refused before it went upstream: its span (failed with the status Loom answered) and
/// the provider-shaped error.
fn refused(
    state: &AppState,
    api: Api,
    headers: &HeaderMap,
    started: SystemTime,
    e: &ApiError,
) -> Response {
    let span = state.telemetry.call(
        CallKind::Server,
        OPERATION,
        upstream::provider(api),
        "",
        started,
        || session_attributes(headers, None),
    );
    span.fail(e.status.as_str());
    span.set(|| {
        vec![loom_telemetry::Attribute::new(
            loom_telemetry::attr::HTTP_STATUS,
            i64::from(e.status.as_u16()),
        )]
    });
    span.end();
    provider_error(api, e)
}

/// The GenAI operation of the three APIs.
const OPERATION: &str = "chat";

/// The span of a prepared call, begun at `started`, with what the preparation found.
fn call_span(
    state: &AppState,
    api: Api,
    headers: &HeaderMap,
    started: SystemTime,
    prepared: &mut Prepared,
) -> loom_telemetry::Call {
    state.telemetry.call(
        CallKind::Server,
        OPERATION,
        upstream::provider(api),
        &prepared.model,
        started,
        || {
            let stored = prepared
                .reply_headers
                .get("x-loom-session")
                .and_then(|v| v.to_str().ok());
            let mut a = session_attributes(headers, stored);
            a.push(loom_telemetry::Attribute::new(
                loom_telemetry::attr::MODE,
                prepared.mode.as_str().to_owned(),
            ));
            if let Some(id) = prepared.target.call {
                a.push(loom_telemetry::Attribute::new(
                    loom_telemetry::attr::RECEIPT,
                    loom_telemetry::attr::n(id),
                ));
            }
            a.append(&mut prepared.facts);
            a
        },
    )
}

/// `session.id`: the conversation as the client named it (`X-Loom-Session`, or its own session
/// header), else the session Loom keeps it in (`stored`, as the reply's `X-Loom-Session` shows
/// it), which is also `loom.session`.
fn session_attributes(headers: &HeaderMap, stored: Option<&str>) -> Vec<loom_telemetry::Attribute> {
    let named = std::iter::once("x-loom-session")
        .chain(CLIENT_SESSION_HEADERS)
        .find_map(|name| header(headers, name).filter(|v| !v.is_empty()));
    let mut a = Vec::with_capacity(2);
    if let Some(id) = named.or(stored) {
        a.push(loom_telemetry::Attribute::new(
            loom_telemetry::attr::SESSION,
            id.to_owned(),
        ));
    }
    if let Some(id) = stored {
        a.push(loom_telemetry::Attribute::new(
            loom_telemetry::attr::LOOM_SESSION,
            id.to_owned(),
        ));
    }
    a
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
    loom_wire::dialect(api).route()
}

fn set(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(HeaderName::from_static(name), v);
    }
}
