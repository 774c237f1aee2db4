use serde_json::{json, Value};

use super::*;
use crate::{Encoding, Tokenizer};

const TILE: ImageRule = ImageRule::OpenAiTile {
    base: 85,
    per_tile: 170,
};

fn chat(enc: Encoding, body: &Value) -> RequestCount {
    count_request(Api::OpenaiChat, body, &Tokenizer::Bpe(enc), &TILE).unwrap()
}

/// The cookbook's example ("How to count tokens with tiktoken"), whose published counts are
/// also what the API reported: 124 prompt tokens for gpt-4o, 129 for gpt-4 / gpt-3.5-turbo.
fn cookbook_messages() -> Value {
    json!([
        {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
        {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
        {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
        {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
        {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to do better."},
        {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client deliverable."}
    ])
}

#[test]
fn openai_chat_matches_the_cookbook_messages() {
    let body = json!({"model": "gpt-4o", "messages": cookbook_messages()});
    assert_eq!(chat(Encoding::O200kBase, &body).total(), 124);
    assert_eq!(chat(Encoding::Cl100kBase, &body).total(), 129);
}

#[test]
fn openai_chat_matches_the_cookbook_tools() {
    // Cookbook: 101 prompt tokens for gpt-4o, 105 for gpt-3.5-turbo / gpt-4.
    let body = json!({
        "messages": [
            {"role": "system", "content": "You are a helpful assistant that can answer to questions about the weather."},
            {"role": "user", "content": "What's the weather like in San Francisco?"}
        ],
        "tools": [{"type": "function", "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {"type": "object", "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "description": "The unit of temperature to return", "enum": ["celsius", "fahrenheit"]}
            }, "required": ["location"]}
        }}]
    });
    assert_eq!(chat(Encoding::O200kBase, &body).total(), 101);
    assert_eq!(chat(Encoding::Cl100kBase, &body).total(), 105);
}

#[test]
fn openai_chat_counts_tool_calls_without_ids() {
    let enc = Encoding::O200kBase;
    let args = "{\"command\":\"ls -la /tmp\"}";
    let with_call = |id: &str| {
        json!({"messages": [
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": id, "type": "function", "function": {"name": "bash", "arguments": args}}
            ]},
            {"role": "tool", "tool_call_id": id, "content": "total 0"}
        ]})
    };
    let c = chat(enc, &with_call("call_1"));
    assert_eq!(
        c.tool_calls,
        3 + enc.count("bash") as u64 + enc.count(args) as u64
    );
    assert_eq!(
        c.messages,
        (enc.count("assistant") + enc.count("tool") + enc.count("total 0")) as u64
    );
    assert_eq!(c.overhead, 3 + 3 + 3);
    // Ids are not shown to the model: a longer id costs nothing.
    assert_eq!(
        chat(
            enc,
            &with_call("call_with_a_much_longer_identifier_0123456789")
        ),
        c
    );
}

#[test]
fn openai_chat_counts_images_by_rule_not_as_text() {
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    png.extend(1024u32.to_be_bytes());
    png.extend(1024u32.to_be_bytes());
    png.extend([0u8; 4000]);
    let url = format!(
        "data:image/png;base64,{}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &png)
    );
    let body = json!({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": url, "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}}
    ]}]});
    let c = chat(Encoding::O200kBase, &body);
    assert_eq!(c.images, 765 + 85);
    assert!(
        c.messages < 20,
        "the base64 payload must not be counted as text: {c:?}"
    );
}

#[test]
fn malformed_bodies_name_the_field() {
    let t = Tokenizer::Bpe(Encoding::O200kBase);
    let cases = [
        (Api::OpenaiChat, json!({}), "`messages`"),
        (
            Api::OpenaiChat,
            json!({"messages": [{"content": "x"}]}),
            "messages[0].role",
        ),
        (
            Api::OpenaiChat,
            json!({"messages": [{"role": "user", "content": 5}]}),
            "messages[0].content",
        ),
        (
            Api::Anthropic,
            json!({"messages": [{"role": "user", "content": [{"text": "x"}]}]}),
            "messages[0].content[0].type",
        ),
        (Api::OpenaiResponses, json!({"input": 3}), "`input`"),
    ];
    for (format, body, field) in cases {
        let err = count_request(format, &body, &t, &TILE).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(field) && msg.contains(format.as_str()),
            "{msg}"
        );
    }
}

