//! Importing into a store: all or nothing, and re-import is a no-op or a named conflict; the
//! shared traces import whole.

// Helpers outside `#[test]` functions unwrap too: in a test, a panic is the failure report.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use std::path::{Path, PathBuf};

use loom_core::Api;
use loom_import::{ImportError, ParseOptions};
use loom_session::import::{plan, plan_extending, Importer, NoProgress};
use loom_store::{CallStatus, MemoryBlobStore, MemoryStore, Store};

/// Where the shared traces live, relative to this crate.
const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces");

/// Options with a fixed timestamp.
fn opts(format: impl Into<Option<Api>>) -> ParseOptions {
    let mut o = ParseOptions::new(1_700_000_000_000);
    o.format = format.into();
    o
}

fn trace_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(TRACES)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    files
}

/// (trajectories, messages) counted straight from the JSONL.
fn direct_count(path: &PathBuf) -> (usize, usize) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut sessions = 0;
    let mut messages = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        sessions += 1;
        messages += v["messages"].as_array().unwrap().len();
    }
    (sessions, messages)
}

const GOOD: &str = concat!(
    r#"{"id": "s1", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}"#,
    "\n",
    r#"{"id": "s2", "messages": [{"role": "user", "content": "c"}]}"#,
    "\n"
);

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn reimport_of_identical_sessions_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.jsonl", GOOD);
    let store = MemoryStore::new();
    let blobs = MemoryBlobStore::new();
    let first = Importer::new(&store, &blobs, opts(None))
        .run(std::slice::from_ref(&good), &mut NoProgress)
        .unwrap();
    assert_eq!((first.imported, first.unchanged, first.events), (2, 0, 3));
    let before = store.sessions().unwrap();
    // A later import has a later timestamp; identity ignores it.
    let mut later = opts(None);
    later.ts_ms += 60_000;
    let again = Importer::new(&store, &blobs, later)
        .run(&[good], &mut NoProgress)
        .unwrap();
    assert_eq!((again.imported, again.unchanged, again.events), (0, 2, 0));
    assert_eq!(store.sessions().unwrap(), before);
}

#[test]
fn reimport_with_different_events_names_the_first_differing_seq() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.jsonl", GOOD);
    let changed = write(
        dir.path(),
        "changed.jsonl",
        &GOOD.replace(r#""content": "b""#, r#""content": "B""#),
    );
    let store = MemoryStore::new();
    let blobs = MemoryBlobStore::new();
    let importer = Importer::new(&store, &blobs, opts(None));
    importer.run(&[good], &mut NoProgress).unwrap();
    let e = importer.run(&[changed], &mut NoProgress).unwrap_err();
    assert!(matches!(&e, ImportError::Conflict { seq: 2, .. }), "{e}");
    assert!(
        e.to_string()
            .contains("session `s1` already exists with different events"),
        "{e}"
    );
    assert!(e.is_bad_input());
}

#[test]
fn a_bad_file_anywhere_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.jsonl", GOOD);
    let bad = write(
        dir.path(),
        "bad.jsonl",
        &format!(
            "{GOOD}{}\n",
            r#"{"id": "s3", "messages": [{"role": "oracle", "content": "x"}]}"#
        )
        .replace("\"s1\"", "\"t1\"")
        .replace("\"s2\"", "\"t2\""),
    );
    let store = MemoryStore::new();
    let blobs = MemoryBlobStore::new();
    let e = Importer::new(&store, &blobs, opts(None))
        .run(&[good, bad], &mut NoProgress)
        .unwrap_err();
    assert!(e.to_string().contains("bad.jsonl:3 (record 3)"), "{e}");
    assert!(store.sessions().unwrap().is_empty());
}

#[test]
fn one_session_twice_in_an_import() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.jsonl", GOOD);
    let b = write(dir.path(), "b.jsonl", GOOD);
    let store = MemoryStore::new();
    let blobs = MemoryBlobStore::new();
    let importer = Importer::new(&store, &blobs, opts(None));
    let report = importer.run(&[a.clone(), b], &mut NoProgress).unwrap();
    assert_eq!(report.imported, 2);
    let c = write(dir.path(), "c.jsonl", &GOOD.replace("\"a\"", "\"z\""));
    let store = MemoryStore::new();
    let importer = Importer::new(&store, &blobs, opts(None));
    let e = importer.run(&[a, c], &mut NoProgress).unwrap_err();
    assert!(matches!(e, ImportError::DuplicateSession { .. }), "{e}");
    assert!(store.sessions().unwrap().is_empty());
}

#[test]
fn single_conversations_are_named_after_the_file_or_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "chat-42.json",
        r#"[{"role": "user", "content": "hi"}]"#,
    );
    let store = MemoryStore::new();
    let blobs = MemoryBlobStore::new();
    Importer::new(&store, &blobs, opts(None))
        .run(std::slice::from_ref(&path), &mut NoProgress)
        .unwrap();
    let mut named = opts(None);
    named.session = Some(loom_core::SessionId::new("mine").unwrap());
    Importer::new(&store, &blobs, named.clone())
        .run(std::slice::from_ref(&path), &mut NoProgress)
        .unwrap();
    let ids: Vec<String> = store
        .sessions()
        .unwrap()
        .iter()
        .map(|s| s.id.to_string())
        .collect();
    assert_eq!(ids, ["chat-42", "mine"]);
    let e = Importer::new(&store, &blobs, named)
        .run(&[path.clone(), path], &mut NoProgress)
        .unwrap_err();
    assert!(matches!(e, ImportError::Options(_)), "{e}");
}

