//! OpenAI Responses input items to events.
//!
//! `instructions` becomes a system event. What the model produced in one turn arrives as several
//! items (reasoning, an assistant message, function calls); consecutive ones are merged into one
//! assistant event, so parallel calls share it as in every other format. A `reasoning` item or an
//! assistant message that follows text or calls starts a new turn. Reasoning items are kept as
//! given besides their text, to be sent back to the Responses API unchanged.

use loom_core::{Api, ContentPart, EventBody, MessageContent, NativeReasoning, ToolCall};
use serde_json::{Map, Value};

use crate::build::{arguments_text, Builder, Spot};
use crate::error::{ImportError, Result};
use crate::raw::{Content, RawBlock, RawItem};

/// An assistant turn being assembled from consecutive items.
#[derive(Debug)]
struct Turn {
    spot: Spot,
    content: Option<MessageContent>,
    reasoning: Vec<String>,
    /// The reasoning items as given, sent back to the Responses API unchanged.
    native: Vec<Value>,
    calls: Vec<ToolCall>,
}

impl Turn {
    fn new(spot: &Spot) -> Self {
        Self {
            spot: spot.clone(),
            content: None,
            reasoning: Vec::new(),
            native: Vec::new(),
            calls: Vec::new(),
        }
    }

    fn has_output(&self) -> bool {
        self.content.is_some() || !self.calls.is_empty()
    }
}

/// Items of built-in tools that call (by `call_id`), and the item type that answers each. Loom
/// does not model them, but a call and its output are one unit (DESIGN.md, principle 4): they
/// are logged as one event, so that no render keeps one without the other.
const BUILT_IN_PAIRS: &[(&str, &str)] = &[
    ("computer_call", "computer_call_output"),
    ("local_shell_call", "local_shell_call_output"),
    ("shell_call", "shell_call_output"),
    ("apply_patch_call", "apply_patch_call_output"),
    ("tool_search_call", "tool_search_output"),
    ("program", "program_output"),
];

