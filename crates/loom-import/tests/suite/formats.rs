//! Each format's mapping to events, and format detection.

use loom_core::Api;
use loom_core::{ContentType, EventBody, ToolOutput};
use loom_store::MemoryBlobStore;
use serde_json::json;

use super::{json_bodies, parse_as, parse_err, parse_ok};

#[test]
fn openai_messages_map_one_to_one() {
    let text = r#"[
      {"role": "system", "content": "be brief"},
      {"role": "developer", "content": [{"type": "text", "text": "use tools"}]},
      {"role": "user", "name": "ann", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}}]},
      {"role": "assistant", "content": null, "reasoning_content": "two lookups",
       "tool_calls": [
         {"id": "a", "type": "function", "function": {"name": "get", "arguments": "{\"k\": 1}"}},
         {"id": "b", "type": "function", "function": {"name": "put", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "b", "content": "done"},
      {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "{\"v\": 2}"}]},
      {"role": "assistant", "content": "v is 2"}
    ]"#;
    let sessions = parse_ok(text);
    assert_eq!(sessions.len(), 1);
    let s = &sessions[0];
    assert_eq!(s.id.as_str(), "conv");
    assert_eq!(s.agent.as_str(), "agent");
    assert_eq!(s.format, Api::OpenaiChat);
    let bodies = json_bodies(&s.events);
    assert_eq!(bodies[0], json!({"kind": "system", "content": "be brief"}));
    assert_eq!(
        bodies[1],
        json!({"kind": "system", "content": [{"type": "text", "text": "use tools"}]})
    );
    assert_eq!(
        bodies[2],
        json!({"kind": "user", "name": "ann", "content": [
            {"type": "text", "text": "look"},
            {"type": "image", "url": "https://x/y.png", "detail": "low"}]})
    );
    assert_eq!(
        bodies[3],
        json!({"kind": "assistant", "reasoning": "two lookups", "tool_calls": [
            {"id": "a", "name": "get", "arguments": "{\"k\": 1}"},
            {"id": "b", "name": "put", "arguments": "{}"}]})
    );
    assert_eq!(bodies[4]["call_id"], "b");
    assert_eq!(bodies[4]["tool_name"], "put");
    assert_eq!(bodies[4]["content"], json!({"text": "done"}));
    assert_eq!(bodies[4]["stats"]["bytes"], 4);
    // A single text part is the text itself.
    assert_eq!(bodies[5]["content"], json!({"text": "{\"v\": 2}"}));
    assert_eq!(bodies[5]["stats"]["content_type"], "json");
    assert_eq!(bodies[6], json!({"kind": "assistant", "content": "v is 2"}));
}

#[test]
fn openai_legacy_function_calls_pair_by_name() {
    let text = r#"{"messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null,
       "function_call": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}},
      {"role": "function", "name": "weather", "content": "rain"}
    ]}"#;
    let s = &parse_ok(text)[0];
    let bodies = json_bodies(&s.events);
    assert_eq!(bodies[1]["tool_calls"][0]["id"], "fc_1");
    assert_eq!(bodies[2]["call_id"], "fc_1");
    assert_eq!(bodies[2]["tool_name"], "weather");
}

#[test]
fn a_trajectory_may_end_with_a_pending_call() {
    let text = r#"[{"role": "user", "content": "go"},
      {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
        "function": {"name": "bash", "arguments": "{}"}}]}]"#;
    let s = &parse_ok(text)[0];
    assert_eq!(s.events.len(), 2);
}

