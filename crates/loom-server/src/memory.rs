//! Memory in the server: each tenant's agents keyed apart, and indexing off the request path.
//!
//! Tenants name their agents freely, so two tenants may both have an agent `support`. Memory is
//! per agent, so the server keys a tenant's agent as `TENANT/agent` ([`memory_agent`]); tenant
//! names cannot hold `/`, so the keys of two tenants never meet, and one tenant's memory is
//! never searched, read or forgotten by another.
//!
//! Appends (the API's append, import and history endpoints, and the proxy's synced histories)
//! only queue their session with the [`Indexer`]; a thread of its own derives the memory items
//! (`loom_memory::index_after`, idempotent), so a request never waits for indexing. Background
//! work must not slow the requests either: the indexer reads only what a session's log gained
//! since it last indexed it (the whole log once per session per process), the memory backends
//! write in short transactions, and the indexer rests after each batch for five times as long as
//! the batch took, so under load it uses at most a sixth of a core and lags, and it catches up as
//! soon as the server is idle.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// How long the indexer rests after a batch, per unit of time the batch took.
const REST_PER_WORK: u32 = 5;

/// The longest rest: indexing lags a busy server by about this much at most per batch.
const MAX_REST: Duration = Duration::from_secs(2);

/// Sessions whose indexed length is remembered; past this the memory starts over (a session
/// indexed again is only read again: every write is idempotent).
const REMEMBERED: usize = 100_000;

/// Queues a message: a session to index (once however often it came), or a flush to answer.
fn take(
    msg: Msg,
    pending: &mut BTreeMap<SessionId, Option<TenantId>>,
    flushes: &mut Vec<Sender<()>>,
) {
    match msg {
        Msg::Index(s, t) => {
            pending.insert(s, t);
        }
        Msg::Flush(done) => flushes.push(done),
    }
}

fn run(store: &dyn Store, memory: &dyn Memory, rx: &Receiver<Msg>) {
    // The length of each session's log when it was last indexed.
    let mut indexed: HashMap<SessionId, (i64, u64)> = HashMap::new();
    // What queued up is indexed once per session.
    let mut pending: BTreeMap<SessionId, Option<TenantId>> = BTreeMap::new();
    let mut flushes = Vec::new();
    let mut rest_until: Option<Instant> = None;
    loop {
        if pending.is_empty() && flushes.is_empty() {
            match rx.recv() {
                Ok(msg) => take(msg, &mut pending, &mut flushes),
                Err(_) => return,
            }
        }
        // The rest after the last batch: messages are collected; a flush ends it.
        while let Some(until) = rest_until {
            let now = Instant::now();
            if !flushes.is_empty() || now >= until {
                break;
            }
            match rx.recv_timeout(until - now) {
                Ok(msg) => take(msg, &mut pending, &mut flushes),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        for msg in rx.try_iter() {
            take(msg, &mut pending, &mut flushes);
        }
        let started = Instant::now();
        if indexed.len() > REMEMBERED {
            indexed.clear();
        }
        for (session, tenant) in std::mem::take(&mut pending) {
            if let Err(e) = index_one(store, memory, &session, tenant.as_ref(), &mut indexed) {
                tracing::warn!("indexing the memory of session {session}: {e}");
            }
        }
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
        let rest = (started.elapsed() * REST_PER_WORK).min(MAX_REST);
        rest_until = Some(Instant::now() + rest);
    }
}

fn index_one(
    store: &dyn Store,
    memory: &dyn Memory,
    session: &SessionId,
    tenant: Option<&TenantId>,
    indexed: &mut HashMap<SessionId, (i64, u64)>,
) -> Result<(), String> {
    let info = store
        .session(session)
        .map_err(|e| e.to_string())?
        .ok_or("the session is gone")?;
    // A session deleted and created again under the same id is a new log: its mark is
    // the old one's only when the creation time is the same.
    let after = match indexed.get(session) {
        Some(&(created, after)) if created == info.created_ms => after,
        _ => 0,
    };
    if after == info.event_count {
        return Ok(());
    }
    let agent = memory_agent(tenant, &info.agent).ok_or("the agent has no memory key")?;
    let (_, last) = loom_memory::index_after(store, memory, session, Some(&agent), after)
        .map_err(|e| e.to_string())?;
    indexed.insert(session.clone(), (info.created_ms, last));
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
