//! Property test: random batches, valid and invalid, leave SQLite and memory, and PostgreSQL and
//! memory, in the same state.
//!
//! The memory backend is the reference; any difference in what is accepted, what error is given
//! or what ends up stored is a bug in one of them.

use loom_core::{NewEvent, Seq, SessionId};
use loom_store::{MemoryStore, Store};
use proptest::prelude::*;

use crate::suite::support::{
    calls, new_session, result, sid, user, PgHarness, SqliteHarness, StoreHarness,
};

const TOOLS: [&str; 2] = ["bash", "python"];

#[derive(Debug, Clone)]
enum Ev {
    User,
    /// Parallel calls, by index into a small pool of ids so that duplicates happen.
    Calls(Vec<(u8, u8)>),
    Result {
        call: u8,
        tool: u8,
        is_error: bool,
    },
}

#[derive(Debug, Clone)]
enum Op {
    Create(Vec<Ev>),
    Append(Vec<Ev>),
    Expire(u8),
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        1 => Just(Ev::User),
        2 => prop::collection::vec((0u8..6, 0u8..2), 0..3).prop_map(Ev::Calls),
        3 => (0u8..6, 0u8..2, any::<bool>())
            .prop_map(|(call, tool, is_error)| Ev::Result { call, tool, is_error }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let batch = || prop::collection::vec(ev(), 0..5);
    prop_oneof![
        1 => batch().prop_map(Op::Create),
        6 => batch().prop_map(Op::Append),
        1 => (0u8..6).prop_map(Op::Expire),
    ]
}

fn events(batch: &[Ev]) -> Vec<NewEvent> {
    let id = |i: u8| format!("c{i}");
    batch
        .iter()
        .map(|e| match e {
            Ev::User => user("u"),
            Ev::Calls(list) => {
                let named: Vec<(String, &str)> = list
                    .iter()
                    .map(|(c, t)| (id(*c), TOOLS[*t as usize]))
                    .collect();
                let refs: Vec<(&str, &str)> = named.iter().map(|(c, t)| (c.as_str(), *t)).collect();
                calls(&refs)
            }
            Ev::Result {
                call: c,
                tool,
                is_error,
            } => result(&id(*c), TOOLS[*tool as usize], *is_error),
        })
        .collect()
}

/// What an operation returned, in a form both backends must agree on exactly.
fn outcome<T: std::fmt::Debug>(r: loom_store::Result<T>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("err {e}"),
    }
}

fn apply(store: &impl Store, id: &SessionId, op: &Op) -> String {
    match op {
        Op::Create(batch) => {
            outcome(store.create_session(&new_session(id.as_str()), &events(batch)))
        }
        Op::Append(batch) => outcome(store.append(id, &events(batch))),
        Op::Expire(c) => outcome(store.expire_tool_call(id, &format!("c{c}"))),
    }
}

fn state(store: &impl Store, id: &SessionId) -> String {
    format!(
        "{:?}\n{:?}\n{}\n{}",
        store.sessions().unwrap(),
        store.tool_calls(id).ok(),
        outcome(store.latest_seq(id)),
        outcome(store.read(id, 1..=Seq::MAX)),
    )
}

/// Runs `ops` (after creating the session with `first`) on `store` and on the reference, and
/// fails on the first result or the final state that differs.
fn agree_with_memory(
    store: &impl Store,
    first: Vec<Ev>,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let memory = MemoryStore::new();
    let id = sid("s");
    // Most runs should have a session to append to; a bad first batch tests creation too.
    let ops: Vec<Op> = std::iter::once(Op::Create(first)).chain(ops).collect();
    for (i, op) in ops.iter().enumerate() {
        let expected = apply(&memory, &id, op);
        let got = apply(store, &id, op);
        prop_assert_eq!(got, expected, "operation {} ({:?}) differs", i, op);
    }
    prop_assert_eq!(state(store, &id), state(&memory, &id));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn sqlite_and_memory_agree(
        first in prop::collection::vec(ev(), 0..5),
        ops in prop::collection::vec(op(), 1..14),
    ) {
        let sqlite = SqliteHarness::open();
        agree_with_memory(sqlite.store(), first, ops)?;
    }

    #[test]
    fn postgres_and_memory_agree(
        first in prop::collection::vec(ev(), 0..5),
        ops in prop::collection::vec(op(), 1..14),
    ) {
        // Without a cluster every case skips (and says so); with one, each case gets a schema.
        if let Some(pg) = PgHarness::try_open() {
            agree_with_memory(pg.store(), first, ops)?;
        }
    }
}
