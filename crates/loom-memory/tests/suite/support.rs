//! Builders shared by the scenarios.

use loom_core::{AgentId, SessionId};
use loom_memory::{ItemKind, NewItem, Provenance, SqliteMemory, Tier};

pub(crate) fn agent(name: &str) -> AgentId {
    AgentId::new(name).unwrap()
}

pub(crate) fn session(name: &str) -> SessionId {
    SessionId::new(name).unwrap()
}

/// A user-turn item of agent `a` from `sess` at `seq`, at time `seq * 1000`.
pub(crate) fn turn(a: &str, sess: &str, seq: u64, text: &str) -> NewItem {
    NewItem {
        agent: agent(a),
        tier: Tier::L4,
        kind: ItemKind::User,
        text: text.to_owned(),
        source: Provenance {
            session: session(sess),
            from_seq: seq,
            to_seq: seq,
            ts_ms: seq as i64 * 1000,
        },
    }
}

pub(crate) fn memory() -> SqliteMemory {
    SqliteMemory::open_in_memory().unwrap()
}
