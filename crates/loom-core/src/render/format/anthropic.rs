//! Anthropic Messages: `{"model", "max_tokens", "system", "messages", "tools"}`.
//!
//! Leading system messages become the `system` blocks; a system event later in the log is sent as
//! user text (the API has no mid-conversation system role). Each assistant turn is followed by one
//! user message holding all its `tool_result` blocks. Cache breakpoints go on the last block of
//! the stable prefix and on the last block of the request, so both the prefix and the growing tail
//! are cached between compaction points. Reasoning text is not sent back (the API only accepts
//! thinking blocks with the provider's signature); a turn that came from Anthropic sends its
//! native `thinking` / `redacted_thinking` blocks back unchanged instead.

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::{arguments_object, text_of, text_only, whole_item};
use crate::api::Api;
use crate::event::{ContentPart, MessageContent};
use crate::render::request::{Msg, RenderedCall, Request, ToolSpec};

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
                ContentPart::Opaque { api, value, .. } if *api == Api::Anthropic => value.clone(),
                ContentPart::Opaque { api, value, .. } => {
                    json!({"type": "text", "text": ContentPart::opaque_text(*api, value)})
                }
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
        Msg::User { content, .. } => match whole_item(content, Api::Anthropic) {
            Some(item) => vec![item.clone()],
            None => vec![json!({"role": "user", "content": blocks(content)})],
        },
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
                .filter(|n| n.api == Api::Anthropic)
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

/// The body written straight from the request: the same bytes as [`body`] serialised. Every map
/// writes its keys in sorted order, as the body's ordered maps do; the wire messages are laid
/// out first (a few words each) so the cache breakpoints can be placed as [`body`] places them.
pub(super) struct Body<'a>(pub(super) &'a Request);

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let req = self.0;
        let leading = req
            .messages
            .iter()
            .take_while(|m| matches!(m, Msg::System(_)))
            .count();
        let system: Vec<&MessageContent> = req.messages[..leading]
            .iter()
            .filter_map(|m| match m {
                Msg::System(c) => Some(c),
                _ => None,
            })
            .collect();
        let mut messages: Vec<Wire<'_>> = Vec::with_capacity(req.messages.len() * 2);
        let mut stable_end: Option<usize> = None;
        for (i, msg) in req.messages.iter().enumerate().skip(leading) {
            match msg {
                Msg::System(c) => messages.push(Wire::System(c)),
                Msg::User { content, .. } => match whole_item(content, Api::Anthropic) {
                    Some(item) => messages.push(Wire::Raw(item)),
                    None => messages.push(Wire::User(content)),
                },
                Msg::Assistant {
                    content,
                    calls,
                    native,
                    ..
                } => {
                    let native = native
                        .as_ref()
                        .filter(|n| n.api == Api::Anthropic)
                        .map_or(&[][..], |n| &n.items);
                    messages.push(Wire::Assistant {
                        native,
                        content: content.as_ref(),
                        calls,
                    });
                    if !calls.is_empty() {
                        messages.push(Wire::Results(calls));
                    }
                }
            }
            if i + 1 == req.stable_len {
                stable_end = messages.len().checked_sub(1);
            }
        }
        let opens_with_user = match messages.first() {
            Some(Wire::System(_) | Wire::User(_) | Wire::Results(_) | Wire::Opening) => true,
            Some(Wire::Raw(item)) => item.get("role") == Some(&Value::from("user")),
            _ => false,
        };
        if !opens_with_user {
            messages.insert(0, Wire::Opening);
            stable_end = stable_end.map(|i| i + 1);
        }
        let mut marked = vec![None; messages.len()];
        let mark_system = match stable_end {
            Some(i) => {
                marked[i] = messages[i].markable();
                false
            }
            None => true,
        };
        if let Some(last) = messages.len().checked_sub(1) {
            marked[last] = messages[last].markable();
        }
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("max_tokens", &req.max_output_tokens)?;
        m.serialize_entry(
            "messages",
            &Messages {
                messages: &messages,
                marked: &marked,
            },
        )?;
        m.serialize_entry("model", &req.model)?;
        if !system.is_empty() {
            m.serialize_entry(
                "system",
                &System {
                    blocks: &system,
                    mark_last: mark_system,
                },
            )?;
        }
        if !req.tools.is_empty() {
            m.serialize_entry("tools", &Tools(&req.tools))?;
        }
        m.end()
    }
}

