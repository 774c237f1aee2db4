//! The provider client's own cost per call, against the in-process mock upstream on loopback:
//! a whole Chat Completions reply, a streamed one, and a streamed Anthropic reply with thinking
//! and a tool call; `raw/chat_whole` is the same request sent with bare reqwest and read as bytes,
//! so the difference is the client's (body preparation, parsing, assembly, bookkeeping).

#![expect(clippy::unwrap_used, reason = "a bench fails loudly")]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use loom_core::Api;
use loom_mock_upstream::{Mock, MockHandle};
use loom_provider::client::{Client, ProviderConfig};
use serde_json::{json, Value};

fn client(api: Api, mock: &MockHandle, model: &str) -> Client {
    let mut config = ProviderConfig::new(api, mock.base_url());
    config.api_key = Some("bench-key".into());
    config.model = Some(model.into());
    Client::new(config).unwrap()
}

fn chat_body() -> Value {
    json!({"messages": [
        {"role": "system", "content": "You are a careful coding agent. ".repeat(50)},
        {"role": "user", "content": "summarise the repository layout and the failing test in a few words"}
    ]})
}

fn bench(c: &mut Criterion) {
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mock = server.block_on(Mock::spawn()).unwrap();
    let mut group = c.benchmark_group("client");
    group.measurement_time(Duration::from_secs(5));

    let chat = client(Api::OpenaiChat, &mock, "gpt-4o");
    let body = chat_body();
    group.bench_function("chat_whole", |b| {
        b.iter(|| black_box(chat.complete(&body, false, &mut |_| {}).unwrap()))
    });
    group.bench_function("chat_stream", |b| {
        b.iter(|| black_box(chat.complete(&body, true, &mut |_| {}).unwrap()))
    });

    let messages = client(Api::Anthropic, &mock, "claude-haiku-4-5");
    let body = json!({
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": [{"name": "bash", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "list the files of the repository"}],
    });
    group.bench_function("messages_stream_thinking_tool", |b| {
        b.iter(|| black_box(messages.complete(&body, true, &mut |_| {}).unwrap()))
    });
    group.bench_function("messages_whole_thinking_tool", |b| {
        b.iter(|| black_box(messages.complete(&body, false, &mut |_| {}).unwrap()))
    });
    let plain = json!({"max_tokens": 256, "messages": [{"role": "user", "content": "hello"}]});
    group.bench_function("messages_stream_plain", |b| {
        b.iter(|| black_box(messages.complete(&plain, true, &mut |_| {}).unwrap()))
    });

    // The same request as `chat_whole` with bare reqwest, for the client's own share.
    let raw = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", mock.base_url());
    let mut raw_body = chat_body();
    raw_body["model"] = json!("gpt-4o");
    raw_body["stream"] = json!(false);
    let raw_body = raw_body.to_string();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    group.bench_function("raw_chat_whole", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let r = raw
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("authorization", "Bearer bench-key")
                    .body(raw_body.clone())
                    .send()
                    .await
                    .unwrap();
                black_box(r.bytes().await.unwrap())
            })
        })
    });
    let url = format!("{}/v1/messages", mock.base_url());
    let mut stream_body = body.clone();
    stream_body["model"] = json!("claude-haiku-4-5");
    stream_body["stream"] = json!(true);
    let stream_body = stream_body.to_string();
    group.bench_function("raw_messages_stream_thinking_tool", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let r = raw
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("x-api-key", "bench-key")
                    .header("anthropic-version", "2023-06-01")
                    .body(stream_body.clone())
                    .send()
                    .await
                    .unwrap();
                black_box(r.bytes().await.unwrap())
            })
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
