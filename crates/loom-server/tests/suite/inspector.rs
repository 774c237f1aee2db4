//! The web inspector: `/ui` is served with its security headers under the same auth as the
//! API, never on a non-loopback address without keys, and what it reads (`/loom/v1/inspect`)
//! is the caller's tenant's only.

use loom_server::AuthMode;
use loom_store::ProxyMode;
use serde_json::{json, Value};

use super::support::{start, start_with, Server};

/// A session with a long tool output, rendered twice at a small budget.
async fn seed(s: &Server, key: Option<&str>, id: &str) -> Value {
    let out: String = (0..3000)
        .map(|i| format!("line {i} of the build\n"))
        .collect();
    let history = json!({"messages": [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": "Build it."},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "bash", "arguments": "{\"command\": \"make\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": out},
    ]});
    let r = s
        .post(
            &format!("/loom/v1/import?session={id}&format=openai"),
            key,
            &[],
            &history,
        )
        .await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let body = json!({"model": "gpt-4o", "budget": 3000});
    let r = s
        .post(&format!("/loom/v1/sessions/{id}/render"), key, &[], &body)
        .await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn the_page_is_served_with_a_strict_policy() {
    let s = start(AuthMode::Keys, ProxyMode::Fit).await;
    for (path, media) in [
        ("/ui", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
    ] {
        // The page holds no data: it asks for a key itself.
        let r = s.get(path, None).await;
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers();
        assert!(h["content-type"].to_str().unwrap().starts_with(media));
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"));
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(h["x-content-type-options"], "nosniff");
        // Nothing is fetched from elsewhere (SVG's namespace is a name, not an address).
        let text = r
            .text()
            .await
            .unwrap()
            .replace("http://www.w3.org/2000/svg", "");
        assert!(
            !text.contains("https://") && !text.contains("http://"),
            "{path}"
        );
    }
    let js = s.get("/ui/app.js", None).await.text().await.unwrap();
    assert!(
        !js.contains("innerHTML"),
        "the script writes data as text only"
    );
    // The page names its script and style by version, which browsers may keep; unversioned
    // (or another version) they are checked again each time, as the page is.
    let page = s.get("/ui", None).await.text().await.unwrap();
    for name in ["app.js", "app.css"] {
        let at = page.find(&format!("/ui/{name}?v=")).expect(name);
        let url = &page[at..at + page[at..].find('"').unwrap()];
        let cache =
            |r: &reqwest::Response| r.headers()["cache-control"].to_str().unwrap().to_owned();
        let r = s.get(url, None).await;
        assert_eq!(r.status(), 200);
        assert!(cache(&r).contains("immutable"), "{url}");
        for other in [format!("/ui/{name}"), format!("/ui/{name}?v=0")] {
            assert_eq!(cache(&s.get(&other, None).await), "no-cache", "{other}");
        }
    }
    s.stop().await;
}

#[tokio::test]
async fn without_keys_the_page_is_served_on_loopback_only() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    assert_eq!(s.get("/ui", None).await.status(), 200);
    s.stop().await;
    // The configuration refuses `--auth none` on another address; the page checks again.
    let s = start_with(AuthMode::None, ProxyMode::Fit, |c| {
        c.listen = "0.0.0.0:8080".parse().unwrap();
    })
    .await;
    for path in ["/ui", "/ui/app.js"] {
        let r = s.get(path, None).await;
        assert_eq!(r.status(), 404);
        let body: Value = r.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("loopback"), "{message}");
    }
    s.stop().await;
}

