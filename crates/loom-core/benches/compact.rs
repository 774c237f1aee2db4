//! Step compaction on long histories made of real steps.
//!
//! The histories are the reduced steps of `../shared/traces` (SWE agents, web agents, customer
//! service, ReAct search), concatenated and renumbered to 100, 1,000 and 10,000 steps, so the
//! mix of categories, failures and observation lengths is real. Measured:
//! - `seed/N`: the seed-faithful compactor over the whole history, then `format_for_prompt`;
//! - `stable_replay/N`: the cache-stable compactor driven after every step of an N-step history,
//!   rendering after each (the per-call work of an agent loop), so time/N is the cost per call.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use loom_core::{compact, CompactionConfig, StableCompactor, Step};

#[path = "../tests/suite/compact/trajectory.rs"]
#[expect(dead_code, reason = "shared with the tests, which use more of it")]
mod trajectory;

fn history(n: usize) -> Vec<Step> {
    let all = trajectory::load_all().unwrap_or_else(|e| panic!("traces: {e}"));
    let pool: Vec<Step> = all.iter().flat_map(|t| t.steps()).collect();
    assert!(!pool.is_empty(), "no steps in the traces");
    (0..n)
        .map(|i| {
            let mut s = pool[i % pool.len()].clone();
            s.id = format!("step_{:03}", i + 1);
            s
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let config = CompactionConfig::default();
    let longest = history(10_000);
    let mut seed = c.benchmark_group("seed");
    for n in [100usize, 1_000, 10_000] {
        let steps = &longest[..n];
        seed.throughput(Throughput::Elements(n as u64));
        seed.bench_with_input(BenchmarkId::from_parameter(n), steps, |b, steps| {
            b.iter(|| compact(steps, &config, None).format_for_prompt());
        });
    }
    seed.finish();

    let mut stable = c.benchmark_group("stable_replay");
    stable.sample_size(10);
    for n in [100usize, 1_000, 10_000] {
        let steps = &longest[..n];
        stable.throughput(Throughput::Elements(n as u64));
        stable.bench_with_input(BenchmarkId::from_parameter(n), steps, |b, steps| {
            b.iter(|| {
                let mut c =
                    StableCompactor::new(config.clone()).unwrap_or_else(|e| panic!("config: {e}"));
                let mut bytes = 0;
                for n in 1..=steps.len() {
                    let _ = c.update(&steps[..n], None);
                    bytes += c.render(&steps[..n]).map(|t| t.len()).unwrap_or_default();
                }
                bytes
            });
        });
    }
    stable.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
