//! Request-level counts of provider wire bodies: what a request costs in input tokens, with
//! per-message overheads, tool calls, tool schemas and images.
//!
//! Only OpenAI documents a counting rule (chat messages, and tool schemas in its cookbook); the
//! Anthropic, Responses and Gemini counts are documented approximations that reuse the same
//! structure.
//! Each format's module says where its numbers come from.

mod anthropic;
mod gemini;
mod openai_chat;
mod responses;

use loom_core::Api;
use serde_json::Value;

use crate::error::{Result, TokenError};
use crate::image::ImageRule;
use crate::tokenizer::CountTokens;

/// Where a request's tokens go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCount {
    /// Message text: system prompt, contents, names, roles.
    pub messages: u64,
    /// Tool-call names and arguments, and tool results' wrappers.
    pub tool_calls: u64,
    /// Tool definitions (schemas), including any fixed tool-use preamble.
    pub tools: u64,
    /// Images.
    pub images: u64,
    /// Fixed per-message and reply-priming overheads.
    pub overhead: u64,
    /// Whether every text was counted with the model's own tokenizer (overheads of formats
    /// without a published rule are estimates either way).
    pub exact: bool,
}

impl RequestCount {
    /// The whole request.
    pub fn total(&self) -> u64 {
        self.messages + self.tool_calls + self.tools + self.images + self.overhead
    }
}

/// Counts a request body of `format` for a model with `counter` and `images`.
pub fn count_request(
    format: Api,
    body: &Value,
    counter: &dyn CountTokens,
    images: &ImageRule,
) -> Result<RequestCount> {
    let mut ctx = Ctx {
        format,
        counter,
        images,
        count: RequestCount {
            exact: counter.exact(),
            ..Default::default()
        },
    };
    match format {
        Api::OpenaiChat => openai_chat::count(&mut ctx, body)?,
        Api::OpenaiResponses => responses::count(&mut ctx, body)?,
        Api::Anthropic => anthropic::count(&mut ctx, body)?,
        Api::Gemini => gemini::count(&mut ctx, body)?,
    }
    Ok(ctx.count)
}

/// What the format modules share while counting one body.
struct Ctx<'a> {
    format: Api,
    counter: &'a dyn CountTokens,
    images: &'a ImageRule,
    count: RequestCount,
}

impl Ctx<'_> {
    fn text(&self, s: &str) -> u64 {
        self.counter.count(s)
    }

    fn bad(&self, field: impl Into<String>, reason: impl Into<String>) -> TokenError {
        TokenError::Request {
            format: self.format.as_str(),
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The array at `key`, absent meaning empty.
    fn array<'v>(&self, body: &'v Value, key: &str, path: &str) -> Result<&'v [Value]> {
        match body.get(key) {
            None | Some(Value::Null) => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(_) => Err(self.bad(format!("{path}{key}"), "must be an array")),
        }
    }

    /// Counts a value of unknown shape as its compact JSON text: the model sees some rendering
    /// of it, and its JSON is a fair, slightly high, stand-in.
    fn json(&self, v: &Value) -> u64 {
        match v {
            Value::String(s) => self.text(s),
            other => self.text(&other.to_string()),
        }
    }
}

/// OpenAI's cookbook rule for function definitions ("How to count tokens with tiktoken",
/// `num_tokens_for_tools`): per function a fixed start plus `name:description`; per property a
/// fixed cost plus `name:type:description`, enums item by item; a fixed end. The constants are
/// the cookbook's: 7 per function for GPT-4o-era (o200k) models, 10 for GPT-3.5/4 (cl100k).
///
/// The cookbook handles flat properties only; nested schemas (`properties` of an object
/// property, `items` of an array) are counted here as their JSON text, an approximation.
fn openai_function_tokens(ctx: &Ctx<'_>, functions: &[&Value]) -> u64 {
    if functions.is_empty() {
        return 0;
    }
    let func_init: u64 = if ctx.counter.id() == "cl100k_base" {
        10
    } else {
        7
    };
    const PROP_INIT: u64 = 3;
    const PROP_KEY: u64 = 3;
    const ENUM_ITEM: u64 = 3;
    const FUNC_END: u64 = 12;
    let mut n = 0u64;
    for f in functions {
        n += func_init;
        let name = f.get("name").and_then(Value::as_str).unwrap_or("");
        let desc = f.get("description").and_then(Value::as_str).unwrap_or("");
        n += ctx.text(&format!(
            "{name}:{}",
            desc.strip_suffix('.').unwrap_or(desc)
        ));
        let props = f
            .pointer("/parameters/properties")
            .and_then(Value::as_object);
        if let Some(props) = props.filter(|p| !p.is_empty()) {
            n += PROP_INIT;
            for (key, p) in props {
                n += PROP_KEY;
                if let Some(items) = p.get("enum").and_then(Value::as_array) {
                    // The cookbook's enum start is -3: it cancels the first item's cost.
                    n = n.saturating_sub(3);
                    for item in items {
                        n += ENUM_ITEM + ctx.json(item);
                    }
                }
                let ty = match p.get("type") {
                    Some(Value::String(t)) => t.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                let pdesc = p.get("description").and_then(Value::as_str).unwrap_or("");
                n += ctx.text(&format!(
                    "{key}:{ty}:{}",
                    pdesc.strip_suffix('.').unwrap_or(pdesc)
                ));
                for nested in ["properties", "items", "anyOf", "oneOf"] {
                    if let Some(v) = p.get(nested) {
                        n += ctx.json(v);
                    }
                }
            }
        }
    }
    n + FUNC_END
}

#[cfg(test)]
mod tests;