#[tokio::test]
async fn a_key_sees_its_tenants_sessions_only() {
    let s = start(AuthMode::Keys, ProxyMode::Fit).await;
    let (a, b) = (s.key("alpha"), s.key("beta"));
    seed(&s, Some(&a), "mine").await;
    // No key: refused, as everywhere in the API.
    for path in ["/loom/v1/inspect/sessions", "/loom/v1/inspect/usage"] {
        assert_eq!(s.get(path, None).await.status(), 401, "{path}");
    }
    let list: Value = s
        .get("/loom/v1/inspect/sessions", Some(&a))
        .await
        .json()
        .await
        .unwrap();
    let sessions = list["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0]["id"], "mine");
    assert_eq!(sessions[0]["model_calls"], 1);
    assert!(
        sessions[0]["full_tokens"].as_u64().unwrap()
            > sessions[0]["input_tokens"].as_u64().unwrap()
    );
    let usage: Value = s
        .get("/loom/v1/inspect/usage", Some(&a))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(usage["buckets"][0]["calls"], 1);
    // The other tenant sees nothing of it, and cannot name it.
    let list: Value = s
        .get("/loom/v1/inspect/sessions", Some(&b))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["sessions"], json!([]));
    let usage: Value = s
        .get("/loom/v1/inspect/usage", Some(&b))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(usage["buckets"], json!([]));
    for path in [
        "/loom/v1/inspect/sessions/mine",
        "/loom/v1/inspect/sessions/mine/calls/1",
    ] {
        assert_eq!(s.get(path, Some(&b)).await.status(), 404, "{path}");
        assert_eq!(s.get(path, Some(&a)).await.status(), 200, "{path}");
    }
    s.stop().await;
}

#[tokio::test]
async fn a_session_page_holds_every_calls_fates_and_the_request_is_the_one_sent() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let rendered = seed(&s, None, "s").await;
    let page: Value = s
        .get("/loom/v1/inspect/sessions/s", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(page["events"].as_array().unwrap().len(), 4);
    let result = &page["events"][3];
    assert_eq!(result["kind"], "tool_result");
    let reference = result["ref"].as_str().unwrap();
    let call = &page["calls"][0];
    // The fates are the receipt's lists, as runs.
    for name in ["verbatim", "stubbed", "elided", "grouped"] {
        let runs: Vec<Value> = rendered["receipt"][name]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| json!([r["from"], r["to"]]))
            .collect();
        assert_eq!(
            call["fates"].get(name).cloned().unwrap_or(json!([])),
            json!(runs),
            "{name}"
        );
    }
    // The stub's reference recalls the original bytes.
    let r = s
        .get(&format!("/loom/v1/sessions/s/recall?ref={reference}"), None)
        .await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().starts_with("line 0 of the build\n"));
    // The request is the body the render answered, as it answered it.
    let detail: Value = s
        .get("/loom/v1/inspect/sessions/s/calls/1", None)
        .await
        .json()
        .await
        .unwrap();
    let request = &detail["request"];
    assert_eq!(request["as_sent"], true, "{request}");
    assert_eq!(
        request["sent"].as_str().unwrap(),
        serde_json::to_string(&rendered["body"]).unwrap()
    );
    assert_eq!(request["body"], Value::Null);
    assert_eq!(detail["call"]["receipt"], rendered["receipt"]);
    // A page of the timeline.
    let page: Value = s
        .get("/loom/v1/inspect/sessions/s?from=2&limit=2", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (page["from"].clone(), page["to"].clone()),
        (json!(2), json!(3))
    );
    assert_eq!(page["events"].as_array().unwrap().len(), 2);
    s.stop().await;
}

#[tokio::test]
async fn without_the_bytes_sent_the_request_is_rebuilt_and_checked_against_its_receipt() {
    let s = start_with(AuthMode::None, ProxyMode::Fit, |c| {
        c.inspector.keep_requests_bytes = 0;
    })
    .await;
    let rendered = seed(&s, None, "s").await;
    let detail: Value = s
        .get("/loom/v1/inspect/sessions/s/calls/1", None)
        .await
        .json()
        .await
        .unwrap();
    let request = &detail["request"];
    assert_eq!(
        (request["as_sent"].clone(), request["sent"].clone()),
        (json!(false), Value::Null)
    );
    assert_eq!(request["matches_receipt"], true, "{request}");
    assert_eq!(request["body"], rendered["body"]);
    assert!(request["note"].as_str().unwrap().contains("rendered again"));
    assert_eq!(s.state.sent.bytes(), 0);
    s.stop().await;
}

