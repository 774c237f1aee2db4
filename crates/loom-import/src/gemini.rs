//! The Gemini API's conversations: `contents` (each a `user` or `model` content of `parts`) and
//! `systemInstruction`.
//!
//! A model content is one assistant turn: its text parts the text, its `thought` parts the
//! reasoning, its `functionCall` parts the calls (a call without an id gets `{name}_{n}`, its
//! place among the turn's calls, as the reply reader names it). When a part is a thought or
//! carries a `thoughtSignature`, the turn keeps all its parts as they came (`native`), so it is
//! sent back to Gemini exactly as Gemini signed it. A user content's `functionResponse` parts are
//! tool results (answering a call by id, else the latest call waiting with that name); its other
//! parts are the user's message, inline images as `data:` URLs.

use loom_core::{
    Api, ContentPart, ContentStats, EventBody, MessageContent, NativeReasoning, ToolCall,
    ToolOutput,
};
use serde_json::Value;

use crate::build::{Builder, Spot};
use crate::error::Result;

/// Appends the system instruction and the events of `contents` to `b`.
pub(crate) fn convert(
    b: &mut Builder<'_>,
    system: Option<Value>,
    contents: Vec<Value>,
) -> Result<()> {
    if let Some(system) = system {
        let spot = b.record_spot();
        let parts = user_parts(b, &spot, "systemInstruction", &system)?;
        if !parts.is_empty() {
            b.push(
                &spot,
                "systemInstruction",
                EventBody::System {
                    content: content_of(parts),
                },
            )?;
        }
    }
    for (index, content) in contents.into_iter().enumerate() {
        let spot = b.spot(b.line(), b.first_item + index);
        if !content.is_object() {
            return Err(b.invalid(&spot, "", "must be an object (a content)"));
        }
        let role = match content.get("role") {
            None | Some(Value::Null) => "user",
            Some(Value::String(r)) => r.as_str(),
            Some(_) => return Err(b.invalid(&spot, "role", "must be a string")),
        };
        match role {
            "model" => model(b, &spot, &content)?,
            "user" => user(b, &spot, &content)?,
            other => {
                return Err(b.invalid(
                    &spot,
                    "role",
                    format!("unknown role `{other}`; expected user or model"),
                ))
            }
        }
    }
    Ok(())
}

fn parts_of<'v>(
    b: &Builder<'_>,
    spot: &Spot,
    field: &str,
    content: &'v Value,
) -> Result<&'v [Value]> {
    match content.get("parts") {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(parts)) => Ok(parts),
        Some(_) => Err(b.invalid(spot, &join(field, "parts"), "must be an array")),
    }
}

fn join(field: &str, key: &str) -> String {
    if field.is_empty() {
        key.to_owned()
    } else {
        format!("{field}.{key}")
    }
}

/// One assistant turn.
fn model(b: &mut Builder<'_>, spot: &Spot, content: &Value) -> Result<()> {
    let parts = parts_of(b, spot, "", content)?;
    let mut text = String::new();
    let mut reasoning: Vec<&str> = Vec::new();
    let mut calls: Vec<ToolCall> = Vec::new();
    let mut other: Vec<ContentPart> = Vec::new();
    let mut signed = false;
    for (j, part) in parts.iter().enumerate() {
        let field = format!("parts[{j}]");
        let Some(p) = part.as_object() else {
            return Err(b.invalid(spot, &field, "must be an object"));
        };
        let thought = p.get("thought").and_then(Value::as_bool) == Some(true);
        signed |= thought || p.contains_key("thoughtSignature");
        if let Some(call) = p.get("functionCall") {
            let name = match call.get("name").and_then(Value::as_str) {
                Some(n) if !n.is_empty() => n,
                _ => return Err(b.invalid(spot, &format!("{field}.functionCall.name"), "missing")),
            };
            let id = match call.get("id").and_then(Value::as_str) {
                Some(id) if !id.is_empty() => id.to_owned(),
                _ => format!("{name}_{}", calls.len()),
            };
            let arguments = call
                .get("args")
                .map_or_else(|| "{}".to_owned(), Value::to_string);
            calls.push(ToolCall {
                id,
                name: name.to_owned(),
                arguments,
            });
        } else if let Some(t) = p.get("text") {
            let Some(t) = t.as_str() else {
                return Err(b.invalid(spot, &format!("{field}.text"), "must be a string"));
            };
            if thought {
                reasoning.push(t);
            } else {
                text.push_str(t);
            }
        } else {
            // Code execution and parts added later.
            other.push(unmodelled(
                b,
                spot,
                &field,
                part,
                "a model part is text, a thought or a functionCall",
            )?);
        }
    }
    b.assign_ids(&mut calls);
    let content = match (text.is_empty(), other.is_empty()) {
        (true, true) => None,
        (false, true) => Some(MessageContent::Text(text)),
        (empty, false) => {
            let mut all = Vec::with_capacity(other.len() + 1);
            if !empty {
                all.push(ContentPart::Text { text });
            }
            all.extend(other);
            Some(MessageContent::Parts(all))
        }
    };
    let reasoning: Vec<&str> = reasoning.into_iter().filter(|r| !r.is_empty()).collect();
    let body = EventBody::Assistant {
        content,
        reasoning: (!reasoning.is_empty()).then(|| reasoning.join("\n\n")),
        tool_calls: calls,
        name: None,
        native: signed.then(|| NativeReasoning {
            api: Api::Gemini,
            items: parts.to_vec(),
        }),
    };
    b.push(spot, "", body)
}