#[test]
fn anthropic_blocks_map_to_events_in_order() {
    let text = r#"{
      "system": [{"type": "text", "text": "you are a coder"}],
      "messages": [
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": [
          {"type": "thinking", "thinking": "read first", "signature": "zzz"},
          {"type": "text", "text": "Reading."},
          {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a.rs", "n": [1, 2]}},
          {"type": "tool_use", "id": "t2", "name": "grep", "input": {}}]},
        {"role": "user", "content": [
          {"type": "tool_result", "tool_use_id": "t1", "content": "fn main() {}"},
          {"type": "tool_result", "tool_use_id": "t2", "is_error": true,
           "content": [{"type": "text", "text": "no match"}]},
          {"type": "text", "text": "and?"}]},
        {"role": "assistant", "content": [
          {"type": "redacted_thinking", "data": "abc"},
          {"type": "text", "text": "fixed"}]}
      ]}"#;
    let s = &parse_ok(text)[0];
    assert_eq!(s.format, Api::Anthropic);
    let bodies = json_bodies(&s.events);
    assert_eq!(
        bodies[0],
        json!({"kind": "system", "content": [{"type": "text", "text": "you are a coder"}]})
    );
    assert_eq!(bodies[1], json!({"kind": "user", "content": "fix it"}));
    assert_eq!(
        bodies[2],
        json!({"kind": "assistant", "content": [{"type": "text", "text": "Reading."}],
               "reasoning": "read first", "tool_calls": [
                 {"id": "t1", "name": "read", "arguments": "{\"path\":\"a.rs\",\"n\":[1,2]}"},
                 {"id": "t2", "name": "grep", "arguments": "{}"}],
               "native": {"api": "anthropic", "items": [
                 {"type": "thinking", "thinking": "read first", "signature": "zzz"}]}})
    );
    assert_eq!(bodies[3]["call_id"], "t1");
    assert_eq!(bodies[3]["is_error"], false);
    assert_eq!(bodies[4]["call_id"], "t2");
    assert_eq!(bodies[4]["is_error"], true);
    assert_eq!(bodies[4]["content"], json!({"text": "no match"}));
    assert_eq!(
        bodies[5],
        json!({"kind": "user", "content": [{"type": "text", "text": "and?"}]})
    );
    assert_eq!(bodies[6]["reasoning"], "[redacted thinking]");
    assert_eq!(
        bodies[6]["native"],
        json!({"api": "anthropic", "items": [{"type": "redacted_thinking", "data": "abc"}]})
    );
    assert_eq!(bodies.as_array().unwrap().len(), 7);
}

#[test]
fn anthropic_images_become_data_urls() {
    let text = r#"{"system": "s", "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}
    ]}]}"#;
    let bodies = json_bodies(&parse_ok(text)[0].events);
    assert_eq!(bodies[1]["content"][0]["url"], "data:image/png;base64,iVBO");
}

#[test]
fn responses_items_merge_one_turn_into_one_assistant_event() {
    let text = r#"{"instructions": "be exact", "input": [
      {"role": "user", "content": "sum 1 and 2, then 3 and 4"},
      {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "two sums"}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "On it."}]},
      {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{\"a\":1,\"b\":2}"},
      {"type": "function_call", "call_id": "c2", "name": "add", "arguments": "{\"a\":3,\"b\":4}"},
      {"type": "function_call_output", "call_id": "c2", "output": "7"},
      {"type": "function_call_output", "call_id": "c1", "output": "3"},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "3 and 7"}]},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]}
    ]}"#;
    let s = &parse_ok(text)[0];
    assert_eq!(s.format, Api::OpenaiResponses);
    let bodies = json_bodies(&s.events);
    assert_eq!(bodies[0], json!({"kind": "system", "content": "be exact"}));
    assert_eq!(
        bodies[1],
        json!({"kind": "user", "content": "sum 1 and 2, then 3 and 4"})
    );
    assert_eq!(
        bodies[2],
        json!({"kind": "assistant", "content": [{"type": "text", "text": "On it."}],
               "reasoning": "two sums", "tool_calls": [
                 {"id": "c1", "name": "add", "arguments": "{\"a\":1,\"b\":2}"},
                 {"id": "c2", "name": "add", "arguments": "{\"a\":3,\"b\":4}"}],
               "native": {"api": "openai-responses", "items": [{"type": "reasoning", "id": "rs",
                 "summary": [{"type": "summary_text", "text": "two sums"}]}]}})
    );
    assert_eq!(bodies[3]["call_id"], "c2");
    assert_eq!(bodies[4]["call_id"], "c1");
    assert_eq!(bodies[5]["kind"], "assistant");
    assert_eq!(
        bodies[6],
        json!({"kind": "user", "content": [{"type": "text", "text": "thanks"}]})
    );
    assert_eq!(bodies.as_array().unwrap().len(), 7);
}

