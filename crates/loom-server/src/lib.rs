//! `loom serve`: Loom in a live agent's path.
//!
//! Two faces on one port. The drop-in proxy ([`proxy`]) speaks the providers' own APIs, so an
//! agent only changes its SDK's base URL; every request is logged, fitted to the model's window
//! (`fit`) or passed through (`observe`), and every reply is relayed untouched while it is parsed
//! into the log with its usage. The HTTP API ([`api`], under `/loom/v1`) gives programs in any
//! language what the CLI gives people. Keys and tenants ([`auth`]) decide what each caller sees.
//!
//! The store stays the one blocking `Store` trait, called off the async threads
//! ([`AppState::blocking`]). Shutdown is graceful: on SIGTERM or SIGINT the listener closes,
//! in-flight requests (streams included) finish, and every write they were acknowledged for is
//! already durable.

pub mod api;
pub mod auth;
mod caller;
pub mod config;
mod conn;
mod digest;
pub mod error;
pub mod locks;
pub mod memory;
pub mod metrics;
mod openapi;
pub mod proxy;
pub mod recall_files;
pub mod sent;
pub mod state;
mod ui;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use loom_store::{BlobStore, Store};
use tokio::sync::Semaphore;

pub use config::{AuthMode, ServeArgs, ServeConfig};
pub use error::ApiError;
pub use loom_session::Engine;
pub use state::AppState;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The listener could not be bound.
    #[error("listening on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The upstream HTTP client could not be built.
    #[error("building the upstream client: {0}")]
    Client(String),
    /// The memory indexer's thread could not be started.
    #[error("starting the memory indexer: {0}")]
    Memory(String),
    /// The telemetry exporter could not be started.
    #[error(transparent)]
    Telemetry(#[from] loom_telemetry::TelemetryError),
}

/// The server's state over an opened store, without memory.
pub fn state(
    config: ServeConfig,
    store: Arc<dyn Store>,
    blobs: Arc<dyn BlobStore>,
    engine: Engine,
) -> Result<Arc<AppState>, ServeError> {
    state_with_memory(config, store, blobs, engine, None)
}

/// The server's state over an opened store and `memory` (agents' memory and the knowledge base,
/// indexed as sessions are appended to).
pub fn state_with_memory(
    config: ServeConfig,
    store: Arc<dyn Store>,
    blobs: Arc<dyn BlobStore>,
    engine: Engine,
    memory: Option<Arc<dyn loom_memory::Memory>>,
) -> Result<Arc<AppState>, ServeError> {
    let indexer = match &memory {
        Some(m) => Some(
            memory::Indexer::start(Arc::clone(&store), Arc::clone(m))
                .map_err(|e| ServeError::Memory(e.to_string()))?,
        ),
        None => None,
    };
    let http = reqwest::Client::builder()
        .connect_timeout(config.limits.upstream_connect_timeout)
        .pool_max_idle_per_host(256)
        .build()
        .map_err(|e| ServeError::Client(e.to_string()))?;
    let telemetry = match &config.telemetry.otlp_endpoint {
        Some(endpoint) => loom_telemetry::Telemetry::otlp(endpoint, "loom-serve")?,
        None => loom_telemetry::Telemetry::off(),
    };
    let live = loom_session::LiveSessions::new(config.limits.live_sessions)
        .with_byte_limit(config.limits.live_bytes);
    let keep_requests = config.inspector.keep_requests_bytes;
    Ok(Arc::new(AppState {
        store,
        blobs,
        engine: Arc::new(engine),
        upstream_slots: Semaphore::new(config.limits.max_upstream_calls),
        config,
        http,
        metrics: metrics::Metrics::default(),
        telemetry,
        session_locks: locks::SessionLocks::default(),
        live,
        sent: sent::SentRequests::new(keep_requests),
        digests: Default::default(),
        memory,
        indexer,
    }))
}

