//! Provider validity rules, checked on request bodies.
//!
//! The pipeline cannot produce an orphaned call or result by construction; these checks are the
//! independent witness (property tests run them over random logs and policies) and let `loom
//! replay` count violations in baselines that are not built that way.

use std::collections::BTreeSet;

use serde_json::Value;

use super::format::Format;

/// A way a request body breaks its provider's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    /// A call has no result where the provider requires one.
    #[error("message {index}: tool call `{id}` has no result after it")]
    OrphanCall {
        /// Index of the message holding the call.
        index: usize,
        /// Call id.
        id: String,
    },
    /// A result answers no call that precedes it as required.
    #[error("message {index}: tool result `{id}` answers no preceding call")]
    OrphanResult {
        /// Index of the message holding the result.
        index: usize,
        /// Call id it names.
        id: String,
    },
    /// Anything else malformed.
    #[error("message {index}: {reason}")]
    Malformed {
        /// Index of the offending message (0 for the body itself).
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

impl Violation {
    /// Whether this is an orphaned call or result.
    pub fn is_orphan(&self) -> bool {
        matches!(self, Self::OrphanCall { .. } | Self::OrphanResult { .. })
    }
}

fn malformed(index: usize, reason: impl Into<String>) -> Violation {
    Violation::Malformed {
        index,
        reason: reason.into(),
    }
}

/// Checks a body against the rules of its format.
pub fn check_request(format: Format, body: &Value) -> Result<(), Violation> {
    match format {
        Format::OPENAI_CHAT => check_chat(body),
        Format::OPENAI_RESPONSES => check_responses(body),
        Format::ANTHROPIC => check_anthropic(body),
        Format::GEMINI => check_gemini(body),
        Format::React => match body.get("prompt") {
            Some(Value::String(s)) if !s.is_empty() => Ok(()),
            _ => Err(malformed(0, "`prompt` must be a non-empty string")),
        },
    }
}

fn array<'a>(body: &'a Value, key: &str) -> Result<&'a Vec<Value>, Violation> {
    body.get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| malformed(0, format!("`{key}` must be an array")))
}

fn str_field<'a>(v: &'a Value, key: &str, index: usize) -> Result<&'a str, Violation> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| malformed(index, format!("`{key}` must be a string")))
}

/// A tool message's `content`: a string, or a non-empty list of text parts (Chat Completions
/// takes both; qwen-code sends the parts).
fn text_or_parts(content: Option<&Value>, index: usize) -> Result<(), Violation> {
    match content {
        Some(Value::String(_)) => Ok(()),
        Some(Value::Array(parts))
            if !parts.is_empty()
                && parts.iter().all(|p| {
                    p.get("type").and_then(Value::as_str) == Some("text")
                        && p.get("text").is_some_and(Value::is_string)
                }) =>
        {
            Ok(())
        }
        _ => Err(malformed(
            index,
            "`content` must be a string or a list of text parts",
        )),
    }
}

/// OpenAI Chat: each assistant message's calls are answered by the tool messages that follow it
/// immediately, one each; no tool message without such a call.
pub fn check_chat(body: &Value) -> Result<(), Violation> {
    let messages = array(body, "messages")?;
    if messages.is_empty() {
        return Err(malformed(0, "`messages` must not be empty"));
    }
    let mut open: Vec<String> = Vec::new();
    let mut open_at = 0;
    for (i, m) in messages.iter().enumerate() {
        let role = str_field(m, "role", i)?;
        if role != "tool" {
            if let Some(id) = open.first() {
                return Err(Violation::OrphanCall {
                    index: open_at,
                    id: id.clone(),
                });
            }
        }
        match role {
            "system" | "developer" | "user" if m.get("content").is_none_or(Value::is_null) => {
                return Err(malformed(i, "content must not be null"));
            }
            "assistant" => {
                let calls = m.get("tool_calls").and_then(Value::as_array);
                // A refusal, an earlier audio reply or a legacy `function_call` stands for the
                // content (the client's own message, sent as it came).
                let stands_in = ["refusal", "audio", "function_call"]
                    .iter()
                    .any(|k| m.get(*k).is_some_and(|v| !v.is_null()));
                if m.get("content").is_none_or(Value::is_null)
                    && calls.is_none_or(Vec::is_empty)
                    && !stands_in
                {
                    return Err(malformed(
                        i,
                        "assistant message with neither content nor calls",
                    ));
                }
                let mut seen = BTreeSet::new();
                for c in calls.into_iter().flatten() {
                    let id = str_field(c, "id", i)?.to_owned();
                    // A call to a custom (freeform) tool holds `custom.input`, not arguments.
                    let (key, input) = match c.get("type").and_then(Value::as_str) {
                        Some("custom") => ("custom", "input"),
                        _ => ("function", "arguments"),
                    };
                    let f = c
                        .get(key)
                        .ok_or_else(|| malformed(i, format!("call without `{key}`")))?;
                    str_field(f, "name", i)?;
                    str_field(f, input, i)?;
                    if !seen.insert(id.clone()) {
                        return Err(malformed(i, format!("call id `{id}` repeated")));
                    }
                    open.push(id);
                }
                open_at = i;
            }
            "tool" => {
                let id = str_field(m, "tool_call_id", i)?;
                match open.iter().position(|o| o == id) {
                    Some(p) => {
                        open.remove(p);
                    }
                    None => {
                        return Err(Violation::OrphanResult {
                            index: i,
                            id: id.to_owned(),
                        })
                    }
                }
                text_or_parts(m.get("content"), i)?;
            }
            // A role Loom does not model is sent as the client sent it: the provider judges.
            _ => {}
        }
    }
    match open.first() {
        Some(id) => Err(Violation::OrphanCall {
            index: open_at,
            id: id.clone(),
        }),
        None => Ok(()),
    }
}

