//! OpenAI Chat Completions, `POST /v1/chat/completions`.

use serde_json::{json, Value};

use super::{bearer, openai_url, Dialect, Header, ItemHead, Provider};
use loom_core::Api;

/// OpenAI Chat Completions.
#[derive(Debug, Clone, Copy)]
pub(super) struct Chat;

impl Dialect for Chat {
    fn api(&self) -> Api {
        Api::OpenaiChat
    }

    fn provider(&self) -> Provider {
        Provider::OpenAi
    }

    fn route(&self) -> &'static str {
        "/v1/chat/completions"
    }

    fn url(&self, base: &str) -> String {
        openai_url(base, self.endpoint())
    }

    fn credential_headers(&self, key: Option<&str>) -> Vec<Header> {
        bearer(key)
    }

    fn ends_cleanly(&self, last: ItemHead<'_>) -> bool {
        matches!(
            last.role,
            Some("user" | "tool" | "function" | "system" | "developer")
        )
    }

    fn stream_usage_on_request(&self) -> bool {
        true
    }

    fn tool(&self, name: &str, description: &str, parameters: &Value) -> Value {
        json!({"type": "function", "function": {
            "name": name, "description": description, "parameters": parameters}})
    }

    fn drop_calls(&self, reply: &mut Value, name: &str) {
        let Some(msg) = reply.pointer_mut("/choices/0/message") else {
            return;
        };
        if let Some(Value::Array(calls)) = msg.get_mut("tool_calls") {
            calls.retain(|c| c.pointer("/function/name") != Some(&json!(name)));
            if calls.is_empty() {
                msg.as_object_mut().map(|m| m.remove("tool_calls"));
                reply["choices"][0]["finish_reason"] = json!("stop");
            }
        }
    }

    fn prepend_text(&self, reply: &mut Value, text: &str) {
        if let Some(msg) = reply.pointer_mut("/choices/0/message") {
            let own = msg.get("content").and_then(Value::as_str).unwrap_or("");
            msg["content"] = json!(format!("{text}{own}"));
        }
    }

    fn max_output_fields(&self) -> &'static [&'static str] {
        &["max_completion_tokens", "max_tokens"]
    }

    fn endpoint_name(&self) -> &'static str {
        "chat_completions"
    }

    fn one_turn(
        &self,
        model: &str,
        instructions: &str,
        input: &str,
        max_output_tokens: u64,
    ) -> Value {
        // `max_tokens`, the field every compatible server reads (some know no other).
        json!({
            "model": model,
            "messages": [
                {"role": "system", "content": instructions},
                {"role": "user", "content": input},
            ],
            "max_tokens": max_output_tokens,
        })
    }

    fn error_body(&self, status: u16, message: &str, param: Option<&str>) -> Value {
        crate::error_body::openai(status, message, param)
    }
}