#[test]
fn an_extending_import_appends_the_rest_and_still_refuses_a_departure() {
    let store = MemoryStore::new();
    let blobs = MemoryBlobStore::new();
    let read = |text: &str| {
        loom_import::parse_slice("t", "t", text.as_bytes(), &opts(None), &blobs).unwrap()
    };
    let short = r#"{"id": "s", "messages": [{"role": "user", "content": "a"}]}"#;
    let long = r#"{"id": "s", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]}"#;
    let edited = r#"{"id": "s", "messages": [{"role": "user", "content": "A"}, {"role": "assistant", "content": "b"}]}"#;
    let s = loom_core::SessionId::new("s").unwrap();
    plan(&store, read(short))
        .unwrap()
        .commit(&store, 1, &mut NoProgress)
        .unwrap();
    // Without the opt-in a longer history is a conflict, as before.
    assert!(matches!(
        plan(&store, read(long)),
        Err(ImportError::Conflict { seq: 2, .. })
    ));
    let report = plan_extending(&store, read(long))
        .unwrap()
        .commit(&store, 2, &mut NoProgress)
        .unwrap();
    assert_eq!((report.extended, report.imported, report.events), (1, 0, 2));
    assert_eq!(
        report.sessions[0].outcome,
        loom_session::import::Outcome::Extended
    );
    assert_eq!(store.latest_seq(&s).unwrap(), 3);
    // The same history again is unchanged; one that departs from the log is still refused.
    let again = plan_extending(&store, read(long))
        .unwrap()
        .commit(&store, 3, &mut NoProgress)
        .unwrap();
    assert_eq!((again.unchanged, again.events), (1, 0));
    assert!(matches!(
        plan_extending(&store, read(edited)),
        Err(ImportError::Conflict { seq: 1, .. })
    ));
    assert_eq!(store.latest_seq(&s).unwrap(), 3);
}

/// A log with Loom's own recall round in it (a hidden turn, its answer and the record) still
/// extends by the client's history, which never held them.
#[test]
fn an_extending_import_reads_the_log_without_looms_hidden_rounds() {
    use loom_core::{ContentStats, EventBody, NewEvent, ToolCall, ToolOutput};
    let store = MemoryStore::new();
    let blobs = MemoryBlobStore::new();
    let read = |text: &str| {
        loom_import::parse_slice("t", "t", text.as_bytes(), &opts(None), &blobs).unwrap()
    };
    let s = loom_core::SessionId::new("s").unwrap();
    plan(
        &store,
        read(r#"{"id": "s", "messages": [{"role": "user", "content": "a"}]}"#),
    )
    .unwrap()
    .commit(&store, 1, &mut NoProgress)
    .unwrap();
    let answer = "the original";
    store
        .append(
            &s,
            &[
                NewEvent::new(
                    2,
                    EventBody::Assistant {
                        content: None,
                        reasoning: None,
                        tool_calls: vec![ToolCall {
                            id: "r1".into(),
                            name: "loom_recall".into(),
                            arguments: r#"{"ref": "seq:1"}"#.into(),
                        }],
                        name: None,
                        native: None,
                    },
                ),
                NewEvent::new(
                    2,
                    EventBody::ToolResult {
                        call_id: "r1".into(),
                        tool_name: "loom_recall".into(),
                        content: ToolOutput::Text(answer.into()),
                        is_error: false,
                        stats: ContentStats::of(answer.as_bytes()),
                    },
                ),
                NewEvent::new(2, EventBody::Hidden { events: [2, 3] }),
            ],
        )
        .unwrap();
    let long = r#"{"id": "s", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}"#;
    let report = plan_extending(&store, read(long))
        .unwrap()
        .commit(&store, 2, &mut NoProgress)
        .unwrap();
    assert_eq!((report.extended, report.events), (1, 1));
    assert_eq!(store.latest_seq(&s).unwrap(), 5);
}

#[test]
fn all_traces_import_and_unfinished_calls_stay_pending() {
    let store = MemoryStore::new();
    let blobs = MemoryBlobStore::new();
    let importer = Importer::new(&store, &blobs, opts(None));
    let files = trace_files();
    let report = importer.run(&files, &mut NoProgress).unwrap();
    let (mut want_sessions, mut want_events) = (0, 0);
    for f in &files {
        let (s, e) = direct_count(f);
        want_sessions += s;
        want_events += e;
    }
    assert_eq!(report.imported, want_sessions);
    assert_eq!(report.events, want_events as u64);
    assert_eq!(store.sessions().unwrap().len(), want_sessions);

    // SWE-agent runs that stopped after a call keep it pending.
    let pending: usize = store
        .sessions()
        .unwrap()
        .iter()
        .filter(|s| s.id.as_str().starts_with("sweagent_traj"))
        .map(|s| {
            let calls = store.tool_calls(&s.id).unwrap();
            calls
                .iter()
                .filter(|c| c.status == CallStatus::Pending)
                .count()
        })
        .sum();
    assert!(pending > 0);

    let again = importer.run(&files, &mut NoProgress).unwrap();
    assert_eq!((again.imported, again.unchanged), (0, want_sessions));
    assert_eq!(again.events, 0);
}
