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

mod mutate;
use mutate::*;

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
            upstream_gemini: Some(mock.base_url()),
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
