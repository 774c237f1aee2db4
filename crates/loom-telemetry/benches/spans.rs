//! What telemetry adds to one proxied model call on the request path, alone: the work
//! `loom serve`'s proxy does for a call's spans, with telemetry off (no tracer) and on (the SDK's
//! batch processor exporting over OTLP/HTTP to a collector on loopback that decodes, counts and
//! drops every batch).
//!
//! One call's work, in the proxy's order: the receipt's facts built (`prepare`), the call's
//! span started with its GenAI, session and `loom.*` attributes (`call_span`), one upstream
//! attempt started and given its status, the reply's model, id, finish reason and usage and the
//! receipt's id set (`log_reply`), both spans ended.
//!
//! `cargo bench -p loom-telemetry --bench spans` prints, for rounds of paced calls alternating
//! off and on, each round's p50, p99 and mean per call and the median of the rounds' figures,
//! checks that the collector received every span; then criterion's figure for one call, off and
//! on, run back to back. Run without `--bench` (as `cargo test --benches` does), it is one short
//! round, to check that it works.

#![expect(
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark: a receipt that does not read or a collector that cannot start should stop it, and its figures are printed"
)]

use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime};

use criterion::{criterion_group, criterion_main, Criterion};
use loom_core::render::{PointReason, Receipt};
use loom_telemetry::{attr, Attribute, CallKind, Reply, Telemetry};
use serde_json::{json, Value};

/// Calls per round and mode, and rounds (each one of calls off then one on): measured, and as a
/// check without `--bench`.
const MEASURED: (usize, usize) = (5_000, 5);
const CHECK: (usize, usize) = (200, 1);
/// The pause between two calls: 5,000 calls a second, more than `loom serve` proxies on this
/// machine, and slow enough for the batch processor's queue never to fill (a full queue drops
/// spans, which would make "on" cheaper than it is).
const PACE: Duration = Duration::from_micros(200);

/// The receipt of a call late in a long session at a small budget: runs of every kind, most of
/// them one stubbed result each, and a compaction point. Read from JSON as a stored receipt is,
/// so that fields added later with a default need no change here.
fn receipt() -> Receipt {
    let runs = |n: u64, step: u64, len: u64| -> Value {
        (0..n)
            .map(|i| json!({"from": 1 + i * step, "to": 1 + i * step + len}))
            .collect()
    };
    serde_json::from_value(json!({
        "model": "gpt-4o",
        "format": "openai_chat",
        "tokenizer": "o200k_base",
        "policy_version": "0123456789abcdef",
        "at_seq": 2_000,
        "budget": {
            "context_window": 128_000,
            "response_reserve": 4_096,
            "injection_reserve": 1_000,
            "hard_total": 16_000,
            "target": 12_000,
            "oversized": 4_000,
            "high": 14_000,
            "low": 9_000
        },
        "estimate": 11_873,
        "tiers": {},
        "verbatim": runs(40, 50, 3),
        "stubbed": runs(300, 6, 0),
        "elided": runs(20, 90, 0),
        "thinned": runs(60, 30, 0),
        "grouped": runs(50, 40, 4),
        "summarized": [{"from": 3, "to": 400}],
        "dropped": runs(5, 300, 1),
        "summary_version": 3,
        "prefix_hash": "ab".repeat(32),
        "compaction": {
            "at_seq": 1_990,
            "reason": PointReason::HighWatermark,
            "before": 14_210,
            "after": 8_950,
            "ineffective": false
        },
        "points": 7,
        "injected": []
    }))
    .expect("a receipt")
}

