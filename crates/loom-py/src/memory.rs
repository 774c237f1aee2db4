//! Memory for the Python package: search by tier and notes, on the database's own memory (the
//! same tables `loom memory` and `loom serve` use; in RAM for a `:memory:` database).
//!
//! An embedded database appends without indexing (appends are the hot path of every turn), so a
//! search first indexes the session it names: indexing is idempotent and adds only what is new.

use std::sync::Arc;

use loom_core::AgentId;
use loom_memory::{Memory, MemoryError, NewNote, Recall, Tier};
use pyo3::PyResult;

use crate::errors::{invalid, raise, store_error};
use crate::errors::{LoomError, NotFound, SessionNotFound, Unavailable};
use crate::{json_text, now_ms, session_id, Inner};

/// A memory error as the package raises it.
pub(crate) fn memory_error(e: MemoryError) -> pyo3::PyErr {
    let message = e.to_string();
    match e {
        MemoryError::InvalidInput { field, reason } => invalid(field, reason),
        MemoryError::ItemNotFound(_) => raise::<NotFound>(message, None, None, None),
        MemoryError::SessionNotFound(_) => raise::<SessionNotFound>(message, None, None, None),
        _ => raise::<LoomError>(message, None, None, None),
    }
}

/// The database's memory, or the reason it has none.
pub(crate) fn memory(inner: &Inner) -> PyResult<&Arc<dyn Memory>> {
    inner.memory.as_ref().ok_or_else(|| {
        raise::<Unavailable>(
            "this database keeps no memory: memory needs an SQLite file or `:memory:`".into(),
            None,
            None,
            None,
        )
    })
}

/// What [`search`] is asked.
pub(crate) struct SearchArgs {
    pub(crate) query: String,
    pub(crate) agent: Option<String>,
    pub(crate) session: Option<String>,
    pub(crate) tier: Option<String>,
    pub(crate) budget: u64,
    /// `None`: as many as the budget holds ([`loom_memory::limit_for`]).
    pub(crate) limit: Option<usize>,
    pub(crate) from_ms: Option<i64>,
    pub(crate) to_ms: Option<i64>,
}

/// `{"hits": [...]}` for a search of the agent's memory (the session's agent when none is
/// named).
pub(crate) fn search(inner: &Inner, a: SearchArgs) -> PyResult<String> {
    let memory = memory(inner)?;
    let session = a.session.as_deref().map(session_id).transpose()?;
    let info = match &session {
        Some(id) => Some(
            inner
                .store
                .session(id)
                .map_err(store_error)?
                .ok_or_else(|| {
                    raise::<SessionNotFound>(format!("session `{id}` not found"), None, None, None)
                })?,
        ),
        None => None,
    };
    let agent = match (a.agent, &info) {
        (Some(name), _) => AgentId::new(name).map_err(|e| invalid("agent", e.to_string()))?,
        (None, Some(info)) => info.agent.clone(),
        (None, None) => return Err(invalid("agent", "name the agent, or a session of it")),
    };
    let tier = a
        .tier
        .as_deref()
        .map(str::parse::<Tier>)
        .transpose()
        .map_err(memory_error)?;
    if let Some(id) = &session {
        loom_memory::index(inner.store.as_ref(), memory.as_ref(), id).map_err(memory_error)?;
    }
    let hits = loom_memory::recall(
        memory.as_ref(),
        Some(inner.store.as_ref()),
        &Recall {
            query: a.query,
            agent,
            session,
            tier,
            budget: a.budget,
            limit: a.limit.unwrap_or_else(|| loom_memory::limit_for(a.budget)),
            history: false,
            from_ms: a.from_ms,
            to_ms: a.to_ms,
        },
    )
    .map_err(memory_error)?;
    let hits: Vec<serde_json::Value> = hits
        .iter()
        .map(|h| {
            let mut v = serde_json::to_value(h).unwrap_or_default();
            if h.id > 0 {
                v["id"] = serde_json::json!(h.id);
            }
            v
        })
        .collect();
    json_text(&serde_json::json!({ "hits": hits }))
}

/// Saves a note into the session's L2 for the session's agent; `{"id", "created",
/// "expires_ms"}`.
pub(crate) fn save(
    inner: &Inner,
    session: &str,
    text: String,
    ttl_seconds: Option<u64>,
    seq: Option<u64>,
) -> PyResult<String> {
    let memory = memory(inner)?;
    let id = session_id(session)?;
    let info = inner
        .store
        .session(&id)
        .map_err(store_error)?
        .ok_or_else(|| {
            raise::<SessionNotFound>(format!("session `{id}` not found"), None, None, None)
        })?;
    let seq = seq.unwrap_or(info.event_count);
    if seq > info.event_count {
        // As the HTTP API answers it: the session has no such event (404).
        return Err(raise::<NotFound>(
            format!(
                "session `{id}` has no event {seq} (it has {})",
                info.event_count
            ),
            None,
            Some("seq".into()),
            None,
        ));
    }
    let ttl_ms = match ttl_seconds {
        Some(0) => return Err(invalid("ttl_seconds", "must be at least 1")),
        Some(t) => Some(i64::try_from(t.saturating_mul(1000)).unwrap_or(i64::MAX)),
        None => None,
    };
    let saved = memory
        .save(&NewNote {
            agent: info.agent,
            text,
            session: id,
            seq,
            saved_ms: now_ms(),
            ttl_ms,
        })
        .map_err(memory_error)?;
    json_text(&saved)
}
