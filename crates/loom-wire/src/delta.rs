//! The pieces of a reply worth showing while it arrives (text, thinking, the name of a tool being
//! called), read from each API's stream events; the assembler builds the turn itself apart.

use serde_json::Value;

use loom_core::Api;

use crate::{AssistantReply, SseEvent};

/// A piece of a reply as it arrives, for a progress line; the complete turn is what the
/// [`crate::StreamAssembler`] builds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delta {
    /// Visible text (refusals included).
    Text(String),
    /// Thinking or reasoning-summary text.
    Thinking(String),
    /// The model started a tool call.
    ToolCall {
        /// The tool's name as the provider sent it.
        name: String,
    },
}

/// The deltas one stream event carries. Events that are not JSON, or not of a known shape, carry
/// none here: the assembler, which reads the same events, reports them.
pub fn stream_deltas(api: Api, event: &SseEvent, out: &mut Vec<Delta>) {
    let Ok(data) = serde_json::from_str::<Value>(&event.data) else {
        return;
    };
    let text = |v: &Value, key: &str| {
        v.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    match api {
        Api::OpenaiChat => {
            let Some(choices) = data.get("choices").and_then(Value::as_array) else {
                return;
            };
            // Only the first choice is assembled into the turn; show only that one.
            let first = choices
                .iter()
                .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0);
            let Some(delta) = first.and_then(|c| c.get("delta")) else {
                return;
            };
            for key in ["reasoning_content", "reasoning"] {
                out.extend(text(delta, key).map(Delta::Thinking));
            }
            out.extend(text(delta, "content").map(Delta::Text));
            out.extend(text(delta, "refusal").map(Delta::Text));
            for call in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(name) = call.get("function").and_then(|f| text(f, "name")) {
                    out.push(Delta::ToolCall { name });
                }
            }
        }
        Api::OpenaiResponses => {
            let kind = data
                .get("type")
                .and_then(Value::as_str)
                .or(event.event.as_deref());
            match kind {
                Some("response.output_text.delta" | "response.refusal.delta") => {
                    out.extend(text(&data, "delta").map(Delta::Text));
                }
                Some("response.reasoning_summary_text.delta" | "response.reasoning_text.delta") => {
                    out.extend(text(&data, "delta").map(Delta::Thinking))
                }
                Some("response.output_item.added") => {
                    if let Some(item) = data.get("item") {
                        if matches!(
                            item.get("type").and_then(Value::as_str),
                            Some("function_call" | "custom_tool_call")
                        ) {
                            out.extend(text(item, "name").map(|name| Delta::ToolCall { name }));
                        }
                    }
                }
                _ => {}
            }
        }
        Api::Anthropic => match data.get("type").and_then(Value::as_str) {
            Some("content_block_delta") => {
                let Some(delta) = data.get("delta") else {
                    return;
                };
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => out.extend(text(delta, "text").map(Delta::Text)),
                    Some("thinking_delta") => {
                        out.extend(text(delta, "thinking").map(Delta::Thinking));
                    }
                    _ => {}
                }
            }
            Some("content_block_start") => {
                let Some(block) = data.get("content_block") else {
                    return;
                };
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        out.extend(text(block, "name").map(|name| Delta::ToolCall { name }));
                    }
                    Some("text") => out.extend(text(block, "text").map(Delta::Text)),
                    Some("thinking") => out.extend(text(block, "thinking").map(Delta::Thinking)),
                    _ => {}
                }
            }
            _ => {}
        },
        // Every event is a whole response with the next pieces of candidate 0's parts.
        Api::Gemini => {
            let parts = data
                .pointer("/candidates/0/content/parts")
                .and_then(Value::as_array);
            for part in parts.into_iter().flatten() {
                if let Some(call) = part.get("functionCall") {
                    out.extend(text(call, "name").map(|name| Delta::ToolCall { name }));
                } else if part.get("thought").and_then(Value::as_bool) == Some(true) {
                    out.extend(text(part, "text").map(Delta::Thinking));
                } else {
                    out.extend(text(part, "text").map(Delta::Text));
                }
            }
        }
    }
}

/// The deltas of a reply read whole: its thinking, its text, its calls, each in one piece, so a
/// progress line works the same whether the call streamed or not.
pub fn reply_deltas(reply: &AssistantReply) -> Vec<Delta> {
    let mut out = Vec::new();
    out.extend(reply.reasoning.clone().map(Delta::Thinking));
    out.extend(reply.content.clone().map(Delta::Text));
    out.extend(reply.tool_calls.iter().map(|c| Delta::ToolCall {
        name: c.name.clone(),
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deltas(api: Api, event: Option<&str>, data: &str) -> Vec<Delta> {
        let mut out = Vec::new();
        let event = SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
        };
        stream_deltas(api, &event, &mut out);
        out
    }

    #[test]
    fn each_apis_text_thinking_and_calls() {
        let chat = Api::OpenaiChat;
        assert_eq!(
            deltas(
                chat,
                None,
                r#"{"choices":[{"index":0,"delta":{"content":"hi","reasoning_content":"hm"}}]}"#
            ),
            [Delta::Thinking("hm".into()), Delta::Text("hi".into())]
        );
        assert_eq!(
            deltas(
                chat,
                None,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"ls","arguments":""}}]}}]}"#
            ),
            [Delta::ToolCall { name: "ls".into() }]
        );
        assert!(deltas(
            chat,
            None,
            r#"{"choices":[{"index":1,"delta":{"content":"other"}}]}"#
        )
        .is_empty());
        assert!(deltas(chat, None, "[DONE]").is_empty());
        assert_eq!(
            deltas(
                Api::OpenaiResponses,
                Some("response.output_text.delta"),
                r#"{"type":"response.output_text.delta","delta":"a"}"#
            ),
            [Delta::Text("a".into())]
        );
        assert_eq!(
            deltas(
                Api::OpenaiResponses,
                None,
                r#"{"type":"response.output_item.added","item":{"type":"function_call","name":"f"}}"#
            ),
            [Delta::ToolCall { name: "f".into() }]
        );
        assert_eq!(
            deltas(
                Api::Anthropic,
                None,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"t"}}"#
            ),
            [Delta::Thinking("t".into())]
        );
        assert!(deltas(Api::Anthropic, None, r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s"}}"#).is_empty());
        assert_eq!(
            deltas(
                Api::Anthropic,
                None,
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"g","input":{}}}"#
            ),
            [Delta::ToolCall { name: "g".into() }]
        );
    }
}
