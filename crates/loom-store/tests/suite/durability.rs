//! Crash test: acknowledged appends survive SIGKILL, and no batch is ever half-written, on SQLite
//! and on PostgreSQL.
//!
//! The test re-runs its own binary as a writer process (selected by an environment variable),
//! which appends fixed-size batches in a loop and prints each seq range only after `append`
//! returned. The test kills it with SIGKILL mid-storm, reopens the database and checks the log
//! against everything that was acknowledged, over several rounds on the same file.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use loom_core::{EventBody, NewEvent, Seq};
use loom_store::{CallStatus, StoreError};

use crate::suite::support::{call, fresh_schema, new_session, result, sid, user};

/// Set (to the database path) only in the writer process.
const WRITER_ENV: &str = "LOOM_STORE_DURABILITY_WRITER";
/// Every batch has this many events, so a whole number of batches is a multiple of it.
const BATCH: Seq = 5;
/// The writer stops on its own after this many batches, should the test fail to kill it.
const WRITER_MAX_BATCHES: u64 = 200_000;
const ROUNDS: usize = 4;

/// The event every seq must hold: a function of the seq alone, so the checker needs no record of
/// what was sent. Each batch is a user message and two call/result pairs.
fn expected(seq: Seq) -> NewEvent {
    let mut event = match (seq - 1) % BATCH {
        0 => user(&format!("message {seq} {}", "x".repeat(900))),
        1 | 3 => call(&format!("c{seq}"), "bash"),
        _ => result(&format!("c{}", seq - 1), "bash", seq % 2 == 0),
    };
    event.ts_ms = seq as i64;
    event
}

/// Not a test: the writer process's entry point. In a normal test run the variable is unset and
/// it returns at once.
#[test]
fn durability_writer_process() {
    let Ok(db) = std::env::var(WRITER_ENV) else {
        return;
    };
    let store = loom_store::open(&db).unwrap().store;
    let id = sid("storm");
    match store.create_session(&new_session("storm"), &[]) {
        Ok(_) | Err(StoreError::SessionExists(_)) => {}
        Err(e) => panic!("creating the session: {e}"),
    }
    // Bypasses the test harness's output capture: the parent reads these lines live.
    let mut out = std::io::stdout().lock();
    for _ in 0..WRITER_MAX_BATCHES {
        let first = store.latest_seq(&id).unwrap() + 1;
        let batch: Vec<NewEvent> = (first..first + BATCH).map(expected).collect();
        let range = store.append(&id, &batch).unwrap();
        writeln!(out, "ack {} {}", range.start(), range.end()).unwrap();
        out.flush().unwrap();
    }
}

/// Runs a writer until it has acknowledged `acks` batches, kills it, and returns the last
/// acknowledged seq (from every line it printed before it died).
fn storm(db: &str, acks: usize) -> Seq {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "suite::durability::durability_writer_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WRITER_ENV, db)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut last_ack = 0;
    let mut seen = 0;
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        if let Some(ack) = parse_ack(&line.unwrap()) {
            last_ack = last_ack.max(ack);
            seen += 1;
            if seen == acks {
                break;
            }
        }
    }
    assert_eq!(seen, acks, "the writer stopped before it was killed");
    // SIGKILL on Unix: no destructor, no flush, no checkpoint runs in the writer.
    child.kill().unwrap();
    // Lines already in the pipe were printed after their commit returned: they count too.
    for line in lines {
        if let Some(ack) = parse_ack(&line.unwrap()) {
            last_ack = last_ack.max(ack);
        }
    }
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "the writer was meant to die by the signal: {status:?}"
    );
    last_ack
}

fn parse_ack(line: &str) -> Option<Seq> {
    let mut parts = line.strip_prefix("ack ")?.split(' ');
    let (start, end): (Seq, Seq) = (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?);
    assert_eq!(end + 1 - start, BATCH, "acknowledged range {start}..={end}");
    Some(end)
}

fn check(db: &str, acknowledged: Seq) {
    let store = loom_store::open(db).unwrap().store;
    let id = sid("storm");
    let latest = store.latest_seq(&id).unwrap();
    assert!(
        latest >= acknowledged,
        "lost acknowledged events: log ends at {latest}, acknowledged {acknowledged}"
    );
    // At most the one batch whose commit returned but whose line the writer never printed.
    assert!(
        latest - acknowledged <= BATCH,
        "log ends at {latest}, acknowledged only {acknowledged}"
    );
    assert_eq!(
        latest % BATCH,
        0,
        "a partial batch was written: log ends at {latest}"
    );

    let events = store.read(&id, 1..=Seq::MAX).unwrap();
    assert_eq!(
        events.len() as Seq,
        latest,
        "seqs must be contiguous 1..={latest}"
    );
    for (i, event) in events.iter().enumerate() {
        let seq = i as Seq + 1;
        let want = expected(seq);
        assert_eq!(event.seq, seq);
        assert_eq!(event.ts_ms, want.ts_ms, "seq {seq}");
        assert_eq!(event.body, want.body, "seq {seq} holds the wrong body");
    }
    // The ledger committed with the events: every call made is resolved by its own result.
    let calls = store.tool_calls(&id).unwrap();
    assert_eq!(calls.len() as Seq, 2 * latest / BATCH);
    for c in &calls {
        assert_ne!(
            c.status,
            CallStatus::Pending,
            "call {} has no result",
            c.call_id
        );
        let result_seq = c.result_seq.unwrap();
        assert_eq!(result_seq, c.call_seq + 1);
        let EventBody::ToolResult { call_id, .. } = &events[result_seq as usize - 1].body else {
            panic!("seq {result_seq} is not a result");
        };
        assert_eq!(call_id, &c.call_id);
    }
}

#[test]
fn acknowledged_appends_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("storm.db");
    survive_sigkill(path.to_str().unwrap());
}

/// The same storm against PostgreSQL: the writer is a client killed mid-commit, and the server
/// must keep exactly what it acknowledged.
#[test]
fn acknowledged_appends_survive_sigkill_on_postgres() {
    let Some(schema) = fresh_schema() else {
        return;
    };
    survive_sigkill(&schema.url);
}

/// Rounds of storms on the database `db` names, each killed at a different point.
fn survive_sigkill(path: &str) {
    let mut acknowledged = 0;
    for round in 0..ROUNDS {
        // Kill at different points of the storm in each round.
        let acked = storm(path, 40 + 37 * round);
        assert!(
            acked > acknowledged,
            "round {round} acknowledged nothing new"
        );
        acknowledged = acked;
        check(path, acknowledged);
        // The next writer continues from the recovered log, not from what was acknowledged.
        acknowledged = loom_store::open(path)
            .unwrap()
            .store
            .latest_seq(&sid("storm"))
            .unwrap();
    }
}
