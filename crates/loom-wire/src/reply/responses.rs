//! OpenAI Responses replies: a `response` body, or the semantic events ending with
//! `response.completed`, `response.incomplete` or `response.failed`.
//!
//! The terminal event carries the whole response, and its `output` is what is read. The items
//! built from `response.output_item.*` and the delta events are only the fallback for servers
//! that send a terminal event with an empty `output`.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Map, Value};

use super::{upstream, AssistantReply, Fault, Out, ProviderUsage, Text};
use crate::json::{index, join, missing, object, opt_array, opt_object, opt_str, opt_u64};

/// A whole `response` body.
pub(super) fn parse(body: &Value) -> Out<AssistantReply> {
    let obj = object(body, "")?;
    // An error body has an `error` and no `output`; a failed response has both.
    if obj.get("output").is_none() {
        if let Some(error) = obj.get("error").filter(|e| !e.is_null()) {
            return Err(upstream(error));
        }
    }
    let mut reply = meta(obj, "")?;
    let output = opt_array(obj, "", "output")?.ok_or_else(|| missing("", "output", "an array"))?;
    items(output, "output", &mut reply)?;
    Ok(reply)
}

/// Everything but the output items: id, model, status, usage.
fn meta(obj: &Map<String, Value>, path: &str) -> Out<AssistantReply> {
    let mut reply = AssistantReply {
        id: opt_str(obj, path, "id")?.map(str::to_owned),
        model: opt_str(obj, path, "model")?.map(str::to_owned),
        ..AssistantReply::default()
    };
    let status = opt_str(obj, path, "status")?;
    let incomplete = match opt_object(obj, path, "incomplete_details")? {
        Some(details) => opt_str(details, &join(path, "incomplete_details"), "reason")?,
        None => None,
    };
    reply.finish_reason = match (status, incomplete) {
        (Some("incomplete"), Some(reason)) => Some(reason.to_owned()),
        (status, _) => status.map(str::to_owned),
    };
    if let Some(usage) = opt_object(obj, path, "usage")? {
        let path = join(path, "usage");
        if let Some(input) = opt_u64(usage, &path, "input_tokens")? {
            let cached = match opt_object(usage, &path, "input_tokens_details")? {
                Some(d) => opt_u64(d, &join(&path, "input_tokens_details"), "cached_tokens")?,
                None => None,
            };
            reply.usage = Some(ProviderUsage {
                input_tokens: input,
                cached_input_tokens: cached,
                output_tokens: opt_u64(usage, &path, "output_tokens")?,
            });
        }
    }
    Ok(reply)
}

/// Reads the output items into the reply. Messages give text (refusals included), function
/// calls give tool calls (`call_id` is the id their outputs answer), reasoning items give their
/// summary (or, from open models, their reasoning text) and are kept whole in `native`, as is a
/// `compaction` item; other items (built-in tool calls) are not turns of the log.
fn items(output: &[Value], path: &str, reply: &mut AssistantReply) -> Out<()> {
    let modelled = |item: &Value| {
        matches!(
            item.get("type").and_then(Value::as_str),
            Some("message" | "function_call" | "custom_tool_call" | "reasoning" | "compaction")
        )
    };
    // Items a client sends back as more than one turn (built-in tool calls, or a second message,
    // as a reply spliced around a hidden call or a model's commentary gives) are kept whole, to
    // be logged as the client's next request will read them.
    let messages = output
        .iter()
        .filter(|i| i.get("type").and_then(Value::as_str) == Some("message"))
        .count();
    if !output.iter().all(modelled) || messages > 1 {
        reply.items = output.to_vec();
    }
    let mut text = Text::default();
    for (i, item) in output.iter().enumerate() {
        let path = index(path, i);
        let obj = object(item, &path)?;
        match opt_str(obj, &path, "type")? {
            Some("message") => {
                let parts = opt_array(obj, &path, "content")?.map_or(&[][..], Vec::as_slice);
                let parts_path = join(&path, "content");
                for (j, part) in parts.iter().enumerate() {
                    let path = index(&parts_path, j);
                    let part = object(part, &path)?;
                    match opt_str(part, &path, "type")? {
                        Some("output_text") => text.content(required(part, &path, "text")?),
                        Some("refusal") => text.content(required(part, &path, "refusal")?),
                        _ => {}
                    }
                }
            }
            Some("function_call") => reply.tool_calls.push(loom_core::ToolCall {
                id: required(obj, &path, "call_id")?.to_owned(),
                name: required(obj, &path, "name")?.to_owned(),
                arguments: opt_str(obj, &path, "arguments")?
                    .unwrap_or_default()
                    .to_owned(),
            }),
            // A custom (freeform) tool's call carries its input as text (Codex's `exec`).
            Some("custom_tool_call") => reply.tool_calls.push(loom_core::ToolCall {
                id: required(obj, &path, "call_id")?.to_owned(),
                name: required(obj, &path, "name")?.to_owned(),
                arguments: opt_str(obj, &path, "input")?.unwrap_or_default().to_owned(),
            }),
            Some("reasoning") => {
                for key in ["summary", "content"] {
                    let parts = opt_array(obj, &path, key)?.map_or(&[][..], Vec::as_slice);
                    let parts_path = join(&path, key);
                    let mut any = false;
                    for (j, part) in parts.iter().enumerate() {
                        let path = index(&parts_path, j);
                        if let Some(t) = opt_str(object(part, &path)?, &path, "text")? {
                            text.reasoning(t);
                            any |= !t.is_empty();
                        }
                    }
                    // A summary, when there is one, says it all; the raw text is the fallback.
                    if any {
                        break;
                    }
                }
                reply.native.push(item.clone());
            }
            // The provider's summary of the conversation (a remote compaction's reply).
            Some("compaction") => reply.native.push(item.clone()),
            _ => {}
        }
    }
    text.into_reply(reply);
    Ok(())
}

