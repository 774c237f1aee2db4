//! OpenTelemetry export and `/metrics`: the test collector (`loom_testkit::otlp`: OTLP over HTTP,
//! protobuf, decoded with the protocol's own types) receives the spans of proxied calls made through the real server
//! against the mock upstream; `/metrics` keeps the names scrapers know.

use std::sync::Arc;
use std::time::Duration;

use loom_mock_upstream::Fault;
use loom_server::AuthMode;
use loom_store::ProxyMode;
use loom_testkit::otlp::{attributes, Collector, Span, SpanKind};
use serde_json::json;

use super::support::{start_with, text, Server};

/// Sends what the server's exporter holds, then waits until `n` spans have arrived; returns
/// them with their service's name.
async fn spans(s: &Server, collector: &Collector, n: usize) -> Vec<(String, Span)> {
    let state = Arc::clone(&s.state);
    tokio::task::spawn_blocking(move || state.telemetry.flush())
        .await
        .unwrap();
    for _ in 0..200 {
        if collector.spans().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    collector
        .spans()
        .into_iter()
        .map(|r| (r.service, r.span))
        .collect()
}

#[tokio::test]
async fn a_streamed_proxied_call_is_a_span_with_its_attempt_usage_and_receipt() {
    let collector = Collector::start().unwrap();
    let s = start_with(AuthMode::None, ProxyMode::Fit, |c| {
        c.telemetry.otlp_endpoint = Some(collector.url().to_owned());
    })
    .await;
    let body = json!({
        "model": "gpt-4o",
        "max_tokens": 64,
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": "You are a careful agent."},
            {"role": "user", "content": "say hello"}
        ],
    });
    let r = s
        .post(
            "/v1/chat/completions",
            None,
            &[
                ("x-claude-code-session-id", "cc-42"),
                ("x-loom-budget", "8000"),
            ],
            &body,
        )
        .await;
    assert_eq!(r.status(), 200);
    let call_id = r.headers()["x-loom-call"].to_str().unwrap().to_owned();
    let stored = r.headers()["x-loom-session"].to_str().unwrap().to_owned();
    let sse = text(r).await;
    assert!(sse.contains("[DONE]"), "{sse}");
    // The reply's usage as the client saw it in the stream.
    let usage = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .find_map(|v| v.get("usage").filter(|u| !u.is_null()).cloned())
        .expect("the stream carries usage");

    let got = spans(&s, &collector, 2).await;
    assert_eq!(got.len(), 2, "{got:?}");
    let (service, call) = got
        .iter()
        .find(|(_, sp)| sp.kind == SpanKind::Server as i32)
        .expect("the call's span");
    assert_eq!(service, "loom-serve");
    let (_, attempt) = got
        .iter()
        .find(|(_, sp)| sp.kind == SpanKind::Client as i32)
        .expect("the attempt's span");
    assert_eq!(call.name, "chat gpt-4o");
    assert_eq!(attempt.trace_id, call.trace_id);
    assert_eq!(attempt.parent_span_id, call.span_id);
    // The call's span ends when the stream has ended and its usage is read, after its attempt
    // started.
    assert!(call.end_time_unix_nano >= attempt.start_time_unix_nano);
    assert!(call.start_time_unix_nano <= attempt.start_time_unix_nano);

    let a = attributes(call);
    let want = [
        ("gen_ai.system", "openai".to_owned()),
        ("gen_ai.operation.name", "chat".to_owned()),
        ("gen_ai.request.model", "gpt-4o".to_owned()),
        ("gen_ai.request.max_tokens", "64".to_owned()),
        (
            "gen_ai.usage.input_tokens",
            usage["prompt_tokens"].to_string(),
        ),
        (
            "gen_ai.usage.output_tokens",
            usage["completion_tokens"].to_string(),
        ),
        (
            "gen_ai.usage.cache_read.input_tokens",
            usage["prompt_tokens_details"]["cached_tokens"].to_string(),
        ),
        ("session.id", "cc-42".to_owned()),
        ("loom.session", stored.clone()),
        ("loom.mode", "fit".to_owned()),
        ("loom.receipt.id", call_id.clone()),
        ("loom.budget.requested", "8000".to_owned()),
        ("loom.compaction_point", "false".to_owned()),
        ("loom.events.stubbed", "0".to_owned()),
        ("loom.events.grouped", "0".to_owned()),
        ("loom.events.dropped", "0".to_owned()),
        ("loom.events.verbatim", "2".to_owned()),
    ];
    for (key, value) in want {
        assert_eq!(a.get(key), Some(&value), "{key} in {a:#?}");
    }
    assert!(a["gen_ai.response.model"].starts_with("gpt-4o"), "{a:#?}");
    for key in ["loom.budget", "loom.estimate"] {
        assert!(a[key].parse::<u64>().unwrap() > 0, "{key} in {a:#?}");
    }
    assert!(!a.contains_key("error.type"), "{a:#?}");
    let b = attributes(attempt);
    assert_eq!(
        b.get("http.response.status_code").map(String::as_str),
        Some("200")
    );

    // A failing upstream: the attempt has the status, both spans the error.
    s.mock.push_fault(Fault::status(529));
    let r = s
        .post(
            "/v1/chat/completions",
            None,
            &[("x-loom-session", "tel-2")],
            &body,
        )
        .await;
    assert_eq!(r.status().as_u16(), 529);
    let _ = r.bytes().await;
    let got = spans(&s, &collector, 4).await;
    let failed: Vec<_> = got
        .iter()
        .skip(2)
        .map(|(_, sp)| (sp.kind, attributes(sp)))
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    for (kind, a) in &failed {
        assert_eq!(
            a.get("error.type").map(String::as_str),
            Some("529"),
            "{a:#?}"
        );
        if *kind == SpanKind::Client as i32 {
            assert_eq!(
                a.get("http.response.status_code").map(String::as_str),
                Some("529")
            );
        } else {
            assert_eq!(a.get("session.id").map(String::as_str), Some("tel-2"));
        }
    }
    s.stop().await;
}

