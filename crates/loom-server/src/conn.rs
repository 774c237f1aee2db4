//! Connections: the accept loop and the limits that keep a slow or hostile client from holding
//! the server.
//!
//! - At most `max_connections` are open at once; one past it is answered `503` (in the API's
//!   shape, with `Retry-After`) and closed, so a flood of idle sockets cannot use up the
//!   process's files while the clients already connected are served.
//! - A connection must send a request's headers within `header_timeout` of being idle (just
//!   opened, or done with its last reply), or it is closed: the slow-header and idle keep-alive
//!   timeout in one (hyper's header read timer starts when the connection goes idle).
//! - [`body_guard`]: a request whose declared `Content-Length` is over `max_body_bytes` gets its
//!   `413` at once, before a byte of the body is read; a body that does not arrive within
//!   `body_timeout` gets a `408` and the connection is closed.
//!
//! Shutdown is graceful: the listener closes, each connection finishes the request it is serving
//! (a stream to its end) and is closed, and `serve` returns when the last one has.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::error::ApiError;
use crate::state::AppState;

/// How long the accept loop waits after the listener fails (out of file descriptors): the
/// connections already open go on, and the next accept is tried after it.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `router` on `listener` under the state's limits until `shutdown` resolves, then lets
/// every connection finish its request.
pub(crate) async fn serve(
    state: Arc<AppState>,
    router: Router,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let limits = state.config.limits;
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Replies (and stream chunks) go out as they are written.
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(stream);
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout);
        match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => {
                let conn = builder.serve_connection(io, TowerToHyperService::new(router.clone()));
                let conn = graceful.watch(conn);
                let state = Arc::clone(&state);
                tokio::spawn(async move {
                    state.metrics.connection(true);
                    // A connection that breaks off (reset, timed out) ends here; there is no one
                    // left to tell.
                    let _ = conn.await;
                    state.metrics.connection(false);
                    drop(slot);
                });
            }
            Err(_) => {
                state.metrics.connection_refused();
                let max = limits.max_connections;
                builder.keep_alive(false);
                let conn = builder.serve_connection(
                    io,
                    hyper::service::service_fn(move |req: hyper::Request<_>| {
                        let path = req.uri().path().to_owned();
                        async move { Ok::<_, Infallible>(too_many_connections(&path, max)) }
                    }),
                );
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
        }
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The answer on a connection past `max_connections`, in the shape of the route asked for.
fn too_many_connections(path: &str, max: usize) -> Response {
    let e = ApiError::from_status(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("the server has {max} connections open (limits.max_connections); retry shortly"),
    );
    let mut response = match crate::proxy::api_of_path(path) {
        Some(api) => crate::proxy::provider_error(api, &e),
        None => e.into_response(),
    };
    let headers = response.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Reads a request's body before any handler runs: an early `413` for a declared length over
/// the limit, a `408` (and the connection closed) for a body that does not arrive within
/// `body_timeout`. The errors are plain text; the `observe` layer outside gives them the shape
/// of their route.
pub(crate) async fn body_guard(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let limits = &state.config.limits;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_body_bytes as u64) {
        let mut response = StatusCode::PAYLOAD_TOO_LARGE.into_response();
        // The body is not read: the connection cannot carry another request.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
    if declared == Some(0) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let read = axum::body::to_bytes(body, limits.max_body_bytes);
    let bytes = match tokio::time::timeout(limits.body_timeout, read).await {
        Ok(Ok(bytes)) => bytes,
        // Over the limit without a declared length (chunked), or the client broke off.
        Ok(Err(e)) if e.to_string().contains("length limit") => {
            return StatusCode::PAYLOAD_TOO_LARGE.into_response()
        }
        Ok(Err(e)) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("the request body could not be read: {e}"),
            )
                .into_response()
        }
        Err(_) => {
            state.metrics.body_timed_out();
            let mut response = (
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} ms (limits.body_timeout_ms)",
                    limits.body_timeout.as_millis()
                ),
            )
                .into_response();
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
