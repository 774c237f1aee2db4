//! Checks a call's arguments against its tool's JSON Schema before anything runs.
//!
//! The subset tools use: `type` (one or a list), `properties`, `required`,
//! `additionalProperties: false`, `items`, `enum`, `minimum`/`maximum`, `minLength`/`maxLength`.
//! Unknown keywords are ignored (a schema may say more than is checked, never less).

use serde_json::Value;

/// `Ok` when `value` satisfies `schema`; otherwise where and why it does not.
pub fn check(schema: &Value, value: &Value) -> Result<(), String> {
    at(schema, value, "")
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_type(v: &Value, t: &str) -> bool {
    let actual = type_name(v);
    actual == t || (t == "number" && actual == "integer")
}

fn at(schema: &Value, value: &Value, path: &str) -> Result<(), String> {
    let here = if path.is_empty() { "arguments" } else { path };
    let Some(schema) = schema.as_object() else {
        return Ok(());
    };
    if let Some(t) = schema.get("type") {
        let ok = match t {
            Value::String(t) => is_type(value, t),
            Value::Array(ts) => ts
                .iter()
                .filter_map(Value::as_str)
                .any(|t| is_type(value, t)),
            _ => true,
        };
        if !ok {
            return Err(format!("{here}: expected {t}, found {}", type_name(value)));
        }
    }
    if let Some(Value::Array(allowed)) = schema.get("enum") {
        if !allowed.contains(value) {
            return Err(format!(
                "{here}: {value} is not one of {}",
                Value::Array(allowed.clone())
            ));
        }
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
            if n < min {
                return Err(format!("{here}: {n} is below the minimum {min}"));
            }
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
            if n > max {
                return Err(format!("{here}: {n} is above the maximum {max}"));
            }
        }
    }
    if let Some(s) = value.as_str() {
        let len = s.chars().count() as u64;
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
            if len < min {
                return Err(format!("{here}: shorter than {min} characters"));
            }
        }
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
            if len > max {
                return Err(format!("{here}: longer than {max} characters"));
            }
        }
    }
    if let Value::Object(map) = value {
        if let Some(Value::Array(required)) = schema.get("required") {
            for key in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(key) {
                    return Err(format!("{here}: missing `{key}`"));
                }
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (key, v) in map {
            let child = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            match props.and_then(|p| p.get(key)) {
                Some(s) => at(s, v, &child)?,
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return Err(format!("{here}: unknown argument `{key}`"));
                }
                None => {}
            }
        }
    }
    if let (Value::Array(items), Some(item)) = (value, schema.get("items")) {
        for (i, v) in items.iter().enumerate() {
            at(item, v, &format!("{here}[{i}]"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_are_checked_with_the_place_and_reason() {
        let schema = json!({"type": "object", "properties": {
            "path": {"type": "string"}, "n": {"type": "integer", "minimum": 1},
            "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["path"], "additionalProperties": false});
        assert!(check(&schema, &json!({"path": "a", "n": 2, "tags": ["x"]})).is_ok());
        assert_eq!(
            check(&schema, &json!({})).unwrap_err(),
            "arguments: missing `path`"
        );
        assert!(check(&schema, &json!({"path": 3}))
            .unwrap_err()
            .starts_with("path: expected"));
        assert!(check(&schema, &json!({"path": "a", "n": 0}))
            .unwrap_err()
            .contains("minimum"));
        assert!(check(&schema, &json!({"path": "a", "x": 1}))
            .unwrap_err()
            .contains("unknown argument `x`"));
        assert!(check(&schema, &json!({"path": "a", "tags": [1]}))
            .unwrap_err()
            .contains("tags[0]"));
        assert!(check(&schema, &json!([1]))
            .unwrap_err()
            .contains("expected \"object\""));
    }
}
