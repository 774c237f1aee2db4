//! The providers' pairing rules, checked on a request body independently of Loom's own checks:
//! what the conformance suite holds every forwarded request to, beside its description.
//!
//! A call id may come back in a later turn (`call_0` every turn); a result answers the call of
//! that id still waiting for one.

use serde_json::Value;

/// Why a body breaks its provider's pairing rules.
type Broken = Result<(), String>;

fn array<'a>(body: &'a Value, key: &str) -> Result<&'a [Value], String> {
    body.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .ok_or_else(|| format!("`{key}` is not an array"))
}

fn text<'a>(v: &'a Value, key: &str, at: &str) -> Result<&'a str, String> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{at}.{key} is not a string"))
}

/// OpenAI Chat: an assistant's `tool_calls` are answered by the `tool` messages right after it,
/// one each, before any other message; a `tool` message answers a waiting call.
pub fn chat(body: &Value) -> Broken {
    let messages = array(body, "messages")?;
    let mut waiting: Vec<(String, usize)> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = text(m, "role", &at)?;
        if role == "tool" {
            let id = text(m, "tool_call_id", &at)?;
            match waiting.iter().position(|(w, _)| w == id) {
                Some(p) => {
                    waiting.remove(p);
                }
                None => {
                    return Err(format!(
                        "{at}: a result for `{id}`, which no call waits for"
                    ))
                }
            }
            continue;
        }
        if let Some((id, from)) = waiting.first() {
            return Err(format!(
                "messages[{from}]: call `{id}` has no result before {at}"
            ));
        }
        if role == "assistant" {
            for (j, call) in m
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let id = text(call, "id", &format!("{at}.tool_calls[{j}]"))?;
                if waiting.iter().any(|(w, _)| w == id) {
                    return Err(format!("{at}: two calls `{id}` in one message"));
                }
                waiting.push((id.to_owned(), i));
            }
        }
    }
    match waiting.first() {
        Some((id, from)) => Err(format!("messages[{from}]: call `{id}` has no result")),
        None => Ok(()),
    }
}

/// Call item types and the output item type that answers each.
const RESPONSES_PAIRS: &[(&str, &str)] = &[
    ("function_call", "function_call_output"),
    ("custom_tool_call", "custom_tool_call_output"),
    ("computer_call", "computer_call_output"),
    ("local_shell_call", "local_shell_call_output"),
    ("shell_call", "shell_call_output"),
    ("apply_patch_call", "apply_patch_call_output"),
    ("tool_search_call", "tool_search_output"),
    ("program", "program_output"),
];

/// OpenAI Responses: every call item is answered by a later output item of its kind with the
/// same `call_id`, and every output answers an earlier call. A body that continues stored state
/// (`previous_response_id`, `conversation`) may answer calls it does not hold.
pub fn responses(body: &Value) -> Broken {
    let items = match body.get("input") {
        Some(Value::String(_)) | None => return Ok(()),
        _ => array(body, "input")?,
    };
    let stored = ["previous_response_id", "conversation"]
        .iter()
        .any(|k| body.get(*k).is_some_and(|v| !v.is_null()));
    let mut waiting: Vec<(&str, String, usize)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let Some(ty) = item.get("type").and_then(Value::as_str) else {
            continue;
        };
        let id = || {
            item.get("call_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        if let Some((_, output)) = RESPONSES_PAIRS.iter().find(|(call, _)| *call == ty) {
            if let Some(id) = id() {
                waiting.push((output, id, i));
            }
        } else if RESPONSES_PAIRS.iter().any(|(_, output)| *output == ty) {
            let Some(id) = id() else { continue };
            match waiting.iter().position(|(o, w, _)| *o == ty && *w == id) {
                Some(p) => {
                    waiting.remove(p);
                }
                None if stored => {}
                None => {
                    return Err(format!(
                        "{at}: a `{ty}` for `{id}`, which no call waits for"
                    ))
                }
            }
        }
    }
    match waiting.first() {
        Some((output, id, from)) => Err(format!("input[{from}]: call `{id}` has no `{output}`")),
        None => Ok(()),
    }
}

