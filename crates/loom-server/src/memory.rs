//! Memory in the server: each tenant's agents keyed apart, and indexing off the request path.
//!
//! Tenants name their agents freely, so two tenants may both have an agent `support`. Memory is
//! per agent, so the server keys a tenant's agent as `TENANT/agent` ([`memory_agent`]); tenant
//! names cannot hold `/`, so the keys of two tenants never meet, and one tenant's memory is
//! never searched, read or forgotten by another.
//!
//! Appends (the API's append, import and history endpoints, and the proxy's synced histories)
//! only queue their session with the [`Indexer`]; a thread of its own derives the memory items
//! (`loom_memory::index_as`, idempotent), so a request never waits for indexing.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;

use loom_core::{AgentId, SessionId};
use loom_memory::Memory;
use loom_store::{Store, TenantId};

/// The memory key of `agent` for `tenant` (`None`: the local user of `--auth none`).
pub fn memory_agent(tenant: Option<&TenantId>, agent: &AgentId) -> Option<AgentId> {
    match tenant {
        None => Some(agent.clone()),
        Some(t) => AgentId::new(format!("{t}/{agent}")).ok(),
    }
}

/// The agent as the tenant names it, when the key is the tenant's (`None` otherwise).
pub fn tenant_agent<'a>(tenant: Option<&TenantId>, key: &'a str) -> Option<&'a str> {
    match tenant {
        None => Some(key),
        Some(t) => key
            .strip_prefix(t.as_str())
            .and_then(|rest| rest.strip_prefix('/')),
    }
}

enum Msg {
    Index(SessionId, Option<TenantId>),
    Flush(Sender<()>),
}

/// Derives memory for appended sessions on a thread of its own.
#[derive(Debug)]
pub struct Indexer {
    tx: Sender<Msg>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Index(s, _) => write!(f, "Index({s})"),
            Self::Flush(_) => f.write_str("Flush"),
        }
    }
}

impl Indexer {
    /// Starts the indexing thread over `store` and `memory`; it ends when the indexer is
    /// dropped.
    pub fn start(store: Arc<dyn Store>, memory: Arc<dyn Memory>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("loom-memory-index".into())
            .spawn(move || run(store.as_ref(), memory.as_ref(), &rx))?;
        Ok(Self { tx })
    }

    /// Queues `session` (of `tenant`) for indexing; returns at once.
    pub fn enqueue(&self, session: SessionId, tenant: Option<TenantId>) {
        // A send fails only when the thread is gone, and then there is nothing to tell the
        // client: `loom memory index` rebuilds whatever was missed.
        let _ = self.tx.send(Msg::Index(session, tenant));
    }

    /// Waits until everything queued before the call is indexed.
    pub fn flush(&self) {
        let (done, wait) = mpsc::channel();
        if self.tx.send(Msg::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

fn run(store: &dyn Store, memory: &dyn Memory, rx: &Receiver<Msg>) {
    while let Ok(first) = rx.recv() {
        // What queued up meanwhile is indexed once per session.
        let mut pending: BTreeMap<SessionId, Option<TenantId>> = BTreeMap::new();
        let mut flushes = Vec::new();
        for msg in std::iter::once(first).chain(rx.try_iter()) {
            match msg {
                Msg::Index(s, t) => {
                    pending.insert(s, t);
                }
                Msg::Flush(done) => flushes.push(done),
            }
        }
        for (session, tenant) in pending {
            if let Err(e) = index_one(store, memory, &session, tenant.as_ref()) {
                tracing::warn!("indexing the memory of session {session}: {e}");
            }
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}

fn index_one(
    store: &dyn Store,
    memory: &dyn Memory,
    session: &SessionId,
    tenant: Option<&TenantId>,
) -> Result<(), String> {
    let info = store
        .session(session)
        .map_err(|e| e.to_string())?
        .ok_or("the session is gone")?;
    let agent = memory_agent(tenant, &info.agent).ok_or("the agent has no memory key")?;
    loom_memory::index_as(store, memory, session, Some(&agent)).map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_key_their_agents_apart() {
        let a = TenantId::new("acme").unwrap();
        let agent = AgentId::new("support").unwrap();
        let key = memory_agent(Some(&a), &agent).unwrap();
        assert_eq!(key.as_str(), "acme/support");
        assert_eq!(tenant_agent(Some(&a), key.as_str()), Some("support"));
        let b = TenantId::new("acme2").unwrap();
        assert_eq!(tenant_agent(Some(&b), key.as_str()), None);
        assert_eq!(memory_agent(None, &agent).unwrap(), agent);
    }
}
