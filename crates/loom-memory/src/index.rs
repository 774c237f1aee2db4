//! Indexing a stored session: derive its items from the log and write them to memory.

use loom_core::{AgentId, Seq, SessionId};
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
    index_after(store, memory, session, agent, 0).map(|(report, _)| report)
}

/// [`index_as`] for the part of the log after seq `after`, which an earlier indexing covered:
/// the events after it, the steps of results after it, and every summary (a summary may be
/// written for an old range later). Returns the report and the last seq covered, to pass as
/// `after` next time. A background indexer that follows a growing session reads what is new,
/// not the whole log again on every call.
pub fn index_after(
    store: &dyn Store,
    memory: &dyn Memory,
    session: &SessionId,
    agent: Option<&AgentId>,
    after: Seq,
) -> Result<(IndexReport, Seq)> {
    let log = |source| MemoryError::Log {
        session: session.clone(),
        source: Box::new(source),
    };
    let info = store
        .session(session)
        .map_err(log)?
        .ok_or_else(|| MemoryError::SessionNotFound(session.clone()))?;
    let last = info.event_count;
    let events = if last > after {
        store.read(session, after + 1..=last).map_err(log)?
    } else {
        Vec::new()
    };
    let steps = store.steps_after(session, after).map_err(log)?;
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
    Ok((report, last))
}
