//! Indexing a stored session: derive its items from the log and write them to memory.

use loom_core::{AgentId, SessionId};
use loom_store::Store;
use serde::Serialize;

use crate::derive::derive;
use crate::error::{MemoryError, Result};
use crate::item::Written;
use crate::Memory;

/// What indexing one session did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IndexReport {
    /// The session indexed.
    pub session: Option<SessionId>,
    /// Items derived from its log.
    pub derived: usize,
    /// New items written.
    pub created: usize,
    /// Sources merged into an exact duplicate.
    pub duplicates: usize,
    /// Sources merged into a near duplicate.
    pub near_duplicates: usize,
    /// Sources already indexed (nothing changed).
    pub known: usize,
}

/// Derives the items of `session`'s log and writes them to `memory` under the session's agent.
///
/// Idempotent: a source already indexed is recognised and left alone, so running it again
/// after more events were appended adds only what is new, and running it on a memory that
/// lost items (a crash, a new database) rebuilds them from the log.
pub fn index(store: &dyn Store, memory: &dyn Memory, session: &SessionId) -> Result<IndexReport> {
    index_as(store, memory, session, None)
}

/// [`index`], writing the items under `agent` instead of the session's own agent when one is
/// given: a server with tenants keys each tenant's agents apart (`TENANT/agent`), so that two
/// tenants' agents of the same name never share memory.
pub fn index_as(
    store: &dyn Store,
    memory: &dyn Memory,
    session: &SessionId,
    agent: Option<&AgentId>,
) -> Result<IndexReport> {
    let log = |source| MemoryError::Log {
        session: session.clone(),
        source: Box::new(source),
    };
    let info = store
        .session(session)
        .map_err(log)?
        .ok_or_else(|| MemoryError::SessionNotFound(session.clone()))?;
    let events = store.read(session, 1..=info.event_count).map_err(log)?;
    let steps = store.steps(session).map_err(log)?;
    let summaries = store.summaries(session).map_err(log)?;
    let items = derive(
        agent.unwrap_or(&info.agent),
        session,
        &events,
        &steps,
        &summaries,
    );
    let written = memory.write(&items)?;
    let mut report = IndexReport {
        session: Some(session.clone()),
        derived: items.len(),
        ..IndexReport::default()
    };
    for w in written {
        match w {
            Written::Created(_) => report.created += 1,
            Written::Duplicate(_) => report.duplicates += 1,
            Written::NearDuplicate(_) => report.near_duplicates += 1,
            Written::Known(_) => report.known += 1,
        }
    }
    Ok(report)
}
