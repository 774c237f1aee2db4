//! Instances of a JSON Schema: one walk that turns a schema of the description into a value the
//! schema accepts, choosing at random wherever the schema leaves a choice.
//!
//! The keywords are the ones [`crate::schema`] checks: `$ref` (and `$recursiveRef`), `allOf`
//! (the branches' properties merged into one object), `anyOf` / `oneOf` (one branch, a `null`
//! branch less often than the others), `enum`, `const`, `nullable`, `type` (a name or a list),
//! `properties` / `required` (every required property and a random subset of the others),
//! `additionalProperties` (a map's entries; unknown extra fields where the schema allows them),
//! `propertyNames`, `minProperties` / `maxProperties`, `items` with `minItems` / `maxItems`,
//! `minLength` / `maxLength`, `pattern` (the description's few, kept simple), `format` (`uri`),
//! `minimum` / `maximum`. Beyond a depth the walk takes the shortest way out: required properties
//! only, the fewest items, scalar branches.
//!
//! Every choice among alternatives is recorded as covered, so that a run can say which branches
//! of the description it reached (see [`Walker::covered`] and [`alternatives`]).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Number, Value};

use super::Rng;
use crate::schema::Patterns;

/// Deeper than this, the walk only closes what it has opened.
const DEEP: usize = 7;

/// Words the generated text is made of: prose, code and a little of everything a tokenizer
/// treats apart (CJK, emoji, punctuation, digits).
#[rustfmt::skip]
const WORDS: &[&str] = &[
    // Words the mock upstream acts on are among them: `recall` has it call `loom_recall` (a
    // hidden round through Loom), `parallel` has it call two tools at once.
    "the", "build", "failed", "because", "module", "returns", "an", "error", "when", "reading",
    "config", "file", "please", "check", "src/main.rs", "line", "42", "fn", "main()", "{", "}",
    "let", "x", "=", "Ok(())", "test", "passed", "warning:", "unused", "variable", "README.md",
    "cargo", "run", "--release", "日本語", "テスト", "数据", "🙂", "naïve", "café", "0x1f", "3.14", "TODO",
    "fix", "the", "bug", "in", "parser", "and", "then", "retry", "quickly", "recall", "parallel",
];

/// Keys of unknown extra fields: fields a provider may add tomorrow.
const EXTRA_KEYS: &[&str] = &[
    "x_future_field",
    "experimental_flag",
    "client_note",
    "trace_tag",
];

/// A schema walk over one description.
#[derive(Debug)]
pub struct Walker<'a> {
    root: &'a Value,
    patterns: &'a Patterns,
    /// The walk's randomness.
    pub rng: Rng,
    /// The chance an optional property is given.
    pub optional: f64,
    /// The chance an object whose schema does not forbid it gets an unknown extra field.
    pub extra: f64,
    /// The chance a nullable value (or an `anyOf` with a `null` branch) is `null`.
    pub null: f64,
    covered: BTreeSet<String>,
}

/// Where the walk is: the component it is in and the path inside it (for coverage labels), how
/// deep, and the schema a `$recursiveRef` goes back to.
#[derive(Debug, Clone)]
struct At<'a> {
    label: String,
    depth: usize,
    anchor: Option<&'a Value>,
}

impl<'a> At<'a> {
    fn child(&self, part: &str) -> Self {
        Self {
            label: format!("{}{part}", self.label),
            depth: self.depth + 1,
            anchor: self.anchor,
        }
    }
}

impl<'a> Walker<'a> {
    /// A walk over the description `root` (its `components.schemas` hold the named schemas).
    pub(crate) fn new(root: &'a Value, patterns: &'a Patterns, seed: u64) -> Self {
        Self {
            root,
            patterns,
            rng: Rng::new(seed),
            optional: 0.4,
            extra: 0.03,
            null: 0.1,
            covered: BTreeSet::new(),
        }
    }

