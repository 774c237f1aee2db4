//! Reading a provider request into the few facts the mock's replies depend on: who spoke last
//! and what they said, which tools are offered, whether thinking was asked for, and the bytes a
//! prompt cache would see. Malformed requests get an error naming the field, as the provider's
//! would.

use serde_json::{Map, Value};

use crate::error::{MockError, Result};
use crate::rules;

pub(crate) use loom_core::Api;

/// The record name of `api`'s request, in error messages.
pub(crate) fn record(api: Api) -> &'static str {
    match api {
        Api::OpenaiChat => "chat completion request",
        Api::OpenaiResponses => "responses request",
        Api::Anthropic => "messages request",
        Api::Gemini => "generate content request",
    }
}

/// What the last message (or input item) of the conversation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Last {
    /// A user turn: the model may call a tool.
    User,
    /// A tool result: the model answers in text.
    ToolResult,
    /// Anything else (an assistant prefill, a system message).
    Other,
}

/// The facts of one request that the mock's behaviour and usage figures depend on.
#[derive(Debug)]
pub(crate) struct Prompt {
    /// The model the request names, echoed in the reply.
    pub(crate) model: String,
    /// Whether the reply is an SSE stream.
    pub(crate) stream: bool,
    /// Chat streaming only: whether a last chunk carries the usage.
    pub(crate) include_usage: bool,
    /// Names of the function tools the model may call, in offered order (after `tool_choice`).
    pub(crate) tools: Vec<String>,
    /// How many messages (or input items) the conversation has.
    pub(crate) items: usize,
    /// What the last message or item is.
    pub(crate) last: Last,
    /// The text of the last message or item.
    pub(crate) last_text: String,
    /// Whether the reply shows (or, for Chat, counts) reasoning.
    pub(crate) thinking: bool,
    /// Tools, system prompt and conversation serialised in that order: the prefix a provider's
    /// prompt cache would match against the previous request.
    pub(crate) cache_key: Vec<u8>,
    /// Anthropic only: where in `cache_key` the last `cache_control` marker is, which is as far
    /// as a cache write reaches.
    pub(crate) cache_breakpoint: Option<usize>,
}

/// The model and the method a Gemini request's path names (`models/{model}:{method}`): the API
/// reads them from the path, not the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GeminiTarget {
    /// The model.
    pub(crate) model: String,
    /// `streamGenerateContent` rather than `generateContent`.
    pub(crate) stream: bool,
}

/// Reads a request body for `api`; a Gemini request also needs the `target` its path names.
pub(crate) fn parse(api: Api, body: &Value, target: Option<&GeminiTarget>) -> Result<Prompt> {
    let record = record(api);
    let Some(body) = body.as_object() else {
        return Err(MockError::field(record, "(body)", "expected a JSON object"));
    };
    let (model, stream) = match target {
        Some(t) => (t.model.clone(), t.stream),
        None => {
            let model = match body.get("model") {
                Some(Value::String(model)) if !model.is_empty() => model.clone(),
                _ => {
                    return Err(MockError::field(
                        record,
                        "model",
                        "expected a non-empty string",
                    ))
                }
            };
            (model, optional_bool(record, body, "stream")?)
        }
    };
    let prompt = match api {
        Api::OpenaiChat => chat(record, body, model, stream)?,
        Api::OpenaiResponses => responses(record, body, model, stream)?,
        Api::Anthropic => messages(record, body, model, stream)?,
        Api::Gemini => gemini(record, body, model, stream)?,
    };
    rules::check(api, body, prompt.thinking)?;
    Ok(prompt)
}