/// A proxied Chat call with tool definitions and fields Loom does not model, in `fit` mode at a
/// budget that makes it cut, under `key`; returns the call's number.
async fn proxied(s: &Server, key: &str, session: &str) -> String {
    let out: String = (0..2000)
        .map(|i| format!("line {i} of the log\n"))
        .collect();
    let body = json!({
        "model": "gpt-4o",
        "temperature": 0.25,
        "user": "someone",
        "tools": [{"type": "function", "function": {"name": "bash", "description": "Runs a command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}],
        "messages": [
            {"role": "system", "content": "You are careful."},
            {"role": "user", "content": "Build it."},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "bash", "arguments": "{\"command\": \"make\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": out},
            {"role": "user", "content": "And now?"},
        ],
    });
    let r = s
        .post(
            "/v1/chat/completions",
            Some(key),
            &[("x-loom-session", session), ("x-loom-budget", "2000")],
            &body,
        )
        .await;
    assert_eq!(r.status(), 200);
    r.headers()["x-loom-call"].to_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_proxied_calls_request_is_the_bytes_the_upstream_received() {
    let s = start(AuthMode::Keys, ProxyMode::Fit).await;
    let (alpha, beta) = (s.key("alpha"), s.key("beta"));
    let call = proxied(&s, &alpha, "s").await;
    let received = s.mock.requests().last().unwrap().raw.clone();
    let path = format!("/loom/v1/inspect/sessions/s/calls/{call}");
    let detail: Value = s.get(&path, Some(&alpha)).await.json().await.unwrap();
    let request = &detail["request"];
    assert_eq!(request["as_sent"], true, "{request}");
    assert_eq!(
        request["sent"].as_str().unwrap().as_bytes(),
        &received[..],
        "byte for byte"
    );
    // What Loom spliced in is there: the render cut the long output, the client's fields stayed.
    let sent: Value = serde_json::from_slice(&received).unwrap();
    assert_eq!(
        (sent["user"].clone(), sent["temperature"].clone()),
        (json!("someone"), json!(0.25))
    );
    assert!(
        received.len() < 20_000,
        "the long output was cut: {} bytes",
        received.len()
    );
    // Another tenant's session of the same name and call number holds its own body, and the
    // first tenant's is not found for it.
    s.mock.clear();
    assert_eq!(s.get(&path, Some(&beta)).await.status(), 404);
    let theirs = proxied(&s, &beta, "s").await;
    assert_eq!(theirs, call);
    let received_beta = s.mock.requests().last().unwrap().raw.clone();
    let detail: Value = s.get(&path, Some(&beta)).await.json().await.unwrap();
    assert_eq!(
        detail["request"]["sent"].as_str().unwrap().as_bytes(),
        &received_beta[..]
    );
    let detail: Value = s.get(&path, Some(&alpha)).await.json().await.unwrap();
    assert_eq!(
        detail["request"]["sent"].as_str().unwrap().as_bytes(),
        &received[..]
    );
    s.stop().await;
}

#[tokio::test]
async fn bad_input_is_named() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    seed(&s, None, "s").await;
    for (path, status, field) in [
        ("/loom/v1/inspect/sessions/s?limit=0", 400, "limit"),
        ("/loom/v1/inspect/sessions/s?limit=99999", 400, "limit"),
        ("/loom/v1/inspect/sessions/s?from=x", 400, ""),
        ("/loom/v1/inspect/sessions/s?bogus=1", 400, ""),
        ("/loom/v1/inspect/sessions/s/calls/x", 400, "call"),
        ("/loom/v1/inspect/sessions/s/calls/7", 404, ""),
        ("/loom/v1/inspect/sessions/none", 404, ""),
        ("/loom/v1/inspect/usage?bucket_ms=5", 400, "bucket_ms"),
    ] {
        let r = s.get(path, None).await;
        assert_eq!(r.status(), status, "{path}");
        let body: Value = r.json().await.unwrap();
        if !field.is_empty() {
            assert_eq!(body["error"]["field"], field, "{path}: {body}");
        }
    }
    s.stop().await;
}
