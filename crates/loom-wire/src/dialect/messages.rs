//! Anthropic Messages, `POST /v1/messages`.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::{content_text, without_churn_lines, Dialect, Header, ItemHead, Provider};

/// Anthropic accepts at most this many `cache_control` breakpoints in a request.
const MAX_BREAKPOINTS: usize = 4;
use loom_core::Api;

/// The `anthropic-version` sent when the caller gives none.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Anthropic Messages.
#[derive(Debug, Clone, Copy)]
pub(super) struct Messages;

impl Dialect for Messages {
    fn api(&self) -> Api {
        Api::Anthropic
    }

    fn provider(&self) -> Provider {
        Provider::Anthropic
    }

    fn route(&self) -> &'static str {
        "/v1/messages"
    }

    fn url(&self, base: &str) -> String {
        let base = base.strip_suffix("/v1").unwrap_or(base);
        format!("{base}/v1{}", self.endpoint())
    }

    fn credential_headers(&self, key: Option<&str>) -> Vec<Header> {
        let mut headers = vec![Header {
            name: "anthropic-version",
            value: ANTHROPIC_VERSION.to_owned(),
            secret: false,
        }];
        headers.extend(key.map(|key| Header {
            name: "x-api-key",
            value: key.to_owned(),
            secret: true,
        }));
        headers
    }

    fn unique_call_ids(&self) -> bool {
        true
    }

    fn ends_cleanly(&self, last: ItemHead<'_>) -> bool {
        last.role == Some("user")
    }

    fn replays_reasoning(&self) -> bool {
        true
    }

    fn tool(&self, name: &str, description: &str, parameters: &Value) -> Value {
        json!({"name": name, "description": description, "input_schema": parameters})
    }

    fn drop_calls(&self, reply: &mut Value, name: &str) {
        if let Some(Value::Array(blocks)) = reply.get_mut("content") {
            blocks.retain(|b| !(b["type"] == "tool_use" && b["name"] == name));
            if !blocks.iter().any(|b| b["type"] == "tool_use") {
                reply["stop_reason"] = json!("end_turn");
            }
        }
    }

    fn prepend_text(&self, reply: &mut Value, text: &str) {
        let Some(Value::Array(blocks)) = reply.get_mut("content") else {
            return;
        };
        match blocks.iter_mut().find(|b| b["type"] == "text") {
            Some(b) => {
                let own = b["text"].as_str().unwrap_or("").to_owned();
                b["text"] = json!(format!("{text}{own}"));
            }
            None => {
                // After the thinking blocks, which come first.
                let at = blocks
                    .iter()
                    .position(|b| {
                        !matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking"))
                    })
                    .unwrap_or(blocks.len());
                blocks.insert(at, json!({"type": "text", "text": text}));
            }
        }
    }

    fn max_output_fields(&self) -> &'static [&'static str] {
        &["max_tokens"]
    }

    fn million_token_window(&self, headers: &[(&str, &str)]) -> bool {
        headers.iter().any(|(name, value)| {
            name.eq_ignore_ascii_case("anthropic-beta")
                && value
                    .split(',')
                    .any(|beta| beta.trim().starts_with("context-1m"))
        })
    }

    fn replace_conversation(&self, body: &mut Map<String, Value>, rendered: &Value) {
        if let Some(messages) = rendered.get("messages") {
            body.insert("messages".into(), messages.clone());
        }
        match rendered.get("system") {
            Some(system) => {
                body.insert("system".into(), system.clone());
            }
            None => {
                body.remove("system");
            }
        }
    }

    fn restore_system(&self, client: &Map<String, Value>, body: &mut Map<String, Value>) {
        if let (Some(theirs), Some(ours)) = (client.get("system"), body.get("system")) {
            // The client's own, also where it differs from the render only in lines it
            // rewrites within the conversation (the log keeps the first).
            let (theirs_text, ours_text) = (content_text(Some(theirs)), content_text(Some(ours)));
            if without_churn_lines(&theirs_text) == without_churn_lines(&ours_text) {
                body.insert("system".into(), theirs.clone());
            }
        }
    }

    /// Removes Loom's own breakpoints (on the rendered messages `ours`, oldest first) until the
    /// request holds at most [`MAX_BREAKPOINTS`], the client's own kept.
    fn finish_restore(&self, body: &mut Map<String, Value>, ours: &[usize], _: &HashSet<String>) {
        let count = |v: &Value| v.to_string().matches("\"cache_control\"").count();
        let mut total = body.get("system").map_or(0, count)
            + body.get("messages").map_or(0, count)
            + body.get("tools").map_or(0, count);
        if total <= MAX_BREAKPOINTS {
            return;
        }
        let Some(Value::Array(messages)) = body.get_mut("messages") else {
            return;
        };
        for &i in ours {
            if total <= MAX_BREAKPOINTS {
                return;
            }
            if let Some(Value::Array(blocks)) =
                messages.get_mut(i).and_then(|m| m.get_mut("content"))
            {
                for block in blocks.iter_mut() {
                    if let Some(b) = block.as_object_mut() {
                        if b.remove("cache_control").is_some() {
                            total -= 1;
                        }
                    }
                }
            }
        }
    }

    fn endpoint_name(&self) -> &'static str {
        "messages"
    }

    fn one_turn(
        &self,
        model: &str,
        instructions: &str,
        input: &str,
        max_output_tokens: u64,
    ) -> Value {
        json!({
            "model": model,
            "system": instructions,
            "messages": [{"role": "user", "content": input}],
            "max_tokens": max_output_tokens,
        })
    }

    fn error_body(&self, status: u16, message: &str, param: Option<&str>) -> Value {
        crate::error_body::anthropic(status, message, param)
    }
}