/// OpenAI Chat Completions: `messages`, function `tools`, `stream_options.include_usage`.
fn chat(
    record: &'static str,
    body: &Map<String, Value>,
    model: String,
    stream: bool,
) -> Result<Prompt> {
    let messages = non_empty_array(record, body, "messages")?;
    let mut roles = Vec::with_capacity(messages.len());
    for (i, message) in messages.iter().enumerate() {
        roles.push(role(record, message, &format!("messages[{i}]"))?);
    }
    let (last, last_text) = match (roles.last(), messages.last()) {
        (Some(role), Some(message)) => {
            let last = match *role {
                "user" => Last::User,
                "tool" | "function" => Last::ToolResult,
                _ => Last::Other,
            };
            (last, content_text(message.get("content")))
        }
        _ => (Last::Other, String::new()),
    };
    let mut tools = Vec::new();
    for (i, tool) in optional_array(record, body, "tools")?.iter().enumerate() {
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            continue;
        }
        let name = tool.pointer("/function/name").and_then(Value::as_str);
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return Err(MockError::field(
                record,
                format!("tools[{i}].function.name"),
                "expected a non-empty string",
            ));
        };
        tools.push(name.to_owned());
    }
    let forced = body
        .get("tool_choice")
        .and_then(|c| c.pointer("/function/name"));
    let tools = apply_tool_choice(tools, body.get("tool_choice"), forced);
    let include_usage = match body.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(options) => match options.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(MockError::field(
                    record,
                    "stream_options.include_usage",
                    "expected a boolean",
                ))
            }
        },
    };
    // Reasoning models (o1, o3, o4-mini, ...) think out of sight; their usage counts it.
    let thinking = model.starts_with('o') || model.contains("reason");
    let cache_key = cache_key(&[body.get("tools"), Some(&Value::Array(messages.to_vec()))]);
    Ok(Prompt {
        model,
        stream,
        include_usage,
        tools,
        items: messages.len(),
        last,
        last_text,
        thinking,
        cache_key,
        cache_breakpoint: None,
    })
}

/// OpenAI Responses: `input` (a string or items), flat function `tools`, `reasoning`.
fn responses(
    record: &'static str,
    body: &Map<String, Value>,
    model: String,
    stream: bool,
) -> Result<Prompt> {
    let (items, last, last_text) = match body.get("input") {
        Some(Value::String(text)) => (1, Last::User, text.clone()),
        Some(Value::Array(items)) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                if !item.is_object() {
                    return Err(MockError::field(
                        record,
                        format!("input[{i}]"),
                        "expected an object",
                    ));
                }
            }
            let (last, text) = items
                .last()
                .map(response_item)
                .unwrap_or((Last::Other, String::new()));
            (items.len(), last, text)
        }
        _ => {
            return Err(MockError::field(
                record,
                "input",
                "expected a string or a non-empty array of items",
            ))
        }
    };
    let mut tools = Vec::new();
    for (i, tool) in optional_array(record, body, "tools")?.iter().enumerate() {
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            continue;
        }
        let Some(name) = tool
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        else {
            return Err(MockError::field(
                record,
                format!("tools[{i}].name"),
                "expected a non-empty string",
            ));
        };
        tools.push(name.to_owned());
    }
    let forced = body.get("tool_choice").and_then(|c| c.get("name"));
    let tools = apply_tool_choice(tools, body.get("tool_choice"), forced);
    let thinking = matches!(body.get("reasoning"), Some(Value::Object(_)));
    let cache_key = cache_key(&[
        body.get("tools"),
        body.get("instructions"),
        body.get("input"),
    ]);
    Ok(Prompt {
        model,
        stream,
        include_usage: false,
        tools,
        items,
        last,
        last_text,
        thinking,
        cache_key,
        cache_breakpoint: None,
    })
}

/// What a Responses input item is, and its text.
fn response_item(item: &Value) -> (Last, String) {
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    match kind {
        "function_call_output" | "custom_tool_call_output" => {
            (Last::ToolResult, content_text(item.get("output")))
        }
        "message" => {
            let last = match item.get("role").and_then(Value::as_str) {
                Some("user") => Last::User,
                _ => Last::Other,
            };
            (last, content_text(item.get("content")))
        }
        _ => (Last::Other, String::new()),
    }
}

