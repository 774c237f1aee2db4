//! Anthropic Messages to events.
//!
//! The top-level `system` becomes a system event. An assistant message becomes one assistant
//! event: its text and image blocks are the content, `thinking` blocks the reasoning (and, with
//! their signatures, the native items sent back to Anthropic unchanged), `tool_use` blocks the
//! calls (the `input` object as compact JSON text, key order kept). A user message's
//! `tool_result` blocks become tool_result events in order; its other blocks become user events
//! between them, so nothing is reordered.

use loom_core::{Api, ContentPart, EventBody, MessageContent, NativeReasoning, ToolCall};
use serde_json::{json, Value};

use crate::build::{arguments_text, Builder, Spot};
use crate::error::{ImportError, Result};
use crate::raw::{Content, RawBlock, RawItem};

/// Appends the system prompt and the events of `items` to `b`.
pub(crate) fn convert(
    b: &mut Builder<'_>,
    system: Option<Content>,
    items: Vec<RawItem>,
) -> Result<()> {
    if let Some(system) = system {
        let spot = b.record_spot();
        if let Some(content) = b.message_content(&spot, "system", system, |b, i, block| {
            text_part(b, &spot, &format!("system[{i}]"), block).map(Some)
        })? {
            b.push(&spot, "system", EventBody::System { content })?;
        }
    }
    for (index, item) in items.into_iter().enumerate() {
        let index = b.first_item + index;
        let spot = b.spot(item.line, index);
        match item.role.as_deref() {
            Some("user") => user(b, &spot, item.content)?,
            Some("assistant") => assistant(b, &spot, item.content)?,
            // A system message of text (a beta puts them among the messages) is a system
            // event; one with other blocks travels as it came.
            Some("system") if text_only(item.content.as_ref()) => {
                let content = match item.content {
                    Some(c) => b.message_content(&spot, "content", c, |b, i, block| {
                        text_part(b, &spot, &format!("content[{i}]"), block).map(Some)
                    })?,
                    None => None,
                };
                let content =
                    content.ok_or_else(|| b.invalid(&spot, "content", "missing or null"))?;
                b.push(&spot, "", EventBody::System { content })?;
            }
            // A role Loom does not model is kept as it came, in place.
            Some(_) if b.keep_unknown => b.push_opaque(&spot, item)?,
            Some(other) => {
                return Err(b.invalid(
                    &spot,
                    "role",
                    format!("unknown role `{other}`; expected user, assistant or system"),
                ))
            }
            None => return Err(b.invalid(&spot, "role", "missing; every message needs a role")),
        }
    }
    Ok(())
}

/// Whether a message's content is text only (a string, or text blocks).
fn text_only(content: Option<&Content>) -> bool {
    match content {
        Some(Content::Text(_)) => true,
        Some(Content::Blocks(blocks)) => blocks.iter().all(|b| b.kind.as_deref() == Some("text")),
        None | Some(Content::Null) => false,
    }
}

fn user(b: &mut Builder<'_>, spot: &Spot, content: Option<Content>) -> Result<()> {
    let blocks = match content {
        None | Some(Content::Null) => {
            return Err(b.invalid(spot, "content", "missing or null"));
        }
        Some(Content::Text(t)) => {
            let content = MessageContent::Text(b.inline(spot, "content", t)?);
            return b.push(
                spot,
                "",
                EventBody::User {
                    content,
                    name: None,
                },
            );
        }
        Some(Content::Blocks(blocks)) => blocks,
    };
    let mut parts: Vec<ContentPart> = Vec::new();
    let mut results = 0usize;
    for (i, block) in blocks.into_iter().enumerate() {
        let field = format!("content[{i}]");
        if block.kind.as_deref() == Some("tool_result") {
            if !parts.is_empty() {
                let content = MessageContent::Parts(std::mem::take(&mut parts));
                b.push(
                    spot,
                    &field,
                    EventBody::User {
                        content,
                        name: None,
                    },
                )?;
            }
            tool_result(b, spot, &field, block)?;
            results += 1;
        } else {
            parts.push(user_part(b, spot, &field, block)?);
        }
    }
    if !parts.is_empty() || results == 0 {
        let content = MessageContent::Parts(parts);
        b.push(
            spot,
            "content",
            EventBody::User {
                content,
                name: None,
            },
        )?;
    }
    Ok(())
}

fn tool_result(b: &mut Builder<'_>, spot: &Spot, field: &str, block: RawBlock) -> Result<()> {
    let id_field = format!("{field}.tool_use_id");
    let Some(source_id) = block.tool_use_id.as_deref() else {
        return Err(b.invalid(spot, &id_field, "missing on a `tool_result` block"));
    };
    let (call_id, tool_name) = b.resolve_call(spot, &id_field, source_id)?;
    // A tool_result without content is an empty result.
    let content = Some(block.content.unwrap_or(Content::Null));
    let (content, stats) = b.tool_output(spot, &format!("{field}.content"), content)?;
    b.push(
        spot,
        &id_field,
        EventBody::ToolResult {
            call_id,
            tool_name,
            content,
            is_error: block.is_error.unwrap_or(false),
            stats,
        },
    )
}

