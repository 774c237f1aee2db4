//! Reading a client's history in O(what is new).
//!
//! A client sends its whole conversation with every call, and at a thousand turns that is
//! megabytes that were checked and read into events on the calls before. The body is split once
//! into its top-level fields and the raw text of each conversation item, and every prefix of the
//! items is hashed. A live session remembers the last body synced into it ([`BodyMemo`]): how
//! many items it had, their hash, the call ids they used, and how many of the log's events they
//! were read into. When the next body starts with those same bytes, only the items after them
//! are checked ([`loom_wire::check_continuation`]) and imported (with their positions in the
//! whole conversation), and compared with what the log holds past that point.
//!
//! The shortcut is taken only where it gives exactly what reading the whole body would: the
//! remembered items must end where no call waits for its result and no assistant turn is open
//! (after a user message or a tool result), and the importer-relevant header (Anthropic's
//! `system`, Responses' `instructions`) must be unchanged. Anything else — a first call, an
//! edited history, a continuation that fails its check or its import — reads the whole body,
//! which also gives the error its exact place.

use std::ops::Range;

pub(crate) use loom_session::BodyMemo;

use axum::body::Bytes;
use loom_core::Api;
use loom_core::{EventBody, NewEvent, SessionId};
use loom_wire::{check_continuation, CallIds};
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use xxhash_rust::xxh3::xxh3_128;

use crate::error::{ApiError, Result};
use crate::state::now_ms;
use loom_session::live::Backend;

/// A request body split into its fields and its conversation's raw items.
#[derive(Debug)]
pub(crate) struct RequestBody {
    api: Api,
    raw: Bytes,
    /// Every top-level field but the conversation's items.
    pub fields: Map<String, Value>,
    /// Where each item of the conversation is in `raw`; `None` when the conversation is not a
    /// list (a Responses `input` string) or is missing.
    items: Option<Vec<Range<usize>>>,
    /// `prefix[i]` is the hash of the first `i` items.
    prefix: Vec<u128>,
    /// `hashes[i]` is the hash of item `i`'s bytes.
    hashes: Vec<u128>,
    /// The hash of the top-level fields the importer reads besides the items.
    header: u128,
    /// The model the request's path names (Gemini's), which its body does not.
    path_model: Option<String>,
}

/// A history read from a body: its events and the call ids it used.
#[derive(Debug)]
pub(crate) struct Read {
    /// The events, in order.
    pub events: Vec<NewEvent>,
    /// Every call id they use, for checking the next continuation.
    calls: CallIds,
}

impl RequestBody {
    /// Splits `raw`; its errors are those of parsing the body as JSON.
    pub(crate) fn parse(api: Api, raw: Bytes) -> Result<Self> {
        let key = api.history_field();
        let mut de = serde_json::Deserializer::from_slice(&raw);
        let split = Envelope { key }
            .deserialize(&mut de)
            .and_then(|e| de.end().map(|()| e));
        let envelope = match split {
            Ok(e) => e,
            // The plain parser's words for what is wrong, or that the body is no object.
            Err(_) => {
                let value: Value = serde_json::from_slice(&raw)
                    .map_err(|e| ApiError::invalid(format!("the body is not valid JSON: {e}")))?;
                if !value.is_object() {
                    return Err(ApiError::invalid("the body must be a JSON object"));
                }
                return Err(ApiError::invalid("the body could not be read as JSON"));
            }
        };
        let Split { fields, items } = envelope;
        // Each item is borrowed from `raw`: where it sits there is its pointer's offset. Should
        // one not lie inside (it cannot), the body is read whole, never sliced wrong.
        let base = raw.as_ptr() as usize;
        let items: Option<Vec<Range<usize>>> = items.and_then(|items| {
            items
                .iter()
                .map(|item| {
                    let text = item.get().as_bytes();
                    let start = (text.as_ptr() as usize).checked_sub(base)?;
                    let range = start..start.checked_add(text.len())?;
                    (range.end <= raw.len()).then_some(range)
                })
                .collect()
        });
        let mut prefix = vec![0u128];
        let mut hashes = Vec::with_capacity(items.as_ref().map_or(0, Vec::len));
        let mut running = 0u128;
        for range in items.iter().flatten() {
            let item = xxh3_128(&raw[range.clone()]);
            hashes.push(item);
            let mut pair = [0u8; 32];
            pair[..16].copy_from_slice(&running.to_le_bytes());
            pair[16..].copy_from_slice(&item.to_le_bytes());
            running = xxh3_128(&pair);
            prefix.push(running);
        }
        let header = header_of(&fields);
        Ok(Self {
            api,
            raw,
            fields,
            items,
            prefix,
            hashes,
            header,
            path_model: None,
        })
    }

