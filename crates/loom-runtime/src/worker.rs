//! The background summary worker: between turns, prefix-ward, one turn-aligned chunk at a time.
//!
//! Each step reads the log and its derived records from the [`Store`], renders the conversation
//! as the agent would (for its estimate and its stable prefix), and — when the estimate is past
//! the trigger — folds the next chunk after the latest summary into a new summary covering
//! `[1, to_seq]` (previous summary + chunk → new summary). The output is checked, then stored
//! with [`Store::put_summary`]. Spans never reach into the turns the policy protects, because a
//! compaction point only adopts a summary that ends before them.
//!
//! [`SummaryWorker`] runs the steps on its own thread fed by a channel; rendering never waits
//! for it: a render reads whatever summaries are stored (see [`crate::summary_views`]) and the
//! next compaction point adopts the newest one that applies.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use loom_core::render::{
    render, Audience, CompactionState, CostMemo, Format, Msg, Policy, Projection, RenderError,
    RenderInput, Request, StepIndex, TokenMeter, ToolSpec, UnitBody,
};
use loom_core::{Seq, SessionId, Step};
use loom_store::{NewSummary, Store, StoreError, Summary};

use crate::error::{Result, RuntimeError};
use crate::hooks::panic_message;
use crate::summary::{
    check_summary, conversation_prefix, identifiers, later_identifiers, next_chunk, summary_views,
    EntryLimits, PreviousSummary, Rejection, Summarizer, SummaryRequest, DEFAULT_SECTIONS,
};

/// How the conversation is rendered (the worker renders it to find its estimate and prefix).
#[derive(Clone)]
pub struct RenderSetup {
    /// The provider format.
    pub format: Format,
    /// The model.
    pub model: String,
    /// Tools offered to the model.
    pub tools: Vec<ToolSpec>,
    /// The token counter.
    pub meter: Arc<dyn TokenMeter + Send + Sync>,
}

impl std::fmt::Debug for RenderSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenderSetup")
            .field("format", &self.format)
            .field("model", &self.model)
            .field("tools", &self.tools.len())
            .field("meter", &self.meter.name())
            .finish()
    }
}

/// What the worker does and within which bounds.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The render policy of the conversation.
    pub policy: Policy,
    /// How the conversation is rendered.
    pub setup: RenderSetup,
    /// Most tokens of transcript in one chunk. Default: 4,000.
    pub chunk_tokens: u64,
    /// A chunk that stops at the protected turns with fewer tokens waits for more. Default: 300.
    pub min_chunk_tokens: u64,
    /// Most chunks folded per job. Default: 8.
    pub max_chunks_per_job: u32,
    /// Share of the compaction target the conversation's estimate must exceed before a summary
    /// is made (`None`: always). Default: the policy's low watermark — past it, the next
    /// compaction point is coming and the summary should be ready for it.
    pub trigger: Option<f64>,
    /// Sections every summary must have. Default: [`DEFAULT_SECTIONS`].
    pub sections: Vec<String>,
    /// Most identifiers a summary is required to keep (the first ones in the span). Default: 64.
    pub max_identifiers: usize,
    /// Tokens a summary may use. Default: 1,024.
    pub max_output_tokens: u64,
    /// Bounds on transcript entries.
    pub limits: EntryLimits,
}

impl WorkerConfig {
    /// The defaults for `policy` and `setup`.
    pub fn new(policy: Policy, setup: RenderSetup) -> Self {
        let trigger = Some(policy.low_watermark);
        Self {
            policy,
            setup,
            chunk_tokens: 4_000,
            min_chunk_tokens: 300,
            max_chunks_per_job: 8,
            trigger,
            sections: DEFAULT_SECTIONS.iter().map(|s| (*s).to_owned()).collect(),
            max_identifiers: 64,
            max_output_tokens: 1_024,
            limits: EntryLimits::default(),
        }
    }
}

/// A request to bring one session's summary up to date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The session.
    pub session: SessionId,
    /// The compaction state stored after the session's last render (its prefix is reused).
    pub state: CompactionState,
    /// The clock, UTC milliseconds (direct-message expiry, the summary's timestamp).
    pub now_ms: i64,
}

/// Why a step made no summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Idle {
    /// The conversation's estimate is under the trigger.
    BelowTrigger {
        /// The estimate.
        estimate: u64,
        /// The trigger, in tokens.
        threshold: u64,
    },
    /// Nothing complete is waiting between the latest summary and the protected turns.
    NothingNew {
        /// The latest summary's `to_seq` (0 without one).
        covered_to: Seq,
    },
    /// The waiting chunk is too small to be worth a summary yet.
    ChunkTooSmall {
        /// Its tokens.
        tokens: u64,
        /// The minimum.
        min: u64,
    },
    /// The log has nothing for this agent.
    NothingToRender,
}

/// The result of one worker step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkOutcome {
    /// A summary was stored.
    Stored(Summary),
    /// The summarizer's output failed its checks and was discarded.
    Rejected {
        /// First seq of the chunk.
        from_seq: Seq,
        /// Last seq it would have covered.
        to_seq: Seq,
        /// Why.
        rejection: Rejection,
    },
    /// Nothing to do.
    Idle(Idle),
}