/// Anthropic Messages: `max_tokens`, `system`, `messages` with content blocks, `tools`,
/// `thinking`.
fn messages(
    record: &'static str,
    body: &Map<String, Value>,
    model: String,
    stream: bool,
) -> Result<Prompt> {
    if !body.get("max_tokens").is_some_and(Value::is_u64) {
        return Err(MockError::field(
            record,
            "max_tokens",
            "expected a positive integer",
        ));
    }
    let messages = non_empty_array(record, body, "messages")?;
    for (i, message) in messages.iter().enumerate() {
        let role = role(record, message, &format!("messages[{i}]"))?;
        // `system` messages among the others are an Anthropic beta that Claude Code uses.
        if !matches!(role, "user" | "assistant" | "system") {
            return Err(MockError::field(
                record,
                format!("messages[{i}].role"),
                "expected \"user\", \"assistant\" or \"system\"",
            ));
        }
    }
    let (last, last_text) = match messages.last() {
        Some(message) if message.get("role").and_then(Value::as_str) == Some("user") => {
            let content = message.get("content");
            let result = content.and_then(Value::as_array).and_then(|blocks| {
                blocks
                    .iter()
                    .rev()
                    .find(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            });
            match result {
                Some(block) => (Last::ToolResult, content_text(block.get("content"))),
                None => (Last::User, content_text(content)),
            }
        }
        Some(message) => (Last::Other, content_text(message.get("content"))),
        None => (Last::Other, String::new()),
    };
    let mut tools = Vec::new();
    for (i, tool) in optional_array(record, body, "tools")?.iter().enumerate() {
        // Server tools (web search, code execution) carry a versioned `type`; only client
        // tools are called by name in a `tool_use` block.
        match tool.get("type").and_then(Value::as_str) {
            None | Some("custom") => {}
            Some(_) => continue,
        }
        let Some(name) = tool
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        else {
            return Err(MockError::field(
                record,
                format!("tools[{i}].name"),
                "expected a non-empty string",
            ));
        };
        tools.push(name.to_owned());
    }
    let choice = body.get("tool_choice");
    let tools = match choice.and_then(|c| c.get("type")).and_then(Value::as_str) {
        Some("none") => Vec::new(),
        Some("tool") => choice
            .and_then(|c| c.get("name"))
            .and_then(Value::as_str)
            .map(|name| vec![name.to_owned()])
            .unwrap_or(tools),
        _ => tools,
    };
    let thinking = matches!(
        body.get("thinking")
            .and_then(|t| t.get("type"))
            .and_then(Value::as_str),
        Some("enabled" | "adaptive")
    );
    let cache_key = cache_key(&[body.get("tools"), body.get("system"), body.get("messages")]);
    let cache_breakpoint = find_last(&cache_key, b"\"cache_control\"");
    Ok(Prompt {
        model,
        stream,
        include_usage: false,
        tools,
        items: messages.len(),
        last,
        last_text,
        thinking,
        cache_key,
        cache_breakpoint,
    })
}

/// Gemini: `contents` of `user` and `model` parts, `systemInstruction`, `tools` with
/// `functionDeclarations`, `generationConfig.thinkingConfig.includeThoughts`.
fn gemini(
    record: &'static str,
    body: &Map<String, Value>,
    model: String,
    stream: bool,
) -> Result<Prompt> {
    let contents = non_empty_array(record, body, "contents")?;
    for (i, content) in contents.iter().enumerate() {
        match content.get("role") {
            None | Some(Value::Null) => {}
            Some(Value::String(r)) if matches!(r.as_str(), "user" | "model") => {}
            Some(_) => {
                return Err(MockError::field(
                    record,
                    format!("contents[{i}].role"),
                    "Please use a valid role: user, model.",
                ))
            }
        }
        if !content.get("parts").is_some_and(Value::is_array) {
            return Err(MockError::field(
                record,
                format!("contents[{i}].parts"),
                "expected an array",
            ));
        }
    }
    let parts = |c: &Value| -> Vec<Value> {
        c.get("parts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (last, last_text) = match contents.last() {
        Some(c) if c.get("role").and_then(Value::as_str) != Some("model") => {
            let parts = parts(c);
            let response = parts.iter().rev().find_map(|p| p.get("functionResponse"));
            match response {
                Some(r) => (
                    Last::ToolResult,
                    r.get("response").map(Value::to_string).unwrap_or_default(),
                ),
                None => (Last::User, content_text(Some(&Value::Array(parts)))),
            }
        }
        Some(c) => (Last::Other, content_text(Some(&Value::Array(parts(c))))),
        None => (Last::Other, String::new()),
    };
    let mut tools = Vec::new();
    for (i, tool) in optional_array(record, body, "tools")?.iter().enumerate() {
        let declarations = tool
            .get("functionDeclarations")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        for (j, d) in declarations.iter().enumerate() {
            let Some(name) = d
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
            else {
                return Err(MockError::field(
                    record,
                    format!("tools[{i}].functionDeclarations[{j}].name"),
                    "expected a non-empty string",
                ));
            };
            tools.push(name.to_owned());
        }
    }
    let mode = body
        .get("toolConfig")
        .and_then(|c| c.pointer("/functionCallingConfig/mode"))
        .and_then(Value::as_str);
    if mode == Some("NONE") {
        tools.clear();
    }
    let thinking = body
        .get("generationConfig")
        .and_then(|c| c.pointer("/thinkingConfig/includeThoughts"))
        .and_then(Value::as_bool)
        == Some(true);
    let cache_key = cache_key(&[
        body.get("tools"),
        body.get("systemInstruction"),
        body.get("contents"),
    ]);
    Ok(Prompt {
        model,
        stream,
        include_usage: true,
        tools,
        items: contents.len(),
        last,
        last_text,
        thinking,
        cache_key,
        cache_breakpoint: None,
    })
}

/// OpenAI's `tool_choice`: `"none"` offers nothing, a named function offers only that one.
fn apply_tool_choice(
    tools: Vec<String>,
    choice: Option<&Value>,
    forced: Option<&Value>,
) -> Vec<String> {
    if choice.and_then(Value::as_str) == Some("none") {
        return Vec::new();
    }
    match forced.and_then(Value::as_str) {
        Some(name) => vec![name.to_owned()],
        None => tools,
    }
}

/// The text of a content value: a string, an array of parts with `text` (any part type that
/// has one), or a nested tool-result content.
pub(crate) fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => {
            let texts: Vec<String> = parts
                .iter()
                .map(|part| match part.get("text") {
                    Some(Value::String(text)) => text.clone(),
                    _ => content_text(part.get("content")),
                })
                .filter(|t| !t.is_empty())
                .collect();
            texts.join(" ")
        }
        _ => String::new(),
    }
}

