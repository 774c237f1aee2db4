//! Blocks, parts and items Loom does not model, kept as they came (DESIGN.md, principle 9).
//!
//! The raw readers pick out the fields the converters use and keep every other field of a block
//! or item in its `extra` map, so a block of a type added after Loom was written (a `document`,
//! a `server_tool_use`, a Responses `additional_tools` item, a role of a beta) is rebuilt here as
//! the JSON it was and travels as an opaque part: never refused, never dropped, sent back
//! unchanged to the API it came from. Text that was long enough to be offloaded while reading is
//! read back from the blob store, so the rebuilt value holds what the client sent.

use crate::sink::BlobSink;
use loom_core::{Api, ContentPart, MessageContent};
use serde_json::{Map, Value};

use crate::raw::{Content, RawBlock, RawItem, Text};

/// A block as the client sent it.
pub(crate) fn block_value(blobs: &dyn BlobSink, b: RawBlock) -> Value {
    let mut m = b.extra;
    put(&mut m, "type", b.kind.map(Value::String));
    put(&mut m, "text", b.text.map(|t| text_value(blobs, t)));
    put(&mut m, "image_url", b.image_url);
    put(&mut m, "detail", b.detail.map(Value::String));
    put(&mut m, "source", b.source);
    put(&mut m, "id", b.id.map(Value::String));
    put(&mut m, "name", b.name.map(Value::String));
    put(&mut m, "input", b.input.and_then(|raw| raw_value(&raw)));
    put(&mut m, "tool_use_id", b.tool_use_id.map(Value::String));
    put(
        &mut m,
        "content",
        b.content.map(|c| content_value(blobs, c)),
    );
    put(&mut m, "is_error", b.is_error.map(Value::Bool));
    put(&mut m, "thinking", b.thinking.map(Value::String));
    put(&mut m, "signature", b.signature.map(Value::String));
    put(&mut m, "data", b.data.map(Value::String));
    put(&mut m, "refusal", b.refusal.map(Value::String));
    Value::Object(m)
}

/// An item (a message of a role Loom does not model, a Responses item of a type it does not
/// model) as the client sent it.
pub(crate) fn item_value(blobs: &dyn BlobSink, it: RawItem) -> Value {
    let mut m = it.extra;
    put(&mut m, "type", it.kind.map(Value::String));
    put(&mut m, "role", it.role.map(Value::String));
    put(&mut m, "id", it.id.map(Value::String));
    put(
        &mut m,
        "content",
        it.content.map(|c| content_value(blobs, c)),
    );
    put(&mut m, "name", it.name.map(Value::String));
    put(
        &mut m,
        "tool_calls",
        it.tool_calls.map(|calls| {
            Value::Array(
                calls
                    .into_iter()
                    .map(|c| {
                        let mut call = Map::new();
                        put(&mut call, "id", c.id.map(Value::String));
                        call.insert("type".into(), "function".into());
                        if let Some(custom) = c.custom {
                            call.insert("type".into(), "custom".into());
                            let mut body = Map::new();
                            put(&mut body, "name", custom.name.map(Value::String));
                            put(
                                &mut body,
                                "input",
                                custom.input.and_then(|raw| raw_value(&raw)),
                            );
                            call.insert("custom".into(), Value::Object(body));
                        }
                        if let Some(f) = c.function {
                            let mut function = Map::new();
                            put(&mut function, "name", f.name.map(Value::String));
                            put(
                                &mut function,
                                "arguments",
                                f.arguments.and_then(|raw| raw_value(&raw)),
                            );
                            call.insert("function".into(), Value::Object(function));
                        }
                        Value::Object(call)
                    })
                    .collect(),
            )
        }),
    );
    put(&mut m, "tool_call_id", it.tool_call_id.map(Value::String));
    put(
        &mut m,
        "reasoning_content",
        it.reasoning_content.map(Value::String),
    );
    put(&mut m, "reasoning", it.reasoning);
    put(&mut m, "refusal", it.refusal.map(Value::String));
    put(&mut m, "call_id", it.call_id.map(Value::String));
    put(
        &mut m,
        "arguments",
        it.arguments.and_then(|raw| raw_value(&raw)),
    );
    put(&mut m, "output", it.output.map(|c| content_value(blobs, c)));
    put(
        &mut m,
        "summary",
        it.summary.map(|blocks| {
            Value::Array(blocks.into_iter().map(|b| block_value(blobs, b)).collect())
        }),
    );
    put(&mut m, "input", it.input.and_then(|raw| raw_value(&raw)));
    put(&mut m, "encrypted_content", it.encrypted_content);
    Value::Object(m)
}

/// A block as an opaque content part of `api`.
pub(crate) fn part(blobs: &dyn BlobSink, api: Api, b: RawBlock) -> ContentPart {
    ContentPart::Opaque {
        api,
        whole: false,
        value: block_value(blobs, b),
    }
}

/// Whole items (a built-in tool's call and its output) as the content of one user-side event
/// that sends them back as they came, in order: a render keeps them or leaves them out together.
pub(crate) fn wholes(blobs: &dyn BlobSink, api: Api, items: Vec<RawItem>) -> MessageContent {
    MessageContent::Parts(
        items
            .into_iter()
            .map(|it| ContentPart::Opaque {
                api,
                whole: true,
                value: item_value(blobs, it),
            })
            .collect(),
    )
}

fn put(m: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        m.insert(key.to_owned(), v);
    }
}

fn raw_value(raw: &serde_json::value::RawValue) -> Option<Value> {
    serde_json::from_str(raw.get()).ok()
}

fn text_value(blobs: &dyn BlobSink, t: Text) -> Value {
    match t {
        Text::Inline(s) => Value::String(s),
        Text::Spilled(info) => {
            let text = blobs
                .fetch(&info.blob)
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .unwrap_or_else(|| format!("[offloaded: {}]", info.blob));
            Value::String(text)
        }
    }
}

fn content_value(blobs: &dyn BlobSink, c: Content) -> Value {
    match c {
        Content::Null => Value::Null,
        Content::Text(t) => text_value(blobs, t),
        Content::Blocks(blocks) => {
            Value::Array(blocks.into_iter().map(|b| block_value(blobs, b)).collect())
        }
    }
}
