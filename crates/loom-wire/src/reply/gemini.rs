//! Gemini replies: a `GenerateContentResponse` body, or a stream of them (each server-sent event
//! a whole `GenerateContentResponse` holding the next pieces, no `[DONE]`; without `alt=sse`, a
//! JSON array of them).
//!
//! Only candidate 0 is read. Text parts give the visible text, `thought: true` parts the
//! reasoning, `functionCall` parts the calls (`args` as JSON text). When a part carries a
//! `thoughtSignature` or is a thought, the turn's parts are kept whole in `native`, pieces of one
//! text merged as a client merges them, so the turn goes back to the API exactly as the API
//! signed it.

use serde_json::{json, Map, Value};

use super::{AssistantReply, Fault, Out, ProviderUsage, Text};
use crate::json::{index, join, missing, object, opt_array, opt_object, opt_str, opt_u64};

/// A whole body: one response, or the array a stream without `alt=sse` sends.
pub(super) fn parse(body: &Value) -> Out<AssistantReply> {
    let mut stream = Stream::default();
    match body {
        Value::Array(frames) => {
            for frame in frames {
                stream.push(frame)?;
            }
        }
        one => stream.push(one)?,
    }
    stream.finish()
}

/// The responses of one reply so far.
#[derive(Debug, Default)]
pub(super) struct Stream {
    reply: AssistantReply,
    /// The model content's parts, pieces of one text merged.
    parts: Vec<Map<String, Value>>,
    finished: bool,
}

impl Stream {
    pub(super) fn is_complete(&self) -> bool {
        self.finished
    }

    pub(super) fn push(&mut self, frame: &Value) -> Out<()> {
        let obj = object(frame, "")?;
        if let Some(error) = obj.get("error").filter(|e| !e.is_null()) {
            return Err(upstream(error));
        }
        if let Some(id) = opt_str(obj, "", "responseId")? {
            self.reply.id = Some(id.to_owned());
        }
        if let Some(model) = opt_str(obj, "", "modelVersion")? {
            self.reply.model = Some(model.to_owned());
        }
        if let Some(usage) = opt_object(obj, "", "usageMetadata")? {
            let path = "usageMetadata";
            if let Some(input) = opt_u64(usage, path, "promptTokenCount")? {
                let output = opt_u64(usage, path, "candidatesTokenCount")?;
                let thoughts = opt_u64(usage, path, "thoughtsTokenCount")?;
                self.reply.usage = Some(ProviderUsage {
                    input_tokens: input,
                    cached_input_tokens: opt_u64(usage, path, "cachedContentTokenCount")?,
                    output_tokens: match (output, thoughts) {
                        (None, None) => None,
                        (o, t) => Some(o.unwrap_or(0) + t.unwrap_or(0)),
                    },
                });
            }
        }
        // A prompt refused outright has no candidates, only its feedback.
        if let Some(feedback) = opt_object(obj, "", "promptFeedback")? {
            if let Some(reason) = opt_str(feedback, "promptFeedback", "blockReason")? {
                self.reply.finish_reason = Some(reason.to_owned());
                self.finished = true;
            }
        }
        let Some(candidates) = opt_array(obj, "", "candidates")? else {
            return Ok(());
        };
        for (i, candidate) in candidates.iter().enumerate() {
            let path = index("candidates", i);
            let c = object(candidate, &path)?;
            if opt_u64(c, &path, "index")?.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(content) = opt_object(c, &path, "content")? {
                let path = join(&path, "content");
                let parts = opt_array(content, &path, "parts")?.map_or(&[][..], Vec::as_slice);
                for (j, part) in parts.iter().enumerate() {
                    let path = index(&join(&path, "parts"), j);
                    self.part(object(part, &path)?, &path)?;
                }
            }
            if let Some(reason) = opt_str(c, &path, "finishReason")? {
                self.reply.finish_reason = Some(reason.to_owned());
                self.finished = true;
            }
        }
        Ok(())
    }

    /// Takes one part: a piece of text continues the text part before it (of the same kind, not
    /// yet signed); anything else is a part of its own.
    fn part(&mut self, part: &Map<String, Value>, path: &str) -> Out<()> {
        if let Some(call) = part.get("functionCall") {
            let call_path = join(path, "functionCall");
            let call = object(call, &call_path)?;
            if opt_str(call, &call_path, "name")?.is_none() {
                return Err(missing(&call_path, "name", "a string").into());
            }
            self.parts.push(part.clone());
            return Ok(());
        }
        let text = part.get("text").and_then(Value::as_str);
        let thought = part.get("thought") == Some(&json!(true));
        if let (Some(text), Some(last)) = (text, self.parts.last_mut()) {
            let same_kind = last.get("text").is_some_and(Value::is_string)
                && (last.get("thought") == Some(&json!(true))) == thought
                && !last.contains_key("thoughtSignature");
            if same_kind {
                let joined = format!("{}{text}", last["text"].as_str().unwrap_or(""));
                last.insert("text".into(), Value::String(joined));
                if let Some(signature) = part.get("thoughtSignature") {
                    last.insert("thoughtSignature".into(), signature.clone());
                }
                return Ok(());
            }
        }
        // An empty text part that only carries a signature, or any other part.
        if text != Some("") || part.contains_key("thoughtSignature") {
            self.parts.push(part.clone());
        }
        Ok(())
    }

