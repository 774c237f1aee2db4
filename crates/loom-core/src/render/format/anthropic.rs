//! Anthropic Messages: `{"model", "max_tokens", "system", "messages", "tools"}`.
//!
//! Leading system messages become the `system` blocks; a system event later in the log is sent as
//! user text (the API has no mid-conversation system role). Each assistant turn is followed by one
//! user message holding all its `tool_result` blocks. Cache breakpoints go on the last block of
//! the stable prefix and on the last block of the request, so both the prefix and the growing tail
//! are cached between compaction points. Reasoning text is not sent back (the API only accepts
//! thinking blocks with the provider's signature); a turn that came from Anthropic sends its
//! native `thinking` / `redacted_thinking` blocks back unchanged instead.

use serde_json::{json, Map, Value};

use super::{arguments_object, text_only};
use crate::event::{ContentPart, MessageContent, NativeApi};
use crate::render::request::{Msg, Request, ToolSpec};

/// Text sent before a conversation that would otherwise open with the assistant.
const OPENING: &str = "(conversation continues)";

fn blocks(c: &MessageContent) -> Vec<Value> {
    match c {
        MessageContent::Text(s) => vec![json!({"type": "text", "text": s})],
        MessageContent::Parts(parts) => parts
            .iter()
            .map(|p| match p {
                ContentPart::Text { text } => json!({"type": "text", "text": text}),
                ContentPart::Image { url, .. } => image_block(url),
            })
            .collect(),
    }
}

fn image_block(url: &str) -> Value {
    if let Some(rest) = url.strip_prefix("data:") {
        if let Some((media_type, data)) = rest.split_once(";base64,") {
            return json!({
                "type": "image",
                "source": {"type": "base64", "media_type": media_type, "data": data},
            });
        }
    }
    json!({"type": "image", "source": {"type": "url", "url": url}})
}

pub(super) fn wire(msg: &Msg) -> Vec<Value> {
    match msg {
        Msg::System(c) => vec![json!({"role": "user", "content": [
            {"type": "text", "text": format!("[system]\n{}", text_only(c))}
        ]})],
        Msg::User { content, .. } => vec![json!({"role": "user", "content": blocks(content)})],
        Msg::Assistant {
            content,
            calls,
            native,
            ..
        } => {
            // Thinking blocks go first, exactly as Anthropic sent them: the API checks their
            // signatures and requires them before the turn's text and tool_use blocks.
            let mut out_blocks: Vec<Value> = native
                .as_ref()
                .filter(|n| n.api == NativeApi::Anthropic)
                .map(|n| n.items.clone())
                .unwrap_or_default();
            out_blocks.extend(content.as_ref().map(blocks).unwrap_or_default());
            // An assistant message must not be empty.
            if out_blocks.is_empty() && calls.is_empty() {
                out_blocks.push(json!({"type": "text", "text": ""}));
            }
            out_blocks.extend(calls.iter().map(|rc| {
                json!({
                    "type": "tool_use",
                    "id": rc.call.id,
                    "name": rc.call.name,
                    "input": arguments_object(&rc.call.arguments),
                })
            }));
            let mut out = vec![json!({"role": "assistant", "content": out_blocks})];
            if !calls.is_empty() {
                let results: Vec<Value> = calls
                    .iter()
                    .map(|rc| {
                        let mut block = Map::new();
                        block.insert("type".into(), "tool_result".into());
                        block.insert("tool_use_id".into(), Value::String(rc.call.id.clone()));
                        block.insert("content".into(), Value::String(text_only(&rc.content)));
                        if rc.is_error {
                            block.insert("is_error".into(), Value::Bool(true));
                        }
                        Value::Object(block)
                    })
                    .collect();
                out.push(json!({"role": "user", "content": results}));
            }
            out
        }
    }
}

/// The message as metered: every `tool_use` input as its JSON text, since the model reads the
/// keys, quotes and braces too, not only the values.
pub(super) fn as_metered(message: &Value) -> Value {
    let mut m = message.clone();
    if let Some(Value::Array(blocks)) = m.get_mut("content") {
        for b in blocks {
            if b.get("type").and_then(Value::as_str) == Some("tool_use") {
                if let Some(input) = b.get_mut("input") {
                    *input = Value::String(input.to_string());
                }
            }
        }
    }
    m
}

pub(super) fn tools(tools: &[ToolSpec]) -> Vec<Value> {
    tools
        .iter()
        .map(
            |t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}),
        )
        .collect()
}

/// Puts a cache breakpoint on the message's last block that may carry one: thinking blocks are
/// sent back exactly as Anthropic signed them, so they never get one.
fn mark_last_block(message: &mut Value) {
    if let Some(Value::Array(content)) = message.get_mut("content") {
        let markable = content.iter_mut().rev().find_map(|b| match b {
            Value::Object(block)
                if !matches!(
                    block.get("type").and_then(Value::as_str),
                    Some("thinking" | "redacted_thinking")
                ) =>
            {
                Some(block)
            }
            _ => None,
        });
        if let Some(block) = markable {
            block.insert("cache_control".into(), json!({"type": "ephemeral"}));
        }
    }
}

pub(super) fn body(req: &Request) -> Value {
    let leading = req
        .messages
        .iter()
        .take_while(|m| matches!(m, Msg::System(_)))
        .count();
    let mut system: Vec<Value> = req.messages[..leading]
        .iter()
        .filter_map(|m| match m {
            Msg::System(c) => Some(json!({"type": "text", "text": text_only(c)})),
            _ => None,
        })
        .collect();
    let mut messages: Vec<Value> = Vec::new();
    let mut stable_end: Option<usize> = None;
    for (i, msg) in req.messages.iter().enumerate().skip(leading) {
        messages.extend(wire(msg));
        if i + 1 == req.stable_len {
            stable_end = messages.len().checked_sub(1);
        }
    }
    if messages.first().and_then(|m| m.get("role")) != Some(&Value::from("user")) {
        messages.insert(
            0,
            json!({"role": "user", "content": [{"type": "text", "text": OPENING}]}),
        );
        stable_end = stable_end.map(|i| i + 1);
    }
    match stable_end {
        Some(i) => mark_last_block(&mut messages[i]),
        None => {
            if let Some(Value::Object(block)) = system.last_mut() {
                block.insert("cache_control".into(), json!({"type": "ephemeral"}));
            }
        }
    }
    if let Some(last) = messages.last_mut() {
        mark_last_block(last);
    }
    let mut body = Map::new();
    body.insert("model".into(), Value::String(req.model.clone()));
    body.insert("max_tokens".into(), Value::from(req.max_output_tokens));
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools(&req.tools)));
    }
    Value::Object(body)
}