/// The `role` of a message, which must be a string.
fn role<'a>(record: &'static str, message: &'a Value, at: &str) -> Result<&'a str> {
    match message.get("role") {
        Some(Value::String(role)) => Ok(role),
        _ => Err(MockError::field(
            record,
            format!("{at}.role"),
            "expected a string",
        )),
    }
}

/// A required, non-empty array field.
fn non_empty_array<'a>(
    record: &'static str,
    body: &'a Map<String, Value>,
    field: &str,
) -> Result<&'a [Value]> {
    match body.get(field) {
        Some(Value::Array(items)) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                if !item.is_object() {
                    return Err(MockError::field(
                        record,
                        format!("{field}[{i}]"),
                        "expected an object",
                    ));
                }
            }
            Ok(items)
        }
        _ => Err(MockError::field(
            record,
            field,
            "expected a non-empty array",
        )),
    }
}

/// An optional array field; absent or null reads as empty.
fn optional_array<'a>(
    record: &'static str,
    body: &'a Map<String, Value>,
    field: &str,
) -> Result<&'a [Value]> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(MockError::field(record, field, "expected an array")),
    }
}

/// An optional boolean field; absent or null reads as false.
fn optional_bool(record: &'static str, body: &Map<String, Value>, field: &str) -> Result<bool> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(MockError::field(record, field, "expected a boolean")),
    }
}

