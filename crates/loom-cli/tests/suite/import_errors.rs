//! Bad input exits 2 with a message naming the file, line and field, and stores nothing.

use std::path::PathBuf;

use super::Loom;

const CALL: &str = r#"{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}"#;
const USER: &str = r#"{"role": "user", "content": "hi"}"#;

/// A database that already holds one session, and its `sessions --json`.
fn seeded() -> (Loom, serde_json::Value) {
    let loom = Loom::new();
    let good = loom.file("seed.json", format!("[{USER}]"));
    loom.import(&[&good]);
    let before = loom.sessions();
    assert_eq!(before.as_array().unwrap().len(), 1);
    (loom, before)
}

/// Imports `bad` (after a good file, so that is refused too) and checks exit code 2, that
/// stderr holds every piece of `expect`, and that the database did not change.
fn refused(name: &str, bad: impl AsRef<[u8]>, expect: &[&str]) {
    let (loom, before) = seeded();
    let good = loom.file(
        "good.jsonl",
        format!("{{\"id\": \"fresh\", \"messages\": [{USER}]}}\n"),
    );
    let bad: PathBuf = loom.file(name, bad);
    let run = loom.run(["import".as_ref(), good.as_os_str(), bad.as_os_str()]);
    assert_eq!(run.code, 2, "stderr: {}", run.stderr);
    for piece in expect {
        assert!(
            run.stderr.contains(piece),
            "missing {piece:?} in: {}",
            run.stderr
        );
    }
    assert!(run.stdout.is_empty());
    assert_eq!(loom.sessions(), before, "the database changed");
}

#[test]
fn invalid_json() {
    refused(
        "broken.jsonl",
        format!("{{\"id\": \"a\", \"messages\": [{USER}]}}\n{{\"id\": \"b\", \"messages\": [{{\"role\": \"user\" \"content\": \"x\"}}]}}\n"),
        &["broken.jsonl:2:", "(record 2)", "invalid JSON", "`messages[0]`", "expected `,` or `}`"],
    );
}

#[test]
fn a_result_for_an_unknown_call() {
    refused(
        "orphan.json",
        format!(r#"[{USER}, {CALL}, {{"role": "tool", "tool_call_id": "zz", "content": "x"}}]"#),
        &[
            "orphan.json:1",
            "`[2].tool_call_id`",
            "call `zz` has no matching tool call",
        ],
    );
}

#[test]
fn a_tool_message_before_any_assistant() {
    refused(
        "early.json",
        format!(
            "{{\n  \"messages\": [\n    {USER},\n    {{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"x\"}}\n  ]\n}}\n"
        ),
        &["early.json:4", "`messages[1].tool_call_id`", "before any assistant message"],
    );
}

#[test]
fn invalid_utf8() {
    let mut bytes = format!("[{USER}, {{\"role\": \"user\", \"content\": \"caf").into_bytes();
    let offset = bytes.len();
    bytes.extend_from_slice(b"\xe9\"}]");
    refused(
        "latin1.json",
        bytes,
        &[&format!(
            "latin1.json: invalid UTF-8 at byte offset {offset}"
        )],
    );
}

#[test]
fn an_empty_file() {
    refused("empty.jsonl", "\n  \n", &["empty.jsonl: the file is empty"]);
}

#[test]
fn an_unknown_role() {
    refused(
        "role.json",
        format!(r#"[{USER}, {{"role": "narrator", "content": "x"}}]"#),
        &["role.json:1", "`[1].role`", "unknown role `narrator`"],
    );
}

#[test]
fn a_missing_field() {
    refused(
        "missing.json",
        format!(r#"[{CALL}, {{"role": "tool", "content": "x"}}]"#),
        &["missing.json:1", "`[1].tool_call_id`", "missing"],
    );
}

#[test]
fn an_ambiguous_format() {
    refused(
        "mixed.json",
        r#"[{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            {"role": "tool", "tool_call_id": "t", "content": "x"}]"#,
        &[
            "mixed.json:1",
            "ambiguous format",
            "tool_use",
            "role `tool`",
            "--format",
        ],
    );
}

#[test]
fn a_changed_session_conflicts_with_the_stored_one() {
    let (loom, before) = seeded();
    let changed = loom.file(
        "seed.json",
        format!(r#"[{USER}, {{"role": "assistant", "content": "new"}}]"#),
    );
    let run = loom.run(["import".as_ref(), changed.as_os_str()]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "session `seed` already exists with different events (first difference at seq 2"
        ),
        "{}",
        run.stderr
    );
    assert_eq!(loom.sessions(), before);
}

#[test]
fn a_missing_file_and_bad_options() {
    let (loom, before) = seeded();
    let run = loom.run(["import", "does-not-exist.json"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("does-not-exist.json: cannot read"),
        "{}",
        run.stderr
    );
    let run = loom.run(["import", "--format", "xml", "x.json"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let a = loom.file("a.json", format!("[{USER}]"));
    let b = loom.file("b.json", format!("[{USER}]"));
    let run = loom.run([
        "import".as_ref(),
        "--session".as_ref(),
        "s".as_ref(),
        a.as_os_str(),
        b.as_os_str(),
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("--session names one conversation"),
        "{}",
        run.stderr
    );
    assert_eq!(loom.sessions(), before);
}
