//! `loom replay` on `../shared/traces` in process, beside the floor it is measured against.
//!
//! Run with `cargo bench -p loom-replay --bench replay`. Trajectories are parsed before timing
//! and the tokenizer's tables are loaded, so these figures leave out what the CLI run adds on
//! both sides (process start, table load, JSON parsing); docs/performance.md (Replay) has the
//! end-to-end figures.
//! - `corpus/tokenize_once`: every message of every trajectory counted once with OpenAI's rule
//!   (`message_tokens` on the trace's own wire messages): the same texts the replay counts.
//! - `corpus/replay`: every call of every trajectory at a 16k budget: Loom, the full history and
//!   the sliding window, with every metric, as `loom replay` does.
//! - `corpus/replay_text_cache`: the same replay with a meter that remembers the count of each
//!   distinct text, so a text is tokenized once however often the renders ask: how much of the
//!   replay's time is repeated tokenization. A what-if for optimisation, not what the CLI does.
//!
//! Before the groups it prints how many bytes each meter was asked to count, against the corpus.

#![expect(
    clippy::print_stderr,
    reason = "the bench reports how much text each meter counted"
)]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion};
use loom_core::render::{message_tokens, Format, Policy, TokenMeter};
use loom_core::ReduceConfig;
use loom_import::{parse_file, ParseOptions, ParsedSession};
use loom_replay::{EncodingMeter, ReplayOptions, Replayer};
use loom_store::MemoryBlobStore;
use loom_tokens::Encoding;
use serde_json::Value;

const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces");
const BUDGET: u64 = 16_000;

fn trace_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(TRACES)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|x| x == "jsonl"));
    files.sort();
    assert!(!files.is_empty(), "no traces under {TRACES}");
    files
}

/// Every message of every trajectory, as the trace writes it.
fn raw_messages(files: &[PathBuf]) -> Vec<Value> {
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let mut t: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            if let Some(Value::Array(msgs)) = t.get_mut("messages").map(Value::take) {
                out.extend(msgs);
            }
        }
    }
    out
}

/// Counts with the exact encoding and tallies what it was asked.
struct Counting {
    inner: EncodingMeter,
    calls: Cell<u64>,
    bytes: Cell<u64>,
}

impl TokenMeter for Counting {
    fn count(&self, text: &str) -> u64 {
        self.calls.set(self.calls.get() + 1);
        self.bytes.set(self.bytes.get() + text.len() as u64);
        self.inner.count(text)
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

/// Remembers the count of each distinct text (keyed by length and a 64-bit hash).
struct TextCache {
    inner: EncodingMeter,
    hasher: RandomState,
    counts: RefCell<HashMap<(usize, u64), u64>>,
    missed_bytes: Cell<u64>,
}

impl TextCache {
    fn new(inner: EncodingMeter) -> Self {
        Self {
            inner,
            hasher: RandomState::new(),
            counts: RefCell::new(HashMap::new()),
            missed_bytes: Cell::new(0),
        }
    }
}

impl TokenMeter for TextCache {
    fn count(&self, text: &str) -> u64 {
        let key = (text.len(), self.hasher.hash_one(text));
        if let Some(&n) = self.counts.borrow().get(&key) {
            return n;
        }
        self.missed_bytes
            .set(self.missed_bytes.get() + text.len() as u64);
        let n = self.inner.count(text);
        self.counts.borrow_mut().insert(key, n);
        n
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

/// Replays every trajectory; returns the calls and the window's input tokens (to check the
/// run did the whole job, and against scripts/langchain_replay.py).
fn replay_all(
    sessions: &[(String, Vec<ParsedSession>)],
    meter: &dyn TokenMeter,
    blobs: &MemoryBlobStore,
) -> (u64, u64) {
    let opts = ReplayOptions {
        model: "gpt-4o".into(),
        budget: BUDGET,
        policy: Policy::default(),
        format: Format::OPENAI_CHAT,
        reduce: ReduceConfig::default(),
    };
    let replayer = Replayer::new(opts, meter, blobs);
    let (mut calls, mut window) = (0, 0);
    for (source, list) in sessions {
        for session in list {
            let run = replayer
                .run(session, source, &mut |_, _| {})
                .unwrap_or_else(|e| panic!("{e}"));
            calls += run.calls.len() as u64;
            window += run.calls.iter().map(|c| c.window.tokens).sum::<u64>();
        }
    }
    (calls, window)
}

fn bench(c: &mut Criterion) {
    let files = trace_files();
    let messages = raw_messages(&files);
    let blobs = MemoryBlobStore::new();
    let opts = ParseOptions::new(0);
    let sessions: Vec<(String, Vec<ParsedSession>)> = files
        .iter()
        .map(|p| {
            let stem = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let list = parse_file(p, &opts, &blobs).unwrap_or_else(|e| panic!("{p:?}: {e}"));
            (stem, list)
        })
        .collect();
    let meter = EncodingMeter(Encoding::O200kBase);
    meter.count("load the tables");

    let once = Counting {
        inner: meter,
        calls: Cell::new(0),
        bytes: Cell::new(0),
    };
    let corpus_tokens: u64 = messages.iter().map(|m| message_tokens(m, &once)).sum();
    let replay = Counting {
        inner: meter,
        calls: Cell::new(0),
        bytes: Cell::new(0),
    };
    let (calls, window) = replay_all(&sessions, &replay, &blobs);
    let cache = TextCache::new(meter);
    let _ = replay_all(&sessions, &cache, &blobs);
    eprintln!(
        "corpus: {} messages, {corpus_tokens} tokens, {} texts, {} bytes counted once",
        messages.len(),
        once.calls.get(),
        once.bytes.get()
    );
    eprintln!(
        "replay: {calls} calls, window input tokens {window}; the meter counted {} texts, \
         {} bytes ({:.2}x the corpus); with a text cache it tokenizes {} bytes ({:.2}x)",
        replay.calls.get(),
        replay.bytes.get(),
        replay.bytes.get() as f64 / once.bytes.get() as f64,
        cache.missed_bytes.get(),
        cache.missed_bytes.get() as f64 / once.bytes.get() as f64,
    );

    let mut group = c.benchmark_group("corpus");
    group.sample_size(10);
    group.bench_function("tokenize_once", |b| {
        b.iter(|| {
            messages
                .iter()
                .map(|m| message_tokens(m, &meter))
                .sum::<u64>()
        });
    });
    group.bench_function("replay", |b| {
        b.iter(|| replay_all(&sessions, &meter, &blobs));
    });
    group.bench_function("replay_text_cache", |b| {
        // A fresh cache each pass: the first render of a text still pays for it.
        b.iter(|| replay_all(&sessions, &TextCache::new(meter), &blobs));
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
