//! Valid bodies for every endpoint, and the strategies that mutate them: fields removed or
//! retyped, huge or invalid strings, arrays cut or duplicated, random bytes; headers, path
//! segments and query strings.

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{json, Value};

use axum::http::Method;

use super::{Case, Shape, BODY_LIMIT};

// ---------------------------------------------------------------------------------------------
// Valid bodies, each varied by a tag so that ids and sessions differ between cases.

pub(super) fn chat_tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "read_file", "description": "Read a file",
         "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "bash", "description": "Run a command",
         "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}
    ])
}

pub(super) fn chat_body(n: u32) -> Value {
    json!({"model": "gpt-4o", "temperature": 0, "tools": chat_tools(), "stream": n % 3 == 1,
        "messages": [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": format!("read main.rs and lib.rs ({n})")},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("call_{n}a"), "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"main.rs\"}"}},
            {"id": format!("call_{n}b"), "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"lib.rs\"}"}}]},
        {"role": "tool", "tool_call_id": format!("call_{n}a"), "content": "fn main() {}"},
        {"role": "tool", "tool_call_id": format!("call_{n}b"), "content": "pub fn lib() {}"},
        {"role": "user", "content": "thanks, now summarise"}]})
}

pub(super) fn responses_body(n: u32) -> Value {
    json!({"model": "gpt-4o", "instructions": "Be brief.", "stream": n % 3 == 1,
        "tools": [{"type": "function", "name": "read_file", "description": "Read a file",
                   "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}],
        "input": [
        {"type": "message", "role": "user", "content": format!("read main.rs ({n})")},
        {"type": "function_call", "call_id": format!("call_{n}"), "name": "read_file", "arguments": "{\"path\":\"main.rs\"}"},
        {"type": "function_call_output", "call_id": format!("call_{n}"), "output": "fn main() {}"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]}]})
}

pub(super) fn messages_body(n: u32) -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 256, "system": "Be careful.",
        "stream": n % 3 == 1,
        "tools": [{"name": "read_file", "description": "Read a file",
                   "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}],
        "messages": [
        {"role": "user", "content": format!("read main.rs ({n})")},
        {"role": "assistant", "content": [{"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": format!("toolu_{n}"), "name": "read_file", "input": {"path": "main.rs"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("toolu_{n}"), "content": "fn main() {}"}]}]})
}

pub(super) fn count_tokens_body(n: u32) -> Value {
    let mut body = messages_body(n);
    if let Some(o) = body.as_object_mut() {
        o.remove("max_tokens");
        o.remove("stream");
    }
    body
}

pub(super) fn tool_result(call: &str, text: &str, ts: u64) -> Value {
    use sha2::Digest;
    json!({"ts_ms": ts, "kind": "tool_result", "call_id": call, "tool_name": "bash",
        "content": {"text": text},
        "stats": {"bytes": text.len(), "lines": text.lines().count(),
                  "sha256": hex::encode(sha2::Sha256::digest(text.as_bytes())), "content_type": "text"}})
}

/// Session `s{n}` (`s1` for the seed: `create_body(0)`), with a long shell output.
pub(super) fn create_body(n: u32) -> Value {
    let long = "file.txt\n".repeat(400);
    json!({"id": format!("s{}", n + 1), "agent": "coder", "events": [
        {"ts_ms": 1, "kind": "system", "content": "You are careful."},
        {"ts_ms": 2, "kind": "user", "content": "List the files."},
        {"ts_ms": 3, "kind": "assistant", "tool_calls": [{"id": format!("c{n}"), "name": "bash", "arguments": "{\"command\":\"ls\"}"}]},
        tool_result(&format!("c{n}"), &long, 4),
        {"ts_ms": 5, "kind": "assistant", "content": "There are many files."}]})
}

pub(super) fn append_body(n: u32) -> Value {
    json!({"events": [
        {"ts_ms": 10, "kind": "user", "content": format!("more ({n})")},
        {"ts_ms": 11, "kind": "assistant", "tool_calls": [{"id": format!("a{n}"), "name": "bash", "arguments": "{}"}]},
        tool_result(&format!("a{n}"), "ok", 12),
        {"ts_ms": 13, "kind": "assistant", "content": "done"}]})
}

pub(super) fn import_body(n: u32) -> Value {
    let mut body = chat_body(n);
    if let Some(o) = body.as_object_mut() {
        o.remove("tools");
        o.remove("stream");
        o.remove("temperature");
        o.remove("model");
    }
    body
}

pub(super) fn render_body() -> Value {
    json!({"model": "gpt-4o", "budget": 4000, "format": "openai-chat", "tools": chat_tools()})
}

pub(super) fn usage_body() -> Value {
    json!({"call": 1, "input_tokens": 900, "cached_input_tokens": 512, "output_tokens": 10})
}

// ---------------------------------------------------------------------------------------------
// Mutations of a valid body.

/// A value put in place of a node, or added beside it.
#[derive(Debug, Clone)]
pub(super) enum Leaf {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
    /// A string of this many characters.
    Huge(usize),
    /// Control, zero-width, BOM, non-characters and astral characters.
    Controls,
    EmptyArray,
    EmptyObject,
    /// Raw text spliced into the serialised body in place of the node.
    Raw(RawText),
}

/// What a valid `serde_json::Value` cannot hold, spliced in as bytes.
#[derive(Debug, Clone, Copy)]
pub(super) enum RawText {
    /// A string with bytes that are not UTF-8.
    BadUtf8,
    /// A string with an unpaired surrogate escape.
    LoneSurrogate,
    /// A number no integer or float type holds.
    HugeNumber,
    /// A number with more digits than any type holds.
    LongInteger,
    /// Arrays nested deeper than any parser allows.
    DeepNesting,
    /// An object with the same key twice.
    DuplicateKey,
}

impl RawText {
    const ALL: &[Self] = &[
        Self::BadUtf8,
        Self::LoneSurrogate,
        Self::HugeNumber,
        Self::LongInteger,
        Self::DeepNesting,
        Self::DuplicateKey,
    ];

    fn bytes(self) -> Vec<u8> {
        match self {
            Self::BadUtf8 => b"\"ok \xff\xfe\xc0\x80 \xed\xa0\x80 end\"".to_vec(),
            Self::LoneSurrogate => br#""a\ud800b""#.to_vec(),
            Self::HugeNumber => b"1e400".to_vec(),
            Self::LongInteger => b"184467440737095516160000".to_vec(),
            Self::DeepNesting => {
                let mut v = vec![b'['; 4000];
                v.extend(vec![b']'; 4000]);
                v
            }
            Self::DuplicateKey => br#"{"a": 1, "a": "two"}"#.to_vec(),
        }
    }
}

/// One change to a valid body. Positions pick a node by its index in a walk of the body, taken
/// modulo the number of candidates, so every generated number names some node.
#[derive(Debug, Clone)]
pub(super) enum Edit {
    /// Remove a node from its object or array.
    Remove(usize),
    /// Put a leaf in place of a node (a type change, a huge string, bad text).
    Replace(usize, Leaf),
    /// Keep only the first elements of an array.
    Truncate(usize, usize),
    /// Repeat an array's element (a duplicate tool call or result).
    Duplicate(usize, usize),
    /// Swap two elements of an array (a result before its call).
    Swap(usize, usize, usize),
    /// Add an unknown field to an object.
    Add(usize, String, Leaf),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Step {
    Key(String),
    Index(usize),
}

/// Every node below the root, in a walk's order.
pub(super) fn walk(v: &Value, here: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                here.push(Step::Key(k.clone()));
                out.push(here.clone());
                walk(child, here, out);
                here.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                here.push(Step::Index(i));
                out.push(here.clone());
                walk(child, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

pub(super) fn node_mut<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |node, step| match step {
        Step::Key(k) => node.get_mut(k.as_str()),
        Step::Index(i) => node.get_mut(*i),
    })
}

pub(super) fn pick(paths: &[Vec<Step>], at: usize) -> Option<&Vec<Step>> {
    (!paths.is_empty()).then(|| &paths[at % paths.len()])
}

/// Applies an edit; raw text is left as a marker string, replaced when serialised.
pub(super) fn apply(body: &mut Value, edit: &Edit, raws: &mut Vec<RawText>) {
    let mut all = Vec::new();
    walk(body, &mut Vec::new(), &mut all);
    let of = |pred: fn(&Value) -> bool, body: &Value| -> Vec<Vec<Step>> {
        let mut out: Vec<Vec<Step>> = all
            .iter()
            .filter(|p| {
                let mut b = body.clone();
                node_mut(&mut b, p).is_some_and(|n| pred(n))
            })
            .cloned()
            .collect();
        if pred(body) {
            out.insert(0, Vec::new());
        }
        out
    };
    match edit {
        Edit::Remove(at) => {
            if let Some(path) = pick(&all, *at) {
                let (last, parent) = path.split_last().unwrap_or((&Step::Index(0), &[]));
                match (node_mut(body, parent), last) {
                    (Some(Value::Object(m)), Step::Key(k)) => {
                        m.remove(k);
                    }
                    (Some(Value::Array(a)), Step::Index(i)) if *i < a.len() => {
                        a.remove(*i);
                    }
                    _ => {}
                }
            }
        }
        Edit::Replace(at, leaf) => {
            if let Some(path) = pick(&all, *at) {
                let value = leaf_value(leaf, raws);
                if let Some(node) = node_mut(body, path) {
                    *node = value;
                }
            }
        }
        Edit::Truncate(at, keep) => {
            let arrays = of(Value::is_array, body);
            if let Some(Value::Array(a)) = pick(&arrays, *at).and_then(|p| node_mut(body, p)) {
                let keep = if a.is_empty() { 0 } else { keep % a.len() };
                a.truncate(keep);
            }
        }
        Edit::Duplicate(at, i) => {
            let arrays = of(Value::is_array, body);
            if let Some(Value::Array(a)) = pick(&arrays, *at).and_then(|p| node_mut(body, p)) {
                if !a.is_empty() {
                    let i = i % a.len();
                    let copy = a[i].clone();
                    a.insert(i + 1, copy);
                }
            }
        }
        Edit::Swap(at, i, j) => {
            let arrays = of(Value::is_array, body);
            if let Some(Value::Array(a)) = pick(&arrays, *at).and_then(|p| node_mut(body, p)) {
                if !a.is_empty() {
                    let n = a.len();
                    a.swap(i % n, j % n);
                }
            }
        }
        Edit::Add(at, key, leaf) => {
            let objects = of(Value::is_object, body);
            let value = leaf_value(leaf, raws);
            if let Some(Value::Object(m)) = pick(&objects, *at).and_then(|p| node_mut(body, p)) {
                m.insert(key.clone(), value);
            }
        }
    }
}

/// Marks raw text with a string that cannot occur otherwise; see [`serialise`].
pub(super) const RAW_MARK: &str = "\u{E000}loom-raw-";

pub(super) fn leaf_value(leaf: &Leaf, raws: &mut Vec<RawText>) -> Value {
    match leaf {
        Leaf::Null => Value::Null,
        Leaf::Bool(b) => json!(b),
        Leaf::Int(i) => json!(i),
        Leaf::Float(f) => json!(f),
        Leaf::Text(s) => json!(s),
        Leaf::Huge(n) => json!("x".repeat(*n)),
        Leaf::Controls => json!("\u{0}\u{1}\u{8}\u{1b}[31m\u{7f}\r\n\t\u{200b}\u{feff}\u{fffe}\u{ffff}\u{10ffff}\u{202e}é"),
        Leaf::EmptyArray => json!([]),
        Leaf::EmptyObject => json!({}),
        Leaf::Raw(raw) => {
            raws.push(*raw);
            json!(format!("{RAW_MARK}{}", raws.len() - 1))
        }
    }
}

/// The body's bytes with every raw marker replaced by its raw text.
pub(super) fn serialise(body: &Value, raws: &[RawText]) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(body).unwrap();
    for (i, raw) in raws.iter().enumerate().rev() {
        let marker = serde_json::to_vec(&json!(format!("{RAW_MARK}{i}"))).unwrap();
        if let Some(at) = find(&bytes, &marker) {
            bytes.splice(at..at + marker.len(), raw.bytes());
        }
    }
    bytes
}

pub(super) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Strings that mean something somewhere in a request (roles, kinds, models).
#[rustfmt::skip]
pub(super) const WORDS: &[&str] = &[
    "", "user", "tool", "assistant", "system", "developer", "gpt-4o", "claude-sonnet-4-5",
    "function", "function_call", "function_call_output", "tool_use", "tool_result", "text",
];

pub(super) fn leaf() -> impl Strategy<Value = Leaf> {
    prop_oneof![
        Just(Leaf::Null),
        any::<bool>().prop_map(Leaf::Bool),
        any::<i64>().prop_map(Leaf::Int),
        select(&[-1, 0, i64::MAX, i64::MIN][..]).prop_map(Leaf::Int),
        select(&[1e308, -0.5, 0.1, f64::MIN_POSITIVE][..]).prop_map(Leaf::Float),
        ".{0,24}".prop_map(Leaf::Text),
        select(WORDS).prop_map(|s| Leaf::Text(s.to_owned())),
        (1usize..150_000).prop_map(Leaf::Huge),
        Just(Leaf::Controls),
        Just(Leaf::EmptyArray),
        Just(Leaf::EmptyObject),
        select(RawText::ALL).prop_map(Leaf::Raw),
    ]
}

pub(super) fn edit() -> impl Strategy<Value = Edit> {
    let at = 0usize..1000;
    prop_oneof![
        3 => at.clone().prop_map(Edit::Remove),
        4 => (at.clone(), leaf()).prop_map(|(a, l)| Edit::Replace(a, l)),
        2 => (at.clone(), 0usize..8).prop_map(|(a, k)| Edit::Truncate(a, k)),
        2 => (at.clone(), 0usize..8).prop_map(|(a, i)| Edit::Duplicate(a, i)),
        1 => (at.clone(), 0usize..8, 0usize..8).prop_map(|(a, i, j)| Edit::Swap(a, i, j)),
        1 => (at, "[a-z_]{1,12}", leaf()).prop_map(|(a, k, l)| Edit::Add(a, k, l)),
    ]
}

/// Whole bodies that are JSON but not an object, or not quite JSON.
#[rustfmt::skip]
pub(super) const BARE: &[&[u8]] = &[
    b"", b"null", b"[]", b"{}", b"\"text\"", b"12", b"\xef\xbb\xbf{}", b"{} {}", b"{\"model\":",
];

/// A body built from a valid one (`base(tag)`): as it is, mutated, cut short, or replaced by
/// random bytes, a bare JSON value, or a body over the size limit.
pub(super) fn body(base: fn(u32) -> Value) -> impl Strategy<Value = Vec<u8>> {
    let tag = 0u32..1_000_000;
    prop_oneof![
        2 => tag.clone().prop_map(move |n| serde_json::to_vec(&base(n)).unwrap()),
        8 => (tag.clone(), proptest::collection::vec(edit(), 1..4)).prop_map(move |(n, edits)| {
            let mut v = base(n);
            let mut raws = Vec::new();
            for e in &edits {
                apply(&mut v, e, &mut raws);
            }
            serialise(&v, &raws)
        }),
        1 => (tag.clone(), any::<prop::sample::Index>()).prop_map(move |(n, at)| {
            let bytes = serde_json::to_vec(&base(n)).unwrap();
            bytes[..at.index(bytes.len())].to_vec()
        }),
        1 => proptest::collection::vec(any::<u8>(), 0..256),
        1 => select(BARE).prop_map(<[u8]>::to_vec),
        1 => (tag, select(&[BODY_LIMIT + 1, BODY_LIMIT * 3][..])).prop_map(move |(n, size)| {
            let mut v = base(n);
            if let Some(o) = v.as_object_mut() {
                o.insert("padding".into(), json!("p".repeat(size)));
            }
            serde_json::to_vec(&v).unwrap()
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Headers, path segments and query strings.

/// Headers Loom reads or forwards.
#[rustfmt::skip]
pub(super) const HEADER_NAMES: &[&str] = &[
    "x-loom-session", "x-loom-mode", "x-loom-budget", "content-type", "authorization", "x-api-key",
    "anthropic-version", "anthropic-beta", "openai-organization", "accept",
];

/// Values that mean something to one of them, or almost do.
#[rustfmt::skip]
pub(super) const HEADER_VALUES: &[&str] = &[
    "p1", "s1", "fit", "observe", "FIT", "", "0", "-5", "1", "100", "99999999999999999999999",
    "1e3", "a/b", "../../etc", "p1~2", "p1~99", "~", "Bearer ", "Bearer lk_bogus",
    "application/json", "text/event-stream", "2023-06-01",
];

/// A value for one of the headers Loom reads or forwards.
pub(super) fn header() -> impl Strategy<Value = (String, Vec<u8>)> {
    let value = prop_oneof![
        select(HEADER_VALUES).prop_map(|s| s.as_bytes().to_vec()),
        "[ -~]{0,40}".prop_map(String::into_bytes),
        (1usize..9000).prop_map(|n| "s".repeat(n).into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..40),
    ];
    (select(HEADER_NAMES), value).prop_map(|(n, v)| (n.to_owned(), v))
}

pub(super) fn headers() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    proptest::collection::vec(header(), 0..4)
}

/// A path segment naming a session: known ones, unknown ones, and text that is no valid id.
pub(super) fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(&["s1", "p1"][..]).prop_map(str::to_owned),
        1 => "[a-zA-Z0-9._~-]{1,12}",
        1 => ".{1,16}".prop_map(|s| encode(&s)),
        1 => select(&["nope", "%ff%fe", "%00", "%2F", "..", "%2e%2e", "p1~2"][..]).prop_map(str::to_owned),
        1 => (1usize..5000).prop_map(|n| "s".repeat(n)),
    ]
}

/// Query values: numbers in and out of range, non-numbers, formats, and bad encodings.
#[rustfmt::skip]
pub(super) const QUERY_VALUES: &[&str] = &[
    "1", "2", "0", "-1", "18446744073709551616", "abc", "", "%ff", "%", "1.5", "s1", "openai",
    "anthropic", "responses", "bogus", "sha256%3A00",
];

/// A query string over `keys` (and a stray one), with numbers, non-numbers and bad encodings.
pub(super) fn query(keys: &'static [&'static str]) -> impl Strategy<Value = String> {
    let known = if keys.is_empty() {
        &["unknown"][..]
    } else {
        keys
    };
    let key = prop_oneof![
        6 => select(known),
        1 => Just("unknown"),
    ];
    let value = prop_oneof![
        select(QUERY_VALUES).prop_map(str::to_owned),
        ".{0,12}".prop_map(|s| encode(&s)),
    ];
    proptest::collection::vec((key, value), 0..4).prop_map(|pairs| {
        pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    })
}

/// Percent-encodes everything but unreserved characters.
pub(super) fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(super) fn case(
    method: Method,
    uri: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    shape: Shape,
) -> Case {
    Case {
        method,
        uri,
        headers,
        body,
        shape,
    }
}

/// A POST with a generated body to a fixed path.
pub(super) fn post(
    path: &'static str,
    base: fn(u32) -> Value,
    shape: Shape,
) -> impl Strategy<Value = Case> {
    (body(base), headers()).prop_map(move |(b, h)| case(Method::POST, path.to_owned(), h, b, shape))
}

/// A POST with a generated body to `/loom/v1/sessions/{id}/{tail}`.
pub(super) fn post_session(
    tail: &'static str,
    base: fn(u32) -> Value,
) -> impl Strategy<Value = Case> {
    (segment(), body(base), headers()).prop_map(move |(id, b, h)| {
        case(
            Method::POST,
            format!("/loom/v1/sessions/{id}{tail}"),
            h,
            b,
            Shape::Api,
        )
    })
}

/// A GET of `/loom/v1/sessions/{id}{tail}?{query over keys}`.
pub(super) fn get_session(
    tail: &'static str,
    keys: &'static [&'static str],
) -> impl Strategy<Value = Case> {
    (segment(), query(keys), headers()).prop_map(move |(id, q, h)| {
        let uri = if q.is_empty() {
            format!("/loom/v1/sessions/{id}{tail}")
        } else {
            format!("/loom/v1/sessions/{id}{tail}?{q}")
        };
        case(Method::GET, uri, h, Vec::new(), Shape::Api)
    })
}
