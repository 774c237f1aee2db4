//! Throughput of exact OpenAI token counting on the real traces.
#![allow(missing_docs)]

#[path = "../tests/support/traces.rs"]
#[allow(dead_code, unreachable_pub)]
mod traces;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use loom_tokens::Encoding;

fn bench(c: &mut Criterion) {
    let files = match traces::load(&traces::traces_dir()) {
        Ok(Some(f)) => f,
        _ => return,
    };
    let pieces = traces::all_pieces(&files);
    let bytes: usize = pieces.iter().map(|p| p.len()).sum();
    let mut g = c.benchmark_group("count_traces");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.sample_size(10);
    for enc in Encoding::ALL {
        g.bench_function(format!("bpe-openai/{}", enc.name()), |b| {
            b.iter(|| pieces.iter().map(|p| enc.count(p)).sum::<usize>())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
