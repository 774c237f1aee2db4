//! OpenAI Chat Completions: `{"model", "messages", "tools"}`.

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::{text_of, text_only, whole_item};
use crate::api::Api;
use crate::event::{ContentPart, MessageContent};
use crate::render::request::{Msg, RenderedCall, Request, ToolSpec};

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
                    ContentPart::Opaque { api, value, .. } if *api == Api::OpenaiChat => {
                        value.clone()
                    }
                    ContentPart::Opaque { api, value, .. } => {
                        json!({"type": "text", "text": ContentPart::opaque_text(*api, value)})
                    }
                })
                .collect(),
        ),
    }
}

pub(super) fn wire(msg: &Msg) -> Vec<Value> {
    match msg {
        Msg::System(c) => vec![json!({"role": "system", "content": content(c)})],
        Msg::User { content: c, .. } if whole_item(c, Api::OpenaiChat).is_some() => {
            whole_item(c, Api::OpenaiChat)
                .into_iter()
                .cloned()
                .collect()
        }
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

/// The body written straight from the request: the same bytes as [`body`] serialised. Every map
/// writes its keys in sorted order, as the body's ordered maps do.
pub(super) struct Body<'a>(pub(super) &'a Request);

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let req = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("messages", &Messages(&req.messages))?;
        m.serialize_entry("model", &req.model)?;
        if !req.tools.is_empty() {
            m.serialize_entry("tools", &Tools(&req.tools))?;
        }
        m.end()
    }
}

struct Messages<'a>(&'a [Msg]);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().flat_map(items))
    }
}

/// The wire messages one neutral message becomes, in [`wire`]'s order.
pub(super) fn items(msg: &Msg) -> impl Iterator<Item = Item<'_>> {
    let calls: &[RenderedCall] = match msg {
        Msg::Assistant { calls, .. } => calls,
        _ => &[],
    };
    std::iter::once(Item::Msg(msg)).chain(calls.iter().map(Item::Result))
}

/// One wire message: a neutral message, or one result of an assistant turn's calls.
pub(super) enum Item<'a> {
    Msg(&'a Msg),
    Result(&'a RenderedCall),
}

impl Serialize for Item<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let Item::Msg(Msg::User { content, .. }) = self {
            if let Some(item) = whole_item(content, Api::OpenaiChat) {
                return item.serialize(s);
            }
        }
        let mut m = s.serialize_map(None)?;
        match self {
            Item::Msg(Msg::System(c)) => {
                m.serialize_entry("content", &Content(c))?;
                m.serialize_entry("role", "system")?;
            }
            Item::Msg(Msg::User { content, name }) => {
                m.serialize_entry("content", &Content(content))?;
                if let Some(n) = name {
                    m.serialize_entry("name", n)?;
                }
                m.serialize_entry("role", "user")?;
            }
            Item::Msg(Msg::Assistant {
                content,
                name,
                calls,
                ..
            }) => {
                match content {
                    Some(c) => m.serialize_entry("content", &Content(c))?,
                    None if calls.is_empty() => m.serialize_entry("content", "")?,
                    None => m.serialize_entry("content", &())?,
                }
                if let Some(n) = name {
                    m.serialize_entry("name", n)?;
                }
                m.serialize_entry("role", "assistant")?;
                if !calls.is_empty() {
                    m.serialize_entry("tool_calls", &Calls(calls))?;
                }
            }
            Item::Result(rc) => {
                m.serialize_entry("content", &text_of(&rc.content))?;
                m.serialize_entry("role", "tool")?;
                m.serialize_entry("tool_call_id", &rc.call.id)?;
            }
        }
        m.end()
    }
}

struct Content<'a>(&'a MessageContent);

impl Serialize for Content<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            MessageContent::Text(text) => s.serialize_str(text),
            MessageContent::Parts(parts) => s.collect_seq(parts.iter().map(Part)),
        }
    }
}

struct Part<'a>(&'a ContentPart);

impl Serialize for Part<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let ContentPart::Opaque {
            api: Api::OpenaiChat,
            value,
            ..
        } = self.0
        {
            return value.serialize(s);
        }
        let mut m = s.serialize_map(None)?;
        match self.0 {
            ContentPart::Text { text } => {
                m.serialize_entry("text", text)?;
                m.serialize_entry("type", "text")?;
            }
            ContentPart::Image { url, detail } => {
                m.serialize_entry(
                    "image_url",
                    &ImageUrl {
                        detail: detail.as_deref(),
                        url,
                    },
                )?;
                m.serialize_entry("type", "image_url")?;
            }
            ContentPart::Opaque { api, value, .. } => {
                m.serialize_entry("text", &ContentPart::opaque_text(*api, value))?;
                m.serialize_entry("type", "text")?;
            }
        }
        m.end()
    }
}

#[derive(Serialize)]
struct ImageUrl<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'a str>,
    url: &'a str,
}

struct Calls<'a>(&'a [RenderedCall]);

impl Serialize for Calls<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|rc| Call {
            function: Function {
                arguments: &rc.call.arguments,
                name: &rc.call.name,
            },
            id: &rc.call.id,
            kind: "function",
        }))
    }
}

#[derive(Serialize)]
struct Call<'a> {
    function: Function<'a>,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct Function<'a> {
    arguments: &'a str,
    name: &'a str,
}

pub(super) struct Tools<'a>(pub(super) &'a [ToolSpec]);

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|t| Tool {
            function: ToolFunction {
                description: &t.description,
                name: &t.name,
                parameters: &t.parameters,
            },
            kind: "function",
        }))
    }
}

#[derive(Serialize)]
struct Tool<'a> {
    function: ToolFunction<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct ToolFunction<'a> {
    description: &'a str,
    name: &'a str,
    parameters: &'a Value,
}
