//! The proxy with a real HTTP client against the mock upstream: both modes, streaming and not,
//! the three APIs, divergence, bad input and upstream faults.

use loom_core::{EventBody, SessionId};
use loom_mock_upstream::Fault;
use loom_server::AuthMode;
use loom_store::ProxyMode;
use serde_json::{json, Value};

use super::support::{assert_forwarded_valid, start, text, Server};

fn tools_chat() -> Value {
    json!([
        {"type": "function", "function": {"name": "read_file", "description": "Read a file",
         "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "bash", "description": "Run a command",
         "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}
    ])
}

fn session(s: &Server, id: &str) -> Vec<loom_core::Event> {
    let id = SessionId::new(id).unwrap();
    s.store().read(&id, 1..=u64::MAX).unwrap()
}

/// Runs a tool-using Chat conversation of `turns` calls; returns the messages sent and received
/// (the last reply included, what the client would send next not).
async fn chat_conversation(s: &Server, id: &str, turns: usize, stream: bool) -> Vec<Value> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a careful agent."}),
        json!({"role": "user", "content": "please read the parallel files main.rs and lib.rs"}),
    ];
    for turn in 0..turns {
        let mut body = json!({"model": "gpt-4o", "messages": messages, "tools": tools_chat(), "temperature": 0});
        if stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        let r = s
            .post(
                "/v1/chat/completions",
                None,
                &[("x-loom-session", id)],
                &body,
            )
            .await;
        assert_eq!(r.status(), 200, "turn {turn}");
        assert_eq!(r.headers()["x-loom-session"], id);
        let message = if stream {
            assemble_chat_stream(&text(r).await)
        } else {
            let v: Value = r.json().await.unwrap();
            v["choices"][0]["message"].clone()
        };
        messages.push(message.clone());
        if turn + 1 == turns {
            break;
        }
        match message["tool_calls"].as_array() {
            Some(calls) if !calls.is_empty() => {
                for c in calls {
                    messages.push(json!({"role": "tool", "tool_call_id": c["id"], "content": format!("output of {} at turn {turn}", c["function"]["name"])}));
                }
            }
            _ => messages.push(
                json!({"role": "user", "content": format!("and now step {turn}, with tools")}),
            ),
        }
    }
    messages
}

/// The assistant message a Chat stream carries, as an SDK would rebuild it.
fn assemble_chat_stream(sse: &str) -> Value {
    let mut content = String::new();
    let mut calls: Vec<Value> = Vec::new();
    let mut done = false;
    for line in sse.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let chunk: Value = serde_json::from_str(data).unwrap();
        let Some(delta) = chunk["choices"].get(0).map(|c| &c["delta"]) else {
            continue;
        };
        if let Some(t) = delta["content"].as_str() {
            content.push_str(t);
        }
        for tc in delta["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap() as usize;
            if calls.len() <= i {
                calls.push(json!({"id": "", "type": "function", "function": {"name": "", "arguments": ""}}));
            }
            if let Some(id) = tc["id"].as_str() {
                calls[i]["id"] = json!(id);
            }
            if let Some(n) = tc["function"]["name"].as_str() {
                calls[i]["function"]["name"] = json!(n);
            }
            if let Some(a) = tc["function"]["arguments"].as_str() {
                let so_far = calls[i]["function"]["arguments"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                calls[i]["function"]["arguments"] = json!(so_far + a);
            }
        }
    }
    assert!(done, "the stream ended with [DONE]");
    let mut m = json!({"role": "assistant", "content": if content.is_empty() { Value::Null } else { json!(content) }});
    if !calls.is_empty() {
        m["tool_calls"] = json!(calls);
    }
    m
}