/// OpenAI Responses: every `function_call` has exactly one later `function_call_output`, and no
/// output lacks an earlier call.
pub fn check_responses(body: &Value) -> Result<(), Violation> {
    let items = array(body, "input")?;
    if items.is_empty() {
        return Err(malformed(0, "`input` must not be empty"));
    }
    let mut open: Vec<(String, usize)> = Vec::new();
    let mut all = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        // An "easy input message" has a role and no type (a client's own, sent as it came).
        let kind = match item.get("type") {
            None if item.get("role").is_some() => "message",
            // An item reference may leave out its `type` too (`{"id": ...}`).
            None | Some(Value::Null) if item.get("id").is_some_and(Value::is_string) => {
                "item_reference"
            }
            _ => str_field(item, "type", i)?,
        };
        match kind {
            "message" => {
                str_field(item, "role", i)?;
            }
            "reasoning" => {
                str_field(item, "id", i)?;
            }
            "function_call" => {
                let id = str_field(item, "call_id", i)?.to_owned();
                str_field(item, "name", i)?;
                str_field(item, "arguments", i)?;
                if !all.insert(id.clone()) {
                    return Err(malformed(i, format!("call id `{id}` repeated")));
                }
                open.push((id, i));
            }
            "function_call_output" => {
                let id = str_field(item, "call_id", i)?;
                match open.iter().position(|(o, _)| o == id) {
                    Some(p) => {
                        open.remove(p);
                    }
                    None => {
                        return Err(Violation::OrphanResult {
                            index: i,
                            id: id.to_owned(),
                        })
                    }
                }
                // A string, or a list of parts (text, images, files).
                if !item
                    .get("output")
                    .is_some_and(|o| o.is_string() || o.is_array())
                {
                    return Err(malformed(i, "`output` must be a string or a list of parts"));
                }
            }
            // Items Loom does not model travel as they came.
            _ => {}
        }
    }
    match open.first() {
        Some((id, index)) => Err(Violation::OrphanCall {
            index: *index,
            id: id.clone(),
        }),
        None => Ok(()),
    }
}

