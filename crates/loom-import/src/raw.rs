//! Raw records: the union of the three formats' fields, read by hand-written serde visitors.
//!
//! One raw shape serves every format so that `auto` can look at what a record holds before
//! choosing a converter, and so the file is read once. The visitors are written by hand for two
//! reasons a derive cannot meet: long strings (tool output above the inline limit) are streamed
//! into the blob store straight from serde_json's scratch buffer in `visit_str`, so a 100 MB
//! output is never held twice; and each visitor records where it is (`messages[3].content`) so a
//! type error names its field.

use std::cell::RefCell;
use std::fmt;

use crate::sink::{BlobSink, SinkError};
use loom_core::BlobInfo;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::input::Tracker;

/// A string that may have been offloaded because it was longer than the inline limit.
#[derive(Debug)]
pub(crate) enum Text {
    /// Kept in memory.
    Inline(String),
    /// Already in the blob store; the stats are those of its bytes.
    Spilled(BlobInfo),
}

impl Text {
    /// Length in bytes.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Self::Inline(s) => s.len() as u64,
            Self::Spilled(info) => info.stats.bytes,
        }
    }
}

/// A `content`-like field: a string, a list of blocks or parts, or null.
#[derive(Debug)]
pub(crate) enum Content {
    Null,
    Text(Text),
    Blocks(Vec<RawBlock>),
}

/// One content block or part, whatever its format (`text`, `image_url`, `tool_use`, ...).
#[derive(Debug, Default)]
pub(crate) struct RawBlock {
    pub(crate) kind: Option<String>,
    pub(crate) text: Option<Text>,
    pub(crate) image_url: Option<serde_json::Value>,
    pub(crate) detail: Option<String>,
    pub(crate) source: Option<serde_json::Value>,
    pub(crate) id: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) input: Option<Box<RawValue>>,
    pub(crate) tool_use_id: Option<String>,
    pub(crate) content: Option<Content>,
    pub(crate) is_error: Option<bool>,
    pub(crate) thinking: Option<String>,
    /// Anthropic's signature of a `thinking` block, needed to send the block back.
    pub(crate) signature: Option<String>,
    /// The encrypted payload of an Anthropic `redacted_thinking` block.
    pub(crate) data: Option<String>,
    pub(crate) refusal: Option<String>,
    /// Fields none of the above names, as they came: what makes a block Loom does not model
    /// whole again (see `opaque`).
    pub(crate) extra: serde_json::Map<String, serde_json::Value>,
}

/// An OpenAI Chat `tool_calls` entry: a function call, or a call to a custom (freeform) tool.
#[derive(Debug, Deserialize)]
pub(crate) struct RawToolCall {
    pub(crate) id: Option<String>,
    pub(crate) function: Option<RawFunction>,
    pub(crate) custom: Option<RawCustom>,
}

/// An OpenAI Chat call to a custom tool: its name and its free-form input.
#[derive(Debug, Deserialize)]
pub(crate) struct RawCustom {
    pub(crate) name: Option<String>,
    pub(crate) input: Option<Box<RawValue>>,
}

/// An OpenAI Chat function (in `tool_calls` or the legacy `function_call`).
#[derive(Debug, Deserialize)]
pub(crate) struct RawFunction {
    pub(crate) name: Option<String>,
    pub(crate) arguments: Option<Box<RawValue>>,
}

/// One message (Chat, Anthropic) or input item (Responses).
#[derive(Debug, Default)]
pub(crate) struct RawItem {
    /// Line where the item starts.
    pub(crate) line: u64,
    pub(crate) role: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) content: Option<Content>,
    pub(crate) name: Option<String>,
    pub(crate) tool_calls: Option<Vec<RawToolCall>>,
    pub(crate) tool_call_id: Option<String>,
    pub(crate) function_call: Option<RawFunction>,
    pub(crate) reasoning_content: Option<String>,
    pub(crate) reasoning: Option<serde_json::Value>,
    pub(crate) refusal: Option<String>,
    pub(crate) call_id: Option<String>,
    pub(crate) arguments: Option<Box<RawValue>>,
    pub(crate) output: Option<Content>,
    pub(crate) summary: Option<Vec<RawBlock>>,
    pub(crate) input: Option<Box<RawValue>>,
    /// A Responses item's id (a string; other values are not ids and are ignored).
    pub(crate) id: Option<String>,
    /// A Responses reasoning item's `encrypted_content`, as given (a string or null).
    pub(crate) encrypted_content: Option<serde_json::Value>,
    /// Fields none of the above names, as they came (see `RawBlock::extra`).
    pub(crate) extra: serde_json::Map<String, serde_json::Value>,
}

