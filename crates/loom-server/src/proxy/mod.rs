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
use loom_store::{NewModelCall, ProxyMode, StoreError};
use loom_wire::{check_request, error_body};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::auth::Principal;
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
    let response = relay::relay(
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