#[test]
fn responses_input_may_be_a_string() {
    let bodies = json_bodies(&parse_ok(r#"{"input": "hello"}"#)[0].events);
    assert_eq!(bodies, json!([{"kind": "user", "content": "hello"}]));
}

#[test]
fn jsonl_records_without_ids_are_numbered() {
    let text =
        "[{\"role\": \"user\", \"content\": \"a\"}]\n[{\"role\": \"user\", \"content\": \"b\"}]\n";
    let ids: Vec<String> = parse_ok(text).iter().map(|s| s.id.to_string()).collect();
    assert_eq!(ids, ["conv-1", "conv-2"]);
}

#[test]
fn explicit_format_reads_plain_messages_too() {
    let blobs = MemoryBlobStore::new();
    let text = r#"[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]"#;
    let mut all = Vec::new();
    for format in [Api::OpenaiChat, Api::Anthropic, Api::OpenaiResponses] {
        let s = parse_as(text, format, &blobs).unwrap();
        all.push(json_bodies(&s[0].events));
    }
    assert_eq!(all[0], all[1]);
    assert_eq!(all[1], all[2]);
}

#[test]
fn explicit_format_refuses_foreign_fields() {
    let blobs = MemoryBlobStore::new();
    let text = r#"{"system": "s", "messages": [{"role": "user", "content": "hi"}]}"#;
    let e = parse_as(text, Api::OpenaiChat, &blobs)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("field `system`") && e.contains("Anthropic"),
        "{e}"
    );
    let text = r#"[{"role": "assistant", "content": [{"type": "tool_use", "id": "x", "name": "f", "input": {}}]}]"#;
    let e = parse_as(text, Api::OpenaiChat, &blobs)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("messages[0].content[0].type") || e.contains("[0].content[0].type"),
        "{e}"
    );
    assert!(e.contains("tool_use"), "{e}");
}

#[test]
fn ambiguous_and_unknown_content_is_refused_with_its_clues() {
    let e = parse_err(
        r#"[{"role": "assistant", "content": [{"type": "tool_use", "id": "x", "name": "f", "input": {}}]},
            {"role": "tool", "tool_call_id": "x", "content": "r"}]"#,
    );
    assert!(e.contains("ambiguous format"), "{e}");
    assert!(
        e.contains("`[0]` has a `tool_use` block (Anthropic Messages)"),
        "{e}"
    );
    assert!(e.contains("`[1]` has role `tool` (OpenAI Chat)"), "{e}");

    let e = parse_err(r#"{"conversation": []}"#);
    assert!(e.contains("unknown format"), "{e}");

    let mixed = concat!(
        r#"{"id": "a", "messages": [{"role": "assistant", "tool_calls": []}]}"#,
        "\n",
        r#"{"id": "b", "system": "s", "messages": [{"role": "user", "content": "hi"}]}"#,
        "\n"
    );
    let e = parse_err(mixed);
    assert!(
        e.contains("conv.json:2") && e.contains("mixed formats"),
        "{e}"
    );
}

#[test]
fn tool_output_parts_keep_images_and_stats_cover_the_text() {
    let text = r#"{"system": "s", "messages": [
      {"role": "assistant", "content": [{"type": "tool_use", "id": "s1", "name": "shot", "input": {}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "s1", "content": [
        {"type": "text", "text": "a"},
        {"type": "image", "source": {"type": "url", "url": "https://x/p.png"}},
        {"type": "text", "text": "b"}]}]}]}"#;
    let s = &parse_ok(text)[0];
    match &s.events[2].body {
        EventBody::ToolResult { content, stats, .. } => {
            assert!(matches!(content, ToolOutput::Parts(p) if p.len() == 3));
            assert_eq!(stats.bytes, 3);
            assert_eq!(stats.lines, 2);
            assert_eq!(stats.content_type, ContentType::Text);
        }
        other => panic!("expected a tool result, got {other:?}"),
    }
}
