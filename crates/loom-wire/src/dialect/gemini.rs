//! The Gemini API, `POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent`.
//!
//! The model and the method are in the path, not the body; the key travels in
//! `x-goog-api-key` (the API also takes `?key=`). A conversation is `contents`, each a `user` or
//! `model` content of `parts`; the system prompt is `systemInstruction`, apart from it.

use serde_json::{json, Map, Value};

use super::{Dialect, Header, ItemHead, Provider};
use loom_core::Api;

/// The Gemini API.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gemini;

/// The version prefix of the API's paths.
pub const GEMINI_VERSION_PATH: &str = "/v1beta";

impl Dialect for Gemini {
    fn api(&self) -> Api {
        Api::Gemini
    }

    fn provider(&self) -> Provider {
        Provider::Google
    }

    /// The collection its methods are posted under (`/v1beta/models/{model}:{method}`).
    fn route(&self) -> &'static str {
        "/v1beta/models"
    }

    fn endpoint(&self) -> &'static str {
        "/models"
    }

    /// The collection's URL at `base`: a request's own URL adds `/{model}:{method}`
    /// ([`generate_url`]).
    fn url(&self, base: &str) -> String {
        let base = base.strip_suffix(GEMINI_VERSION_PATH).unwrap_or(base);
        format!("{base}{GEMINI_VERSION_PATH}{}", self.endpoint())
    }

    fn routed_by_model(&self) -> bool {
        true
    }

    fn credential_headers(&self, key: Option<&str>) -> Vec<Header> {
        key.map(|key| Header {
            name: "x-goog-api-key",
            value: key.to_owned(),
            secret: true,
        })
        .into_iter()
        .collect()
    }

    fn ends_cleanly(&self, last: ItemHead<'_>) -> bool {
        last.role == Some("user")
    }

    fn replays_reasoning(&self) -> bool {
        true
    }

    fn tool(&self, name: &str, description: &str, parameters: &Value) -> Value {
        json!({"functionDeclarations": [
            {"name": name, "description": description, "parametersJsonSchema": parameters}
        ]})
    }

    fn drop_calls(&self, reply: &mut Value, name: &str) {
        let Some(Value::Array(candidates)) = reply.get_mut("candidates") else {
            return;
        };
        for candidate in candidates {
            if let Some(Value::Array(parts)) = candidate.pointer_mut("/content/parts") {
                parts.retain(|p| {
                    p.pointer("/functionCall/name").and_then(Value::as_str) != Some(name)
                });
                if parts.is_empty() {
                    parts.push(json!({"text": ""}));
                }
            }
        }
    }

    fn prepend_text(&self, reply: &mut Value, text: &str) {
        let Some(Value::Array(parts)) = reply.pointer_mut("/candidates/0/content/parts") else {
            return;
        };
        let own = parts.iter_mut().find(|p| {
            p.get("text").is_some_and(Value::is_string) && p.get("thought") != Some(&json!(true))
        });
        match own {
            Some(p) => {
                let own = p["text"].as_str().unwrap_or("").to_owned();
                p["text"] = json!(format!("{text}{own}"));
            }
            None => {
                // After the thought parts, which come first.
                let at = parts
                    .iter()
                    .position(|p| p.get("thought") != Some(&json!(true)))
                    .unwrap_or(parts.len());
                parts.insert(at, json!({"text": text}));
            }
        }
    }

    fn error_body(&self, status: u16, message: &str, param: Option<&str>) -> Value {
        crate::error_body::google(status, message, param)
    }

    fn endpoint_name(&self) -> &'static str {
        "generate_content"
    }

    fn one_turn(
        &self,
        _model: &str,
        instructions: &str,
        input: &str,
        max_output_tokens: u64,
    ) -> Value {
        json!({
            "systemInstruction": {"parts": [{"text": instructions}]},
            "contents": [{"role": "user", "parts": [{"text": input}]}],
            "generationConfig": {"maxOutputTokens": max_output_tokens},
        })
    }

    fn max_output_fields(&self) -> &'static [&'static str] {
        // Nested: `generationConfig.maxOutputTokens` (`asked_output`).
        &[]
    }

    fn asked_output(&self, body: &Map<String, Value>) -> Option<u64> {
        max_output_tokens(body).filter(|n| *n > 0)
    }

    fn replace_conversation(&self, body: &mut Map<String, Value>, rendered: &Value) {
        if let Some(contents) = rendered.get("contents") {
            body.insert("contents".into(), contents.clone());
        }
        match rendered.get("systemInstruction") {
            Some(system) => {
                body.insert("systemInstruction".into(), system.clone());
            }
            None => {
                body.remove("systemInstruction");
            }
        }
    }

    fn restore_system(&self, client: &Map<String, Value>, body: &mut Map<String, Value>) {
        // The client's own, where it says what the render says.
        if let (Some(theirs), Some(ours)) = (
            client.get("systemInstruction"),
            body.get("systemInstruction"),
        ) {
            if parts_text(theirs) == parts_text(ours) {
                body.insert("systemInstruction".into(), theirs.clone());
            }
        }
    }
}

