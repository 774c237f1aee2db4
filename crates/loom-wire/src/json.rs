//! Typed reads of `serde_json::Value` fields that name the JSON path of whatever is wrong.
//!
//! Replies and requests are walked as values rather than deserialized into structs so that an
//! error can say `messages[3].tool_calls[0].id: expected a string` instead of a serde position,
//! and so that unknown fields (providers add them all the time) pass without a schema change.

use serde_json::{Map, Value};

/// A field that is missing or has the wrong type; the caller adds the API and record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    /// JSON path, e.g. `messages[3].content`; empty for the document itself.
    pub(crate) field: String,
    /// What was expected instead.
    pub(crate) reason: String,
}

impl FieldError {
    pub(crate) fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// The path of `key` inside the object at `path`.
pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// The path of element `index` inside the array at `path`.
pub(crate) fn index(path: &str, index: usize) -> String {
    format!("{path}[{index}]")
}

/// The JSON type of a value, as error messages name it (`a string`, `null`): for every error
/// that says what was found where something else was expected.
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn wrong(path: &str, key: &str, expected: &str, got: &Value) -> FieldError {
    FieldError::new(
        join(path, key),
        format!("expected {expected}, got {}", kind(got)),
    )
}

/// `value` as an object, or an error naming `path`.
pub(crate) fn object<'a>(
    value: &'a Value,
    path: &str,
) -> Result<&'a Map<String, Value>, FieldError> {
    value
        .as_object()
        .ok_or_else(|| FieldError::new(path, format!("expected an object, got {}", kind(value))))
}

/// An optional string field; `null` counts as absent.
pub(crate) fn opt_str<'a>(
    obj: &'a Map<String, Value>,
    path: &str,
    key: &str,
) -> Result<Option<&'a str>, FieldError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(wrong(path, key, "a string", other)),
    }
}

/// A required string field.
pub(crate) fn req_str<'a>(
    obj: &'a Map<String, Value>,
    path: &str,
    key: &str,
) -> Result<&'a str, FieldError> {
    opt_str(obj, path, key)?.ok_or_else(|| missing(path, key, "a string"))
}

/// An optional non-negative integer field; `null` counts as absent.
pub(crate) fn opt_u64(
    obj: &Map<String, Value>,
    path: &str,
    key: &str,
) -> Result<Option<u64>, FieldError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| wrong(path, key, "a non-negative integer", v)),
    }
}

/// An optional array field; `null` counts as absent.
pub(crate) fn opt_array<'a>(
    obj: &'a Map<String, Value>,
    path: &str,
    key: &str,
) -> Result<Option<&'a Vec<Value>>, FieldError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(other) => Err(wrong(path, key, "an array", other)),
    }
}

/// An optional object field; `null` counts as absent.
pub(crate) fn opt_object<'a>(
    obj: &'a Map<String, Value>,
    path: &str,
    key: &str,
) -> Result<Option<&'a Map<String, Value>>, FieldError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(other) => Err(wrong(path, key, "an object", other)),
    }
}

/// The error for a required field that is absent (or `null`).
pub(crate) fn missing(path: &str, key: &str, expected: &str) -> FieldError {
    FieldError::new(join(path, key), format!("required: expected {expected}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_name_the_path_and_the_type_found() {
        let v = json!({"a": 1, "b": null});
        let o = object(&v, "messages[2]").unwrap();
        let e = req_str(o, "messages[2]", "a").unwrap_err();
        assert_eq!(e.field, "messages[2].a");
        assert_eq!(e.reason, "expected a string, got a number");
        let e = req_str(o, "messages[2]", "b").unwrap_err();
        assert_eq!(e.reason, "required: expected a string");
        assert_eq!(opt_u64(o, "", "a").unwrap(), Some(1));
        assert_eq!(join("", "model"), "model");
        assert!(object(&json!([]), "").is_err());
    }
}
