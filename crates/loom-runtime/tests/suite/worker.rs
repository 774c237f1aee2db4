//! The background worker: incremental, turn-aligned summaries stored with versions; a render
//! made while it works does not wait; the next compaction point adopts its summary.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loom_core::render::{render, CompactionState, CostMemo, Format, Policy, RenderInput, Rendered};
use loom_runtime::{
    catch_up, summarize_next, summary_views, ChunkOutcome, DeterministicSummarizer, Idle, Job,
    Result, RuntimeError, Summarizer, SummaryRequest, SummaryWorker, WorkerConfig,
};
use loom_store::{MemoryStore, Store};

use super::support::{append_rest, audience, session, setup, store_with, words, Log};

const NOW: i64 = 50_000_000;

/// Dialogue only (no tool results to stub) and no step compaction: the free reducers cannot
/// shrink it, so a compaction point needs the summary.
fn dialogue(turns: usize) -> Log {
    let mut log = Log::new();
    log.system("You are a planning assistant.");
    log.user("Plan the migration of service_a to cluster k8s-west-2");
    extend(&mut log, 0, turns);
    log
}

fn extend(log: &mut Log, from: usize, to: usize) {
    for i in from..to {
        log.user(&format!("Question {i}: {}", words(40, &format!("q{i}_"))));
        log.assistant(&format!("Answer {i}: {}", words(60, &format!("a{i}_"))));
    }
}

fn dialogue_policy() -> Policy {
    Policy {
        context_window: 6_000,
        response_reserve: 200,
        step_compaction: false,
        protect_recent_turns: 2,
        // Points fire before the window is full (the defaults wait until a request would not
        // fit): these dialogues cross a point within a few turns.
        high_watermark: 0.85,
        low_watermark: 0.6,
        ..Policy::default()
    }
}

fn config() -> WorkerConfig {
    WorkerConfig {
        trigger: None,
        min_chunk_tokens: 0,
        chunk_tokens: 600,
        ..WorkerConfig::new(dialogue_policy(), setup(Format::OPENAI_CHAT))
    }
}

fn render_now(store: &MemoryStore, log: &Log, prev: &CompactionState) -> Rendered {
    let events = store.read(&session(), 1..=u64::MAX).unwrap();
    let views = summary_views(&store.summaries(&session()).unwrap());
    let steps = log.step_index();
    let setup = setup(Format::OPENAI_CHAT);
    let audience = audience(NOW);
    let policy = dialogue_policy();
    render(
        &RenderInput {
            events: &events,
            steps: &steps,
            summaries: &views,
            policy: &policy,
            format: Format::OPENAI_CHAT,
            model: &setup.model,
            tools: &setup.tools,
            injections: &[],
            audience: &audience,
            meter: &*setup.meter,
        },
        prev,
        &mut CostMemo::new(),
    )
    .unwrap()
}

fn job(state: CompactionState) -> Job {
    Job {
        session: session(),
        state,
        now_ms: NOW,
    }
}

