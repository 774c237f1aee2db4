//! `fit` mode: the client's request with its conversation replaced by Loom's render.
//!
//! Only the conversation changes: Chat's `messages`, Responses' `input` (and `instructions`,
//! which Loom renders as the leading system message), Anthropic's `messages` and `system`.
//! Everything else the client sent — model, tools exactly as given, sampling parameters, stream
//! options, fields Loom does not know — is kept as it came.
//!
//! And the conversation keeps the client's shape where Loom did not change it ([`restore`]):
//! every rendered message or item that says what one of the client's says is sent as the client
//! wrote it — its `developer` role, its ids and statuses, its system blocks and their
//! `cache_control`, its nulls and fields Loom does not model. Only what Loom stubbed, folded or
//! dropped reads differently from what the client sent.

use std::collections::HashMap;

use serde_json::{Map, Value};

use loom_core::Api;

/// The client's body with the rendered conversation in place of its own.
pub(crate) fn merge(api: Api, client: &Map<String, Value>, rendered: &Value) -> Value {
    let mut body = client.clone();
    loom_wire::dialect(api).replace_conversation(&mut body, rendered);
    Value::Object(body)
}

/// Puts the client's own form back wherever the fitted body says what the client said: each
/// rendered item equal by meaning ([`meaning`]) to a client item at or after the previous match
/// is replaced by the client's item; the system prompt (Anthropic's `system`, Responses'
/// `instructions`) likewise. Anthropic's breakpoints are then kept within the provider's limit,
/// the client's own first: Loom's are dropped, oldest first, when there are too many.
pub(crate) fn restore(
    api: Api,
    client: &Map<String, Value>,
    items: &mut dyn Items,
    body: &mut Value,
) {
    let dialect = loom_wire::dialect(api);
    let key = dialect.history_field();
    let Some(obj) = body.as_object_mut() else {
        return;
    };
    dialect.restore_system(client, obj);
    let Some(Value::Array(rendered)) = obj.get_mut(key) else {
        return;
    };
    let mut at: HashMap<u64, Vec<usize>> = HashMap::new();
    for i in 0..items.len() {
        if let Some(h) = items.meaning(i) {
            at.entry(h).or_default().push(i);
        }
    }
    let mut next = 0;
    let mut ours = Vec::new();
    let mut custom = std::collections::HashSet::new();
    for (r, item) in rendered.iter_mut().enumerate() {
        let found = at
            .get(&meaning_hash(item))
            .and_then(|list| list.iter().find(|&&i| i >= next).copied())
            .and_then(|i| Some((i, items.value(i)?)));
        match found {
            Some((i, theirs)) => {
                // A custom call is known by its call or its output: either may be the one
                // restored (the other rendered by Loom, a field it does not model aside), and
                // both must go back as the same kind.
                if matches!(
                    theirs.get("type").and_then(Value::as_str),
                    Some("custom_tool_call" | "custom_tool_call_output")
                ) {
                    if let Some(id) = theirs.get("call_id").and_then(Value::as_str) {
                        custom.insert(id.to_owned());
                    }
                }
                *item = theirs;
                next = i + 1;
            }
            None => ours.push(r),
        }
    }
    dialect.finish_restore(obj, &ours, &custom);
}

/// The client's items, read only as far as [`restore`] needs them.
pub(crate) trait Items {
    /// How many there are.
    fn len(&self) -> usize;
    /// The hash of what item `i` says ([`meaning`]).
    fn meaning(&mut self, i: usize) -> Option<u64>;
    /// Item `i` as the client sent it.
    fn value(&self, i: usize) -> Option<Value>;
}

#[cfg(test)]
impl Items for Vec<Value> {
    fn len(&self) -> usize {
        <[Value]>::len(self)
    }
    fn meaning(&mut self, i: usize) -> Option<u64> {
        self.get(i).map(meaning_hash)
    }
    fn value(&self, i: usize) -> Option<Value> {
        self.get(i).cloned()
    }
}

/// The hash of what a message or item says.
pub(crate) fn meaning_hash(item: &Value) -> u64 {
    xxhash_rust::xxh3::xxh3_64(meaning(item).to_string().as_bytes())
}

/// The label Loom's Anthropic render puts in front of a system message it sends as user text
/// (the API has no mid-conversation system role outside a beta).
const SYSTEM_LABEL: &str = "[system]\n";