    /// The body as the client sent it.
    pub(crate) fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// How many items the conversation has (0 when it is not a list).
    pub(crate) fn item_count(&self) -> usize {
        self.items.as_ref().map_or(0, Vec::len)
    }

    /// The hash of item `i`'s raw bytes (taken when the body was split).
    pub(crate) fn item_hash(&self, i: usize) -> Option<u128> {
        self.hashes.get(i).copied()
    }

    /// Item `i` as the client sent it.
    pub(crate) fn item_value(&self, i: usize) -> Option<Value> {
        let range = self.items.as_ref()?.get(i)?;
        serde_json::from_slice(self.item(range)).ok()
    }

    /// The model the request names: in its path (Gemini), else in the body.
    pub(crate) fn model(&self) -> &str {
        if let Some(model) = &self.path_model {
            return model;
        }
        self.fields
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The body of a request whose path names its model.
    pub(crate) fn with_model(mut self, model: Option<String>) -> Self {
        self.path_model = model;
        self
    }

    fn item(&self, range: &Range<usize>) -> &[u8] {
        &self.raw[range.clone()]
    }

    /// The whole history: the body checked, then read into events.
    pub(crate) fn read_whole(&self, b: Backend<'_>, session: &SessionId) -> Result<Read> {
        let value: Value = serde_json::from_slice(&self.raw)
            .map_err(|e| ApiError::invalid(format!("the body is not valid JSON: {e}")))?;
        let mut calls = CallIds::default();
        check_continuation(self.api, &value, &mut calls).map_err(|e| {
            ApiError::invalid_field(e.field.clone(), format!("{}: {}", e.field, e.reason))
        })?;
        let events = import(b, self.api, session, &self.raw, 0)?;
        Ok(Read { events, calls })
    }

    /// The history after the items `memo` remembers, when this body starts with them and the
    /// rest reads cleanly on its own; `None` sends the caller to [`Self::read_whole`].
    pub(crate) fn read_continuation(
        &self,
        b: Backend<'_>,
        session: &SessionId,
        memo: &BodyMemo,
    ) -> Option<Read> {
        let items = self.items.as_ref()?;
        let continues = ["previous_response_id", "conversation"]
            .iter()
            .any(|k| self.fields.get(*k).is_some_and(|v| !v.is_null()));
        if memo.api != self.api
            || memo.header != self.header
            || continues
            || memo.items > items.len()
        {
            return None;
        }
        if self.prefix.get(memo.items) != Some(&memo.digest) {
            // The remembered items again but for a cache breakpoint moved off the last of them.
            let moved = memo.items.checked_sub(1).and_then(|last| {
                let before = self.prefix.get(last) == Some(&memo.before_last);
                let unmarked = unmarked_hash(self.item(&items[last]));
                (before && unmarked.is_some() && unmarked == memo.last_unmarked).then_some(())
            });
            moved?;
        }
        let new = &items[memo.items..];
        if new.is_empty() {
            // The same conversation again (a retry): nothing new to check or read.
            return Some(Read {
                events: Vec::new(),
                calls: memo.calls.clone(),
            });
        }
        let key = self.api.history_field();
        let mut parsed = Vec::with_capacity(new.len());
        for range in new {
            parsed.push(serde_json::from_slice::<Value>(self.item(range)).ok()?);
        }
        let mut check = self.fields.clone();
        check.insert(key.into(), Value::Array(parsed));
        let mut calls = memo.calls.clone();
        check_continuation(self.api, &Value::Object(check), &mut calls).ok()?;
        // A reused call id is given its alias from every call before it (`Ledger::fresh_id`),
        // which only the whole conversation holds.
        if calls.reused() {
            return None;
        }
        let mut doc = Vec::with_capacity(new.iter().map(|r| r.len() + 1).sum::<usize>() + 16);
        doc.extend_from_slice(b"{\"");
        doc.extend_from_slice(key.as_bytes());
        doc.extend_from_slice(b"\":[");
        for (i, range) in new.iter().enumerate() {
            if i > 0 {
                doc.push(b',');
            }
            doc.extend_from_slice(self.item(range));
        }
        doc.extend_from_slice(b"]}");
        let events = import(b, self.api, session, &doc, memo.items).ok()?;
        Some(Read { events, calls })
    }

    /// What to remember of this body once its history is the log's first `events` events;
    /// `None` when a continuation could not be read from where it ends.
    pub(crate) fn memo(&self, events: usize, read: Read) -> Option<BodyMemo> {
        let items = self.items.as_ref()?;
        let last = items.last()?;
        let head: ItemHead = serde_json::from_slice(self.item(last)).ok()?;
        if !ends_cleanly(self.api, &head) {
            return None;
        }
        Some(BodyMemo {
            api: self.api,
            header: self.header,
            items: items.len(),
            digest: *self.prefix.last()?,
            before_last: *self.prefix.get(items.len() - 1)?,
            last_unmarked: unmarked_hash(self.item(last)),
            events,
            calls: read.calls,
        })
    }

    /// The conversation's opening (its system prompt and first user message) read into events,
    /// reading only the items up to the first user message when that is enough.
    pub(crate) fn opening(&self, b: Backend<'_>) -> Result<Vec<EventBody>> {
        let scratch = SessionId::new("opening").map_err(|e| ApiError::invalid(e.to_string()))?;
        let short = self.items.as_ref().and_then(|items| {
            let first_user = items.iter().position(|range| {
                serde_json::from_slice::<ItemHead>(self.item(range))
                    .is_ok_and(|h| h.role.as_deref() == Some("user"))
            })?;
            let mut doc = self.fields.clone();
            let mut list = Vec::with_capacity(first_user + 1);
            for range in &items[..=first_user] {
                list.push(serde_json::from_slice::<Value>(self.item(range)).ok()?);
            }
            doc.insert(self.api.history_field().into(), Value::Array(list));
            let doc = serde_json::to_vec(&Value::Object(doc)).ok()?;
            let events = import(b, self.api, &scratch, &doc, 0).ok()?;
            opening_of(events)
        });
        match short {
            Some(opening) => Ok(opening),
            None => {
                // Read whole: a conversation without a user message opens with all of it.
                let events = import(b, self.api, &scratch, &self.raw, 0)?;
                let all: Vec<EventBody> = events.iter().map(|e| e.body.clone()).collect();
                Ok(opening_of(events).unwrap_or(all))
            }
        }
    }
}

/// The events up to and including the first user message; `None` when there is none.
fn opening_of(events: Vec<NewEvent>) -> Option<Vec<EventBody>> {
    let end = events
        .iter()
        .position(|e| matches!(e.body, EventBody::User { .. }))?;
    Some(events.into_iter().take(end + 1).map(|e| e.body).collect())
}

/// The top-level fields besides the items that the importer reads (or refuses).
const HEADER_FIELDS: [&str; 8] = [
    "system",
    "instructions",
    "messages",
    "input",
    "contents",
    "systemInstruction",
    "id",
    "source",
];

/// The hash of the fields besides the items that the importer reads: a continuation is read
/// without them, so they must be what they were.
fn header_of(fields: &Map<String, Value>) -> u128 {
    let mut text = String::new();
    for key in HEADER_FIELDS {
        if let Some(v) = fields.get(key) {
            text.push_str(key);
            text.push('=');
            text.push_str(&v.to_string());
            text.push('\n');
        }
    }
    xxh3_128(text.as_bytes())
}

/// Reads `doc` (a body, or a continuation's items under the body's key) into events.
fn import(
    b: Backend<'_>,
    api: Api,
    session: &SessionId,
    doc: &[u8],
    first_item: usize,
) -> Result<Vec<NewEvent>> {
    let mut opts = loom_import::ParseOptions::new(now_ms());
    opts.format = Some(api);
    opts.session = Some(session.clone());
    opts.first_item = first_item;
    // A client's request: what Loom does not model travels as it came.
    opts.keep_unknown = true;
    let mut sessions = loom_import::parse_slice("request", "request", doc, &opts, b.blobs)?;
    Ok(sessions.pop().map(|s| s.events).unwrap_or_default())
}

/// The two fields of an item that say who it is from.
#[derive(Debug, Deserialize)]
struct ItemHead {
    role: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

/// Whether a conversation ending with `last` ends where a continuation can be read on its own
/// ([`loom_wire::Dialect::ends_cleanly`]).
fn ends_cleanly(api: Api, last: &ItemHead) -> bool {
    loom_wire::dialect(api).ends_cleanly(loom_wire::ItemHead {
        role: last.role.as_deref(),
        kind: last.kind.as_deref(),
    })
}

/// Deserializes a body's top level: the items under `key` as raw text, the rest as values.
struct Envelope {
    key: &'static str,
}

struct Split<'a> {
    fields: Map<String, Value>,
    items: Option<Vec<&'a RawValue>>,
}

impl<'de> DeserializeSeed<'de> for Envelope {
    type Value = Split<'de>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Split<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Envelope {
    type Value = Split<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Split<'de>, A::Error> {
        let mut fields = Map::new();
        let mut items = None;
        while let Some(name) = map.next_key::<String>()? {
            if name == self.key {
                match map.next_value_seed(Items)? {
                    Listed::Items(list) => {
                        fields.remove(self.key);
                        items = Some(list);
                    }
                    Listed::Other(value) => {
                        items = None;
                        fields.insert(name, value);
                    }
                }
            } else {
                let value: Value = map.next_value()?;
                fields.insert(name, value);
            }
        }
        Ok(Split { fields, items })
    }
}