/// Items Loom does not model, held together from a built-in tool's call until every call among
/// them has its output.
#[derive(Debug)]
struct Group {
    spot: Spot,
    items: Vec<RawItem>,
    /// (output type, call id) of the calls still waiting.
    waiting: Vec<(&'static str, String)>,
}

/// Logs the held items as one event.
fn close(b: &mut Builder<'_>, group: &mut Option<Group>) -> Result<()> {
    match group.take() {
        Some(g) => b.push_opaque_items(&g.spot, g.items),
        None => Ok(()),
    }
}

/// An item Loom does not model: held with the built-in call it answers or that it makes, or
/// logged alone.
fn opaque(
    b: &mut Builder<'_>,
    spot: &Spot,
    group: &mut Option<Group>,
    kind: &str,
    item: RawItem,
) -> Result<()> {
    let call_id = item.call_id.clone();
    let calls = BUILT_IN_PAIRS
        .iter()
        .find(|(call, _)| *call == kind)
        .and_then(|(_, output)| Some((*output, call_id.clone()?)));
    match group {
        Some(g) => {
            g.items.push(item);
            if let Some(waits) = calls {
                g.waiting.push(waits);
            } else if let Some(at) = g
                .waiting
                .iter()
                .position(|(output, id)| *output == kind && Some(id) == call_id.as_ref())
            {
                g.waiting.remove(at);
            }
            if g.waiting.is_empty() {
                close(b, group)?;
            }
            Ok(())
        }
        None => match calls {
            Some(waits) => {
                *group = Some(Group {
                    spot: spot.clone(),
                    items: vec![item],
                    waiting: vec![waits],
                });
                Ok(())
            }
            None => b.push_opaque(spot, item),
        },
    }
}

fn flush(b: &mut Builder<'_>, turn: &mut Option<Turn>) -> Result<()> {
    let Some(mut t) = turn.take() else {
        return Ok(());
    };
    b.assign_ids(&mut t.calls);
    let body = EventBody::Assistant {
        content: t.content,
        reasoning: (!t.reasoning.is_empty()).then(|| t.reasoning.join("\n\n")),
        tool_calls: t.calls,
        name: None,
        native: (!t.native.is_empty()).then_some(NativeReasoning {
            api: Api::OpenaiResponses,
            items: t.native,
        }),
    };
    b.push(&t.spot, "", body)
}

/// Appends the instructions and the events of `items` to `b`.
pub(crate) fn convert(
    b: &mut Builder<'_>,
    instructions: Option<Content>,
    items: Vec<RawItem>,
) -> Result<()> {
    if let Some(instructions) = instructions {
        let spot = b.record_spot();
        if let Some(content) =
            b.message_content(&spot, "instructions", instructions, |b, i, bl| {
                part(b, &spot, &format!("instructions[{i}]"), bl).map(Some)
            })?
        {
            b.push(&spot, "instructions", EventBody::System { content })?;
        }
    }
    let mut turn: Option<Turn> = None;
    let mut group: Option<Group> = None;
    for (index, item) in items.into_iter().enumerate() {
        let index = b.first_item + index;
        let spot = b.spot(item.line, index);
        let kind = match (item.kind.as_deref(), item.role.is_some()) {
            (Some(kind), _) => kind.to_owned(),
            // Easy input messages carry a role and no type.
            (None, true) => "message".to_owned(),
            // So may an item reference (`{"id": ...}`): kept as it came, below.
            (None, false) if b.keep_unknown && item.id.is_some() => "item_reference".to_owned(),
            (None, false) => {
                return Err(b.invalid(
                    &spot,
                    "type",
                    "missing; an input item needs a type or a role",
                ))
            }
        };
        let modelled = matches!(
            kind.as_str(),
            "message"
                | "function_call"
                | "custom_tool_call"
                | "reasoning"
                | "function_call_output"
                | "custom_tool_call_output"
                | "compaction"
        );
        if modelled || !b.keep_unknown {
            // Held built-in items go before an item Loom models (their outputs, if they come
            // later, are logged alone).
            close(b, &mut group)?;
        }
        match kind.as_str() {
            "message" => message(b, &spot, &mut turn, item)?,
            "function_call" | "custom_tool_call" => {
                let Some(call_id) = item.call_id.filter(|s| !s.is_empty()) else {
                    return Err(b.invalid(&spot, "call_id", "missing"));
                };
                let Some(name) = item.name.filter(|s| !s.is_empty()) else {
                    return Err(b.invalid(&spot, "name", "missing"));
                };
                let raw = if kind == "function_call" {
                    item.arguments
                } else {
                    item.input
                };
                let arguments = arguments_text(raw.as_deref());
                turn.get_or_insert_with(|| Turn::new(&spot))
                    .calls
                    .push(ToolCall {
                        id: call_id,
                        name,
                        arguments,
                    });
            }
            "reasoning" => {
                if turn.as_ref().is_some_and(Turn::has_output) {
                    flush(b, &mut turn)?;
                }
                let (text, native) = reasoning(b, &spot, item)?;
                let t = turn.get_or_insert_with(|| Turn::new(&spot));
                t.reasoning.push(text);
                // The API accepts a reasoning item back only with its id; one without can be
                // read but not replayed.
                if native.get("id").is_some() {
                    t.native.push(native);
                }
            }
            // The provider's summary of the conversation before it (Codex's remote compaction
            // returns one in place of its history): the model's turn, kept as it came.
            "compaction" => {
                flush(b, &mut turn)?;
                let item = crate::opaque::item_value(b.blobs(), item);
                b.push(
                    &spot,
                    "",
                    EventBody::Assistant {
                        content: None,
                        reasoning: None,
                        tool_calls: Vec::new(),
                        name: None,
                        native: Some(NativeReasoning {
                            api: Api::OpenaiResponses,
                            items: vec![item],
                        }),
                    },
                )?;
            }
            "function_call_output" | "custom_tool_call_output" => {
                flush(b, &mut turn)?;
                let Some(source_id) = item.call_id.as_deref() else {
                    return Err(b.invalid(&spot, "call_id", "missing"));
                };
                let (call_id, tool_name) = b.resolve_call(&spot, "call_id", source_id)?;
                let (content, stats) = b.tool_output(&spot, "output", item.output)?;
                b.push(
                    &spot,
                    "call_id",
                    EventBody::ToolResult {
                        call_id,
                        tool_name,
                        content,
                        is_error: false,
                        stats,
                    },
                )?;
            }
            // An item Loom does not model (`additional_tools`, `compaction`, a built-in tool's
            // call, types added later) is kept as it came, in place.
            _ if b.keep_unknown => {
                flush(b, &mut turn)?;
                opaque(b, &spot, &mut group, &kind, item)?;
            }
            other => {
                return Err(b.invalid(
                    &spot,
                    "type",
                    format!(
                        "unsupported item type `{other}`; expected message, function_call, \
                         function_call_output, custom_tool_call, custom_tool_call_output, \
                         reasoning or compaction"
                    ),
                ))
            }
        }
    }
    close(b, &mut group)?;
    flush(b, &mut turn)
}

fn message(b: &mut Builder<'_>, spot: &Spot, turn: &mut Option<Turn>, item: RawItem) -> Result<()> {
    let Some(role) = item.role.as_deref() else {
        return Err(b.invalid(spot, "role", "missing on a message item"));
    };
    if b.keep_unknown && !matches!(role, "assistant" | "system" | "developer" | "user") {
        // A role Loom does not model travels as it came.
        flush(b, turn)?;
        return b.push_opaque(spot, item);
    }
    let content = match item.content {
        Some(c) => b.message_content(spot, "content", c, |b, i, bl| {
            part(b, spot, &format!("content[{i}]"), bl).map(Some)
        })?,
        None => None,
    };
    let content = content.ok_or_else(|| b.invalid(spot, "content", "missing or null"))?;
    match role {
        "assistant" => {
            if turn.as_ref().is_some_and(Turn::has_output) {
                flush(b, turn)?;
            }
            turn.get_or_insert_with(|| Turn::new(spot)).content = Some(content);
            Ok(())
        }
        "system" | "developer" => {
            flush(b, turn)?;
            b.push(spot, "", EventBody::System { content })
        }
        "user" => {
            flush(b, turn)?;
            b.push(
                spot,
                "",
                EventBody::User {
                    content,
                    name: None,
                },
            )
        }
        other => Err(b.invalid(
            spot,
            "role",
            format!("unknown role `{other}`; expected system, developer, user or assistant"),
        )),
    }
}

/// A reasoning item's text (its summary, or its full text when it has no summary) and the item
/// itself as given: `type`, `id`, `summary`, `content` and `encrypted_content`.
fn reasoning(b: &Builder<'_>, spot: &Spot, item: RawItem) -> Result<(String, Value)> {
    let mut native = Map::new();
    native.insert("type".into(), "reasoning".into());
    if let Some(id) = item.id {
        native.insert("id".into(), Value::String(id));
    }
    let mut summary = Vec::new();
    if let Some(blocks) = item.summary {
        native.insert(
            "summary".into(),
            parts(b, spot, "summary", blocks, &mut summary)?,
        );
    }
    let mut full = Vec::new();
    match item.content {
        None => {}
        Some(Content::Null) => {
            native.insert("content".into(), Value::Null);
        }
        Some(Content::Text(t)) => {
            let text = b.inline(spot, "content", t)?;
            native.insert("content".into(), Value::String(text.clone()));
            full.push(text);
        }
        Some(Content::Blocks(blocks)) => {
            native.insert(
                "content".into(),
                parts(b, spot, "content", blocks, &mut full)?,
            );
        }
    }
    if let Some(encrypted) = item.encrypted_content {
        native.insert("encrypted_content".into(), encrypted);
    }
    let texts = if summary.is_empty() { full } else { summary };
    Ok((texts.join("\n\n"), Value::Object(native)))
}

/// Summary or content parts of a reasoning item as given (`type` and `text`, the only fields the
/// API describes for them), collecting their texts.
fn parts(
    b: &Builder<'_>,
    spot: &Spot,
    field: &str,
    blocks: Vec<RawBlock>,
    texts: &mut Vec<String>,
) -> Result<Value> {
    let mut out = Vec::with_capacity(blocks.len());
    for (i, block) in blocks.into_iter().enumerate() {
        let mut part = Map::new();
        if let Some(kind) = block.kind {
            part.insert("type".into(), Value::String(kind));
        }
        if let Some(t) = block.text {
            let text = b.inline(spot, &format!("{field}[{i}].text"), t)?;
            part.insert("text".into(), Value::String(text.clone()));
            texts.push(text);
        }
        out.push(Value::Object(part));
    }
    Ok(Value::Array(out))
}

/// A content part with the Responses part types.
fn part(b: &Builder<'_>, spot: &Spot, field: &str, block: RawBlock) -> Result<ContentPart> {
    match block.kind.as_deref() {
        Some("input_text" | "output_text" | "text" | "refusal" | "input_image") => {
            match b.common_part(spot, field, block)? {
                Ok(part) => Ok(part),
                // An image by file id is kept as it came.
                Err(block) if b.keep_unknown => {
                    Ok(crate::opaque::part(b.blobs(), Api::OpenaiResponses, block))
                }
                Err(block) => Err(unsupported(b, spot, field, &block)),
            }
        }
        // A part Loom does not model (`input_file`, `input_audio`, types added later) is kept
        // as it came.
        Some(_) if b.keep_unknown => {
            Ok(crate::opaque::part(b.blobs(), Api::OpenaiResponses, block))
        }
        _ => Err(unsupported(b, spot, field, &block)),
    }
}

fn unsupported(b: &Builder<'_>, spot: &Spot, field: &str, block: &RawBlock) -> ImportError {
    b.invalid(
        spot,
        &format!("{field}.type"),
        format!(
            "unsupported content part type `{}`; expected input_text, output_text, refusal or \
             input_image",
            block.kind.as_deref().unwrap_or("<missing>")
        ),
    )
}
