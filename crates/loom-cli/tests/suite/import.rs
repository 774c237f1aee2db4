//! `loom import` of the shared traces and of each format; re-import is a no-op.

use std::path::Path;

use super::{trace_files, Loom};

/// (trajectories, messages) counted straight from the JSONL files.
fn direct_count(files: &[std::path::PathBuf]) -> (u64, u64) {
    let (mut sessions, mut messages) = (0, 0);
    for f in files {
        for line in std::fs::read_to_string(f).unwrap().lines() {
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            sessions += 1;
            messages += v["messages"].as_array().unwrap().len() as u64;
        }
    }
    (sessions, messages)
}

#[test]
fn all_traces_import_then_reimport_is_a_no_op() {
    let loom = Loom::new();
    let files = trace_files();
    let paths: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let (want_sessions, want_events) = direct_count(&files);

    let report = loom.import(&paths);
    assert_eq!(report["files"], files.len());
    assert_eq!(report["imported"], want_sessions);
    assert_eq!(report["unchanged"], 0);
    assert_eq!(report["events"], want_events);

    let sessions = loom.sessions();
    let list = sessions.as_array().unwrap();
    assert_eq!(list.len() as u64, want_sessions);
    let total: u64 = list
        .iter()
        .map(|s| s["event_count"].as_u64().unwrap())
        .sum();
    assert_eq!(total, want_events);
    assert!(list
        .iter()
        .all(|s| s["id"].is_string() && s["agent"].is_string()));

    let again = loom.import(&paths);
    assert_eq!(again["imported"], 0);
    assert_eq!(again["unchanged"], want_sessions);
    assert_eq!(again["events"], 0);
    assert_eq!(loom.sessions(), sessions);
}

#[test]
fn the_human_summary_counts_sessions_and_events() {
    let loom = Loom::new();
    let f = loom.file("hello.json", r#"[{"role": "user", "content": "hi"}]"#);
    let run = loom.run(["import".as_ref(), f.as_os_str()]).ok();
    assert!(
        run.stdout().starts_with(
            "imported 1 session (1 event, 0 blobs offloaded), 0 unchanged, from 1 file in "
        ),
        "{}",
        run.stdout()
    );
    // No progress bar or other noise when stderr is not a terminal.
    assert_eq!(run.stderr, "");
    let table = loom.run(["sessions"]).ok().stdout();
    assert!(table.lines().next().unwrap().contains("EVENTS"), "{table}");
    assert!(
        table
            .lines()
            .nth(1)
            .unwrap()
            .trim_start()
            .starts_with("1  agent"),
        "{table}"
    );
    assert!(
        table.lines().nth(1).unwrap().ends_with("  hello"),
        "{table}"
    );
}

#[test]
fn each_format_imports_with_auto_and_explicit_format() {
    let loom = Loom::new();
    let anthropic = loom.file(
        "claude.json",
        r#"{"system": "s", "messages": [
            {"role": "user", "content": "ls"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "bash", "input": {"c": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "a b", "is_error": true}]}]}"#,
    );
    let responses = loom.file(
        "resp.json",
        r#"{"input": [{"role": "user", "content": "x"},
            {"type": "function_call", "call_id": "f", "name": "g", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "f", "output": "y"}]}"#,
    );
    let report = loom.import(&[&anthropic, &responses]);
    assert_eq!(report["imported"], 2);
    let log = loom.run(["log", "claude", "--json"]).ok().json();
    let kinds: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["system", "user", "assistant", "tool_result"]);
    assert_eq!(log[3]["is_error"], true);
    assert_eq!(log[2]["tool_calls"][0]["arguments"], "{\"c\":\"ls\"}");

    // The same file read with its format named, under another session id.
    let run = loom
        .run([
            "import",
            "--format",
            "responses",
            "--session",
            "named",
            resp_path(&responses),
        ])
        .ok();
    assert!(
        run.stdout().starts_with("imported 1 session (3 events"),
        "{}",
        run.stdout()
    );
    let ids: Vec<String> = loom
        .sessions()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["claude", "named", "resp"]);
}

fn resp_path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn agent_and_inline_limit_options() {
    let loom = Loom::new();
    let f = loom.file("big.json", super::chat_with_output(&"z".repeat(4000)));
    let run = loom
        .run([
            "import",
            "--agent",
            "tester",
            "--inline-limit",
            "1000",
            "--json",
            f.to_str().unwrap(),
        ])
        .ok();
    assert_eq!(run.json()["blobs"], 1);
    assert_eq!(loom.sessions()[0]["agent"], "tester");
}
