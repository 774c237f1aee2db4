//! Property tests of every endpoint: random and mutated bodies, headers and query strings.
//!
//! Each endpoint gets a bounded number of generated requests, sent in-process to the router
//! (`tower::ServiceExt::oneshot`, no socket) with the mock upstream behind the proxy. Bodies are
//! valid requests (the forms `proxy.rs` and `api.rs` use) with fields removed, types changed,
//! strings made huge, invalid UTF-8, lone surrogates or control characters, arrays cut short,
//! reordered or with an element repeated (duplicate call ids, orphaned results), unknown fields
//! added; or random bytes, cut JSON, deep nesting and bodies over the size limit. Every response
//! must hold four properties:
//!
//! - no 5xx (no upstream fault is injected, so not even a 502/503/504) and no panic;
//! - an error body in the right shape: `{"error": {"type", "message", "field"}}` for the API,
//!   the provider's own shape on the proxy's routes;
//! - nothing stored changed (sessions, events, receipts) when the answer is a 4xx;
//! - a 4xx on the proxy came from Loom, not from the upstream (an invalid request is refused
//!   before it is forwarded).
//!
//! A failure names the request (method, URI, headers and the body, shortened) that broke a
//! property, after proptest has shrunk it. Requests that broke a property once are kept in
//! `regressions`, checked on every run. `PROPTEST_CASES=N` runs more cases per endpoint.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, Request};
use axum::Router;
use http_body_util::BodyExt;
use loom_mock_upstream::{Mock, MockHandle};
use loom_server::{AppState, AuthMode, Engine, ServeArgs, ServeConfig};
use loom_store::{new_api_key, ProxyMode, Store, TenantId, Workspace};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use serde_json::{json, Value};
use tower::ServiceExt;

/// Generated requests per endpoint.
const CASES: u32 = 64;
/// The body limit the fixture's server runs with: small, so over-limit bodies stay cheap.
const BODY_LIMIT: usize = 256 << 10;
/// Longest a request may take before the test calls it hung.
const HANG: Duration = Duration::from_secs(30);

/// A server (router and state over a SQLite store) and the mock upstream behind it.
struct Fixture {
    rt: tokio::runtime::Runtime,
    app: Router,
    state: Arc<AppState>,
    mock: MockHandle,
    /// The secret of a valid key for tenant `t1` under `--auth keys`.
    key: Option<String>,
    /// A reference to an offloaded output of session `s1`, for recall.
    reference: String,
    _dir: tempfile::TempDir,
}

/// How an error body must look on a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Api,
    OpenAi,
    Anthropic,
}

/// One generated request.
#[derive(Debug, Clone)]
struct Case {
    method: Method,
    uri: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    shape: Shape,
}