/// The text of a content's parts, joined by newlines.
fn parts_text(content: &Value) -> String {
    content
        .get("parts")
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// A Gemini request's method, from the last segment of its path (`{model}:{method}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeminiMethod {
    /// `generateContent`: one reply, whole.
    Generate,
    /// `streamGenerateContent`: the reply as a stream (server-sent events with `alt=sse`, else
    /// a JSON array of responses).
    Stream,
    /// `countTokens`.
    CountTokens,
}

impl GeminiMethod {
    /// The method's name in the path.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Generate => "generateContent",
            Self::Stream => "streamGenerateContent",
            Self::CountTokens => "countTokens",
        }
    }
}

/// The model and method a Gemini path's last segment names (`gemini-3.5-pro:generateContent`),
/// or why it names none.
pub fn gemini_target(segment: &str) -> Result<(&str, GeminiMethod), String> {
    let Some((model, method)) = segment.rsplit_once(':') else {
        return Err(format!(
            "`{segment}`: expected `{{model}}:generateContent`, `:streamGenerateContent` or `:countTokens`"
        ));
    };
    if model.is_empty() {
        return Err(format!("`{segment}`: the model is missing"));
    }
    let method = match method {
        "generateContent" => GeminiMethod::Generate,
        "streamGenerateContent" => GeminiMethod::Stream,
        "countTokens" => GeminiMethod::CountTokens,
        other => return Err(format!("`{other}`: not a method Loom serves")),
    };
    Ok((model, method))
}

/// The URL of a Gemini request at `base`: `{base}/v1beta/models/{model}:{method}`, with `alt=sse`
/// for a stream.
pub fn generate_url(base: &str, model: &str, method: GeminiMethod) -> String {
    let collection = Gemini.url(base);
    match method {
        GeminiMethod::Stream => format!("{collection}/{model}:{}?alt=sse", method.as_str()),
        _ => format!("{collection}/{model}:{}", method.as_str()),
    }
}

/// The reply cap a Gemini request sets (`generationConfig.maxOutputTokens`).
pub fn max_output_tokens(body: &Map<String, Value>) -> Option<u64> {
    body.get("generationConfig")?
        .get("maxOutputTokens")?
        .as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_names_its_model_and_method() {
        assert_eq!(
            gemini_target("gemini-3.5-pro:streamGenerateContent"),
            Ok(("gemini-3.5-pro", GeminiMethod::Stream))
        );
        assert_eq!(
            gemini_target("gemini-3.5-flash-lite:generateContent"),
            Ok(("gemini-3.5-flash-lite", GeminiMethod::Generate))
        );
        assert!(gemini_target("gemini-3.5-pro").is_err());
        assert!(gemini_target(":generateContent").is_err());
        assert!(gemini_target("m:embedContent")
            .unwrap_err()
            .contains("embedContent"));
        assert_eq!(
            generate_url("https://generativelanguage.googleapis.com", "g", GeminiMethod::Stream),
            "https://generativelanguage.googleapis.com/v1beta/models/g:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            generate_url("http://127.0.0.1:9/v1beta", "g", GeminiMethod::Generate),
            "http://127.0.0.1:9/v1beta/models/g:generateContent"
        );
    }

    #[test]
    fn a_hidden_call_is_dropped_and_text_put_first() {
        let mut reply = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "thinking", "thought": true},
            {"functionCall": {"id": "c1", "name": "loom_recall", "args": {}}, "thoughtSignature": "s"}
        ]}}]});
        Gemini.drop_calls(&mut reply, "loom_recall");
        Gemini.prepend_text(&mut reply, "Read it. ");
        assert_eq!(
            reply["candidates"][0]["content"]["parts"],
            json!([{"text": "thinking", "thought": true}, {"text": "Read it. "}])
        );
    }
}
