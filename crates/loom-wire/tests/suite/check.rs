//! Request checks: realistic requests pass; each broken one is refused naming its field.

use loom_wire::{check_request, RequestError};

use loom_core::Api;
use serde_json::{json, Value};

fn chat() -> Value {
    json!({
        "model": "gpt-4o",
        "stream": true,
        "stream_options": {"include_usage": true},
        "some_new_parameter": {"clients": "send these"},
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in src?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "list_dir", "arguments": "{\"path\":\"src\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_2", "content": "fn main() {}"},
            {"role": "system", "content": "A note between results is allowed."},
            {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "main.rs"}]},
            {"role": "assistant", "content": "src holds main.rs.", "refusal": null},
            {"role": "user", "content": "Thanks", "name": "ana"}
        ],
        "tools": [
            {"type": "function", "function": {"name": "list_dir", "description": "List", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "read_file", "strict": true}}
        ]
    })
}

fn responses() -> Value {
    json!({
        "model": "o4-mini",
        "instructions": "Be brief.",
        "reasoning": {"effort": "low", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "input": [
            {"role": "user", "content": "What is in src?"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And quickly."}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {"type": "function_call", "call_id": "call_1", "name": "list_dir", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "main.rs"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "main.rs"}]},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            {"type": "item_reference", "id": "msg_0"}
        ],
        "tools": [{"type": "function", "name": "list_dir", "parameters": {"type": "object"}}, {"type": "web_search"}]
    })
}

fn messages() -> Value {
    json!({
        "model": "claude-sonnet-4-20250514",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "thinking": {"type": "enabled", "budget_tokens": 512},
        "messages": [
            {"role": "user", "content": "What is in src?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "List it.", "signature": "EqQB"},
                {"type": "redacted_thinking", "data": "EmwK"},
                {"type": "text", "text": "Listing."},
                {"type": "tool_use", "id": "toolu_1", "name": "list_dir", "input": {"path": "src"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "fn main() {}"},
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "main.rs"}], "is_error": false},
                {"type": "text", "text": "Go on."}
            ]},
            {"role": "assistant", "content": ""}
        ],
        "tools": [
            {"name": "list_dir", "input_schema": {"type": "object"}},
            {"type": "custom", "name": "read_file", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
        ]
    })
}

/// Sets (or with `None`, removes) the value at a JSON pointer.
fn edit(mut body: Value, pointer: &str, value: Option<Value>) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let target = body
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("no {parent}"));
    match (target, value) {
        (Value::Object(o), Some(v)) => {
            o.insert(key.to_owned(), v);
        }
        (Value::Object(o), None) => {
            o.remove(key);
        }
        (Value::Array(a), Some(v)) => {
            let i: usize = key.parse().unwrap();
            if i == a.len() {
                a.push(v);
            } else {
                a[i] = v;
            }
        }
        (Value::Array(a), None) => {
            a.remove(key.parse().unwrap());
        }
        (other, _) => panic!("{pointer}: cannot edit {other}"),
    }
    body
}

fn refused(api: Api, body: &Value) -> RequestError {
    match check_request(api, body) {
        Err(e) => e,
        Ok(()) => panic!("expected the request to be refused: {body}"),
    }
}

#[test]
fn realistic_requests_pass() {
    check_request(Api::OpenaiChat, &chat()).unwrap();
    check_request(Api::OpenaiResponses, &responses()).unwrap();
    check_request(Api::Anthropic, &messages()).unwrap();
    check_request(
        Api::OpenaiResponses,
        &json!({"model": "gpt-4.1", "input": "Hi"}),
    )
    .unwrap();
    // A stored prompt may carry the model.
    check_request(
        Api::OpenaiResponses,
        &json!({"prompt": {"id": "pmpt_1"}, "input": "Hi"}),
    )
    .unwrap();
    // An output for a call in the stored conversation this request continues.
    let cont = json!({"model": "o4-mini", "previous_response_id": "resp_1",
        "input": [{"type": "function_call_output", "call_id": "call_9", "output": "ok"}]});
    check_request(Api::OpenaiResponses, &cont).unwrap();
    // `max_tokens: 0` warms Anthropic's prompt cache without a reply (the conformance suite's
    // generated requests found it refused).
    check_request(
        Api::Anthropic,
        &edit(messages(), "/max_tokens", Some(json!(0))),
    )
    .unwrap();
    // An item reference may leave out its `type` (found refused the same way).
    check_request(
        Api::OpenaiResponses,
        &json!({"model": "gpt-5", "input": [
            {"role": "user", "content": "hi"}, {"id": "msg_0123"}]}),
    )
    .unwrap();
    // Chat: calls still pending at the end are refused, as OpenAI refuses them (each call must
    // be followed by its result).
    let pending = edit(
        chat(),
        "/messages/3",
        Some(json!({"role": "assistant", "content": "x"})),
    );
    let pending = edit(pending, "/messages/7", None);
    let pending = edit(pending, "/messages/6", None);
    let pending = edit(pending, "/messages/5", None);
    let pending = edit(pending, "/messages/4", None);
    let pending = edit(pending, "/messages/3", None);
    let err = check_request(Api::OpenaiChat, &pending).unwrap_err();
    assert!(err.field.starts_with("messages[2].tool_calls"), "{err}");
    assert!(err.reason.contains("the end of the messages"), "{err}");
}

