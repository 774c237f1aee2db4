//! `fit` mode: the client's request with its conversation replaced by Loom's render.
//!
//! Only the conversation changes: Chat's `messages`, Responses' `input` (and `instructions`,
//! which Loom renders as the leading system message), Anthropic's `messages` and `system`.
//! Everything else the client sent — model, tools exactly as given, sampling parameters, stream
//! options, fields Loom does not know — is kept as it came.

use serde_json::{Map, Value};

use loom_core::render::Format;
use loom_provider::Api;

/// The render format of a provider API.
pub(crate) fn format_of(api: Api) -> Format {
    match api {
        Api::ChatCompletions => Format::OpenaiChat,
        Api::Responses => Format::OpenaiResponses,
        Api::Messages => Format::Anthropic,
    }
}

/// The client's body with the rendered conversation in place of its own.
pub(crate) fn merge(api: Api, client: &Map<String, Value>, rendered: &Value) -> Value {
    let mut body = client.clone();
    let take = |key: &str| rendered.get(key).cloned();
    match api {
        Api::ChatCompletions => {
            if let Some(messages) = take("messages") {
                body.insert("messages".into(), messages);
            }
        }
        Api::Responses => {
            if let Some(input) = take("input") {
                body.insert("input".into(), input);
            }
            body.remove("instructions");
        }
        Api::Messages => {
            if let Some(messages) = take("messages") {
                body.insert("messages".into(), messages);
            }
            match take("system") {
                Some(system) => {
                    body.insert("system".into(), system);
                }
                None => {
                    body.remove("system");
                }
            }
        }
    }
    Value::Object(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_conversation_is_replaced() {
        let client = json!({
            "model": "gpt-4o", "temperature": 0.2, "tools": [{"type": "function", "function": {"name": "f"}}],
            "messages": [{"role": "user", "content": "long"}], "x_unknown": {"kept": true}
        });
        let rendered = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "short"}], "tools": []});
        let out = merge(Api::ChatCompletions, client.as_object().unwrap(), &rendered);
        assert_eq!(out["messages"], rendered["messages"]);
        assert_eq!(out["tools"], client["tools"]);
        assert_eq!(out["temperature"], 0.2);
        assert_eq!(out["x_unknown"], client["x_unknown"]);

        let client = json!({"model": "claude", "max_tokens": 5, "system": "sys", "messages": []});
        let rendered = json!({"messages": [{"role": "user", "content": "x"}]});
        let out = merge(Api::Messages, client.as_object().unwrap(), &rendered);
        assert!(out.get("system").is_none());
        assert_eq!(out["max_tokens"], 5);

        let client =
            json!({"model": "gpt-4o", "instructions": "be brief", "input": "hi", "store": false});
        let rendered =
            json!({"input": [{"type": "message", "role": "system", "content": "be brief"}]});
        let out = merge(Api::Responses, client.as_object().unwrap(), &rendered);
        assert!(out.get("instructions").is_none());
        assert_eq!(out["store"], false);
    }
}