    pub(super) fn finish(mut self) -> Out<AssistantReply> {
        let mut text = Text::default();
        let mut calls = 0;
        for part in &self.parts {
            if let Some(call) = part.get("functionCall") {
                let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
                let id = match call.get("id").and_then(Value::as_str) {
                    Some(id) if !id.is_empty() => id.to_owned(),
                    // Models that give no id are answered by name; the log needs one.
                    _ => format!("{name}_{calls}"),
                };
                let arguments = call
                    .get("args")
                    .map_or_else(|| "{}".to_owned(), Value::to_string);
                self.reply.tool_calls.push(loom_core::ToolCall {
                    id,
                    name: name.to_owned(),
                    arguments,
                });
                calls += 1;
            } else if let Some(t) = part.get("text").and_then(Value::as_str) {
                if part.get("thought") == Some(&json!(true)) {
                    text.reasoning(t);
                } else {
                    text.content(t);
                }
            }
        }
        let signed = self
            .parts
            .iter()
            .any(|p| p.contains_key("thoughtSignature") || p.get("thought") == Some(&json!(true)));
        if signed {
            self.reply.native = self.parts.into_iter().map(Value::Object).collect();
        }
        text.into_reply(&mut self.reply);
        Ok(self.reply)
    }
}

/// Google's error object (`{"code", "message", "status"}`) as a [`Fault`].
fn upstream(error: &Value) -> Fault {
    Fault::Upstream {
        kind: error
            .get("status")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| error.get("code").map(Value::to_string))
            .unwrap_or_else(|| "error".to_owned()),
        message: error
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(parts: Value, finish: Option<&str>) -> Value {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let Some(f) = finish {
            candidate["finishReason"] = json!(f);
        }
        json!({"candidates": [candidate], "usageMetadata": {"promptTokenCount": 120,
            "cachedContentTokenCount": 100, "candidatesTokenCount": 7, "thoughtsTokenCount": 5},
            "modelVersion": "gemini-3.5-pro", "responseId": "r1"})
    }

    #[test]
    fn a_stream_and_the_same_reply_whole_give_one_turn() {
        let frames = [
            frame(json!([{"text": "Let me ", "thought": true}]), None),
            frame(json!([{"text": "look.", "thought": true}]), None),
            frame(json!([{"text": "I will "}]), None),
            frame(json!([{"text": "read it."}]), None),
            frame(
                json!([{"functionCall": {"id": "c1", "name": "read_file", "args": {"path": "a.py"}},
                    "thoughtSignature": "c2ln"}]),
                Some("STOP"),
            ),
        ];
        let mut s = Stream::default();
        for f in &frames {
            assert!(!s.is_complete());
            s.push(f).unwrap();
        }
        assert!(s.is_complete());
        let streamed = s.finish().unwrap();
        let whole = parse(&Value::Array(frames.to_vec())).unwrap();
        assert_eq!(streamed, whole);
        assert_eq!(streamed.content.as_deref(), Some("I will read it."));
        assert_eq!(streamed.reasoning.as_deref(), Some("Let me look."));
        assert_eq!(streamed.tool_calls[0].id, "c1");
        assert_eq!(streamed.tool_calls[0].arguments, r#"{"path":"a.py"}"#);
        assert_eq!(
            streamed.native,
            vec![
                json!({"text": "Let me look.", "thought": true}),
                json!({"text": "I will read it."}),
                json!({"functionCall": {"id": "c1", "name": "read_file", "args": {"path": "a.py"}},
                    "thoughtSignature": "c2ln"}),
            ]
        );
        let usage = streamed.usage.unwrap();
        assert_eq!(
            (
                usage.input_tokens,
                usage.cached_input_tokens,
                usage.output_tokens
            ),
            (120, Some(100), Some(12))
        );
        assert_eq!(streamed.finish_reason.as_deref(), Some("STOP"));
    }

    #[test]
    fn an_error_body_is_the_providers_error() {
        let body = json!({"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}});
        match parse(&body) {
            Err(Fault::Upstream { kind, message }) => {
                assert_eq!(
                    (kind.as_str(), message.as_str()),
                    ("INVALID_ARGUMENT", "bad")
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
