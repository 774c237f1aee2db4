//! Anthropic Messages replies: the `message` body and its event stream (`message_start`,
//! `content_block_start` / `content_block_delta` / `content_block_stop` for thinking, text
//! and tool-use blocks, a `ping`, `message_delta` with the stop reason and final usage, then
//! `message_stop`).

use bytes::Bytes;
use serde_json::{json, Value};

use crate::behaviour::{self, Ids, Reply, Usage};
use crate::request::Prompt;
use crate::wire::{self, Outgoing};

/// Everything a Messages reply is built from.
#[derive(Debug)]
pub(crate) struct MessagesReply<'a> {
    /// The request's facts.
    pub(crate) prompt: &'a Prompt,
    /// What to answer.
    pub(crate) reply: &'a Reply,
    /// Its token counts.
    pub(crate) usage: Usage,
    /// Its ids.
    pub(crate) ids: Ids,
}

/// One content block of the reply.
enum Block {
    Thinking {
        text: String,
    },
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: String,
    },
}

impl Block {
    /// The block as it appears in the final message. Arguments that are not a JSON object
    /// (never the case for the mock's own) fall back to an empty input.
    fn done(&self) -> Value {
        match self {
            Self::Thinking { text } => json!({
                "type": "thinking",
                "thinking": text,
                "signature": behaviour::signature(text),
            }),
            Self::Text { text } => json!({ "type": "text", "text": text }),
            Self::ToolUse { id, name, input } => json!({
                "type": "tool_use",
                "id": id,
                "name": name,
                "input": serde_json::from_str::<Value>(input).unwrap_or_else(|_| json!({})),
            }),
        }
    }
}

impl MessagesReply<'_> {
    /// The reply as JSON or as an SSE stream, as the request asked.
    pub(crate) fn render(&self) -> Outgoing {
        if self.prompt.stream {
            Outgoing::sse(self.events())
        } else {
            Outgoing::json(axum::http::StatusCode::OK, &self.body())
        }
    }

    fn blocks(&self) -> Vec<Block> {
        let mut blocks = Vec::new();
        if let Some(text) = &self.reply.thinking {
            blocks.push(Block::Thinking { text: text.clone() });
        }
        if let Some(text) = &self.reply.text {
            blocks.push(Block::Text { text: text.clone() });
        }
        for (i, call) in self.reply.calls.iter().enumerate() {
            blocks.push(Block::ToolUse {
                id: self.ids.id("toolu_", i),
                name: call.name.clone(),
                input: call.arguments.clone(),
            });
        }
        blocks
    }

    fn stop_reason(&self) -> &'static str {
        if self.reply.calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        }
    }

    /// The usage object; `output` differs between `message_start` and the end.
    fn usage_json(&self, output: u64) -> Value {
        let u = self.usage;
        json!({
            "input_tokens": u.uncached_input(),
            "cache_creation_input_tokens": u.cache_write,
            "cache_read_input_tokens": u.cache_read,
            "output_tokens": output,
            "service_tier": "standard",
        })
    }

    /// The `message` object; `finished` decides whether it carries content and a stop reason.
    fn message(&self, finished: bool) -> Value {
        let (content, stop_reason, output) = if finished {
            let content: Vec<Value> = self.blocks().iter().map(Block::done).collect();
            (
                Value::Array(content),
                json!(self.stop_reason()),
                self.usage.output,
            )
        } else {
            (json!([]), Value::Null, 1)
        };
        json!({
            "id": self.ids.id("msg_", 0),
            "type": "message",
            "role": "assistant",
            "model": self.prompt.model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": null,
            "usage": self.usage_json(output),
        })
    }

    fn body(&self) -> Value {
        self.message(true)
    }

    /// The SSE frames of the streamed reply.
    fn events(&self) -> Vec<Bytes> {
        let mut frames = Vec::new();
        let mut push = |event: Value| {
            let kind = event["type"].as_str().unwrap_or("unknown").to_owned();
            frames.push(wire::event_frame(&kind, &event));
        };
        push(json!({ "type": "message_start", "message": self.message(false) }));
        for (index, block) in self.blocks().iter().enumerate() {
            let (start, deltas): (Value, Vec<Value>) = match block {
                Block::Thinking { text } => {
                    let mut deltas: Vec<Value> = wire::word_pieces(text, 3)
                        .into_iter()
                        .map(|piece| json!({ "type": "thinking_delta", "thinking": piece }))
                        .collect();
                    deltas.push(json!({ "type": "signature_delta", "signature": behaviour::signature(text) }));
                    (
                        json!({ "type": "thinking", "thinking": "", "signature": "" }),
                        deltas,
                    )
                }
                Block::Text { text } => {
                    let deltas = wire::word_pieces(text, 2)
                        .into_iter()
                        .map(|piece| json!({ "type": "text_delta", "text": piece }))
                        .collect();
                    (json!({ "type": "text", "text": "" }), deltas)
                }
                Block::ToolUse { id, name, input } => {
                    // Anthropic opens a tool-use stream with an empty partial_json.
                    let deltas = std::iter::once(String::new())
                        .chain(wire::byte_pieces(input, 8))
                        .map(|piece| json!({ "type": "input_json_delta", "partial_json": piece }))
                        .collect();
                    (
                        json!({ "type": "tool_use", "id": id, "name": name, "input": {} }),
                        deltas,
                    )
                }
            };
            push(json!({ "type": "content_block_start", "index": index, "content_block": start }));
            if index == 0 {
                push(json!({ "type": "ping" }));
            }
            for delta in deltas {
                push(json!({ "type": "content_block_delta", "index": index, "delta": delta }));
            }
            push(json!({ "type": "content_block_stop", "index": index }));
        }
        push(json!({
            "type": "message_delta",
            "delta": { "stop_reason": self.stop_reason(), "stop_sequence": null },
            "usage": self.usage_json(self.usage.output),
        }));
        push(json!({ "type": "message_stop" }));
        frames
    }
}