#[test]
fn chat_refusals_name_the_field() {
    let cases: Vec<(Value, &str)> = vec![
        (json!([]), ""),
        (edit(chat(), "/model", None), "model"),
        (edit(chat(), "/model", Some(json!(4))), "model"),
        (edit(chat(), "/messages", Some(json!([]))), "messages"),
        (
            edit(chat(), "/messages/1", Some(json!("hi"))),
            "messages[1]",
        ),
        (
            edit(chat(), "/messages/1/role", Some(json!("robot"))),
            "messages[1].role",
        ),
        (
            edit(chat(), "/messages/1/content", None),
            "messages[1].content",
        ),
        (
            edit(chat(), "/messages/1/content", Some(json!([]))),
            "messages[1].content",
        ),
        (
            edit(chat(), "/messages/1/content", Some(json!(7))),
            "messages[1].content",
        ),
        (
            edit(chat(), "/messages/1/content/0/text", None),
            "messages[1].content[0].text",
        ),
        (
            edit(chat(), "/messages/1/content/1/image_url", Some(json!({}))),
            "messages[1].content[1].image_url.url",
        ),
        (
            edit(
                chat(),
                "/messages/0/content",
                Some(json!([{"type": "image_url", "image_url": {"url": "x"}}])),
            ),
            "messages[0].content[0].type",
        ),
        (
            edit(chat(), "/messages/2/tool_calls", None),
            "messages[2].content",
        ),
        (
            edit(chat(), "/messages/2/tool_calls", Some(json!([]))),
            "messages[2].tool_calls",
        ),
        (
            edit(chat(), "/messages/2/tool_calls/0/id", Some(json!(1))),
            "messages[2].tool_calls[0].id",
        ),
        (
            edit(chat(), "/messages/2/tool_calls/0/type", Some(json!("tool"))),
            "messages[2].tool_calls[0].type",
        ),
        (
            edit(chat(), "/messages/2/tool_calls/0/function/name", None),
            "messages[2].tool_calls[0].function.name",
        ),
        (
            edit(
                chat(),
                "/messages/2/tool_calls/0/function/arguments",
                Some(json!({})),
            ),
            "messages[2].tool_calls[0].function.arguments",
        ),
        // OpenAI takes an id twice in one turn (results answer in order), but then no call
        // is left for the result that names the id that is gone.
        (
            edit(chat(), "/messages/2/tool_calls/1/id", Some(json!("call_1"))),
            "messages[3].tool_call_id",
        ),
        (
            edit(chat(), "/messages/3/tool_call_id", None),
            "messages[3].tool_call_id",
        ),
        (
            edit(chat(), "/messages/3/tool_call_id", Some(json!("call_7"))),
            "messages[3].tool_call_id",
        ),
        (
            edit(chat(), "/messages/5/tool_call_id", Some(json!("call_2"))),
            "messages[5].tool_call_id",
        ),
        // The user speaks before call_1 has its result.
        (
            edit(
                chat(),
                "/messages/5",
                Some(json!({"role": "user", "content": "hurry"})),
            ),
            "messages[2].tool_calls[0].id",
        ),
        (
            edit(chat(), "/messages/7/name", Some(json!(5))),
            "messages[7].name",
        ),
        (
            edit(chat(), "/tools/0/function/name", Some(json!("list dir"))),
            "tools[0].function.name",
        ),
        (
            edit(
                chat(),
                "/tools/0/function/parameters",
                Some(json!("object")),
            ),
            "tools[0].function.parameters",
        ),
        (edit(chat(), "/tools/1/function", None), "tools[1].function"),
        (edit(chat(), "/tools", Some(json!({}))), "tools"),
    ];
    for (body, field) in cases {
        let e = refused(Api::OpenaiChat, &body);
        assert_eq!(e.field, field, "{e}");
    }
}

