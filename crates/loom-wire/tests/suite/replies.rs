//! Whole reply bodies: the fields read, usage normalised, error bodies and bad bodies named.

use loom_wire::{parse_reply, ProviderError, ProviderUsage};

use loom_core::Api;
use serde_json::json;

use super::fixture;

#[test]
fn chat_parallel_calls_usage_with_cached_tokens_and_choice_zero_only() {
    let r = parse_reply(Api::OpenaiChat, &fixture("chat_tools.json")).unwrap();
    assert_eq!(r.content.as_deref(), Some("Checking both files."));
    assert_eq!(r.reasoning, None);
    assert!(r.native.is_empty());
    let calls: Vec<_> = r
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            ("call_read", "read_file", r#"{"path": "src/main.rs"}"#),
            ("call_grep", "grep", r#"{"pattern":"fn main","path":"."}"#),
        ]
    );
    assert_eq!(
        r.usage,
        Some(ProviderUsage {
            input_tokens: 2048,
            cached_input_tokens: Some(1920),
            output_tokens: Some(57),
        })
    );
    assert_eq!(r.id.as_deref(), Some("chatcmpl-A1"));
    assert_eq!(r.model.as_deref(), Some("gpt-4o-2024-08-06"));
    assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
}

#[test]
fn chat_refusal_counts_as_content() {
    let r = parse_reply(Api::OpenaiChat, &fixture("chat_refusal.json")).unwrap();
    assert_eq!(r.content.as_deref(), Some("I can’t help with that."));
    assert_eq!(r.usage.unwrap().cached_input_tokens, None);
}

#[test]
fn responses_reasoning_items_are_native_and_call_ids_are_call_ids() {
    let body = fixture("responses_tools.json");
    let r = parse_reply(Api::OpenaiResponses, &body).unwrap();
    assert_eq!(r.content.as_deref(), Some("Reading it now — ünïcödé 漢字."));
    assert_eq!(
        r.reasoning.as_deref(),
        Some("**Planning**\n\nI should read the file.\n\n**Then** grep for todos.")
    );
    let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(r.native, vec![value["output"][0].clone()]);
    assert_eq!(r.native[0]["encrypted_content"], "gAAAAABoX1pZ-enc+/==");
    let ids: Vec<_> = r.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_A", "call_B"]);
    assert_eq!(
        r.tool_calls[1].arguments,
        r#"{"pattern":"todo","path":"src"}"#
    );
    assert_eq!(
        r.usage,
        Some(ProviderUsage {
            input_tokens: 5000,
            cached_input_tokens: Some(4096),
            output_tokens: Some(321),
        })
    );
    assert_eq!(r.finish_reason.as_deref(), Some("completed"));
}

#[test]
fn messages_thinking_signature_and_raw_tool_input_byte_for_byte() {
    let r = parse_reply(Api::Anthropic, &fixture("messages_tools.json")).unwrap();
    assert_eq!(
        r.content.as_deref(),
        Some("I'll read the file and list the folder.")
    );
    assert_eq!(
        r.reasoning.as_deref(),
        Some("The user wants the file.\nRead it, then list the folder — carefully.")
    );
    assert_eq!(
        r.native,
        vec![
            json!({"type": "thinking",
                   "thinking": "The user wants the file.\nRead it, then list the folder — carefully.",
                   "signature": "EqQBCkYIBRgCIkBsig+/0aZ=="}),
            json!({"type": "redacted_thinking",
                   "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}),
        ]
    );
    // The input's text as the provider wrote it: key order and spacing kept.
    assert_eq!(
        r.tool_calls[0].arguments,
        r#"{"path": "src/main.rs", "limit": 200}"#
    );
    assert_eq!(r.tool_calls[1].arguments, "{}");
    assert_eq!(r.tool_calls[1].id, "toolu_01B");
    assert_eq!(
        r.usage,
        Some(ProviderUsage {
            input_tokens: 12 + 9000 + 300,
            cached_input_tokens: Some(9000),
            output_tokens: Some(188),
        })
    );
    assert_eq!(r.finish_reason.as_deref(), Some("tool_use"));
}

#[test]
fn error_bodies_are_upstream_errors_not_turns() {
    let cases = [
        (
            Api::OpenaiChat,
            json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded", "param": null}}),
            "requests",
        ),
        (
            Api::OpenaiResponses,
            json!({"error": {"message": "No such model", "type": "invalid_request_error", "code": "model_not_found", "param": "model"}}),
            "invalid_request_error",
        ),
        (
            Api::Anthropic,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            "overloaded_error",
        ),
    ];
    for (api, body, expected) in cases {
        let e = parse_reply(api, body.to_string().as_bytes()).unwrap_err();
        match e {
            ProviderError::Upstream { kind, .. } => assert_eq!(kind, expected, "{api}"),
            other => panic!("{api}: expected an upstream error, got {other}"),
        }
    }
}

#[test]
fn bad_bodies_name_their_field() {
    let cases = [
        (
            Api::OpenaiChat,
            json!({"choices": [{"index": 0, "message": {"content": 5}}]}),
            "choices[0].message.content",
        ),
        (
            Api::OpenaiChat,
            json!({"choices": [{"message": {"tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]}}]}),
            "choices[0].message.tool_calls[0].function.arguments",
        ),
        (Api::OpenaiChat, json!({"id": "x"}), "choices"),
        (
            Api::OpenaiChat,
            json!({"choices": [], "usage": {"prompt_tokens": -1}}),
            "usage.prompt_tokens",
        ),
        (
            Api::OpenaiResponses,
            json!({"output": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
            "output[0].call_id",
        ),
        (
            Api::OpenaiResponses,
            json!({"output": [{"type": "message", "content": [{"type": "output_text"}]}]}),
            "output[0].content[0].text",
        ),
        (
            Api::Anthropic,
            json!({"content": [{"type": "tool_use", "name": "f", "input": {}}]}),
            "content[0].id",
        ),
        (Api::Anthropic, json!({"content": "text"}), "content"),
        (
            Api::Anthropic,
            json!({"content": [], "usage": {"input_tokens": "12"}}),
            "usage.input_tokens",
        ),
    ];
    for (api, body, field) in cases {
        match parse_reply(api, body.to_string().as_bytes()) {
            Err(ProviderError::Shape {
                field: got, record, ..
            }) => {
                assert_eq!(got, field, "{api}: {body}");
                assert_eq!(record, "reply body");
            }
            other => panic!("{api}: {body}: expected a shape error naming {field}, got {other:?}"),
        }
    }
}

#[test]
fn a_body_that_is_not_json_is_a_json_error() {
    for api in [Api::OpenaiChat, Api::OpenaiResponses, Api::Anthropic] {
        let e = parse_reply(api, b"{\"id\": ").unwrap_err();
        assert!(matches!(e, ProviderError::Json { .. }), "{api}: {e}");
        assert!(e.to_string().contains("reply body"), "{e}");
    }
}
