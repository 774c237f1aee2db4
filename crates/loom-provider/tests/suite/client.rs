//! The HTTP client against the in-process mock upstream: every API whole and streamed, tool
//! calls, thinking, cached usage, and each failure the providers produce (429/529 retried, 400
//! not, a reply cut after its first byte, silence, a closed port).

use std::time::{Duration, Instant};

use base64::Engine as _;
use loom_core::Api;
use loom_mock_upstream::{Fault, Mock, MockHandle};
use loom_provider::client::{Backoff, CallError, Client, Completion, Delta, ProviderConfig};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const APIS: [Api; 4] = Api::ALL;

/// A mock served by its own runtime, so the blocking client runs on the test's thread.
struct Upstream {
    handle: MockHandle,
    _runtime: tokio::runtime::Runtime,
}

fn upstream() -> Upstream {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.block_on(Mock::spawn()).unwrap();
    Upstream {
        handle,
        _runtime: runtime,
    }
}

fn model(api: Api) -> &'static str {
    match api {
        Api::Anthropic => "claude-haiku-4-5",
        Api::Gemini => "gemini-3-flash",
        _ => "gpt-4o",
    }
}

/// Fast limits, so retry and timeout tests take milliseconds; no jitter, so waits are known.
fn config(api: Api, base_url: &str) -> ProviderConfig {
    let mut c = ProviderConfig::new(api, base_url);
    c.api_key = Some("test-key".into());
    c.model = Some(model(api).into());
    c.timeout = Duration::from_secs(20);
    c.idle_timeout = Duration::from_secs(10);
    c.backoff = Backoff {
        base: Duration::from_millis(5),
        cap: Duration::from_millis(20),
        jitter: 0.0,
    };
    c
}

fn client(api: Api, up: &Upstream) -> Client {
    Client::new(config(api, &up.handle.base_url())).unwrap()
}

/// A request in `api`'s shape whose last message says `text`, offering two tools when asked.
fn body(api: Api, text: &str, tools: bool) -> Value {
    let mut b = match api {
        Api::OpenaiChat => json!({"messages": [{"role": "user", "content": text}]}),
        Api::OpenaiResponses => json!({"input": [{"role": "user", "content": text}]}),
        Api::Anthropic => {
            json!({"max_tokens": 256, "messages": [{"role": "user", "content": text}]})
        }
        Api::Gemini => json!({"contents": [{"role": "user", "parts": [{"text": text}]}]}),
    };
    if tools {
        let names = ["search", "fetch"];
        b["tools"] = names
            .iter()
            .map(|n| {
                let schema = json!({"type": "object", "properties": {"query": {"type": "string"}}});
                match api {
                    Api::OpenaiChat => {
                        json!({"type": "function", "function": {"name": n, "parameters": schema}})
                    }
                    Api::OpenaiResponses => {
                        json!({"type": "function", "name": n, "parameters": schema})
                    }
                    Api::Anthropic => json!({"name": n, "input_schema": schema}),
                    Api::Gemini => json!({"functionDeclarations": [
                        {"name": n, "description": n, "parametersJsonSchema": schema}
                    ]}),
                }
            })
            .collect();
    }
    b
}

/// Calls and collects the deltas.
fn call(
    client: &Client,
    body: &Value,
    stream: bool,
) -> (Result<Completion, CallError>, Vec<Delta>) {
    let mut deltas = Vec::new();
    let r = client.complete(body, stream, &mut |d| deltas.push(d.clone()));
    (r, deltas)
}