#[test]
fn anthropic_counts_blocks_tools_and_the_tool_prompt() {
    let t = Tokenizer::Bpe(Encoding::O200kBase);
    let n = |s: &str| t.count(s);
    let tool = json!({"name": "get_weather", "description": "Weather for a city", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}});
    let body = json!({
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Call the tool.", "signature": "xyz"},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "18C, clear"}]}
        ],
        "tools": [tool.clone()]
    });
    let c = count_request(Api::Anthropic, &body, &t, &ImageRule::Anthropic).unwrap();
    assert_eq!(
        c.messages,
        n("Be brief.") + n("Weather in Paris?") + n("Call the tool.")
    );
    assert_eq!(
        c.tool_calls,
        3 + n("get_weather") + n("{\"city\":\"Paris\"}") + 3 + n("18C, clear")
    );
    let schema = tool["input_schema"].to_string();
    assert_eq!(
        c.tools,
        3 + n("get_weather") + n("Weather for a city") + n(&schema) + 346
    );
    assert_eq!(c.overhead, 9);
    let mut forced = body.clone();
    forced["tool_choice"] = json!({"type": "any"});
    let f = count_request(Api::Anthropic, &forced, &t, &ImageRule::Anthropic).unwrap();
    assert_eq!(c.tools - f.tools, 346 - 313);
}

#[test]
fn responses_items_are_counted_like_chat_messages() {
    let t = Tokenizer::Bpe(Encoding::O200kBase);
    let n = |s: &str| t.count(s);
    let body = json!({
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "List files"}]},
            {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{\"cmd\":\"ls\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"}
        ],
        "tools": [{"type": "function", "name": "bash", "description": "Run a command", "parameters": {"type": "object", "properties": {}}}]
    });
    let c = count_request(Api::OpenaiResponses, &body, &t, &TILE).unwrap();
    assert_eq!(
        c.messages,
        n("developer") + n("Be brief.") + n("user") + n("List files")
    );
    assert_eq!(
        c.tool_calls,
        3 + n("bash") + n("{\"cmd\":\"ls\"}") + 3 + n("a.txt")
    );
    assert_eq!(c.tools, 7 + n("bash:Run a command") + 12);
    assert_eq!(c.overhead, 3 + 3 + 3);
    let plain = json!({"input": "hello"});
    let p = count_request(Api::OpenaiResponses, &plain, &t, &TILE).unwrap();
    assert_eq!(p.total(), 3 + n("user") + n("hello") + 3);
}

#[test]
fn estimated_counters_are_flagged_inexact() {
    let body = json!({"messages": cookbook_messages()});
    let est = Tokenizer::Estimate(crate::Calibration::default());
    let c = count_request(Api::OpenaiChat, &body, &est, &TILE).unwrap();
    assert!(!c.exact);
    assert!(chat(Encoding::O200kBase, &body).exact);
}

/// Shapes the conformance suite found refused: a Chat call to a custom tool, a Responses item
/// reference without its `type`.
#[test]
fn custom_tool_calls_and_item_references_are_counted() {
    let enc = Encoding::O200kBase;
    let custom = json!({"messages": [
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c", "type": "custom", "custom": {"name": "apply_patch", "input": "*** patch"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "applied"}
    ]});
    assert!(chat(enc, &custom).tool_calls > 0);
    let reference = json!({"input": [{"role": "user", "content": "hi"}, {"id": "msg_1"}]});
    count_request(
        Api::OpenaiResponses,
        &reference,
        &Tokenizer::Bpe(enc),
        &TILE,
    )
    .unwrap();
}
