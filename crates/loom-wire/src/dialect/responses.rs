//! OpenAI Responses, `POST /v1/responses`.

use serde_json::{json, Value};

use super::{bearer, openai_url, Dialect, Header, ItemHead, Provider};
use loom_core::Api;

/// OpenAI Responses.
#[derive(Debug, Clone, Copy)]
pub(super) struct Responses;

impl Dialect for Responses {
    fn api(&self) -> Api {
        Api::OpenaiResponses
    }

    fn provider(&self) -> Provider {
        Provider::OpenAi
    }

    fn route(&self) -> &'static str {
        "/v1/responses"
    }

    fn url(&self, base: &str) -> String {
        openai_url(base, self.endpoint())
    }

    fn credential_headers(&self, key: Option<&str>) -> Vec<Header> {
        bearer(key)
    }

    fn ends_cleanly(&self, last: ItemHead<'_>) -> bool {
        match last.kind {
            // A tool's output, of whatever kind (`function_call_output`, `custom_tool_call_output`).
            Some(kind) if kind.ends_with("_output") => true,
            None | Some("message") => matches!(last.role, Some("user" | "system" | "developer")),
            Some(_) => false,
        }
    }

    fn replays_reasoning(&self) -> bool {
        true
    }

    fn tool(&self, name: &str, description: &str, parameters: &Value) -> Value {
        json!({"type": "function", "name": name, "description": description,
            "parameters": parameters, "strict": false})
    }

    fn drop_calls(&self, reply: &mut Value, name: &str) {
        if let Some(Value::Array(items)) = reply.get_mut("output") {
            items.retain(|i| !(i["type"] == "function_call" && i["name"] == name));
        }
    }

    fn prepend_text(&self, reply: &mut Value, text: &str) {
        let Some(Value::Array(items)) = reply.get_mut("output") else {
            return;
        };
        let part = items
            .iter_mut()
            .filter(|i| i["type"] == "message")
            .flat_map(|i| i["content"].as_array_mut().into_iter().flatten())
            .find(|p| p["type"] == "output_text");
        match part {
            Some(p) => {
                let own = p["text"].as_str().unwrap_or("").to_owned();
                p["text"] = json!(format!("{text}{own}"));
            }
            None => {
                let at = items
                    .iter()
                    .position(|i| i["type"] != "reasoning")
                    .unwrap_or(items.len());
                items.insert(
                    at,
                    json!({"type": "message", "id": "msg_loom_recall", "status": "completed",
                        "role": "assistant", "content": [
                            {"type": "output_text", "text": text, "annotations": []}]}),
                );
            }
        }
    }

    fn error_body(&self, status: u16, message: &str, param: Option<&str>) -> Value {
        crate::error_body::openai(status, message, param)
    }
}
