//! Throughput of token counting on the real traces: every message content and tool-call
//! argument of ../shared/traces, counted piece by piece (the same pieces, in the same order, as
//! `scripts/tiktoken_fixture.py bench` times Python tiktoken on).
//!
//! `cargo bench -p loom-tokens --bench tokens` measures Loom's counter (bpe-openai plus the
//! whole-token fast path), plain bpe-openai and the estimator; add
//! `--features compare-tiktoken-rs` to measure tiktoken-rs as well. `scripts/bench_tokens.sh`
//! runs Python tiktoken and this bench in one go.

#![allow(missing_docs, clippy::print_stderr)]

#[path = "../tests/support/traces.rs"]
#[allow(
    dead_code,
    unreachable_pub,
    reason = "shared with the tests, which use other parts"
)]
mod traces;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use loom_tokens::{Calibration, Encoding};

fn bench(c: &mut Criterion) {
    let files = match traces::load(&traces::traces_dir()) {
        Ok(Some(f)) => f,
        Ok(None) => {
            eprintln!("SKIPPED: ../shared/traces is absent");
            return;
        }
        Err(e) => {
            eprintln!("SKIPPED: cannot read ../shared/traces: {e}");
            return;
        }
    };
    let pieces = traces::all_pieces(&files);
    let bytes: usize = pieces.iter().map(|p| p.len()).sum();
    eprintln!("{} pieces, {bytes} bytes", pieces.len());

    let mut g = c.benchmark_group("count_traces");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.sample_size(10);
    for enc in Encoding::ALL {
        enc.count("warm up");
        g.bench_function(format!("loom/{}", enc.name()), |b| {
            b.iter(|| {
                pieces
                    .iter()
                    .map(|p| enc.count(black_box(p)))
                    .sum::<usize>()
            })
        });
        let raw = match enc {
            Encoding::O200kBase => bpe_openai::o200k_base(),
            Encoding::Cl100kBase => bpe_openai::cl100k_base(),
        };
        g.bench_function(format!("bpe-openai/{}", enc.name()), |b| {
            b.iter(|| {
                pieces
                    .iter()
                    .map(|p| raw.count(black_box(*p)))
                    .sum::<usize>()
            })
        });
        #[cfg(feature = "compare-tiktoken-rs")]
        {
            let tk = match enc {
                Encoding::O200kBase => tiktoken_rs::o200k_base_singleton(),
                Encoding::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
            };
            let exact: usize = pieces.iter().map(|p| tk.encode_ordinary(p).len()).sum();
            let ours: usize = pieces.iter().map(|p| enc.count(p)).sum();
            assert_eq!(
                exact,
                ours,
                "tiktoken-rs and loom disagree on {}",
                enc.name()
            );
            g.bench_function(format!("tiktoken-rs/{}", enc.name()), |b| {
                b.iter(|| {
                    pieces
                        .iter()
                        .map(|p| tk.encode_ordinary(black_box(p)).len())
                        .sum::<usize>()
                })
            });
        }
    }
    let cal = Calibration::default();
    g.bench_function("estimate", |b| {
        b.iter(|| pieces.iter().map(|p| cal.count(black_box(p))).sum::<u64>())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
