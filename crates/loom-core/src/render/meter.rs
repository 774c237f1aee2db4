//! Token metering as the render pipeline sees it: a text counter plus one counting rule for wire
//! messages, so the estimate the pipeline budgets with is computed on the exact bytes it sends.

use serde_json::Value;

/// Counts the tokens of a text. Implemented by `loom-tokens` for real tokenizers; the pipeline
/// only needs this one operation, which keeps `loom-core` free of tokenizer dependencies.
pub trait TokenMeter {
    /// Tokens of `text` as ordinary text (special-token strings count as text).
    fn count(&self, text: &str) -> u64;

    /// A short name for receipts (`o200k_base`, `estimate:anthropic`, ...).
    fn name(&self) -> &str;
}

/// Tokens every message costs beyond its values (OpenAI's documented rule for chat models).
pub const TOKENS_PER_MESSAGE: u64 = 3;
/// Extra token for a message that carries a `name`.
pub const TOKENS_PER_NAME: u64 = 1;
/// Tokens that prime the reply (`<|start|>assistant<|message|>`).
pub const REPLY_PRIMING: u64 = 3;

/// Tokens of one wire message: [`TOKENS_PER_MESSAGE`], plus the tokens of every string value in
/// it (nested values too: tool-call names and arguments, content parts), plus
/// [`TOKENS_PER_NAME`] when it has a top-level `name`.
///
/// This is OpenAI's documented chat rule, extended to nested values the way the cookbook's code
/// would count them if it recursed. `loom-tokens` counts request bodies with the same function,
/// so the pipeline's estimate and the measured count agree.
pub fn message_tokens(message: &Value, meter: &dyn TokenMeter) -> u64 {
    let name = match message.get("name") {
        Some(Value::String(_)) => TOKENS_PER_NAME,
        _ => 0,
    };
    TOKENS_PER_MESSAGE + name + leaf_tokens(message, meter)
}

/// What an inline image (`data:image/...;base64,...`) is budgeted at: OpenAI's cost of a
/// 512×512 image at high detail (85 + 4 × 170). Its base64 text is never counted as text.
pub const INLINE_IMAGE_TOKENS: u64 = 765;

/// Tokens of every string leaf of `value` (an inline image counts [`INLINE_IMAGE_TOKENS`]).
pub fn leaf_tokens(value: &Value, meter: &dyn TokenMeter) -> u64 {
    match value {
        Value::String(s) => string_tokens(s, meter),
        Value::Array(items) => items.iter().map(|v| leaf_tokens(v, meter)).sum(),
        // Anthropic's inline image source: `{"type": "base64", "media_type", "data"}`.
        Value::Object(map) if map.get("type").and_then(Value::as_str) == Some("base64") => {
            INLINE_IMAGE_TOKENS
        }
        Value::Object(map) => map.values().map(|v| leaf_tokens(v, meter)).sum(),
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
    }
}

/// Tokens of one string value (an inline image counts [`INLINE_IMAGE_TOKENS`]).
pub(crate) fn string_tokens(s: &str, meter: &dyn TokenMeter) -> u64 {
    if s.starts_with("data:image/") {
        INLINE_IMAGE_TOKENS
    } else {
        meter.count(s)
    }
}

/// Tokens of a tool definition: its compact JSON text counted as text.
pub fn tool_tokens(tool: &Value, meter: &dyn TokenMeter) -> u64 {
    meter.count(&tool.to_string())
}

/// A crude meter for tests: one token per started group of four bytes of each whitespace-split
/// word. Deterministic, not a real tokenizer.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApproxMeter;

impl TokenMeter for ApproxMeter {
    fn count(&self, text: &str) -> u64 {
        text.split_whitespace()
            .map(|w| (w.len() as u64).div_ceil(4))
            .sum()
    }

    fn name(&self) -> &str {
        "approx"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_images_are_not_counted_as_text() {
        let big = format!("data:image/png;base64,{}", "QUJD".repeat(50_000));
        let chat = serde_json::json!({"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": big}}
        ]});
        assert_eq!(
            message_tokens(&chat, &ApproxMeter),
            TOKENS_PER_MESSAGE
                + ApproxMeter.count("user")
                + ApproxMeter.count("image_url")
                + INLINE_IMAGE_TOKENS
        );
        let anthropic = serde_json::json!({"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": "QUJD".repeat(50_000)
        }});
        assert_eq!(
            leaf_tokens(&anthropic, &ApproxMeter),
            ApproxMeter.count("image") + INLINE_IMAGE_TOKENS
        );
    }
}