#[tokio::test]
async fn without_a_collector_no_span_is_recorded() {
    let s = start_with(AuthMode::None, ProxyMode::Fit, |_| {}).await;
    assert!(!s.state.telemetry.is_on());
    s.stop().await;
}

/// Every family `/metrics` showed before the Prometheus client took it over, with its type.
const FAMILIES: [(&str, &str); 11] = [
    ("loom_requests_total", "counter"),
    ("loom_request_duration_seconds", "histogram"),
    ("loom_proxy_overhead_seconds", "histogram"),
    ("loom_proxy_phase_seconds", "histogram"),
    ("loom_tokens_total", "counter"),
    ("loom_proxy_histories_total", "counter"),
    ("loom_compaction_points_total", "counter"),
    ("loom_recalls_total", "counter"),
    ("loom_live_sessions", "gauge"),
    ("loom_live_bytes", "gauge"),
    ("loom_connections_open", "gauge"),
];

#[tokio::test]
async fn metrics_keep_their_names_labels_and_format() {
    let s = start_with(AuthMode::None, ProxyMode::Fit, |_| {}).await;
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
    let r = s
        .post(
            "/v1/chat/completions",
            None,
            &[("x-loom-session", "m1")],
            &body,
        )
        .await;
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await;
    let r = s.get("/metrics", None).await;
    assert_eq!(
        r.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let metrics = text(r).await;
    for (name, kind) in FAMILIES {
        assert!(
            metrics.contains(&format!("# TYPE {name} {kind}\n")),
            "{name}: {metrics}"
        );
    }
    for line in [
        "loom_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 1",
        "loom_proxy_overhead_seconds_bucket{route=\"/v1/chat/completions\",le=\"+Inf\"} 1",
        "loom_proxy_overhead_seconds_count{route=\"/v1/chat/completions\"} 1",
        "loom_proxy_phase_seconds_count{phase=\"render\"} 1",
        "loom_proxy_histories_total{read=\"whole\"} 1",
        "loom_live_sessions 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line}: {metrics}");
    }
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("loom_tokens_total{kind=\"input\",model=\"gpt-4o")),
        "{metrics}"
    );
    s.stop().await;
}
