//! Single-thread throughput on the traces' pieces, as wall time and as the thread's CPU time
//! (from /proc/thread-self/schedstat), best of 5: the CPU figure stays comparable when other
//! processes share the cores. `scripts/tiktoken_fixture.py bench` prints the same pair for
//! Python tiktoken; `scripts/bench_tokens.sh` runs both.
//!
//! Run: `cargo run --release -p loom-tokens --example throughput [--features compare-tiktoken-rs]`

#![allow(clippy::print_stdout, missing_docs)]

#[path = "../tests/support/traces.rs"]
#[allow(dead_code, unreachable_pub)]
mod traces;

use std::time::Instant;

use loom_tokens::{Calibration, Encoding};

/// Nanoseconds this thread has run on a CPU.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

fn measure(name: &str, bytes: usize, mut f: impl FnMut() -> usize) {
    let tokens = f();
    let (mut wall, mut cpu) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        let (t, c) = (Instant::now(), cpu_ns());
        std::hint::black_box(f());
        wall = wall.min(t.elapsed().as_secs_f64());
        cpu = cpu.min((cpu_ns() - c) as f64 / 1e9);
    }
    let mb = bytes as f64 / 1e6;
    println!(
        "{{\"impl\": \"{name}\", \"tokens\": {tokens}, \"wall_mb_per_s\": {:.2}, \"cpu_mb_per_s\": {:.2}}}",
        mb / wall,
        mb / cpu
    );
}

fn main() -> anyhow::Result<()> {
    // First use deserializes the embedded tables (and builds the whole-token set).
    for enc in Encoding::ALL {
        let t = Instant::now();
        enc.count("warm up");
        println!(
            "{{\"init\": \"{}\", \"ms\": {:.1}}}",
            enc.name(),
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    let Some(files) = traces::load(&traces::traces_dir())? else {
        anyhow::bail!("../shared/traces is absent");
    };
    let pieces = traces::all_pieces(&files);
    let bytes: usize = pieces.iter().map(|p| p.len()).sum();
    println!("{{\"pieces\": {}, \"bytes\": {bytes}}}", pieces.len());
    for enc in Encoding::ALL {
        let n = enc.name();
        measure(&format!("loom {n}"), bytes, || {
            pieces.iter().map(|p| enc.count(p)).sum()
        });
        let raw = match enc {
            Encoding::O200kBase => bpe_openai::o200k_base(),
            Encoding::Cl100kBase => bpe_openai::cl100k_base(),
        };
        measure(&format!("bpe-openai {n}"), bytes, || {
            pieces.iter().map(|p| raw.count(*p)).sum()
        });
        #[cfg(feature = "compare-tiktoken-rs")]
        {
            let tk = match enc {
                Encoding::O200kBase => tiktoken_rs::o200k_base_singleton(),
                Encoding::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
            };
            measure(&format!("tiktoken-rs {n}"), bytes, || {
                pieces.iter().map(|p| tk.encode_ordinary(p).len()).sum()
            });
        }
    }
    let cal = Calibration::default();
    measure("estimate", bytes, || {
        pieces.iter().map(|p| cal.count(p) as usize).sum()
    });
    Ok(())
}