/// Where a record keeps its items, for error paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ItemsKey {
    /// A bare array at the top level.
    #[default]
    Bare,
    /// `messages` (Chat, Anthropic).
    Messages,
    /// `input` (Responses).
    Input,
    /// `contents` (Gemini).
    Contents,
}

impl ItemsKey {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Bare => "",
            Self::Messages => "messages",
            Self::Input => "input",
            Self::Contents => "contents",
        }
    }
}

/// One top-level value: a bare list of items, or an object holding them.
#[derive(Debug, Default)]
pub(crate) struct RawRecord {
    pub(crate) id: Option<String>,
    pub(crate) source: Option<String>,
    pub(crate) items: Option<Vec<RawItem>>,
    pub(crate) items_key: ItemsKey,
    pub(crate) system: Option<Content>,
    pub(crate) instructions: Option<Content>,
    /// Whether both `messages` and `input` were present.
    pub(crate) both_keys: bool,
    /// A string given as `input` (Responses accepts a single user message this way).
    pub(crate) input_text: bool,
    /// Gemini's `contents`, read whole (its parts have shapes of their own).
    pub(crate) contents: Option<Vec<serde_json::Value>>,
    /// Gemini's `systemInstruction`.
    pub(crate) system_instruction: Option<serde_json::Value>,
}

/// One step of the path to the value being read.
#[derive(Debug, Clone, Copy)]
enum Seg {
    Key(&'static str),
    Index(usize),
}

/// What every visitor needs: where to offload long strings, and where it is.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    blobs: &'a dyn BlobSink,
    inline_limit: usize,
    tracker: &'a Tracker,
    path: RefCell<Vec<Seg>>,
    blob_error: RefCell<Option<SinkError>>,
    /// Whether fields the raw shapes do not name are kept (`extra`), for blocks and items Loom
    /// does not model; a reader held to a named format skips them, as it always did.
    keep_unknown: bool,
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(blobs: &'a dyn BlobSink, inline_limit: usize, tracker: &'a Tracker) -> Self {
        Self {
            blobs,
            inline_limit,
            tracker,
            path: RefCell::new(Vec::new()),
            keep_unknown: false,
            blob_error: RefCell::new(None),
        }
    }

    /// Keeps the fields the raw shapes do not name (see `RawBlock::extra`).
    pub(crate) fn keeping_unknown(mut self, keep: bool) -> Self {
        self.keep_unknown = keep;
        self
    }

    /// Starts a new record.
    pub(crate) fn reset(&self) {
        self.path.borrow_mut().clear();
    }

    /// The path to the value being read when parsing stopped (`messages[3].content`).
    pub(crate) fn path(&self) -> String {
        let mut out = String::new();
        for seg in self.path.borrow().iter() {
            match seg {
                Seg::Key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Seg::Index(i) => {
                    out.push('[');
                    out.push_str(&i.to_string());
                    out.push(']');
                }
            }
        }
        out
    }

    /// The blob store's error, if that is why parsing stopped.
    pub(crate) fn take_blob_error(&self) -> Option<SinkError> {
        self.blob_error.borrow_mut().take()
    }

    fn enter(&self, seg: Seg) {
        self.path.borrow_mut().push(seg);
    }

    fn leave(&self) {
        self.path.borrow_mut().pop();
    }

    /// Keeps a short string; streams a long one into the blob store from the parser's buffer.
    fn text<E: de::Error>(&self, s: &str) -> Result<Text, E> {
        if s.len() <= self.inline_limit {
            return Ok(Text::Inline(s.to_owned()));
        }
        match self.blobs.offload(s.as_bytes()) {
            Ok(info) => Ok(Text::Spilled(info)),
            Err(e) => {
                *self.blob_error.borrow_mut() = Some(e);
                Err(E::custom("the blob store failed"))
            }
        }
    }
}

