//! OpenAI Chat Completions replies: a `chat.completion` body, or `chat.completion.chunk` events
//! ending with `data: [DONE]`.
//!
//! Only choice 0 is read (a request with `n > 1` gets several; the log keeps one turn). Besides
//! OpenAI's fields, the `reasoning_content` / `reasoning` text that OpenAI-compatible servers
//! (DeepSeek, OpenRouter, vLLM) add is read as reasoning; there is nothing native to replay.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::{upstream, AssistantReply, Out, ProviderUsage, Text};
use crate::json::{self, index, join, missing, object, opt_array, opt_object, opt_str, opt_u64};

/// A whole `chat.completion` body.
pub(super) fn parse(body: &Value) -> Out<AssistantReply> {
    let obj = object(body, "")?;
    if let Some(error) = obj.get("error").filter(|e| !e.is_null()) {
        return Err(upstream(error));
    }
    let mut reply = AssistantReply::default();
    meta(obj, &mut reply)?;
    let choices =
        opt_array(obj, "", "choices")?.ok_or_else(|| missing("", "choices", "an array"))?;
    let mut message = Message::default();
    if let Some((path, choice)) = first_choice(choices, "choices")? {
        if let Some(reason) = opt_str(choice, &path, "finish_reason")? {
            reply.finish_reason = Some(reason.to_owned());
        }
        if let Some(msg) = opt_object(choice, &path, "message")? {
            let path = join(&path, "message");
            message.read(msg, &path, false)?;
        }
    }
    message.finish(reply)
}

/// The streamed chunks of one reply.
#[derive(Debug, Default)]
pub(super) struct Stream {
    reply: AssistantReply,
    message: Message,
    done: bool,
}

impl Stream {
    pub(super) fn done(&mut self) {
        self.done = true;
    }

    pub(super) fn is_complete(&self) -> bool {
        self.done
    }

    pub(super) fn push(&mut self, chunk: &Value) -> Out<()> {
        if self.done {
            return Ok(());
        }
        let obj = object(chunk, "")?;
        // OpenAI and compatible servers report a failure after the 200 as an error chunk.
        if let Some(error) = obj.get("error").filter(|e| !e.is_null()) {
            return Err(upstream(error));
        }
        meta(obj, &mut self.reply)?;
        let Some(choices) = opt_array(obj, "", "choices")? else {
            return Ok(());
        };
        if let Some((path, choice)) = first_choice(choices, "choices")? {
            if let Some(reason) = opt_str(choice, &path, "finish_reason")? {
                self.reply.finish_reason = Some(reason.to_owned());
            }
            if let Some(delta) = opt_object(choice, &path, "delta")? {
                let path = join(&path, "delta");
                self.message.read(delta, &path, true)?;
            }
        }
        Ok(())
    }

    pub(super) fn finish(self) -> Out<AssistantReply> {
        self.message.finish(self.reply)
    }
}

/// Fields of the body or chunk outside the choices; a later chunk's value replaces an earlier one.
fn meta(obj: &Map<String, Value>, reply: &mut AssistantReply) -> Out<()> {
    if let Some(id) = opt_str(obj, "", "id")? {
        reply.id = Some(id.to_owned());
    }
    if let Some(model) = opt_str(obj, "", "model")? {
        reply.model = Some(model.to_owned());
    }
    if let Some(usage) = opt_object(obj, "", "usage")? {
        if let Some(input) = opt_u64(usage, "usage", "prompt_tokens")? {
            let cached = match opt_object(usage, "usage", "prompt_tokens_details")? {
                Some(details) => opt_u64(details, "usage.prompt_tokens_details", "cached_tokens")?,
                None => None,
            };
            reply.usage = Some(ProviderUsage {
                input_tokens: input,
                cached_input_tokens: cached,
                output_tokens: opt_u64(usage, "usage", "completion_tokens")?,
            });
        }
    }
    Ok(())
}

/// Choice 0 (a missing `index` counts as 0) and its path, if this body or chunk carries it.
fn first_choice<'a>(
    choices: &'a [Value],
    path: &str,
) -> Out<Option<(String, &'a Map<String, Value>)>> {
    for (i, choice) in choices.iter().enumerate() {
        let path = index(path, i);
        let obj = object(choice, &path)?;
        if opt_u64(obj, &path, "index")?.unwrap_or(0) == 0 {
            return Ok(Some((path, obj)));
        }
    }
    Ok(None)
}