/// One proxied call's span work (see the module's comment).
fn one_call(t: &Telemetry, receipt: &Receipt, call: u64) {
    let started = SystemTime::now();
    // prepare: the receipt's facts, built only when spans are recorded.
    let mut facts = if t.is_on() {
        let mut facts = attr::receipt(receipt);
        facts.push(Attribute::new(attr::REQUEST_MAX_TOKENS, 4_096_i64));
        facts.push(Attribute::new(attr::REQUESTED_BUDGET, 16_000_i64));
        facts
    } else {
        Vec::new()
    };
    // call_span: the session as the client named it and as Loom stores it, the mode, the
    // receipt's id and the facts.
    let span = t.call(
        CallKind::Server,
        "chat",
        "openai",
        "gpt-4o",
        started,
        || {
            let mut a = vec![
                Attribute::new(attr::SESSION, "cc-6f1d2a7e-5b1c-4f0e-9d3a".to_owned()),
                Attribute::new(attr::LOOM_SESSION, "cc-6f1d2a7e-5b1c-4f0e-9d3a".to_owned()),
                Attribute::new(attr::MODE, "fit".to_owned()),
                Attribute::new(attr::RECEIPT, attr::n(call)),
            ];
            a.append(&mut facts);
            a
        },
    );
    let attempt = span.attempt("upstream");
    attempt.status(200);
    // log_reply: the reply's facts and the receipt's id, then both spans end.
    if span.is_on() {
        span.reply(&Reply {
            model: Some("gpt-4o-2024-08-06"),
            id: Some("chatcmpl-AbCdEf0123456789"),
            finish_reason: Some("tool_calls"),
            input_tokens: Some(11_902),
            cached_input_tokens: Some(10_880),
            output_tokens: Some(212),
        });
        span.set(|| vec![Attribute::new(attr::RECEIPT, attr::n(call))]);
    }
    attempt.end();
    span.end();
}

/// `calls` paced calls, each timed alone (ns).
fn round(t: &Telemetry, receipt: &Receipt, calls: usize, first: u64) -> Vec<u64> {
    let mut times = Vec::with_capacity(calls);
    for i in 0..calls as u64 {
        let start = Instant::now();
        one_call(t, receipt, first + i);
        times.push(start.elapsed().as_nanos() as u64);
        std::thread::sleep(PACE);
    }
    times
}

/// p50, p99 and mean, in µs.
fn figures(mut t: Vec<u64>) -> (f64, f64, f64) {
    t.sort_unstable();
    let at = |q: f64| t[((t.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
    let mean = t.iter().sum::<u64>() as f64 / t.len() as f64 / 1e3;
    (at(0.50), at(0.99), mean)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bench(c: &mut Criterion) {
    let (calls, rounds) = if std::env::args().any(|a| a == "--bench") {
        MEASURED
    } else {
        CHECK
    };
    let receipt = receipt();
    let collector = loom_testkit::otlp::Collector::sink().expect("a collector on loopback");
    let on = Telemetry::otlp(collector.url(), "loom-bench").expect("the exporter");
    let off = Telemetry::off();
    // Warm both paths (the exporter's connection, the allocator) before timing.
    for i in 0..500 {
        one_call(&off, &receipt, i);
        one_call(&on, &receipt, i);
    }
    on.flush();
    let mut by_mode: [(Vec<f64>, Vec<f64>); 2] = Default::default();
    let mut sent = 500_u64;
    println!(
        "telemetry per proxied call: {calls} calls off then {calls} on, {rounds} times, one call every {} µs:",
        PACE.as_micros()
    );
    for r in 0..rounds {
        for (m, (name, t)) in [("off", &off), ("on", &on)].into_iter().enumerate() {
            let before = collector.count();
            let (p50, p99, mean) = figures(round(t, &receipt, calls, sent));
            sent += calls as u64;
            t.flush();
            let received = collector.count().saturating_sub(before);
            println!(
                "  round {} {name:>3}: p50 {p50:.2} µs, p99 {p99:.2} µs, mean {mean:.2} µs; spans received {received}",
                r + 1
            );
            let expected = if t.is_on() { 2 * calls as u64 } else { 0 };
            assert_eq!(
                received, expected,
                "every span of the round reaches the collector"
            );
            by_mode[m].0.push(p50);
            by_mode[m].1.push(mean);
        }
    }
    for (name, (p50s, means)) in ["off", "on"].iter().zip(by_mode) {
        println!(
            "  median of the rounds, {name:>3}: p50 {:.2} µs, mean {:.2} µs",
            median(p50s),
            median(means)
        );
    }
    let mut group = c.benchmark_group("telemetry per call");
    let mut i = sent;
    group.bench_function("off", |b| {
        b.iter(|| {
            i += 1;
            one_call(black_box(&off), &receipt, i)
        })
    });
    group.bench_function("on (back to back: the queue may fill and drop)", |b| {
        b.iter(|| {
            i += 1;
            one_call(black_box(&on), &receipt, i)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