    /// The alternatives chosen so far, as `Component.path => branch`.
    pub fn covered(&self) -> &BTreeSet<String> {
        &self.covered
    }

    /// Records a choice the caller made itself (a conversation's shape, say).
    pub fn cover(&mut self, label: impl Into<String>) {
        self.covered.insert(label.into());
    }

    /// An instance of the component schema `name`.
    pub fn component(&mut self, name: &str) -> Value {
        self.component_without(name, &[])
    }

    /// An instance of the component schema `name` (an object) without the properties `skip`,
    /// which the caller fills itself.
    pub fn component_without(&mut self, name: &str, skip: &[&str]) -> Value {
        let Some(schema) = self.schema(name) else {
            return Value::Null;
        };
        let at = At {
            label: name.to_owned(),
            depth: 0,
            anchor: None,
        };
        self.value(schema, &at, skip)
    }

    fn schema(&self, name: &str) -> Option<&'a Value> {
        self.root.pointer(&format!("/components/schemas/{name}"))
    }

    fn resolve(&self, reference: &str) -> Option<&'a Value> {
        self.root.pointer(reference.strip_prefix('#')?)
    }

    /// Text of `min..=max` words.
    pub fn words(&mut self, min: usize, max: usize) -> String {
        let n = self.rng.range(min, max);
        let mut out = String::new();
        for i in 0..n {
            if i > 0 {
                out.push(' ');
            }
            let word: &&str = self.rng.pick(WORDS);
            out.push_str(word);
        }
        out
    }

    /// A name of letters, digits and underscores.
    pub fn ident(&mut self) -> String {
        const HEADS: &[&str] = &[
            "read", "write", "list", "run", "search", "get", "edit", "fetch",
        ];
        const TAILS: &[&str] = &[
            "file", "dir", "shell", "web", "issue", "page", "notes", "db",
        ];
        format!("{}_{}", self.rng.pick(HEADS), self.rng.pick(TAILS))
    }

    fn value(&mut self, schema: &'a Value, at: &At<'a>, skip: &[&str]) -> Value {
        let obj = match schema {
            Value::Object(obj) => obj,
            // `true` (or anything that is not a schema) allows everything.
            _ => return self.any(at),
        };
        if obj.get("nullable") == Some(&Value::Bool(true)) && self.rng.chance(self.null) {
            return Value::Null;
        }
        let mut at = at.clone();
        if obj.get("$recursiveAnchor") == Some(&Value::Bool(true)) && at.anchor.is_none() {
            at.anchor = Some(schema);
        }
        if let Some(c) = obj.get("const") {
            return c.clone();
        }
        if let Some(Value::Array(allowed)) = obj.get("enum") {
            if !allowed.is_empty() {
                let i = self.rng.below(allowed.len());
                return allowed[i].clone();
            }
        }
        if obj.contains_key("allOf") {
            return self.all_of(obj, &at, skip);
        }
        if let Some(reference) = obj.get("$ref").and_then(Value::as_str) {
            if let Some(target) = self.resolve(reference) {
                let name = reference.rsplit('/').next().unwrap_or(reference);
                let inner = At {
                    label: name.to_owned(),
                    depth: at.depth + 1,
                    anchor: at.anchor,
                };
                return self.value(target, &inner, skip);
            }
        }
        if obj.contains_key("$recursiveRef") {
            if let Some(anchor) = at.anchor {
                return self.value(anchor, &at.child("^"), skip);
            }
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = obj.get(key) {
                if let Some(branch) = self.branch(branches, &at) {
                    return self.value(branch, &at, skip);
                }
            }
        }
        let ty = self.pick_type(obj);
        match ty {
            "object" => self.object(&[obj], &at, skip),
            "array" => self.array(obj, &at),
            "string" => self.string(obj),
            "integer" => self.integer(obj),
            "number" => self.number(obj),
            "boolean" => Value::Bool(self.rng.chance(0.5)),
            "null" => Value::Null,
            _ => self.any(&at),
        }
    }

    /// One branch of an `anyOf` / `oneOf`; `null` branches are taken with the walk's `null`
    /// chance, and deep down the scalar branches are preferred.
    fn branch(&mut self, branches: &'a [Value], at: &At<'a>) -> Option<&'a Value> {
        if branches.is_empty() {
            return None;
        }
        let is_null = |b: &Value| b.get("type").and_then(Value::as_str) == Some("null");
        let others: Vec<usize> = (0..branches.len())
            .filter(|&i| !is_null(&branches[i]))
            .collect();
        let nulls: Vec<usize> = (0..branches.len())
            .filter(|&i| is_null(&branches[i]))
            .collect();
        let chosen = if others.is_empty() || (!nulls.is_empty() && self.rng.chance(self.null)) {
            nulls[0]
        } else if at.depth > DEEP {
            let scalar = others.iter().copied().find(|&i| {
                matches!(
                    branches[i].get("type").and_then(Value::as_str),
                    Some("string" | "integer" | "number" | "boolean")
                )
            });
            scalar.unwrap_or(others[0])
        } else {
            others[self.rng.below(others.len())]
        };
        self.covered.insert(format!(
            "{} => {}",
            at.label,
            branch_label(&branches[chosen], chosen)
        ));
        Some(&branches[chosen])
    }

    fn pick_type(&mut self, obj: &Map<String, Value>) -> &'static str {
        let names: Vec<&str> = match obj.get("type") {
            Some(Value::String(s)) => vec![s.as_str()],
            Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let known = |n: &str| -> Option<&'static str> {
            [
                "object", "array", "string", "integer", "number", "boolean", "null",
            ]
            .into_iter()
            .find(|k| *k == n)
        };
        let names: Vec<&'static str> = names.into_iter().filter_map(known).collect();
        match names.len() {
            0 if obj.contains_key("properties") || obj.contains_key("additionalProperties") => {
                "object"
            }
            0 if obj.contains_key("items") => "array",
            0 if obj.contains_key("minLength")
                || obj.contains_key("maxLength")
                || obj.contains_key("pattern") =>
            {
                "string"
            }
            0 => "any",
            1 => names[0],
            _ => {
                let non_null: Vec<&'static str> =
                    names.iter().copied().filter(|n| *n != "null").collect();
                if non_null.is_empty() || self.rng.chance(self.null) {
                    "null"
                } else {
                    non_null[self.rng.below(non_null.len())]
                }
            }
        }
    }

    /// An object for the schemas `parts` together (one, or the branches of an `allOf`).
    fn object(&mut self, parts: &[&'a Map<String, Value>], at: &At<'a>, skip: &[&str]) -> Value {
        // A property an `allOf` defines more than once must satisfy every definition.
        let mut props: BTreeMap<&'a str, Vec<&'a Value>> = BTreeMap::new();
        let mut order: Vec<&'a str> = Vec::new();
        let mut required: BTreeSet<&'a str> = BTreeSet::new();
        let mut closed = false;
        let mut additional: Option<&'a Value> = None;
        let mut max_props = None;
        let mut names_schema = None;
        for obj in parts {
            if let Some(Value::Object(p)) = obj.get("properties") {
                for (k, v) in p {
                    let defs = props.entry(k.as_str()).or_default();
                    if defs.is_empty() {
                        order.push(k.as_str());
                    }
                    defs.push(v);
                }
            }
            if let Some(Value::Array(r)) = obj.get("required") {
                required.extend(r.iter().filter_map(Value::as_str));
            }
            match obj.get("additionalProperties") {
                Some(Value::Bool(false)) => closed = true,
                Some(extra @ Value::Object(o)) if !o.is_empty() => additional = Some(extra),
                _ => {}
            }
            if let Some(n) = obj.get("maxProperties").and_then(Value::as_u64) {
                max_props = Some(n as usize);
            }
            if let Some(n) = obj.get("propertyNames") {
                names_schema = Some(n);
            }
        }
        let deep = at.depth > DEEP;
        let mut out = Map::new();
        for name in &order {
            if skip.contains(name) {
                continue;
            }
            let is_required = required.contains(name);
            if !is_required && (deep || !self.rng.chance(self.optional)) {
                continue;
            }
            let v = self.property(name, &props[name], at);
            out.insert((*name).to_owned(), v);
        }
        // Required properties the schema does not describe (the description has a few).
        for name in &required {
            if !props.contains_key(name) && !skip.contains(name) {
                out.insert((*name).to_owned(), Value::String(self.words(1, 2)));
            }
        }
        let room = max_props.map_or(3, |m| m.saturating_sub(out.len()).min(3));
        if let Some(extra) = additional {
            // A map: a few entries of the schema's values.
            if !deep && room > 0 {
                let n = self.rng.range(0, room);
                for i in 0..n {
                    let key = match names_schema.and_then(|s| s.get("maxLength")) {
                        Some(_) => format!("k{i}"),
                        None => format!("{}_{i}", self.ident()),
                    };
                    let v = self.value(extra, &at.child("{}"), &[]);
                    out.insert(key, v);
                }
            }
        } else if !closed && !deep && self.rng.chance(self.extra) {
            let key: &&str = self.rng.pick(EXTRA_KEYS);
            let key = (*key).to_owned();
            if !props.contains_key(key.as_str()) {
                let v = match self.rng.below(3) {
                    0 => Value::String(self.words(1, 3)),
                    1 => Value::from(self.rng.range(0, 99) as u64),
                    _ => serde_json::json!({"note": self.words(1, 2)}),
                };
                out.insert(key, v);
                self.covered
                    .insert(format!("{} => unknown field", at.label));
            }
        }
        Value::Object(out)
    }

    /// A value for property `name` that every one of its definitions accepts: generated from
    /// the most specific one (the last), and from the others in turn if that one's does not
    /// satisfy them all.
    fn property(&mut self, name: &str, defs: &[&'a Value], at: &At<'a>) -> Value {
        let at = at.child(&format!(".{name}"));
        let mut first = None;
        for _ in 0..4 {
            for schema in defs.iter().rev() {
                let v = self.value(schema, &at, &[]);
                let v = self.hinted(name, schema, v);
                if defs.len() == 1 || defs.iter().all(|d| self.satisfies(d, &v)) {
                    return v;
                }
                first.get_or_insert(v);
            }
        }
        // The validator of the generated request will say which definition it breaks.
        first.unwrap_or(Value::Null)
    }

    fn satisfies(&self, schema: &'a Value, v: &Value) -> bool {
        let validator = crate::schema::Validator {
            root: self.root,
            patterns: self.patterns,
        };
        validator.check(schema, v, "", None, None)
    }

    fn all_of(&mut self, obj: &'a Map<String, Value>, at: &At<'a>, skip: &[&str]) -> Value {
        let mut parts = vec![obj];
        let mut stack: Vec<&'a Value> = obj
            .get("allOf")
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        while let Some(part) = stack.pop() {
            let Some(p) = part.as_object() else { continue };
            if let Some(target) = p
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| self.resolve(r))
            {
                stack.push(target);
            }
            if let Some(Value::Array(more)) = p.get("allOf") {
                stack.extend(more.iter());
            }
            parts.push(p);
        }
        // The later (more specific) definitions of a property win: the caller's own properties
        // come last.
        parts.reverse();
        self.object(&parts, at, skip)
    }

    fn array(&mut self, obj: &'a Map<String, Value>, at: &At<'a>) -> Value {
        let min = obj.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
        let max = obj
            .get("maxItems")
            .and_then(Value::as_u64)
            .map_or(usize::MAX, |m| m as usize);
        let wanted = if at.depth > DEEP {
            min
        } else {
            min + self.rng.range(0, 3)
        };
        let n = wanted.min(max).max(min);
        let items = obj.get("items");
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(match items {
                Some(schema) => self.value(schema, &at.child("[]"), &[]),
                None => Value::String(self.words(1, 2)),
            });
        }
        Value::Array(out)
    }

    fn string(&mut self, obj: &'a Map<String, Value>) -> Value {
        let min = obj.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
        let max = obj
            .get("maxLength")
            .and_then(Value::as_u64)
            .map_or(usize::MAX, |m| m as usize);
        if let Some(pattern) = obj.get("pattern").and_then(Value::as_str) {
            return Value::String(self.matching(pattern, min, max));
        }
        let mut s = match obj.get("format").and_then(Value::as_str) {
            Some("uri") => format!("https://example.com/{}", self.ident()),
            _ => self.words(1, 8),
        };
        fit_length(&mut s, min, max);
        Value::String(s)
    }

    /// A string matching `pattern`: the description's patterns are an identifier and a fixed
    /// prefix with a run of characters; others get a few candidates, checked.
    fn matching(&mut self, pattern: &str, min: usize, max: usize) -> String {
        let mut candidates = vec![self.ident()];
        if let Some(rest) = pattern.strip_prefix('^') {
            // `^prefix_[a-z0-9]{N}$`
            if let Some((prefix, tail)) = rest.split_once('[') {
                let n = tail
                    .split_once('{')
                    .and_then(|(_, t)| t.split_once('}'))
                    .and_then(|(n, _)| n.parse::<usize>().ok())
                    .unwrap_or(8);
                let run: String = (0..n)
                    .map(|_| {
                        char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[self.rng.below(36)])
                    })
                    .collect();
                candidates.push(format!("{prefix}{run}"));
            }
        }
        candidates.push("a".to_owned());
        for mut c in candidates {
            fit_length(&mut c, min, max);
            if self.patterns.matches(pattern, &c) == Some(true) {
                return c;
            }
        }
        // The validator will name the pattern the walk could not meet.
        self.ident()
    }

    fn integer(&mut self, obj: &Map<String, Value>) -> Value {
        let (lo, hi) = bounds(obj, 1.0, 4096.0);
        let lo = lo.ceil() as i64;
        let hi = (hi.floor() as i64).max(lo);
        let span = (hi - lo).min(i64::from(u32::MAX)) as usize;
        Value::from(lo + self.rng.range(0, span) as i64)
    }

    fn number(&mut self, obj: &Map<String, Value>) -> Value {
        let (lo, hi) = bounds(obj, 0.0, 1.0);
        let steps = self.rng.range(0, 10) as f64 / 10.0;
        let x = ((lo + (hi - lo) * steps) * 100.0).round() / 100.0;
        let x = x.clamp(lo, hi);
        Number::from_f64(x).map_or(Value::from(0), Value::Number)
    }

    /// Any value: a scalar mostly, or a small object.
    fn any(&mut self, at: &At<'a>) -> Value {
        match self.rng.below(4) {
            0 => Value::from(self.rng.range(0, 100) as u64),
            1 if at.depth <= DEEP => serde_json::json!({"value": self.words(1, 2)}),
            2 => Value::Bool(true),
            _ => Value::String(self.words(1, 3)),
        }
    }

    /// Some properties read better with a realistic value than with words: URLs, base64
    /// payloads, JSON arguments. Only plain strings the schema left free are replaced.
    fn hinted(&mut self, name: &str, schema: &Value, v: Value) -> Value {
        let free = schema.get("enum").is_none() && schema.get("pattern").is_none();
        let Value::String(_) = v else { return v };
        if !free {
            return v;
        }
        let base64 = || "aGVsbG8gd29ybGQ=".to_owned();
        match name {
            "url" | "image_url" if self.rng.chance(0.5) => {
                Value::String(format!("data:image/png;base64,{}", base64()))
            }
            "url" | "image_url" => {
                Value::String(format!("https://example.com/{}.png", self.ident()))
            }
            "data" | "file_data" | "encrypted_content" => Value::String(base64()),
            "arguments" => Value::String(format!("{{\"path\": \"{}\"}}", self.ident())),
            // OpenAI wants a participant's name to be an identifier, which its description
            // does not say.
            "name" => Value::String(self.ident()),
            _ => v,
        }
    }
}