#[tokio::test]
async fn chat_conversations_are_logged_with_usage_in_both_modes_streaming_and_not() {
    for (mode, stream) in [
        (ProxyMode::Observe, false),
        (ProxyMode::Observe, true),
        (ProxyMode::Fit, false),
        (ProxyMode::Fit, true),
    ] {
        let s = start(AuthMode::None, mode).await;
        let messages = chat_conversation(&s, "c1", 4, stream).await;
        let log = session(&s, "c1");
        // Everything the client sent and every reply is in the log, in order, once.
        assert_eq!(log.len(), messages.len(), "{mode:?} stream={stream}");
        let replies = log
            .iter()
            .filter(|e| matches!(e.body, EventBody::Assistant { .. }))
            .count();
        assert_eq!(replies, 4);
        // Every call has a receipt with the provider's usage.
        let calls = s
            .store()
            .model_calls(&SessionId::new("c1").unwrap())
            .unwrap();
        assert_eq!(calls.len(), 4);
        for c in &calls {
            let usage = c.usage.expect("usage recorded");
            assert!(usage.input_tokens > 0);
        }
        // After the first call, each reads only the messages the client added.
        let metrics = text(s.get("/metrics", None).await).await;
        assert!(
            metrics.contains("loom_proxy_histories_total{read=\"whole\"} 1")
                && metrics.contains("loom_proxy_histories_total{read=\"continuation\"} 3"),
            "{metrics}"
        );
        // What the upstream saw grows only at its end between compaction points (no compaction
        // in so short a conversation).
        let sent: Vec<Vec<Value>> = s
            .mock
            .requests()
            .iter()
            .map(|r| r.body["messages"].as_array().unwrap().clone())
            .collect();
        assert_eq!(sent.len(), 4);
        for pair in sent.windows(2) {
            assert_eq!(
                &pair[1][..pair[0].len()],
                &pair[0][..],
                "append-only ({mode:?})"
            );
        }
        assert_forwarded_valid(&s, "/v1/chat/completions", "CreateChatCompletionRequest");
        if mode == ProxyMode::Observe {
            // Observe forwards the body unchanged.
            assert_eq!(s.mock.requests()[0].body["temperature"], 0);
        }
        s.stop().await;
    }
}

#[tokio::test]
async fn fit_mode_keeps_long_conversations_within_the_budget() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let mut messages = vec![json!({"role": "system", "content": "You are terse."})];
    let big = "lorem ipsum dolor sit amet ".repeat(400);
    let mut sizes = Vec::new();
    for turn in 0..30 {
        messages.push(json!({"role": "user", "content": format!("turn {turn}: {big}")}));
        let body = json!({"model": "gpt-4o", "messages": messages});
        let r = s
            .post(
                "/v1/chat/completions",
                None,
                &[("x-loom-session", "long"), ("x-loom-budget", "8000")],
                &body,
            )
            .await;
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        messages.push(v["choices"][0]["message"].clone());
        let sent = s.mock.requests().last().unwrap().body.clone();
        let receipt = s
            .store()
            .model_calls(&SessionId::new("long").unwrap())
            .unwrap();
        let estimate = receipt.last().unwrap().call.receipt["receipt"]["estimate"]
            .as_u64()
            .unwrap();
        assert!(estimate <= 8000, "turn {turn}: {estimate} tokens");
        sizes.push(sent["messages"].as_array().unwrap().len());
    }
    // The full history would be 61 messages; what went upstream stayed bounded.
    assert!(*sizes.last().unwrap() < 61, "{sizes:?}");
    assert_forwarded_valid(&s, "/v1/chat/completions", "CreateChatCompletionRequest");
    assert_eq!(session(&s, "long").len(), 61, "the log keeps everything");
}