fn text_of(deltas: &[Delta], thinking: bool) -> String {
    deltas
        .iter()
        .filter_map(|d| match d {
            Delta::Text(t) if !thinking => Some(t.as_str()),
            Delta::Thinking(t) if thinking => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn text_whole_and_streamed_in_every_api_with_split_chunks() {
    let up = upstream();
    for api in APIS {
        let c = client(api, &up);
        let mut replies = Vec::new();
        for stream in [false, true] {
            up.handle.clear();
            // Streams arrive in 7-byte pieces: events, lines and code points split anywhere.
            up.handle.push_fault(Fault {
                chunk_bytes: Some(7),
                ..Fault::default()
            });
            let (r, deltas) = call(
                &c,
                &body(api, "tell me about the weather today", false),
                stream,
            );
            let done = r.unwrap_or_else(|e| panic!("{api} stream={stream}: {e}"));
            assert_eq!(done.attempts, 1);
            assert!(done.first_byte <= done.total);
            // Google's API sends no request id header.
            assert!(done.request_id.is_some() || api == Api::Gemini, "{api}");
            let content = done.reply.content.clone().unwrap();
            assert!(
                content.starts_with("ok: 1 messages, last: tell me about"),
                "{content}"
            );
            assert_eq!(text_of(&deltas, false), content, "{api} stream={stream}");
            let usage = done.reply.usage.unwrap();
            assert!(usage.input_tokens > 0 && usage.output_tokens.unwrap() > 0);

            let sent = &up.handle.requests()[0];
            if api == Api::Gemini {
                // The model and the method are in the path, not the body.
                let method = if stream {
                    "streamGenerateContent"
                } else {
                    "generateContent"
                };
                assert_eq!(sent.path, format!("/v1beta/models/{}:{method}", model(api)));
                assert_eq!(sent.query.as_deref(), stream.then_some("alt=sse"));
                assert!(sent.body.get("model").is_none() && sent.body.get("stream").is_none());
            } else {
                assert_eq!(sent.body["model"], model(api));
                assert_eq!(sent.body["stream"], stream);
            }
            match api {
                Api::Anthropic => {
                    assert_eq!(sent.header("x-api-key"), Some("test-key"));
                    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
                    assert_eq!(sent.path, "/v1/messages");
                }
                Api::Gemini => assert_eq!(sent.header("x-goog-api-key"), Some("test-key")),
                _ => assert_eq!(sent.header("authorization"), Some("Bearer test-key")),
            }
            if api == Api::OpenaiChat {
                let include = &sent.body["stream_options"]["include_usage"];
                assert_eq!(include.as_bool(), stream.then_some(true), "{}", sent.body);
            }
            replies.push(done.reply);
        }
        assert_eq!(replies[0].content, replies[1].content, "{api}");
    }
}

#[test]
fn one_tool_call_and_parallel_calls_in_every_api() {
    let up = upstream();
    for api in APIS {
        let c = client(api, &up);
        for stream in [false, true] {
            let (r, deltas) = call(&c, &body(api, "find the config file", true), stream);
            let reply = r.unwrap().reply;
            assert_eq!(reply.tool_calls.len(), 1, "{api} stream={stream}");
            assert_eq!(reply.tool_calls[0].name, "search");
            let args: Value = serde_json::from_str(&reply.tool_calls[0].arguments).unwrap();
            assert_eq!(args, json!({"query": "find the config file"}));
            assert!(!reply.tool_calls[0].id.is_empty());
            assert!(deltas.contains(&Delta::ToolCall {
                name: "search".into()
            }));

            let (r, _) = call(&c, &body(api, "do both in parallel please", true), stream);
            let reply = r.unwrap().reply;
            let names: Vec<&str> = reply.tool_calls.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(names, ["search", "fetch"], "{api} stream={stream}");
            assert_ne!(reply.tool_calls[0].id, reply.tool_calls[1].id);
        }
    }
}

#[test]
fn anthropic_thinking_blocks_keep_their_signature_byte_for_byte() {
    let up = upstream();
    let c = client(Api::Anthropic, &up);
    let mut b = body(Api::Anthropic, "why is the sky blue", false);
    b["max_tokens"] = json!(2048);
    b["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    for stream in [false, true] {
        up.handle.push_fault(Fault {
            chunk_bytes: Some(5),
            ..Fault::default()
        });
        let (r, deltas) = call(&c, &b, stream);
        let reply = r.unwrap().reply;
        let block = &reply.native[0];
        assert_eq!(block["type"], "thinking");
        let thinking = block["thinking"].as_str().unwrap();
        // The mock signs a block with base64(SHA-256(text)).
        let expected = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(thinking));
        assert_eq!(block["signature"], expected, "stream={stream}");
        assert_eq!(reply.reasoning.as_deref(), Some(thinking));
        assert_eq!(text_of(&deltas, true), thinking);
        assert!(reply.content.is_some());
    }
}

#[test]
fn usage_reports_cached_input_in_every_api() {
    let up = upstream();
    for api in APIS {
        let c = client(api, &up);
        let long = "please read this long and stable instruction ".repeat(40);
        let b = body(api, &long, false);
        let first = call(&c, &b, true).0.unwrap().reply.usage.unwrap();
        let second = call(&c, &b, true).0.unwrap().reply.usage.unwrap();
        let cached = second.cached_input_tokens.unwrap_or(0);
        assert!(cached > 0, "{api}: {second:?} after {first:?}");
        assert!(cached <= second.input_tokens, "{api}: {second:?}");
    }
}

#[test]
fn a_429_is_retried_after_the_providers_retry_after() {
    let up = upstream();
    for api in [Api::OpenaiChat, Api::Anthropic] {
        let c = client(api, &up);
        up.handle.clear();
        up.handle.push_fault(Fault {
            retry_after: Some("1".into()),
            ..Fault::status(429)
        });
        let started = Instant::now();
        let (r, _) = call(&c, &body(api, "hello", false), true);
        let done = r.unwrap();
        assert_eq!(done.attempts, 2);
        assert_eq!(up.handle.requests().len(), 2);
        // The back-off alone would have waited 5 ms.
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        assert!(done.first_byte >= Duration::from_secs(1));
    }
}

#[test]
fn a_529_overload_is_retried_then_reported_with_the_attempts() {
    let up = upstream();
    let c = client(Api::Anthropic, &up);
    up.handle.push_fault(Fault::status(529));
    let (r, _) = call(&c, &body(Api::Anthropic, "hello", false), false);
    assert_eq!(r.unwrap().attempts, 2);

    up.handle.clear();
    up.handle.set_default_fault(Some(Fault::status(529)));
    let (r, _) = call(&c, &body(Api::Anthropic, "hello", false), false);
    let err = r.unwrap_err();
    assert!(
        matches!(
            &err,
            CallError::Overloaded {
                status: 529,
                attempts: 3,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.retryable());
    assert_eq!(up.handle.requests().len(), 3, "max_retries = 2");
}

#[test]
fn a_400_is_not_retried_and_carries_the_providers_message() {
    let up = upstream();
    for api in APIS {
        let c = client(api, &up);
        up.handle.clear();
        up.handle.push_fault(Fault::status(400));
        let err = call(&c, &body(api, "hello", false), true).0.unwrap_err();
        let CallError::Status {
            status,
            kind,
            message,
            attempts,
            ..
        } = &err
        else {
            panic!("{api}: {err}")
        };
        let expected = match api {
            Api::Gemini => "INVALID_ARGUMENT",
            _ => "invalid_request_error",
        };
        assert_eq!((*status, kind.as_str(), *attempts), (400, expected, 1));
        assert_eq!(message, "injected fault: bad request");
        assert!(!err.retryable());
        assert_eq!(up.handle.requests().len(), 1, "{api}: not retried");

        // A request the provider refuses on its merits: the message names the field.
        let mut bad = body(api, "hello", false);
        let field = api.history_field();
        bad.as_object_mut().unwrap().remove(field);
        let err = call(&c, &bad, false).0.unwrap_err();
        assert!(
            matches!(&err, CallError::Status { status: 400, message, .. } if message.contains(field)),
            "{api}: {err}"
        );
    }
}

#[test]
fn a_reply_cut_after_its_first_byte_is_a_stream_cut_not_retried() {
    let up = upstream();
    for api in APIS {
        let c = client(api, &up);
        for stream in [true, false] {
            up.handle.clear();
            up.handle.push_fault(Fault {
                drop_after_bytes: Some(60),
                chunk_bytes: Some(20),
                ..Fault::default()
            });
            let (r, deltas) = call(&c, &body(api, "tell me a long story", false), stream);
            let err = r.unwrap_err();
            assert!(
                matches!(
                    &err,
                    CallError::StreamCut {
                        attempts: 1,
                        received: 60,
                        ..
                    }
                ),
                "{api} stream={stream}: {err}"
            );
            assert_eq!(up.handle.requests().len(), 1, "{api}: not retried");
            if !stream {
                assert!(deltas.is_empty());
            }
        }
    }
}

#[test]
fn a_stream_that_goes_silent_is_cut_by_the_idle_timeout() {
    let up = upstream();
    let mut cfg = config(Api::Anthropic, &up.handle.base_url());
    cfg.idle_timeout = Duration::from_millis(300);
    let c = Client::new(cfg).unwrap();
    up.handle.push_fault(Fault {
        chunk_bytes: Some(40),
        chunk_delay_ms: Some(5_000),
        ..Fault::default()
    });
    let started = Instant::now();
    let err = call(&c, &body(Api::Anthropic, "hello", false), true)
        .0
        .unwrap_err();
    assert!(
        matches!(&err, CallError::StreamCut { received: 40, reason, .. } if reason.contains("no data")),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_server_that_never_answers_times_out_in_the_configured_time() {
    let up = upstream();
    up.handle.set_default_fault(Some(Fault {
        delay_ms: Some(60_000),
        ..Fault::default()
    }));
    // Silence before the headers is retried, within the whole call's time.
    let mut cfg = config(Api::OpenaiChat, &up.handle.base_url());
    cfg.idle_timeout = Duration::from_millis(300);
    cfg.max_retries = 1;
    let c = Client::new(cfg).unwrap();
    let started = Instant::now();
    let err = call(&c, &body(Api::OpenaiChat, "hello", false), false)
        .0
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(
            &err,
            CallError::Timeout {
                attempts: 2,
                waiting_for: "reply headers",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.retryable());
    assert!(
        took >= Duration::from_millis(600) && took < Duration::from_secs(3),
        "{took:?}"
    );

    // The whole call's limit bounds everything, retries included.
    let mut cfg = config(Api::Anthropic, &up.handle.base_url());
    cfg.timeout = Duration::from_millis(500);
    cfg.max_retries = 5;
    let c = Client::new(cfg).unwrap();
    let started = Instant::now();
    let err = call(&c, &body(Api::Anthropic, "hello", false), true)
        .0
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(
            &err,
            CallError::Timeout {
                attempts: 1,
                waiting_for: "complete reply",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

#[test]
fn a_closed_port_is_a_connect_error_after_the_retries() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let c = Client::new(config(Api::OpenaiResponses, &format!("http://{addr}/v1"))).unwrap();
    let err = call(&c, &body(Api::OpenaiResponses, "hello", false), false)
        .0
        .unwrap_err();
    assert!(
        matches!(&err, CallError::Connect { attempts: 3, .. }),
        "{err}"
    );
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    assert!(err.retryable());
}

#[test]
fn the_async_api_on_a_runtime_and_the_blocking_one_inside_it() {
    let up = upstream();
    let c = client(Api::OpenaiResponses, &up);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let b = body(Api::OpenaiResponses, "hello there", false);
    let mut deltas = Vec::new();
    let done = runtime
        .block_on(c.complete_async(&b, true, &mut |d| deltas.push(d.clone())))
        .unwrap();
    let content = done.reply.content.unwrap();
    assert!(content.contains("hello there"));
    assert_eq!(text_of(&deltas, false), content);
    // Inside a runtime's context the blocking call still works (on a helper thread).
    let blocked = runtime.block_on(async { c.complete(&b, false, &mut |_| {}) });
    assert!(blocked
        .unwrap()
        .reply
        .content
        .unwrap()
        .contains("hello there"));
    // Dropping the client (and its runtime) inside an async context must not panic.
    runtime.block_on(async move { drop(c) });
}

#[test]
fn a_body_that_is_not_an_object_or_lacks_a_model_is_refused_before_sending() {
    let up = upstream();
    let c = client(Api::OpenaiChat, &up);
    let err = call(&c, &json!([1]), false).0.unwrap_err();
    assert!(matches!(err, CallError::Request { .. }), "{err}");
    let mut cfg = config(Api::OpenaiChat, &up.handle.base_url());
    cfg.model = None;
    let c = Client::new(cfg).unwrap();
    let err = call(&c, &body(Api::OpenaiChat, "x", false), false)
        .0
        .unwrap_err();
    assert!(err.to_string().contains("model"), "{err}");
    assert_eq!(err.attempts(), 0);
    assert!(up.handle.requests().is_empty());
}

#[test]
fn a_retry_after_beyond_the_calls_time_is_not_waited_for() {
    let up = upstream();
    let mut cfg = config(Api::OpenaiChat, &up.handle.base_url());
    cfg.timeout = Duration::from_secs(2);
    let c = Client::new(cfg).unwrap();
    up.handle.push_fault(Fault {
        retry_after: Some("30".into()),
        ..Fault::status(429)
    });
    let started = Instant::now();
    let err = call(&c, &body(Api::OpenaiChat, "hello", false), false)
        .0
        .unwrap_err();
    assert!(
        matches!(&err, CallError::RateLimited { attempts: 1, retry_after: Some(d), .. } if *d == Duration::from_secs(30)),
        "{err}"
    );
    assert!(err.retryable());
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(up.handle.requests().len(), 1);
}

#[test]
fn responses_reasoning_items_are_the_same_streamed_or_whole() {
    let up = upstream();
    let c = client(Api::OpenaiResponses, &up);
    let mut b = body(Api::OpenaiResponses, "think about the weather", false);
    b["reasoning"] = json!({"effort": "low", "summary": "auto"});
    let mut natives = Vec::new();
    for stream in [false, true] {
        up.handle.push_fault(Fault {
            chunk_bytes: Some(9),
            ..Fault::default()
        });
        let (r, deltas) = call(&c, &b, stream);
        let reply = r.unwrap().reply;
        assert_eq!(reply.native.len(), 1, "stream={stream}: {:?}", reply.native);
        assert_eq!(reply.native[0]["type"], "reasoning");
        let reasoning = reply.reasoning.clone().unwrap();
        assert_eq!(text_of(&deltas, true), reasoning, "stream={stream}");
        natives.push(reply.native[0].clone());
    }
    // Ids differ between the two replies; everything else is kept as sent.
    for n in &mut natives {
        n.as_object_mut().unwrap().remove("id");
    }
    assert_eq!(natives[0], natives[1]);
}
