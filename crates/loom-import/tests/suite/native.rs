//! Provider-native reasoning survives import and a render in its own format unchanged: the
//! signed Anthropic thinking blocks and the Responses reasoning items come back as they came in.

use std::collections::HashMap;

use loom_core::render::{
    check_request, render, ApproxMeter, Audience, CompactionState, CostMemo, Format as Wire,
    Policy, RenderInput,
};
use loom_core::{Api, Event, EventBody};
use loom_store::MemoryBlobStore;
use serde_json::{json, Value};

use super::parse_as;

/// Imports `input` and renders the whole session in `wire`; returns the events and the body.
fn import_and_render(input: &Value, format: Api, wire: Wire) -> (Vec<Event>, Value) {
    let blobs = MemoryBlobStore::new();
    let sessions = parse_as(&input.to_string(), format, &blobs).unwrap();
    render_sessions(&sessions, wire)
}

/// [`import_and_render`] as the proxy reads a client's request: keeping what Loom does not model.
fn import_kept_and_render(input: &Value, format: Api, wire: Wire) -> (Vec<Event>, Value) {
    let blobs = MemoryBlobStore::new();
    let mut opts = loom_import::ParseOptions::new(0);
    opts.format = Some(format);
    opts.keep_unknown = true;
    let text = input.to_string();
    let sessions =
        loom_import::parse_slice("request", "request", text.as_bytes(), &opts, &blobs).unwrap();
    render_sessions(&sessions, wire)
}

fn render_sessions(sessions: &[loom_import::ParsedSession], wire: Wire) -> (Vec<Event>, Value) {
    let events: Vec<Event> = sessions[0]
        .events
        .iter()
        .enumerate()
        .map(|(i, e)| Event {
            seq: i as u64 + 1,
            ts_ms: e.ts_ms,
            body: e.body.clone(),
        })
        .collect();
    let policy = Policy::default();
    let steps = HashMap::new();
    let audience = Audience {
        agent: None,
        now_ms: 0,
    };
    let r = render(
        &RenderInput {
            events: &events,
            steps: &steps,
            summaries: &[],
            policy: &policy,
            format: wire,
            model: "m",
            tools: &[],
            injections: &[],
            audience: &audience,
            meter: &ApproxMeter,
        },
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap();
    let body = r.body();
    check_request(wire, &body).unwrap();
    (events, body)
}

/// Canonical bytes of a JSON value (ordered keys), for byte-for-byte comparisons.
fn bytes(v: &Value) -> String {
    serde_json::to_string(v).unwrap()
}

fn anthropic_history() -> Value {
    json!({"system": "You are a coder.", "messages": [
        {"role": "user", "content": "Is main.rs empty?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Read it first.\nCarefully.", "signature": "EqQBCkYIARgCKkD3+/=="},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "main.rs"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "fn main() {}"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "It has main.", "signature": "c2lnMg=="},
            {"type": "text", "text": "It is not empty."}]},
        {"role": "user", "content": "Thanks."}
    ]})
}

#[test]
fn anthropic_thinking_blocks_round_trip_byte_for_byte() {
    let input = anthropic_history();
    let (events, body) = import_and_render(&input, Api::Anthropic, Wire::ANTHROPIC);
    let EventBody::Assistant {
        reasoning, native, ..
    } = &events[2].body
    else {
        panic!("expected an assistant event, got {:?}", events[2].body)
    };
    assert_eq!(
        reasoning.as_deref(),
        Some("Read it first.\nCarefully.\n\n[redacted thinking]")
    );
    assert_eq!(native.as_ref().map(|n| n.api), Some(Api::Anthropic));
    // Every assistant message of the render starts with the thinking blocks it was imported with.
    let sent: Vec<&Value> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    let given: Vec<&Value> = input["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(sent.len(), given.len());
    for (s, g) in sent.iter().zip(&given) {
        let thinking: Vec<&Value> = g["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "thinking" || b["type"] == "redacted_thinking")
            .collect();
        assert!(!thinking.is_empty());
        for (i, block) in thinking.iter().enumerate() {
            let mut out = s["content"][i].clone();
            // The render marks the last block of the request for caching; that is not the block.
            if let Some(o) = out.as_object_mut() {
                o.remove("cache_control");
            }
            assert_eq!(bytes(&out), bytes(block), "block {i} of {s}");
        }
    }
}

#[test]
fn responses_reasoning_items_round_trip_byte_for_byte() {
    let item_1 = json!({"type": "reasoning", "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Two additions."}],
        "encrypted_content": "gAAAAABoZ_enc+/1=="});
    let item_2 = json!({"type": "reasoning", "id": "rs_2", "summary": [],
        "content": [{"type": "reasoning_text", "text": "Both are small."}],
        "encrypted_content": null});
    let input = json!({"instructions": "Answer with numbers.", "input": [
        {"role": "user", "content": "Add 1+2 and 3+4."},
        item_1,
        {"type": "function_call", "call_id": "fc_1", "name": "add", "arguments": "{\"a\":1,\"b\":2}"},
        {"type": "function_call_output", "call_id": "fc_1", "output": "3"},
        item_2,
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "3 and 7."}]},
        {"role": "user", "content": "Thanks."}
    ]});
    let (events, body) = import_and_render(&input, Api::OpenaiResponses, Wire::OPENAI_RESPONSES);
    let EventBody::Assistant { reasoning, .. } = &events[4].body else {
        panic!("expected an assistant event, got {:?}", events[4].body)
    };
    // Without a summary, the reasoning text is the item's content.
    assert_eq!(reasoning.as_deref(), Some("Both are small."));
    let sent: Vec<&Value> = body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "reasoning")
        .collect();
    assert_eq!(sent.len(), 2);
    assert_eq!(bytes(sent[0]), bytes(&item_1));
    assert_eq!(bytes(sent[1]), bytes(&item_2));
    // Each reasoning item comes right before the item it led to.
    let items = body["input"].as_array().unwrap();
    let at = |id: &str| items.iter().position(|i| i["id"] == id).unwrap();
    assert_eq!(items[at("rs_1") + 1]["type"], "function_call");
    assert_eq!(items[at("rs_2") + 1]["role"], "assistant");
    // And the request, reasoning items included, is one OpenAI's description accepts.
    if loom_testkit::shared_dir().is_some() {
        let api = loom_testkit::OpenApi::load().unwrap();
        api.validate("CreateResponse", &body).unwrap();
    } else {
        eprintln!("SKIPPED: ../shared (OpenAI's API description) is absent; body not validated");
    }
}

