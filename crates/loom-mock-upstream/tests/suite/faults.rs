//! Faults: provider-shaped errors, fragmented and slow bodies, dropped connections, and the
//! order in which queued and default faults apply.

use std::time::{Duration, Instant};

use loom_mock_upstream::Fault;
use serde_json::{json, Value};

use super::{parse_sse, post, post_json, spawn, without_clock, JsonReply as _};

fn chat(stream: bool) -> Value {
    json!({"model": "gpt-4o", "stream": stream, "messages": [{"role": "user", "content": "tell me something"}]})
}

fn anthropic(stream: bool) -> Value {
    json!({"model": "claude-haiku-4-5", "max_tokens": 100, "stream": stream, "messages": [{"role": "user", "content": "hi there"}]})
}

#[tokio::test]
async fn statuses_answer_in_each_providers_shape() {
    let mock = spawn().await;
    let cases = [
        ("/v1/chat/completions", chat(true), 429, "requests"),
        ("/v1/chat/completions", chat(false), 500, "server_error"),
        (
            "/v1/responses",
            json!({"model": "gpt-4o", "input": "x"}),
            400,
            "invalid_request_error",
        ),
        ("/v1/messages", anthropic(true), 529, "overloaded_error"),
        ("/v1/messages", anthropic(false), 429, "rate_limit_error"),
        ("/v1/messages", anthropic(false), 500, "api_error"),
        (
            "/v1/messages",
            anthropic(false),
            400,
            "invalid_request_error",
        ),
    ];
    let count = cases.len();
    for (path, body, status, kind) in cases {
        mock.push_fault(Fault::status(status));
        let resp = post(&mock, path, &body).await;
        assert_eq!(resp.status().as_u16(), status, "{path}");
        assert!(resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"));
        let retryable = status == 429 || status >= 500;
        assert_eq!(
            resp.headers().contains_key("retry-after-ms"),
            retryable,
            "{path} {status}"
        );
        let error: Value = resp.json_value().await;
        if path == "/v1/messages" {
            assert_eq!(error["type"], "error", "{error}");
            assert_eq!(error["error"]["type"], kind, "{error}");
            assert!(error["error"]["message"].is_string());
        } else {
            let inner = &error["error"];
            assert_eq!(inner["type"], kind, "{error}");
            assert!(inner["message"].is_string());
            assert!(
                inner.get("param").is_some() && inner.get("code").is_some(),
                "{error}"
            );
        }
    }
    assert_eq!(
        mock.requests().len(),
        count,
        "faulted requests are recorded too"
    );
}

#[tokio::test]
async fn a_faults_retry_after_replaces_the_short_retry_after_ms() {
    let mock = spawn().await;
    mock.push_fault(Fault {
        retry_after: Some("2".into()),
        ..Fault::status(429)
    });
    let resp = post(&mock, "/v1/messages", &anthropic(false)).await;
    assert_eq!(resp.status().as_u16(), 429);
    assert_eq!(resp.headers()["retry-after"], "2");
    assert!(!resp.headers().contains_key("retry-after-ms"));
}

#[tokio::test]
async fn malformed_requests_get_a_400_naming_the_field() {
    let mock = spawn().await;
    let error = post_json(
        &mock,
        "/v1/chat/completions",
        &json!({"model": "gpt-4o"}),
        400,
    )
    .await;
    assert_eq!(error["error"]["param"], "messages");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("messages"));
    let error = post_json(
        &mock,
        "/v1/messages",
        &json!({"model": "c", "messages": [{"role": "user", "content": "x"}]}),
        400,
    )
    .await;
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_tokens"));

    let resp = reqwest::Client::new()
        .post(format!("{}/v1/responses", mock.base_url()))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let error: Value = resp.json_value().await;
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(mock.requests().last().unwrap().body, json!("{not json"));
}

#[tokio::test]
async fn queued_faults_apply_in_order_before_the_default() {
    let mock = spawn().await;
    mock.set_default_fault(Some(Fault::status(503)));
    mock.push_fault(Fault::status(429));
    mock.push_fault(Fault::default());
    let statuses = [
        post(&mock, "/v1/chat/completions", &chat(false))
            .await
            .status()
            .as_u16(),
        post(&mock, "/v1/chat/completions", &chat(false))
            .await
            .status()
            .as_u16(),
        post(&mock, "/v1/chat/completions", &chat(false))
            .await
            .status()
            .as_u16(),
    ];
    assert_eq!(statuses, [429, 200, 503]);
    mock.set_default_fault(None);
    assert_eq!(
        post(&mock, "/v1/chat/completions", &chat(false))
            .await
            .status()
            .as_u16(),
        200
    );
}

