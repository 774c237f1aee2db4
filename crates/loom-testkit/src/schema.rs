//! The JSON Schema keywords OpenAI's API description uses, checked against a value.
//!
//! Supported: `$ref` (any JSON pointer into the document), `$recursiveRef` / `$recursiveAnchor`,
//! `type` (a name or a list), `nullable`, `enum`, `const`, `properties`, `required`,
//! `additionalProperties`, `propertyNames`, `minProperties` / `maxProperties`, `items`,
//! `minItems` / `maxItems`, `minLength` / `maxLength` (in characters), `pattern`, `minimum` /
//! `maximum` with `exclusiveMinimum` / `exclusiveMaximum` in both their boolean (OpenAPI 3.0) and
//! numeric forms, `allOf`, `anyOf`, `oneOf` (read as `anyOf`) and `not`. Annotations
//! (`description`, `format`, `default`, `discriminator`, `x-*`, ...) do not constrain.
//!
//! One walk serves two uses: with no error list it stops at the first failure (the fast path that
//! tries each alternative of an `anyOf`); with one it records every failure under its path.

use std::collections::HashMap;
use std::sync::Mutex;

use regex::Regex;
use serde_json::{Map, Value};

/// Compiled `pattern`s, shared by every validation (the description holds a handful).
#[derive(Debug, Default)]
pub(crate) struct Patterns(Mutex<HashMap<String, Option<Regex>>>);

impl Patterns {
    /// Whether `text` matches `pattern`; `None` when the pattern does not compile (it is then not
    /// checked, and the error says so).
    pub(crate) fn matches(&self, pattern: &str, text: &str) -> Option<bool> {
        let mut cache = self.0.lock().ok()?;
        let re = cache
            .entry(pattern.to_owned())
            .or_insert_with(|| Regex::new(pattern).ok());
        re.as_ref().map(|re| re.is_match(text))
    }
}

/// A walk over one description.
pub(crate) struct Validator<'a> {
    pub(crate) root: &'a Value,
    pub(crate) patterns: &'a Patterns,
}

/// The JSON type of a value, as schemas name it.
fn kind(v: &Value) -> &'static str {
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

