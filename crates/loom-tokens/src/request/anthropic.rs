//! Anthropic Messages bodies — a documented approximation.
//!
//! Anthropic publishes no message-counting rule (only a `count_tokens` endpoint), so this reuses
//! OpenAI's structure: 3 tokens per message for its role wrapper, texts counted as text,
//! `tool_use` as name plus compact JSON input plus 3, `tool_result` as its content plus 3,
//! thinking as its text, tool definitions as name, description and compact JSON schema plus 3.
//! Two numbers are Anthropic's own: when tools are given, the tool-use system prompt it adds
//! (346 tokens with `tool_choice` auto or none, 313 with any or a named tool, per its pricing
//! page for Claude 3.5 Sonnet and later), and images at `width × height / 750` tokens.

use base64::Engine as _;
use serde_json::Value;

use super::Ctx;
use crate::error::Result;
use crate::image::{image_size, UNKNOWN_SIZE};

const TOKENS_PER_MESSAGE: u64 = 3;
const TOKENS_PER_BLOCK_WRAPPER: u64 = 3;
const TOOL_PROMPT_AUTO: u64 = 346;
const TOOL_PROMPT_FORCED: u64 = 313;

pub(super) fn count(ctx: &mut Ctx<'_>, body: &Value) -> Result<()> {
    match body.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => ctx.count.messages += ctx.text(s),
        Some(Value::Array(blocks)) => {
            for (i, b) in blocks.iter().enumerate() {
                block(ctx, b, &format!("system[{i}]"))?;
            }
        }
        Some(_) => return Err(ctx.bad("system", "must be a string or an array of blocks")),
    }
    let messages = match body.get("messages") {
        Some(Value::Array(m)) => m,
        Some(_) => return Err(ctx.bad("messages", "must be an array")),
        None => return Err(ctx.bad("messages", "is missing")),
    };
    for (i, m) in messages.iter().enumerate() {
        let path = format!("messages[{i}]");
        if m.get("role").and_then(Value::as_str).is_none() {
            return Err(ctx.bad(format!("{path}.role"), "must be a string"));
        }
        ctx.count.overhead += TOKENS_PER_MESSAGE;
        match m.get("content") {
            Some(Value::String(s)) => ctx.count.messages += ctx.text(s),
            Some(Value::Array(blocks)) => {
                for (j, b) in blocks.iter().enumerate() {
                    block(ctx, b, &format!("{path}.content[{j}]"))?;
                }
            }
            _ => {
                return Err(ctx.bad(
                    format!("{path}.content"),
                    "must be a string or an array of blocks",
                ))
            }
        }
    }
    let tools = ctx.array(body, "tools", "")?;
    for t in tools {
        ctx.count.tools += TOKENS_PER_BLOCK_WRAPPER;
        if t.get("input_schema").is_some() {
            let name = t.get("name").and_then(Value::as_str).unwrap_or("");
            let desc = t.get("description").and_then(Value::as_str).unwrap_or("");
            let schema = t.get("input_schema").map_or(0, |s| ctx.json(s));
            ctx.count.tools += ctx.text(name) + ctx.text(desc) + schema;
        } else {
            // Server tools (web search, code execution...): their JSON as text.
            ctx.count.tools += ctx.json(t);
        }
    }
    if !tools.is_empty() {
        let forced = matches!(
            body.pointer("/tool_choice/type").and_then(Value::as_str),
            Some("any" | "tool")
        );
        ctx.count.tools += if forced {
            TOOL_PROMPT_FORCED
        } else {
            TOOL_PROMPT_AUTO
        };
    }
    Ok(())
}

fn block(ctx: &mut Ctx<'_>, b: &Value, path: &str) -> Result<()> {
    let Some(ty) = b.get("type").and_then(Value::as_str) else {
        return Err(ctx.bad(format!("{path}.type"), "must be a string"));
    };
    match ty {
        "text" => ctx.count.messages += b.get("text").map_or(0, |t| ctx.json(t)),
        "thinking" => ctx.count.messages += b.get("thinking").map_or(0, |t| ctx.json(t)),
        // Encrypted: its size in tokens is not knowable; Anthropic does not bill it as input
        // when it is passed back unchanged in the same turn. Counted as nothing.
        "redacted_thinking" => {}
        "image" => ctx.count.images += image(ctx, b),
        "tool_use" | "server_tool_use" => {
            let name = b.get("name").and_then(Value::as_str).unwrap_or("");
            let input = b.get("input").map_or(0, |i| ctx.json(i));
            ctx.count.tool_calls += TOKENS_PER_BLOCK_WRAPPER + ctx.text(name) + input;
        }
        "tool_result" => {
            ctx.count.tool_calls += TOKENS_PER_BLOCK_WRAPPER;
            match b.get("content") {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) => ctx.count.tool_calls += ctx.text(s),
                Some(Value::Array(inner)) => {
                    for (i, x) in inner.iter().enumerate() {
                        block(ctx, x, &format!("{path}.content[{i}]"))?;
                    }
                }
                Some(_) => {
                    return Err(ctx.bad(
                        format!("{path}.content"),
                        "must be a string or an array of blocks",
                    ))
                }
            }
        }
        "document" => match b.pointer("/source/type").and_then(Value::as_str) {
            Some("text") => {
                ctx.count.messages += b.pointer("/source/data").map_or(0, |d| ctx.json(d))
            }
            _ => ctx.count.messages += ctx.json(b),
        },
        _ => ctx.count.messages += ctx.json(b),
    }
    Ok(())
}

/// Tokens of an image block: its size read from base64 data, else a large image assumed.
fn image(ctx: &Ctx<'_>, b: &Value) -> u64 {
    let size = match b.pointer("/source/type").and_then(Value::as_str) {
        Some("base64") => b
            .pointer("/source/data")
            .and_then(Value::as_str)
            .and_then(|d| {
                let take = d.len().min(256 * 1024) / 4 * 4;
                base64::engine::general_purpose::STANDARD
                    .decode(d.get(..take)?)
                    .ok()
            })
            .and_then(|bytes| image_size(&bytes)),
        _ => None,
    };
    let (w, h) = size.unwrap_or(UNKNOWN_SIZE);
    ctx.images.tokens(w, h, None)
}
