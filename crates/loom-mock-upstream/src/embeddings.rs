//! `POST /v1/embeddings` in OpenAI's wire format: the request checked as OpenAI checks it, and
//! deterministic vectors made from the text.
//!
//! A vector is a hashed bag of words (each lowercased word adds ±1 to a coordinate chosen by its
//! hash), normalized to length 1: the same text always gets the same vector, and texts that
//! share words are closer than texts that do not, so a retriever's ranking can be tested
//! against it. Token arrays are embedded the same way, each token id a word.

use axum::http::StatusCode;
use base64::Engine as _;
use serde_json::{json, Value};

use crate::error::{MockError, Result};
use crate::wire::Outgoing;

/// Dimensions of a vector when the request does not ask for a number.
pub(crate) const DEFAULT_DIMENSIONS: usize = 64;

/// Most inputs in one request (OpenAI's limit).
const MAX_INPUTS: usize = 2048;

/// Most dimensions the mock makes: more is a client bug, not a test.
const MAX_DIMENSIONS: usize = 4096;

const RECORD: &str = "embeddings request";

/// A checked request: the texts (token arrays as their ids joined by spaces), the model and
/// the shape of the answer.
#[derive(Debug)]
pub(crate) struct EmbeddingsRequest {
    inputs: Vec<String>,
    model: String,
    dimensions: usize,
    base64: bool,
}

/// Reads an embeddings request as OpenAI would, refusing what it refuses.
pub(crate) fn parse(body: &Value) -> Result<EmbeddingsRequest> {
    let Value::Object(map) = body else {
        return Err(MockError::field(RECORD, "", "expected a JSON object"));
    };
    let model = match map.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        Some(_) => {
            return Err(MockError::field(
                RECORD,
                "model",
                "expected a non-empty string",
            ))
        }
        None => return Err(MockError::field(RECORD, "model", "missing")),
    };
    let inputs = match map.get("input") {
        None => return Err(MockError::field(RECORD, "input", "missing")),
        Some(Value::String(s)) => vec![text_input(s, "input")?],
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(MockError::field(RECORD, "input", "an empty array"))
        }
        Some(Value::Array(items)) if items.len() > MAX_INPUTS => {
            return Err(MockError::field(
                RECORD,
                "input",
                format!("{} inputs; at most {MAX_INPUTS} are allowed", items.len()),
            ))
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_u64) => {
            vec![tokens(items)]
        }
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => text_input(s, &format!("input[{i}]")),
                Value::Array(ids) if !ids.is_empty() && ids.iter().all(Value::is_u64) => {
                    Ok(tokens(ids))
                }
                _ => Err(MockError::field(
                    RECORD,
                    format!("input[{i}]"),
                    "expected a string or a non-empty array of token ids",
                )),
            })
            .collect::<Result<_>>()?,
        Some(_) => {
            return Err(MockError::field(
                RECORD,
                "input",
                "expected a string, an array of strings or of token arrays",
            ))
        }
    };
    let dimensions = match map.get("dimensions") {
        None | Some(Value::Null) => DEFAULT_DIMENSIONS,
        Some(v) => v
            .as_u64()
            .and_then(|d| usize::try_from(d).ok())
            .filter(|d| (1..=MAX_DIMENSIONS).contains(d))
            .ok_or_else(|| {
                MockError::field(
                    RECORD,
                    "dimensions",
                    format!("expected an integer from 1 to {MAX_DIMENSIONS}"),
                )
            })?,
    };
    let base64 = match map.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(f)) if f == "float" => false,
        Some(Value::String(f)) if f == "base64" => true,
        Some(_) => {
            return Err(MockError::field(
                RECORD,
                "encoding_format",
                "expected `float` or `base64`",
            ))
        }
    };
    Ok(EmbeddingsRequest {
        inputs,
        model,
        dimensions,
        base64,
    })
}

fn text_input(s: &str, field: &str) -> Result<String> {
    if s.is_empty() {
        return Err(MockError::field(RECORD, field, "cannot be an empty string"));
    }
    Ok(s.to_owned())
}

fn tokens(ids: &[Value]) -> String {
    ids.iter()
        .filter_map(Value::as_u64)
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The deterministic vector of `text`: see the module documentation.
pub(crate) fn vector(text: &str, dimensions: usize) -> Vec<f32> {
    let mut v = vec![0.0f32; dimensions];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let h = fnv(&word.to_lowercase());
        let i = usize::try_from(h % dimensions as u64).unwrap_or(0);
        v[i] += if (h >> 32) & 1 == 0 { 1.0 } else { -1.0 };
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    } else if let Some(first) = v.first_mut() {
        // A text with no words still gets a unit vector.
        *first = 1.0;
    }
    v
}

fn fnv(s: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The reply to a checked request, in OpenAI's shape.
pub(crate) fn reply(request: &EmbeddingsRequest) -> Outgoing {
    let mut tokens = 0usize;
    let data: Vec<Value> = request
        .inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            tokens += text.split_whitespace().count().max(1);
            let v = vector(text, request.dimensions);
            let embedding = if request.base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({ "object": "embedding", "index": index, "embedding": embedding })
        })
        .collect();
    let body = json!({
        "object": "list",
        "data": data,
        "model": request.model,
        "usage": { "prompt_tokens": tokens, "total_tokens": tokens },
    });
    Outgoing::json(StatusCode::OK, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_unit_length_deterministic_and_closer_for_shared_words() {
        let a = vector("the cat sat on the mat", 64);
        assert_eq!(a, vector("The cat sat on the mat", 64));
        let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
        let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>();
        let near = vector("a cat sat on a mat", 64);
        let far = vector("quarterly revenue forecast", 64);
        assert!(dot(&a, &near) > dot(&a, &far));
        assert_eq!(vector("", 8).len(), 8);
    }

    #[test]
    fn requests_are_checked_as_openai_does() {
        let ok = parse(&json!({"model": "m", "input": ["a", "b"], "dimensions": 8})).unwrap();
        assert_eq!((ok.inputs.len(), ok.dimensions), (2, 8));
        assert_eq!(
            parse(&json!({"model": "m", "input": [1, 2]}))
                .unwrap()
                .inputs,
            ["1 2"]
        );
        for bad in [
            json!({"input": "a"}),
            json!({"model": "m"}),
            json!({"model": "m", "input": ""}),
            json!({"model": "m", "input": []}),
            json!({"model": "m", "input": [{}]}),
            json!({"model": "m", "input": "a", "dimensions": 0}),
            json!({"model": "m", "input": "a", "encoding_format": "int8"}),
        ] {
            assert!(parse(&bad).is_err(), "{bad}");
        }
    }
}