/// Every key the raw shapes know; anything else is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Role,
    Type,
    Content,
    Name,
    ToolCalls,
    ToolCallId,
    FunctionCall,
    ReasoningContent,
    Reasoning,
    Refusal,
    CallId,
    Arguments,
    Output,
    Summary,
    Id,
    Input,
    Text,
    ImageUrl,
    Detail,
    Source,
    ToolUseId,
    IsError,
    Thinking,
    Signature,
    Data,
    EncryptedContent,
    Messages,
    System,
    Instructions,
    Contents,
    SystemInstruction,
    Other,
}

impl Field {
    const ALL: [(Self, &'static str); 31] = [
        (Self::Role, "role"),
        (Self::Type, "type"),
        (Self::Content, "content"),
        (Self::Name, "name"),
        (Self::ToolCalls, "tool_calls"),
        (Self::ToolCallId, "tool_call_id"),
        (Self::FunctionCall, "function_call"),
        (Self::ReasoningContent, "reasoning_content"),
        (Self::Reasoning, "reasoning"),
        (Self::Refusal, "refusal"),
        (Self::CallId, "call_id"),
        (Self::Arguments, "arguments"),
        (Self::Output, "output"),
        (Self::Summary, "summary"),
        (Self::Id, "id"),
        (Self::Input, "input"),
        (Self::Text, "text"),
        (Self::ImageUrl, "image_url"),
        (Self::Detail, "detail"),
        (Self::Source, "source"),
        (Self::ToolUseId, "tool_use_id"),
        (Self::IsError, "is_error"),
        (Self::Thinking, "thinking"),
        (Self::Signature, "signature"),
        (Self::Data, "data"),
        (Self::EncryptedContent, "encrypted_content"),
        (Self::Messages, "messages"),
        (Self::System, "system"),
        (Self::Instructions, "instructions"),
        (Self::Contents, "contents"),
        (Self::SystemInstruction, "systemInstruction"),
    ];

    fn of(name: &str) -> Self {
        Self::ALL
            .iter()
            .find(|(_, n)| *n == name)
            .map_or(Self::Other, |(f, _)| *f)
    }

    fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(f, _)| *f == self)
            .map_or("?", |(_, n)| n)
    }
}

struct FieldSeed;

/// A key: the field it names, and its text when it names none the raw shapes know.
type Key = (Field, Option<String>);

impl<'de> DeserializeSeed<'de> for FieldSeed {
    type Value = Key;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl Visitor<'_> for FieldSeed {
    type Value = Key;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
        Ok(match Field::of(v) {
            Field::Other => (Field::Other, Some(v.to_owned())),
            known => (known, None),
        })
    }
}

/// Reads the value of `field` with `read`, keeping the path up to date.
fn field<'de, A, T>(
    ctx: &Ctx<'_>,
    map: &mut A,
    field: Field,
    read: impl FnOnce(&mut A) -> Result<T, A::Error>,
) -> Result<T, A::Error>
where
    A: MapAccess<'de>,
{
    ctx.enter(Seg::Key(field.name()));
    let value = read(map)?;
    ctx.leave();
    Ok(value)
}

/// A string that may be offloaded.
struct TextSeed<'c, 'a>(&'c Ctx<'a>);

