//! Tenants: a key sees only its tenant's sessions, blobs and receipts, through every endpoint;
//! another tenant's records are absent (404), never forbidden.

use loom_server::AuthMode;
use loom_store::ProxyMode;
use serde_json::{json, Value};

use super::support::start;

#[tokio::test]
async fn a_key_cannot_reach_another_tenants_records_through_any_endpoint() {
    let s = start(AuthMode::Keys, ProxyMode::Observe).await;
    let a = s.key("tenant-a");
    let b = s.key("tenant-b");
    // No key, or an unknown one: 401.
    assert_eq!(s.get("/loom/v1/sessions", None).await.status(), 401);
    assert_eq!(
        s.get("/loom/v1/sessions", Some("lk_0000")).await.status(),
        401
    );
    let big = "secret line\n".repeat(10_000);
    let r = s.post("/loom/v1/sessions", Some(&b), &[], &json!({"id": "private", "events": [
        {"ts_ms": 1, "kind": "user", "content": "B's secret"},
        {"ts_ms": 2, "kind": "assistant", "tool_calls": [{"id": "c1", "name": "bash", "arguments": "{}"}]},
        {"ts_ms": 3, "kind": "tool_result", "call_id": "c1", "tool_name": "bash", "content": {"text": big},
         "stats": {"bytes": big.len(), "lines": 10_000, "sha256": sha(&big), "content_type": "text"}}
    ]})).await;
    assert_eq!(r.status(), 201);
    // B's proxied call lands in B's namespace.
    let chat = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
    let r = s
        .post(
            "/v1/chat/completions",
            Some(&b),
            &[("x-loom-session", "chat")],
            &chat,
        )
        .await;
    assert_eq!(r.status(), 200);
    // The upstream got the server's credential, never the Loom key.
    let auth = s
        .mock
        .requests()
        .last()
        .unwrap()
        .headers
        .iter()
        .find(|(n, _)| n == "authorization")
        .map(|(_, v)| v.clone());
    assert_eq!(auth.as_deref(), Some("Bearer sk-upstream"));
    let steps: Value = s
        .get("/loom/v1/sessions/private/steps", Some(&b))
        .await
        .json()
        .await
        .unwrap();
    let reference = steps["steps"][0]["outcome_ref"]
        .as_str()
        .unwrap()
        .to_owned();
    let blob = format!("sha256:{}", sha(&big));

    for id in ["private", "chat"] {
        // (path, whether its owner gets it): B's `private` has no model call; `chat` no output.
        for (path, owned) in [
            (format!("/loom/v1/sessions/{id}"), true),
            (format!("/loom/v1/sessions/{id}/events"), true),
            (format!("/loom/v1/sessions/{id}/steps"), true),
            (format!("/loom/v1/sessions/{id}/receipts"), true),
            (format!("/loom/v1/sessions/{id}/receipts/1"), id == "chat"),
            (format!("/loom/v1/sessions/{id}/explain?event=1"), true),
            (
                format!("/loom/v1/sessions/{id}/recall?ref={reference}"),
                id == "private",
            ),
            (
                format!("/loom/v1/sessions/{id}/recall?ref={blob}"),
                id == "private",
            ),
        ] {
            let r = s.get(&path, Some(&a)).await;
            assert_eq!(r.status(), 404, "{path}");
            let mine = s.get(&path, Some(&b)).await.status();
            assert_eq!(mine.is_success(), owned, "{path} for its owner: {mine}");
        }
        for (path, body) in [
            (
                format!("/loom/v1/sessions/{id}/events"),
                json!({"events": [{"ts_ms": 9, "kind": "user", "content": "x"}]}),
            ),
            (
                format!("/loom/v1/sessions/{id}/render"),
                json!({"model": "gpt-4o"}),
            ),
            (
                format!("/loom/v1/sessions/{id}/usage"),
                json!({"call": 1, "input_tokens": 1}),
            ),
        ] {
            let r = s.post(&path, Some(&a), &[], &body).await;
            assert_eq!(r.status(), 404, "{path}");
        }
    }
    // A's own session of the same name is a different session; A's list shows only A's.
    let r = s
        .post(
            "/loom/v1/sessions",
            Some(&a),
            &[],
            &json!({"id": "private"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let v: Value = s
        .get("/loom/v1/sessions", Some(&a))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["sessions"].as_array().unwrap().len(), 1);
    // A's blob recall through its own session cannot reach B's bytes either.
    let r = s
        .get(
            &format!("/loom/v1/sessions/private/recall?ref={blob}"),
            Some(&a),
        )
        .await;
    assert_eq!(r.status(), 404);
    let v: Value = s
        .get("/loom/v1/sessions/private", Some(&b))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["event_count"], 3, "B's session untouched");
}

fn sha(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

#[tokio::test]
async fn anthropic_calls_carry_the_servers_key_and_the_clients_version_when_it_sends_one() {
    let s = start(AuthMode::Keys, ProxyMode::Observe).await;
    let a = s.key("tenant-a");
    let body = json!({"model": "claude-haiku-4-5", "max_tokens": 64,
                      "messages": [{"role": "user", "content": "hi"}]});
    let sent = |s: &super::support::Server| {
        let last = s.mock.requests().last().cloned().unwrap();
        let all = |name: &str| -> Vec<String> {
            last.headers
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .collect()
        };
        (
            all("x-api-key"),
            all("anthropic-version"),
            all("authorization"),
        )
    };
    // No version from the client: the provider client's rule adds Loom's.
    let r = s
        .post("/v1/messages", Some(&a), &[("x-loom-session", "v1")], &body)
        .await;
    assert_eq!(r.status(), 200);
    let (key, version, auth) = sent(&s);
    assert_eq!(key, ["sk-ant-upstream"]);
    assert_eq!(version, ["2023-06-01"]);
    assert!(
        auth.is_empty(),
        "the Loom key never goes upstream: {auth:?}"
    );
    // The client's own version is forwarded, alone.
    let r = s
        .post(
            "/v1/messages",
            Some(&a),
            &[
                ("x-loom-session", "v2"),
                ("anthropic-version", "2099-01-01"),
            ],
            &body,
        )
        .await;
    assert_eq!(r.status(), 200);
    let (key, version, _) = sent(&s);
    assert_eq!(key, ["sk-ant-upstream"]);
    assert_eq!(version, ["2099-01-01"]);
}
