//! The HTTP control API, `GET /v1/models`, unknown paths, in-process use of the router, and
//! the binary's announcement line.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use loom_mock_upstream::Mock;
use serde_json::{json, Value};
use tower::ServiceExt as _;

use super::{post, spawn, JsonBody as _, JsonReply as _};

#[tokio::test]
async fn control_api_records_clears_and_queues_faults() {
    let mock = spawn().await;
    let client = reqwest::Client::new();
    let url = |path: &str| format!("{}{path}", mock.base_url());
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
    post(&mock, "/v1/chat/completions", &body).await;

    let recorded: Value = client
        .get(url("/_mock/requests"))
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    assert_eq!(
        recorded.as_array().unwrap().len(),
        1,
        "control calls are not recorded"
    );
    assert_eq!(recorded[0]["path"], "/v1/chat/completions");
    assert_eq!(recorded[0]["method"], "POST");
    assert_eq!(recorded[0]["body"], body);
    assert!(recorded[0]["headers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h == &json!(["authorization", "Bearer sk-test"])));

    assert_eq!(
        client
            .delete(url("/_mock/requests"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        204
    );
    assert!(mock.requests().is_empty());

    let resp = client
        .post(url("/_mock/faults"))
        .json_body(&json!({"status": 529}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    let resp = client
        .post(url("/_mock/default_fault"))
        .json_body(&json!({"status": 500}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    assert_eq!(
        post(&mock, "/v1/messages", &json!({}))
            .await
            .status()
            .as_u16(),
        529
    );
    assert_eq!(
        post(&mock, "/v1/messages", &json!({}))
            .await
            .status()
            .as_u16(),
        500
    );
    let resp = client
        .post(url("/_mock/default_fault"))
        .json_body(&Value::Null)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    assert_eq!(
        post(&mock, "/v1/chat/completions", &body)
            .await
            .status()
            .as_u16(),
        200
    );

    for bad in [
        json!({"status": 5000}),
        json!({"stauts": 500}),
        json!(null),
        json!({"status": "x"}),
    ] {
        let resp = client
            .post(url("/_mock/faults"))
            .json_body(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 400, "{bad}");
        let error: Value = resp.json_value().await;
        assert!(
            error["error"].as_str().unwrap().starts_with("fault"),
            "{error}"
        );
    }
    assert_eq!(
        post(&mock, "/v1/chat/completions", &body)
            .await
            .status()
            .as_u16(),
        200,
        "bad faults were not queued"
    );
}

#[tokio::test]
async fn reset_forgets_the_cache() {
    let mock = spawn().await;
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "a long enough message to cache"}]});
    post(&mock, "/v1/chat/completions", &body).await;
    let cached = |v: Value| {
        v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
    };
    let again: Value = post(&mock, "/v1/chat/completions", &body)
        .await
        .json_value()
        .await;
    assert!(cached(again) > 0);
    let resp = reqwest::Client::new()
        .post(format!("{}/_mock/reset", mock.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    let after: Value = post(&mock, "/v1/chat/completions", &body)
        .await
        .json_value()
        .await;
    assert_eq!(cached(after), 0);
}

#[tokio::test]
async fn models_in_both_shapes() {
    let mock = spawn().await;
    let openai: Value = reqwest::get(format!("{}/v1/models", mock.base_url()))
        .await
        .unwrap()
        .json_value()
        .await;
    assert_eq!(openai["object"], "list");
    assert!(openai["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["object"] == "model" && m["id"].is_string() && m["owned_by"].is_string()));
    let anthropic: Value = reqwest::Client::new()
        .get(format!("{}/v1/models", mock.base_url()))
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    assert_eq!(anthropic["has_more"], false);
    assert!(anthropic["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["type"] == "model"));
}

#[tokio::test]
async fn unknown_paths_are_recorded_and_answered_404() {
    let mock = spawn().await;
    let resp = post(&mock, "/v1/fine_tuning/jobs", &json!({"model": "x"})).await;
    assert_eq!(resp.status().as_u16(), 404);
    let error: Value = resp.json_value().await;
    assert_eq!(
        error["type"], "error",
        "anthropic-version asks for Anthropic's shape: {error}"
    );
    assert_eq!(mock.requests()[0].path, "/v1/fine_tuning/jobs");
}

#[tokio::test]
async fn router_answers_in_process() {
    let mock = Mock::new();
    let request = axum::http::Request::post("/v1/messages")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(
            json!({"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "in process"}]}).to_string(),
        ))
        .unwrap();
    let resp = mock.router().oneshot(request).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let reply: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        reply["content"][0]["text"],
        "ok: 1 messages, last: in process"
    );
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn binary_announces_its_address_and_serves() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_loom-mock-upstream"))
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim_end()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_owned();
    assert!(url.starts_with("http://127.0.0.1:"));
    let models = reqwest::get(format!("{url}/v1/models")).await.unwrap();
    assert_eq!(models.status().as_u16(), 200);
    child.kill().unwrap();
    child.wait().unwrap();

    let bad = Command::new(env!("CARGO_BIN_EXE_loom-mock-upstream"))
        .args(["--listen", "nowhere"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(bad.stdout.is_empty());
}