fn step_index(store: &dyn Store, session: &SessionId) -> Result<StepIndex> {
    let mut index = StepIndex::new();
    for record in store.steps(session)? {
        let step: Step =
            serde_json::from_value(record.body).map_err(|e| RuntimeError::CorruptStep {
                session: session.to_string(),
                id: record.id.clone(),
                reason: e.to_string(),
            })?;
        index.insert(record.call_id, step);
    }
    Ok(index)
}

/// The leading system prompt and tools: the prefix when the conversation cannot be rendered.
fn fallback_prefix(proj: &Projection, setup: &RenderSetup, policy: &Policy) -> Request {
    let messages: Vec<Msg> = proj
        .units
        .iter()
        .map_while(|u| match &u.body {
            UnitBody::System(c) => Some(Msg::System(c.clone())),
            _ => None,
        })
        .collect();
    Request {
        model: setup.model.clone(),
        tools: setup.tools.clone(),
        stable_len: messages.len(),
        messages,
        max_output_tokens: policy.response_reserve,
    }
}

/// One worker step for `job`: decides the next span and stores its summary, or says why not.
pub fn summarize_next(
    store: &dyn Store,
    summarizer: &dyn Summarizer,
    config: &WorkerConfig,
    job: &Job,
) -> Result<ChunkOutcome> {
    let session = &job.session;
    let info = store
        .session(session)?
        .ok_or_else(|| StoreError::SessionNotFound(session.clone()))?;
    let latest = store.latest_seq(session)?;
    let events = store.read(session, 1..=latest)?;
    let steps = step_index(store, session)?;
    let summaries = store.summaries(session)?;
    let views = summary_views(&summaries);
    let previous = views
        .iter()
        .max_by_key(|s| s.version)
        .map(|s| PreviousSummary {
            version: s.version,
            to_seq: s.to_seq,
            content: s.content.clone(),
        });
    let covered_to = previous.as_ref().map_or(0, |p| p.to_seq);
    let audience = Audience {
        agent: Some(info.agent.clone()),
        now_ms: job.now_ms,
    };
    let proj = Projection::build(&events, &audience);
    let setup = &config.setup;
    let meter: &dyn TokenMeter = &*setup.meter;
    let input = RenderInput {
        events: &events,
        steps: &steps,
        summaries: &views,
        policy: &config.policy,
        format: setup.format,
        model: &setup.model,
        tools: &setup.tools,
        injections: &[],
        audience: &audience,
        meter,
    };
    let (estimate, prefix) = match render(&input, &job.state, &mut CostMemo::new()) {
        Ok(r) => (r.receipt.estimate, conversation_prefix(&r)),
        // Over budget is exactly when a summary is needed; the prefix is the system prompt.
        Err(RenderError::OverBudget { needed, .. }) => {
            (needed, fallback_prefix(&proj, setup, &config.policy))
        }
        Err(RenderError::NothingToRender { .. }) => {
            return Ok(ChunkOutcome::Idle(Idle::NothingToRender))
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(share) = config.trigger {
        let threshold = (config.policy.budget().target as f64 * share).floor() as u64;
        if estimate <= threshold {
            return Ok(ChunkOutcome::Idle(Idle::BelowTrigger {
                estimate,
                threshold,
            }));
        }
    }
    let limit = proj.recent_turns_start(config.policy.protect_recent_turns);
    let Some(chunk) = next_chunk(
        &proj,
        &steps,
        covered_to,
        limit,
        config.chunk_tokens,
        meter,
        &config.limits,
    ) else {
        return Ok(ChunkOutcome::Idle(Idle::NothingNew { covered_to }));
    };
    if !chunk.full && chunk.tokens < config.min_chunk_tokens {
        return Ok(ChunkOutcome::Idle(Idle::ChunkTooSmall {
            tokens: chunk.tokens,
            min: config.min_chunk_tokens,
        }));
    }

    let task = proj
        .first_user
        .and_then(|i| match &proj.units[i].body {
            UnitBody::User { content, .. } => Some(content.text().into_owned()),
            _ => None,
        })
        .map(|t| t.chars().take(config.limits.text_chars).collect::<String>());
    let mut covered = String::new();
    if let Some(p) = &previous {
        covered.push_str(&p.content);
        covered.push('\n');
    }
    if let Some(t) = &task {
        covered.push_str(t);
        covered.push('\n');
    }
    for e in &chunk.entries {
        covered.push_str(&e.line());
        covered.push('\n');
    }
    let later = later_identifiers(&events, chunk.to_seq);
    let must_keep: Vec<String> = identifiers(&covered)
        .into_iter()
        .filter(|id| later.contains(id))
        .take(config.max_identifiers)
        .collect();

    let request = SummaryRequest {
        session: session.clone(),
        task,
        previous,
        from_seq: chunk.from_seq,
        to_seq: chunk.to_seq,
        entries: chunk.entries,
        must_keep,
        sections: config.sections.clone(),
        prefix: Some(prefix),
        max_output_tokens: config.max_output_tokens,
    };
    let output = summarizer.summarize(&request)?;
    if let Err(rejection) = check_summary(&output, &request, meter) {
        return Ok(ChunkOutcome::Rejected {
            from_seq: request.from_seq,
            to_seq: request.to_seq,
            rejection,
        });
    }
    let stored = store.put_summary(&NewSummary {
        session: session.clone(),
        from_seq: 1,
        to_seq: request.to_seq,
        content: output,
        producer: summarizer.name().to_owned(),
        created_ms: job.now_ms,
    })?;
    Ok(ChunkOutcome::Stored(stored))
}

/// Worker steps for `job` until one stores nothing or `max_chunks_per_job` were stored.
pub fn catch_up(
    store: &dyn Store,
    summarizer: &dyn Summarizer,
    config: &WorkerConfig,
    job: &Job,
) -> Result<Vec<ChunkOutcome>> {
    let mut out = Vec::new();
    for _ in 0..config.max_chunks_per_job.max(1) {
        let outcome = summarize_next(store, summarizer, config, job)?;
        let stored = matches!(outcome, ChunkOutcome::Stored(_));
        out.push(outcome);
        if !stored {
            break;
        }
    }
    Ok(out)
}

/// What the worker did for one session.
#[derive(Debug)]
pub struct WorkerReport {
    /// The session.
    pub session: SessionId,
    /// The steps taken, or the error that stopped them.
    pub result: Result<Vec<ChunkOutcome>>,
}

/// [`catch_up`] on a thread of its own, fed by a channel. Jobs that queue up while it works are
/// coalesced: only the latest job per session runs.
#[derive(Debug)]
pub struct SummaryWorker {
    jobs: Option<mpsc::Sender<Job>>,
    reports: mpsc::Receiver<WorkerReport>,
    pending: Arc<AtomicUsize>,
    handle: Option<JoinHandle<()>>,
}

impl SummaryWorker {
    /// Starts the worker thread.
    pub fn spawn(
        store: Arc<dyn Store>,
        summarizer: Arc<dyn Summarizer>,
        config: WorkerConfig,
    ) -> Result<Self> {
        let (job_tx, job_rx) = mpsc::channel::<Job>();
        let (report_tx, report_rx) = mpsc::channel::<WorkerReport>();
        let pending = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&pending);
        let name = "loom-summary-worker".to_owned();
        let handle = thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                while let Ok(first) = job_rx.recv() {
                    let mut taken = 1;
                    let mut batch = BTreeMap::new();
                    batch.insert(first.session.clone(), first);
                    while let Ok(job) = job_rx.try_recv() {
                        taken += 1;
                        batch.insert(job.session.clone(), job);
                    }
                    for (session, job) in batch {
                        let result = catch_unwind(AssertUnwindSafe(|| {
                            catch_up(&*store, &*summarizer, &config, &job)
                        }))
                        .unwrap_or_else(|payload| {
                            Err(RuntimeError::Worker(format!(
                                "summarizing session `{session}` panicked: {}",
                                panic_message(payload.as_ref())
                            )))
                        });
                        // Nobody listening is fine: the summaries are in the store.
                        let _ = report_tx.send(WorkerReport { session, result });
                    }
                    counter.fetch_sub(taken, Ordering::SeqCst);
                }
            })
            .map_err(|source| RuntimeError::Spawn { name, source })?;
        Ok(Self {
            jobs: Some(job_tx),
            reports: report_rx,
            pending,
            handle: Some(handle),
        })
    }

    /// Queues a job; returns at once.
    pub fn submit(&self, job: Job) -> Result<()> {
        let jobs = self
            .jobs
            .as_ref()
            .ok_or_else(|| RuntimeError::Worker("it was shut down".into()))?;
        self.pending.fetch_add(1, Ordering::SeqCst);
        jobs.send(job).map_err(|_| {
            self.pending.fetch_sub(1, Ordering::SeqCst);
            RuntimeError::Worker("its thread has ended".into())
        })
    }

    /// Whether submitted jobs are still queued or running.
    pub fn is_busy(&self) -> bool {
        self.pending.load(Ordering::SeqCst) > 0
    }

    /// The next report, if one is ready.
    pub fn try_report(&self) -> Option<WorkerReport> {
        self.reports.try_recv().ok()
    }

    /// The next report, waiting at most `timeout`.
    pub fn wait_report(&self, timeout: Duration) -> Option<WorkerReport> {
        self.reports.recv_timeout(timeout).ok()
    }

    /// Stops taking jobs, lets the thread finish the queued ones, and joins it.
    pub fn shutdown(mut self) -> Result<()> {
        self.jobs = None;
        match self.handle.take() {
            Some(h) => h
                .join()
                .map_err(|_| RuntimeError::Worker("its thread panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for SummaryWorker {
    fn drop(&mut self) {
        // Closing the channel ends the thread after its current job; joining here could block a
        // caller on a slow provider, so the thread is left to finish on its own.
        self.jobs = None;
    }
}