/// The numeric bounds of a schema, `lo`/`hi` when it gives none.
fn bounds(obj: &Map<String, Value>, lo: f64, hi: f64) -> (f64, f64) {
    let min = obj.get("minimum").and_then(Value::as_f64);
    let max = obj.get("maximum").and_then(Value::as_f64);
    let exclusive = |k: &str| obj.get(k) == Some(&Value::Bool(true));
    let mut a = min.unwrap_or(lo);
    let mut b = max.unwrap_or(if min.is_some() { a + hi } else { hi });
    if exclusive("exclusiveMinimum") {
        a += 1.0;
    }
    if exclusive("exclusiveMaximum") {
        b -= 1.0;
    }
    if let Some(x) = obj.get("exclusiveMinimum").and_then(Value::as_f64) {
        a = a.max(x + 1.0);
    }
    if let Some(x) = obj.get("exclusiveMaximum").and_then(Value::as_f64) {
        b = b.min(x - 1.0);
    }
    (a, b.max(a))
}

/// Pads or cuts `s` to `min..=max` characters.
fn fit_length(s: &mut String, min: usize, max: usize) {
    let len = s.chars().count();
    if len > max {
        *s = s.chars().take(max).collect();
    }
    while s.chars().count() < min {
        s.push('x');
    }
}

