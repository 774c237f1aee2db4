//! OpenAI Chat Completions requests: `model`, `messages` and their pairing rules, `tools`.

use serde_json::{Map, Value};

use super::{
    function_name, model, non_empty_array, object_if_present, string_if_present, Calls, Checked,
};
use crate::json::{index, join, kind, object, opt_array, opt_object, req_str, FieldError};

const ROLES: &str = "system, developer, user, assistant, tool, function";

pub(super) fn check(body: &Value, calls: &mut Calls) -> Checked {
    let obj = object(body, "")?;
    model(obj)?;
    let messages = non_empty_array(obj, "", "messages")?;
    for (i, message) in messages.iter().enumerate() {
        let path = index("messages", i);
        let m = object(message, &path)?;
        match req_str(m, &path, "role")? {
            "system" | "developer" => {
                content(m, &path, Required::Yes, &["text"])?;
            }
            "user" => {
                // OpenAI's rule: an assistant turn's calls are all answered before the next turn.
                calls.settled_before(&path)?;
                content(m, &path, Required::Yes, &[])?;
            }
            "assistant" => {
                calls.settled_before(&path)?;
                assistant(m, &path, calls)?;
            }
            "tool" => {
                let id = req_str(m, &path, "tool_call_id")?;
                calls.answer(id, join(&path, "tool_call_id"))?;
                content(m, &path, Required::Yes, &["text"])?;
            }
            "function" => {
                req_str(m, &path, "name")?;
                content(m, &path, Required::No, &["text"])?;
            }
            other => {
                return Err(FieldError::new(
                    join(&path, "role"),
                    format!("`{other}` is not a role; expected one of {ROLES}"),
                ))
            }
        }
        string_if_present(m, &path, "name")?;
    }
    // OpenAI refuses an assistant turn whose calls are not all followed by their results.
    calls.settled_before("the end of the messages")?;
    if let Some(tools) = opt_array(obj, "", "tools")? {
        for (i, tool) in tools.iter().enumerate() {
            self::tool(tool, &index("tools", i))?;
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Required {
    Yes,
    No,
}

/// `content`: a string, or a non-empty array of parts. `text_only` lists the part types a role
/// accepts when it is restricted (empty: any part type; only known types' fields are checked).
fn content(m: &Map<String, Value>, path: &str, required: Required, text_only: &[&str]) -> Checked {
    let field = join(path, "content");
    match m.get("content") {
        Some(Value::String(_)) => Ok(()),
        None | Some(Value::Null) if required == Required::No => Ok(()),
        None | Some(Value::Null) => Err(FieldError::new(
            field,
            "required: expected a string or an array of parts",
        )),
        Some(Value::Array(parts)) if parts.is_empty() => Err(FieldError::new(
            field,
            "empty array: at least one content part is required",
        )),
        Some(Value::Array(parts)) => {
            for (i, part) in parts.iter().enumerate() {
                self::part(part, &index(&field, i), text_only)?;
            }
            Ok(())
        }
        Some(other) => Err(FieldError::new(
            field,
            format!(
                "expected a string or an array of parts, got {}",
                kind(other)
            ),
        )),
    }
}

/// One content part: an object with a `type`, and the field that type requires.
fn part(part: &Value, path: &str, allowed: &[&str]) -> Checked {
    let p = object(part, path)?;
    let ty = req_str(p, path, "type")?;
    if !allowed.is_empty() && !allowed.contains(&ty) {
        return Err(FieldError::new(
            join(path, "type"),
            format!(
                "`{ty}` is not allowed here; expected one of {}",
                allowed.join(", ")
            ),
        ));
    }
    match ty {
        "text" => req_str(p, path, "text").map(drop),
        "refusal" => req_str(p, path, "refusal").map(drop),
        "image_url" => {
            let image = opt_object(p, path, "image_url")?
                .ok_or_else(|| crate::json::missing(path, "image_url", "an object"))?;
            req_str(image, &join(path, "image_url"), "url").map(drop)
        }
        _ => Ok(()),
    }
}

fn assistant(m: &Map<String, Value>, path: &str, calls: &mut Calls) -> Checked {
    let tool_calls = match m.get("tool_calls") {
        None | Some(Value::Null) => &[][..],
        Some(_) => non_empty_array(m, path, "tool_calls")?,
    };
    let has_other = ["function_call", "audio", "refusal"]
        .iter()
        .any(|k| m.get(*k).is_some_and(|v| !v.is_null()));
    let no_content = m.get("content").is_none_or(Value::is_null);
    if no_content && tool_calls.is_empty() && !has_other {
        return Err(FieldError::new(
            join(path, "content"),
            "required unless the message has `tool_calls`",
        ));
    }
    content(m, path, Required::No, &["text", "refusal"])?;
    string_if_present(m, path, "refusal")?;
    let calls_path = join(path, "tool_calls");
    for (i, call) in tool_calls.iter().enumerate() {
        let path = index(&calls_path, i);
        let c = object(call, &path)?;
        let id = req_str(c, &path, "id")?;
        match req_str(c, &path, "type")? {
            "function" => {
                let f = opt_object(c, &path, "function")?
                    .ok_or_else(|| crate::json::missing(&path, "function", "an object"))?;
                let fpath = join(&path, "function");
                req_str(f, &fpath, "name")?;
                req_str(f, &fpath, "arguments")?;
            }
            "custom" => {
                let f = opt_object(c, &path, "custom")?
                    .ok_or_else(|| crate::json::missing(&path, "custom", "an object"))?;
                let fpath = join(&path, "custom");
                req_str(f, &fpath, "name")?;
                req_str(f, &fpath, "input")?;
            }
            other => {
                return Err(FieldError::new(
                    join(&path, "type"),
                    format!("`{other}` is not a tool call type; expected `function` or `custom`"),
                ))
            }
        }
        calls.call(id, join(&path, "id"))?;
    }
    Ok(())
}

/// A `tools` entry: function tools need a valid name, and `parameters` an object when given.
fn tool(tool: &Value, path: &str) -> Checked {
    let t = object(tool, path)?;
    match req_str(t, path, "type")? {
        "function" => {
            let f = opt_object(t, path, "function")?
                .ok_or_else(|| crate::json::missing(path, "function", "an object"))?;
            let fpath = join(path, "function");
            function_name(req_str(f, &fpath, "name")?, &join(&fpath, "name"))?;
            string_if_present(f, &fpath, "description")?;
            object_if_present(f, &fpath, "parameters")
        }
        "custom" => {
            let c = opt_object(t, path, "custom")?
                .ok_or_else(|| crate::json::missing(path, "custom", "an object"))?;
            let cpath = join(path, "custom");
            function_name(req_str(c, &cpath, "name")?, &join(&cpath, "name"))
        }
        _ => Ok(()),
    }
}
