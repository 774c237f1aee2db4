//! Anthropic Messages: message bodies, the event stream, thinking with signatures, tool use,
//! and usage that leaves cache reads out of `input_tokens`.

use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::{post_json, post_sse, spawn};

const PATH: &str = "/v1/messages";

fn tool(name: &str) -> Value {
    json!({"name": name, "description": "d", "input_schema": {"type": "object"}})
}

#[tokio::test]
async fn thinking_then_tool_use_then_text_after_result() {
    let mock = spawn().await;
    let mut messages = vec![json!({"role": "user", "content": "what is in the repo"})];
    let body = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages,
        "tools": [tool("list_dir"), {"type": "web_search_20250305", "name": "web_search"}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    });
    let reply = post_json(&mock, PATH, &body, 200).await;
    assert_eq!(reply["type"], "message");
    assert_eq!(reply["role"], "assistant");
    assert_eq!(reply["stop_reason"], "tool_use");
    assert_eq!(reply["stop_sequence"], Value::Null);
    let content = reply["content"].as_array().unwrap();
    assert_eq!(content.len(), 2);
    assert_eq!(content[0]["type"], "thinking");
    let thinking = content[0]["thinking"].as_str().unwrap();
    let expected =
        base64::engine::general_purpose::STANDARD.encode(Sha256::digest(thinking.as_bytes()));
    assert_eq!(content[0]["signature"], expected);
    assert_eq!(content[1]["type"], "tool_use");
    assert_eq!(content[1]["name"], "list_dir");
    assert_eq!(content[1]["input"], json!({"query": "what is in the repo"}));
    let id = content[1]["id"].as_str().unwrap();
    assert!(id.starts_with("toolu_"));

    messages.push(json!({"role": "assistant", "content": content}));
    messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "src docs"}]}));
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages, "tools": [tool("list_dir")]});
    let reply = post_json(&mock, PATH, &body, 200).await;
    assert_eq!(reply["stop_reason"], "end_turn");
    assert_eq!(
        reply["content"],
        json!([{"type": "text", "text": "ok: 3 messages, last: src docs"}])
    );
    let usage = &reply["usage"];
    assert!(usage["cache_read_input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(usage["cache_creation_input_tokens"], 0);
}

#[tokio::test]
async fn input_tokens_leave_out_cache_reads() {
    let first = json!({"model": "claude-haiku-4-5", "max_tokens": 64, "system": "You answer questions. ".repeat(30),
        "messages": [{"role": "user", "content": "one"}]});
    let mut second = first.clone();
    second["messages"] = json!([
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "two"},
    ]);
    let fresh = post_json(&spawn().await, PATH, &second, 200).await["usage"].clone();
    assert_eq!(fresh["cache_read_input_tokens"], 0);
    let total = fresh["input_tokens"].as_u64().unwrap();

    let mock = spawn().await;
    post_json(&mock, PATH, &first, 200).await;
    let warm = post_json(&mock, PATH, &second, 200).await["usage"].clone();
    let read = warm["cache_read_input_tokens"].as_u64().unwrap();
    assert!(read > 0);
    assert_eq!(warm["input_tokens"].as_u64().unwrap() + read, total);
}

#[tokio::test]
async fn cache_control_marks_a_cache_write() {
    let mock = spawn().await;
    let body = json!({"model": "claude-haiku-4-5", "max_tokens": 64,
        "system": [{"type": "text", "text": "Long instructions. ".repeat(40), "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hello"}]});
    let usage = post_json(&mock, PATH, &body, 200).await["usage"].clone();
    assert!(usage["cache_creation_input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(usage["cache_read_input_tokens"], 0);
    let again = post_json(&mock, PATH, &body, 200).await["usage"].clone();
    assert_eq!(again["cache_creation_input_tokens"], 0);
    assert!(again["cache_read_input_tokens"].as_u64().unwrap() > 0);
}

/// Rebuilds a message from its events as the SDKs do.
fn assemble(events: &[super::Event]) -> Value {
    let mut message = Value::Null;
    let mut partial_json: Vec<String> = Vec::new();
    for event in events {
        let data = event.json();
        assert_eq!(Some(data["type"].as_str().unwrap()), event.name.as_deref());
        match data["type"].as_str().unwrap() {
            "message_start" => message = data["message"].clone(),
            "content_block_start" => {
                assert_eq!(data["index"], message["content"].as_array().unwrap().len());
                message["content"]
                    .as_array_mut()
                    .unwrap()
                    .push(data["content_block"].clone());
                partial_json.push(String::new());
            }
            "content_block_delta" => {
                let index = data["index"].as_u64().unwrap() as usize;
                let block = &mut message["content"][index];
                let delta = &data["delta"];
                match delta["type"].as_str().unwrap() {
                    "text_delta" => {
                        block["text"] = json!(format!(
                            "{}{}",
                            block["text"].as_str().unwrap(),
                            delta["text"].as_str().unwrap()
                        ))
                    }
                    "thinking_delta" => {
                        block["thinking"] = json!(format!(
                            "{}{}",
                            block["thinking"].as_str().unwrap(),
                            delta["thinking"].as_str().unwrap()
                        ))
                    }
                    "signature_delta" => block["signature"] = delta["signature"].clone(),
                    "input_json_delta" => {
                        partial_json[index].push_str(delta["partial_json"].as_str().unwrap())
                    }
                    other => panic!("unknown delta {other}"),
                }
            }
            "content_block_stop" => {
                let index = data["index"].as_u64().unwrap() as usize;
                if message["content"][index]["type"] == "tool_use" {
                    message["content"][index]["input"] =
                        serde_json::from_str(&partial_json[index]).unwrap();
                }
            }
            "message_delta" => {
                message["stop_reason"] = data["delta"]["stop_reason"].clone();
                message["stop_sequence"] = data["delta"]["stop_sequence"].clone();
                message["usage"] = data["usage"].clone();
            }
            "ping" | "message_stop" => {}
            other => panic!("unknown event {other}"),
        }
    }
    assert_eq!(events.last().unwrap().name.as_deref(), Some("message_stop"));
    message
}

#[tokio::test]
async fn stream_rebuilds_the_json_message() {
    for user in ["please do both in parallel", "just answer"] {
        let tools = if user.contains("parallel") {
            json!([tool("a"), tool("b")])
        } else {
            json!([])
        };
        let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 2048, "messages": [{"role": "user", "content": user}],
            "tools": tools, "thinking": {"type": "enabled", "budget_tokens": 1024}});
        let json_reply = post_json(&spawn().await, PATH, &body, 200).await;
        let mut stream_body = body.clone();
        stream_body["stream"] = json!(true);
        let events = post_sse(&spawn().await, PATH, &stream_body).await;
        let names: Vec<&str> = events.iter().map(|e| e.name.as_deref().unwrap()).collect();
        assert_eq!(
            &names[..3],
            ["message_start", "content_block_start", "ping"]
        );
        let start = events[0].json();
        assert_eq!(start["message"]["content"], json!([]));
        assert_eq!(start["message"]["stop_reason"], Value::Null);
        assert_eq!(assemble(&events), json_reply, "{user}");
    }
}