/// Every route, with the body limit and the request counters.
pub fn app(state: Arc<AppState>) -> Router {
    let limit = state.config.limits.max_body_bytes;
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .route("/openapi.json", get(openapi::serve))
        .merge(api::routes(state.config.limits.request_timeout))
        .merge(proxy::routes())
        .merge(ui::routes())
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            conn::body_guard,
        ))
        .layer(middleware::from_fn_with_state(Arc::clone(&state), observe))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Serves on `listener` until `shutdown` resolves, then lets in-flight requests finish.
pub async fn serve(
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let router = app(Arc::clone(&state));
    conn::serve(state, router, listener, shutdown).await;
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    // Healthy means the store answers.
    match state
        .blocking("checking the store", |s| {
            Ok(s.store.sessions().map(|_| ())?)
        })
        .await
    {
        Ok(()) => Json(serde_json::json!({"status": "ok"})).into_response(),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "unavailable"})),
        )
            .into_response(),
    }
}

async fn metrics_text(State(state): State<Arc<AppState>>) -> Response {
    (
        [("content-type", metrics::CONTENT_TYPE)],
        state.metrics.render(state.live.len(), state.live.bytes()),
    )
        .into_response()
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint")
}

/// Counts every request by its route and status, and times it; an error the HTTP layer answered
/// itself in plain text (a path that does not decode, a body over the limit, a wrong method) is
/// given the shape its caller expects: the provider's on the proxy, the API's elsewhere.
async fn observe(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let (response, tenant) = caller::scope(next.run(req)).await;
    let status = response.status();
    let plain = !response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/event-stream"));
    let response = if (status.is_client_error() || status.is_server_error()) && plain {
        // What the plain answer says of its connection (closed after it) and of retrying stays.
        let kept: Vec<_> = [header::CONNECTION, header::RETRY_AFTER]
            .into_iter()
            .filter_map(|name| response.headers().get(&name).cloned().map(|v| (name, v)))
            .collect();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            format!(
                "the body is larger than the limit of {} bytes",
                state.config.limits.max_body_bytes
            )
        } else {
            let bytes = axum::body::to_bytes(response.into_body(), 64 << 10)
                .await
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes).trim().to_owned();
            if text.is_empty() {
                status.canonical_reason().unwrap_or("error").to_owned()
            } else {
                text
            }
        };
        let e = ApiError::from_status(status, message);
        let mut shaped = match proxy::api_of_path(&path) {
            Some(api) => proxy::provider_error(api, &e),
            None => e.into_response(),
        };
        shaped.headers_mut().extend(kept);
        shaped
    } else {
        response
    };
    let response = if status.is_client_error() || status.is_server_error() {
        said_error(response, &method, &path, tenant.as_ref()).await
    } else {
        response
    };
    state
        .metrics
        .request(&route, status.as_u16(), started.elapsed());
    response
}

/// Largest error body read to be logged and have the caller's ids put back in its terms; a
/// larger one (an upstream's, relayed) goes as it is and is logged by its status alone.
const ERROR_BODY_READ: u64 = 64 << 10;

/// An error answer as the caller should see it and the log should keep it: the ids it names
/// as the caller's tenant names them (never `TENANT/id`), and one line on stderr at the default
/// level (4xx at `info`, 5xx at `warn`), so what a client was refused is in the server's log.
async fn said_error(
    response: Response,
    method: &axum::http::Method,
    path: &str,
    tenant: Option<&loom_store::TenantId>,
) -> Response {
    use axum::body::HttpBody;
    let status = response.status();
    let small = response
        .body()
        .size_hint()
        .exact()
        .is_some_and(|n| n <= ERROR_BODY_READ);
    let streamed = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !small || streamed {
        if status.is_server_error() {
            tracing::warn!("{method} {path}: {status}");
        } else {
            tracing::info!("{method} {path}: {status}");
        }
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, ERROR_BODY_READ as usize)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let text = match tenant {
        Some(t) => caller::unscoped(&text, t),
        None => text.into_owned(),
    };
    let shown: String = text.chars().take(400).collect();
    if status.is_server_error() {
        tracing::warn!("{method} {path}: {status}: {shown}");
    } else {
        tracing::info!("{method} {path}: {status}: {shown}");
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(text))
}
