//! The Gemini API: `{"contents", "systemInstruction", "tools", "generationConfig"}`, posted to
//! `/v1beta/models/{model}:generateContent` (the model is named by the path, not the body).
//!
//! Leading system messages become `systemInstruction`'s parts; a system event later in the log
//! is sent as user text (the API has no mid-conversation system role). An assistant turn is one
//! `model` content (its text, then a `functionCall` part per call), followed by one `user`
//! content holding a `functionResponse` per call. A turn that came from Gemini sends its parts
//! back exactly as they came instead: thought parts and `thoughtSignature`s are checked by the
//! API, which refuses the current tool loop's calls without their signatures. Contents of one
//! role that follow each other are sent as one, so the roles alternate, and a conversation that
//! would open with the model opens with a short user text.

use serde_json::{json, Map, Value};

use super::{arguments_object, text_of, text_only, whole_item};
use crate::api::Api;
use crate::event::{ContentPart, MessageContent};
use crate::render::request::{Msg, RenderedCall, Request, ToolSpec};

/// Text sent before a conversation that would otherwise open with the model.
const OPENING: &str = "(conversation continues)";

fn parts(c: &MessageContent) -> Vec<Value> {
    match c {
        MessageContent::Text(s) => vec![json!({"text": s})],
        MessageContent::Parts(parts) => parts
            .iter()
            .map(|p| match p {
                ContentPart::Text { text } => json!({"text": text}),
                ContentPart::Image { url, .. } => image_part(url),
                ContentPart::Opaque { api, value, .. } if *api == Api::Gemini => value.clone(),
                ContentPart::Opaque { api, value, .. } => {
                    json!({"text": ContentPart::opaque_text(*api, value)})
                }
            })
            .collect(),
    }
}

/// An image: inline data for a `data:` URL, else a file the API fetches.
fn image_part(url: &str) -> Value {
    if let Some(rest) = url.strip_prefix("data:") {
        if let Some((mime_type, data)) = rest.split_once(";base64,") {
            return json!({"inlineData": {"mimeType": mime_type, "data": data}});
        }
    }
    json!({"fileData": {"fileUri": url}})
}

/// The `functionResponse` parts answering `calls`; `ids` are the call ids as the model sent
/// them (a turn replayed as it came keeps the ids of its own parts).
fn responses(calls: &[RenderedCall], ids: &[Option<&str>]) -> Value {
    let parts: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, rc)| {
            let key = if rc.is_error { "error" } else { "output" };
            let mut response = Map::new();
            let id = ids.get(i).copied().flatten().unwrap_or(&rc.call.id);
            response.insert("id".into(), Value::String(id.to_owned()));
            response.insert("name".into(), Value::String(rc.call.name.clone()));
            response.insert("response".into(), json!({ key: text_only(&rc.content) }));
            json!({"functionResponse": response})
        })
        .collect();
    json!({"role": "user", "parts": parts})
}

/// The call ids of a replayed turn's `functionCall` parts, in order.
fn native_call_ids(items: &[Value]) -> Vec<Option<&str>> {
    items
        .iter()
        .filter_map(|p| p.get("functionCall"))
        .map(|c| c.get("id").and_then(Value::as_str))
        .collect()
}

pub(super) fn wire(msg: &Msg) -> Vec<Value> {
    match msg {
        Msg::System(c) => vec![json!({"role": "user", "parts": [
            {"text": format!("[system]\n{}", text_of(c))}
        ]})],
        Msg::User { content, .. } => match whole_item(content, Api::Gemini) {
            Some(item) => vec![item.clone()],
            None => vec![json!({"role": "user", "parts": parts(content)})],
        },
        Msg::Assistant {
            content,
            calls,
            native,
            ..
        } => {
            let native = native
                .as_ref()
                .filter(|n| n.api == Api::Gemini && !n.items.is_empty());
            let (model_parts, ids) = match native {
                // The turn as Gemini sent it: its thoughts, text and calls with their signatures.
                Some(n) => (n.items.clone(), native_call_ids(&n.items)),
                None => {
                    let mut out: Vec<Value> = content.as_ref().map(parts).unwrap_or_default();
                    out.extend(calls.iter().map(|rc| {
                        json!({"functionCall": {
                            "id": rc.call.id,
                            "name": rc.call.name,
                            "args": arguments_object(&rc.call.arguments),
                        }})
                    }));
                    // A content must have a part.
                    if out.is_empty() {
                        out.push(json!({"text": ""}));
                    }
                    (out, Vec::new())
                }
            };
            let mut out = vec![json!({"role": "model", "parts": model_parts})];
            if !calls.is_empty() {
                out.push(responses(calls, &ids));
            }
            out
        }
    }
}

/// The message as metered: a call's `args` as its JSON text (the model reads the keys too), and
/// inline data as an image (never its base64 text).
pub(super) fn as_metered(message: &Value) -> Value {
    let mut m = message.clone();
    if let Some(Value::Array(parts)) = m.get_mut("parts") {
        for p in parts {
            if let Some(args) = p.pointer_mut("/functionCall/args") {
                *args = Value::String(args.to_string());
            }
            if let Some(data) = p.get_mut("inlineData") {
                // `leaf_tokens` counts an inline source as one image.
                *data = json!({"type": "base64"});
            }
        }
    }
    m
}

pub(super) fn tools(tools: &[ToolSpec]) -> Vec<Value> {
    if tools.is_empty() {
        return Vec::new();
    }
    let declarations: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "description": t.description,
                "parametersJsonSchema": t.parameters,
            })
        })
        .collect();
    vec![json!({ "functionDeclarations": declarations })]
}

/// Contents of one role that follow each other, as one content (the parts in order).
fn alternating(contents: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(contents.len());
    for c in contents {
        let role = c.get("role").cloned();
        let parts = c.get("parts").and_then(Value::as_array).cloned();
        let merged = match (out.last_mut(), &role, parts) {
            (Some(last), Some(role), Some(parts)) if last.get("role") == Some(role) => {
                match last.get_mut("parts") {
                    Some(Value::Array(into)) => {
                        into.extend(parts);
                        true
                    }
                    _ => false,
                }
            }
            _ => false,
        };
        if !merged {
            out.push(c);
        }
    }
    out
}

pub(super) fn body(req: &Request) -> Value {
    let leading = req
        .messages
        .iter()
        .take_while(|m| matches!(m, Msg::System(_)))
        .count();
    let system: Vec<Value> = req.messages[..leading]
        .iter()
        .filter_map(|m| match m {
            Msg::System(c) => Some(json!({"text": text_of(c)})),
            _ => None,
        })
        .collect();
    let mut contents: Vec<Value> = req.messages[leading..].iter().flat_map(wire).collect();
    if contents.first().and_then(|c| c.get("role")) != Some(&Value::from("user")) {
        contents.insert(0, json!({"role": "user", "parts": [{"text": OPENING}]}));
    }
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(alternating(contents)));
    if req.max_output_tokens > 0 {
        body.insert(
            "generationConfig".into(),
            json!({"maxOutputTokens": req.max_output_tokens}),
        );
    }
    if !system.is_empty() {
        body.insert("systemInstruction".into(), json!({ "parts": system }));
    }
    if !req.tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools(&req.tools)));
    }
    Value::Object(body)
}
