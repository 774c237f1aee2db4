//! Small inconsistencies found by trying the server as a hostile client would, each pinned by a
//! test named after it.

use std::sync::{Arc, Mutex};

use loom_server::AuthMode;
use loom_store::ProxyMode;
use reqwest::header::HeaderValue;
use serde_json::{json, Value};

use super::support::{start, text};

#[tokio::test]
async fn an_empty_or_blank_session_id_is_refused_as_the_proxy_refuses_it() {
    let s = start(AuthMode::Keys, ProxyMode::Observe).await;
    let key = s.key("t");
    for id in ["", " ", "  demo", "demo "] {
        let r = s
            .post("/loom/v1/sessions", Some(&key), &[], &json!({"id": id}))
            .await;
        assert_eq!(r.status(), 400, "{id:?}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["field"], "id", "{v}");
    }
    let r = s
        .post(
            "/v1/chat/completions",
            Some(&key),
            &[("x-loom-session", " ")],
            &json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(r.status(), 400);
    assert!(s.store().sessions().unwrap().is_empty(), "nothing stored");
    assert!(s.mock.requests().is_empty(), "nothing forwarded");
}

#[tokio::test]
async fn a_second_usage_report_with_other_figures_is_a_409_in_the_callers_terms() {
    let s = start(AuthMode::Keys, ProxyMode::Fit).await;
    let key = s.key("t");
    let r = s
        .post(
            "/loom/v1/sessions",
            Some(&key),
            &[],
            &json!({"id": "demo", "events": [{"ts_ms": 1, "kind": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(r.status(), 201, "{}", text(r).await);
    let r = s
        .post(
            "/loom/v1/sessions/demo/render",
            Some(&key),
            &[],
            &json!({"model": "gpt-4o", "budget": 4000}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", text(r).await);
    let usage = |input: u64| json!({"call": 1, "input_tokens": input});
    let r = s
        .post("/loom/v1/sessions/demo/usage", Some(&key), &[], &usage(90))
        .await;
    assert_eq!(r.status(), 200, "{}", text(r).await);
    // The same report again is accepted (a retry); other figures are a conflict.
    let r = s
        .post("/loom/v1/sessions/demo/usage", Some(&key), &[], &usage(90))
        .await;
    assert_eq!(r.status(), 200);
    let r = s
        .post("/loom/v1/sessions/demo/usage", Some(&key), &[], &usage(91))
        .await;
    assert_eq!(r.status(), 409);
    let v: Value = r.json().await.unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("`demo`"), "{message}");
    assert!(!message.contains("t/demo"), "no stored id: {message}");
    assert_eq!(v["error"]["type"], "conflict");
}

#[tokio::test]
async fn an_x_loom_session_that_is_not_utf8_is_a_400_naming_the_header() {
    let s = start(AuthMode::None, ProxyMode::Observe).await;
    let r = s
        .http
        .post(format!("{}/v1/chat/completions", s.url))
        .header(
            "x-loom-session",
            HeaderValue::from_bytes(b"caf\xe9").unwrap(),
        )
        .json(&json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "X-Loom-Session", "{v}");
    assert!(s.store().sessions().unwrap().is_empty());
    // A UTF-8 id is an id like any other.
    let r = s
        .http
        .post(format!("{}/v1/chat/completions", s.url))
        .header(
            "x-loom-session",
            HeaderValue::from_bytes("café".as_bytes()).unwrap(),
        )
        .json(&json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-loom-session"].as_bytes(), "café".as_bytes());
}

#[tokio::test]
async fn count_tokens_refuses_what_messages_refuses() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let orphan = json!({"model": "claude-sonnet-4-5", "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}
    ]});
    let duplicate = json!({"model": "claude-sonnet-4-5", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "a", "input": {}},
            {"type": "tool_use", "id": "t1", "name": "b", "input": {}}
        ]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}
    ]});
    for body in [orphan, duplicate] {
        let mut full = body.clone();
        full["max_tokens"] = json!(64);
        let messages = s.post("/v1/messages", None, &[], &full).await;
        assert_eq!(messages.status(), 400, "{body}");
        let counted = s.post("/v1/messages/count_tokens", None, &[], &body).await;
        assert_eq!(counted.status(), 400, "{body}");
        let v: Value = counted.json().await.unwrap();
        assert_eq!(v["type"], "error", "Anthropic's shape: {v}");
    }
}

#[tokio::test]
async fn a_fit_call_that_cannot_be_fitted_says_its_history_is_logged() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let body = json!({"model": "gpt-4o", "messages": [
        {"role": "system", "content": "a system prompt far larger than the budget. ".repeat(400)},
        {"role": "user", "content": "hi"}
    ]});
    let r = s
        .post(
            "/v1/chat/completions",
            None,
            &[("x-loom-session", "floor"), ("x-loom-budget", "500")],
            &body,
        )
        .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("not forwarded (the history is logged in the session)"),
        "{message}"
    );
    assert!(s.mock.requests().is_empty());
    // The one 4xx after which something is stored, as docs/serve.md says.
    let log = s
        .store()
        .read(&loom_core::SessionId::new("floor").unwrap(), 1..=u64::MAX)
        .unwrap();
    assert_eq!(log.len(), 2);
}

/// A writer tests can read back: what the server logged.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test]
async fn a_4xx_leaves_a_line_on_stderr_at_the_default_level() {
    let captured = Captured::default();
    // tracing caches each callsite's interest for the whole process, computed against the
    // subscriber of whichever thread reaches it first: a sibling test reaching the 4xx line with
    // no subscriber pins it to `never`, and this capture sees nothing. A global subscriber that
    // wants everything (and keeps nothing) keeps the cache open; its installation rebuilds it.
    static KEEP_INTEREST: std::sync::Once = std::sync::Once::new();
    KEEP_INTEREST.call_once(|| {
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
    });
    // The default level of `loom serve` (`LOOM_LOG` unset): info. The test's runtime has one
    // thread, so the server's tasks log through this subscriber.
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(captured.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let s = start(AuthMode::Keys, ProxyMode::Fit).await;
    let key = s.key("t");
    let r = s.get("/loom/v1/sessions/missing/events", Some(&key)).await;
    assert_eq!(r.status(), 404);
    let logged = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let line = logged
        .lines()
        .find(|l| l.contains("/loom/v1/sessions/missing/events"))
        .unwrap_or_else(|| panic!("no line for the 404 in:\n{logged}"));
    assert!(line.contains("INFO") && line.contains("404"), "{line}");
    assert!(!line.contains("t/missing"), "the caller's terms: {line}");
}