/// A message or item reduced to what it says: no ids but calls', no statuses, cache breakpoints
/// or per-request metadata ([`loom_wire::CHURN_FIELDS`]), no null or `false` fields, a lone text block as its text, `developer` as `system`, a custom tool's
/// call and output as a function's, Loom's labelled system text as a system message, keys in
/// order.
fn meaning(item: &Value) -> Value {
    match item {
        Value::Object(m) => {
            if m.get("role").and_then(Value::as_str) == Some("user") {
                let text = loom_wire::content_text(m.get("content"));
                if let Some(rest) = text.strip_prefix(SYSTEM_LABEL) {
                    let mut system = Map::new();
                    system.insert("content".into(), Value::String(rest.to_owned()));
                    system.insert("role".into(), "system".into());
                    return Value::Object(system);
                }
            }
            // A call's id is what its result names, so it is part of what the call says (the
            // log's alias of a reused id must not pass for the client's id); other ids are not.
            let call = matches!(
                m.get("type").and_then(Value::as_str),
                Some("function" | "custom" | "tool_use")
            );
            let mut out = Map::new();
            for (k, v) in m {
                if (k == "id" && !call)
                    || matches!(k.as_str(), "status" | "cache_control" | "annotations")
                    || loom_wire::CHURN_FIELDS.contains(&k.as_str())
                    || matches!(v, Value::Null | Value::Bool(false))
                {
                    continue;
                }
                let k = if k == "input"
                    && m.get("type").and_then(Value::as_str) == Some("custom_tool_call")
                {
                    "arguments"
                } else {
                    k.as_str()
                };
                let v = match (k, v) {
                    ("role", Value::String(r)) if r == "developer" => Value::from("system"),
                    ("type", Value::String(t)) if t == "custom_tool_call" => {
                        Value::from("function_call")
                    }
                    ("type", Value::String(t)) if t == "custom_tool_call_output" => {
                        Value::from("function_call_output")
                    }
                    ("type", Value::String(t)) if t == "message" => continue,
                    ("content" | "output", Value::Array(parts)) => match parts.as_slice() {
                        [one] if is_text_part(one) => {
                            Value::String(one["text"].as_str().unwrap_or_default().to_owned())
                        }
                        _ => meaning(v),
                    },
                    _ => meaning(v),
                };
                out.insert(k.to_owned(), v);
            }
            Value::Object(out)
        }
        Value::Array(list) => Value::Array(list.iter().map(meaning).collect()),
        // Tool-call arguments are JSON text: compared as the value they hold.
        Value::String(s) if s.starts_with('{') => serde_json::from_str::<Value>(s)
            .map(|v| meaning(&v))
            .unwrap_or_else(|_| item.clone()),
        other => other.clone(),
    }
}

