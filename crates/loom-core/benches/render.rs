//! Per-call render cost on a long session: the request for call k+1 given the state after call
//! k, with the projection and token memo kept across calls as a live agent's engine keeps them.
//!
//! `cargo bench -p loom-core --bench render` prints p50/p99 per call at 1,000 turns (timed loop)
//! and criterion's figure for one call.

#![expect(
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark: a failed render should stop it, and its percentiles are printed"
)]

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use loom_core::render::{
    render_projection, ApproxMeter, Audience, CompactionState, CostMemo, Format, Policy,
    Projection, RenderInput, StepIndex,
};
use loom_core::{ContentStats, Event, EventBody, ToolCall, ToolOutput};

/// A session of `turns` assistant turns, each a shell call with a 1–3 KB result.
fn session(turns: usize) -> Vec<Event> {
    let mut events = Vec::new();
    let mut push = |body: EventBody| {
        let seq = events.len() as u64 + 1;
        events.push(Event {
            seq,
            ts_ms: seq as i64,
            body,
        });
    };
    push(EventBody::System {
        content: "You are a coding agent.".into(),
    });
    push(EventBody::User {
        content: "Fix the failing test in src/parser.rs".into(),
        name: None,
    });
    for t in 0..turns {
        let id = format!("call_{t}");
        push(EventBody::Assistant {
            content: Some(format!("Step {t}: looking at module_{t}.rs").into()),
            reasoning: None,
            tool_calls: vec![ToolCall {
                id: id.clone(),
                name: "bash".into(),
                arguments: format!(
                    "{{\"command\":\"sed -n 1,{}p src/module_{t}.rs\"}}",
                    40 + t % 60
                ),
            }],
            name: None,
            native: None,
        });
        let out: String = (0..(20 + t % 40))
            .map(|l| format!("{l:4}  fn item_{t}_{l}(x: u32) -> u32 {{ x + {l} }}\n"))
            .collect();
        push(EventBody::ToolResult {
            call_id: id,
            tool_name: "bash".into(),
            stats: ContentStats::of(out.as_bytes()),
            content: ToolOutput::Text(out),
            is_error: false,
        });
    }
    events
}

struct Engine {
    events: Vec<Event>,
    steps: StepIndex,
    policy: Policy,
    audience: Audience,
}

impl Engine {
    fn new(turns: usize) -> Self {
        Self {
            events: session(turns),
            steps: HashMap::new(),
            policy: Policy {
                context_window: 16_000 + 4_096,
                ..Policy::default()
            },
            audience: Audience {
                agent: None,
                now_ms: 0,
            },
        }
    }

    fn input(&self, upto: usize) -> RenderInput<'_> {
        RenderInput {
            events: &self.events[..upto],
            steps: &self.steps,
            summaries: &[],
            policy: &self.policy,
            format: Format::OPENAI_CHAT,
            model: "gpt-4o",
            tools: &[],
            injections: &[],
            audience: &self.audience,
            meter: &ApproxMeter,
        }
    }
}

/// Renders every call in order; returns per-call nanoseconds for the calls at or after `from`,
/// and whether a compaction point fired in each.
fn replay(engine: &Engine, from: usize) -> Vec<(u64, bool)> {
    let mut proj = Projection::default();
    let mut state = CompactionState::default();
    let mut memo = CostMemo::new();
    let mut times = Vec::new();
    let mut fed = 0;
    for (i, e) in engine.events.iter().enumerate() {
        if matches!(e.body, EventBody::Assistant { .. }) {
            while fed < i {
                proj.push(&engine.events[fed], &engine.audience);
                fed += 1;
            }
            let start = Instant::now();
            let r = render_projection(&engine.input(i), &proj, &state, &mut memo)
                .expect("the bench session fits");
            let nanos = start.elapsed().as_nanos() as u64;
            state = r.state;
            if i >= from {
                times.push((nanos, r.receipt.compaction.is_some()));
            }
            black_box(r.request);
        }
    }
    times
}

fn percentiles(mut t: Vec<u64>) -> (f64, f64, f64) {
    if t.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    t.sort_unstable();
    let at = |p: f64| t[((p * t.len() as f64).ceil() as usize).clamp(1, t.len()) - 1] as f64 / 1e3;
    (at(0.5), at(0.99), t[t.len() - 1] as f64 / 1e3)
}

fn bench(c: &mut Criterion) {
    for turns in [100usize, 1_000, 10_000] {
        let engine = Engine::new(turns);
        let from = engine.events.len() * 9 / 10;
        let calls = replay(&engine, from);
        let (p50, p99, max) = percentiles(calls.iter().map(|c| c.0).collect());
        println!(
            "render per call, last 10% of a {turns}-turn session: p50 {p50:.1} µs, p99 {p99:.1} µs, max {max:.1} µs"
        );
        let points: Vec<u64> = calls.iter().filter(|c| c.1).map(|c| c.0).collect();
        let between: Vec<u64> = calls.iter().filter(|c| !c.1).map(|c| c.0).collect();
        println!(
            "  {} calls at compaction points: p50 {:.1} µs; {} calls between points: p50 {:.1} µs",
            points.len(),
            percentiles(points.clone()).0,
            between.len(),
            percentiles(between.clone()).0
        );
    }
    let engine = Engine::new(1_000);
    let n = engine.events.len() - 1;
    let mut proj = Projection::default();
    for e in &engine.events[..n] {
        proj.push(e, &engine.audience);
    }
    // The state and memo a live engine would hold before the last call.
    let mut memo = CostMemo::new();
    let state = {
        let r = render_projection(
            &engine.input(n),
            &proj,
            &CompactionState::default(),
            &mut memo,
        )
        .expect("fits");
        r.state
    };
    c.bench_function("render call 1000 (memo warm, between points)", |b| {
        b.iter(|| {
            let r = render_projection(&engine.input(n), &proj, &state, &mut memo).expect("fits");
            black_box(r.request.messages.len())
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