/// A user content: its function responses as tool results, the rest as the user's message, in
/// the order they came.
fn user(b: &mut Builder<'_>, spot: &Spot, content: &Value) -> Result<()> {
    let parts = parts_of(b, spot, "", content)?;
    let mut said: Vec<ContentPart> = Vec::new();
    for (j, part) in parts.iter().enumerate() {
        let field = format!("parts[{j}]");
        let Some(response) = part.get("functionResponse") else {
            said.extend(user_parts(
                b,
                spot,
                &field,
                &Value::Array(vec![part.clone()]),
            )?);
            continue;
        };
        if !said.is_empty() {
            let content = content_of(std::mem::take(&mut said));
            b.push(
                spot,
                "",
                EventBody::User {
                    content,
                    name: None,
                },
            )?;
        }
        let field = format!("{field}.functionResponse");
        let name = match response.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n,
            _ => return Err(b.invalid(spot, &format!("{field}.name"), "missing")),
        };
        let source_id = match response.get("id").and_then(Value::as_str) {
            Some(id) if !id.is_empty() => id.to_owned(),
            _ => match b.pending_call_named(name) {
                Some(id) => id,
                None => {
                    return Err(b.invalid(
                        spot,
                        &format!("{field}.name"),
                        format!("answers no call: no call to `{name}` waits for its result"),
                    ))
                }
            },
        };
        let (call_id, tool_name) = b.resolve_call(spot, &format!("{field}.id"), &source_id)?;
        let (text, is_error) = match response.get("response") {
            Some(Value::Object(r)) => match (r.get("output"), r.get("error"), r.len()) {
                (Some(Value::String(s)), None, 1) => (s.clone(), false),
                (None, Some(Value::String(s)), 1) => (s.clone(), true),
                _ => (
                    Value::Object(r.clone()).to_string(),
                    r.contains_key("error"),
                ),
            },
            _ => return Err(b.invalid(spot, &format!("{field}.response"), "must be an object")),
        };
        let (content, stats) = output(b, spot, text)?;
        b.push(
            spot,
            "",
            EventBody::ToolResult {
                call_id,
                tool_name,
                content,
                is_error,
                stats,
            },
        )?;
    }
    if !said.is_empty() {
        let content = content_of(said);
        b.push(
            spot,
            "",
            EventBody::User {
                content,
                name: None,
            },
        )?;
    }
    Ok(())
}

/// A tool's output, offloaded to the blob store when it is long.
fn output(b: &mut Builder<'_>, spot: &Spot, text: String) -> Result<(ToolOutput, ContentStats)> {
    if text.len() <= b.inline_limit() {
        let stats = ContentStats::of(text.as_bytes());
        return Ok((ToolOutput::Text(text), stats));
    }
    let info = b.offload(spot, text.as_bytes())?;
    Ok((ToolOutput::Blob(info.blob), info.stats))
}

/// The parts of a user or system content (`content` holding `parts`, or a list of parts).
fn user_parts(
    b: &Builder<'_>,
    spot: &Spot,
    field: &str,
    content: &Value,
) -> Result<Vec<ContentPart>> {
    let list = match content {
        Value::Array(parts) => parts.as_slice(),
        other => parts_of(b, spot, field, other)?,
    };
    let mut out = Vec::with_capacity(list.len());
    for (j, part) in list.iter().enumerate() {
        let path = if matches!(content, Value::Array(_)) {
            field.to_owned()
        } else {
            join(field, &format!("parts[{j}]"))
        };
        if let Some(t) = part.get("text") {
            match t.as_str() {
                Some(t) => out.push(ContentPart::Text { text: t.to_owned() }),
                None => return Err(b.invalid(spot, &join(&path, "text"), "must be a string")),
            }
        } else if let Some(data) = part.get("inlineData").filter(|d| is_image(d)) {
            let mime = data["mimeType"].as_str().unwrap_or_default();
            let data = data.get("data").and_then(Value::as_str).unwrap_or_default();
            out.push(ContentPart::Image {
                url: format!("data:{mime};base64,{data}"),
                detail: None,
            });
        } else if let Some(uri) = part
            .get("fileData")
            .filter(|d| is_image(d))
            .and_then(|d| d.get("fileUri"))
            .and_then(Value::as_str)
        {
            out.push(ContentPart::Image {
                url: uri.to_owned(),
                detail: None,
            });
        } else {
            out.push(unmodelled(
                b,
                spot,
                &path,
                part,
                "a user part is text, an image or a functionResponse",
            )?);
        }
    }
    Ok(out)
}

/// A part Loom does not model: kept as it came when the reader keeps what it does not model (a
/// proxy), else refused, naming what a part of that content may be.
fn unmodelled(
    b: &Builder<'_>,
    spot: &Spot,
    field: &str,
    part: &Value,
    expected: &str,
) -> Result<ContentPart> {
    if !b.keep_unknown {
        return Err(b.invalid(spot, field, format!("unsupported part; {expected}")));
    }
    Ok(ContentPart::Opaque {
        api: Api::Gemini,
        whole: false,
        value: part.clone(),
    })
}

/// Whether inline or file data is an image (file data without a type is taken for one).
fn is_image(data: &Value) -> bool {
    match data.get("mimeType").and_then(Value::as_str) {
        Some(mime) => mime.starts_with("image/"),
        None => data.get("fileUri").is_some(),
    }
}

/// Parts as message content: one text stays a string.
fn content_of(mut parts: Vec<ContentPart>) -> MessageContent {
    if let [ContentPart::Text { .. }] = parts.as_slice() {
        if let Some(ContentPart::Text { text }) = parts.pop() {
            return MessageContent::Text(text);
        }
    }
    MessageContent::Parts(parts)
}