fn is_text_part(part: &Value) -> bool {
    matches!(
        part.get("type").and_then(Value::as_str),
        Some("text" | "input_text" | "output_text")
    ) && part.get("text").is_some_and(Value::is_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_clients_shape_comes_back_where_the_render_says_what_it_said() {
        let client = json!({
            "model": "gpt-6", "instructions": "Be brief.",
            "input": [
                {"type": "message", "id": "msg_1", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
                {"type": "message", "id": "msg_2", "role": "user", "content": [{"type": "input_text", "text": "task"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [], "content": null, "encrypted_content": "e"},
                {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{\"a\": 1}", "status": "completed"},
                {"type": "function_call_output", "call_id": "c1", "output": "a long output"}
            ]
        });
        let mut items = client["input"].as_array().unwrap().clone();
        let mut body = json!({"model": "gpt-6", "input": [
            {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Be brief."}]},
            {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "rules"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "task"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\":1}"},
            {"type": "function_call_output", "call_id": "c1", "output": "[stubbed: see outputs/f_001.log]"}
        ]});
        restore(
            Api::OpenaiResponses,
            client.as_object().unwrap(),
            &mut items,
            &mut body,
        );
        assert_eq!(body["instructions"], "Be brief.");
        let input = body["input"].as_array().unwrap();
        assert_eq!(input[..4], items[..4], "{body}");
        // What Loom changed stays Loom's.
        assert_eq!(input[4]["output"], "[stubbed: see outputs/f_001.log]");
    }

    #[test]
    fn custom_tool_calls_and_system_messages_keep_their_kind() {
        let client = json!({"model": "gpt-6", "input": [
            {"type": "message", "role": "user", "content": "task"},
            {"type": "custom_tool_call", "id": "ctc_1", "call_id": "c1", "name": "exec", "input": "tools.ls()"},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "a long listing"}]}
        ]});
        let mut items = client["input"].as_array().unwrap().clone();
        let mut body = json!({"model": "gpt-6", "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "task"}]},
            {"type": "function_call", "call_id": "c1", "name": "exec", "arguments": "tools.ls()"},
            {"type": "function_call_output", "call_id": "c1", "output": "[stubbed]"}
        ]});
        restore(
            Api::OpenaiResponses,
            client.as_object().unwrap(),
            &mut items,
            &mut body,
        );
        assert_eq!(body["input"][1], items[1], "{body}");
        assert_eq!(body["input"][2]["type"], "custom_tool_call_output");
        assert_eq!(body["input"][2]["output"], "[stubbed]");

        let client = json!({"model": "claude", "max_tokens": 5, "messages": [
            {"role": "user", "content": "task"},
            {"role": "system", "content": [{"type": "text", "text": "# Environment\ncwd: /repo"}]}
        ]});
        let mut items = client["messages"].as_array().unwrap().clone();
        let mut body = json!({"model": "claude", "max_tokens": 5, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "task"}]},
            {"role": "user", "content": [{"type": "text", "text": "[system]\n# Environment\ncwd: /repo"}]}
        ]});
        restore(
            Api::Anthropic,
            client.as_object().unwrap(),
            &mut items,
            &mut body,
        );
        assert_eq!(body["messages"][1], items[1], "{body}");
    }

    /// A custom call with a field Loom does not model (`namespace`) is rendered by Loom while its
    /// output is restored as the client's: the call went as a `function_call`, its output as a
    /// `custom_tool_call_output`, and `fit` fell back (found by the conformance suite).
    #[test]
    fn a_custom_call_rendered_beside_its_restored_output_keeps_its_kind() {
        let client = json!({"model": "gpt-6", "input": [
            {"type": "message", "role": "user", "content": "task"},
            {"type": "custom_tool_call", "call_id": "c1", "name": "exec", "input": "ls", "namespace": "tools"},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "a.rs"}
        ]});
        let mut items = client["input"].as_array().unwrap().clone();
        let mut body = json!({"model": "gpt-6", "input": [
            {"type": "message", "role": "user", "content": "task"},
            {"type": "function_call", "call_id": "c1", "name": "exec", "arguments": "ls"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.rs"}
        ]});
        restore(
            Api::OpenaiResponses,
            client.as_object().unwrap(),
            &mut items,
            &mut body,
        );
        assert_eq!(body["input"][2], items[2], "{body}");
        assert_eq!(body["input"][1]["type"], "custom_tool_call", "{body}");
        assert_eq!(body["input"][1]["input"], "ls", "{body}");
    }

    #[test]
    fn anthropic_keeps_the_clients_system_blocks_and_breakpoints_within_the_limit() {
        let system = json!([
            {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "c", "cache_control": {"type": "ephemeral"}}
        ]);
        let client = json!({"model": "claude", "max_tokens": 5, "system": system, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "task", "cache_control": {"type": "ephemeral"}}]}
        ]});
        let mut items = client["messages"].as_array().unwrap().clone();
        let mut body = json!({"model": "claude", "max_tokens": 5,
        "system": [{"type": "text", "text": "a\nb\nc", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "task"}]},
            {"role": "user", "content": [{"type": "text", "text": "[3 earlier steps]", "cache_control": {"type": "ephemeral"}}]}
        ]});
        restore(
            Api::Anthropic,
            client.as_object().unwrap(),
            &mut items,
            &mut body,
        );
        assert_eq!(body["system"], system);
        assert_eq!(body["messages"][0], items[0]);
        // Three of the client's in `system`, one on its message: Loom's own goes.
        assert!(
            body["messages"][1]["content"][0]
                .get("cache_control")
                .is_none(),
            "{body}"
        );
    }

    #[test]
    fn only_the_conversation_is_replaced() {
        let client = json!({
            "model": "gpt-4o", "temperature": 0.2, "tools": [{"type": "function", "function": {"name": "f"}}],
            "messages": [{"role": "user", "content": "long"}], "x_unknown": {"kept": true}
        });
        let rendered = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "short"}], "tools": []});
        let out = merge(Api::OpenaiChat, client.as_object().unwrap(), &rendered);
        assert_eq!(out["messages"], rendered["messages"]);
        assert_eq!(out["tools"], client["tools"]);
        assert_eq!(out["temperature"], 0.2);
        assert_eq!(out["x_unknown"], client["x_unknown"]);

        let client = json!({"model": "claude", "max_tokens": 5, "system": "sys", "messages": []});
        let rendered = json!({"messages": [{"role": "user", "content": "x"}]});
        let out = merge(Api::Anthropic, client.as_object().unwrap(), &rendered);
        assert!(out.get("system").is_none());
        assert_eq!(out["max_tokens"], 5);

        let client =
            json!({"model": "gpt-4o", "instructions": "be brief", "input": "hi", "store": false});
        let rendered =
            json!({"input": [{"type": "message", "role": "system", "content": "be brief"}]});
        let out = merge(Api::OpenaiResponses, client.as_object().unwrap(), &rendered);
        assert!(out.get("instructions").is_none());
        assert_eq!(out["store"], false);
    }
}