/// Anthropic Messages: the first message is the user's; every `tool_use` of an assistant
/// message is answered by a `tool_result` at the start of the next message (the user's), which
/// answers nothing else; a `server_tool_use` has its result in the same message.
pub fn messages(body: &Value) -> Broken {
    let messages = array(body, "messages")?;
    if messages
        .first()
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str)
        != Some("user")
    {
        return Err("messages[0] is not the user's".into());
    }
    let blocks = |m: &Value| -> Vec<Value> {
        match m.get("content") {
            Some(Value::Array(b)) => b.clone(),
            _ => Vec::new(),
        }
    };
    let kind = |b: &Value| {
        b.get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let mut asked: Vec<String> = Vec::new();
    let mut asked_at = 0;
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = text(m, "role", &at)?;
        let content = blocks(m);
        let results: Vec<&Value> = content
            .iter()
            .take_while(|b| kind(b) == "tool_result")
            .collect();
        if let Some(late) = content
            .iter()
            .skip(results.len())
            .position(|b| kind(b) == "tool_result")
        {
            return Err(format!(
                "{at}.content[{}]: a tool_result after other blocks",
                late + results.len()
            ));
        }
        if !results.is_empty() && role != "user" {
            return Err(format!("{at}: tool results in a {role} message"));
        }
        for r in &results {
            let id = text(r, "tool_use_id", &at)?;
            match asked.iter().position(|a| a == id) {
                Some(p) => {
                    asked.remove(p);
                }
                None => {
                    return Err(format!(
                        "{at}: a tool_result for `{id}`, which the message before did not call"
                    ))
                }
            }
        }
        if let Some(id) = asked.first() {
            return Err(format!(
                "messages[{asked_at}]: tool_use `{id}` is not answered at the start of {at}"
            ));
        }
        if role == "assistant" {
            let mut servers: Vec<String> = Vec::new();
            for b in &content {
                match kind(b).as_str() {
                    "tool_use" => {
                        let id = text(b, "id", &at)?.to_owned();
                        if asked.contains(&id) {
                            return Err(format!("{at}: two tool_use `{id}`"));
                        }
                        asked.push(id);
                    }
                    "server_tool_use" => servers.push(text(b, "id", &at)?.to_owned()),
                    "web_search_tool_result" => {
                        let id = text(b, "tool_use_id", &at)?;
                        servers.retain(|s| s != id);
                    }
                    _ => {}
                }
            }
            if let Some(id) = servers.first() {
                return Err(format!(
                    "{at}: server_tool_use `{id}` has no result in its message"
                ));
            }
            asked_at = i;
        }
    }
    if let Some(id) = asked.first() {
        return Err(format!(
            "messages[{asked_at}]: tool_use `{id}` has no result"
        ));
    }
    final_thinking(body, messages)
}

/// With thinking on, the final assistant message opens with its thinking when the user turn
/// after it (consecutive user messages are one turn) answers its tool use: Anthropic refuses it
/// otherwise.
fn final_thinking(body: &Value, messages: &[Value]) -> Broken {
    let on = matches!(
        body.pointer("/thinking/type").and_then(Value::as_str),
        Some("enabled" | "adaptive")
    );
    let role = |m: &Value| {
        m.get("role")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let Some(last) = messages.iter().rposition(|m| role(m) == "assistant") else {
        return Ok(());
    };
    let after = &messages[last + 1..];
    let answered = after.iter().all(|m| role(m) == "user")
        && after.iter().any(|m| {
            m.get("content").and_then(Value::as_array).is_some_and(|b| {
                b.iter()
                    .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            })
        });
    if !on || !answered {
        return Ok(());
    }
    let first = messages[last]
        .get("content")
        .and_then(Value::as_array)
        .and_then(|b| b.first())
        .and_then(|b| b.get("type"))
        .and_then(Value::as_str);
    match first {
        Some("thinking" | "redacted_thinking") => Ok(()),
        other => Err(format!(
            "messages[{last}]: with thinking on, the final assistant message whose tool use the \
             user answers opens with {other:?}, not its thinking"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_rule_catches_its_break() {
        let call = |id: &str| {
            json!({"role": "assistant", "tool_calls": [
                {"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
        };
        let result = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "x"});
        let user = json!({"role": "user", "content": "u"});
        let ok = json!({"messages": [user, call("a"), result("a"), call("a"), result("a")]});
        chat(&ok).unwrap();
        assert!(chat(&json!({"messages": [user, call("a"), user]})).is_err());
        assert!(chat(&json!({"messages": [user, result("a")]})).is_err());

        let fc = |id: &str| json!({"type": "function_call", "call_id": id, "name": "f", "arguments": "{}"});
        let out = |id: &str| json!({"type": "function_call_output", "call_id": id, "output": "x"});
        responses(&json!({"input": [fc("a"), out("a")]})).unwrap();
        assert!(responses(&json!({"input": [fc("a")]})).is_err());
        assert!(responses(&json!({"input": [out("a")]})).is_err());
        responses(&json!({"input": [out("a")], "previous_response_id": "r"})).unwrap();

        let uses = json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "f", "input": {}}]});
        let answers = json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t"}, {"type": "text", "text": "and"}]});
        let late = json!({"role": "user", "content": [
            {"type": "text", "text": "and"}, {"type": "tool_result", "tool_use_id": "t"}]});
        messages(&json!({"messages": [user, uses, answers]})).unwrap();
        assert!(messages(&json!({"messages": [user, uses, late]})).is_err());
        assert!(messages(&json!({"messages": [user, uses, user]})).is_err());
        assert!(messages(&json!({"messages": [uses]})).is_err());
        let thinking = json!({"type": "enabled", "budget_tokens": 1024});
        let unthought = json!({"thinking": thinking, "messages": [user, uses, answers]});
        assert!(messages(&unthought).is_err());
        let thought = json!({"thinking": thinking, "messages": [user,
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            answers]});
        messages(&thought).unwrap();
    }
}
