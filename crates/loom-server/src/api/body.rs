//! Reading request bodies and query strings into typed requests, with errors that name the field.

use axum::extract::rejection::QueryRejection;
use serde::de::DeserializeOwned;

use crate::error::{ApiError, Result};

/// Parses a JSON body; an error names the field (`events[2].kind`) and what was wrong.
pub(crate) fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    if body.is_empty() {
        return Err(ApiError::invalid("empty body: expected a JSON object"));
    }
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
        let e = parse_json::<Outer>(b"\xff\xfe").unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        assert!(parse_json::<Outer>(b"").is_err());
    }
}
