//! OpenAI Responses, `POST /v1/responses`.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::{bearer, content_text, openai_url, Dialect, Header, ItemHead, Provider};
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

    fn max_output_fields(&self) -> &'static [&'static str] {
        &["max_output_tokens"]
    }

    fn server_state_fields(&self) -> &'static [&'static str] {
        &["previous_response_id", "conversation"]
    }

    fn replace_conversation(&self, body: &mut Map<String, Value>, rendered: &Value) {
        if let Some(input) = rendered.get("input") {
            body.insert("input".into(), input.clone());
        }
        body.remove("instructions");
    }

    fn restore_system(&self, client: &Map<String, Value>, body: &mut Map<String, Value>) {
        // Loom renders `instructions` as the leading system message: sent back as the
        // client's `instructions`.
        let Some(instructions) = client.get("instructions").filter(|v| !v.is_null()) else {
            return;
        };
        let leads = body
            .get("input")
            .and_then(Value::as_array)
            .and_then(|input| input.first())
            .is_some_and(|first| {
                first.get("role").and_then(Value::as_str) == Some("system")
                    && content_text(first.get("content")) == content_text(Some(instructions))
            });
        if leads {
            if let Some(Value::Array(input)) = body.get_mut("input") {
                input.remove(0);
            }
            body.insert("instructions".into(), instructions.clone());
        }
    }

    /// Loom renders every call as a function call; the calls the client made to a custom
    /// (freeform) tool, and their outputs, go back as the client's `custom_tool_call` and
    /// `custom_tool_call_output` items where Loom rendered them itself (a stubbed output, a call
    /// whose turn was thinned).
    fn finish_restore(
        &self,
        body: &mut Map<String, Value>,
        ours: &[usize],
        custom: &HashSet<String>,
    ) {
        if custom.is_empty() {
            return;
        }
        let Some(Value::Array(input)) = body.get_mut("input") else {
            return;
        };
        for &r in ours {
            let Some(item) = input.get_mut(r).and_then(Value::as_object_mut) else {
                continue;
            };
            if !item
                .get("call_id")
                .and_then(Value::as_str)
                .is_some_and(|id| custom.contains(id))
            {
                continue;
            }
            match item.get("type").and_then(Value::as_str) {
                Some("function_call") => {
                    item.insert("type".into(), "custom_tool_call".into());
                    if let Some(arguments) = item.remove("arguments") {
                        item.insert("input".into(), arguments);
                    }
                }
                Some("function_call_output") => {
                    item.insert("type".into(), "custom_tool_call_output".into());
                }
                _ => {}
            }
        }
    }

    fn endpoint_name(&self) -> &'static str {
        "responses"
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
            "instructions": instructions,
            "input": input,
            "max_output_tokens": max_output_tokens,
        })
    }

    fn error_body(&self, status: u16, message: &str, param: Option<&str>) -> Value {
        crate::error_body::openai(status, message, param)
    }
}