/// Gemini: `contents` alternate between `user` and `model`, opening with the user; every part
/// holds data; the `functionCall` parts of a model content are answered, one `functionResponse`
/// each (by id when the call has one, else by name, in order), by the user content right after
/// it, and a `functionResponse` answers a call of the model content right before it. Parts Loom
/// does not model (code execution, file data) pass as they came.
pub fn check_gemini(body: &Value) -> Result<(), Violation> {
    let contents = array(body, "contents")?;
    if contents.is_empty() {
        return Err(malformed(0, "`contents` must not be empty"));
    }
    if let Some(system) = body.get("systemInstruction") {
        if !system.get("parts").is_some_and(Value::is_array) {
            return Err(malformed(0, "`systemInstruction.parts` must be an array"));
        }
    }
    // The calls of the model content before, as (id or name, answered).
    let mut open: Vec<(String, bool)> = Vec::new();
    let mut open_at = 0;
    let mut last_role = "";
    for (i, c) in contents.iter().enumerate() {
        let role = str_field(c, "role", i)?;
        if !matches!(role, "user" | "model") {
            return Err(malformed(
                i,
                format!("role `{role}`: expected user or model"),
            ));
        }
        if i == 0 && role != "user" {
            return Err(malformed(0, "the first content must be the user's"));
        }
        if role == last_role {
            return Err(malformed(i, format!("two `{role}` contents in a row")));
        }
        last_role = role;
        let parts = c
            .get("parts")
            .and_then(Value::as_array)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| malformed(i, "`parts` must be a non-empty array"))?;
        let mut calls = Vec::new();
        for p in parts {
            let Some(part) = p.as_object() else {
                return Err(malformed(i, "a part must be an object"));
            };
            if let Some(call) = part.get("functionCall") {
                if role != "model" {
                    return Err(malformed(i, "a `functionCall` part in a user content"));
                }
                let name = str_field(call, "name", i)?;
                if call.get("args").is_some_and(|a| !a.is_object()) {
                    return Err(malformed(i, "`functionCall.args` must be an object"));
                }
                let key = call.get("id").and_then(Value::as_str).unwrap_or(name);
                calls.push((key.to_owned(), false));
            } else if let Some(response) = part.get("functionResponse") {
                if role != "user" {
                    return Err(malformed(i, "a `functionResponse` part in a model content"));
                }
                let name = str_field(response, "name", i)?;
                if !response.get("response").is_some_and(Value::is_object) {
                    return Err(malformed(
                        i,
                        "`functionResponse.response` must be an object",
                    ));
                }
                let key = response.get("id").and_then(Value::as_str).unwrap_or(name);
                match open.iter_mut().find(|(k, answered)| k == key && !answered) {
                    Some(call) => call.1 = true,
                    None => {
                        return Err(Violation::OrphanResult {
                            index: i,
                            id: key.to_owned(),
                        })
                    }
                }
            } else if part.is_empty() {
                return Err(malformed(i, "a part must hold data"));
            }
        }
        if role == "user" {
            if let Some((id, _)) = open.iter().find(|(_, answered)| !answered) {
                return Err(Violation::OrphanCall {
                    index: open_at,
                    id: id.clone(),
                });
            }
            open.clear();
        } else {
            open = calls;
            open_at = i;
        }
    }
    // Calls in the last content wait for results the request does not hold.
    match open.first() {
        Some((id, _)) => Err(Violation::OrphanCall {
            index: open_at,
            id: id.clone(),
        }),
        None => Ok(()),
    }
}