/// A name for a branch: the schema it refers to, its title, its type or its enum's value.
fn branch_label(schema: &Value, index: usize) -> String {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        return r.rsplit('/').next().unwrap_or(r).to_owned();
    }
    if let Some(t) = schema.get("title").and_then(Value::as_str) {
        return t.to_owned();
    }
    if let Some(Value::Array(e)) = schema.get("enum") {
        if e.len() == 1 {
            return format!("enum {}", e[0]);
        }
    }
    match schema.get("type") {
        Some(Value::String(t)) => t.clone(),
        _ => format!("#{index}"),
    }
}

/// Every alternative the walk could record from the component `name` down: the coverage a run
/// is measured against. Components are visited once each; labels restart at each component, as
/// the walk's do.
pub fn alternatives(root: &Value, name: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut seen = BTreeSet::new();
    let mut todo = vec![name.to_owned()];
    while let Some(component) = todo.pop() {
        if !seen.insert(component.clone()) {
            continue;
        }
        let Some(schema) = root.pointer(&format!("/components/schemas/{component}")) else {
            continue;
        };
        list(root, schema, &component, &mut out, &mut todo);
    }
    out
}

fn list(
    root: &Value,
    schema: &Value,
    label: &str,
    out: &mut BTreeSet<String>,
    todo: &mut Vec<String>,
) {
    let Some(obj) = schema.as_object() else {
        return;
    };
    if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
        if let Some(n) = r.strip_prefix("#/components/schemas/") {
            todo.push(n.to_owned());
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = obj.get(key) {
            for (i, b) in branches.iter().enumerate() {
                out.insert(format!("{label} => {}", branch_label(b, i)));
                list(root, b, label, out, todo);
            }
        }
    }
    // The walk merges an `allOf`'s branches into one object under the current label.
    if let Some(Value::Array(all)) = obj.get("allOf") {
        for b in all {
            let target = b
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| root.pointer(r.strip_prefix('#')?));
            list(root, target.unwrap_or(b), label, out, todo);
        }
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (k, v) in props {
            list(root, v, &format!("{label}.{k}"), out, todo);
        }
    }
    if let Some(items) = obj.get("items") {
        list(root, items, &format!("{label}[]"), out, todo);
    }
    if let Some(extra @ Value::Object(_)) = obj.get("additionalProperties") {
        list(root, extra, &format!("{label}{{}}"), out, todo);
    }
}