/// The conversation's value: a list of raw items, or any other value kept as it is.
enum Listed<'a> {
    Items(Vec<&'a RawValue>),
    Other(Value),
}

struct Items;

impl<'de> DeserializeSeed<'de> for Items {
    type Value = Listed<'de>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Listed<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Items {
    type Value = Listed<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Listed<'de>, A::Error> {
        let mut list = Vec::with_capacity(seq.size_hint().unwrap_or(16));
        while let Some(item) = seq.next_element::<&'de RawValue>()? {
            list.push(item);
        }
        Ok(Listed::Items(list))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<Listed<'de>, A::Error> {
        Value::deserialize(de::value::MapAccessDeserializer::new(map)).map(Listed::Other)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Listed<'de>, E> {
        Ok(Listed::Other(Value::Bool(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Listed<'de>, E> {
        Ok(Listed::Other(Value::from(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Listed<'de>, E> {
        Ok(Listed::Other(Value::from(v)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Listed<'de>, E> {
        Ok(Listed::Other(Value::from(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Listed<'de>, E> {
        Ok(Listed::Other(Value::String(v.to_owned())))
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<Listed<'de>, E> {
        Ok(Listed::Other(Value::Null))
    }
}

/// The hash of a conversation item without the cache breakpoints on its content blocks
/// (`cache_control` on a text, tool result, image or tool call: the blocks whose events do not
/// hold it, so that the item reads into the same events with or without it), content that is
/// one plain text block hashed as the string it says. `None` when the
/// item is not JSON, or a breakpoint sits anywhere else (an item Loom keeps as it came).
fn unmarked_hash(item: &[u8]) -> Option<u128> {
    let mut value: Value = serde_json::from_slice(item).ok()?;
    if let Some(Value::Array(blocks)) = value.get_mut("content") {
        for block in blocks.iter_mut().filter_map(Value::as_object_mut) {
            let modelled = matches!(
                block.get("type").and_then(Value::as_str),
                Some("text" | "tool_result" | "image" | "tool_use")
            );
            if modelled {
                block.remove("cache_control");
            }
        }
        // One plain text block says what a string says (a Chat client that marks its newest
        // message turns its string into that block, and back once the mark moves on).
        if let [Value::Object(block)] = blocks.as_slice() {
            if block.len() == 2 && block.get("type").and_then(Value::as_str) == Some("text") {
                if let Some(text) = block.get("text").filter(|t| t.is_string()).cloned() {
                    value["content"] = text;
                }
            }
        }
    }
    let text = value.to_string();
    if text.contains("\"cache_control\"") {
        return None;
    }
    Some(xxh3_128(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use loom_session::MemoryBackend as TestBackend;
    use serde_json::json;

    /// The opening as reading the whole body gives it: up to the first user message, or all.
    fn whole_opening(b: Backend<'_>, api: Api, raw: &[u8]) -> Vec<EventBody> {
        let scratch = SessionId::new("opening").unwrap();
        let events = import(b, api, &scratch, raw, 0).unwrap();
        let end = events
            .iter()
            .position(|e| matches!(e.body, EventBody::User { .. }))
            .map_or(events.len(), |i| i + 1);
        events[..end].iter().map(|e| e.body.clone()).collect()
    }

    #[test]
    fn the_opening_is_read_from_the_first_messages_as_from_the_whole_body() {
        let t = TestBackend::new(4);
        let b = t.backend();
        let bodies = [
            (
                Api::OpenaiChat,
                json!({"model": "m", "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello"},
                    {"role": "user", "content": "more"}]}),
            ),
            // No user message at all: the whole conversation is its opening.
            (
                Api::OpenaiChat,
                json!({"model": "m", "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "assistant", "content": "hello"}]}),
            ),
            (
                Api::Anthropic,
                json!({"model": "m", "max_tokens": 5, "system": "sys", "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "yes"},
                    {"role": "user", "content": "go"}]}),
            ),
            (
                Api::OpenaiResponses,
                json!({"model": "m", "instructions": "be brief", "input": [
                    {"role": "user", "content": "hi"},
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
                    {"role": "user", "content": "more"}]}),
            ),
            (
                Api::OpenaiResponses,
                json!({"model": "m", "input": "just a string"}),
            ),
        ];
        for (api, body) in bodies {
            let raw = Bytes::from(body.to_string());
            let split = RequestBody::parse(api, raw.clone()).unwrap();
            assert_eq!(
                split.opening(b).unwrap(),
                whole_opening(b, api, &raw),
                "{api:?}: {body}"
            );
        }
    }

    #[test]
    fn a_body_that_is_not_an_object_or_not_json_is_refused_as_before() {
        for raw in ["[1, 2]", "{\"model\": ", "\"text\"", ""] {
            let e = RequestBody::parse(Api::OpenaiChat, Bytes::from(raw)).unwrap_err();
            assert!(
                e.message.contains("not valid JSON") || e.message.contains("must be a JSON object"),
                "{raw:?}: {}",
                e.message
            );
        }
        // A conversation that is not a list is a field like any other: the check names it.
        let split = RequestBody::parse(Api::OpenaiChat, Bytes::from(r#"{"messages": 5}"#)).unwrap();
        assert!(split.items.is_none());
        assert_eq!(split.fields["messages"], 5);
    }
}
