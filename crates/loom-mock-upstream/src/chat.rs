//! OpenAI Chat Completions replies: the `chat.completion` body and the `chat.completion.chunk`
//! stream (role chunk, content or tool-call deltas, a finish chunk, an optional usage chunk
//! with empty `choices`, then `data: [DONE]`).

use serde_json::{json, Value};

use crate::behaviour::{Ids, Reply, Usage};
use crate::request::Prompt;
use crate::wire::{self, Outgoing};

/// Everything a Chat reply is built from.
#[derive(Debug)]
pub(crate) struct ChatReply<'a> {
    /// The request's facts.
    pub(crate) prompt: &'a Prompt,
    /// What to answer.
    pub(crate) reply: &'a Reply,
    /// Its token counts.
    pub(crate) usage: Usage,
    /// Its ids.
    pub(crate) ids: Ids,
    /// Unix seconds, for `created`.
    pub(crate) created: u64,
}

impl ChatReply<'_> {
    /// The reply as JSON or as an SSE stream, as the request asked.
    pub(crate) fn render(&self) -> Outgoing {
        if self.prompt.stream {
            Outgoing::sse(self.chunks())
        } else {
            Outgoing::json(axum::http::StatusCode::OK, &self.body())
        }
    }

    fn completion_id(&self) -> String {
        self.ids.id("chatcmpl-", 0)
    }

    fn finish_reason(&self) -> &'static str {
        if self.reply.calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }
    }

    fn usage_json(&self) -> Value {
        let u = self.usage;
        json!({
            "prompt_tokens": u.input,
            "completion_tokens": u.output,
            "total_tokens": u.input + u.output,
            "prompt_tokens_details": { "cached_tokens": u.cache_read, "audio_tokens": 0 },
            "completion_tokens_details": {
                "reasoning_tokens": u.reasoning,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        })
    }

    /// The non-streaming `chat.completion` object.
    fn body(&self) -> Value {
        let mut message = json!({
            "role": "assistant",
            "content": self.reply.text,
            "refusal": null,
            "annotations": [],
        });
        if !self.reply.calls.is_empty() {
            let calls: Vec<Value> = self
                .reply
                .calls
                .iter()
                .enumerate()
                .map(|(i, call)| {
                    json!({
                        "id": self.ids.call_id("call_", i),
                        "type": "function",
                        "function": { "name": call.name, "arguments": call.arguments },
                    })
                })
                .collect();
            message["tool_calls"] = Value::Array(calls);
        }
        json!({
            "id": self.completion_id(),
            "object": "chat.completion",
            "created": self.created,
            "model": self.prompt.model,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": self.finish_reason(),
            }],
            "usage": self.usage_json(),
            "service_tier": "default",
            "system_fingerprint": "fp_loom_mock",
        })
    }

    /// One `chat.completion.chunk` with a single choice.
    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        let mut chunk = json!({
            "id": self.completion_id(),
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.prompt.model,
            "service_tier": "default",
            "system_fingerprint": "fp_loom_mock",
            "choices": [{
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish_reason,
            }],
        });
        if self.prompt.include_usage {
            // With `include_usage`, every chunk but the last carries an explicit null usage.
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    /// The SSE frames of the streamed reply.
    fn chunks(&self) -> Vec<bytes::Bytes> {
        let mut chunks = Vec::new();
        // Text first, then the calls (a reply may hold both); the first chunk names the role.
        if let Some(text) = &self.reply.text {
            chunks.push(self.chunk(
                json!({"role": "assistant", "content": "", "refusal": null}),
                None,
            ));
            for piece in wire::word_pieces(text, 2) {
                chunks.push(self.chunk(json!({ "content": piece }), None));
            }
        }
        for (i, call) in self.reply.calls.iter().enumerate() {
            let mut start = json!({
                "tool_calls": [{
                    "index": i,
                    "id": self.ids.call_id("call_", i),
                    "type": "function",
                    "function": { "name": call.name, "arguments": "" },
                }],
            });
            if i == 0 && self.reply.text.is_none() {
                start["role"] = json!("assistant");
                start["content"] = Value::Null;
                start["refusal"] = Value::Null;
            }
            chunks.push(self.chunk(start, None));
            for piece in wire::byte_pieces(&call.arguments, 8) {
                let delta = json!({
                    "tool_calls": [{ "index": i, "function": { "arguments": piece } }],
                });
                chunks.push(self.chunk(delta, None));
            }
        }
        chunks.push(self.chunk(json!({}), Some(self.finish_reason())));
        if self.prompt.include_usage {
            chunks.push(json!({
                "id": self.completion_id(),
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.prompt.model,
                "service_tier": "default",
                "system_fingerprint": "fp_loom_mock",
                "choices": [],
                "usage": self.usage_json(),
            }));
        }
        let mut frames: Vec<bytes::Bytes> = chunks.iter().map(wire::data_frame).collect();
        frames.push(wire::done_frame());
        frames
    }
}