#[tokio::test]
async fn one_byte_pieces_reassemble_to_the_same_events() {
    for (path, body) in [
        ("/v1/chat/completions", chat(true)),
        (
            "/v1/responses",
            json!({"model": "gpt-4o", "stream": true, "input": "héllo wörld, ünïcode"}),
        ),
        ("/v1/messages", anthropic(true)),
    ] {
        let whole = post(&spawn().await, path, &body)
            .await
            .text()
            .await
            .unwrap();
        let mock = spawn().await;
        mock.push_fault(Fault {
            chunk_bytes: Some(1),
            ..Fault::default()
        });
        let mut resp = post(&mock, path, &body).await;
        let mut bytes = Vec::new();
        let mut pieces = 0;
        while let Some(chunk) = resp.chunk().await.unwrap() {
            pieces += 1;
            bytes.extend_from_slice(&chunk);
        }
        assert!(pieces > 1, "{path}: the body arrived in {pieces} piece(s)");
        let split = String::from_utf8(bytes).unwrap();
        let events = |text: &str| -> Vec<(Option<String>, Value)> {
            parse_sse(text)
                .into_iter()
                .map(|e| {
                    let data = if e.data == "[DONE]" {
                        Value::Null
                    } else {
                        without_clock(e.json())
                    };
                    (e.name, data)
                })
                .collect()
        };
        assert_eq!(events(&split), events(&whole), "{path}");
    }
}

#[tokio::test]
async fn drop_after_bytes_closes_mid_stream() {
    for (path, body) in [
        ("/v1/chat/completions", chat(true)),
        ("/v1/messages", anthropic(true)),
        ("/v1/messages", anthropic(false)),
    ] {
        let mock = spawn().await;
        mock.push_fault(Fault {
            drop_after_bytes: Some(50),
            chunk_bytes: Some(16),
            ..Fault::default()
        });
        let mut resp = post(&mock, path, &body).await;
        assert_eq!(resp.status().as_u16(), 200);
        let mut received = Vec::new();
        let outcome = loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => received.extend_from_slice(&chunk),
                Ok(None) => break Ok(()),
                Err(err) => break Err(err),
            }
        };
        assert!(
            outcome.is_err(),
            "{path}: the body must fail, not end cleanly"
        );
        assert_eq!(received.len(), 50, "{path}: bytes before the cut");
    }
    // A body shorter than the cut is sent whole.
    let mock = spawn().await;
    mock.push_fault(Fault {
        drop_after_bytes: Some(1_000_000),
        ..Fault::default()
    });
    let text = post(&mock, "/v1/chat/completions", &chat(true))
        .await
        .text()
        .await
        .unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn delays_hold_the_reply_back() {
    let mock = spawn().await;
    mock.push_fault(Fault {
        delay_ms: Some(150),
        ..Fault::default()
    });
    let started = Instant::now();
    post_json(&mock, "/v1/chat/completions", &chat(false), 200).await;
    assert!(started.elapsed() >= Duration::from_millis(150));

    mock.push_fault(Fault {
        chunk_delay_ms: Some(40),
        ..Fault::default()
    });
    let started = Instant::now();
    let mut resp = post(&mock, "/v1/messages", &anthropic(true)).await;
    let first = resp.chunk().await.unwrap().unwrap();
    let first_at = started.elapsed();
    while resp.chunk().await.unwrap().is_some() {}
    assert!(first.starts_with(b"event: message_start"));
    // Several events follow the first, each one delay later.
    assert!(
        started.elapsed() >= first_at + Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn broken_tool_pairing_is_refused_as_the_provider_would() {
    let mock = spawn().await;
    let chat_body = json!({"model": "gpt-4o", "messages": [
        {"role": "user", "content": "u"},
        {"role": "tool", "tool_call_id": "call_gone", "content": "r"},
    ]});
    let error = post_json(&mock, "/v1/chat/completions", &chat_body, 400).await;
    assert_eq!(error["error"]["param"], "messages[1].role");
    assert_eq!(error["error"]["type"], "invalid_request_error");

    let responses_body = json!({"model": "gpt-4o", "input": [
        {"role": "user", "content": "u"},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
    ]});
    let error = post_json(&mock, "/v1/responses", &responses_body, 400).await;
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("call_1"),
        "{error}"
    );

    let messages_body = json!({"model": "c", "max_tokens": 10, "messages": [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
        {"role": "user", "content": "never answered"},
    ]});
    let error = post_json(&mock, "/v1/messages", &messages_body, 400).await;
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("toolu_1"),
        "{error}"
    );
}
