//! OpenAI Responses replies: the `response` object and its event stream (`response.created`,
//! `response.in_progress`, per output item `response.output_item.added` ... `done` with the
//! reasoning-summary, output-text or function-call-arguments events in between, then
//! `response.completed`), every event numbered by `sequence_number`.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::behaviour::{self, Ids, Reply, Usage};
use crate::request::Prompt;
use crate::wire::{self, Outgoing};

/// Everything a Responses reply is built from.
#[derive(Debug)]
pub(crate) struct ResponsesReply<'a> {
    /// The request body, for the fields a response echoes (instructions, tools, ...).
    pub(crate) body: &'a Value,
    /// The request's facts.
    pub(crate) prompt: &'a Prompt,
    /// What to answer.
    pub(crate) reply: &'a Reply,
    /// Its token counts.
    pub(crate) usage: Usage,
    /// Its ids.
    pub(crate) ids: Ids,
    /// Unix seconds, for `created_at`.
    pub(crate) created: u64,
}

/// One output item, with what its stream events need.
enum Item {
    Reasoning {
        id: String,
        summary: String,
    },
    Message {
        id: String,
        text: String,
    },
    Call {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
    },
}

impl Item {
    /// The item as it appears in `output` once complete.
    fn done(&self) -> Value {
        match self {
            Self::Reasoning { id, summary } => json!({
                "id": id,
                "type": "reasoning",
                "summary": [{ "type": "summary_text", "text": summary }],
                "encrypted_content": behaviour::signature(summary),
            }),
            Self::Message { id, text } => json!({
                "id": id,
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [output_text(text)],
            }),
            Self::Call {
                id,
                call_id,
                name,
                arguments,
            } => json!({
                "id": id,
                "type": "function_call",
                "status": "completed",
                "call_id": call_id,
                "name": name,
                "arguments": arguments,
            }),
        }
    }

    /// The item as announced by `response.output_item.added`, before any content.
    fn added(&self) -> Value {
        match self {
            Self::Reasoning { id, summary } => json!({
                "id": id,
                "type": "reasoning",
                "summary": [],
                "encrypted_content": behaviour::signature(summary),
            }),
            Self::Message { id, .. } => json!({
                "id": id,
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }),
            Self::Call {
                id, call_id, name, ..
            } => json!({
                "id": id,
                "type": "function_call",
                "status": "in_progress",
                "call_id": call_id,
                "name": name,
                "arguments": "",
            }),
        }
    }
}

/// An `output_text` content part.
fn output_text(text: &str) -> Value {
    json!({ "type": "output_text", "text": text, "annotations": [], "logprobs": [] })
}

/// Collects SSE events, numbering them.
struct Events {
    frames: Vec<Bytes>,
}

impl Events {
    fn push(&mut self, kind: &str, mut event: Value) {
        event["type"] = json!(kind);
        event["sequence_number"] = json!(self.frames.len());
        self.frames.push(wire::event_frame(kind, &event));
    }
}

