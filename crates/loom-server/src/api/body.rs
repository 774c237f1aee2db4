//! Reading request bodies and query strings into typed requests, with errors that name the field.

use axum::extract::rejection::QueryRejection;
use serde::de::DeserializeOwned;

use crate::error::{ApiError, Result};

/// Parses a JSON body; an error names the field (`events[2].kind`) and what was wrong.
///
/// JSON has one number type: `12.0` is the integer 12 to JSON Schema and to every client that
/// writes numbers as floats. A body refused for a float where an integer goes is read again
/// with its integral floats as integers.
pub(crate) fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    if body.is_empty() {
        return Err(ApiError::invalid("empty body: expected a JSON object"));
    }
    let first = parse_exact(body);
    match first {
        Err(e) if e.message.contains("invalid type: floating point") => {
            let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(body) else {
                return Err(e);
            };
            integral_floats_as_integers(&mut value);
            let Ok(bytes) = serde_json::to_vec(&value) else {
                return Err(e);
            };
            parse_exact(&bytes)
        }
        other => other,
    }
}

/// Every float with no fraction that fits an integer, as that integer.
fn integral_floats_as_integers(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0) {
                // Beyond 2^53 a float names no single integer; those stay floats (and are refused).
                if f.abs() <= 9_007_199_254_740_992.0 {
                    *value = Value::from(f as i64);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats_as_integers),
        Value::Object(map) => map.values_mut().for_each(integral_floats_as_integers),
        _ => {}
    }
}

fn parse_exact<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let reason = if inner.is_syntax() || inner.is_eof() {
            format!("body is not valid JSON: {inner}")
        } else {
            inner.to_string()
        };
        if path.is_empty() || path == "." {
            ApiError::invalid(reason)
        } else {
            ApiError::invalid_field(path.clone(), format!("field `{path}`: {reason}"))
        }
    })
}

/// A query string that does not fit the endpoint's parameters.
pub(crate) fn query_error(e: QueryRejection) -> ApiError {
    ApiError::invalid(format!("query string: {}", e.body_text()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Outer {
        items: Vec<Inner>,
    }
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        n: u64,
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse_json::<Outer>(br#"{"items": [{"n": 1}, {"n": "x"}]}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("items[1].n"));
        let e = parse_json::<Outer>(b"{\"items\": [").unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
        // An integral float is the integer; a fraction is not.
        assert_eq!(parse_json::<Inner>(br#"{"n": 12.0}"#).unwrap().n, 12);
        let e = parse_json::<Inner>(br#"{"n": 12.5}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("n"));
        let e = parse_json::<Outer>(b"\xff\xfe").unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        assert!(parse_json::<Outer>(b"").is_err());
    }
}
