//! Anthropic Messages replies: a `message` body, or the events `message_start`,
//! `content_block_start` / `_delta` / `_stop`, `message_delta` and `message_stop`.
//!
//! `thinking` and `redacted_thinking` blocks go to `native` with their strings byte for byte:
//! Anthropic checks the signature when the turn is replayed. Server-side tool blocks
//! (`server_tool_use`, `web_search_tool_result`, …) are not the client's calls and are skipped.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::{upstream, AssistantReply, Out, ProviderUsage, Text};
use crate::json::{index, missing, object, opt_array, opt_object, opt_str, opt_u64, FieldError};

/// One content block, read whole or assembled from its deltas.
#[derive(Debug)]
enum Block {
    Text(String),
    Thinking {
        thinking: String,
        signature: String,
    },
    Redacted {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        arguments: String,
    },
    Other,
}

/// The raw text of each block's `input`, which a `Value` would re-serialise with sorted keys.
#[derive(Deserialize)]
struct RawBody<'a> {
    #[serde(default, borrow)]
    content: Vec<RawBlock<'a>>,
}

#[derive(Deserialize)]
struct RawBlock<'a> {
    #[serde(default, borrow)]
    input: Option<&'a RawValue>,
}

/// A whole `message` body; `raw` is the same body's bytes, for the tool inputs' exact text.
pub(super) fn parse(body: &Value, raw: &[u8]) -> Out<AssistantReply> {
    let obj = object(body, "")?;
    if opt_str(obj, "", "type")? == Some("error") {
        return Err(upstream(obj.get("error").unwrap_or(body)));
    }
    let mut reply = meta(obj, "")?;
    reply.finish_reason = opt_str(obj, "", "stop_reason")?.map(str::to_owned);
    if let Some(usage) = opt_object(obj, "", "usage")? {
        reply.usage = Usage::read(usage, "usage")?.total();
    }
    let content =
        opt_array(obj, "", "content")?.ok_or_else(|| missing("", "content", "an array"))?;
    // The value parsed, so this parse of the same bytes does too; an error would still be named.
    let raw: RawBody<'_> = serde_json::from_slice(raw)
        .map_err(|e| FieldError::new("content", format!("unreadable: {e}")))?;
    let mut blocks = Vec::with_capacity(content.len());
    for (i, block) in content.iter().enumerate() {
        let path = index("content", i);
        let obj = object(block, &path)?;
        let input = raw.content.get(i).and_then(|b| b.input).map(RawValue::get);
        blocks.push(read_block(obj, &path, input)?);
    }
    finish(reply, blocks)
}

/// The message's id and model (in a stream, `message_start.message`).
fn meta(obj: &Map<String, Value>, path: &str) -> Out<AssistantReply> {
    Ok(AssistantReply {
        id: opt_str(obj, path, "id")?.map(str::to_owned),
        model: opt_str(obj, path, "model")?.map(str::to_owned),
        ..AssistantReply::default()
    })
}

/// A whole block (a body's, or a stream's `content_block_start`, whose text fields start empty).
fn read_block(obj: &Map<String, Value>, path: &str, input: Option<&str>) -> Out<Block> {
    let text =
        |key: &str| -> Out<String> { Ok(opt_str(obj, path, key)?.unwrap_or_default().to_owned()) };
    Ok(match opt_str(obj, path, "type")? {
        Some("text") => Block::Text(text("text")?),
        Some("thinking") => Block::Thinking {
            thinking: text("thinking")?,
            signature: text("signature")?,
        },
        Some("redacted_thinking") => Block::Redacted {
            data: text("data")?,
        },
        Some("tool_use") => Block::ToolUse {
            id: required(obj, path, "id")?,
            name: required(obj, path, "name")?,
            arguments: match input {
                Some(raw) => raw.to_owned(),
                None => obj
                    .get("input")
                    .map_or_else(|| "{}".to_owned(), Value::to_string),
            },
        },
        _ => Block::Other,
    })
}

fn required(obj: &Map<String, Value>, path: &str, key: &str) -> Out<String> {
    match opt_str(obj, path, key)? {
        Some(s) if !s.is_empty() => Ok(s.to_owned()),
        _ => Err(missing(path, key, "a non-empty string").into()),
    }
}

fn finish(mut reply: AssistantReply, blocks: Vec<Block>) -> Out<AssistantReply> {
    let mut text = Text::default();
    for block in blocks {
        match block {
            Block::Text(t) => text.content(&t),
            Block::Thinking {
                thinking,
                signature,
            } => {
                text.reasoning(&thinking);
                reply.native.push(
                    json!({"type": "thinking", "thinking": thinking, "signature": signature}),
                );
            }
            Block::Redacted { data } => {
                reply
                    .native
                    .push(json!({"type": "redacted_thinking", "data": data}));
            }
            Block::ToolUse {
                id,
                name,
                arguments,
            } => reply.tool_calls.push(loom_core::ToolCall {
                id,
                name,
                arguments,
            }),
            Block::Other => {}
        }
    }
    text.into_reply(&mut reply);
    Ok(reply)
}

/// Anthropic's usage fields, kept apart until the end: a stream reports them in two events.
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    input: Option<u64>,
    cache_read: Option<u64>,
    cache_creation: Option<u64>,
    output: Option<u64>,
}

impl Usage {
    fn read(obj: &Map<String, Value>, path: &str) -> Out<Self> {
        Ok(Self {
            input: opt_u64(obj, path, "input_tokens")?,
            cache_read: opt_u64(obj, path, "cache_read_input_tokens")?,
            cache_creation: opt_u64(obj, path, "cache_creation_input_tokens")?,
            output: opt_u64(obj, path, "output_tokens")?,
        })
    }