#[test]
fn native_items_stay_with_their_own_provider() {
    let (_, chat) = import_and_render(&anthropic_history(), Api::Anthropic, Wire::OPENAI_CHAT);
    let (_, responses) =
        import_and_render(&anthropic_history(), Api::Anthropic, Wire::OPENAI_RESPONSES);
    for body in [chat, responses] {
        let text = body.to_string();
        assert!(!text.contains("EqQBCkYIARgCKkD3"), "{text}");
        assert!(!text.contains("redacted_thinking"), "{text}");
    }
}

#[test]
fn a_thinking_block_without_signature_is_reasoning_text_only() {
    let input = json!({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "unsigned"},
            {"type": "text", "text": "hello"}]}
    ]});
    let blobs = MemoryBlobStore::new();
    let sessions = parse_as(&input.to_string(), Api::Anthropic, &blobs).unwrap();
    let EventBody::Assistant {
        reasoning, native, ..
    } = &sessions[0].events[1].body
    else {
        panic!("expected an assistant event")
    };
    assert_eq!(reasoning.as_deref(), Some("unsigned"));
    assert!(native.is_none());
}

#[test]
fn a_reasoning_item_without_id_is_reasoning_text_only() {
    let input = json!({"input": [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "no id"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]}
    ]});
    let blobs = MemoryBlobStore::new();
    let sessions = parse_as(&input.to_string(), Api::OpenaiResponses, &blobs).unwrap();
    let EventBody::Assistant {
        reasoning, native, ..
    } = &sessions[0].events[1].body
    else {
        panic!("expected an assistant event")
    };
    assert_eq!(reasoning.as_deref(), Some("no id"));
    assert!(native.is_none());
}

/// What Loom does not model (a role, a block, an item, a part) is kept as it came and sent back
/// unchanged to the API it came from, in place (DESIGN.md, principle 9).
#[test]
fn what_loom_does_not_model_comes_back_as_it_came() {
    let narrator = json!({"role": "narrator", "content": "b"});
    let input = json!([{"role": "user", "content": "a"}, narrator]);
    let (_, body) = import_kept_and_render(&input, Api::OpenaiChat, Wire::OPENAI_CHAT);
    assert_eq!(body["messages"][1], narrator, "{body}");

    let document = json!({"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}, "title": "notes.txt", "citations": {"enabled": true}});
    let server_use = json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "rust"}});
    let server_result = json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
        {"type": "web_search_result", "url": "https://x.y", "title": "X", "encrypted_content": "enc", "page_age": null}]});
    let input = json!({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "look"}, document]},
        {"role": "assistant", "content": [server_use, server_result, {"type": "text", "text": "found"}]},
        {"role": "user", "content": "thanks"}
    ]});
    let (events, body) = import_kept_and_render(&input, Api::Anthropic, Wire::ANTHROPIC);
    assert_eq!(events.len(), 3);
    let blocks = |i: usize| body["messages"][i]["content"].clone();
    assert_eq!(blocks(0)[1], document, "{body}");
    assert_eq!(blocks(1)[0], server_use, "{body}");
    assert_eq!(blocks(1)[1], server_result, "{body}");
    // Another API gets it as text, never as a block it would refuse.
    let (_, chat) = import_kept_and_render(&input, Api::Anthropic, Wire::OPENAI_CHAT);
    assert!(
        chat.to_string()
            .contains("[document content from anthropic]"),
        "{chat}"
    );

    let extra = json!({"type": "additional_tools", "tools": [{"type": "function", "name": "x", "parameters": {"type": "object"}}]});
    let compaction = json!({"type": "compaction", "id": "cmp_1", "encrypted_content": "abc"});
    let file = json!({"type": "input_file", "file_id": "file-1"});
    let input = json!({"input": [
        extra,
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "read it"}, file]},
        compaction,
        {"type": "message", "role": "user", "content": "go on"}
    ]});
    let (_, body) = import_kept_and_render(&input, Api::OpenaiResponses, Wire::OPENAI_RESPONSES);
    let items = body["input"].as_array().unwrap();
    assert_eq!(items[0], extra, "{body}");
    assert_eq!(items[1]["content"][1], file, "{body}");
    assert_eq!(items[2], compaction, "{body}");
}