impl ResponsesReply<'_> {
    /// The reply as JSON or as an SSE stream, as the request asked.
    pub(crate) fn render(&self) -> Outgoing {
        if self.prompt.stream {
            Outgoing::sse(self.events())
        } else {
            Outgoing::json(
                axum::http::StatusCode::OK,
                &self.response("completed", true),
            )
        }
    }

    fn items(&self) -> Vec<Item> {
        let mut items = Vec::new();
        if let Some(summary) = &self.reply.thinking {
            items.push(Item::Reasoning {
                id: self.ids.id("rs_", 0),
                summary: summary.clone(),
            });
        }
        if let Some(text) = &self.reply.text {
            items.push(Item::Message {
                id: self.ids.id("msg_", 0),
                text: text.clone(),
            });
        }
        for (i, call) in self.reply.calls.iter().enumerate() {
            items.push(Item::Call {
                id: self.ids.id("fc_", i),
                call_id: self.ids.call_id("call_", i),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }
        items
    }

    /// The `response` object; `finished` decides whether it carries its output and usage.
    fn response(&self, status: &str, finished: bool) -> Value {
        let echo = |field: &str, default: Value| match self.body.get(field) {
            Some(value) if !value.is_null() => value.clone(),
            _ => default,
        };
        let (output, usage) = if finished {
            let u = self.usage;
            let usage = json!({
                "input_tokens": u.input,
                "input_tokens_details": { "cached_tokens": u.cache_read },
                "output_tokens": u.output,
                "output_tokens_details": { "reasoning_tokens": u.reasoning },
                "total_tokens": u.input + u.output,
            });
            let output: Vec<Value> = self.items().iter().map(Item::done).collect();
            (Value::Array(output), usage)
        } else {
            (json!([]), Value::Null)
        };
        json!({
            "id": self.ids.id("resp_", 0),
            "object": "response",
            "created_at": self.created,
            "status": status,
            "background": false,
            "error": null,
            "incomplete_details": null,
            "instructions": echo("instructions", Value::Null),
            "max_output_tokens": echo("max_output_tokens", Value::Null),
            "model": self.prompt.model,
            "output": output,
            "parallel_tool_calls": echo("parallel_tool_calls", json!(true)),
            "previous_response_id": echo("previous_response_id", Value::Null),
            "reasoning": echo("reasoning", json!({ "effort": null, "summary": null })),
            "service_tier": "default",
            "store": echo("store", json!(true)),
            "temperature": echo("temperature", json!(1.0)),
            "text": echo("text", json!({ "format": { "type": "text" } })),
            "tool_choice": echo("tool_choice", json!("auto")),
            "tools": echo("tools", json!([])),
            "top_p": echo("top_p", json!(1.0)),
            "truncation": echo("truncation", json!("disabled")),
            "usage": usage,
            "user": null,
            "metadata": echo("metadata", json!({})),
        })
    }

    /// The SSE frames of the streamed reply.
    fn events(&self) -> Vec<Bytes> {
        let mut events = Events { frames: Vec::new() };
        events.push(
            "response.created",
            json!({ "response": self.response("in_progress", false) }),
        );
        events.push(
            "response.in_progress",
            json!({ "response": self.response("in_progress", false) }),
        );
        for (index, item) in self.items().iter().enumerate() {
            events.push(
                "response.output_item.added",
                json!({ "output_index": index, "item": item.added() }),
            );
            match item {
                Item::Reasoning { id, summary } => {
                    let at = json!({ "item_id": id, "output_index": index, "summary_index": 0 });
                    let part = json!({ "type": "summary_text", "text": "" });
                    events.push(
                        "response.reasoning_summary_part.added",
                        with(&at, "part", part),
                    );
                    for piece in wire::word_pieces(summary, 3) {
                        events.push(
                            "response.reasoning_summary_text.delta",
                            with(&at, "delta", json!(piece)),
                        );
                    }
                    events.push(
                        "response.reasoning_summary_text.done",
                        with(&at, "text", json!(summary)),
                    );
                    let part = json!({ "type": "summary_text", "text": summary });
                    events.push(
                        "response.reasoning_summary_part.done",
                        with(&at, "part", part),
                    );
                }
                Item::Message { id, text } => {
                    let at = json!({ "item_id": id, "output_index": index, "content_index": 0 });
                    events.push(
                        "response.content_part.added",
                        with(&at, "part", output_text("")),
                    );
                    for piece in wire::word_pieces(text, 2) {
                        let delta = with(&at, "delta", json!(piece));
                        events.push(
                            "response.output_text.delta",
                            with(&delta, "logprobs", json!([])),
                        );
                    }
                    let done = with(&at, "text", json!(text));
                    events.push(
                        "response.output_text.done",
                        with(&done, "logprobs", json!([])),
                    );
                    events.push(
                        "response.content_part.done",
                        with(&at, "part", output_text(text)),
                    );
                }
                Item::Call {
                    id,
                    name,
                    arguments,
                    ..
                } => {
                    let at = json!({ "item_id": id, "output_index": index });
                    for piece in wire::byte_pieces(arguments, 8) {
                        events.push(
                            "response.function_call_arguments.delta",
                            with(&at, "delta", json!(piece)),
                        );
                    }
                    let done = with(&at, "name", json!(name));
                    events.push(
                        "response.function_call_arguments.done",
                        with(&done, "arguments", json!(arguments)),
                    );
                }
            }
            events.push(
                "response.output_item.done",
                json!({ "output_index": index, "item": item.done() }),
            );
        }
        events.push(
            "response.completed",
            json!({ "response": self.response("completed", true) }),
        );
        events.frames
    }
}

/// `base` with one more field.
fn with(base: &Value, key: &str, value: Value) -> Value {
    let mut out = base.clone();
    out[key] = value;
    out
}
