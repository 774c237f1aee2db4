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

/// A PostgreSQL memory in a fresh schema of its own, dropped with the schema.
pub(crate) struct Pg {
    pub(crate) memory: loom_memory::PgMemory,
    _schema: loom_testkit::pg::PgSchema,
}

/// A PostgreSQL memory on the test cluster, or `None` (said loudly) when there is none.
pub(crate) fn pg() -> Option<Pg> {
    let schema = loom_testkit::pg::fresh_schema()?;
    let memory = loom_memory::PgMemory::open(&schema.url).unwrap();
    Some(Pg {
        memory,
        _schema: schema,
    })
}

/// The conformance suite: each named scenario (a `fn(&dyn Memory)`) runs once on every backend,
/// as `sqlite::NAME` and `postgres::NAME`.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(&crate::suite::support::memory());
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    if let Some(pg) = crate::suite::support::pg() {
                        super::$name(&pg.memory);
                    }
                }
            )*
        }
    };
}
pub(crate) use conformance;
