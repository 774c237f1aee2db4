//! What every handler shares: the store, the engine, the upstream client, the limits and the
//! counters; and the two things every handler does first — authenticate, and run store work off
//! the async threads.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;
use loom_store::{BlobStore, Store};
use tokio::sync::Semaphore;

use crate::auth::{self, Principal};
use crate::config::{AuthMode, ServeConfig};
use crate::error::{ApiError, Result};
use crate::metrics::Metrics;
use loom_session::engine::Engine;
use loom_session::{Backend, LiveSessions};

/// The server's shared state.
#[derive(Debug)]
pub struct AppState {
    /// The log and derived records (blocking: use [`AppState::blocking`]).
    pub store: Arc<dyn Store>,
    /// Offloaded outputs.
    pub blobs: Arc<dyn BlobStore>,
    /// Rendering.
    pub engine: Arc<Engine>,
    /// The resolved configuration.
    pub config: ServeConfig,
    /// The client for upstream calls (one connection pool).
    pub http: reqwest::Client,
    /// Counters for `/metrics`.
    pub metrics: Metrics,
    /// Spans of the proxied calls (off unless `[telemetry]` names a collector).
    pub telemetry: loom_telemetry::Telemetry,
    /// Upstream calls in flight at once.
    pub upstream_slots: Semaphore,
    /// Serialises the sync of one session's history, so two requests of one conversation never
    /// append the same new messages twice.
    pub session_locks: crate::locks::SessionLocks,
    /// Sessions whose render state is kept in memory.
    pub live: LiveSessions,
    /// Request bodies as sent, for the inspector (`[inspector] keep_requests_bytes`).
    pub sent: crate::sent::SentRequests,
    /// What the inspector has read of each session, kept between its polls.
    pub(crate) digests: crate::digest::Digests,
    /// Agents' memory and the knowledge base, beside the log (in its SQLite file or its
    /// PostgreSQL database).
    pub memory: Option<Arc<dyn loom_memory::Memory>>,
    /// Derives memory from appended sessions off the request path, when there is memory.
    pub indexer: Option<crate::memory::Indexer>,
}

impl AppState {
    /// Queues `session` (of `p`'s tenant) for indexing into memory, when the server keeps it;
    /// returns at once.
    /// What the inspector's digests read.
    pub(crate) fn digest_sources(&self) -> crate::digest::Sources<'_> {
        crate::digest::Sources {
            store: self.store.as_ref(),
            blobs: self.blobs.as_ref(),
            engine: &self.engine,
        }
    }

    pub(crate) fn index_later(&self, p: &Principal, session: &loom_core::SessionId) {
        if let Some(indexer) = &self.indexer {
            indexer.enqueue(session.clone(), p.tenant.clone());
        }
    }

    /// What live sessions read and write through.
    pub fn backend(&self) -> Backend<'_> {
        Backend {
            store: self.store.as_ref(),
            blobs: self.blobs.as_ref(),
            reduce: &self.engine.reduce,
            live: &self.live,
        }
    }

    /// Runs blocking store work on the blocking pool; a panic there is an internal error, never
    /// a dropped connection.
    pub async fn blocking<T, F>(self: &Arc<Self>, doing: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&AppState) -> Result<T> + Send + 'static,
    {
        let state = Arc::clone(self);
        match tokio::task::spawn_blocking(move || f(&state)).await {
            Ok(result) => result,
            Err(e) => {
                tracing::error!("{doing}: the worker failed: {e}");
                Err(ApiError::internal(doing))
            }
        }
    }

    /// Who is calling. Under `--auth keys` the key must be known and not revoked.
    pub async fn authenticate(self: &Arc<Self>, headers: &HeaderMap) -> Result<Principal> {
        if self.config.auth == AuthMode::None {
            return Ok(Principal::local(headers));
        }
        let key = auth::presented_key(headers).ok_or_else(|| {
            ApiError::unauthorized(
                "missing Loom key: send it as the API key (Authorization: Bearer KEY or \
                 x-api-key: KEY)",
            )
        })?;
        let hash = auth::key_hash(key);
        let found = self
            .blocking("looking up a key", move |s| {
                Ok(s.store.key_by_hash(&hash)?)
            })
            .await?;
        match found {
            Some(k) if k.revoked_ms.is_none() => Ok(Principal {
                tenant: Some(crate::caller::seen(k.key.tenant)),
                key_id: Some(k.key.id),
                agent: k.key.agent,
                mode: k.key.mode,
                forwarded: Vec::new(),
            }),
            _ => Err(auth::refused()),
        }
    }
}

/// The wall clock in UTC milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