/// Anthropic Messages: the first message is the user's; an assistant message's `tool_use` blocks
/// are all answered by `tool_result` blocks in the user message right after it, and a
/// `tool_result` answers only the message right before it; thinking blocks come first.
pub fn check_anthropic(body: &Value) -> Result<(), Violation> {
    let messages = array(body, "messages")?;
    if body.get("max_tokens").and_then(Value::as_u64).is_none() {
        return Err(malformed(0, "`max_tokens` must be a number"));
    }
    if let Some(system) = body.get("system") {
        // The API takes a string too (a client's own system prompt, sent as it came).
        let ok = system.is_string()
            || system
                .as_array()
                .is_some_and(|b| b.iter().all(|x| x.get("type") == Some(&"text".into())));
        if !ok {
            return Err(malformed(
                0,
                "`system` must be a string or an array of text blocks",
            ));
        }
    }
    let mut expected: Vec<String> = Vec::new();
    let mut expected_at = 0;
    for (i, m) in messages.iter().enumerate() {
        let role = str_field(m, "role", i)?;
        if i == 0 && role != "user" {
            return Err(malformed(0, "the first message must be the user's"));
        }
        if !matches!(role, "user" | "assistant") {
            // A role Loom does not model (a beta's) travels as it came; it answers no call.
            continue;
        }
        // A string is one text block (a client's own message, sent as it came).
        let text_block;
        let blocks: &[Value] = match m.get("content") {
            Some(Value::Array(blocks)) => blocks,
            Some(Value::String(text)) if !text.is_empty() => {
                text_block = [serde_json::json!({"type": "text", "text": text})];
                &text_block
            }
            _ => {
                return Err(malformed(
                    i,
                    "content must be a string or an array of blocks",
                ))
            }
        };
        if blocks.is_empty() {
            return Err(malformed(i, "content must not be empty"));
        }
        let mut answered = Vec::new();
        let mut calls = Vec::new();
        let mut other_seen = false;
        for b in blocks {
            let kind = str_field(b, "type", i)?;
            let thinking = matches!(kind, "thinking" | "redacted_thinking");
            if thinking && other_seen {
                return Err(malformed(
                    i,
                    format!("`{kind}` block after a text or tool_use block"),
                ));
            }
            other_seen |= !thinking;
            match kind {
                "thinking" | "redacted_thinking" if role == "assistant" => {}
                "tool_result" if role == "user" => {
                    answered.push(str_field(b, "tool_use_id", i)?.to_owned());
                }
                "tool_use" if role == "assistant" => {
                    calls.push(str_field(b, "id", i)?.to_owned());
                    if !b.get("input").is_some_and(Value::is_object) {
                        return Err(malformed(i, "tool_use input must be an object"));
                    }
                }
                "tool_result" | "tool_use" | "thinking" | "redacted_thinking" => {
                    return Err(malformed(
                        i,
                        format!("block `{kind}` not allowed for {role}"),
                    ))
                }
                // Text, images and blocks Loom does not model (documents, server tools' blocks).
                _ => {}
            }
        }
        for id in &answered {
            match expected.iter().position(|e| e == id) {
                Some(p) => {
                    expected.remove(p);
                }
                None => {
                    return Err(Violation::OrphanResult {
                        index: i,
                        id: id.clone(),
                    })
                }
            }
        }
        if let Some(id) = expected.first() {
            return Err(Violation::OrphanCall {
                index: expected_at,
                id: id.clone(),
            });
        }
        expected = calls;
        expected_at = i;
    }
    match expected.first() {
        Some(id) => Err(Violation::OrphanCall {
            index: expected_at,
            id: id.clone(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chat_orphans_are_caught() {
        let ok = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "a", "content": "x"},
        ]});
        check_chat(&ok).unwrap();
        let orphan_call = json!({"messages": [
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "user", "content": "hi"},
        ]});
        assert!(check_chat(&orphan_call).unwrap_err().is_orphan());
        let orphan_result = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "a", "content": "x"},
        ]});
        assert!(matches!(
            check_chat(&orphan_result),
            Err(Violation::OrphanResult { index: 1, .. })
        ));
    }

    /// qwen-code sends a tool message's content as text parts, which Chat Completions takes:
    /// `fit` fell back on every request because this check wanted a string.
    #[test]
    fn chat_tool_content_as_text_parts() {
        let body = |content: Value| {
            json!({"messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "b", "type": "custom", "custom": {"name": "g", "input": "x"}}]},
                {"role": "tool", "tool_call_id": "a", "content": content},
                {"role": "tool", "tool_call_id": "b", "content": "y"},
                {"role": "assistant", "content": null, "refusal": "no"},
                {"role": "assistant", "content": null, "audio": {"id": "audio_1"}},
            ]})
        };
        check_chat(&body(json!([{"type": "text", "text": "x"}]))).unwrap();
        check_chat(&body(json!("x"))).unwrap();
        assert!(check_chat(&body(json!([]))).is_err());
        assert!(check_chat(&body(json!([{"type": "image_url"}]))).is_err());
        assert!(check_chat(&body(json!(null))).is_err());
    }

    /// An item reference may leave out its `type`.
    #[test]
    fn responses_item_reference_without_type() {
        check_responses(&json!({"input": [{"role": "user", "content": "hi"}, {"id": "msg_1"}]}))
            .unwrap();
    }

    /// A Responses `function_call_output` may be a list of parts.
    #[test]
    fn responses_output_as_parts() {
        let body = json!({"input": [
            {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "a",
             "output": [{"type": "input_text", "text": "x"}]},
        ]});
        check_responses(&body).unwrap();
    }

    #[test]
    fn anthropic_results_must_follow_immediately() {
        let bad = json!({"max_tokens": 10, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "text", "text": "no result"}]},
        ]});
        assert!(check_anthropic(&bad).unwrap_err().is_orphan());
        let late_thinking = json!({"max_tokens": 10, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "hm"},
                {"type": "thinking", "thinking": "x", "signature": "s"}]},
        ]});
        assert!(check_anthropic(&late_thinking).is_err());
        let thinking_first = json!({"max_tokens": 10, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "x", "signature": "s"},
                {"type": "redacted_thinking", "data": "d"},
                {"type": "text", "text": "hm"}]},
        ]});
        check_anthropic(&thinking_first).unwrap();
    }

    #[test]
    fn responses_outputs_need_calls() {
        let bad = json!({"input": [
            {"type": "function_call_output", "call_id": "a", "output": "x"},
        ]});
        assert!(check_responses(&bad).unwrap_err().is_orphan());
    }
}
