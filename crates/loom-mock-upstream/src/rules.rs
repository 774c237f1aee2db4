//! The providers' rules for a conversation's tool calls, enforced as they enforce them: every
//! call answered by a result right after it, no result without its call, and (Anthropic, with
//! thinking on) the assistant turn that called the tools opening with its thinking. A request
//! that breaks one gets the 400 the provider would send, so a client that renders histories
//! (Loom's `fit`) is caught producing one that the real API would refuse.

use serde_json::{Map, Value};

use crate::error::{MockError, Result};
use crate::request::{self, Api};

/// Checks the tool-call rules of `api` on a body whose basic shape has been read already.
pub(crate) fn check(api: Api, body: &Map<String, Value>, thinking: bool) -> Result<()> {
    let record = request::record(api);
    match api {
        Api::OpenaiChat => chat(record, items(body, "messages")),
        Api::OpenaiResponses => {
            // With `previous_response_id` the earlier calls live on the server, out of sight.
            if body
                .get("previous_response_id")
                .is_some_and(Value::is_string)
            {
                return Ok(());
            }
            responses(record, items(body, "input"))
        }
        Api::Anthropic => messages(record, items(body, "messages"), thinking),
        Api::Gemini => gemini(record, items(body, "contents")),
    }
}

/// Gemini: a `functionResponse` answers a `functionCall` of the model content right before it
/// (by id, or by name when the call has none); every call is answered in the user content right
/// after it; and in the current turn (the contents after the last user text), the first
/// `functionCall` of each model content carries its `thoughtSignature` exactly as the mock gave
/// it, as Gemini 3 requires.
fn gemini(record: &'static str, contents: &[Value]) -> Result<()> {
    let parts = |c: &Value| -> Vec<Value> {
        c.get("parts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let role = |c: &Value| {
        c.get("role")
            .and_then(Value::as_str)
            .unwrap_or("user")
            .to_owned()
    };
    // Where the current turn starts: after the last user content with text.
    let turn = contents
        .iter()
        .rposition(|c| role(c) == "user" && parts(c).iter().any(|p| p.get("text").is_some()))
        .map_or(0, |i| i + 1);
    let mut pending: Vec<(String, usize)> = Vec::new();
    for (i, c) in contents.iter().enumerate() {
        let at = format!("contents[{i}]");
        let parts = parts(c);
        if role(c) == "model" {
            if let Some((key, from)) = pending.first() {
                return Err(unanswered(record, key, *from));
            }
            let mut first = true;
            for (j, p) in parts.iter().enumerate() {
                let Some(call) = p.get("functionCall") else {
                    continue;
                };
                let name = id_at(
                    record,
                    call,
                    "name",
                    &format!("{at}.parts[{j}].functionCall"),
                )?;
                let id = call.get("id").and_then(Value::as_str);
                if first && i >= turn {
                    let signature = p.get("thoughtSignature").and_then(Value::as_str);
                    match (signature, id) {
                        (None, _) => {
                            return Err(MockError::field(
                                record,
                                format!("{at}.parts[{j}]"),
                                "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance.",
                            ))
                        }
                        (Some(s), Some(id)) if s != crate::gemini::call_signature(id) => {
                            return Err(MockError::field(
                                record,
                                format!("{at}.parts[{j}].thoughtSignature"),
                                "Corrupted thought signature.",
                            ))
                        }
                        _ => {}
                    }
                }
                first = false;
                pending.push((id.unwrap_or(name).to_owned(), i));
            }
        } else {
            for (j, p) in parts.iter().enumerate() {
                let Some(response) = p.get("functionResponse") else {
                    continue;
                };
                let path = format!("{at}.parts[{j}].functionResponse");
                let name = id_at(record, response, "name", &path)?;
                let key = response.get("id").and_then(Value::as_str).unwrap_or(name);
                match pending.iter().position(|(k, _)| k == key) {
                    Some(n) => {
                        pending.remove(n);
                    }
                    None => {
                        return Err(MockError::field(
                            record,
                            path,
                            format!("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn (no call `{key}` waits for a response)."),
                        ))
                    }
                }
            }
            if let Some((key, from)) = pending.first() {
                return Err(unanswered(record, key, *from));
            }
        }
    }
    match pending.first() {
        Some((key, from)) => Err(unanswered(record, key, *from)),
        None => Ok(()),
    }
}

/// The error for a Gemini call left without its response.
fn unanswered(record: &'static str, key: &str, from: usize) -> MockError {
    MockError::field(
        record,
        format!("contents[{from}]"),
        format!("Please ensure that function call turn comes immediately after a user turn or after a function response turn, and every call is answered (call `{key}` has no function response)."),
    )
}

/// The array under `field`, or nothing.
fn items<'a>(body: &'a Map<String, Value>, field: &str) -> &'a [Value] {
    body.get(field)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// A string field of `value`, or an error naming it.