/// One wire message, as [`wire`] and [`body`] lay them out.
#[derive(Clone, Copy)]
enum Wire<'a> {
    /// The user text sent before a conversation that would open with the assistant.
    Opening,
    /// A system message after the leading ones, sent as user text.
    System(&'a MessageContent),
    User(&'a MessageContent),
    Assistant {
        native: &'a [Value],
        content: Option<&'a MessageContent>,
        calls: &'a [RenderedCall],
    },
    /// The user message holding an assistant turn's results.
    Results(&'a [RenderedCall]),
    /// A whole message Loom does not model, as the client sent it.
    Raw(&'a Value),
}

impl<'a> Wire<'a> {
    /// The content blocks, in order.
    fn blocks(&self) -> Vec<Block<'a>> {
        match *self {
            Wire::Opening => vec![Block::Text(OPENING)],
            Wire::System(c) => vec![Block::SystemText(c)],
            Wire::User(c) => content_blocks(c).collect(),
            Wire::Raw(_) => Vec::new(),
            Wire::Assistant {
                native,
                content,
                calls,
            } => {
                let mut out: Vec<Block<'a>> = native.iter().map(Block::Native).collect();
                out.extend(content.into_iter().flat_map(content_blocks));
                // An assistant message must not be empty.
                if out.is_empty() && calls.is_empty() {
                    out.push(Block::Text(""));
                }
                out.extend(calls.iter().map(Block::ToolUse));
                out
            }
            Wire::Results(calls) => calls.iter().map(Block::Result).collect(),
        }
    }

    /// The index of the last block that may carry a cache breakpoint ([`mark_last_block`]).
    fn markable(&self) -> Option<usize> {
        if let Wire::Raw(item) = self {
            let mut marked = (*item).clone();
            mark_last_block(&mut marked);
            return (marked != **item).then_some(0);
        }
        self.blocks().iter().rposition(|b| match b {
            Block::Native(Value::Object(block)) => !matches!(
                block.get("type").and_then(Value::as_str),
                Some("thinking" | "redacted_thinking")
            ),
            Block::Native(_) => false,
            _ => true,
        })
    }
}

fn content_blocks(c: &MessageContent) -> impl Iterator<Item = Block<'_>> {
    let (text, parts): (Option<&str>, &[ContentPart]) = match c {
        MessageContent::Text(t) => (Some(t.as_str()), &[]),
        MessageContent::Parts(parts) => (None, parts),
    };
    text.into_iter()
        .map(Block::Text)
        .chain(parts.iter().map(|p| match p {
            ContentPart::Text { text } => Block::Text(text),
            ContentPart::Image { url, .. } => Block::Image(url),
            ContentPart::Opaque { api, value, .. } if *api == Api::Anthropic => {
                Block::Native(value)
            }
            ContentPart::Opaque { api, value, .. } => Block::Foreign(*api, value),
        }))
}

/// One content block.
#[derive(Clone, Copy)]
enum Block<'a> {
    /// A block as Anthropic sent it (thinking, or a block Loom does not model).
    Native(&'a Value),
    /// A part Loom does not model that came from another API, sent as text.
    Foreign(Api, &'a Value),
    Text(&'a str),
    /// A system message's text, labelled.
    SystemText(&'a MessageContent),
    Image(&'a str),
    ToolUse(&'a RenderedCall),
    Result(&'a RenderedCall),
}

/// A block with or without the cache breakpoint.
struct Marked<'a> {
    block: Block<'a>,
    mark: bool,
}

#[derive(Serialize)]
struct Ephemeral {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: Ephemeral = Ephemeral { kind: "ephemeral" };

impl Serialize for Marked<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let Block::Native(v) = self.block {
            return match (v, self.mark) {
                (Value::Object(block), true) => {
                    let mut block = block.clone();
                    block.insert("cache_control".into(), json!({"type": "ephemeral"}));
                    block.serialize(s)
                }
                _ => v.serialize(s),
            };
        }
        let mut m = s.serialize_map(None)?;
        if self.mark {
            m.serialize_entry("cache_control", &EPHEMERAL)?;
        }
        match self.block {
            Block::Native(_) => {}
            Block::Text(text) => {
                m.serialize_entry("text", text)?;
                m.serialize_entry("type", "text")?;
            }
            Block::SystemText(c) => {
                m.serialize_entry("text", &format!("[system]\n{}", text_of(c)))?;
                m.serialize_entry("type", "text")?;
            }
            Block::Image(url) => {
                m.serialize_entry("source", &Source(url))?;
                m.serialize_entry("type", "image")?;
            }
            Block::Foreign(api, value) => {
                m.serialize_entry("text", &ContentPart::opaque_text(api, value))?;
                m.serialize_entry("type", "text")?;
            }
            Block::ToolUse(rc) => {
                m.serialize_entry("id", &rc.call.id)?;
                m.serialize_entry("input", &arguments_object(&rc.call.arguments))?;
                m.serialize_entry("name", &rc.call.name)?;
                m.serialize_entry("type", "tool_use")?;
            }
            Block::Result(rc) => {
                m.serialize_entry("content", &text_of(&rc.content))?;
                if rc.is_error {
                    m.serialize_entry("is_error", &true)?;
                }
                m.serialize_entry("tool_use_id", &rc.call.id)?;
                m.serialize_entry("type", "tool_result")?;
            }
        }
        m.end()
    }
}

/// An image's source: inline data, or a URL.
struct Source<'a>(&'a str);

impl Serialize for Source<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        let inline = self
            .0
            .strip_prefix("data:")
            .and_then(|rest| rest.split_once(";base64,"));
        match inline {
            Some((media_type, data)) => {
                m.serialize_entry("data", data)?;
                m.serialize_entry("media_type", media_type)?;
                m.serialize_entry("type", "base64")?;
            }
            None => {
                m.serialize_entry("type", "url")?;
                m.serialize_entry("url", self.0)?;
            }
        }
        m.end()
    }
}

struct Messages<'a> {
    messages: &'a [Wire<'a>],
    /// Per message, the block that carries a cache breakpoint.
    marked: &'a [Option<usize>],
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            self.messages
                .iter()
                .zip(self.marked)
                .map(|(&wire, &mark)| Message { wire, mark }),
        )
    }
}