/// A message, or the sum of a stream's deltas.
#[derive(Debug, Default)]
struct Message {
    content: String,
    refusal: String,
    reasoning: String,
    /// Calls by their `index` (streams interleave the fragments of parallel calls).
    calls: BTreeMap<u64, Call>,
    /// Indexes of calls that are not function calls.
    skipped: BTreeSet<u64>,
}

#[derive(Debug, Default)]
struct Call {
    id: String,
    name: String,
    arguments: String,
    /// Where the call was first seen, to name it if it never gets an id or a name.
    path: String,
}

impl Message {
    /// Adds a whole message or one delta. In a delta, `id` and `name` arrive once (some servers
    /// repeat them in every fragment, so the first one is kept) and `arguments` in fragments.
    fn read(&mut self, msg: &Map<String, Value>, path: &str, delta: bool) -> Out<()> {
        match msg.get("content") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => self.content.push_str(s),
            // Compatible servers may answer with content parts; OpenAI itself sends a string.
            Some(Value::Array(parts)) => {
                let path = join(path, "content");
                for (i, part) in parts.iter().enumerate() {
                    let path = index(&path, i);
                    let part = object(part, &path)?;
                    if let Some(text) = opt_str(part, &path, "text")? {
                        self.content.push_str(text);
                    }
                }
            }
            Some(other) => {
                return Err(json::FieldError::new(
                    join(path, "content"),
                    format!("expected a string, got {}", json::kind(other)),
                )
                .into())
            }
        }
        if let Some(refusal) = opt_str(msg, path, "refusal")? {
            self.refusal.push_str(refusal);
        }
        for key in ["reasoning_content", "reasoning"] {
            if let Some(text) = opt_str(msg, path, key)? {
                self.reasoning.push_str(text);
                break;
            }
        }
        if let Some(calls) = opt_array(msg, path, "tool_calls")? {
            let calls_path = join(path, "tool_calls");
            for (i, call) in calls.iter().enumerate() {
                let path = index(&calls_path, i);
                let obj = object(call, &path)?;
                let key = if delta {
                    opt_u64(obj, &path, "index")?.unwrap_or(i as u64)
                } else {
                    i as u64
                };
                // Only function calls are the log's tool calls (custom tools carry free text, not
                // JSON arguments); a stream names the type in a call's first fragment only.
                if opt_str(obj, &path, "type")?.is_some_and(|t| t != "function") {
                    self.skipped.insert(key);
                }
                if self.skipped.contains(&key) {
                    continue;
                }
                let entry = self.calls.entry(key).or_insert_with(|| Call {
                    path: path.clone(),
                    ..Call::default()
                });
                if let Some(id) = opt_str(obj, &path, "id")? {
                    if entry.id.is_empty() {
                        entry.id = id.to_owned();
                    }
                }
                if let Some(function) = opt_object(obj, &path, "function")? {
                    let path = join(&path, "function");
                    if let Some(name) = opt_str(function, &path, "name")? {
                        if entry.name.is_empty() {
                            entry.name = name.to_owned();
                        }
                    }
                    match opt_str(function, &path, "arguments")? {
                        Some(args) => entry.arguments.push_str(args),
                        None if !delta => {
                            return Err(missing(&path, "arguments", "a string").into())
                        }
                        None => {}
                    }
                } else if !delta {
                    return Err(missing(&path, "function", "an object").into());
                }
            }
        }
        Ok(())
    }

    fn finish(self, mut reply: AssistantReply) -> Out<AssistantReply> {
        let mut text = Text::default();
        text.content(&self.content);
        text.content(&self.refusal);
        text.reasoning(&self.reasoning);
        text.into_reply(&mut reply);
        for call in self.calls.into_values() {
            if call.id.is_empty() {
                return Err(missing(&call.path, "id", "a non-empty string").into());
            }
            if call.name.is_empty() {
                return Err(
                    missing(&join(&call.path, "function"), "name", "a non-empty string").into(),
                );
            }
            reply.tool_calls.push(loom_core::ToolCall {
                id: call.id,
                name: call.name,
                arguments: call.arguments,
            });
        }
        Ok(reply)
    }
}