fn id_at<'a>(record: &'static str, value: &'a Value, key: &str, at: &str) -> Result<&'a str> {
    value
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| MockError::field(record, format!("{at}.{key}"), "expected a string"))
}

/// OpenAI Chat: an assistant message's `tool_calls` are answered by the `tool` messages that
/// follow it, before any other message; a `tool` message answers a pending call.
fn chat(record: &'static str, messages: &[Value]) -> Result<()> {
    let mut pending: Vec<&str> = Vec::new();
    let mut caller = 0;
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        if role == "tool" {
            let id = id_at(record, message, "tool_call_id", &format!("messages[{i}]"))?;
            match pending.iter().position(|p| *p == id) {
                Some(at) => {
                    pending.remove(at);
                }
                None => {
                    return Err(MockError::field(
                        record,
                        format!("messages[{i}].role"),
                        format!("messages with role 'tool' must be a response to a preceding message with 'tool_calls' (no pending call has id {id:?})"),
                    ))
                }
            }
            continue;
        }
        unanswered_chat(record, &pending, caller)?;
        if role == "assistant" {
            let calls = message.get("tool_calls").and_then(Value::as_array);
            for (j, call) in calls.into_iter().flatten().enumerate() {
                pending.push(id_at(
                    record,
                    call,
                    "id",
                    &format!("messages[{i}].tool_calls[{j}]"),
                )?);
            }
            caller = i;
        }
    }
    unanswered_chat(record, &pending, caller)
}

/// The error for Chat tool calls left without their tool messages.
fn unanswered_chat(record: &'static str, pending: &[&str], caller: usize) -> Result<()> {
    if pending.is_empty() {
        return Ok(());
    }
    Err(MockError::field(
        record,
        format!("messages[{caller}]"),
        format!(
            "an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'; these did not have response messages: {}",
            pending.join(", ")
        ),
    ))
}

/// OpenAI Responses: a `function_call_output` answers an earlier `function_call` with the same
/// `call_id`, and every `function_call` is answered.
fn responses(record: &'static str, input: &[Value]) -> Result<()> {
    let mut calls: Vec<(&str, usize, bool)> = Vec::new();
    for (i, item) in input.iter().enumerate() {
        let at = format!("input[{i}]");
        match item.get("type").and_then(Value::as_str) {
            Some("function_call" | "custom_tool_call") => {
                calls.push((id_at(record, item, "call_id", &at)?, i, false));
            }
            Some("function_call_output" | "custom_tool_call_output") => {
                let id = id_at(record, item, "call_id", &at)?;
                match calls.iter_mut().find(|(call, _, _)| *call == id) {
                    Some(call) => call.2 = true,
                    None => {
                        return Err(MockError::field(
                            record,
                            format!("{at}.call_id"),
                            format!(
                                "no tool call found for function call output with call_id {id}"
                            ),
                        ))
                    }
                }
            }
            _ => {}
        }
    }
    match calls.iter().find(|(_, _, answered)| !answered) {
        Some((id, i, _)) => Err(MockError::field(
            record,
            format!("input[{i}]"),
            format!("no tool output found for function call {id}"),
        )),
        None => Ok(()),
    }
}

/// The content blocks of a message (none when the content is a string).
fn blocks(message: &Value) -> &[Value] {
    message
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The ids of `block_type` blocks in a message, read from `key`.
fn block_ids<'a>(
    record: &'static str,
    message: &'a Value,
    i: usize,
    block_type: &str,
    key: &str,
) -> Result<Vec<&'a str>> {
    let mut ids = Vec::new();
    for (j, block) in blocks(message).iter().enumerate() {
        if block.get("type").and_then(Value::as_str) == Some(block_type) {
            ids.push(id_at(
                record,
                block,
                key,
                &format!("messages[{i}].content[{j}]"),
            )?);
        }
    }
    Ok(ids)
}