#[tokio::test]
async fn anthropic_thinking_blocks_are_replayed_byte_for_byte() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let tools = json!([{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]);
    let mut messages = vec![json!({"role": "user", "content": "read main.rs please"})];
    let mut body = json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": "Be careful.",
        "thinking": {"type": "enabled", "budget_tokens": 512}, "tools": tools, "messages": messages});
    let r = s
        .post(
            "/v1/messages",
            None,
            &[
                ("x-loom-session", "a1"),
                ("anthropic-version", "2023-06-01"),
            ],
            &body,
        )
        .await;
    assert_eq!(r.status(), 200);
    let reply: Value = r.json().await.unwrap();
    let content = reply["content"].as_array().unwrap().clone();
    let thinking = content
        .iter()
        .find(|b| b["type"] == "thinking")
        .expect("a thinking block")
        .clone();
    let tool_use = content
        .iter()
        .find(|b| b["type"] == "tool_use")
        .expect("a tool call")
        .clone();
    messages.push(json!({"role": "assistant", "content": content}));
    messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use["id"], "content": "fn main() {}"}]}));
    body["messages"] = json!(messages);
    let r = s
        .post(
            "/v1/messages",
            None,
            &[
                ("x-loom-session", "a1"),
                ("anthropic-version", "2023-06-01"),
            ],
            &body,
        )
        .await;
    assert_eq!(r.status(), 200, "{}", text(r).await);
    let sent = s.mock.requests().last().unwrap().body.clone();
    let replayed = sent["messages"][1]["content"][0].clone();
    assert_eq!(replayed["type"], "thinking");
    assert_eq!(replayed["thinking"], thinking["thinking"]);
    assert_eq!(replayed["signature"], thinking["signature"]);
    // The anthropic-version header went upstream.
    let headers = s.mock.requests().last().unwrap().headers.clone();
    assert!(headers
        .iter()
        .any(|(n, v)| n == "anthropic-version" && v == "2023-06-01"));
}

#[tokio::test]
async fn anthropic_and_responses_streams_are_relayed_and_logged() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 256, "stream": true,
        "messages": [{"role": "user", "content": "hello there"}]});
    let r = s
        .post("/v1/messages", None, &[("x-loom-session", "as")], &body)
        .await;
    assert_eq!(r.status(), 200);
    let sse = text(r).await;
    assert!(sse.contains("event: message_stop"), "{sse}");
    let log = session(&s, "as");
    assert_eq!(log.len(), 2);
    assert!(matches!(log[1].body, EventBody::Assistant { .. }));

    let body = json!({"model": "gpt-4o", "stream": true, "instructions": "Be brief.", "input": "hello there"});
    let r = s
        .post("/v1/responses", None, &[("x-loom-session", "rs")], &body)
        .await;
    assert_eq!(r.status(), 200);
    let sse = text(r).await;
    assert!(sse.contains("response.completed"), "{sse}");
    let log = session(&s, "rs");
    assert_eq!(log.len(), 3, "{log:?}");
    let calls = s
        .store()
        .model_calls(&SessionId::new("rs").unwrap())
        .unwrap();
    assert!(calls[0].usage.is_some());
}

#[tokio::test]
async fn an_edited_history_starts_a_new_session_and_never_rewrites_the_log() {
    let s = start(AuthMode::None, ProxyMode::Observe).await;
    let first = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "one"}]});
    let r = s.post("/v1/chat/completions", None, &[], &first).await;
    let id = r.headers()["x-loom-session"].to_str().unwrap().to_owned();
    assert!(id.starts_with("auto-"), "{id}");
    let reply: Value = r.json().await.unwrap();
    // The same opening derives the same session.
    let second = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "one"}, reply["choices"][0]["message"], {"role": "user", "content": "two"}]});
    let r = s.post("/v1/chat/completions", None, &[], &second).await;
    assert_eq!(r.headers()["x-loom-session"].to_str().unwrap(), id);
    assert!(r.headers().get("x-loom-diverged").is_none());
    // An edited history forks.
    let edited = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "one"}, {"role": "assistant", "content": "something else"}, {"role": "user", "content": "two"}]});
    let r = s.post("/v1/chat/completions", None, &[], &edited).await;
    assert_eq!(r.headers()["x-loom-diverged"].to_str().unwrap(), id);
    let fork = r.headers()["x-loom-session"].to_str().unwrap().to_owned();
    assert_eq!(fork, format!("{id}~2"));
    assert_eq!(session(&s, &id).len(), 4);
    assert_eq!(session(&s, &fork).len(), 4);
}

