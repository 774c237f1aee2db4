//! The Python package's replay from Rust: every call of every trajectory of the given OpenAI
//! Chat JSONL files (default: ../shared/traces) at 16k, through the path the bindings take —
//! each call's new messages handed to `api::append_history`, then `Engine::render_session` on an
//! in-memory store, and the body written as JSON text (where the bindings build it as Python
//! objects). Prints the total and per
//! call; `crates/loom-py/benches/replay.py` does the same through Python.
//!
//!     cargo bench -p loom-server --bench replay_loop -- [FILES...]

#![expect(clippy::print_stdout, reason = "a benchmark: its figure on stdout")]

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;

use loom_core::SessionId;
use loom_session::engine::RenderSpec;
use loom_session::Engine;
use loom_session::{Backend, LiveSessions};
use loom_store::{MemoryBlobStore, MemoryStore};

fn main() -> anyhow::Result<()> {
    let mut files: Vec<PathBuf> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .map(PathBuf::from)
        .collect();
    if files.is_empty() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces");
        for entry in std::fs::read_dir(&dir).with_context(|| format!("{}", dir.display()))? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "jsonl") {
                files.push(path);
            }
        }
        files.sort();
    }
    let store = MemoryStore::new();
    let blobs = MemoryBlobStore::new();
    let engine = Engine::built_in().context("the registry")?;
    let live = LiveSessions::new(1_024);
    let b = Backend {
        store: &store,
        blobs: &blobs,
        reduce: &engine.reduce,
        live: &live,
    };
    let spec = RenderSpec {
        model: "gpt-4o".into(),
        budget: Some(16_000),
        format: loom_core::render::Format::OPENAI_CHAT,
        tools: Vec::new(),
        always_record: false,
        injections: Vec::new(),
        limits: Default::default(),
        recall: None,
    };
    let (mut calls, mut bytes, mut refused) = (0usize, 0usize, 0usize);
    let started = Instant::now();
    for path in &files {
        let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        for (line, record) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let value: serde_json::Value = serde_json::from_str(record)?;
            let messages = value["messages"].as_array().cloned().unwrap_or_default();
            let id = SessionId::new(format!("{}-{line}", stem.as_deref().unwrap_or("trace")))?;
            let mut done = 0;
            for k in 1..messages.len() {
                if messages[k]["role"] != "assistant" {
                    continue;
                }
                let body =
                    serde_json::to_vec(&serde_json::json!({ "messages": &messages[done..k] }))?;
                if loom_session::history::append_history(
                    &store,
                    &blobs,
                    &id,
                    &body,
                    Some(loom_core::Api::OpenaiChat),
                    None,
                    1,
                )
                .is_err()
                {
                    refused += 1;
                    break;
                }
                done = k;
                let out = engine
                    .render_session(b, &id, &spec)
                    .map_err(|e| anyhow::anyhow!("the render: {}", e.message))?
                    .context("the session")?;
                bytes += serde_json::to_string(&out.body)?.len();
                calls += 1;
            }
        }
    }
    let took = started.elapsed().as_secs_f64();
    println!(
        "rust replay through the store path: {} files, {calls} calls at 16k in {took:.2} s \
         ({:.3} ms a call, {:.1} MB of JSON out, {refused} trajectories stopped early)",
        files.len(),
        took / calls.max(1) as f64 * 1e3,
        bytes as f64 / 1e6
    );
    Ok(())
}