/// Anthropic Messages: the `tool_use` blocks of an assistant message are answered by
/// `tool_result` blocks in the next message, which answers nothing else; with thinking on,
/// the assistant message whose tools are being answered must open with its thinking.
fn messages(record: &'static str, messages: &[Value], thinking: bool) -> Result<()> {
    let mut previous_uses: Vec<&str> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        let results = if role == "user" {
            block_ids(record, message, i, "tool_result", "tool_use_id")?
        } else {
            Vec::new()
        };
        if let Some(id) = results.iter().find(|id| !previous_uses.contains(id)) {
            return Err(MockError::field(
                record,
                format!("messages[{i}]"),
                format!("unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."),
            ));
        }
        let missing: Vec<&str> = previous_uses
            .iter()
            .copied()
            .filter(|id| !results.contains(id))
            .collect();
        if !missing.is_empty() {
            return Err(MockError::field(
                record,
                format!("messages[{i}]"),
                format!("`tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", missing.join(", ")),
            ));
        }
        previous_uses = if role == "assistant" {
            block_ids(record, message, i, "tool_use", "id")?
        } else {
            Vec::new()
        };
    }
    let answering = messages.len().checked_sub(2).filter(|_| {
        messages.last().is_some_and(|last| {
            blocks(last)
                .iter()
                .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        })
    });
    if let (true, Some(i)) = (thinking, answering) {
        let first = blocks(&messages[i])
            .first()
            .and_then(|b| b.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("text");
        if first != "thinking" && first != "redacted_thinking" {
            return Err(MockError::field(
                record,
                format!("messages[{i}].content[0].type"),
                format!("expected `thinking` or `redacted_thinking`, but found `{first}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block."),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field_of(api: Api, body: Value, thinking: bool) -> Option<String> {
        let body = body.as_object().cloned().unwrap_or_default();
        match check(api, &body, thinking) {
            Ok(()) => None,
            Err(MockError::BadField { field, .. }) => Some(field),
            Err(other) => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn chat_pairing() {
        let call = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}, {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]});
        let user = json!({"role": "user", "content": "u"});
        let result = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "r"});
        let ok = json!({"messages": [user, call, result("c2"), result("c1"), user]});
        assert_eq!(field_of(Api::OpenaiChat, ok, false), None);
        let missing = json!({"messages": [user, call, result("c1"), user]});
        assert_eq!(
            field_of(Api::OpenaiChat, missing, false).as_deref(),
            Some("messages[1]")
        );
        let trailing = json!({"messages": [user, call]});
        assert_eq!(
            field_of(Api::OpenaiChat, trailing, false).as_deref(),
            Some("messages[1]")
        );
        let orphan = json!({"messages": [user, result("c9")]});
        assert_eq!(
            field_of(Api::OpenaiChat, orphan, false).as_deref(),
            Some("messages[1].role")
        );
    }

    #[test]
    fn responses_pairing() {
        let call =
            json!({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"});
        let out = |id: &str| json!({"type": "function_call_output", "call_id": id, "output": "r"});
        assert_eq!(
            field_of(
                Api::OpenaiResponses,
                json!({"input": ["x", call, out("c1")]}),
                false
            ),
            None
        );
        assert_eq!(
            field_of(Api::OpenaiResponses, json!({"input": [call]}), false).as_deref(),
            Some("input[0]")
        );
        assert_eq!(
            field_of(
                Api::OpenaiResponses,
                json!({"input": [call, out("c2")]}),
                false
            )
            .as_deref(),
            Some("input[1].call_id")
        );
        assert_eq!(
            field_of(
                Api::OpenaiResponses,
                json!({"input": [out("c2")], "previous_response_id": "resp_1"}),
                false
            ),
            None
        );
    }

    #[test]
    fn messages_pairing_and_thinking() {
        let user = json!({"role": "user", "content": "u"});
        let uses = |first: Value| json!({"role": "assistant", "content": [first, {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]});
        let thought = json!({"type": "thinking", "thinking": "hm", "signature": "s"});
        let text = json!({"type": "text", "text": "let me look"});
        let result = |id: &str| json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "r"}]});
        assert_eq!(
            field_of(
                Api::Anthropic,
                json!({"messages": [user, uses(thought.clone()), result("t1")]}),
                true
            ),
            None
        );
        assert_eq!(
            field_of(
                Api::Anthropic,
                json!({"messages": [user, uses(text.clone()), result("t1")]}),
                false
            ),
            None
        );
        assert_eq!(
            field_of(
                Api::Anthropic,
                json!({"messages": [user, uses(text.clone()), result("t1")]}),
                true
            )
            .as_deref(),
            Some("messages[1].content[0].type")
        );
        assert_eq!(
            field_of(
                Api::Anthropic,
                json!({"messages": [user, uses(text.clone()), user]}),
                false
            )
            .as_deref(),
            Some("messages[2]")
        );
        assert_eq!(
            field_of(
                Api::Anthropic,
                json!({"messages": [user, uses(text), result("t2")]}),
                false
            )
            .as_deref(),
            Some("messages[2]")
        );
        assert_eq!(
            field_of(Api::Anthropic, json!({"messages": [result("t1")]}), false).as_deref(),
            Some("messages[0]")
        );
    }
}