#[tokio::test]
async fn bad_requests_get_the_providers_400_naming_the_field_and_store_nothing() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let cases = [
        (
            "/v1/chat/completions",
            json!({"model": "gpt-4o", "messages": "hi"}),
            "messages",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "gpt-4o", "messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]}),
            "messages[0]",
        ),
        (
            "/v1/messages",
            json!({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "x"}]}),
            "max_tokens",
        ),
        ("/v1/responses", json!({"input": "x"}), "model"),
    ];
    for (path, body, field) in cases {
        let r = s.post(path, None, &[], &body).await;
        assert_eq!(r.status(), 400, "{path} {body}");
        let v: Value = r.json().await.unwrap();
        let message = if path == "/v1/messages" {
            assert_eq!(v["type"], "error");
            assert_eq!(v["error"]["type"], "invalid_request_error");
            v["error"]["message"].as_str().unwrap().to_owned()
        } else {
            assert_eq!(v["error"]["type"], "invalid_request_error");
            v["error"]["message"].as_str().unwrap().to_owned()
        };
        assert!(message.contains(field), "{message} should name {field}");
    }
    let r = s
        .http
        .post(format!("{}/v1/chat/completions", s.url))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(s.store().sessions().unwrap().is_empty(), "nothing stored");
    assert!(s.mock.requests().is_empty(), "nothing forwarded");
}

#[tokio::test]
async fn upstream_errors_and_dropped_streams_reach_the_client_and_log_no_partial_turn() {
    let s = start(AuthMode::None, ProxyMode::Observe).await;
    for status in [400u16, 429, 500, 529] {
        s.mock.push_fault(Fault::status(status));
        let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]});
        let r = s
            .post("/v1/messages", None, &[("x-loom-session", "e")], &body)
            .await;
        assert_eq!(r.status().as_u16(), status);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], "error");
    }
    let metrics = text(s.get("/metrics", None).await).await;
    assert!(
        metrics
            .contains("loom_upstream_errors_total{provider=\"anthropic\",kind=\"status_529\"} 1"),
        "{metrics}"
    );
    // A stream that breaks off: the client sees it break, the log holds no partial reply.
    s.mock.push_fault(Fault {
        drop_after_bytes: Some(120),
        ..Fault::default()
    });
    let body = json!({"model": "gpt-4o", "stream": true, "messages": [{"role": "user", "content": "stream please"}]});
    let r = s
        .post(
            "/v1/chat/completions",
            None,
            &[("x-loom-session", "d")],
            &body,
        )
        .await;
    assert_eq!(r.status(), 200);
    let relayed = r.text().await;
    assert!(
        relayed.map_or(true, |b| !b.contains("[DONE]")),
        "the break reached the client"
    );
    let log = session(&s, "d");
    assert_eq!(log.len(), 1, "only the user message: {log:?}");
}

#[tokio::test]
async fn shutdown_lets_a_stream_in_flight_finish_and_be_logged() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    s.mock.push_fault(Fault {
        chunk_bytes: Some(48),
        chunk_delay_ms: Some(20),
        ..Fault::default()
    });
    let body = json!({"model": "gpt-4o", "stream": true, "messages": [{"role": "user", "content": "a slow answer please"}]});
    let r = s
        .post(
            "/v1/chat/completions",
            None,
            &[("x-loom-session", "sd")],
            &body,
        )
        .await;
    assert_eq!(r.status(), 200);
    let state = std::sync::Arc::clone(&s.state);
    let url = s.url.clone();
    let stopping = tokio::spawn(s.stop());
    // The stream in flight is relayed to its end.
    let sse = r.text().await.unwrap();
    assert!(sse.contains("[DONE]"), "{sse}");
    stopping.await.unwrap();
    let log = state
        .store
        .read(&SessionId::new("sd").unwrap(), 1..=u64::MAX)
        .unwrap();
    assert_eq!(log.len(), 2, "the reply the client received is logged");
    // New requests are refused once it has stopped.
    assert!(reqwest::get(format!("{url}/healthz")).await.is_err());
}

