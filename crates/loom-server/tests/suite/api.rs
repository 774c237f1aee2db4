//! The HTTP API: every endpoint, its errors, and its responses against `/openapi.json`.

use loom_server::AuthMode;
use loom_store::ProxyMode;
use serde_json::{json, Value};

use super::support::{start, text};

#[tokio::test]
async fn every_cli_capability_is_reachable_over_http() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let events = json!([
        {"ts_ms": 1, "kind": "system", "content": "You are careful."},
        {"ts_ms": 2, "kind": "user", "content": "List the files."},
        {"ts_ms": 3, "kind": "assistant", "tool_calls": [{"id": "c1", "name": "bash", "arguments": "{\"command\":\"ls\"}"}]},
    ]);
    let r = s
        .post(
            "/loom/v1/sessions",
            None,
            &[],
            &json!({"id": "s1", "agent": "coder", "events": events}),
        )
        .await;
    assert_eq!(r.status(), 201, "{}", text(r).await);
    let big = "file.txt\n".repeat(20_000);
    let r = s.post("/loom/v1/sessions/s1/events", None, &[], &json!({"events": [
        {"ts_ms": 4, "kind": "tool_result", "call_id": "c1", "tool_name": "bash", "content": {"text": big},
         "stats": {"bytes": big.len(), "lines": 20_000, "sha256": sha(&big), "content_type": "text"}},
        {"ts_ms": 5, "kind": "assistant", "content": "There are many files."},
    ]})).await;
    assert_eq!(r.status(), 200, "{}", text(r).await);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["first_seq"].as_u64(), v["last_seq"].as_u64()),
        (Some(4), Some(5))
    );

    let v: Value = s.get("/loom/v1/sessions", None).await.json().await.unwrap();
    assert_eq!(v["sessions"][0]["id"], "s1");
    assert_eq!(v["sessions"][0]["event_count"], 5);
    let v: Value = s
        .get("/loom/v1/sessions/s1/events?from=2&to=3", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["events"].as_array().unwrap().len(), 2);

    let r = s
        .post(
            "/loom/v1/sessions/s1/render",
            None,
            &[],
            &json!({"model": "gpt-4o", "budget": 4000, "format": "openai-chat"}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", text(r).await);
    let rendered: Value = r.json().await.unwrap();
    assert_eq!(rendered["model_call"], 1);
    assert!(rendered["body"]["messages"].is_array());
    assert!(rendered["receipt"]["estimate"].as_u64().unwrap() <= 4000);

    let v: Value = s
        .get("/loom/v1/sessions/s1/steps", None)
        .await
        .json()
        .await
        .unwrap();
    let step = &v["steps"][0];
    let reference = step["outcome_ref"]
        .as_str()
        .expect("a big output is offloaded")
        .to_owned();
    let r = s
        .get(
            &format!("/loom/v1/sessions/s1/recall?ref={reference}"),
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap(), big.as_bytes());

    let v: Value = s
        .get("/loom/v1/sessions/s1/explain?event=4", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["kind"], "tool_result");
    assert_eq!(v["calls"][0]["call"], 1);
    assert!(v["original"]["recall"]
        .as_str()
        .unwrap()
        .contains("recall?ref="));

    let r = s.post("/loom/v1/sessions/s1/usage", None, &[], &json!({"call": 1, "input_tokens": 900, "cached_input_tokens": 512, "output_tokens": 10})).await;
    assert_eq!(r.status(), 200, "{}", text(r).await);
    let v: Value = s
        .get("/loom/v1/sessions/s1/receipts", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["receipts"][0]["usage"]["cached_input_tokens"], 512);
    let v: Value = s
        .get("/loom/v1/sessions/s1/receipts/1", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["usage"]["input_tokens"], 900);

    let history = json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]});
    let r = s
        .post(
            "/loom/v1/import?session=imp&format=openai",
            None,
            &[],
            &history,
        )
        .await;
    assert_eq!(r.status(), 201, "{}", text(r).await);
    let r = s
        .post(
            "/loom/v1/import?session=imp&format=openai",
            None,
            &[],
            &history,
        )
        .await;
    assert_eq!(r.status(), 200, "re-importing is a no-op");
}

#[tokio::test]
async fn bad_input_is_a_4xx_that_names_the_field_and_changes_nothing() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let r = s
        .post(
            "/loom/v1/sessions",
            None,
            &[],
            &json!({"id": "s", "events": [{"ts_ms": 1, "kind": "user", "content": "x"}]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        // Stats that do not describe the content.
        (
            "/loom/v1/sessions/s/events",
            json!({"events": [{"ts_ms": 2, "kind": "tool_result", "call_id": "ghost", "tool_name": "x", "content": {"text": "y"}, "stats": {"bytes": 1, "lines": 1, "sha256": "a", "content_type": "text"}}]}),
            400,
            "events[0].stats",
        ),
        // A result that answers no call.
        (
            "/loom/v1/sessions/s/events",
            json!({"events": [{"ts_ms": 2, "kind": "tool_result", "call_id": "ghost", "tool_name": "x", "content": {"text": "y"}, "stats": {"bytes": 1, "lines": 1, "sha256": sha("y"), "content_type": "text"}}]}),
            400,
            "events[0]",
        ),
        (
            "/loom/v1/sessions/s/events",
            json!({"events": [{"ts_ms": "soon", "kind": "user", "content": "x"}]}),
            400,
            "events[0]",
        ),
        (
            "/loom/v1/sessions/s/events",
            json!({"events": []}),
            400,
            "events",
        ),
        (
            "/loom/v1/sessions/nope/events",
            json!({"events": [{"ts_ms": 2, "kind": "user", "content": "x"}]}),
            404,
            "",
        ),
        ("/loom/v1/sessions", json!({"id": "s"}), 409, ""),
        ("/loom/v1/sessions", json!({"id": ""}), 400, "id"),
        (
            "/loom/v1/sessions/s/render",
            json!({"model": "no-such-model"}),
            400,
            "model",
        ),
        (
            "/loom/v1/sessions/s/usage",
            json!({"call": 9, "input_tokens": 1}),
            404,
            "",
        ),
    ];
    for (path, body, status, field) in cases {
        let r = s.post(path, None, &[], &body).await;
        assert_eq!(r.status().as_u16(), status, "{path} {body}");
        let v: Value = r.json().await.unwrap();
        assert!(v["error"]["message"].is_string(), "{v}");
        if !field.is_empty() {
            let f = v["error"]["field"].as_str().unwrap_or_default();
            assert!(
                f.starts_with(field),
                "{path}: field {f:?} should name {field}: {v}"
            );
        }
    }
    let v: Value = s
        .get("/loom/v1/sessions/s", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["event_count"], 1, "nothing stored changed");
    let r = s
        .http
        .post(format!("{}/loom/v1/sessions/s/events", s.url))
        .body(vec![0xff, 0xfe, 0x00])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = s
        .http
        .post(format!("{}/loom/v1/sessions/s/events", s.url))
        .body(vec![b' '; 40 << 20])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
}

fn sha(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}