fn fixture(auth: AuthMode) -> Fixture {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mock = rt.block_on(Mock::spawn()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("loom.db");
    let mut config = ServeConfig::resolve(
        ServeArgs {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            db: db.clone(),
            config: None,
            upstream_openai: Some(format!("{}/v1", mock.base_url())),
            upstream_anthropic: Some(mock.base_url()),
            auth: Some(auth),
        },
        &|name| (name == "LOOM_UPSTREAM_OPENAI_KEY").then(|| "sk-upstream".to_owned()),
    )
    .unwrap();
    config.default_mode = ProxyMode::Fit;
    config.limits.max_body_bytes = BODY_LIMIT;
    config.limits.request_timeout = HANG;
    let ws = Workspace::open(&db).unwrap();
    let engine = Engine {
        registry: loom_tokens::Registry::built_in().unwrap(),
        policy: loom_core::render::Policy::default(),
        reduce: loom_core::ReduceConfig::default(),
    };
    let state = loom_server::state(config, Arc::new(ws.store), Arc::new(ws.blobs), engine).unwrap();
    let key = (auth == AuthMode::Keys).then(|| {
        let (secret, key) = new_api_key(TenantId::new("t1").unwrap(), None, None, 1).unwrap();
        state.store.create_key(&key).unwrap();
        secret
    });
    let mut fx = Fixture {
        rt,
        app: loom_server::app(Arc::clone(&state)),
        state,
        mock,
        key,
        reference: String::new(),
        _dir: dir,
    };
    fx.reference = fx.seed();
    fx
}

impl Fixture {
    /// Session `s1` (a tool call whose long output is offloaded, one rendered call) and the
    /// proxied conversation `p1`, so that requests naming them reach past the lookups. Returns
    /// the reference of the offloaded output.
    fn seed(&self) -> String {
        let auth = self.auth_header();
        let send = |method: Method, uri: &str, body: Value, extra: &[(&str, &str)]| {
            let mut headers: Vec<(String, Vec<u8>)> = auth.clone().into_iter().collect();
            headers.extend(
                extra
                    .iter()
                    .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec())),
            );
            let case = Case {
                method,
                uri: uri.to_owned(),
                headers,
                body: if body.is_null() {
                    Vec::new()
                } else {
                    serde_json::to_vec(&body).unwrap()
                },
                shape: Shape::Api,
            };
            let (status, body) = self.send(&case).unwrap().unwrap();
            assert!(status < 300, "seeding {uri}: {status} {}", lossy(&body));
            body
        };
        send(Method::POST, "/loom/v1/sessions", create_body(0), &[]);
        send(
            Method::POST,
            "/loom/v1/sessions/s1/render",
            render_body(),
            &[],
        );
        let steps = send(Method::GET, "/loom/v1/sessions/s1/steps", Value::Null, &[]);
        let steps: Value = serde_json::from_slice(&steps).unwrap();
        let reference = steps["steps"][0]["outcome_ref"]
            .as_str()
            .expect("the long output is offloaded")
            .to_owned();
        send(
            Method::POST,
            "/v1/chat/completions",
            chat_body(0),
            &[("x-loom-session", "p1")],
        );
        reference
    }

    fn auth_header(&self) -> Option<(String, Vec<u8>)> {
        self.key.as_ref().map(|k| {
            (
                "authorization".to_owned(),
                format!("Bearer {k}").into_bytes(),
            )
        })
    }

    /// Sends a case; `Ok(None)` when it cannot be expressed as an HTTP request (a header value
    /// with a line break, a URI with a space), which no client could send either.
    fn send(&self, case: &Case) -> Result<Option<(u16, Vec<u8>)>, String> {
        let mut builder = Request::builder()
            .method(case.method.clone())
            .uri(&case.uri);
        for (name, value) in &case.headers {
            let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_bytes(value),
            ) else {
                return Ok(None);
            };
            builder = builder.header(n, v);
        }
        let Ok(request) = builder.body(Body::from(case.body.clone())) else {
            return Ok(None);
        };
        let app = self.app.clone();
        self.rt.block_on(async move {
            let answer = async {
                let response = app.oneshot(request).await.map_err(|e| e.to_string())?;
                let status = response.status().as_u16();
                // Read the whole body: a stream's relay task logs the reply as it ends.
                let body = response
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| format!("reading the body: {e}"))?
                    .to_bytes();
                Ok::<_, String>((status, body.to_vec()))
            };
            match tokio::time::timeout(HANG, answer).await {
                Ok(r) => r.map(Some),
                Err(_) => Err(format!("no answer within {HANG:?}")),
            }
        })
    }

    /// Everything a request could change: sessions, their events and their receipts.
    fn snapshot(&self) -> Value {
        let store: &dyn Store = self.state.store.as_ref();
        let mut sessions = store.sessions().unwrap();
        sessions.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        let all: Vec<Value> = sessions
            .iter()
            .map(|info| {
                json!({
                    "info": info,
                    "events": store.read(&info.id, 1..=u64::MAX).unwrap(),
                    "calls": store.model_calls(&info.id).unwrap(),
                })
            })
            .collect();
        Value::Array(all)
    }

    /// Sends `case` and checks the four properties.
    fn check(&self, case: &Case) -> Result<(), TestCaseError> {
        let before = self.snapshot();
        let forwarded_before = self.mock.requests().len();
        let Some((status, body)) = self.send(case).map_err(|e| fail(case, &e))? else {
            return Ok(());
        };
        if status >= 500 {
            return Err(fail(case, &format!("{status}: {}", lossy(&body))));
        }
        if status < 400 {
            return Ok(());
        }
        if let Err(why) = error_shape(case.shape, &body) {
            return Err(fail(
                case,
                &format!(
                    "{status} with a body of the wrong shape ({why}): {}",
                    lossy(&body)
                ),
            ));
        }
        if self.mock.requests().len() != forwarded_before {
            return Err(fail(
                case,
                &format!(
                    "{status} from the upstream: Loom forwarded a request the provider refuses: {}",
                    lossy(&body)
                ),
            ));
        }
        let after = self.snapshot();
        // A history that cannot fit the budget is a valid conversation: `fit` logs it (the log
        // is what the agent said) and refuses only the call, so no receipt may appear.
        let over_budget = lossy(&body).contains("irreducible floor");
        let changed = if over_budget {
            receipts(&after) != receipts(&before)
        } else {
            after != before
        };
        if changed {
            return Err(fail(
                case,
                &format!("{status} but the store changed: {}", lossy(&body)),
            ));
        }
        Ok(())
    }

    /// Runs `CASES` generated requests; a failure panics with the shrunk request.
    fn run(&self, strategy: impl Strategy<Value = Case>) {
        let mut runner = TestRunner::new(Config {
            // `PROPTEST_CASES` runs more (or fewer) cases, as proptest's own default does.
            cases: std::env::var("PROPTEST_CASES")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(CASES),
            failure_persistence: None,
            max_shrink_iters: 256,
            ..Config::default()
        });
        match runner.run(&strategy, |case| self.check(&self.authorised(case))) {
            Ok(()) => {}
            // The reason names the shrunk request; the value itself is only bytes.
            Err(TestError::Fail(why, _)) => panic!("{why}"),
            Err(TestError::Abort(why)) => panic!("gave up: {why}"),
        }
    }

    /// Under `--auth keys`, a case without credentials gets the fixture's key (a case that
    /// names its own `authorization` keeps it).
    fn authorised(&self, mut case: Case) -> Case {
        if let Some((name, value)) = self.auth_header() {
            if !case.headers.iter().any(|(n, _)| n == "authorization") {
                case.headers.push((name, value));
            }
        }
        case
    }
}

