//! The upstream's answer to a proxied call, relayed: as it came ([`upstream`]'s relay and
//! stream), or, when the call offers `loom_recall` and the reply calls it, answered and asked
//! again first ([`recall`] for a whole reply, [`splice`] for a stream).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use loom_core::Api;
use loom_wire::parse_reply;

use crate::state::AppState;

use super::recall::{self, Rounds};
use super::splice;
use super::upstream::{log_reply, provider, read_limited, relayed, respond, stream, LogTarget};

/// Relays the upstream's response; `extra` headers (the session, the call) are added to it.
/// With `rounds`, a reply that calls `loom_recall` is answered and asked again first.
#[expect(clippy::too_many_arguments, reason = "one relay, its parts named")]
pub(crate) async fn relay(
    state: Arc<AppState>,
    api: Api,
    model: String,
    upstream: reqwest::Response,
    extra: HeaderMap,
    mut target: LogTarget,
    deadline: Instant,
    rounds: Option<Rounds>,
) -> Response {
    let status =
        StatusCode::from_u16(upstream.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut headers = HeaderMap::new();
    for (name, value) in upstream.headers() {
        if relayed(name.as_str()) {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_str().as_bytes()),
                HeaderValue::from_bytes(value.as_bytes()),
            ) {
                headers.append(n, v);
            }
        }
    }
    headers.extend(extra);
    let is_stream = upstream
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !status.is_success() {
        target.span.fail(status.as_str());
        state
            .metrics
            .upstream_error(provider(api), &format!("status_{}", status.as_u16()));
        // The provider's own error, in its own shape, as it came.
        let body = match read_limited(upstream, deadline).await {
            Ok(b) => b,
            Err(e) => return e.into_provider_response(api),
        };
        return respond(status, headers, Body::from(body));
    }
    if is_stream {
        if let Some(rounds) = rounds {
            return splice::stream(
                state, api, model, upstream, status, headers, target, deadline, rounds,
            );
        }
        return stream(
            state, api, model, upstream, status, headers, target, deadline,
        );
    }
    let mut body = match read_limited(upstream, deadline).await {
        Ok(b) => b,
        Err(e) => {
            target.span.fail("read_failed");
            state.metrics.upstream_error(provider(api), "read_failed");
            return e.into_provider_response(api);
        }
    };
    match parse_reply(api, &body) {
        Ok(mut reply) => {
            if let Some(rounds) = rounds.filter(|_| recall::calls_recall(&reply)) {
                match recall::run(&state, api, rounds, &mut target, body, reply, deadline).await {
                    Ok((final_body, final_reply)) => {
                        body = final_body;
                        reply = final_reply;
                        headers.remove("content-length");
                        if let Some(call) = target.call {
                            if let Ok(v) = HeaderValue::from_str(&call.to_string()) {
                                headers.insert("x-loom-call", v);
                            }
                        }
                    }
                    Err(e) => {
                        target.span.fail("recall_round");
                        tracing::warn!("{}: a recall round failed: {}", target.session, e.message);
                        let mut r = super::provider_error(api, &e);
                        r.headers_mut().extend(headers);
                        return r;
                    }
                }
            }
            log_reply(&state, api, &model, target, reply).await
        }
        Err(e) => {
            target.span.fail("unreadable_reply");
            state.metrics.unlogged_reply();
            tracing::warn!(
                "{}: a reply Loom cannot read was relayed unlogged: {e}",
                target.session
            );
        }
    }
    respond(status, headers, Body::from(body))
}