impl<'de> DeserializeSeed<'de> for TextSeed<'_, '_> {
    type Value = Text;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Text, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for TextSeed<'_, '_> {
    type Value = Text;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Text, E> {
        self.0.text(v)
    }
}

/// A `content`-like value: string, null or a list of blocks.
pub(crate) struct ContentSeed<'c, 'a>(&'c Ctx<'a>);

impl<'de> DeserializeSeed<'de> for ContentSeed<'_, '_> {
    type Value = Content;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Content, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ContentSeed<'_, '_> {
    type Value = Content;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, a list of content blocks, or null")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Content, E> {
        self.0.text(v).map(Content::Text)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Content, E> {
        Ok(Content::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Content, E> {
        Ok(Content::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Content, A::Error> {
        blocks(self.0, seq).map(Content::Blocks)
    }
}

/// A `content`-like value, or, in a block or item Loom does not model, any other JSON (a server
/// tool result's error object, a computer call's screenshot): `Err` with the value as it came.
/// A reader held to a named format refuses the other values, as [`ContentSeed`] does.
struct ContentOrValueSeed<'c, 'a>(&'c Ctx<'a>);

impl<'de> DeserializeSeed<'de> for ContentOrValueSeed<'_, '_> {
    type Value = Result<Content, serde_json::Value>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl ContentOrValueSeed<'_, '_> {
    fn other<E: de::Error>(
        &self,
        value: serde_json::Value,
        unexpected: de::Unexpected<'_>,
    ) -> Result<Result<Content, serde_json::Value>, E> {
        if self.0.keep_unknown {
            Ok(Err(value))
        } else {
            Err(E::invalid_type(
                unexpected,
                &"a string, a list of content blocks, or null",
            ))
        }
    }
}

impl<'de> Visitor<'de> for ContentOrValueSeed<'_, '_> {
    type Value = Result<Content, serde_json::Value>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, a list of content blocks, null or any JSON value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        self.0.text(v).map(|t| Ok(Content::Text(t)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Ok(Content::Null))
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Ok(Content::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        blocks(self.0, seq).map(|b| Ok(Content::Blocks(b)))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let value = serde_json::Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        self.other(value, de::Unexpected::Map)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        self.other(serde_json::Value::Bool(v), de::Unexpected::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        self.other(serde_json::Value::from(v), de::Unexpected::Signed(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        self.other(serde_json::Value::from(v), de::Unexpected::Unsigned(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        self.other(serde_json::Value::from(v), de::Unexpected::Float(v))
    }
}

fn blocks<'de, A: SeqAccess<'de>>(ctx: &Ctx<'_>, mut seq: A) -> Result<Vec<RawBlock>, A::Error> {
    let mut out = Vec::new();
    loop {
        ctx.enter(Seg::Index(out.len()));
        let Some(block) = seq.next_element_seed(BlockSeed(ctx))? else {
            ctx.leave();
            return Ok(out);
        };
        ctx.leave();
        out.push(block);
    }
}

struct BlocksSeed<'c, 'a>(&'c Ctx<'a>);

impl<'de> DeserializeSeed<'de> for BlocksSeed<'_, '_> {
    type Value = Vec<RawBlock>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Vec<RawBlock>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for BlocksSeed<'_, '_> {
    type Value = Vec<RawBlock>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of blocks")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Vec<RawBlock>, A::Error> {
        blocks(self.0, seq)
    }
}

struct BlockSeed<'c, 'a>(&'c Ctx<'a>);

impl<'de> DeserializeSeed<'de> for BlockSeed<'_, '_> {
    type Value = RawBlock;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<RawBlock, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for BlockSeed<'_, '_> {
    type Value = RawBlock;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a content block object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawBlock, A::Error> {
        let ctx = self.0;
        let mut b = RawBlock::default();
        while let Some((key, other)) = map.next_key_seed(FieldSeed)? {
            field(ctx, &mut map, key, |map| {
                match key {
                    Field::Type => b.kind = map.next_value()?,
                    Field::Text => b.text = Some(map.next_value_seed(TextSeed(ctx))?),
                    Field::ImageUrl => b.image_url = map.next_value()?,
                    Field::Detail => b.detail = map.next_value()?,
                    Field::Source => b.source = map.next_value()?,
                    Field::Id => b.id = map.next_value()?,
                    Field::Name => b.name = map.next_value()?,
                    Field::Input => b.input = Some(map.next_value()?),
                    Field::ToolUseId => b.tool_use_id = map.next_value()?,
                    Field::Content => match map.next_value_seed(ContentOrValueSeed(ctx))? {
                        Ok(content) => b.content = Some(content),
                        Err(value) => {
                            b.extra.insert("content".into(), value);
                        }
                    },
                    Field::IsError => b.is_error = map.next_value()?,
                    Field::Thinking => b.thinking = map.next_value()?,
                    // Other formats may use these names for other things: only strings count.
                    Field::Signature => b.signature = string_only(map.next_value()?),
                    Field::Data => b.data = string_only(map.next_value()?),
                    Field::Refusal => b.refusal = map.next_value()?,
                    // Any other field, kept for a block Loom does not model.
                    _ if ctx.keep_unknown => {
                        let value = map.next_value()?;
                        let name = other.unwrap_or_else(|| key.name().to_owned());
                        b.extra.insert(name, value);
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(())
            })?;
        }
        Ok(b)
    }
}

struct ItemSeed<'c, 'a>(&'c Ctx<'a>);

impl<'de> DeserializeSeed<'de> for ItemSeed<'_, '_> {
    type Value = RawItem;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<RawItem, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ItemSeed<'_, '_> {
    type Value = RawItem;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawItem, A::Error> {
        let ctx = self.0;
        let mut it = RawItem {
            line: ctx.tracker.line(),
            ..RawItem::default()
        };
        while let Some((key, other)) = map.next_key_seed(FieldSeed)? {
            field(ctx, &mut map, key, |map| {
                match key {
                    Field::Role => it.role = map.next_value()?,
                    Field::Type => it.kind = map.next_value()?,
                    Field::Content => match map.next_value_seed(ContentOrValueSeed(ctx))? {
                        Ok(content) => it.content = Some(content),
                        Err(value) => {
                            it.extra.insert("content".into(), value);
                        }
                    },
                    Field::Name => it.name = map.next_value()?,
                    Field::ToolCalls => it.tool_calls = map.next_value()?,
                    Field::ToolCallId => it.tool_call_id = map.next_value()?,
                    Field::FunctionCall => it.function_call = map.next_value()?,
                    Field::ReasoningContent => it.reasoning_content = map.next_value()?,
                    Field::Reasoning => it.reasoning = map.next_value()?,
                    Field::Refusal => it.refusal = map.next_value()?,
                    Field::CallId => it.call_id = map.next_value()?,
                    Field::Arguments => it.arguments = Some(map.next_value()?),
                    Field::Output => match map.next_value_seed(ContentOrValueSeed(ctx))? {
                        Ok(output) => it.output = Some(output),
                        Err(value) => {
                            it.extra.insert("output".into(), value);
                        }
                    },
                    Field::Summary => it.summary = Some(map.next_value_seed(BlocksSeed(ctx))?),
                    Field::Input => it.input = Some(map.next_value()?),
                    Field::Id => it.id = string_only(map.next_value()?),
                    Field::EncryptedContent => it.encrypted_content = Some(map.next_value()?),
                    // Any other field, kept for an item Loom does not model.
                    _ if ctx.keep_unknown => {
                        let value = map.next_value()?;
                        let name = other.unwrap_or_else(|| key.name().to_owned());
                        it.extra.insert(name, value);
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(())
            })?;
        }
        Ok(it)
    }
}

fn items<'de, A: SeqAccess<'de>>(ctx: &Ctx<'_>, mut seq: A) -> Result<Vec<RawItem>, A::Error> {
    let mut out = Vec::new();
    loop {
        ctx.enter(Seg::Index(out.len()));
        let Some(item) = seq.next_element_seed(ItemSeed(ctx))? else {
            ctx.leave();
            return Ok(out);
        };
        ctx.leave();
        out.push(item);
    }
}

/// `messages`, or `input` (a list of items or a single user string).
struct ItemsSeed<'c, 'a>(&'c Ctx<'a>);

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_, '_> {
    type Value = (Vec<RawItem>, bool);
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_, '_> {
    type Value = (Vec<RawItem>, bool);
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of messages")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Ok((items(self.0, seq)?, false))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        let item = RawItem {
            line: self.0.tracker.line(),
            role: Some("user".into()),
            content: Some(Content::Text(self.0.text(v)?)),
            ..RawItem::default()
        };
        Ok((vec![item], true))
    }
}

/// A top-level value.
pub(crate) struct RecordSeed<'c, 'a>(pub(crate) &'c Ctx<'a>);

impl<'de> DeserializeSeed<'de> for RecordSeed<'_, '_> {
    type Value = RawRecord;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<RawRecord, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for RecordSeed<'_, '_> {
    type Value = RawRecord;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of messages or an object with `messages` or `input`")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<RawRecord, A::Error> {
        Ok(RawRecord {
            items: Some(items(self.0, seq)?),
            ..RawRecord::default()
        })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawRecord, A::Error> {
        let ctx = self.0;
        let mut r = RawRecord::default();
        while let Some((key, _)) = map.next_key_seed(FieldSeed)? {
            field(ctx, &mut map, key, |map| {
                match key {
                    Field::Id => r.id = scalar_text(map.next_value()?),
                    Field::Source => r.source = scalar_text(map.next_value()?),
                    Field::Messages | Field::Input => {
                        let (items, from_text) = map.next_value_seed(ItemsSeed(ctx))?;
                        r.both_keys |= r.items.is_some();
                        r.items = Some(items);
                        r.input_text = from_text;
                        r.items_key = if key == Field::Messages {
                            ItemsKey::Messages
                        } else {
                            ItemsKey::Input
                        };
                    }
                    Field::System => r.system = Some(map.next_value_seed(ContentSeed(ctx))?),
                    Field::Instructions => {
                        r.instructions = Some(map.next_value_seed(ContentSeed(ctx))?);
                    }
                    Field::Contents => {
                        r.contents = Some(map.next_value()?);
                        r.items_key = ItemsKey::Contents;
                    }
                    Field::SystemInstruction => r.system_instruction = Some(map.next_value()?),
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(())
            })?;
        }
        Ok(r)
    }
}

/// A string, or nothing for any other value.
fn string_only(v: serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s),
        _ => None,
    }
}

/// A string or number as text (ids are sometimes numbers); anything else is ignored.
fn scalar_text(v: serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::BlobSink;
    use loom_core::BlobRef;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Blobs in a map, keyed by their hash (the unit tests cannot use a store's: `loom-store`
    /// links this crate's library, not this test build).
    #[derive(Debug, Default)]
    struct MemoryBlobStore(Mutex<HashMap<BlobRef, Vec<u8>>>);

    impl MemoryBlobStore {
        fn new() -> Self {
            Self::default()
        }

        fn get(&self, blob: &BlobRef) -> Option<Vec<u8>> {
            self.0.lock().unwrap().get(blob).cloned()
        }
    }

    impl BlobSink for MemoryBlobStore {
        fn offload_reader(&self, reader: &mut dyn std::io::Read) -> Result<BlobInfo, SinkError> {
            let mut bytes = Vec::new();
            reader.read_to_end(&mut bytes)?;
            let stats = loom_core::ContentStats::of(&bytes);
            let blob = BlobRef::from_hex(&stats.sha256)?;
            self.0.lock().unwrap().insert(blob.clone(), bytes);
            Ok(BlobInfo { blob, stats })
        }

        fn fetch(&self, blob: &BlobRef) -> Result<Vec<u8>, SinkError> {
            self.get(blob).ok_or_else(|| "no such blob".into())
        }
    }

    fn parse(json: &str, limit: usize, blobs: &MemoryBlobStore) -> Result<RawRecord, String> {
        let tracker = Tracker::new();
        let ctx = Ctx::new(blobs, limit, &tracker);
        let mut input = crate::input::Input::new(json.as_bytes(), &tracker);
        let mut de = serde_json::Deserializer::from_reader(&mut input);
        RecordSeed(&ctx)
            .deserialize(&mut de)
            .map_err(|e| format!("{} @ {}", ctx.path(), e))
    }

    #[test]
    fn long_strings_go_to_the_blob_store() {
        let blobs = MemoryBlobStore::new();
        let json = r#"{"id": 7, "messages": [{"role": "tool", "content": "0123456789abc"},
                       {"role": "user", "content": "short"}]}"#;
        let r = parse(json, 10, &blobs).unwrap();
        assert_eq!(r.id.as_deref(), Some("7"));
        let items = r.items.unwrap();
        match &items[0].content {
            Some(Content::Text(Text::Spilled(info))) => {
                assert_eq!(info.stats.bytes, 13);
                assert_eq!(blobs.get(&info.blob).unwrap(), b"0123456789abc");
            }
            other => panic!("expected a spilled string, got {other:?}"),
        }
        assert!(matches!(&items[1].content, Some(Content::Text(Text::Inline(s))) if s == "short"));
        assert_eq!(items[1].line, 2);
    }

    #[test]
    fn type_errors_carry_the_path() {
        let blobs = MemoryBlobStore::new();
        let json = r#"{"messages": [{"role": "user", "content": "a"}, {"role": 5}]}"#;
        let e = parse(json, 1024, &blobs).unwrap_err();
        assert!(e.starts_with("messages[1].role @ invalid type"), "{e}");
        let json = r#"{"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}"#;
        let e = parse(json, 1024, &blobs).unwrap_err();
        assert!(e.starts_with("messages[0].content[0].text @"), "{e}");
    }

    #[test]
    fn arguments_keep_their_raw_text() {
        let blobs = MemoryBlobStore::new();
        let json = r#"[{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "f", "arguments": {"b": 1, "a": [2]}}}]}]"#;
        let r = parse(json, 1024, &blobs).unwrap();
        let items = r.items.unwrap();
        let calls = items[0].tool_calls.as_ref().unwrap();
        let args = calls[0]
            .function
            .as_ref()
            .unwrap()
            .arguments
            .as_ref()
            .unwrap();
        assert_eq!(args.get(), r#"{"b": 1, "a": [2]}"#);
    }
}
