//! Builders shared by the scenarios.

use std::sync::Arc;

use loom_core::{AgentId, SessionId};
use loom_memory::{Embedder, ItemKind, Memory, NewItem, Provenance, SqliteMemory, Tier};
use loom_store::Database;

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

/// A database that memories can be opened on, again and again (with an embedder or without),
/// for scenarios about what a reopened memory finds: an SQLite file in a folder of its own, or
/// a fresh PostgreSQL schema. Each [`Db::open`] goes through `loom_memory::open_with`.
pub(crate) struct Db {
    db: Database,
    _keep: Box<dyn std::any::Any>,
}

impl Db {
    /// A memory on this database, searched with `embedder`'s vectors when one is given.
    pub(crate) fn open(&self, embedder: Option<Arc<dyn Embedder>>) -> Box<dyn Memory> {
        loom_memory::open_with(&self.db, embedder).unwrap()
    }
}

/// An SQLite file in a temporary folder, removed with the [`Db`].
pub(crate) fn sqlite_db() -> Db {
    let dir = tempfile::tempdir().unwrap();
    Db {
        db: Database::Sqlite(dir.path().join("memory.db")),
        _keep: Box::new(dir),
    }
}

/// A fresh schema on the test cluster, dropped with the [`Db`]; `None` when there is none.
pub(crate) fn pg_db() -> Option<Db> {
    let schema = loom_testkit::pg::fresh_schema()?;
    Some(Db {
        db: Database::Postgres(schema.url.clone()),
        _keep: Box::new(schema),
    })
}

/// The conformance suite: each named scenario runs once on every backend, as `sqlite::NAME`
/// and `postgres::NAME`. A scenario is a `fn(&dyn Memory)`; after `db:`, a `fn(&Db)` that opens
/// its memories itself (with an embedder, or twice on the same database).
macro_rules! conformance {
    (db: $($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(&crate::suite::support::sqlite_db());
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    if let Some(db) = crate::suite::support::pg_db() {
                        super::$name(&db);
                    }
                }
            )*
        }
    };
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
