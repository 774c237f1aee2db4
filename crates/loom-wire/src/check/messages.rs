//! Anthropic Messages requests: `model`, `max_tokens`, `messages` and the tool-use pairing rules,
//! `system`, `tools`.
//!
//! Anthropic pairs calls strictly: a `tool_result` answers a `tool_use` of the assistant message
//! right before it, and every `tool_use` is answered in the very next user message. `system`
//! messages among the others (a beta) pass.

use serde_json::{Map, Value};

use super::{model, non_empty_array, Calls, Checked};
use crate::json::{
    index, join, kind, missing, object, opt_array, opt_object, opt_str, req_str, FieldError,
};

pub(super) fn check(body: &Value, calls: &mut Calls) -> Checked {
    let obj = object(body, "")?;
    model(obj)?;
    // `0` warms the prompt cache without a reply (Anthropic's SDK documents it).
    match obj.get("max_tokens") {
        Some(v) if v.as_u64().is_some() => {}
        None | Some(Value::Null) => {
            return Err(missing("", "max_tokens", "a non-negative integer"))
        }
        Some(v) => {
            return Err(FieldError::new(
                "max_tokens",
                format!("expected a non-negative integer, got {v}"),
            ))
        }
    }
    system(obj)?;
    let messages = non_empty_array(obj, "", "messages")?;
    for (i, message) in messages.iter().enumerate() {
        let path = index("messages", i);
        let m = object(message, &path)?;
        let role = req_str(m, &path, "role")?;
        let last = i + 1 == messages.len();
        match role {
            "assistant" => {
                calls.settled_before(&path)?;
                self::content(m, &path, Role::Assistant, last, calls)?;
            }
            "user" => {
                self::content(m, &path, Role::User, last, calls)?;
                // Whatever the previous assistant message asked must be answered here.
                calls.settled_before(&format!("the message after {path}"))?;
                calls.close();
            }
            // `system` messages among the others are an Anthropic beta (Claude Code sends them).
            "system" => {}
            other => {
                return Err(FieldError::new(
                    join(&path, "role"),
                    format!("`{other}` is not a role; expected `user`, `assistant` or `system`"),
                ))
            }
        }
    }
    // Anthropic refuses a `tool_use` that the next message does not answer, the last included.
    calls.settled_before("the end of the messages")?;
    if let Some(tools) = opt_array(obj, "", "tools")? {
        for (i, tool) in tools.iter().enumerate() {
            let path = index("tools", i);
            let t = object(tool, &path)?;
            if req_str(t, &path, "name")?.is_empty() {
                return Err(FieldError::new(
                    join(&path, "name"),
                    "must not be empty: a tool needs a name",
                ));
            }
            // Client tools (no `type`, or `custom`) describe their input; server tools do not.
            if matches!(opt_str(t, &path, "type")?, None | Some("custom")) {
                opt_object(t, &path, "input_schema")?
                    .ok_or_else(|| missing(&path, "input_schema", "an object"))?;
            }
        }
    }
    Ok(())
}

/// `system`: a string or an array of text blocks.
fn system(obj: &Map<String, Value>) -> Checked {
    match obj.get("system") {
        None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
        Some(Value::Array(blocks)) => {
            for (i, block) in blocks.iter().enumerate() {
                let path = index("system", i);
                let b = object(block, &path)?;
                match req_str(b, &path, "type")? {
                    "text" => req_str(b, &path, "text").map(drop)?,
                    other => {
                        return Err(FieldError::new(
                            join(&path, "type"),
                            format!("`{other}` is not allowed in `system`; expected `text`"),
                        ))
                    }
                }
            }
            Ok(())
        }
        Some(other) => Err(FieldError::new(
            "system",
            format!(
                "expected a string or an array of text blocks, got {}",
                kind(other)
            ),
        )),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    User,
    Assistant,
}

/// A message's content; only the final assistant message (a prefill) may be empty.
fn content(
    m: &Map<String, Value>,
    path: &str,
    role: Role,
    last: bool,
    calls: &mut Calls,
) -> Checked {
    let field = join(path, "content");
    let may_be_empty = last && role == Role::Assistant;
    let blocks = match m.get("content") {
        Some(Value::String(s)) if s.is_empty() && !may_be_empty => {
            return Err(FieldError::new(field, "must not be empty"))
        }
        Some(Value::String(_)) => return Ok(()),
        Some(Value::Array(blocks)) => blocks,
        None | Some(Value::Null) => return Err(missing(path, "content", "a string or an array")),
        Some(other) => {
            return Err(FieldError::new(
                field,
                format!(
                    "expected a string or an array of blocks, got {}",
                    kind(other)
                ),
            ))
        }
    };
    if blocks.is_empty() && !may_be_empty {
        return Err(FieldError::new(
            field,
            "empty array: at least one block is required",
        ));
    }
    for (i, block) in blocks.iter().enumerate() {
        let path = index(&field, i);
        let b = object(block, &path)?;
        let ty = req_str(b, &path, "type")?;
        match (ty, role) {
            ("text", _) if req_str(b, &path, "text")?.is_empty() => {
                return Err(FieldError::new(
                    join(&path, "text"),
                    "text blocks must be non-empty",
                ));
            }
            ("tool_use", Role::Assistant) => {
                req_str(b, &path, "name")?;
                opt_object(b, &path, "input")?
                    .ok_or_else(|| missing(&path, "input", "an object"))?;
                calls.call(req_str(b, &path, "id")?, join(&path, "id"))?;
            }
            ("tool_result", Role::User) => {
                match b.get("content") {
                    None | Some(Value::Null) | Some(Value::String(_)) | Some(Value::Array(_)) => {}
                    Some(other) => {
                        return Err(FieldError::new(
                            join(&path, "content"),
                            format!(
                                "expected a string or an array of blocks, got {}",
                                kind(other)
                            ),
                        ))
                    }
                }
                let id = req_str(b, &path, "tool_use_id")?;
                calls
                    .answer(id, join(&path, "tool_use_id"))
                    .map_err(|e| FieldError::new(e.field, format!("{}; a `tool_result` must answer a `tool_use` of the previous assistant message", e.reason)))?;
            }
            ("tool_use", Role::User) | ("tool_result", Role::Assistant) => {
                return Err(FieldError::new(
                    join(&path, "type"),
                    format!(
                        "`{ty}` blocks belong in {} messages",
                        if ty == "tool_use" {
                            "assistant"
                        } else {
                            "user"
                        }
                    ),
                ))
            }
            ("thinking", _) => {
                req_str(b, &path, "thinking")?;
                req_str(b, &path, "signature")?;
            }
            ("redacted_thinking", _) => {
                req_str(b, &path, "data")?;
            }
            // Images, documents, server tool blocks and types added later pass as they are.
            _ => {}
        }
    }
    Ok(())
}
