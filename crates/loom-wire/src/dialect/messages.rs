//! Anthropic Messages, `POST /v1/messages`.

use serde_json::{json, Value};

use super::{Dialect, Header, ItemHead, Provider};
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

    fn error_body(&self, status: u16, message: &str, param: Option<&str>) -> Value {
        crate::error_body::anthropic(status, message, param)
    }
}
