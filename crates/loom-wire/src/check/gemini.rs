//! Gemini requests: `contents` and the function-calling pairing rules, `systemInstruction`,
//! `tools`, `generationConfig`. The model is named by the path, not the body.
//!
//! A `functionResponse` answers a `functionCall` of the model content right before it (by `id`
//! when the call has one, else by `name`). A call need not be answered: the API takes a history
//! whose call the next user content leaves unanswered (Gemini CLI's loop check sends one, a
//! slice of its history ending in a question), so Loom does too. A part holds one kind of data;
//! parts Loom does not model (inline and file data, code execution, fields added later) pass as
//! they came.

use serde_json::{Map, Value};

use super::{non_empty_array, object_if_present, Calls, Checked};
use crate::json::{index, join, kind, object, opt_array, opt_object, opt_str, FieldError};

pub(super) fn check(body: &Value, calls: &mut Calls) -> Checked {
    let obj = object(body, "")?;
    if let Some(system) = opt_object(obj, "", "systemInstruction")? {
        parts(system, "systemInstruction", None, calls)?;
    }
    object_if_present(obj, "", "generationConfig")?;
    tools(obj)?;
    let contents = non_empty_array(obj, "", "contents")?;
    for (i, content) in contents.iter().enumerate() {
        let path = index("contents", i);
        let c = object(content, &path)?;
        let role = opt_str(c, &path, "role")?.unwrap_or("user");
        match role {
            "model" => {
                // Calls left unanswered can be answered no more.
                calls.close();
                parts(c, &path, Some(Role::Model), calls)?;
            }
            "user" => {
                parts(c, &path, Some(Role::User), calls)?;
                calls.close();
            }
            other => {
                return Err(FieldError::new(
                    join(&path, "role"),
                    format!("`{other}` is not a role; expected `user` or `model`"),
                ))
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    User,
    Model,
}

/// A content's `parts`: each an object; calls in a model content, responses in a user content.
fn parts(c: &Map<String, Value>, path: &str, role: Option<Role>, calls: &mut Calls) -> Checked {
    let list = opt_array(c, path, "parts")?.map_or(&[][..], Vec::as_slice);
    let parts_path = join(path, "parts");
    for (j, part) in list.iter().enumerate() {
        let path = index(&parts_path, j);
        let p = object(part, &path)?;
        if let Some(call) = p.get("functionCall") {
            let call_path = join(&path, "functionCall");
            if role != Some(Role::Model) {
                return Err(FieldError::new(
                    call_path,
                    "a call belongs in a `model` content",
                ));
            }
            let call = object(call, &call_path)?;
            let name = name(call, &call_path)?;
            object_if_present(call, &call_path, "args")?;
            let id = opt_str(call, &call_path, "id")?.unwrap_or(name);
            calls.call(id, join(&call_path, "id"))?;
        } else if let Some(response) = p.get("functionResponse") {
            let response_path = join(&path, "functionResponse");
            if role != Some(Role::User) {
                return Err(FieldError::new(
                    response_path,
                    "a function response belongs in a `user` content",
                ));
            }
            let response = object(response, &response_path)?;
            let name = name(response, &response_path)?;
            match response.get("response") {
                Some(Value::Object(_)) => {}
                None | Some(Value::Null) => {
                    return Err(FieldError::new(
                        join(&response_path, "response"),
                        "missing: expected an object",
                    ))
                }
                Some(other) => {
                    return Err(FieldError::new(
                        join(&response_path, "response"),
                        format!("expected an object, got {}", kind(other)),
                    ))
                }
            }
            let id = opt_str(response, &response_path, "id")?.unwrap_or(name);
            calls.answer(id, join(&response_path, "id"))?;
        } else if let Some(text) = p.get("text") {
            if !text.is_string() {
                return Err(FieldError::new(
                    join(&path, "text"),
                    format!("expected a string, got {}", kind(text)),
                ));
            }
        }
    }
    Ok(())
}

/// A function's `name`: a non-empty string.
fn name<'a>(obj: &'a Map<String, Value>, path: &str) -> Checked<&'a str> {
    match opt_str(obj, path, "name")? {
        Some(n) if !n.is_empty() => Ok(n),
        _ => Err(FieldError::new(
            join(path, "name"),
            "missing: expected a non-empty string",
        )),
    }
}

/// `tools`: each a tool, its `functionDeclarations` named.
fn tools(obj: &Map<String, Value>) -> Checked {
    let Some(list) = opt_array(obj, "", "tools")? else {
        return Ok(());
    };
    for (i, tool) in list.iter().enumerate() {
        let path = index("tools", i);
        let t = object(tool, &path)?;
        let declarations =
            opt_array(t, &path, "functionDeclarations")?.map_or(&[][..], Vec::as_slice);
        for (j, d) in declarations.iter().enumerate() {
            let path = index(&join(&path, "functionDeclarations"), j);
            name(object(d, &path)?, &path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::check_request;
    use loom_core::Api;

    #[test]
    fn calls_are_answered_in_the_next_user_content() {
        let ok = json!({"contents": [
            {"role": "user", "parts": [{"text": "fix it"}]},
            {"role": "model", "parts": [{"functionCall": {"id": "c1", "name": "read", "args": {}},
                "thoughtSignature": "c2ln"}]},
            {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": "read",
                "response": {"output": "x"}}}]}
        ]});
        check_request(Api::Gemini, &ok).unwrap();
        // Without ids, by name.
        let by_name = json!({"contents": [
            {"role": "user", "parts": [{"text": "fix it"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "read"}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "read", "response": {}}}]}
        ]});
        check_request(Api::Gemini, &by_name).unwrap();
        // A call the next content leaves unanswered passes (the API takes it), but cannot be
        // answered later.
        let unanswered = json!({"contents": [
            {"role": "user", "parts": [{"text": "fix it"}]},
            {"role": "model", "parts": [{"functionCall": {"id": "c1", "name": "read"}}]},
            {"role": "user", "parts": [{"text": "was that a loop?"}]}
        ]});
        check_request(Api::Gemini, &unanswered).unwrap();
        let late = json!({"contents": [
            {"role": "user", "parts": [{"text": "fix it"}]},
            {"role": "model", "parts": [{"functionCall": {"id": "c1", "name": "read"}}]},
            {"role": "user", "parts": [{"text": "go on"}]},
            {"role": "model", "parts": [{"text": "ok"}]},
            {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": "read",
                "response": {"output": "x"}}}]}
        ]});
        let e = check_request(Api::Gemini, &late).unwrap_err();
        assert_eq!(e.field, "contents[4].parts[0].functionResponse.id");
        let orphan = json!({"contents": [
            {"role": "user", "parts": [{"functionResponse": {"id": "c9", "name": "read",
                "response": {"output": "x"}}}]}
        ]});
        let e = check_request(Api::Gemini, &orphan).unwrap_err();
        assert!(e.reason.contains("c9"), "{e}");
        let bad_role = json!({"contents": [{"role": "system", "parts": [{"text": "x"}]}]});
        assert_eq!(
            check_request(Api::Gemini, &bad_role).unwrap_err().field,
            "contents[0].role"
        );
        let empty = json!({"contents": []});
        assert_eq!(
            check_request(Api::Gemini, &empty).unwrap_err().field,
            "contents"
        );
    }
}
