//! Runtime costs on real trajectories and realistic inputs:
//! - `summary/catch_up`: the worker folding whole SWE-agent sessions (mini-swe-agent on
//!   SWE-bench Verified) into deterministic summaries, exact o200k counts;
//! - `hooks/pre`: one turn's pre-hooks (three ordered, a parallel group of three threads);
//! - `task/build_context`: a TaskContextManager over 1,000 memory records and 50 messages.
//!
//! Before timing, it prints what the summary input bounding does to the trace: raw bytes of the
//! covered events against bytes of the transcripts the summarizer read.

#![expect(clippy::unwrap_used, reason = "a bench fails loudly")]
#![expect(clippy::print_stdout, reason = "the bench reports its input figures")]

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use loom_core::render::{CompactionState, Format, Injection, Policy, TokenMeter};
use loom_core::{
    AgentId, ContentStats, Event, EventBody, Ingest, MessageContent, NewEvent, ReduceConfig,
    SessionId, ToolCall, ToolOutput,
};
use loom_runtime::task::{action, ContextConfig, EventBus, MemorySource, TaskItem};
use loom_runtime::{
    catch_up, AppendHook, BoxError, ChunkOutcome, DeterministicSummarizer, Draft, Flow, Hooks,
    InjectionBudget, Job, ParallelGroup, PreHook, RenderSetup, Summarizer, SummaryRequest,
    TaskContextManager, TurnView, WorkerConfig,
};
use loom_store::{MemoryStore, NewSession, StepRecord, Store};
use loom_tokens::{Encoding, Tokenizer};
use serde_json::Value;