fn assistant(b: &mut Builder<'_>, spot: &Spot, content: Option<Content>) -> Result<()> {
    let blocks = match content {
        None | Some(Content::Null) => {
            return Err(b.invalid(spot, "content", "missing or null"));
        }
        Some(Content::Text(t)) => {
            let content = Some(MessageContent::Text(b.inline(spot, "content", t)?));
            let body = EventBody::Assistant {
                content,
                reasoning: None,
                tool_calls: Vec::new(),
                name: None,
                native: None,
            };
            return b.push(spot, "", body);
        }
        Some(Content::Blocks(blocks)) => blocks,
    };
    let mut parts = Vec::new();
    let mut reasoning: Vec<String> = Vec::new();
    let mut native: Vec<Value> = Vec::new();
    let mut calls = Vec::new();
    for (i, block) in blocks.into_iter().enumerate() {
        let field = format!("content[{i}]");
        match block.kind.as_deref() {
            Some("thinking") => {
                let text = block.thinking.unwrap_or_default();
                // Anthropic accepts a thinking block back only with its signature; one without
                // can be read but not replayed.
                if let Some(signature) = block.signature {
                    native.push(
                        json!({"type": "thinking", "thinking": text, "signature": signature}),
                    );
                }
                reasoning.push(text);
            }
            // The encrypted payload is only meaningful to the provider that made it: it is kept
            // to be sent back, never read.
            Some("redacted_thinking") => {
                if let Some(data) = block.data {
                    native.push(json!({"type": "redacted_thinking", "data": data}));
                }
                reasoning.push("[redacted thinking]".into());
            }
            Some("tool_use") => {
                let Some(id) = block.id.filter(|s| !s.is_empty()) else {
                    return Err(b.invalid(spot, &format!("{field}.id"), "missing"));
                };
                let Some(name) = block.name.filter(|s| !s.is_empty()) else {
                    return Err(b.invalid(spot, &format!("{field}.name"), "missing"));
                };
                calls.push(ToolCall {
                    id,
                    name,
                    arguments: arguments_text(block.input.as_deref()),
                });
            }
            _ => parts.push(text_or_image(b, spot, &field, block, "assistant")?),
        }
    }
    b.assign_ids(&mut calls);
    let body = EventBody::Assistant {
        content: (!parts.is_empty()).then_some(MessageContent::Parts(parts)),
        reasoning: (!reasoning.is_empty()).then(|| reasoning.join("\n\n")),
        tool_calls: calls,
        name: None,
        native: (!native.is_empty()).then_some(NativeReasoning {
            api: Api::Anthropic,
            items: native,
        }),
    };
    b.push(spot, "content", body)
}

fn user_part(b: &Builder<'_>, spot: &Spot, field: &str, block: RawBlock) -> Result<ContentPart> {
    text_or_image(b, spot, field, block, "user")
}

/// A text or image block as Loom models it; any other block (a `document`, a server tool's
/// blocks, a `compaction`, types added later) is kept as it came.
fn text_or_image(
    b: &Builder<'_>,
    spot: &Spot,
    field: &str,
    block: RawBlock,
    role: &str,
) -> Result<ContentPart> {
    match block.kind.as_deref() {
        Some("text" | "image") => match b.common_part(spot, field, block)? {
            Ok(part) => Ok(part),
            // An image from a source Loom does not model (a file id) is kept as it came.
            Err(block) if b.keep_unknown => {
                Ok(crate::opaque::part(b.blobs(), Api::Anthropic, block))
            }
            Err(block) => Err(unsupported(b, spot, field, &block, role)),
        },
        Some(_) if b.keep_unknown => Ok(crate::opaque::part(b.blobs(), Api::Anthropic, block)),
        _ => Err(unsupported(b, spot, field, &block, role)),
    }
}

fn text_part(b: &Builder<'_>, spot: &Spot, field: &str, block: RawBlock) -> Result<ContentPart> {
    match block.kind.as_deref() {
        Some("text") => match b.common_part(spot, field, block)? {
            Ok(part) => Ok(part),
            Err(block) => Err(unsupported(b, spot, field, &block, "system")),
        },
        _ => Err(unsupported(b, spot, field, &block, "system")),
    }
}

fn unsupported(
    b: &Builder<'_>,
    spot: &Spot,
    field: &str,
    block: &RawBlock,
    role: &str,
) -> ImportError {
    let expected = match role {
        "assistant" => "text, image, thinking, redacted_thinking or tool_use",
        "user" => "text, image or tool_result",
        _ => "text",
    };
    b.invalid(
        spot,
        &format!("{field}.type"),
        format!(
            "unsupported block type `{}` in a {role} message; expected {expected}",
            block.kind.as_deref().unwrap_or("<missing>")
        ),
    )
}
