//! OpenAI Responses: `{"model", "input": [items], "tools"}`.

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::{text_of, text_only, whole_items};
use crate::api::Api;
use crate::event::{ContentPart, MessageContent};
use crate::render::request::{Msg, RenderedCall, Request, ToolSpec};

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
                ContentPart::Opaque { api, value, .. } if *api == Api::OpenaiResponses => {
                    value.clone()
                }
                ContentPart::Opaque { api, value, .. } => {
                    json!({"type": "input_text", "text": ContentPart::opaque_text(*api, value)})
                }
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

/// Whether a native item of an assistant turn is the turn's output itself, as a `compaction` item
/// (the provider's summary of the conversation before it) is, rather than reasoning before it.
fn is_output(item: &Value) -> bool {
    item.get("type").and_then(Value::as_str) != Some("reasoning")
}

pub(super) fn wire(msg: &Msg) -> Vec<Value> {
    match msg {
        Msg::System(c) => vec![message("system", c)],
        Msg::User { content, .. } => match whole_items(content, Api::OpenaiResponses) {
            Some(items) => items.into_iter().cloned().collect(),
            None => vec![message("user", content)],
        },
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
                .filter(|n| n.api == Api::OpenaiResponses)
                .map(|n| n.items.clone())
                .unwrap_or_default();
            match content {
                Some(c) => out.push(assistant_message(c)),
                // An empty turn still takes its place in the conversation, unless an item of its
                // own stands for it (a `compaction`).
                None if calls.is_empty() && !out.iter().any(is_output) => {
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

/// The body written straight from the request: the same bytes as [`body`] serialised. Every map
/// writes its keys in sorted order, as the body's ordered maps do.
pub(super) struct Body<'a>(pub(super) &'a Request);

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let req = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("input", &Input(&req.messages))?;
        m.serialize_entry("model", &req.model)?;
        if !req.tools.is_empty() {
            m.serialize_entry("tools", &Tools(&req.tools))?;
        }
        m.end()
    }
}

struct Input<'a>(&'a [Msg]);

impl Serialize for Input<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().flat_map(items))
    }
}

/// The items one neutral message becomes, in [`wire`]'s order.
pub(super) fn items(msg: &Msg) -> impl Iterator<Item = Item<'_>> {
    let (native, head, calls): (Vec<&Value>, Option<Item<'_>>, &[RenderedCall]) = match msg {
        Msg::System(c) => (Vec::new(), Some(Item::Message("system", c)), &[]),
        Msg::User { content, .. } => match whole_items(content, Api::OpenaiResponses) {
            Some(items) => (items, None, &[]),
            None => (Vec::new(), Some(Item::Message("user", content)), &[]),
        },
        Msg::Assistant {
            content,
            calls,
            native,
            ..
        } => {
            let native = native
                .as_ref()
                .filter(|n| n.api == Api::OpenaiResponses)
                .map_or_else(Vec::new, |n| n.items.iter().collect());
            let head = match content {
                Some(c) => Some(Item::Assistant(Some(c))),
                None if calls.is_empty() && !native.iter().copied().any(is_output) => {
                    Some(Item::Assistant(None))
                }
                None => None,
            };
            (native, head, calls)
        }
    };
    native
        .into_iter()
        .map(Item::Native)
        .chain(head)
        .chain(calls.iter().map(Item::Call))
        .chain(calls.iter().map(Item::Output))
}

/// One input item.
pub(super) enum Item<'a> {
    /// A reasoning item as the API returned it, or an item Loom does not model as the client
    /// sent it.
    Native(&'a Value),
    /// A system or user message.
    Message(&'static str, &'a MessageContent),
    /// An earlier assistant turn's text (`None`: an empty turn).
    Assistant(Option<&'a MessageContent>),
    Call(&'a RenderedCall),
    Output(&'a RenderedCall),
}

impl Serialize for Item<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let Item::Native(v) = self {
            return v.serialize(s);
        }
        let mut m = s.serialize_map(None)?;
        match self {
            Item::Native(_) => {}
            Item::Message(role, c) => {
                m.serialize_entry("content", &Parts(c))?;
                m.serialize_entry("role", role)?;
                m.serialize_entry("type", "message")?;
            }
            Item::Assistant(c) => {
                match c {
                    Some(c) => m.serialize_entry("content", &text_of(c))?,
                    None => m.serialize_entry("content", "")?,
                }
                m.serialize_entry("role", "assistant")?;
                m.serialize_entry("type", "message")?;
            }
            Item::Call(rc) => {
                m.serialize_entry("arguments", &rc.call.arguments)?;
                m.serialize_entry("call_id", &rc.call.id)?;
                m.serialize_entry("name", &rc.call.name)?;
                m.serialize_entry("type", "function_call")?;
            }
            Item::Output(rc) => {
                m.serialize_entry("call_id", &rc.call.id)?;
                m.serialize_entry("output", &text_of(&rc.content))?;
                m.serialize_entry("type", "function_call_output")?;
            }
        }
        m.end()
    }
}

/// A message's content as input parts.
struct Parts<'a>(&'a MessageContent);

impl Serialize for Parts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            MessageContent::Text(text) => s.collect_seq(std::iter::once(InputText(text))),
            MessageContent::Parts(parts) => s.collect_seq(parts.iter().map(Part)),
        }
    }
}

struct InputText<'a>(&'a str);

impl Serialize for InputText<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("text", self.0)?;
        m.serialize_entry("type", "input_text")?;
        m.end()
    }
}

struct Part<'a>(&'a ContentPart);

impl Serialize for Part<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            ContentPart::Text { text } => InputText(text).serialize(s),
            ContentPart::Image { url, detail } => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("detail", detail.as_deref().unwrap_or("auto"))?;
                m.serialize_entry("image_url", url)?;
                m.serialize_entry("type", "input_image")?;
                m.end()
            }
            ContentPart::Opaque {
                api: Api::OpenaiResponses,
                value,
                ..
            } => value.serialize(s),
            ContentPart::Opaque { api, value, .. } => {
                InputText(&ContentPart::opaque_text(*api, value)).serialize(s)
            }
        }
    }
}

pub(super) struct Tools<'a>(pub(super) &'a [ToolSpec]);

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|t| Tool {
            description: &t.description,
            name: &t.name,
            parameters: &t.parameters,
            kind: "function",
        }))
    }
}

#[derive(Serialize)]
struct Tool<'a> {
    description: &'a str,
    name: &'a str,
    parameters: &'a Value,
    #[serde(rename = "type")]
    kind: &'static str,
}
