//! OpenAI Responses requests: `model`, `input` (a string or items), `instructions`, `tools`.
//!
//! With `previous_response_id` or `conversation` the earlier turns live at OpenAI, so a
//! `function_call_output` may answer a call this body does not contain.

use serde_json::{Map, Value};

use super::{function_name, model, object_if_present, string_if_present, Calls, Checked};
use crate::json::{index, join, kind, missing, object, opt_array, opt_str, req_str, FieldError};

const ROLES: &str = "user, assistant, system, developer";

pub(super) fn check(body: &Value, calls: &mut Calls) -> Checked {
    let obj = object(body, "")?;
    // A stored prompt (`prompt`) may name the model itself.
    if obj.get("model").is_some() || obj.get("prompt").is_none_or(Value::is_null) {
        model(obj)?;
    }
    string_if_present(obj, "", "instructions")?;
    string_if_present(obj, "", "previous_response_id")?;
    let continues = ["previous_response_id", "conversation"]
        .iter()
        .any(|k| obj.get(*k).is_some_and(|v| !v.is_null()));
    if let Some(conversation) = obj.get("conversation").filter(|v| !v.is_null()) {
        if !conversation.is_string() && !conversation.is_object() {
            return Err(FieldError::new(
                "conversation",
                format!("expected a string or an object, got {}", kind(conversation)),
            ));
        }
    }
    match obj.get("input") {
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(Value::Array(items)) => {
            // Nothing to answer: OpenAI refuses an empty list unless earlier turns are stored.
            if items.is_empty() && !continues && obj.get("prompt").is_none_or(Value::is_null) {
                return Err(FieldError::new(
                    "input",
                    "expected a string or a non-empty array of items",
                ));
            }
            for (i, item) in items.iter().enumerate() {
                self::item(item, &index("input", i), calls, continues)?;
            }
            // Without stored turns to complete them, every call needs its output in this body.
            if let (false, Some((id, path))) = (continues, calls.pending.first()) {
                return Err(FieldError::new(
                    path.clone(),
                    format!("no tool output found for function call `{id}`"),
                ));
            }
        }
        Some(other) => {
            return Err(FieldError::new(
                "input",
                format!(
                    "expected a string or an array of items, got {}",
                    kind(other)
                ),
            ))
        }
    }
    if let Some(tools) = opt_array(obj, "", "tools")? {
        for (i, tool) in tools.iter().enumerate() {
            let path = index("tools", i);
            let t = object(tool, &path)?;
            if req_str(t, &path, "type")? == "function" {
                function_name(req_str(t, &path, "name")?, &join(&path, "name"))?;
                object_if_present(t, &path, "parameters")?;
            }
        }
    }
    Ok(())
}

fn item(item: &Value, path: &str, calls: &mut Calls, continues: bool) -> Checked {
    let it = object(item, path)?;
    // A message may leave out `type` (the "easy input message" form), and so may an item
    // reference (`{"id": ...}`, its `type` optional and nullable).
    let ty = match opt_str(it, path, "type")? {
        Some(ty) => ty,
        None if it.contains_key("role") => "message",
        None if it.get("id").is_some_and(Value::is_string) => "item_reference",
        None => return Err(missing(path, "type", "a string")),
    };
    match ty {
        "message" => message(it, path),
        "function_call" => {
            req_str(it, path, "name")?;
            req_str(it, path, "arguments")?;
            let id = req_str(it, path, "call_id")?;
            calls.call(id, join(path, "call_id"))
        }
        "function_call_output" => {
            let id = req_str(it, path, "call_id")?;
            match it.get("output") {
                Some(Value::String(_)) | Some(Value::Array(_)) => {}
                None | Some(Value::Null) => {
                    return Err(missing(path, "output", "a string or an array"))
                }
                Some(other) => {
                    return Err(FieldError::new(
                        join(path, "output"),
                        format!("expected a string or an array, got {}", kind(other)),
                    ))
                }
            }
            let answered = calls.answer(id, join(path, "call_id"));
            match answered {
                // The call may be in the stored conversation this request continues.
                Err(_) if continues && !calls.made.contains_key(id) => Ok(()),
                other => other,
            }
        }
        "reasoning" => {
            opt_array(it, path, "summary")?.ok_or_else(|| missing(path, "summary", "an array"))?;
            Ok(())
        }
        // Built-in tool calls, item references and types added later pass as they are.
        _ => Ok(()),
    }
}

fn message(m: &Map<String, Value>, path: &str) -> Checked {
    let role = req_str(m, path, "role")?;
    if !ROLES.split(", ").any(|r| r == role) {
        return Err(FieldError::new(
            join(path, "role"),
            format!("`{role}` is not a role; expected one of {ROLES}"),
        ));
    }
    let field = join(path, "content");
    match m.get("content") {
        Some(Value::String(_)) => Ok(()),
        Some(Value::Array(parts)) => {
            for (i, part) in parts.iter().enumerate() {
                let path = index(&field, i);
                let p = object(part, &path)?;
                match req_str(p, &path, "type")? {
                    "input_text" | "output_text" => {
                        req_str(p, &path, "text")?;
                    }
                    "refusal" => {
                        req_str(p, &path, "refusal")?;
                    }
                    _ => {}
                }
            }
            Ok(())
        }
        None | Some(Value::Null) => Err(missing(path, "content", "a string or an array")),
        Some(other) => Err(FieldError::new(
            field,
            format!(
                "expected a string or an array of parts, got {}",
                kind(other)
            ),
        )),
    }
}