    /// `message_delta` counts are cumulative: each one given replaces the earlier.
    fn update(&mut self, later: Usage) {
        self.input = later.input.or(self.input);
        self.cache_read = later.cache_read.or(self.cache_read);
        self.cache_creation = later.cache_creation.or(self.cache_creation);
        self.output = later.output.or(self.output);
    }

    /// Normalised: input counts cache reads and cache writes, which Anthropic reports apart.
    fn total(self) -> Option<ProviderUsage> {
        let input = self.input?;
        Some(ProviderUsage {
            input_tokens: input
                .saturating_add(self.cache_read.unwrap_or(0))
                .saturating_add(self.cache_creation.unwrap_or(0)),
            cached_input_tokens: self.cache_read,
            output_tokens: self.output,
        })
    }
}

/// The events of one streamed reply.
#[derive(Debug, Default)]
pub(super) struct Stream {
    reply: AssistantReply,
    usage: Usage,
    /// Blocks by their `index`.
    blocks: BTreeMap<u64, Block>,
    /// Tool inputs by block index: the `input_json_delta` fragments concatenated.
    inputs: BTreeMap<u64, String>,
    stopped: bool,
}

impl Stream {
    pub(super) fn is_complete(&self) -> bool {
        self.stopped
    }

    pub(super) fn push(&mut self, data: &Value) -> Out<()> {
        if self.stopped {
            return Ok(());
        }
        let obj = object(data, "")?;
        match opt_str(obj, "", "type")? {
            Some("error") => return Err(upstream(obj.get("error").unwrap_or(data))),
            Some("message_start") => {
                let message = opt_object(obj, "", "message")?
                    .ok_or_else(|| missing("", "message", "an object"))?;
                self.reply = meta(message, "message")?;
                if let Some(usage) = opt_object(message, "message", "usage")? {
                    self.usage = Usage::read(usage, "message.usage")?;
                }
            }
            Some("content_block_start") => {
                let at = block_index(obj)?;
                let block = opt_object(obj, "", "content_block")?
                    .ok_or_else(|| missing("", "content_block", "an object"))?;
                self.blocks
                    .insert(at, read_block(block, "content_block", None)?);
            }
            Some("content_block_delta") => {
                let at = block_index(obj)?;
                let delta = opt_object(obj, "", "delta")?
                    .ok_or_else(|| missing("", "delta", "an object"))?;
                self.delta(at, delta)?;
            }
            Some("message_delta") => {
                if let Some(delta) = opt_object(obj, "", "delta")? {
                    if let Some(reason) = opt_str(delta, "delta", "stop_reason")? {
                        self.reply.finish_reason = Some(reason.to_owned());
                    }
                }
                if let Some(usage) = opt_object(obj, "", "usage")? {
                    self.usage.update(Usage::read(usage, "usage")?);
                }
            }
            Some("message_stop") => self.stopped = true,
            // `ping`, `content_block_stop` and event types added later carry nothing to keep.
            _ => {}
        }
        Ok(())
    }

    fn delta(&mut self, at: u64, delta: &Map<String, Value>) -> Out<()> {
        let Some(block) = self.blocks.get_mut(&at) else {
            return Err(FieldError::new(
                "index",
                format!("delta for block {at}, which no `content_block_start` opened"),
            )
            .into());
        };
        let piece = |key: &str| -> Out<&str> {
            opt_str(delta, "delta", key)?.ok_or_else(|| missing("delta", key, "a string").into())
        };
        match (opt_str(delta, "delta", "type")?, block) {
            (Some("text_delta"), Block::Text(text)) => text.push_str(piece("text")?),
            (Some("thinking_delta"), Block::Thinking { thinking, .. }) => {
                thinking.push_str(piece("thinking")?);
            }
            (Some("signature_delta"), Block::Thinking { signature, .. }) => {
                signature.push_str(piece("signature")?);
            }
            (Some("input_json_delta"), Block::ToolUse { .. }) => {
                let fragment = piece("partial_json")?;
                self.inputs.entry(at).or_default().push_str(fragment);
            }
            (
                Some(
                    kind @ ("text_delta" | "thinking_delta" | "signature_delta"
                    | "input_json_delta"),
                ),
                block,
            ) if !matches!(block, Block::Other) => {
                return Err(FieldError::new(
                    "delta.type",
                    format!("`{kind}` does not fit the type of block {at}"),
                )
                .into())
            }
            // Server tool blocks get `input_json_delta`s of their own; `citations_delta` and later
            // delta types add nothing to the turn.
            _ => {}
        }
        Ok(())
    }

    pub(super) fn finish(mut self) -> Out<AssistantReply> {
        let reply = std::mem::take(&mut self.reply);
        let mut blocks = std::mem::take(&mut self.blocks);
        for (at, input) in std::mem::take(&mut self.inputs) {
            // No fragments, or only empty ones, leave the start block's input (`{}`) in place.
            if let (Some(Block::ToolUse { arguments, .. }), false) =
                (blocks.get_mut(&at), input.is_empty())
            {
                *arguments = input;
            }
        }
        let mut reply = finish(reply, blocks.into_values().collect())?;
        reply.usage = self.usage.total();
        Ok(reply)
    }
}

fn block_index(obj: &Map<String, Value>) -> Out<u64> {
    opt_u64(obj, "", "index")?.ok_or_else(|| missing("", "index", "an integer").into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_counts_cache_reads_and_writes_as_input() {
        let u = Usage {
            input: Some(10),
            cache_read: Some(100),
            cache_creation: Some(5),
            output: Some(7),
        };
        let total = u.total().unwrap();
        assert_eq!(total.input_tokens, 115);
        assert_eq!(total.cached_input_tokens, Some(100));
        assert_eq!(Usage::default().total(), None);
    }
}