#[test]
fn summaries_grow_prefix_ward_in_turn_aligned_chunks_with_versions() {
    let log = dialogue(20);
    let store = store_with(&log);
    let outcomes = catch_up(
        &*store,
        &DeterministicSummarizer::default(),
        &config(),
        &job(CompactionState::default()),
    )
    .unwrap();
    let stored: Vec<_> = outcomes
        .iter()
        .filter_map(|o| match o {
            ChunkOutcome::Stored(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    assert!(stored.len() >= 3, "{outcomes:?}");
    let events = log.log();
    for (i, s) in stored.iter().enumerate() {
        assert_eq!(s.version, i as u32 + 1);
        assert_eq!(s.summary.from_seq, 1);
        assert_eq!(s.summary.producer, "deterministic");
        if i > 0 {
            assert!(s.summary.to_seq > stored[i - 1].summary.to_seq);
        }
        // Each span ends at a unit boundary: the next event opens a unit (it is no result).
        let next = &events[s.summary.to_seq as usize];
        assert!(
            !matches!(next.body, loom_core::EventBody::ToolResult { .. }),
            "summary v{} ends at seq {} before {:?}",
            s.version,
            s.summary.to_seq,
            next.body
        );
        assert!(s.summary.content.contains("## Goal\nPlan the migration"));
    }
    // The spans stop before the protected turns.
    let proj = loom_core::render::Projection::build(&events, &audience(NOW));
    let protected = proj.units[proj.recent_turns_start(2)].seq;
    assert!(stored.last().unwrap().summary.to_seq < protected);
    assert_eq!(
        outcomes.last(),
        Some(&ChunkOutcome::Idle(Idle::NothingNew {
            covered_to: stored.last().unwrap().summary.to_seq
        }))
    );
    assert_eq!(store.summaries(&session()).unwrap(), stored);
}

#[test]
fn identifiers_later_turns_use_survive_in_the_summary() {
    let mut log = dialogue(6);
    log.user("Is cluster k8s-west-2 ready for service_a?");
    log.assistant("Checking.");
    log.user("ok");
    log.assistant("done");
    let store = store_with(&log);
    let out = summarize_next(
        &*store,
        &DeterministicSummarizer::default(),
        &WorkerConfig {
            chunk_tokens: 100_000,
            ..config()
        },
        &job(CompactionState::default()),
    )
    .unwrap();
    let ChunkOutcome::Stored(s) = out else {
        panic!("{out:?}")
    };
    for id in ["k8s-west-2", "service_a"] {
        assert!(
            s.summary.content.contains(id),
            "{id} missing:\n{}",
            s.summary.content
        );
    }
}

#[test]
fn below_the_trigger_nothing_is_summarized() {
    let log = dialogue(2);
    let store = store_with(&log);
    let cfg = WorkerConfig {
        trigger: Some(0.6),
        ..config()
    };
    let out = summarize_next(
        &*store,
        &DeterministicSummarizer::default(),
        &cfg,
        &job(CompactionState::default()),
    )
    .unwrap();
    assert!(
        matches!(out, ChunkOutcome::Idle(Idle::BelowTrigger { estimate, threshold }) if estimate <= threshold),
        "{out:?}"
    );
    assert!(store.summaries(&session()).unwrap().is_empty());
}

/// Blocks inside `summarize` until released, to hold the worker busy.
struct Gate {
    entered: Mutex<mpsc::Sender<()>>,
    release: Mutex<mpsc::Receiver<()>>,
}

impl Summarizer for Gate {
    fn name(&self) -> &str {
        "gated"
    }
    fn summarize(&self, req: &SummaryRequest) -> Result<String> {
        self.entered.lock().unwrap().send(()).unwrap();
        self.release
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| RuntimeError::Worker("test gate never opened".into()))?;
        DeterministicSummarizer::default().summarize(req)
    }
}

#[test]
fn a_render_does_not_wait_for_the_worker_and_the_next_point_adopts_its_summary() {
    let mut log = dialogue(14);
    let store = store_with(&log);
    let first = render_now(&store, &log, &CompactionState::default());
    assert_eq!(first.receipt.summary_version, None);
    let state = first.state.clone();

    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let gate = Gate {
        entered: Mutex::new(entered_tx),
        release: Mutex::new(release_rx),
    };
    let worker = SummaryWorker::spawn(
        Arc::clone(&store) as Arc<dyn Store>,
        Arc::new(gate),
        WorkerConfig {
            chunk_tokens: 100_000,
            ..config()
        },
    )
    .unwrap();
    worker.submit(job(state.clone())).unwrap();
    entered_rx.recv_timeout(Duration::from_secs(30)).unwrap();

    // The worker is inside the summarizer; a render goes ahead with what is stored.
    assert!(worker.is_busy());
    let start = Instant::now();
    let during = render_now(&store, &log, &state);
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(
        worker.is_busy(),
        "the render finished while the worker was still busy"
    );
    assert_eq!(during.receipt.summary_version, None);
    assert!(worker.try_report().is_none());

    release_tx.send(()).unwrap();
    let report = worker.wait_report(Duration::from_secs(30)).unwrap();
    let outcomes = report.result.unwrap();
    let ChunkOutcome::Stored(summary) = &outcomes[0] else {
        panic!("{outcomes:?}")
    };
    worker.shutdown().unwrap();

    // The agent goes on; the estimate crosses the high watermark and a point fires: stubbing and
    // folding have nothing to cut, so it adopts the summary.
    let already = log.events.len();
    extend(&mut log, 14, 26);
    append_rest(&store, &log, already);
    let mut prev = during.state.clone();
    let mut adopted = None;
    for _ in 0..3 {
        let r = render_now(&store, &log, &prev);
        if r.receipt.summary_version.is_some() {
            adopted = Some(r);
            break;
        }
        prev = r.state;
    }
    let r = adopted.expect("a compaction point should adopt the summary");
    assert_eq!(r.receipt.summary_version, Some(summary.version));
    assert!(r.receipt.compaction.is_some());
    assert_eq!(
        r.state.summary,
        Some((summary.version, summary.summary.to_seq))
    );
    // Everything the summary covers (but the kept system prompt and task) is summarized.
    let summarized: u64 = r.receipt.summarized.iter().map(|s| s.to - s.from + 1).sum();
    assert_eq!(summarized, summary.summary.to_seq - 2);
    let body = r.body().to_string();
    assert!(body.contains("Summary of the conversation so far"));
}

struct Panics;
impl Summarizer for Panics {
    fn name(&self) -> &str {
        "panics"
    }
    fn summarize(&self, _: &SummaryRequest) -> Result<String> {
        panic!("summarizer bug")
    }
}

#[test]
fn a_panicking_summarizer_is_reported_and_the_worker_keeps_going() {
    let log = dialogue(10);
    let store = store_with(&log);
    let worker = SummaryWorker::spawn(
        Arc::clone(&store) as Arc<dyn Store>,
        Arc::new(Panics),
        config(),
    )
    .unwrap();
    for _ in 0..2 {
        worker.submit(job(CompactionState::default())).unwrap();
        let report = worker.wait_report(Duration::from_secs(30)).unwrap();
        let err = report.result.unwrap_err();
        assert!(err.to_string().contains("summarizer bug"), "{err}");
    }
    worker.shutdown().unwrap();
    assert!(store.summaries(&session()).unwrap().is_empty());
}