#[tokio::test]
async fn fit_reanchors_a_session_whose_provider_counts_more_than_the_estimate() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    // Claude has no public tokenizer: Loom estimates. This provider counts 1.5 times the mock's
    // own rule, well above the estimate.
    s.mock.mock().set_input_scale(1.5);
    let headers = [("x-loom-session", "anch"), ("x-loom-budget", "6000")];
    let mut messages = vec![json!({"role": "user",
        "content": format!("start: {}", "words to read and count. ".repeat(100))})];
    let mut anchors = Vec::new();
    let mut budgets = Vec::new();
    for turn in 0..6 {
        let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages});
        let r = s.post("/v1/messages", None, &headers, &body).await;
        assert_eq!(r.status(), 200, "turn {turn}");
        anchors.push(
            r.headers()
                .get("x-loom-anchor")
                .map(|v| v.to_str().unwrap().parse::<f64>().unwrap()),
        );
        let reply: Value = r.json().await.unwrap();
        let call = s
            .store()
            .last_model_call(&SessionId::new("anch").unwrap())
            .unwrap()
            .unwrap();
        budgets.push(
            call.call.receipt["receipt"]["budget"]["context_window"]
                .as_u64()
                .unwrap(),
        );
        messages.push(json!({"role": "assistant", "content": reply["content"]}));
        messages.push(json!({"role": "user",
            "content": format!("turn {turn}: {}", "more words to read and count again. ".repeat(150))}));
    }
    assert_eq!(anchors[0], None, "nothing reported yet: {anchors:?}");
    let factor = anchors[1].expect("the second call is anchored on the first's usage");
    assert!(factor > 1.0 && factor <= 2.0, "{factor}");
    assert_eq!((factor * 16.0).fract(), 0.0, "a sixteenth: {factor}");
    // Never lowered while the session is held, so the policy (and the cached prefix) moves
    // only when the provider's count rises above the held factor.
    for pair in anchors[1..].windows(2) {
        assert!(pair[1].unwrap() >= pair[0].unwrap(), "{anchors:?}");
    }
    assert!(budgets[1] < budgets[0], "the room shrinks: {budgets:?}");
    let last = s
        .store()
        .last_model_call(&SessionId::new("anch").unwrap())
        .unwrap()
        .unwrap();
    assert!(
        last.usage.unwrap().input_tokens <= 6000,
        "the provider's own count of the last request is within the budget: {:?}",
        last.usage
    );
}

#[tokio::test]
async fn count_tokens_is_answered_locally_and_anchored_on_reported_usage() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let mut body = json!({"model": "claude-sonnet-4-5", "max_tokens": 64,
        "messages": [{"role": "user", "content": "count these words for me, all of them. ".repeat(40)}]});
    let count = |b: &Value| {
        let mut b = b.clone();
        b.as_object_mut().unwrap().remove("max_tokens");
        b
    };
    let r = s
        .post(
            "/v1/messages/count_tokens",
            None,
            &[("x-loom-session", "ct")],
            &count(&body),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert!(
        r.headers().get("x-loom-anchor").is_none(),
        "nothing to anchor on yet"
    );
    let plain = r.json::<Value>().await.unwrap()["input_tokens"]
        .as_u64()
        .unwrap();
    assert!(plain > 0);
    assert!(s.mock.requests().is_empty(), "answered locally");
    // One call through the proxy: the provider's usage is recorded against Loom's estimate.
    let r = s
        .post("/v1/messages", None, &[("x-loom-session", "ct")], &body)
        .await;
    let reply: Value = r.json().await.unwrap();
    body["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "assistant", "content": reply["content"]}));
    body["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "user", "content": "and these"}));
    let call = s
        .store()
        .last_model_call(&SessionId::new("ct").unwrap())
        .unwrap()
        .unwrap();
    let factor = call.usage.unwrap().input_tokens as f64
        / call.call.receipt["receipt"]["estimate"].as_u64().unwrap() as f64;
    let r = s
        .post(
            "/v1/messages/count_tokens",
            None,
            &[("x-loom-session", "ct")],
            &count(&body),
        )
        .await;
    let anchored: f64 = r.headers()["x-loom-anchor"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((anchored - factor).abs() < 1e-3, "{anchored} vs {factor}");
    assert!(
        r.json::<Value>().await.unwrap()["input_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
}
