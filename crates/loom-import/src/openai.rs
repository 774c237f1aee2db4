//! OpenAI Chat Completions messages to events.
//!
//! One message becomes one event: `system`/`developer` → system, `user` → user, `assistant` →
//! assistant (its `tool_calls` in one event), `tool` → tool_result. The legacy `function_call` /
//! `function` pair is read too: the call gets the id `fc_<message index>`, since it has none.

use loom_core::{Api, ContentPart, EventBody, MessageContent, ToolCall};

use crate::build::{arguments_text, Builder, Spot};
use crate::error::{ImportError, Result};
use crate::raw::{Content, RawBlock, RawItem};

/// Appends the events of `items` to `b`.
pub(crate) fn convert(b: &mut Builder<'_>, items: Vec<RawItem>) -> Result<()> {
    for (index, item) in items.into_iter().enumerate() {
        let index = b.first_item + index;
        let spot = b.spot(item.line, index);
        message(b, &spot, index, item)?;
    }
    Ok(())
}

fn message(b: &mut Builder<'_>, spot: &Spot, index: usize, item: RawItem) -> Result<()> {
    let Some(role) = item.role.as_deref() else {
        return Err(b.invalid(spot, "role", "missing; every message needs a role"));
    };
    match role {
        "system" | "developer" => {
            let content = required_content(b, spot, item.content)?;
            b.push(spot, "", EventBody::System { content })
        }
        "user" => {
            let content = required_content(b, spot, item.content)?;
            b.push(
                spot,
                "",
                EventBody::User {
                    content,
                    name: item.name,
                },
            )
        }
        "assistant" => assistant(b, spot, index, item),
        "tool" => {
            let Some(source_id) = item.tool_call_id.as_deref() else {
                return Err(b.invalid(spot, "tool_call_id", "missing on a `tool` message"));
            };
            let (call_id, tool_name) = b.resolve_call(spot, "tool_call_id", source_id)?;
            let (content, stats) = b.tool_output(spot, "content", item.content)?;
            b.push(
                spot,
                "tool_call_id",
                EventBody::ToolResult {
                    call_id,
                    tool_name,
                    content,
                    is_error: false,
                    stats,
                },
            )
        }
        "function" => {
            let Some(name) = item.name.as_deref() else {
                return Err(b.invalid(spot, "name", "missing on a `function` message"));
            };
            let call_id = b.pending_call_named(name).ok_or_else(|| {
                b.invalid(
                    spot,
                    "name",
                    format!("function result `{name}` has no pending function call before it"),
                )
            })?;
            let (content, stats) = b.tool_output(spot, "content", item.content)?;
            b.push(
                spot,
                "name",
                EventBody::ToolResult {
                    call_id,
                    tool_name: name.to_owned(),
                    content,
                    is_error: false,
                    stats,
                },
            )
        }
        // A role Loom does not model is kept as it came, in place.
        _ if b.keep_unknown => b.push_opaque(spot, item),
        other => Err(b.invalid(
            spot,
            "role",
            format!(
                "unknown role `{other}`; expected system, developer, user, assistant, tool or \
                 function"
            ),
        )),
    }
}

fn assistant(b: &mut Builder<'_>, spot: &Spot, index: usize, item: RawItem) -> Result<()> {
    let mut content = match item.content {
        Some(c) => content(b, spot, c)?,
        None => None,
    };
    if content.is_none() {
        content = item.refusal.map(MessageContent::Text);
    }
    let reasoning = match (item.reasoning_content, item.reasoning) {
        (Some(r), _) | (None, Some(serde_json::Value::String(r))) => Some(r),
        _ => None,
    };
    let mut calls = Vec::new();
    for (i, call) in item.tool_calls.unwrap_or_default().into_iter().enumerate() {
        let field = format!("tool_calls[{i}]");
        let Some(id) = call.id.filter(|id| !id.is_empty()) else {
            return Err(b.invalid(spot, &format!("{field}.id"), "missing"));
        };
        // A call to a custom (freeform) tool holds `custom` {name, input} instead.
        let (key, name, arguments) = match (call.function, call.custom) {
            (Some(f), _) => ("function", f.name, f.arguments),
            (None, Some(c)) => ("custom", c.name, c.input),
            (None, None) => {
                return Err(b.invalid(spot, &format!("{field}.function"), "missing"));
            }
        };
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return Err(b.invalid(spot, &format!("{field}.{key}.name"), "missing"));
        };
        calls.push(ToolCall {
            id,
            name,
            arguments: arguments_text(arguments.as_deref()),
        });
    }
    if let Some(function) = item.function_call {
        let Some(name) = function.name.filter(|n| !n.is_empty()) else {
            return Err(b.invalid(spot, "function_call.name", "missing"));
        };
        calls.push(ToolCall {
            id: format!("fc_{index}"),
            name,
            arguments: arguments_text(function.arguments.as_deref()),
        });
    }
    b.assign_ids(&mut calls);
    b.push(
        spot,
        "tool_calls",
        EventBody::Assistant {
            content,
            reasoning,
            tool_calls: calls,
            name: item.name,
            native: None,
        },
    )
}

fn required_content(
    b: &Builder<'_>,
    spot: &Spot,
    content: Option<Content>,
) -> Result<MessageContent> {
    match content {
        Some(c) => content_or_null(b, spot, c),
        None => Err(b.invalid(spot, "content", "missing")),
    }
}

fn content_or_null(b: &Builder<'_>, spot: &Spot, c: Content) -> Result<MessageContent> {
    content(b, spot, c)?.ok_or_else(|| b.invalid(spot, "content", "must not be null here"))
}

/// Message content with Chat's part types: text, image_url, refusal.
fn content(b: &Builder<'_>, spot: &Spot, c: Content) -> Result<Option<MessageContent>> {
    b.message_content(spot, "content", c, |b, i, block| {
        part(b, spot, &format!("content[{i}]"), block).map(Some)
    })
}

fn part(b: &Builder<'_>, spot: &Spot, field: &str, block: RawBlock) -> Result<ContentPart> {
    match block.kind.as_deref() {
        Some("text" | "image_url" | "refusal") => match b.common_part(spot, field, block)? {
            Ok(part) => Ok(part),
            Err(block) if b.keep_unknown => {
                Ok(crate::opaque::part(b.blobs(), Api::OpenaiChat, block))
            }
            Err(block) => Err(unsupported(b, spot, field, &block)),
        },
        // A part Loom does not model (`input_audio`, `file`, types added later) is kept as it
        // came.
        Some(_) if b.keep_unknown => Ok(crate::opaque::part(b.blobs(), Api::OpenaiChat, block)),
        _ => Err(unsupported(b, spot, field, &block)),
    }
}

fn unsupported(b: &Builder<'_>, spot: &Spot, field: &str, block: &RawBlock) -> ImportError {
    b.invalid(
        spot,
        &format!("{field}.type"),
        format!(
            "unsupported content part type `{}`; OpenAI Chat parts are text, image_url or refusal",
            block.kind.as_deref().unwrap_or("<missing>")
        ),
    )
}