#[test]
fn responses_refusals_name_the_field() {
    let cases: Vec<(Value, &str)> = vec![
        (edit(responses(), "/model", None), "model"),
        (edit(responses(), "/input", Some(json!(5))), "input"),
        (
            edit(responses(), "/instructions", Some(json!(["x"]))),
            "instructions",
        ),
        (
            edit(responses(), "/conversation", Some(json!(3))),
            "conversation",
        ),
        (
            edit(responses(), "/input/0/role", Some(json!("tool"))),
            "input[0].role",
        ),
        (
            edit(responses(), "/input/0/content", None),
            "input[0].content",
        ),
        (
            edit(responses(), "/input/1/content/0/text", None),
            "input[1].content[0].text",
        ),
        (
            edit(responses(), "/input/2/summary", None),
            "input[2].summary",
        ),
        (
            edit(responses(), "/input/3/call_id", None),
            "input[3].call_id",
        ),
        (
            edit(responses(), "/input/3/arguments", Some(json!({}))),
            "input[3].arguments",
        ),
        (
            edit(responses(), "/input/4/call_id", Some(json!("call_x"))),
            "input[4].call_id",
        ),
        (
            edit(responses(), "/input/4/output", None),
            "input[4].output",
        ),
        (
            edit(responses(), "/input/6", Some(json!({"status": "x"}))),
            "input[6].type",
        ),
        (
            edit(
                responses(),
                "/input/8",
                Some(
                    json!({"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}),
                ),
            ),
            "input[8].call_id",
        ),
        (
            edit(
                responses(),
                "/input/8",
                Some(
                    json!({"type": "function_call_output", "call_id": "call_1", "output": "again"}),
                ),
            ),
            "input[8].call_id",
        ),
        (
            edit(responses(), "/tools/0/name", Some(json!("a.b"))),
            "tools[0].name",
        ),
        (edit(responses(), "/tools/1/type", None), "tools[1].type"),
    ];
    for (body, field) in cases {
        let e = refused(Api::OpenaiResponses, &body);
        assert_eq!(e.field, field, "{e}");
    }
}

#[test]
fn messages_refusals_name_the_field() {
    let cases: Vec<(Value, &str)> = vec![
        (edit(messages(), "/model", Some(json!(""))), "model"),
        (edit(messages(), "/max_tokens", None), "max_tokens"),
        (
            edit(messages(), "/max_tokens", Some(json!(-1))),
            "max_tokens",
        ),
        (
            edit(messages(), "/max_tokens", Some(json!(1.5))),
            "max_tokens",
        ),
        (
            edit(messages(), "/max_tokens", Some(json!("1024"))),
            "max_tokens",
        ),
        (edit(messages(), "/system", Some(json!(5))), "system"),
        (
            edit(messages(), "/system/0/type", Some(json!("image"))),
            "system[0].type",
        ),
        (edit(messages(), "/messages", Some(json!([]))), "messages"),
        (
            edit(messages(), "/messages/0/role", Some(json!(5))),
            "messages[0].role",
        ),
        (
            edit(messages(), "/messages/0/content", Some(json!(""))),
            "messages[0].content",
        ),
        (
            edit(messages(), "/messages/0/content", Some(json!([]))),
            "messages[0].content",
        ),
        (
            edit(messages(), "/messages/1/content/2/text", Some(json!(""))),
            "messages[1].content[2].text",
        ),
        (
            edit(messages(), "/messages/1/content/0/signature", None),
            "messages[1].content[0].signature",
        ),
        (
            edit(messages(), "/messages/1/content/1/data", Some(json!(1))),
            "messages[1].content[1].data",
        ),
        (
            edit(messages(), "/messages/1/content/3/input", Some(json!("{}"))),
            "messages[1].content[3].input",
        ),
        (
            edit(
                messages(),
                "/messages/1/content/4/id",
                Some(json!("toolu_1")),
            ),
            "messages[1].content[4].id",
        ),
        (
            edit(
                messages(),
                "/messages/2/content/0/tool_use_id",
                Some(json!("toolu_9")),
            ),
            "messages[2].content[0].tool_use_id",
        ),
        (
            edit(messages(), "/messages/2/content/1/content", Some(json!(3))),
            "messages[2].content[1].content",
        ),
        // toolu_1 is never answered in the next user message.
        (
            edit(messages(), "/messages/2/content/1", None),
            "messages[1].content[3].id",
        ),
        // Answers to a tool_use of an older assistant message.
        (
            edit(
                edit(
                    messages(),
                    "/messages/3",
                    Some(json!({"role": "assistant", "content": "Done."})),
                ),
                "/messages/4",
                Some(
                    json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}),
                ),
            ),
            "messages[4].content[0].tool_use_id",
        ),
        // An assistant message follows one whose calls were never answered.
        (
            edit(
                messages(),
                "/messages/2",
                Some(json!({"role": "assistant", "content": "more"})),
            ),
            "messages[1].content[3].id",
        ),
        (
            edit(
                messages(),
                "/messages/0/content",
                Some(json!([{"type": "tool_use", "id": "t", "name": "f", "input": {}}])),
            ),
            "messages[0].content[0].type",
        ),
        (
            edit(messages(), "/tools/0/input_schema", None),
            "tools[0].input_schema",
        ),
        (edit(messages(), "/tools/2/name", None), "tools[2].name"),
    ];
    for (body, field) in cases {
        let e = refused(Api::Anthropic, &body);
        assert_eq!(e.field, field, "{e}");
    }
}

