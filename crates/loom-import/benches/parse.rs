//! The parser alone: the shared traces, read from memory, parsed and checked into events.
//!
//! Run with `cargo bench -p loom-import --bench parse`. Blobs go to memory and nothing is
//! stored, so this measures JSON reading, conversion and the ledger checks only.

use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use loom_import::{parse_reader, ParseOptions};
use loom_store::MemoryBlobStore;

const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces");

fn traces() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(TRACES)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|x| x == "jsonl"));
    files.sort();
    files
        .into_iter()
        .filter_map(|p| {
            let name = p.file_stem()?.to_string_lossy().into_owned();
            Some((name, std::fs::read(&p).ok()?))
        })
        .collect()
}

fn parse_all(c: &mut Criterion) {
    let files = traces();
    assert!(!files.is_empty(), "no traces under {TRACES}");
    let total: u64 = files.iter().map(|(_, b)| b.len() as u64).sum();
    let opts = ParseOptions::new(1_700_000_000_000);
    let mut group = c.benchmark_group("parse");
    group.sample_size(20);
    group.throughput(Throughput::Bytes(total));
    group.bench_function("all_traces", |b| {
        b.iter(|| {
            let blobs = MemoryBlobStore::new();
            let mut events = 0;
            for (name, bytes) in &files {
                let sessions = parse_reader(name, name, &bytes[..], &opts, &blobs)
                    .unwrap_or_else(|e| panic!("{e}"));
                events += sessions.iter().map(|s| s.events.len()).sum::<usize>();
            }
            events
        });
    });
    for (name, bytes) in &files {
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function(name.as_str(), |b| {
            b.iter(|| {
                let blobs = MemoryBlobStore::new();
                parse_reader(name, name, &bytes[..], &opts, &blobs)
                    .unwrap_or_else(|e| panic!("{e}"))
                    .len()
            });
        });
    }
    group.finish();
}

criterion_group!(benches, parse_all);
criterion_main!(benches);
