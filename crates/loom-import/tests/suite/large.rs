//! Long tool outputs go to the blob store with the stats of the original bytes.

use loom_core::{ContentStats, ContentType, EventBody, ToolOutput};
use loom_import::parse_reader;
use loom_store::{BlobStore, MemoryBlobStore};

use super::opts;

/// A chat whose one tool result is `output` (JSON-escaped here).
fn chat_with_output(output: &str) -> String {
    let call = r#"{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "cat", "arguments": "{}"}}]}"#;
    format!(
        r#"[{{"role": "user", "content": "go"}}, {call}, {{"role": "tool", "tool_call_id": "c", "content": {}}}]"#,
        serde_json::to_string(output).unwrap()
    )
}

fn result_of(events: &[loom_core::NewEvent]) -> (ToolOutput, ContentStats) {
    match &events[2].body {
        EventBody::ToolResult { content, stats, .. } => (content.clone(), stats.clone()),
        other => panic!("expected a tool result, got {other:?}"),
    }
}

#[test]
fn outputs_above_the_limit_are_offloaded_with_original_stats() {
    // Escapes, quotes and multi-byte characters: the blob holds the decoded text.
    let output = "line \"one\" — ✓\tx\\y\n".repeat(5_000);
    let blobs = MemoryBlobStore::new();
    let mut o = opts(None);
    o.inline_limit = 1024;
    let text = chat_with_output(&output);
    let s = parse_reader("big.json", "big", text.as_bytes(), &o, &blobs).unwrap();
    assert_eq!(s[0].offloaded, 1);
    let (content, stats) = result_of(&s[0].events);
    let ToolOutput::Blob(blob) = content else {
        panic!("expected a blob, got {content:?}")
    };
    assert_eq!(blobs.get(&blob).unwrap(), output.as_bytes());
    assert_eq!(stats, ContentStats::of(output.as_bytes()));
    assert_eq!(stats.lines, 5_000);
    assert_eq!(blob.hex(), stats.sha256);
}

#[test]
fn outputs_at_the_limit_stay_inline() {
    let output = "x".repeat(1024);
    let blobs = MemoryBlobStore::new();
    let mut o = opts(None);
    o.inline_limit = 1024;
    let text = chat_with_output(&output);
    let s = parse_reader("small.json", "small", text.as_bytes(), &o, &blobs).unwrap();
    assert_eq!(s[0].offloaded, 0);
    assert_eq!(result_of(&s[0].events).0, ToolOutput::Text(output));
}

#[test]
fn long_text_in_several_parts_is_offloaded_joined() {
    let a = "a".repeat(800);
    let b = "b".repeat(800);
    let text = format!(
        r#"{{"system": "s", "messages": [
          {{"role": "assistant", "content": [{{"type": "tool_use", "id": "t", "name": "f", "input": {{}}}}]}},
          {{"role": "user", "content": [{{"type": "tool_result", "tool_use_id": "t", "content": [
            {{"type": "text", "text": "{a}"}}, {{"type": "text", "text": "{b}"}}]}}]}}]}}"#
    );
    let blobs = MemoryBlobStore::new();
    let mut o = opts(None);
    o.inline_limit = 1000;
    let s = parse_reader("parts.json", "parts", text.as_bytes(), &o, &blobs).unwrap();
    let (content, stats) = result_of(&s[0].events);
    let ToolOutput::Blob(blob) = content else {
        panic!("expected a blob, got {content:?}")
    };
    let joined = format!("{a}\n{b}");
    assert_eq!(blobs.get(&blob).unwrap(), joined.as_bytes());
    assert_eq!(stats, ContentStats::of(joined.as_bytes()));
}

#[test]
fn long_user_text_is_kept_inline_in_the_event() {
    let long = "u".repeat(5000);
    let text = format!(r#"[{{"role": "user", "content": "{long}"}}]"#);
    let blobs = MemoryBlobStore::new();
    let mut o = opts(None);
    o.inline_limit = 100;
    let s = parse_reader("u.json", "u", text.as_bytes(), &o, &blobs).unwrap();
    let body = serde_json::to_value(&s[0].events[0].body).unwrap();
    assert_eq!(body["content"].as_str().unwrap().len(), 5000);
    assert_eq!(s[0].offloaded, 0);
}

#[test]
fn stats_detect_the_type_of_offloaded_output() {
    let output = format!("{{\"rows\": [{}]}}", vec!["1"; 3000].join(","));
    let blobs = MemoryBlobStore::new();
    let mut o = opts(None);
    o.inline_limit = 512;
    let text = chat_with_output(&output);
    let s = parse_reader("j.json", "j", text.as_bytes(), &o, &blobs).unwrap();
    assert_eq!(result_of(&s[0].events).1.content_type, ContentType::Json);
}
