//! OpenAI Chat Completions: `{"model", "messages", "tools"}`.

use serde_json::{json, Map, Value};

use super::text_only;
use crate::event::{ContentPart, MessageContent};
use crate::render::request::{Msg, Request, ToolSpec};

fn content(c: &MessageContent) -> Value {
    match c {
        MessageContent::Text(s) => Value::String(s.clone()),
        MessageContent::Parts(parts) => Value::Array(
            parts
                .iter()
                .map(|p| match p {
                    ContentPart::Text { text } => json!({"type": "text", "text": text}),
                    ContentPart::Image { url, detail } => {
                        let mut image = Map::new();
                        image.insert("url".into(), Value::String(url.clone()));
                        if let Some(d) = detail {
                            image.insert("detail".into(), Value::String(d.clone()));
                        }
                        json!({"type": "image_url", "image_url": image})
                    }
                })
                .collect(),
        ),
    }
}

pub(super) fn wire(msg: &Msg) -> Vec<Value> {
    match msg {
        Msg::System(c) => vec![json!({"role": "system", "content": content(c)})],
        Msg::User { content: c, name } => {
            let mut m = Map::new();
            m.insert("role".into(), "user".into());
            m.insert("content".into(), content(c));
            if let Some(n) = name {
                m.insert("name".into(), Value::String(n.clone()));
            }
            vec![Value::Object(m)]
        }
        Msg::Assistant {
            content: c,
            name,
            calls,
            ..
        } => {
            let mut m = Map::new();
            m.insert("role".into(), "assistant".into());
            let text = match c {
                Some(c) => content(c),
                None if calls.is_empty() => Value::String(String::new()),
                None => Value::Null,
            };
            m.insert("content".into(), text);
            if let Some(n) = name {
                m.insert("name".into(), Value::String(n.clone()));
            }
            if !calls.is_empty() {
                let tool_calls: Vec<Value> = calls
                    .iter()
                    .map(|rc| {
                        json!({
                            "id": rc.call.id,
                            "type": "function",
                            "function": {"name": rc.call.name, "arguments": rc.call.arguments},
                        })
                    })
                    .collect();
                m.insert("tool_calls".into(), Value::Array(tool_calls));
            }
            let mut out = vec![Value::Object(m)];
            out.extend(calls.iter().map(|rc| {
                json!({
                    "role": "tool",
                    "tool_call_id": rc.call.id,
                    "content": text_only(&rc.content),
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
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            })
        })
        .collect()
}

pub(super) fn body(req: &Request) -> Value {
    let messages: Vec<Value> = req.messages.iter().flat_map(wire).collect();
    let mut body = Map::new();
    body.insert("model".into(), Value::String(req.model.clone()));
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools(&req.tools)));
    }
    Value::Object(body)
}
