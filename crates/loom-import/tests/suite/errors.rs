//! Bad input: every error names the file, the line or record, the field and the reason.

use loom_import::ImportError;
use loom_store::MemoryBlobStore;

use super::parse_err;

const CALL: &str = r#"{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}"#;
const USER: &str = r#"{"role": "user", "content": "hi"}"#;

fn jsonl(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn traj(id: &str, messages: &[&str]) -> String {
    format!(r#"{{"id": "{id}", "messages": [{}]}}"#, messages.join(", "))
}

#[test]
fn invalid_json_names_line_column_and_field() {
    let text = jsonl(&[
        traj("a", &[USER]),
        r#"{"id": "b", "messages": [{"role": "user", "content": "unterminated}]}"#.into(),
    ]);
    let e = parse_err(&text);
    assert!(e.starts_with("conv.json:2 (record 2)"), "{e}");
    assert!(e.contains("invalid JSON in `messages[0].content`"), "{e}");

    let missing_comma = r#"{"id": "b", "messages": [{"role": "user" "content": "x"}]}"#;
    let e = parse_err(&jsonl(&[
        traj("a", &[USER]),
        traj("c", &[USER]),
        missing_comma.into(),
    ]));
    assert!(
        e.starts_with("conv.json:3:42 (record 3): invalid JSON in `messages[0]`"),
        "{e}"
    );
    assert!(e.contains("expected `,` or `}`"), "{e}");
}

#[test]
fn wrong_types_name_the_field() {
    let e = parse_err(r#"[{"role": "user", "content": "a"}, {"role": 42, "content": "b"}]"#);
    assert!(
        e.contains("invalid JSON in `[1].role`") && e.contains("expected a string"),
        "{e}"
    );
}

#[test]
fn a_result_for_an_unknown_call_is_refused() {
    let tool = r#"{"role": "tool", "tool_call_id": "nope", "content": "x"}"#;
    let e = parse_err(&jsonl(&[
        traj("a", &[USER]),
        traj("b", &[USER, CALL, tool]),
    ]));
    assert_eq!(
        e,
        "conv.json:2 (record 2): field `messages[2].tool_call_id`: tool result for call `nope` \
         has no matching tool call before it"
    );
}

#[test]
fn reused_call_ids_are_aliased_and_results_answer_the_oldest_waiting_call() {
    let result = |id: &str, text: &str| {
        format!(r#"{{"role": "tool", "tool_call_id": "{id}", "content": "{text}"}}"#)
    };
    // `call_0` in every turn, as some OpenAI-compatible servers number calls; twice in one
    // turn too. The provider accepts both; the log gives each call an id of its own.
    let twice = r#"{"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
        {"id": "c1", "type": "function", "function": {"name": "b", "arguments": "{}"}}]}"#;
    let text = format!(
        "[{USER}, {CALL}, {}, {CALL}, {}, {twice}, {}, {}]",
        result("c1", "first"),
        result("c1", "second"),
        result("c1", "third"),
        result("c1", "fourth"),
    );
    let sessions = super::parse_ok(&text);
    let events = super::json_bodies(&sessions[0].events);
    let ids: Vec<String> = events
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| {
            let calls = e["tool_calls"].as_array().cloned().unwrap_or_default();
            calls
                .into_iter()
                .map(|c| c["id"].as_str().unwrap().to_owned())
                .chain(e["call_id"].as_str().map(|id| format!("result:{id}")))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        ids,
        [
            "c1",
            "result:c1",
            "c1_r2",
            "result:c1_r2",
            "c1_r3",
            "c1_r4",
            "result:c1_r3",
            "result:c1_r4"
        ],
        "{events:#}"
    );
    // The two calls of one turn are answered in order: `a` first, then `b`.
    let names: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["tool_name"].as_str())
        .collect();
    assert_eq!(names, ["bash", "bash", "a", "b"]);
}

#[test]
fn a_second_result_for_one_call_is_stale() {
    let tool = r#"{"role": "tool", "tool_call_id": "c1", "content": "x"}"#;
    let e = parse_err(&format!("[{USER}, {CALL}, {tool}, {tool}]"));
    assert!(
        e.contains("`[3].tool_call_id`") && e.contains("already resolved at seq 3"),
        "{e}"
    );
}

#[test]
fn a_tool_message_before_any_assistant_is_refused() {
    let tool = r#"{"role": "tool", "tool_call_id": "c1", "content": "x"}"#;
    let e = parse_err(&format!("[{USER}, {tool}]"));
    assert!(
        e.contains("`[1].tool_call_id`") && e.contains("before any assistant message"),
        "{e}"
    );
}

#[test]
fn invalid_utf8_reports_the_byte_offset() {
    let mut bytes = br#"[{"role": "user", "content": "caf"#.to_vec();
    let offset = bytes.len();
    bytes.push(0xe9); // Latin-1 é
    bytes.extend_from_slice(br#""}]"#);
    let blobs = MemoryBlobStore::new();
    let opts = super::opts(None);
    let e =
        loom_import::parse_reader("latin1.json", "latin1", &bytes[..], &opts, &blobs).unwrap_err();
    assert!(
        matches!(e, ImportError::InvalidUtf8 { offset: o, .. } if o == offset as u64),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        format!("latin1.json: invalid UTF-8 at byte offset {offset}")
    );
}

#[test]
fn empty_inputs_are_refused() {
    for text in ["", "  \n\n"] {
        assert_eq!(
            parse_err(text),
            "conv.json: the file is empty; expected JSON or JSONL"
        );
    }
    let e = parse_err("[]");
    assert!(
        e.contains("is empty; a conversation needs at least one message"),
        "{e}"
    );
}

#[test]
fn unknown_roles_are_refused() {
    let e =
        parse_err(r#"[{"role": "user", "content": "a"}, {"role": "narrator", "content": "b"}]"#);
    assert!(
        e.contains("field `[1].role`: unknown role `narrator`"),
        "{e}"
    );
}

#[test]
fn missing_fields_are_named() {
    let e = parse_err(r#"[{"content": "a"}]"#);
    assert!(e.contains("field `[0].role`: missing"), "{e}");
    let e = parse_err(r#"[{"role": "user"}]"#);
    assert!(e.contains("field `[0].content`: missing"), "{e}");
    let e = parse_err(&format!(r#"[{CALL}, {{"role": "tool", "content": "x"}}]"#));
    assert!(e.contains("field `[1].tool_call_id`: missing"), "{e}");
    let e = parse_err(
        r#"[{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}]"#,
    );
    assert!(e.contains("field `[0].tool_calls[0].id`: missing"), "{e}");
}

#[test]
fn errors_in_pretty_json_name_the_message_line() {
    let text = "{\n  \"messages\": [\n    {\"role\": \"user\", \"content\": \"a\"},\n    {\n      \"role\": \"wizard\",\n      \"content\": \"b\"\n    }\n  ]\n}\n";
    let e = parse_err(text);
    assert!(
        e.starts_with("conv.json:4 (record 1): field `messages[1].role`"),
        "{e}"
    );
}

#[test]
fn a_top_level_scalar_is_not_a_record() {
    let e = parse_err("42\n");
    assert!(e.contains("expected `{` or `[`"), "{e}");
}

#[test]
fn session_option_needs_a_single_conversation() {
    let blobs = MemoryBlobStore::new();
    let mut opts = super::opts(None);
    opts.session = Some(loom_core::SessionId::new("mine").unwrap());
    let two = jsonl(&[traj("a", &[USER]), traj("b", &[USER])]);
    let e = loom_import::parse_reader("t.jsonl", "t", two.as_bytes(), &opts, &blobs).unwrap_err();
    assert!(
        e.to_string().contains("--session names one conversation"),
        "{e}"
    );
    let one = traj("a", &[USER]);
    let s = loom_import::parse_reader("t.jsonl", "t", one.as_bytes(), &opts, &blobs).unwrap();
    assert_eq!(s[0].id.as_str(), "mine");
}
