//! OpenAI Responses bodies — a documented approximation.
//!
//! OpenAI publishes no separate rule for the Responses API; it renders the same conversation
//! for the same models, so the Chat rule is applied item by item: `instructions` and each
//! message item cost 3 plus their role and text; a `function_call` item costs its name and
//! arguments plus 3; a `function_call_output` its output plus 3; a reply is primed with 3.
//! Reasoning items count their readable summary (their encrypted content is not knowable).
//! Function tools use the cookbook's tool rule (their fields sit at the top level here).

use serde_json::Value;

use super::openai_chat::{REPLY_PRIMING, TOKENS_PER_MESSAGE, TOKENS_PER_TOOL_CALL};
use super::{openai_function_tokens, Ctx};
use crate::error::Result;

pub(super) fn count(ctx: &mut Ctx<'_>, body: &Value) -> Result<()> {
    match body.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            ctx.count.overhead += TOKENS_PER_MESSAGE;
            ctx.count.messages += ctx.text("developer") + ctx.text(s);
        }
        Some(_) => return Err(ctx.bad("instructions", "must be a string")),
    }
    match body.get("input") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            ctx.count.overhead += TOKENS_PER_MESSAGE;
            ctx.count.messages += ctx.text("user") + ctx.text(s);
        }
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                input_item(ctx, item, &format!("input[{i}]"))?;
            }
        }
        Some(_) => return Err(ctx.bad("input", "must be a string or an array of items")),
    }
    ctx.count.overhead += REPLY_PRIMING;

    let mut functions: Vec<&Value> = Vec::new();
    for (i, t) in ctx.array(body, "tools", "")?.iter().enumerate() {
        match t.get("type").and_then(Value::as_str) {
            Some("function") => functions.push(t),
            Some(_) => ctx.count.tools += ctx.json(t),
            None => return Err(ctx.bad(format!("tools[{i}].type"), "must be a string")),
        }
    }
    ctx.count.tools += openai_function_tokens(ctx, &functions);
    Ok(())
}

fn input_item(ctx: &mut Ctx<'_>, item: &Value, path: &str) -> Result<()> {
    let ty = item.get("type").and_then(Value::as_str);
    // An item without a type but with a role is a message (the API's shorthand).
    let ty = ty.or_else(|| item.get("role").map(|_| "message"));
    match ty {
        Some("message") => {
            let role = item
                .get("role")
                .and_then(Value::as_str)
                .ok_or_else(|| ctx.bad(format!("{path}.role"), "must be a string"))?;
            ctx.count.overhead += TOKENS_PER_MESSAGE;
            ctx.count.messages += ctx.text(role);
            match item.get("content") {
                Some(Value::String(s)) => ctx.count.messages += ctx.text(s),
                Some(Value::Array(parts)) => {
                    for (i, p) in parts.iter().enumerate() {
                        part(ctx, p, &format!("{path}.content[{i}]"))?;
                    }
                }
                _ => {
                    return Err(ctx.bad(
                        format!("{path}.content"),
                        "must be a string or an array of parts",
                    ))
                }
            }
        }
        Some("function_call" | "custom_tool_call") => {
            let name = item.get("name").and_then(Value::as_str).unwrap_or("");
            let args = item
                .get("arguments")
                .or_else(|| item.get("input"))
                .map_or(0, |a| ctx.json(a));
            ctx.count.tool_calls += TOKENS_PER_TOOL_CALL + ctx.text(name) + args;
        }
        Some("function_call_output" | "custom_tool_call_output") => {
            ctx.count.tool_calls += TOKENS_PER_MESSAGE;
            match item.get("output") {
                Some(Value::Array(parts)) => {
                    for (i, p) in parts.iter().enumerate() {
                        part(ctx, p, &format!("{path}.output[{i}]"))?;
                    }
                }
                Some(v) => ctx.count.tool_calls += ctx.json(v),
                None => {}
            }
        }
        Some("reasoning") => {
            for s in item
                .get("summary")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                ctx.count.messages += s.get("text").map_or(0, |t| ctx.json(t));
            }
        }
        Some(_) => ctx.count.messages += ctx.json(item),
        // An item reference may leave out its `type` (`{"id": ...}`).
        None if item.get("id").is_some_and(Value::is_string) => {
            ctx.count.messages += ctx.json(item);
        }
        None => return Err(ctx.bad(format!("{path}.type"), "must be a string")),
    }
    Ok(())
}

fn part(ctx: &mut Ctx<'_>, p: &Value, path: &str) -> Result<()> {
    match p.get("type").and_then(Value::as_str) {
        Some("input_text" | "output_text" | "text" | "summary_text") => {
            ctx.count.messages += p.get("text").map_or(0, |t| ctx.json(t));
        }
        Some("refusal") => ctx.count.messages += p.get("refusal").map_or(0, |t| ctx.json(t)),
        Some("input_image") => {
            let detail = p.get("detail").and_then(Value::as_str);
            let url = p.get("image_url").and_then(Value::as_str).unwrap_or("");
            ctx.count.images += ctx.images.tokens_for_url(url, detail);
        }
        Some(_) => ctx.count.messages += ctx.json(p),
        None => return Err(ctx.bad(format!("{path}.type"), "must be a string")),
    }
    Ok(())
}