#[test]
fn an_empty_message_is_refused_unless_it_is_the_final_assistant_prefill() {
    let mid = edit(messages(), "/messages/1/content", Some(json!([])));
    assert_eq!(refused(Api::Anthropic, &mid).field, "messages[1].content");
    let last_user = edit(
        messages(),
        "/messages/3",
        Some(json!({"role": "user", "content": ""})),
    );
    assert_eq!(
        refused(Api::Anthropic, &last_user).field,
        "messages[3].content"
    );
}

#[test]
fn reasons_are_readable() {
    let e = refused(
        Api::OpenaiChat,
        &edit(chat(), "/messages/3/tool_call_id", Some(json!("call_7"))),
    );
    assert_eq!(e.reason, "answers no earlier call: no call has id `call_7`");
    assert_eq!(
        e.to_string(),
        "messages[3].tool_call_id: answers no earlier call: no call has id `call_7`"
    );
}

/// Every node of a value, as JSON pointers.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(o) => {
            for (k, v) in o {
                pointers(v, format!("{at}/{k}"), out);
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                pointers(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

#[test]
fn any_node_replaced_by_any_value_never_panics() {
    let replacements = [
        json!(null),
        json!(0),
        json!(-1),
        json!(""),
        json!("x"),
        json!([]),
        json!({}),
        json!(true),
    ];
    for (api, body) in [
        (Api::OpenaiChat, chat()),
        (Api::OpenaiResponses, responses()),
        (Api::Anthropic, messages()),
    ] {
        let mut all = Vec::new();
        pointers(&body, String::new(), &mut all);
        for pointer in all.iter().filter(|p| !p.is_empty()) {
            for r in &replacements {
                let edited = edit(body.clone(), pointer, Some(r.clone()));
                // Refused or not, with a field that exists in the path syntax: never a panic.
                if let Err(e) = check_request(api, &edited) {
                    assert!(!e.reason.is_empty(), "{pointer}: {e}");
                }
            }
            let removed = edit(body.clone(), pointer, None);
            let _ = check_request(api, &removed);
        }
    }
}

#[test]
fn a_responses_call_without_its_output_and_a_stream_flag_that_is_not_a_boolean_are_refused() {
    let unanswered = json!({"model": "gpt-4o", "input": [
        {"role": "user", "content": "read it"},
        {"type": "function_call", "call_id": "call_0", "name": "read_file", "arguments": "{}"}
    ]});
    let err = check_request(Api::OpenaiResponses, &unanswered).unwrap_err();
    assert_eq!(err.field, "input[1].call_id");
    assert!(err.reason.contains("no tool output found"), "{err}");
    // Continuing a stored conversation, the output may come in a later request.
    let mut continued = unanswered.clone();
    continued["previous_response_id"] = json!("resp_1");
    check_request(Api::OpenaiResponses, &continued).unwrap();
    for api in [Api::OpenaiChat, Api::OpenaiResponses, Api::Anthropic] {
        let mut body = match api {
            Api::OpenaiChat => chat(),
            Api::OpenaiResponses => responses(),
            Api::Anthropic => messages(),
            // Gemini names a stream by its path (`:streamGenerateContent`), not a field.
            Api::Gemini => continue,
        };
        body["stream"] = json!("yes");
        let err: RequestError = check_request(api, &body).unwrap_err();
        assert_eq!(err.field, "stream", "{api:?}");
    }
}

/// Found by the proxy's property tests: Anthropic refuses a tool without a name, so Loom's check
/// must too, before anything is forwarded.
#[test]
fn an_anthropic_tool_without_a_name_is_refused() {
    let body = json!({"model": "m", "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "", "input_schema": {"type": "object"}}]});
    let e = refused(Api::Anthropic, &body);
    assert_eq!(e.field, "tools[0].name", "{e}");
}