fn required<'a>(obj: &'a Map<String, Value>, path: &str, key: &str) -> Out<&'a str> {
    opt_str(obj, path, key)?.ok_or_else(|| missing(path, key, "a string").into())
}

/// The events of one streamed reply.
#[derive(Debug, Default)]
pub(super) struct Stream {
    /// Output items by `output_index`, as far as the events have built them.
    items: BTreeMap<u64, Item>,
    /// `output_index` by item id, for events that name only the item.
    by_id: HashMap<String, u64>,
    /// The terminal event's response.
    terminal: Option<Map<String, Value>>,
}

/// One output item under construction.
#[derive(Debug, Default)]
struct Item {
    /// The item from `output_item.added`, replaced by the one from `output_item.done`.
    item: Value,
    done: bool,
    /// Text (message `output_text`, reasoning `reasoning_text`) by `content_index`.
    text: BTreeMap<u64, String>,
    /// Message refusals by `content_index`.
    refusal: BTreeMap<u64, String>,
    /// Reasoning summary text by `summary_index`.
    summary: BTreeMap<u64, String>,
    arguments: String,
}

impl Stream {
    pub(super) fn is_complete(&self) -> bool {
        self.terminal.is_some()
    }

    /// `name` is the SSE `event:` field, used when the payload has no `type` (the two agree).
    pub(super) fn push(&mut self, data: &Value, name: Option<&str>) -> Out<()> {
        if self.terminal.is_some() {
            return Ok(());
        }
        let obj = object(data, "")?;
        let Some(kind) = opt_str(obj, "", "type")?.or(name) else {
            return Ok(());
        };
        match kind {
            // The event's own `type` is `error`; its `code` says which.
            "error" => {
                return Err(match obj.get("error").filter(|e| e.is_object()) {
                    Some(error) => upstream(error),
                    None => Fault::Upstream {
                        kind: opt_str(obj, "", "code")?.unwrap_or("error").to_owned(),
                        message: opt_str(obj, "", "message")?.unwrap_or_default().to_owned(),
                    },
                })
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                let response = opt_object(obj, "", "response")?
                    .ok_or_else(|| missing("", "response", "an object"))?;
                self.terminal = Some(response.clone());
            }
            "response.output_item.added" | "response.output_item.done" => {
                let at = opt_u64(obj, "", "output_index")?
                    .ok_or_else(|| missing("", "output_index", "an integer"))?;
                let item = obj
                    .get("item")
                    .ok_or_else(|| missing("", "item", "an object"))?;
                let id = opt_str(object(item, "item")?, "item", "id")?;
                if let Some(id) = id {
                    self.by_id.insert(id.to_owned(), at);
                }
                let entry = self.items.entry(at).or_default();
                entry.item = item.clone();
                entry.done = kind.ends_with(".done");
            }
            "response.output_text.delta" | "response.reasoning_text.delta" => {
                let (entry, part) = self.part(obj, "content_index")?;
                entry.text.entry(part).or_default().push_str(delta(obj)?);
            }
            "response.output_text.done" | "response.reasoning_text.done" => {
                let (entry, part) = self.part(obj, "content_index")?;
                entry
                    .text
                    .insert(part, required(obj, "", "text")?.to_owned());
            }
            "response.refusal.delta" => {
                let (entry, part) = self.part(obj, "content_index")?;
                entry.refusal.entry(part).or_default().push_str(delta(obj)?);
            }
            "response.refusal.done" => {
                let (entry, part) = self.part(obj, "content_index")?;
                entry
                    .refusal
                    .insert(part, required(obj, "", "refusal")?.to_owned());
            }
            "response.reasoning_summary_text.delta" => {
                let (entry, part) = self.part(obj, "summary_index")?;
                entry.summary.entry(part).or_default().push_str(delta(obj)?);
            }
            "response.reasoning_summary_text.done" => {
                let (entry, part) = self.part(obj, "summary_index")?;
                entry
                    .summary
                    .insert(part, required(obj, "", "text")?.to_owned());
            }
            "response.function_call_arguments.delta" => {
                let at = self.output_index(obj)?;
                let d = delta(obj)?;
                self.items.entry(at).or_default().arguments.push_str(d);
            }
            "response.function_call_arguments.done" => {
                let at = self.output_index(obj)?;
                let args = required(obj, "", "arguments")?.to_owned();
                self.items.entry(at).or_default().arguments = args;
            }
            "response.custom_tool_call_input.delta" => {
                let at = self.output_index(obj)?;
                let d = delta(obj)?;
                self.items.entry(at).or_default().arguments.push_str(d);
            }
            "response.custom_tool_call_input.done" => {
                let at = self.output_index(obj)?;
                let input = required(obj, "", "input")?.to_owned();
                self.items.entry(at).or_default().arguments = input;
            }
            _ => {}
        }
        Ok(())
    }

