//! A local embedding model's speed (issue 31 targets: indexing at least 300 items/s on these 2
//! cores, a query's embedding at most 10 ms at p50), with the model loaded once.
//!
//! A plain harness rather than criterion: the figures are a rate over a corpus and a median and
//! tail over single queries.
//!
//! `cargo bench -p loom-memory --bench embed -- [--model DIR] [--items N] [--queries N]
//! [--batch N]`
//!
//! - `--model DIR`: the model folder (default `target/models/all-MiniLM-L6-v2`, which
//!   `scripts/fetch-test-model.sh` fills);
//! - the texts are LoCoMo's turns (`../shared/memory/locomo-dev.json` beside the repository, as
//!   `loom import` stores them: `"Speaker: text"`), repeated up to `--items` (default 2,000); the
//!   queries are its questions;
//! - `--batch N`: texts per `embed` call when indexing (default 256, as `loom memory index`
//!   writes them).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context as _};
use loom_memory::{Embedder, LocalEmbedder};
use serde_json::Value;

const DATA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/memory/locomo-dev.json"
);
const MODEL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../target/models/all-MiniLM-L6-v2"
);

/// LoCoMo's turns (as stored) and questions.
fn corpus() -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let raw = std::fs::read_to_string(DATA).with_context(|| DATA.to_owned())?;
    let convs: Vec<Value> = serde_json::from_str(&raw)?;
    let (mut turns, mut questions) = (Vec::new(), Vec::new());
    for conv in &convs {
        let c = &conv["conversation"];
        let mut n = 1;
        while let Some(list) = c.get(format!("session_{n}")).and_then(Value::as_array) {
            for t in list {
                turns.push(format!(
                    "{}: {}",
                    t["speaker"].as_str().unwrap_or("?"),
                    t["text"].as_str().unwrap_or("")
                ));
            }
            n += 1;
        }
        for q in conv["qa"].as_array().into_iter().flatten() {
            if let Some(q) = q["question"].as_str() {
                questions.push(q.to_owned());
            }
        }
    }
    if turns.is_empty() || questions.is_empty() {
        bail!("{DATA} holds no turns or no questions");
    }
    Ok((turns, questions))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() -> anyhow::Result<()> {
    let mut model = PathBuf::from(MODEL);
    let (mut items, mut queries, mut batch) = (2_000usize, 300usize, 256usize);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--model" => model = args.next().context("--model DIR")?.into(),
            "--items" => items = args.next().context("--items N")?.parse()?,
            "--queries" => queries = args.next().context("--queries N")?.parse()?,
            "--batch" => batch = args.next().context("--batch N")?.parse()?,
            // `cargo bench` passes this to every bench.
            "--bench" => {}
            other => bail!("unknown argument `{other}`"),
        }
    }
    let started = Instant::now();
    let embedder = LocalEmbedder::load(&model)
        .with_context(|| format!("{} (run scripts/fetch-test-model.sh)", model.display()))?;
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let (turns, questions) = corpus()?;
    let texts: Vec<&str> = turns
        .iter()
        .cycle()
        .take(items)
        .map(String::as_str)
        .collect();
    // The texts' mean length in the model's tokens (special tokens included), which the cost
    // of a text grows with.
    let mut tokenizer = tokenizers::Tokenizer::from_file(model.join("tokenizer.json"))
        .map_err(|e| anyhow::anyhow!("{}: {e}", model.display()))?;
    // Unpadded, as the embedder reads them.
    tokenizer.with_padding(None);
    let mut tokens = 0;
    for t in &texts {
        let encoding = tokenizer
            .encode(*t, true)
            .map_err(|e| anyhow::anyhow!("tokenizing: {e}"))?;
        tokens += encoding.get_ids().len();
    }
    let mean_tokens = tokens as f64 / texts.len().max(1) as f64;

    // Warm up (page in the weights, start the threads' caches).
    embedder.embed(&texts[..texts.len().min(32)])?;
    let started = Instant::now();
    let mut dims = 0;
    for chunk in texts.chunks(batch.max(1)) {
        let vectors = embedder.embed(chunk)?;
        dims = vectors.first().map_or(0, Vec::len);
    }
    let index_s = started.elapsed().as_secs_f64();

    let mut times = Vec::with_capacity(queries);
    for q in questions.iter().cycle().take(queries) {
        let started = Instant::now();
        embedder.embed(&[q.as_str()])?;
        times.push(started.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let report = format!(
        "{}: loaded in {load_ms:.0} ms; {dims} dimensions\n\
         indexing: {items} texts ({mean_tokens:.1} tokens on average) in batches of {batch} in \
         {index_s:.2} s = {:.0} items/s\n\
         queries: {queries} single texts: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms\n",
        embedder.model_id(),
        items as f64 / index_s,
        percentile(&times, 0.5),
        percentile(&times, 0.9),
        percentile(&times, 0.99)
    );
    std::io::Write::write_all(&mut std::io::stdout(), report.as_bytes())?;
    Ok(())
}
