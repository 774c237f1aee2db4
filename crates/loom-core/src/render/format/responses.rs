//! OpenAI Responses: `{"model", "input": [items], "tools"}`.

use serde_json::{json, Map, Value};

use super::text_only;
use crate::event::{ContentPart, MessageContent, NativeApi};
use crate::render::request::{Msg, Request, ToolSpec};

fn message(role: &str, c: &MessageContent) -> Value {
    let parts: Vec<Value> = match c {
        MessageContent::Text(s) => vec![json!({"type": "input_text", "text": s})],
        MessageContent::Parts(parts) => parts
            .iter()
            .map(|p| match p {
                ContentPart::Text { text } => json!({"type": "input_text", "text": text}),
                ContentPart::Image { url, detail } => json!({
                    "type": "input_image",
                    "image_url": url,
                    "detail": detail.as_deref().unwrap_or("auto"),
                }),
            })
            .collect(),
    };
    json!({"type": "message", "role": role, "content": parts})
}

/// An earlier assistant turn's text. The API describes `output_text` parts only as part of an
/// output message, which needs the `id` and `status` the API assigned; Loom's log has neither, so
/// the turn goes back as an input message with string content, which the API accepts for the
/// assistant role.
fn assistant_message(c: &MessageContent) -> Value {
    json!({"type": "message", "role": "assistant", "content": text_only(c)})
}

pub(super) fn wire(msg: &Msg) -> Vec<Value> {
    match msg {
        Msg::System(c) => vec![message("system", c)],
        Msg::User { content, .. } => vec![message("user", content)],
        Msg::Assistant {
            content,
            calls,
            native,
            ..
        } => {
            // Reasoning items come before the message and calls they led to, as the API returned
            // them; their `encrypted_content` lets the model resume its reasoning.
            let mut out: Vec<Value> = native
                .as_ref()
                .filter(|n| n.api == NativeApi::OpenaiResponses)
                .map(|n| n.items.clone())
                .unwrap_or_default();
            match content {
                Some(c) => out.push(assistant_message(c)),
                // An empty turn still takes its place in the conversation.
                None if calls.is_empty() => {
                    out.push(assistant_message(&MessageContent::Text(String::new())));
                }
                None => {}
            }
            out.extend(calls.iter().map(|rc| {
                json!({
                    "type": "function_call",
                    "call_id": rc.call.id,
                    "name": rc.call.name,
                    "arguments": rc.call.arguments,
                })
            }));
            out.extend(calls.iter().map(|rc| {
                json!({
                    "type": "function_call_output",
                    "call_id": rc.call.id,
                    "output": text_only(&rc.content),
                })
            }));
            out
        }
    }
}

pub(super) fn tools(tools: &[ToolSpec]) -> Vec<Value> {
    tools
        .iter()
        .map(|t| {
            json!({
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            })
        })
        .collect()
}

pub(super) fn body(req: &Request) -> Value {
    let input: Vec<Value> = req.messages.iter().flat_map(wire).collect();
    let mut body = Map::new();
    body.insert("model".into(), Value::String(req.model.clone()));
    body.insert("input".into(), Value::Array(input));
    if !req.tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools(&req.tools)));
    }
    Value::Object(body)
}