/// The parts of a request a prompt cache matches, serialised one after another.
fn cache_key(parts: &[Option<&Value>]) -> Vec<u8> {
    let mut key = Vec::new();
    for part in parts.iter().flatten() {
        key.extend_from_slice(part.to_string().as_bytes());
        key.push(b'\n');
    }
    key
}

/// The offset just past the last occurrence of `needle` in `haystack`.
fn find_last(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .rposition(|w| w == needle)
        .map(|at| at + needle.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chat_last_user_with_tools() {
        let body = json!({
            "model": "gpt-4o",
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "find cats"}]}],
            "tools": [{"type": "function", "function": {"name": "search"}}],
        });
        let p = parse(Api::OpenaiChat, &body, None).unwrap();
        assert_eq!(p.last, Last::User);
        assert_eq!(p.last_text, "find cats");
        assert_eq!(p.tools, vec!["search"]);
        assert_eq!(p.items, 2);
        assert!(!p.thinking);
    }

    #[test]
    fn tool_choice_none_offers_nothing() {
        let body = json!({
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "search"}}],
            "tool_choice": "none",
        });
        assert!(parse(Api::OpenaiChat, &body, None)
            .unwrap()
            .tools
            .is_empty());
    }

    #[test]
    fn responses_string_input_and_tool_output() {
        let p = parse(
            Api::OpenaiResponses,
            &json!({"model": "gpt-4o", "input": "hello"}),
            None,
        )
        .unwrap();
        assert_eq!((p.last, p.items), (Last::User, 1));
        let body = json!({"model": "o3", "input": [
            {"role": "user", "content": "x"},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "42 rows"},
        ], "reasoning": {"effort": "low"}});
        let p = parse(Api::OpenaiResponses, &body, None).unwrap();
        assert_eq!(
            (p.last, p.last_text.as_str(), p.thinking),
            (Last::ToolResult, "42 rows", true)
        );
    }

    #[test]
    fn messages_tool_result_and_breakpoint() {
        let body = json!({
            "model": "claude", "max_tokens": 10,
            "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "out"}]}]},
            ],
            "thinking": {"type": "enabled", "budget_tokens": 1024},
        });
        let p = parse(Api::Anthropic, &body, None).unwrap();
        assert_eq!(
            (p.last, p.last_text.as_str(), p.thinking),
            (Last::ToolResult, "out", true)
        );
        assert!(p.cache_breakpoint.is_some_and(|b| b < p.cache_key.len()));
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            (Api::OpenaiChat, json!({"model": "m"}), "messages"),
            (
                Api::OpenaiChat,
                json!({"messages": [{"role": "user", "content": "x"}]}),
                "model",
            ),
            (
                Api::OpenaiChat,
                json!({"model": "m", "messages": [{"content": "x"}]}),
                "messages[0].role",
            ),
            (
                Api::OpenaiChat,
                json!({"model": "m", "messages": [{"role": "user"}], "stream": "yes"}),
                "stream",
            ),
            (
                Api::OpenaiResponses,
                json!({"model": "m", "input": []}),
                "input",
            ),
            (
                Api::OpenaiResponses,
                json!({"model": "m", "input": "x", "tools": [{"type": "function"}]}),
                "tools[0].name",
            ),
            (
                Api::Anthropic,
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
                "max_tokens",
            ),
            (
                Api::Anthropic,
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "narrator", "content": "x"}]}),
                "messages[0].role",
            ),
            (Api::Anthropic, json!([1, 2]), "(body)"),
        ];
        for (api, body, field) in cases {
            match parse(api, &body, None) {
                Err(MockError::BadField { field: got, .. }) => assert_eq!(got, field, "{body}"),
                other => panic!("{body}: expected an error on {field}, got {other:?}"),
            }
        }
    }
}
