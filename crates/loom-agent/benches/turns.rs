//! The runtime's own cost per turn: everything but the model call and the tool's work.
//!
//! A scripted model answers instantly; every turn calls `system:shell` through a runner that
//! returns at once; so the time between two turns is the loop itself — settling the call (gate,
//! exec policy), appending the result, rendering the next request (catch-up, render, receipt
//! written) and appending the reply. Prints p50/p99/max over `TURNS` turns (default 1,000), in
//! memory and in an SQLite file.
//!
//!     cargo bench -p loom-agent --bench turns -- [TURNS] [--memory]

#![expect(clippy::print_stdout, reason = "a benchmark: its figures on stdout")]
#![expect(clippy::expect_used, reason = "a benchmark fails loudly")]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use loom_agent::tools::{Fetcher, Ran, Scripts, ShellRunner};
use loom_agent::{Actions, Approval, Env, Limits, Observer, Progress, RunSpec, Runner, Scripted};
use loom_core::{AgentId, SessionId};

struct Instant0;

impl ShellRunner for Instant0 {
    fn run(&self, _command: &str, _workspace: &Path) -> Result<Ran, String> {
        Ok(Ran {
            code: Some(0),
            stopped: None,
            stdout: b"ok\n".to_vec(),
            stderr: Vec::new(),
        })
    }
}

struct NoFetch;

impl Fetcher for NoFetch {
    fn fetch(&self, _url: &str) -> Result<(Vec<u8>, String), String> {
        Err("offline".into())
    }
}

/// Times between consecutive model calls.
struct Clock {
    last: Option<Instant>,
    gaps: Vec<Duration>,
}

impl Observer for Clock {
    fn progress(&mut self, p: &Progress<'_>) {
        if let Progress::Turn { .. } = p {
            let now = Instant::now();
            if let Some(last) = self.last {
                self.gaps.push(now - last);
            }
            self.last = Some(now);
        }
    }
}

fn run(env: &Env, turns: usize, workspace: &Path) -> Vec<Duration> {
    let mut script: Vec<serde_json::Value> = (0..turns)
        .map(|i| {
            serde_json::json!({"content": format!("step {i}: checking the build output once more"),
                "tool_calls": [{"function": {"name": "system__shell",
                "arguments": {"command": format!("cat build-{i}.log")}}}]})
        })
        .collect();
    script.push(serde_json::json!({"content": "done"}));
    let mut model = Scripted::from_value(&serde_json::Value::Array(script)).expect("a script");
    let actions = Actions {
        workspace: workspace.to_path_buf(),
        readable: Vec::new(),
        policy: Arc::new(loom_agent::config::Policy(
            loom_sandbox::ExecPolicy::default(),
        )),
        runner: Arc::new(Instant0),
        scripts: Scripts::default(),
        search: None,
        fetcher: Arc::new(NoFetch),
        user: Vec::new(),
        can_spawn: false,
    };
    let spec = RunSpec {
        model: "gpt-4o".into(),
        budget: Some(16_000),
        approval: Approval::Untrusted,
        limits: Limits::default(),
        prices: None,
        system: loom_agent::DEFAULT_SYSTEM.into(),
        agent: AgentId::new("bench").expect("an id"),
        max_depth: 0,
    };
    let mut clock = Clock {
        last: None,
        gaps: Vec::new(),
    };
    let mut children = |a: &Actions, _: &Path| Actions {
        workspace: a.workspace.clone(),
        readable: Vec::new(),
        policy: Arc::clone(&a.policy),
        runner: Arc::clone(&a.runner),
        scripts: Scripts::default(),
        search: None,
        fetcher: Arc::clone(&a.fetcher),
        user: Vec::new(),
        can_spawn: false,
    };
    let report = Runner::new(env, &mut model, &mut clock, spec, &mut children)
        .start(
            "run the loop",
            Some(SessionId::new("bench").expect("an id")),
            actions,
        )
        .expect("the run");
    assert!(
        matches!(report.stop, loom_agent::Stop::Answered(_)),
        "{:?}",
        report.stop
    );
    clock.gaps
}

fn show(name: &str, mut gaps: Vec<Duration>) {
    gaps.sort();
    let at = |q: f64| gaps[((gaps.len() as f64 - 1.0) * q) as usize];
    println!(
        "{name}: {} turns: p50 {:.0} us, p99 {:.0} us, max {:.0} us",
        gaps.len(),
        at(0.5).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6,
        gaps.last().copied().unwrap_or_default().as_secs_f64() * 1e6
    );
}

fn main() {
    let turns: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000);
    let dir = tempfile::tempdir().expect("a temp dir");
    let memory = Env::new(
        Arc::new(loom_store::MemoryStore::new()),
        Arc::new(loom_store::MemoryBlobStore::new()),
    )
    .expect("an env");
    show("in memory", run(&memory, turns, dir.path()));
    if std::env::args().any(|a| a == "--memory") {
        return;
    }
    let ws = loom_store::Workspace::open(&dir.path().join("bench.db")).expect("a database");
    let sqlite = Env::new(Arc::new(ws.store), Arc::new(ws.blobs)).expect("an env");
    show("sqlite file", run(&sqlite, turns, dir.path()));
}