fn fail(case: &Case, why: &str) -> TestCaseError {
    let headers: Vec<String> = case
        .headers
        .iter()
        .map(|(n, v)| format!("{n}: {}", lossy(v)))
        .collect();
    TestCaseError::fail(format!(
        "{} {} {:?}\nbody ({} bytes): {}\n=> {why}",
        case.method,
        case.uri,
        headers,
        case.body.len(),
        lossy(&case.body)
    ))
}

/// Bytes as text for a message, shortened.
fn lossy(bytes: &[u8]) -> String {
    const SHOWN: usize = 600;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(SHOWN)]).into_owned();
    if bytes.len() > SHOWN {
        format!("{text}...")
    } else {
        text
    }
}

/// Whether an error body has the shape its route promises.
fn error_shape(shape: Shape, body: &[u8]) -> Result<(), String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let e = v.get("error").ok_or("no `error`")?;
    let string = |key: &str| {
        e.get(key)
            .and_then(Value::as_str)
            .map(|_| ())
            .ok_or(format!("`error.{key}` is not a string"))
    };
    string("type")?;
    string("message")?;
    match shape {
        Shape::Api => {
            if !e.get("field").is_some_and(|f| f.is_null() || f.is_string()) {
                return Err("`error.field` is not a string or null".into());
            }
            let keys: Vec<&String> = e
                .as_object()
                .map(|o| o.keys().collect())
                .unwrap_or_default();
            if keys.len() != 3 || v.as_object().is_some_and(|o| o.len() != 1) {
                return Err(format!("unexpected keys: {keys:?}"));
            }
        }
        Shape::OpenAi => {}
        Shape::Anthropic => {
            if v.get("type").and_then(Value::as_str) != Some("error") {
                return Err("no `\"type\": \"error\"` at the top".into());
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Valid bodies, each varied by a tag so that ids and sessions differ between cases.

fn chat_tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "read_file", "description": "Read a file",
         "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "bash", "description": "Run a command",
         "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}
    ])
}