struct Message<'a> {
    wire: Wire<'a>,
    mark: Option<usize>,
}

impl Serialize for Message<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let Wire::Raw(item) = self.wire {
            if self.mark.is_none() {
                return item.serialize(s);
            }
            let mut marked = item.clone();
            mark_last_block(&mut marked);
            return marked.serialize(s);
        }
        let role = match self.wire {
            Wire::Assistant { .. } => "assistant",
            _ => "user",
        };
        let blocks = self.wire.blocks();
        let mut m = s.serialize_map(None)?;
        m.serialize_entry(
            "content",
            &Blocks {
                blocks: &blocks,
                mark: self.mark,
            },
        )?;
        m.serialize_entry("role", role)?;
        m.end()
    }
}

struct Blocks<'a> {
    blocks: &'a [Block<'a>],
    mark: Option<usize>,
}

impl Serialize for Blocks<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.blocks.iter().enumerate().map(|(i, &block)| Marked {
            block,
            mark: self.mark == Some(i),
        }))
    }
}

/// The leading system messages as text blocks, the last one marked when no message is.
struct System<'a> {
    blocks: &'a [&'a MessageContent],
    mark_last: bool,
}

impl Serialize for System<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let last = self.blocks.len().saturating_sub(1);
        s.collect_seq(self.blocks.iter().enumerate().map(|(i, c)| {
            let text = text_of(c);
            SystemBlock {
                cache_control: (self.mark_last && i == last).then_some(EPHEMERAL),
                text,
                kind: "text",
            }
        }))
    }
}

#[derive(Serialize)]
struct SystemBlock<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<Ephemeral>,
    text: std::borrow::Cow<'a, str>,
    #[serde(rename = "type")]
    kind: &'static str,
}

struct Tools<'a>(&'a [ToolSpec]);

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|t| Tool {
            description: &t.description,
            input_schema: &t.parameters,
            name: &t.name,
        }))
    }
}

#[derive(Serialize)]
struct Tool<'a> {
    description: &'a str,
    input_schema: &'a Value,
    name: &'a str,
}
