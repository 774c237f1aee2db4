//! Gemini bodies — a documented approximation.
//!
//! Google publishes no counting rule (only a `countTokens` method) and no open tokenizer for its
//! current models, so this reuses OpenAI's structure, as the Anthropic count does: 3 tokens per
//! content for its role wrapper, texts counted as text (thought parts too: the API bills them
//! when sent back), a `functionCall` as its name plus the compact JSON of its `args` plus 3, a
//! `functionResponse` as its name plus each key and value of its `response` (a string value as
//! its text) plus 3, tool declarations
//! as name, description and compact JSON schema plus 3. A `thoughtSignature` is opaque and not
//! billed as text: counted as nothing. Inline images follow the model's image rule; file data
//! (fetched by the API) counts as an image of unknown size.

use base64::Engine as _;
use serde_json::Value;

use super::Ctx;
use crate::error::Result;
use crate::image::{image_size, UNKNOWN_SIZE};

const TOKENS_PER_CONTENT: u64 = 3;
const TOKENS_PER_PART_WRAPPER: u64 = 3;

pub(super) fn count(ctx: &mut Ctx<'_>, body: &Value) -> Result<()> {
    match body.get("systemInstruction") {
        None | Some(Value::Null) => {}
        Some(system) => parts(ctx, system, "systemInstruction")?,
    }
    let contents = match body.get("contents") {
        Some(Value::Array(c)) => c,
        Some(_) => return Err(ctx.bad("contents", "must be an array")),
        None => return Err(ctx.bad("contents", "is missing")),
    };
    for (i, c) in contents.iter().enumerate() {
        ctx.count.overhead += TOKENS_PER_CONTENT;
        parts(ctx, c, &format!("contents[{i}]"))?;
    }
    for (i, tool) in ctx.array(body, "tools", "")?.iter().enumerate() {
        let declarations = ctx.array(tool, "functionDeclarations", &format!("tools[{i}]."))?;
        if declarations.is_empty() {
            // A built-in tool (search, code execution): its JSON as text.
            ctx.count.tools += ctx.json(tool);
        }
        for d in declarations {
            let name = d.get("name").and_then(Value::as_str).unwrap_or("");
            let desc = d.get("description").and_then(Value::as_str).unwrap_or("");
            let schema = d
                .get("parametersJsonSchema")
                .or_else(|| d.get("parameters"))
                .map_or(0, |s| ctx.json(s));
            ctx.count.tools += TOKENS_PER_PART_WRAPPER + ctx.text(name) + ctx.text(desc) + schema;
        }
    }
    Ok(())
}

/// A content's parts.
fn parts(ctx: &mut Ctx<'_>, content: &Value, path: &str) -> Result<()> {
    let list = ctx.array(content, "parts", &format!("{path}."))?;
    for (j, p) in list.iter().enumerate() {
        let path = format!("{path}.parts[{j}]");
        if !p.is_object() {
            return Err(ctx.bad(path, "must be an object"));
        }
        if let Some(text) = p.get("text") {
            ctx.count.messages += ctx.json(text);
        } else if let Some(call) = p.get("functionCall") {
            let name = call.get("name").and_then(Value::as_str).unwrap_or("");
            let args = call.get("args").map_or(0, |a| ctx.json(a));
            ctx.count.tool_calls += TOKENS_PER_PART_WRAPPER + ctx.text(name) + args;
        } else if let Some(response) = p.get("functionResponse") {
            let name = response.get("name").and_then(Value::as_str).unwrap_or("");
            // The response's values: a tool's output is text the model reads as text (a
            // string value counts as its text, not as escaped JSON).
            let body = match response.get("response") {
                Some(Value::Object(fields)) => fields
                    .iter()
                    .map(|(key, v)| ctx.text(key) + ctx.json(v))
                    .sum(),
                Some(other) => ctx.json(other),
                None => 0,
            };
            ctx.count.tool_calls += TOKENS_PER_PART_WRAPPER + ctx.text(name) + body;
        } else if let Some(data) = p.get("inlineData") {
            ctx.count.images += image(ctx, data);
        } else if p.get("fileData").is_some() {
            let (w, h) = UNKNOWN_SIZE;
            ctx.count.images += ctx.images.tokens(w, h, None);
        } else {
            // Code execution, and parts added later: their JSON as text (a signature aside).
            let mut rest = p.clone();
            if let Some(obj) = rest.as_object_mut() {
                obj.remove("thoughtSignature");
                obj.remove("thought");
            }
            ctx.count.messages += ctx.json(&rest);
        }
    }
    Ok(())
}

/// Tokens of inline data: an image's size read from its base64 data, else a large image assumed.
fn image(ctx: &Ctx<'_>, data: &Value) -> u64 {
    let size = data
        .get("data")
        .and_then(Value::as_str)
        .and_then(|d| {
            let take = d.len().min(256 * 1024) / 4 * 4;
            base64::engine::general_purpose::STANDARD
                .decode(d.get(..take)?)
                .ok()
        })
        .and_then(|bytes| image_size(&bytes));
    let (w, h) = size.unwrap_or(UNKNOWN_SIZE);
    ctx.images.tokens(w, h, None)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::image::ImageRule;
    use crate::request::count_request;
    use crate::tokenizer::CountTokens;
    use loom_core::Api;

    /// One token per whitespace-separated word, for counts that can be checked by hand.
    struct Words;

    impl CountTokens for Words {
        fn count(&self, text: &str) -> u64 {
            text.split_whitespace().count() as u64
        }
        fn exact(&self) -> bool {
            true
        }
        fn id(&self) -> String {
            "words".to_owned()
        }
    }

    #[test]
    fn every_part_kind_is_counted_and_a_signature_is_not() {
        let body = json!({
            "systemInstruction": {"parts": [{"text": "be brief"}]},
            "contents": [
                {"role": "user", "parts": [{"text": "fix the bug"}]},
                {"role": "model", "parts": [
                    {"text": "I should read it", "thought": true},
                    {"functionCall": {"id": "c1", "name": "read", "args": {"path": "a b"}},
                        "thoughtSignature": "a very long opaque signature"}
                ]},
                {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": "read",
                    "response": {"output": "x y"}}}]}
            ],
            "tools": [{"functionDeclarations": [
                {"name": "read", "description": "Reads a file", "parametersJsonSchema": {"type": "object"}}
            ]}]
        });
        let tile = ImageRule::OpenAiTile {
            base: 85,
            per_tile: 170,
        };
        let c = count_request(Api::Gemini, &body, &Words, &tile).unwrap();
        assert_eq!(c.messages, 2 + 3 + 4, "system, user text, thought");
        // 3 + name + args JSON (`{"path":"a b"}`: two words), then 3 + name + `output` + "x y".
        assert_eq!(c.tool_calls, (3 + 1 + 2) + (3 + 1 + 1 + 2));
        assert_eq!(c.overhead, 9);
        assert_eq!(c.tools, 3 + 1 + 3 + 1);
    }
}