fn chat_body(n: u32) -> Value {
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

fn responses_body(n: u32) -> Value {
    json!({"model": "gpt-4o", "instructions": "Be brief.", "stream": n % 3 == 1,
        "tools": [{"type": "function", "name": "read_file", "description": "Read a file",
                   "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}],
        "input": [
        {"type": "message", "role": "user", "content": format!("read main.rs ({n})")},
        {"type": "function_call", "call_id": format!("call_{n}"), "name": "read_file", "arguments": "{\"path\":\"main.rs\"}"},
        {"type": "function_call_output", "call_id": format!("call_{n}"), "output": "fn main() {}"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]}]})
}

fn messages_body(n: u32) -> Value {
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

fn count_tokens_body(n: u32) -> Value {
    let mut body = messages_body(n);
    if let Some(o) = body.as_object_mut() {
        o.remove("max_tokens");
        o.remove("stream");
    }
    body
}

fn tool_result(call: &str, text: &str, ts: u64) -> Value {
    use sha2::Digest;
    json!({"ts_ms": ts, "kind": "tool_result", "call_id": call, "tool_name": "bash",
        "content": {"text": text},
        "stats": {"bytes": text.len(), "lines": text.lines().count(),
                  "sha256": hex::encode(sha2::Sha256::digest(text.as_bytes())), "content_type": "text"}})
}

/// Session `s{n}` (`s1` for the seed: `create_body(0)`), with a long shell output.
fn create_body(n: u32) -> Value {
    let long = "file.txt\n".repeat(400);
    json!({"id": format!("s{}", n + 1), "agent": "coder", "events": [
        {"ts_ms": 1, "kind": "system", "content": "You are careful."},
        {"ts_ms": 2, "kind": "user", "content": "List the files."},
        {"ts_ms": 3, "kind": "assistant", "tool_calls": [{"id": format!("c{n}"), "name": "bash", "arguments": "{\"command\":\"ls\"}"}]},
        tool_result(&format!("c{n}"), &long, 4),
        {"ts_ms": 5, "kind": "assistant", "content": "There are many files."}]})
}

fn append_body(n: u32) -> Value {
    json!({"events": [
        {"ts_ms": 10, "kind": "user", "content": format!("more ({n})")},
        {"ts_ms": 11, "kind": "assistant", "tool_calls": [{"id": format!("a{n}"), "name": "bash", "arguments": "{}"}]},
        tool_result(&format!("a{n}"), "ok", 12),
        {"ts_ms": 13, "kind": "assistant", "content": "done"}]})
}

fn import_body(n: u32) -> Value {
    let mut body = chat_body(n);
    if let Some(o) = body.as_object_mut() {
        o.remove("tools");
        o.remove("stream");
        o.remove("temperature");
        o.remove("model");
    }
    body
}

fn render_body() -> Value {
    json!({"model": "gpt-4o", "budget": 4000, "format": "openai-chat", "tools": chat_tools()})
}

fn usage_body() -> Value {
    json!({"call": 1, "input_tokens": 900, "cached_input_tokens": 512, "output_tokens": 10})
}

// ---------------------------------------------------------------------------------------------
// Mutations of a valid body.

/// A value put in place of a node, or added beside it.
#[derive(Debug, Clone)]
enum Leaf {
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
enum RawText {
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
enum Edit {
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
enum Step {
    Key(String),
    Index(usize),
}

/// Every node below the root, in a walk's order.
fn walk(v: &Value, here: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
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

fn node_mut<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |node, step| match step {
        Step::Key(k) => node.get_mut(k.as_str()),
        Step::Index(i) => node.get_mut(*i),
    })
}

fn pick(paths: &[Vec<Step>], at: usize) -> Option<&Vec<Step>> {
    (!paths.is_empty()).then(|| &paths[at % paths.len()])
}

/// Applies an edit; raw text is left as a marker string, replaced when serialised.
fn apply(body: &mut Value, edit: &Edit, raws: &mut Vec<RawText>) {
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
const RAW_MARK: &str = "\u{E000}loom-raw-";

fn leaf_value(leaf: &Leaf, raws: &mut Vec<RawText>) -> Value {
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
fn serialise(body: &Value, raws: &[RawText]) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(body).unwrap();
    for (i, raw) in raws.iter().enumerate().rev() {
        let marker = serde_json::to_vec(&json!(format!("{RAW_MARK}{i}"))).unwrap();
        if let Some(at) = find(&bytes, &marker) {
            bytes.splice(at..at + marker.len(), raw.bytes());
        }
    }
    bytes
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Strings that mean something somewhere in a request (roles, kinds, models).
#[rustfmt::skip]
const WORDS: &[&str] = &[
    "", "user", "tool", "assistant", "system", "developer", "gpt-4o", "claude-sonnet-4-5",
    "function", "function_call", "function_call_output", "tool_use", "tool_result", "text",
];

fn leaf() -> impl Strategy<Value = Leaf> {
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

fn edit() -> impl Strategy<Value = Edit> {
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
const BARE: &[&[u8]] = &[
    b"", b"null", b"[]", b"{}", b"\"text\"", b"12", b"\xef\xbb\xbf{}", b"{} {}", b"{\"model\":",
];

/// A body built from a valid one (`base(tag)`): as it is, mutated, cut short, or replaced by
/// random bytes, a bare JSON value, or a body over the size limit.
fn body(base: fn(u32) -> Value) -> impl Strategy<Value = Vec<u8>> {
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
const HEADER_NAMES: &[&str] = &[
    "x-loom-session", "x-loom-mode", "x-loom-budget", "content-type", "authorization", "x-api-key",
    "anthropic-version", "anthropic-beta", "openai-organization", "accept",
];

/// Values that mean something to one of them, or almost do.
#[rustfmt::skip]
const HEADER_VALUES: &[&str] = &[
    "p1", "s1", "fit", "observe", "FIT", "", "0", "-5", "1", "100", "99999999999999999999999",
    "1e3", "a/b", "../../etc", "p1~2", "p1~99", "~", "Bearer ", "Bearer lk_bogus",
    "application/json", "text/event-stream", "2023-06-01",
];

/// A value for one of the headers Loom reads or forwards.
fn header() -> impl Strategy<Value = (String, Vec<u8>)> {
    let value = prop_oneof![
        select(HEADER_VALUES).prop_map(|s| s.as_bytes().to_vec()),
        "[ -~]{0,40}".prop_map(String::into_bytes),
        (1usize..9000).prop_map(|n| "s".repeat(n).into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..40),
    ];
    (select(HEADER_NAMES), value).prop_map(|(n, v)| (n.to_owned(), v))
}

fn headers() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    proptest::collection::vec(header(), 0..4)
}

/// A path segment naming a session: known ones, unknown ones, and text that is no valid id.
fn segment() -> impl Strategy<Value = String> {
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
const QUERY_VALUES: &[&str] = &[
    "1", "2", "0", "-1", "18446744073709551616", "abc", "", "%ff", "%", "1.5", "s1", "openai",
    "anthropic", "responses", "bogus", "sha256%3A00",
];

/// A query string over `keys` (and a stray one), with numbers, non-numbers and bad encodings.
fn query(keys: &'static [&'static str]) -> impl Strategy<Value = String> {
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
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn case(
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
fn post(path: &'static str, base: fn(u32) -> Value, shape: Shape) -> impl Strategy<Value = Case> {
    (body(base), headers()).prop_map(move |(b, h)| case(Method::POST, path.to_owned(), h, b, shape))
}

/// A POST with a generated body to `/loom/v1/sessions/{id}/{tail}`.
fn post_session(tail: &'static str, base: fn(u32) -> Value) -> impl Strategy<Value = Case> {
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
fn get_session(tail: &'static str, keys: &'static [&'static str]) -> impl Strategy<Value = Case> {
    (segment(), query(keys), headers()).prop_map(move |(id, q, h)| {
        let uri = if q.is_empty() {
            format!("/loom/v1/sessions/{id}{tail}")
        } else {
            format!("/loom/v1/sessions/{id}{tail}?{q}")
        };
        case(Method::GET, uri, h, Vec::new(), Shape::Api)
    })
}

// ---------------------------------------------------------------------------------------------
// The properties, endpoint by endpoint.

#[test]
fn proxy_chat_completions() {
    fixture(AuthMode::None).run(post("/v1/chat/completions", chat_body, Shape::OpenAi));
}

#[test]
fn proxy_responses() {
    fixture(AuthMode::None).run(post("/v1/responses", responses_body, Shape::OpenAi));
}

#[test]
fn proxy_messages() {
    fixture(AuthMode::None).run(post("/v1/messages", messages_body, Shape::Anthropic));
}

#[test]
fn proxy_count_tokens() {
    fixture(AuthMode::None).run(post(
        "/v1/messages/count_tokens",
        count_tokens_body,
        Shape::Anthropic,
    ));
}

#[test]
fn proxy_models_and_service_endpoints() {
    let paths = select(&["/v1/models", "/healthz", "/metrics", "/openapi.json"][..]);
    let fx = fixture(AuthMode::None);
    fx.run((paths, headers()).prop_map(|(p, h)| {
        let shape = if p == "/v1/models" {
            Shape::OpenAi
        } else {
            Shape::Api
        };
        case(Method::GET, p.to_owned(), h, Vec::new(), shape)
    }));
}

#[test]
fn api_sessions_create_and_list() {
    let fx = fixture(AuthMode::None);
    let list = headers().prop_map(|h| {
        case(
            Method::GET,
            "/loom/v1/sessions".into(),
            h,
            Vec::new(),
            Shape::Api,
        )
    });
    fx.run(prop_oneof![
        1 => list,
        4 => post("/loom/v1/sessions", create_body, Shape::Api),
    ]);
}

#[test]
fn api_session_and_events() {
    let fx = fixture(AuthMode::None);
    fx.run(prop_oneof![
        get_session("", &[]),
        get_session("/events", &["from", "to"]),
        post_session("/events", append_body),
    ]);
}

#[test]
fn api_import() {
    let fx = fixture(AuthMode::None);
    let q = query(&["session", "format", "agent"]);
    fx.run((q, body(import_body), headers()).prop_map(|(q, b, h)| {
        case(
            Method::POST,
            format!("/loom/v1/import?{q}"),
            h,
            b,
            Shape::Api,
        )
    }));
}

#[test]
fn api_render() {
    fixture(AuthMode::None).run(post_session("/render", |_| render_body()));
}

#[test]
fn api_explain_steps_and_recall() {
    let fx = fixture(AuthMode::None);
    let reference = fx.reference.clone();
    let recall = (
        segment(),
        prop_oneof![Just(reference), ".{0,20}".prop_map(|s| encode(&s))],
        headers(),
    )
        .prop_map(|(id, r, h)| {
            case(
                Method::GET,
                format!("/loom/v1/sessions/{id}/recall?ref={}", encode(&r)),
                h,
                Vec::new(),
                Shape::Api,
            )
        });
    fx.run(prop_oneof![
        get_session("/explain", &["event"]),
        get_session("/steps", &[]),
        get_session("/recall", &["ref"]),
        recall,
    ]);
}

#[test]
fn api_usage_and_receipts() {
    let fx = fixture(AuthMode::None);
    let one = (
        segment(),
        "[0-9]{1,3}|-1|x|18446744073709551616|%ff",
        headers(),
    )
        .prop_map(|(id, call, h)| {
            case(
                Method::GET,
                format!("/loom/v1/sessions/{id}/receipts/{call}"),
                h,
                Vec::new(),
                Shape::Api,
            )
        });
    fx.run(prop_oneof![
        post_session("/usage", |_| usage_body()),
        get_session("/receipts", &[]),
        one,
    ]);
}

/// Under `--auth keys`: missing, malformed and unknown keys on every route are refused in the
/// route's shape, and change nothing.
#[test]
fn every_route_under_keys() {
    let fx = fixture(AuthMode::Keys);
    let routes = prop_oneof![
        post("/v1/chat/completions", chat_body, Shape::OpenAi),
        post("/v1/responses", responses_body, Shape::OpenAi),
        post("/v1/messages", messages_body, Shape::Anthropic),
        post(
            "/v1/messages/count_tokens",
            count_tokens_body,
            Shape::Anthropic
        ),
        post("/loom/v1/sessions", create_body, Shape::Api),
        post_session("/events", append_body),
        post_session("/render", |_| render_body()),
        get_session("/events", &["from", "to"]),
        get_session("/explain", &["event"]),
    ];
    fx.run(routes);
}

/// Requests that once broke a property, each named by what broke, checked every run (the
/// generated cases find such requests only some of the time). Every failure is reported, not
/// only the first.
#[test]
fn regressions() {
    let fx = fixture(AuthMode::None);
    let post = |path: &str, session: &str, extra: &[(&str, &str)], body: Value, shape: Shape| {
        let mut headers = vec![("x-loom-session".to_owned(), session.as_bytes().to_vec())];
        headers.extend(
            extra
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec())),
        );
        case(
            Method::POST,
            path.to_owned(),
            headers,
            serde_json::to_vec(&body).unwrap(),
            shape,
        )
    };
    let hi = json!([{"role": "user", "content": "hi"}]);
    let mut oversized = messages_body(7);
    oversized["padding"] = json!("p".repeat(BODY_LIMIT));
    let cases = [
        // `fit` synced the history into the log, then refused the model it cannot count.
        post(
            "/v1/chat/completions",
            "fit-unknown-model",
            &[],
            json!({"model": "no-such-model", "messages": hi}),
            Shape::OpenAi,
        ),
        // `fit` refuses a budget below the floor without a receipt (the history is logged).
        post(
            "/v1/chat/completions",
            "fit-budget-below-floor",
            &[("x-loom-budget", "1")],
            json!({"model": "gpt-4o", "messages": hi}),
            Shape::OpenAi,
        ),
        // `stream` of the wrong type went upstream (and the provider refused it).
        post(
            "/v1/chat/completions",
            "stream-string",
            &[("x-loom-mode", "observe")],
            json!({"model": "gpt-4o", "stream": "yes", "messages": hi}),
            Shape::OpenAi,
        ),
        post(
            "/v1/responses",
            "stream-number",
            &[],
            json!({"model": "gpt-4o", "stream": 0, "input": "hi"}),
            Shape::OpenAi,
        ),
        post(
            "/v1/messages",
            "stream-number-messages",
            &[],
            json!({"model": "claude-sonnet-4-5", "max_tokens": 5, "stream": 0, "messages": hi}),
            Shape::Anthropic,
        ),
        // An empty Responses `input` went upstream (the instructions alone made a history).
        post(
            "/v1/responses",
            "empty-input",
            &[("x-loom-mode", "observe")],
            json!({"model": "gpt-4o", "instructions": "Be brief.", "input": []}),
            Shape::OpenAi,
        ),
        // Tool calls left unanswered at the end of a Chat history went upstream, in both modes.
        post(
            "/v1/chat/completions",
            "trailing-calls-observe",
            &[("x-loom-mode", "observe")],
            json!({"model": "gpt-4o", "messages": trailing_calls()}),
            Shape::OpenAi,
        ),
        post(
            "/v1/chat/completions",
            "trailing-calls-fit",
            &[],
            json!({"model": "gpt-4o", "messages": trailing_calls()}),
            Shape::OpenAi,
        ),
        // A Responses function call with no output before the next message went upstream.
        post(
            "/v1/responses",
            "unanswered-call",
            &[("x-loom-mode", "observe")],
            json!({"model": "gpt-4o", "input": [
                {"type": "message", "role": "user", "content": "read main.rs"},
                {"type": "function_call", "call_id": "call_0", "name": "read_file", "arguments": "{}"},
                {"type": "message", "role": "user", "content": "and?"}]}),
            Shape::OpenAi,
        ),
        // A body over the limit on an Anthropic route was answered in the API's shape.
        post(
            "/v1/messages",
            "oversized",
            &[],
            oversized,
            Shape::Anthropic,
        ),
        // A path segment that is not UTF-8 was answered in plain text.
        case(
            Method::GET,
            "/loom/v1/sessions/%ff%fe/events".into(),
            Vec::new(),
            Vec::new(),
            Shape::Api,
        ),
    ];
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| fx.check(c).err().map(|e| e.to_string()))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A Chat history that ends with an assistant's tool calls and no results.
fn trailing_calls() -> Value {
    json!([
        {"role": "user", "content": "read main.rs"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_t", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}
    ])
}

/// The receipts of a snapshot, session by session.
fn receipts(snapshot: &Value) -> Vec<(Value, Value)> {
    snapshot
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| (s["info"]["id"].clone(), s["calls"].clone()))
        .filter(|(_, calls)| calls.as_array().is_some_and(|c| !c.is_empty()))
        .collect()
}
