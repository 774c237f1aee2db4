//! OpenAI Chat Completions bodies.
//!
//! OpenAI's documented rule (cookbook "How to count tokens with tiktoken",
//! `num_tokens_from_messages`, for gpt-3.5-turbo-0613 and later, GPT-4 and GPT-4o): every
//! message costs 3 tokens plus the tokens of its `role` and `content` (and `name`, plus 1 more
//! when a name is present); every reply is primed with 3 more. On top of that:
//! - tool calls (not covered by the cookbook): the function name and arguments as text plus
//!   3 tokens per call for its wrapper, an approximation; call ids are not shown to the model
//!   and are not counted;
//! - tools: the cookbook's `num_tokens_for_tools` (see [`super::openai_function_tokens`]);
//! - images: the model's image rule ([`crate::ImageRule`]).

use serde_json::Value;

use super::{openai_function_tokens, Ctx};
use crate::error::Result;

pub(super) const TOKENS_PER_MESSAGE: u64 = 3;
pub(super) const TOKENS_PER_NAME: u64 = 1;
pub(super) const REPLY_PRIMING: u64 = 3;
pub(super) const TOKENS_PER_TOOL_CALL: u64 = 3;

pub(super) fn count(ctx: &mut Ctx<'_>, body: &Value) -> Result<()> {
    let messages = match body.get("messages") {
        Some(Value::Array(m)) => m,
        Some(_) => return Err(ctx.bad("messages", "must be an array")),
        None => return Err(ctx.bad("messages", "is missing")),
    };
    for (i, m) in messages.iter().enumerate() {
        message(ctx, m, &format!("messages[{i}]"))?;
    }
    ctx.count.overhead += REPLY_PRIMING;

    let tools = ctx.array(body, "tools", "")?;
    let mut functions: Vec<&Value> = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        match t.get("function") {
            Some(f) if f.is_object() => functions.push(f),
            // Non-function tools (custom tools, built-ins): their JSON as text.
            _ if t.is_object() => ctx.count.tools += ctx.json(t),
            _ => return Err(ctx.bad(format!("tools[{i}]"), "must be an object")),
        }
    }
    // The legacy `functions` field has the same shape as a tool's `function`.
    functions.extend(ctx.array(body, "functions", "")?.iter());
    ctx.count.tools += openai_function_tokens(ctx, &functions);
    Ok(())
}

fn message(ctx: &mut Ctx<'_>, m: &Value, path: &str) -> Result<()> {
    let Some(obj) = m.as_object() else {
        return Err(ctx.bad(path, "must be an object"));
    };
    let role = obj
        .get("role")
        .and_then(Value::as_str)
        .ok_or_else(|| ctx.bad(format!("{path}.role"), "must be a string"))?;
    ctx.count.overhead += TOKENS_PER_MESSAGE;
    ctx.count.messages += ctx.text(role);
    if let Some(name) = obj.get("name").and_then(Value::as_str) {
        ctx.count.messages += ctx.text(name) + TOKENS_PER_NAME;
    }
    content(ctx, obj.get("content"), &format!("{path}.content"))?;
    if let Some(refusal) = obj.get("refusal").and_then(Value::as_str) {
        ctx.count.messages += ctx.text(refusal);
    }
    for (i, call) in ctx.array(m, "tool_calls", path)?.iter().enumerate() {
        // A call to a custom (freeform) tool holds `custom` {name, input}.
        let (key, input) = match call.get("type").and_then(Value::as_str) {
            Some("custom") => ("custom", "input"),
            _ => ("function", "arguments"),
        };
        let f = call.get(key).unwrap_or(call);
        let name = f.get("name").and_then(Value::as_str);
        let Some(name) = name else {
            return Err(ctx.bad(
                format!("{path}.tool_calls[{i}].{key}.name"),
                "must be a string",
            ));
        };
        let args = f.get(input).map_or(0, |a| ctx.json(a));
        ctx.count.tool_calls += TOKENS_PER_TOOL_CALL + ctx.text(name) + args;
    }
    // The legacy single `function_call` has a name and arguments too.
    if let Some(f) = obj.get("function_call").filter(|f| f.is_object()) {
        let name = f.get("name").and_then(Value::as_str).unwrap_or("");
        let args = f.get("arguments").map_or(0, |a| ctx.json(a));
        ctx.count.tool_calls += TOKENS_PER_TOOL_CALL + ctx.text(name) + args;
    }
    Ok(())
}

fn content(ctx: &mut Ctx<'_>, content: Option<&Value>, path: &str) -> Result<()> {
    match content {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => ctx.count.messages += ctx.text(s),
        Some(Value::Array(parts)) => {
            for (i, p) in parts.iter().enumerate() {
                let ty = p.get("type").and_then(Value::as_str).unwrap_or("");
                match ty {
                    "text" | "refusal" => {
                        let key = if ty == "text" { "text" } else { "refusal" };
                        let Some(t) = p.get(key).and_then(Value::as_str) else {
                            return Err(ctx.bad(format!("{path}[{i}].{key}"), "must be a string"));
                        };
                        ctx.count.messages += ctx.text(t);
                    }
                    "image_url" => {
                        let img = p.get("image_url");
                        let url = img
                            .and_then(|i| i.get("url").or(Some(i)))
                            .and_then(Value::as_str);
                        let Some(url) = url else {
                            return Err(
                                ctx.bad(format!("{path}[{i}].image_url.url"), "must be a string")
                            );
                        };
                        let detail = img.and_then(|i| i.get("detail")).and_then(Value::as_str);
                        ctx.count.images += ctx.images.tokens_for_url(url, detail);
                    }
                    // Audio, files and future part types: their JSON as text.
                    _ => ctx.count.messages += ctx.json(p),
                }
            }
        }
        Some(_) => return Err(ctx.bad(path, "must be a string, an array of parts or null")),
    }
    Ok(())
}