fn type_matches(name: &str, v: &Value) -> bool {
    match name {
        "integer" => match v {
            Value::Number(n) => {
                n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            _ => false,
        },
        "number" => v.is_number(),
        "null" | "boolean" | "string" | "array" | "object" => kind(v) == name,
        // A type this walk does not know constrains nothing it can check.
        _ => true,
    }
}

/// A value shortened for an error message.
fn short(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(60) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The numeric bounds of `obj` that `x` breaks, each as a reason.
fn bounds(obj: &Map<String, Value>, x: f64) -> Vec<String> {
    let flag = |key: &str| obj.get(key) == Some(&Value::Bool(true));
    let mut out = Vec::new();
    if let Some(min) = obj.get("minimum").and_then(Value::as_f64) {
        if flag("exclusiveMinimum") && x <= min {
            out.push(format!("{x} must be greater than {min}"));
        } else if x < min {
            out.push(format!("{x} is below the minimum {min}"));
        }
    }
    if let Some(max) = obj.get("maximum").and_then(Value::as_f64) {
        if flag("exclusiveMaximum") && x >= max {
            out.push(format!("{x} must be less than {max}"));
        } else if x > max {
            out.push(format!("{x} is above the maximum {max}"));
        }
    }
    // The numeric forms (JSON Schema 2019-09 and OpenAPI 3.1).
    if let Some(min) = obj.get("exclusiveMinimum").and_then(Value::as_f64) {
        if x <= min {
            out.push(format!("{x} must be greater than {min}"));
        }
    }
    if let Some(max) = obj.get("exclusiveMaximum").and_then(Value::as_f64) {
        if x >= max {
            out.push(format!("{x} must be less than {max}"));
        }
    }
    out
}

/// A name for an alternative in an error message: the schema it refers to, or its title.
fn label(schema: &Value) -> String {
    let named = schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.rsplit('/').next())
        .or_else(|| schema.get("title").and_then(Value::as_str));
    named.map_or_else(|| "an unnamed schema".to_owned(), |n| format!("`{n}`"))
}

impl<'a> Validator<'a> {
    fn resolve(&self, reference: &str) -> Option<&'a Value> {
        self.root.pointer(reference.strip_prefix('#')?)
    }

    /// Whether `v` is valid against `schema`; with `errs`, every failure is recorded as
    /// `path: reason`. `anchor` is the outermost schema that declared `$recursiveAnchor`.
    pub(crate) fn check(
        &self,
        schema: &'a Value,
        v: &Value,
        path: &str,
        anchor: Option<&'a Value>,
        mut errs: Option<&mut Vec<String>>,
    ) -> bool {
        let obj = match schema {
            Value::Object(obj) => obj,
            Value::Bool(false) => {
                if let Some(e) = errs {
                    e.push(format!("{path}: no value is allowed here"));
                }
                return false;
            }
            // `true`, or anything that is not a schema, allows everything.
            _ => return true,
        };
        // OpenAPI 3.0: `nullable` adds null to whatever else the schema allows.
        if v.is_null() && obj.get("nullable") == Some(&Value::Bool(true)) {
            return true;
        }
        let anchor = match anchor {
            None if obj.get("$recursiveAnchor") == Some(&Value::Bool(true)) => Some(schema),
            other => other,
        };
        let mut ok = true;
        macro_rules! fail {
            ($($arg:tt)*) => {{
                ok = false;
                match errs.as_deref_mut() {
                    Some(e) => e.push(format!("{path}: {}", format_args!($($arg)*))),
                    None => return false,
                }
            }};
        }
        macro_rules! sub {
            ($schema:expr, $value:expr, $path:expr) => {{
                let path = if errs.is_some() { $path } else { String::new() };
                if !self.check($schema, $value, &path, anchor, errs.as_deref_mut()) {
                    ok = false;
                    if errs.is_none() {
                        return false;
                    }
                }
            }};
        }

        if let Some(t) = obj.get("type") {
            let names: Vec<&str> = match t {
                Value::String(s) => vec![s.as_str()],
                Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !names.is_empty() && !names.iter().any(|n| type_matches(n, v)) {
                if let Some(e) = errs {
                    e.push(format!(
                        "{path}: expected {}, got {}",
                        names.join(" or "),
                        kind(v)
                    ));
                }
                // The other keywords would only repeat that the value has the wrong shape.
                return false;
            }
        }
        if let Some(reference) = obj.get("$ref").and_then(Value::as_str) {
            match self.resolve(reference) {
                Some(target) => sub!(target, v, path.to_owned()),
                None => fail!("the description's `$ref` `{reference}` resolves to nothing"),
            }
        }
        if obj.contains_key("$recursiveRef") {
            if let Some(target) = anchor {
                sub!(target, v, path.to_owned());
            }
        }
        if let Some(Value::Array(allowed)) = obj.get("enum") {
            if !allowed.contains(v) {
                fail!(
                    "{} is not one of {}",
                    short(v),
                    short(&Value::Array(allowed.clone()))
                );
            }
        }
        if let Some(c) = obj.get("const") {
            if c != v {
                fail!("{} is not {}", short(v), short(c));
            }
        }
        match v {
            Value::Number(n) => {
                if let Some(x) = n.as_f64() {
                    for reason in bounds(obj, x) {
                        fail!("{reason}");
                    }
                }
            }
            Value::String(s) => {
                let len = s.chars().count() as u64;
                if let Some(min) = obj.get("minLength").and_then(Value::as_u64) {
                    if len < min {
                        fail!("{len} characters; at least {min} are required");
                    }
                }
                if let Some(max) = obj.get("maxLength").and_then(Value::as_u64) {
                    if len > max {
                        fail!("{len} characters; at most {max} are allowed");
                    }
                }
                if let Some(p) = obj.get("pattern").and_then(Value::as_str) {
                    match self.patterns.matches(p, s) {
                        Some(true) => {}
                        Some(false) => fail!("{} does not match `{p}`", short(v)),
                        None => fail!("the description's pattern `{p}` does not compile"),
                    }
                }
            }
            Value::Array(items) => {
                let len = items.len() as u64;
                if let Some(min) = obj.get("minItems").and_then(Value::as_u64) {
                    if len < min {
                        fail!("{len} items; at least {min} are required");
                    }
                }
                if let Some(max) = obj.get("maxItems").and_then(Value::as_u64) {
                    if len > max {
                        fail!("{len} items; at most {max} are allowed");
                    }
                }
                if let Some(item_schema) = obj.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        sub!(item_schema, item, format!("{path}[{i}]"));
                    }
                }
            }
            Value::Object(map) => {
                let len = map.len() as u64;
                if let Some(min) = obj.get("minProperties").and_then(Value::as_u64) {
                    if len < min {
                        fail!("{len} properties; at least {min} are required");
                    }
                }
                if let Some(max) = obj.get("maxProperties").and_then(Value::as_u64) {
                    if len > max {
                        fail!("{len} properties; at most {max} are allowed");
                    }
                }
                if let Some(Value::Array(required)) = obj.get("required") {
                    for name in required.iter().filter_map(Value::as_str) {
                        if !map.contains_key(name) {
                            fail!("missing required property `{name}`");
                        }
                    }
                }
                let props = obj.get("properties").and_then(Value::as_object);
                let extra = obj.get("additionalProperties");
                let names = obj.get("propertyNames");
                for (key, value) in map {
                    if let Some(names) = names {
                        sub!(
                            names,
                            &Value::String(key.clone()),
                            format!("{path}.{key} (name)")
                        );
                    }
                    match props.and_then(|p| p.get(key)) {
                        Some(prop) => sub!(prop, value, format!("{path}.{key}")),
                        None => match extra {
                            Some(Value::Bool(false)) => fail!("unknown property `{key}`"),
                            Some(extra @ Value::Object(_)) => {
                                sub!(extra, value, format!("{path}.{key}"));
                            }
                            _ => {}
                        },
                    }
                }
            }
            Value::Null | Value::Bool(_) => {}
        }
        if let Some(Value::Array(all)) = obj.get("allOf") {
            for branch in all {
                sub!(branch, v, path.to_owned());
            }
        }
        // `oneOf` is read as `anyOf`: the description's lists overlap.
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = obj.get(key) {
                if !branches
                    .iter()
                    .any(|b| self.check(b, v, path, anchor, None))
                {
                    ok = false;
                    match errs.as_deref_mut() {
                        Some(e) => self.explain_none(branches, v, path, anchor, e),
                        None => return false,
                    }
                }
            }
        }
        if let Some(not) = obj.get("not") {
            if self.check(not, v, path, anchor, None) {
                fail!("must not match {}", short(not));
            }
        }
        ok
    }

    /// Records that `v` matches none of `branches`, with the failures of the branch it came
    /// closest to: one whose discriminating `type` property it satisfies, then one whose failures
    /// lie deeper than the value itself, then the one with the fewest.
    fn explain_none(
        &self,
        branches: &'a [Value],
        v: &Value,
        path: &str,
        anchor: Option<&'a Value>,
        errs: &mut Vec<String>,
    ) {
        let discriminator = format!("{path}.type:");
        let own = format!("{path}:");
        let closest = branches
            .iter()
            .map(|b| {
                let mut found = Vec::new();
                self.check(b, v, path, anchor, Some(&mut found));
                let wrong_type = found.iter().any(|e| e.starts_with(&discriminator));
                let shallow = found.iter().any(|e| e.starts_with(&own));
                ((wrong_type, shallow, found.len()), b, found)
            })
            .min_by_key(|(score, _, _)| *score);
        match closest {
            Some((_, branch, found)) => {
                errs.push(format!(
                    "{path}: matches none of {} alternatives; closest is {}:",
                    branches.len(),
                    label(branch)
                ));
                errs.extend(found.into_iter().map(|e| format!("  {e}")));
            }
            None => errs.push(format!(
                "{path}: an empty list of alternatives matches nothing"
            )),
        }
    }
}