    /// The item an event is about: by `output_index`, else by `item_id`.
    fn output_index(&self, obj: &Map<String, Value>) -> Out<u64> {
        if let Some(at) = opt_u64(obj, "", "output_index")? {
            return Ok(at);
        }
        opt_str(obj, "", "item_id")?
            .and_then(|id| self.by_id.get(id).copied())
            .ok_or_else(|| missing("", "output_index", "an integer (or a known `item_id`)").into())
    }

    /// The item and part index (`content_index` or `summary_index`, 0 when absent) of an event.
    fn part(&mut self, obj: &Map<String, Value>, key: &str) -> Out<(&mut Item, u64)> {
        let at = self.output_index(obj)?;
        let part = opt_u64(obj, "", key)?.unwrap_or(0);
        Ok((self.items.entry(at).or_default(), part))
    }

    pub(super) fn finish(self) -> Out<AssistantReply> {
        let Some(response) = self.terminal else {
            return Err(missing("", "response", "a terminal event").into());
        };
        let mut reply = meta(&response, "response")?;
        match opt_array(&response, "response", "output")? {
            Some(output) if !output.is_empty() => items(output, "response.output", &mut reply)?,
            _ => {
                let built: Vec<Value> = self.items.into_values().map(Item::into_value).collect();
                items(&built, "output items", &mut reply)?;
            }
        }
        Ok(reply)
    }
}

fn delta(obj: &Map<String, Value>) -> Out<&str> {
    required(obj, "", "delta")
}

impl Item {
    /// The item as the stream built it: the `done` item as sent, or the `added` item with the
    /// deltas filled in.
    fn into_value(self) -> Value {
        if self.done {
            return self.item;
        }
        let mut item = match self.item {
            Value::Object(o) => o,
            _ => Map::new(),
        };
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                let mut parts: BTreeMap<u64, Value> = BTreeMap::new();
                for (i, t) in self.text {
                    parts.insert(i, json!({"type": "output_text", "text": t}));
                }
                for (i, r) in self.refusal {
                    parts.insert(i, json!({"type": "refusal", "refusal": r}));
                }
                item.insert("content".into(), parts.into_values().collect());
            }
            Some("function_call") => {
                item.insert("arguments".into(), Value::String(self.arguments));
            }
            Some("custom_tool_call") => {
                item.insert("input".into(), Value::String(self.arguments));
            }
            Some("reasoning") => {
                let summary = self.summary.into_values();
                let summary = summary.map(|t| json!({"type": "summary_text", "text": t}));
                item.insert("summary".into(), summary.collect());
                let text = self.text.into_values();
                let text: Vec<Value> = text
                    .map(|t| json!({"type": "reasoning_text", "text": t}))
                    .collect();
                if !text.is_empty() {
                    item.insert("content".into(), text.into());
                }
            }
            _ => {}
        }
        Value::Object(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::FieldError;

    #[test]
    fn an_item_never_done_is_rebuilt_from_its_deltas() {
        let mut item = Item {
            item: json!({"type": "function_call", "call_id": "c1", "name": "f", "arguments": ""}),
            ..Item::default()
        };
        item.arguments.push_str("{\"a\":1}");
        assert_eq!(item.into_value()["arguments"], "{\"a\":1}");
        let e = required(&Map::new(), "x", "y").unwrap_err();
        assert!(matches!(e, Fault::Field(FieldError { field, .. }) if field == "x.y"));
    }
}
