//! A render from Rust, for the Python package's overhead target: a conversation grows by one
//! user and one assistant message a turn in an SQLite store, and each turn is rendered at 16k
//! through `Engine::render_session` (what the bindings call). Prints the render's time per call
//! over the second half of the turns. `crates/loom-py/benches/render.py` does the same through
//! Python.
//!
//!     cargo bench -p loom-server --bench render_loop -- [TURNS] [--memory]
//!
//! `--memory` renders from an in-memory store, where no durable commit hides the rest.

#![expect(clippy::print_stdout, reason = "a benchmark: its figure on stdout")]

use std::time::{Duration, Instant};

use anyhow::Context;

use loom_core::{AgentId, EventBody, MessageContent, NewEvent, SessionId};
use loom_session::engine::RenderSpec;
use loom_session::Engine;
use loom_session::{Backend, LiveSessions};
use loom_store::{NewSession, Store, Workspace};

fn text(kind: &str, i: usize) -> String {
    format!("{kind} turn {i}: ")
        + &"the parser rejects a unary minus after a parenthesis ".repeat(4)
}

fn main() -> anyhow::Result<()> {
    let turns: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(400);
    let memory = std::env::args().any(|a| a == "--memory");
    let dir = tempfile::tempdir().context("a temporary folder")?;
    let ws = Workspace::open(&dir.path().join("render.db")).context("the database")?;
    let (mem_store, mem_blobs) = (
        loom_store::MemoryStore::new(),
        loom_store::MemoryBlobStore::new(),
    );
    let (store, blobs): (&dyn Store, &dyn loom_store::BlobStore) = if memory {
        (&mem_store, &mem_blobs)
    } else {
        (&ws.store, &ws.blobs)
    };
    let engine = Engine::built_in().context("the registry")?;
    let live = LiveSessions::new(16);
    let b = Backend {
        store,
        blobs,
        reduce: &engine.reduce,
        live: &live,
    };
    let id = SessionId::new("bench").context("an id")?;
    store
        .create_session(
            &NewSession {
                id: id.clone(),
                agent: AgentId::new("agent").context("an agent")?,
                parent: None,
                created_ms: 1,
            },
            &[],
        )
        .context("the session")?;
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
    let mut times = Vec::with_capacity(turns);
    for i in 0..turns {
        let user = NewEvent::new(
            i as i64,
            EventBody::User {
                content: MessageContent::from(text("user", i).as_str()),
                name: None,
            },
        );
        let reply = NewEvent::new(
            i as i64,
            EventBody::Assistant {
                content: Some(MessageContent::from(text("assistant", i).as_str())),
                reasoning: None,
                native: None,
                tool_calls: Vec::new(),
                name: None,
            },
        );
        store.append(&id, &[user, reply]).context("the append")?;
        let started = Instant::now();
        engine
            .render_session(b, &id, &spec)
            .map_err(|e| anyhow::anyhow!("the render: {}", e.message))?
            .context("the session")?;
        times.push(started.elapsed());
    }
    let mut measured: Vec<Duration> = times[turns / 2..].to_vec();
    let mean = measured.iter().sum::<Duration>() / measured.len().max(1) as u32;
    measured.sort();
    let p50 = measured[measured.len() / 2];
    println!(
        "rust render{}: {turns} turns, the last {} measured: mean {:.1} us, p50 {:.1} us",
        if memory { " (in memory)" } else { "" },
        measured.len(),
        mean.as_secs_f64() * 1e6,
        p50.as_secs_f64() * 1e6
    );
    Ok(())
}