const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces");

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// One OpenAI Chat trajectory as log events (tool results with their stats), or `None` when it
/// breaks the pairing rules.
fn events_of(messages: &[Value]) -> Vec<NewEvent> {
    let mut names: HashMap<String, String> = HashMap::new();
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let ts = 1_000 * i as i64;
        let content = text_of(&m["content"]);
        let body = match m["role"].as_str().unwrap_or("") {
            "system" => EventBody::System {
                content: content.into(),
            },
            "user" => EventBody::User {
                content: content.into(),
                name: None,
            },
            "assistant" => {
                let calls: Vec<ToolCall> = m["tool_calls"]
                    .as_array()
                    .map(|c| {
                        c.iter()
                            .map(|c| ToolCall {
                                id: c["id"].as_str().unwrap_or("").into(),
                                name: c["function"]["name"].as_str().unwrap_or("tool").into(),
                                arguments: c["function"]["arguments"]
                                    .as_str()
                                    .unwrap_or("{}")
                                    .into(),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                for c in &calls {
                    names.insert(c.id.clone(), c.name.clone());
                }
                EventBody::Assistant {
                    content: (!content.is_empty()).then_some(MessageContent::Text(content)),
                    reasoning: None,
                    tool_calls: calls,
                    name: None,
                    native: None,
                }
            }
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap_or("").to_owned();
                EventBody::ToolResult {
                    tool_name: names.get(&id).cloned().unwrap_or_else(|| "tool".into()),
                    call_id: id,
                    stats: ContentStats::of(content.as_bytes()),
                    content: ToolOutput::Text(content),
                    is_error: false,
                }
            }
            _ => continue,
        };
        out.push(NewEvent::new(ts, body));
    }
    out
}

fn steps_of(events: &[NewEvent]) -> Vec<StepRecord> {
    let reduce = ReduceConfig::default();
    let mut ingest = Ingest::new();
    let mut out = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let event = Event {
            seq: i as u64 + 1,
            ts_ms: e.ts_ms,
            body: e.body.clone(),
        };
        if let (Some(r), EventBody::ToolResult { call_id, .. }) =
            (ingest.push(&reduce, &event, None), &event.body)
        {
            out.push(StepRecord {
                id: r.step.id.clone(),
                call_id: call_id.clone(),
                result_seq: event.seq,
                body: serde_json::to_value(&r.step).unwrap(),
            });
        }
    }
    out
}

struct Session {
    events: Vec<NewEvent>,
    steps: Vec<StepRecord>,
}

fn sessions(file: &str) -> Vec<Session> {
    let text = std::fs::read_to_string(format!("{TRACES}/{file}")).unwrap();
    text.lines()
        .filter_map(|line| {
            let v: Value = serde_json::from_str(line).ok()?;
            let events = events_of(v["messages"].as_array()?);
            let steps = steps_of(&events);
            // Trajectories that break the pairing rules are skipped (the store refuses them).
            let probe = MemoryStore::new();
            store_session(&probe, &events, &steps).ok()?;
            Some(Session { events, steps })
        })
        .collect()
}

fn sid() -> SessionId {
    SessionId::new("bench").unwrap()
}

fn store_session(
    store: &MemoryStore,
    events: &[NewEvent],
    steps: &[StepRecord],
) -> loom_store::Result<()> {
    store.create_session(
        &NewSession {
            id: sid(),
            agent: AgentId::new("agent").unwrap(),
            parent: None,
            created_ms: 0,
        },
        events,
    )?;
    store.put_steps(&sid(), steps)
}

fn worker_config(meter: Arc<Tokenizer>) -> WorkerConfig {
    let policy = Policy {
        context_window: 32_000,
        response_reserve: 2_000,
        ..Policy::default()
    };
    let setup = RenderSetup {
        format: Format::OPENAI_CHAT,
        model: "gpt-4o".into(),
        tools: Vec::new(),
        meter,
    };
    WorkerConfig {
        trigger: None,
        max_chunks_per_job: 1_000,
        ..WorkerConfig::new(policy, setup)
    }
}

fn job() -> Job {
    Job {
        session: sid(),
        state: CompactionState::default(),
        now_ms: 0,
    }
}

/// The deterministic summarizer, measuring what it is given.
#[derive(Default)]
struct Measure {
    transcript_bytes: AtomicUsize,
    largest_request_bytes: AtomicUsize,
}

impl Summarizer for Measure {
    fn name(&self) -> &str {
        "deterministic"
    }
    fn summarize(&self, req: &SummaryRequest) -> loom_runtime::Result<String> {
        self.transcript_bytes
            .fetch_add(req.transcript().len(), Ordering::Relaxed);
        self.largest_request_bytes
            .fetch_max(req.prompt().len(), Ordering::Relaxed);
        DeterministicSummarizer::default().summarize(req)
    }
}

/// Raw bytes the summaries covered against the bytes of transcript the summarizer read.
fn report_bounding(sessions: &[Session], config: &WorkerConfig) {
    let (mut covered_raw, mut summaries, mut chunks, mut rejected) = (0usize, 0usize, 0, 0);
    let mut summary_bytes = 0usize;
    let measure = Measure::default();
    for s in sessions {
        let store = MemoryStore::new();
        store_session(&store, &s.events, &s.steps).unwrap();
        let outcomes = catch_up(&store, &measure, config, &job()).unwrap();
        let mut to = 0;
        for o in &outcomes {
            match o {
                ChunkOutcome::Stored(sum) => {
                    chunks += 1;
                    to = sum.summary.to_seq;
                    summary_bytes = summary_bytes.max(sum.summary.content.len());
                }
                ChunkOutcome::Rejected { .. } => rejected += 1,
                ChunkOutcome::Idle(_) => {}
            }
        }
        if to > 0 {
            summaries += 1;
            covered_raw += s.events[..to as usize]
                .iter()
                .map(|e| serde_json::to_string(&e.body).unwrap().len())
                .sum::<usize>();
        }
    }
    println!(
        "summary input: {} sessions, {summaries} summarised in {chunks} chunks ({rejected} \
         rejected); {covered_raw} raw bytes covered, {} bytes of transcript read; largest \
         prompt {} bytes; largest summary {summary_bytes} bytes",
        sessions.len(),
        measure.transcript_bytes.load(Ordering::Relaxed),
        measure.largest_request_bytes.load(Ordering::Relaxed),
    );
}

fn bench_summary(c: &mut Criterion) {
    let meter = Arc::new(Tokenizer::Bpe(Encoding::O200kBase));
    let sessions = sessions("miniswe_gemini3pro_swebv.jsonl");
    let config = worker_config(meter);
    report_bounding(&sessions, &config);
    let mut group = c.benchmark_group("summary");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("catch_up/miniswe_all_sessions", |b| {
        b.iter_batched(
            || {
                sessions
                    .iter()
                    .map(|s| {
                        let store = MemoryStore::new();
                        store_session(&store, &s.events, &s.steps).unwrap();
                        store
                    })
                    .collect::<Vec<_>>()
            },
            |stores| {
                for store in &stores {
                    black_box(
                        catch_up(store, &DeterministicSummarizer::default(), &config, &job())
                            .unwrap(),
                    );
                }
            },
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

struct Push(&'static str);
impl PreHook for Push {
    fn name(&self) -> &str {
        self.0
    }
    fn run(&self, turn: &TurnView, draft: &mut Draft) -> Result<Flow, BoxError> {
        draft.push(format!("{}: {}", self.0, turn.at_seq));
        Ok(Flow::Continue)
    }
}

struct Append(&'static str);
impl AppendHook for Append {
    fn name(&self) -> &str {
        self.0
    }
    fn run(&self, _: &TurnView, so_far: &[Injection]) -> Result<Vec<String>, BoxError> {
        Ok(vec![format!("{} saw {}", self.0, so_far.len())])
    }
}

fn bench_hooks(c: &mut Criterion) {
    let hooks = Hooks::new()
        .pre(Push("a"))
        .pre(Push("b"))
        .pre(Push("c"))
        .parallel(
            ParallelGroup::new()
                .hook(Append("x"), Duration::from_secs(1))
                .hook(Append("y"), Duration::from_secs(1))
                .hook(Append("z"), Duration::from_secs(1)),
        );
    let meter = Tokenizer::Bpe(Encoding::O200kBase);
    let budget = InjectionBudget {
        format: Format::OPENAI_CHAT,
        meter: &meter,
        reserve: 4_000,
    };
    let turn = TurnView {
        session: None,
        agent: None,
        at_seq: 42,
        now_ms: 0,
        user_message: Some("where is the config?".into()),
    };
    c.bench_function("hooks/pre_3_ordered_3_parallel", |b| {
        b.iter(|| black_box(hooks.run_pre(&turn, &[], &budget).unwrap()));
    });
}

fn bench_task(c: &mut Criterion) {
    let items: Vec<TaskItem> = (0..1_000)
        .map(|i| {
            TaskItem::new(format!("m{i}"), action::EXECUTE, i).param(
                "content",
                format!("message {i}: please look at file_{i}.py and report"),
            )
        })
        .collect();
    let bus = Arc::new(EventBus::new());
    for i in 0..50 {
        bus.publish(
            TaskItem::new(format!("d{i}"), action::MESSAGE, i)
                .between("boss", "agent-b")
                .param("content", format!("direct message {i}"))
                .param("priority", (i % 10) as f64 / 10.0)
                .param("ttl_seconds", 600),
        );
    }
    let meter: Arc<dyn TokenMeter + Send + Sync> = Arc::new(Tokenizer::Bpe(Encoding::O200kBase));
    let m = TaskContextManager::new(
        ContextConfig::new("agent-b", "You are agent B.", 8_000),
        meter,
    )
    .unwrap()
    .source(Arc::new(MemorySource::new(items)))
    .source(bus);
    let task = TaskItem::new("now", action::EXECUTE, 2_000).param("content", "summarise");
    c.bench_function("task/build_context_1000_memory_50_dm", |b| {
        b.iter(|| black_box(m.build_context(&task, 10_000).unwrap()));
    });
}

criterion_group!(benches, bench_summary, bench_hooks, bench_task);
criterion_main!(benches);
