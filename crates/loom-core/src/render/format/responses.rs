//! OpenAI Responses: `{"model", "input": [items], "tools"}`.

use serde_json::{json, Map, Value};

use super::text_only;
use crate::event::{ContentPart, MessageContent};
use crate::render::request::{Msg, Request, ToolSpec};

fn message(role: &str, c: &MessageContent) -> Value {
    let text_type = if role == "assistant" {
        "output_text"
    } else {
        "input_text"
    };
    let parts: Vec<Value> = match c {
        MessageContent::Text(s) => vec![json!({"type": text_type, "text": s})],
        MessageContent::Parts(parts) => parts
            .iter()
            .map(|p| match p {
                ContentPart::Text { text } => json!({"type": text_type, "text": text}),
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

pub(super) fn wire(msg: &Msg) -> Vec<Value> {
    match msg {
        Msg::System(c) => vec![message("system", c)],
        Msg::User { content, .. } => vec![message("user", content)],
        Msg::Assistant { content, calls, .. } => {
            let mut out = Vec::new();
            match content {
                Some(c) => out.push(message("assistant", c)),
                // An empty turn still takes its place in the conversation.
                None if calls.is_empty() => {
                    out.push(message("assistant", &MessageContent::Text(String::new())));
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
