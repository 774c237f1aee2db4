//! Gemini replies: a `GenerateContentResponse` body, or a stream of them (with `alt=sse`, each
//! server-sent event a whole response holding the next pieces, no `[DONE]`; without it, one JSON
//! array of the responses). The reply's thought (when `includeThoughts`), its text in pieces, and
//! each call as a part of its own; the first call carries a `thoughtSignature` (the mock's
//! signature of the call's id), which the mock's rules want back byte for byte. The last response
//! carries `finishReason` and `usageMetadata`.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::behaviour::{self, Ids, Reply, Usage};
use crate::request::Prompt;
use crate::wire::{self, Outgoing};

/// Everything a Gemini reply is built from.
#[derive(Debug)]
pub(crate) struct GeminiReply<'a> {
    /// The request's facts.
    pub(crate) prompt: &'a Prompt,
    /// What to answer.
    pub(crate) reply: &'a Reply,
    /// Its token counts.
    pub(crate) usage: Usage,
    /// Its ids.
    pub(crate) ids: Ids,
    /// A stream as server-sent events (`alt=sse`) rather than one JSON array.
    pub(crate) sse: bool,
}

/// The signature the mock gives the call `id` (and checks when the call comes back).
pub(crate) fn call_signature(id: &str) -> String {
    behaviour::signature(&format!("gemini call {id}"))
}

impl GeminiReply<'_> {
    /// The reply as the request asked for it.
    pub(crate) fn render(&self) -> Outgoing {
        if !self.prompt.stream {
            return Outgoing::json(
                axum::http::StatusCode::OK,
                &self.response(self.parts(), true),
            );
        }
        let frames = self.frames();
        if self.sse {
            Outgoing::sse(frames.iter().map(wire::data_frame).collect::<Vec<Bytes>>())
        } else {
            Outgoing::json(axum::http::StatusCode::OK, &Value::Array(frames))
        }
    }

    /// The parts of the whole reply, in order.
    fn parts(&self) -> Vec<Value> {
        let mut parts = Vec::new();
        if let Some(thought) = &self.reply.thinking {
            parts.push(json!({"text": thought, "thought": true}));
        }
        if let Some(text) = &self.reply.text {
            let mut part = json!({"text": text});
            if self.reply.thinking.is_some() && self.reply.calls.is_empty() {
                part["thoughtSignature"] = json!(behaviour::signature(text));
            }
            parts.push(part);
        }
        parts.extend(self.calls());
        parts
    }

    fn calls(&self) -> Vec<Value> {
        self.reply
            .calls
            .iter()
            .enumerate()
            .map(|(i, call)| {
                let id = self.ids.call_id("call_", i);
                let args = serde_json::from_str::<Value>(&call.arguments)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({}));
                let mut part = json!({"functionCall": {"id": id, "name": call.name, "args": args}});
                // Gemini signs the first call of a turn (parallel calls share it).
                if i == 0 {
                    part["thoughtSignature"] = json!(call_signature(&id));
                }
                part
            })
            .collect()
    }

    /// One response; `last` adds the finish reason and the usage.
    fn response(&self, parts: Vec<Value>, last: bool) -> Value {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        let mut out = json!({
            "candidates": [],
            "modelVersion": self.prompt.model,
            "responseId": self.ids.id("resp_", 0),
        });
        if last {
            candidate["finishReason"] = json!("STOP");
            let u = self.usage;
            let mut usage = json!({
                "promptTokenCount": u.input,
                "candidatesTokenCount": u.output - u.reasoning,
                "totalTokenCount": u.input + u.output,
            });
            // proto3 leaves zero counts out.
            if u.cache_read > 0 {
                usage["cachedContentTokenCount"] = json!(u.cache_read);
            }
            if u.reasoning > 0 {
                usage["thoughtsTokenCount"] = json!(u.reasoning);
            }
            out["usageMetadata"] = usage;
        }
        out["candidates"] = json!([candidate]);
        out
    }

    /// The streamed responses: the thought and the text in pieces, each call whole, the last
    /// one finishing.
    fn frames(&self) -> Vec<Value> {
        let mut pieces: Vec<Value> = Vec::new();
        if let Some(thought) = &self.reply.thinking {
            pieces.extend(
                wire::word_pieces(thought, 3)
                    .into_iter()
                    .map(|p| json!({"text": p, "thought": true})),
            );
        }
        if let Some(text) = &self.reply.text {
            let mut text_pieces: Vec<Value> = wire::word_pieces(text, 2)
                .into_iter()
                .map(|p| json!({"text": p}))
                .collect();
            if self.reply.thinking.is_some() && self.reply.calls.is_empty() {
                if let Some(last) = text_pieces.last_mut() {
                    last["thoughtSignature"] = json!(behaviour::signature(text));
                }
            }
            pieces.extend(text_pieces);
        }
        pieces.extend(self.calls());
        if pieces.is_empty() {
            pieces.push(json!({"text": ""}));
        }
        let n = pieces.len();
        pieces
            .into_iter()
            .enumerate()
            .map(|(i, p)| self.response(vec![p], i + 1 == n))
            .collect()
    }
}
