//! What the inspector (`api::inspect`) has read of each session, kept between reads so that a page polled every
//! few seconds costs what changed since its last read, not the session's whole log and every
//! receipt again.
//!
//! A session's digest holds, for each model call, the few facts the pages chart (read once from
//! its receipt), the full history's token count by seq, and its results' steps (derived in
//! memory, as a live session derives them: a read never writes). What may change is read again:
//! receipts after the last held (the log only grows), and those held whose usage was not yet
//! reported (a call holds one usage for good, so a reported one is final); new events only.
//! Digests are a cache: bounded in estimated bytes, least recently read dropped first, keyed by
//! the stored session and its creation time (a deleted session's id may be used again).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use loom_core::{Event, EventBody, Ingest, SessionId, SessionInfo, ToolOutput};
use loom_session::engine::Engine;
use loom_session::lru::Lru;
use loom_store::{BlobStore, ModelCall as StoredCall, Offloader, Store, Usage};
use loom_tokens::CountTokens;

use crate::error::{ApiError, Result};

/// Framing tokens counted per event of the full history (a chat message's role and separators
/// cost about this much in every provider's count).
const MESSAGE_FRAMING: u64 = 4;

/// Bytes per token assumed for an offloaded output, whose bytes are not read to count them.
const BYTES_PER_TOKEN: u64 = 4;

/// Longest text a timeline row carries; the whole event is one read away.
pub(crate) const PREVIEW_CHARS: usize = 240;

/// Estimated bytes the digests of a server hold at most: enough for thousands of sessions of
/// hundreds of calls; past it the least recently read go.
const DIGEST_BYTES: usize = 64 << 20;

/// Bytes a digest holds besides its calls and steps, and per call, per step and per event.
const DIGEST_OVERHEAD: usize = 1 << 10;
const CALL_BYTES: usize = 256;
const STEP_BYTES: usize = 128;
const EVENT_BYTES: usize = 8;

/// What the pages need of one model call, read once from its receipt.
#[derive(Debug, Clone)]
pub(crate) struct CallFacts {
    pub(crate) id: u64,
    pub(crate) at_seq: u64,
    pub(crate) created_ms: i64,
    /// `None` for a call proxied in observe mode.
    pub(crate) model: Option<String>,
    pub(crate) estimate: Option<u64>,
    /// Tokens of the call's tool definitions.
    pub(crate) tools: u64,
    /// The model's price of a cached input token, in uncached ones.
    pub(crate) cached_price: f64,
    pub(crate) compaction: bool,
    pub(crate) compaction_at: Option<u64>,
    pub(crate) points: u32,
    pub(crate) hard_total: Option<u64>,
    pub(crate) usage: Option<Usage>,
    /// Runs `[from, to]` of seqs by fate, for the fates the call has.
    pub(crate) fates: BTreeMap<&'static str, Vec<[u64; 2]>>,
}

impl CallFacts {
    fn of(s: &Sources<'_>, c: &StoredCall) -> Self {
        let r = &c.call.receipt["receipt"];
        let model = r["model"].as_str().map(str::to_owned);
        let cached_price = model
            .as_deref()
            .and_then(|m| s.engine.model_info(m).ok())
            .map_or(1.0, |info| info.cached_read);
        let fates = loom_core::render::Receipt::FATES
            .iter()
            .filter_map(|name| {
                let runs: Vec<[u64; 2]> = r[*name]
                    .as_array()?
                    .iter()
                    .filter_map(|run| Some([run["from"].as_u64()?, run["to"].as_u64()?]))
                    .collect();
                (!runs.is_empty()).then_some((*name, runs))
            })
            .collect();
        Self {
            id: c.id,
            at_seq: c.call.at_seq,
            created_ms: c.call.created_ms,
            model,
            estimate: r["estimate"].as_u64(),
            tools: r["tiers"]["tools"].as_u64().unwrap_or(0),
            cached_price,
            compaction: r.get("compaction").is_some_and(|v| !v.is_null()),
            compaction_at: r["compaction"]["at_seq"].as_u64(),
            points: r["points"]
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            hard_total: r["budget"]["hard_total"].as_u64(),
            usage: c.usage,
            fates,
        }
    }
}

/// What the timeline shows of a result's step.
#[derive(Debug, Clone)]
pub(crate) struct StepView {
    /// The start of its observation.
    pub(crate) observation: String,
    /// The reference recall takes for its original bytes, when it was offloaded.
    pub(crate) reference: Option<String>,
}

/// One session as read so far.
#[derive(Debug, Default)]
pub(crate) struct Digest {
    /// Every model call read, in order.
    pub(crate) calls: Vec<CallFacts>,
    /// The counter of `prefix` (the newest rendered call's model's).
    meter: String,
    /// `prefix[n]`: tokens of events `1..=n` sent whole, framing included.
    prefix: Vec<u64>,
    /// The steps derived from the events read for them, by call id.
    pub(crate) steps: HashMap<String, StepView>,
    ingest: Ingest,
    /// Events read for the steps.
    stepped: u64,
    /// The time of the last event read.
    pub(crate) last_ms: i64,
}

impl Digest {
    /// Tokens of the log up to `seq` sent whole.
    pub(crate) fn upto(&self, seq: u64) -> u64 {
        let i = usize::try_from(seq).unwrap_or(usize::MAX);
        self.prefix
            .get(i)
            .or(self.prefix.last())
            .copied()
            .unwrap_or(0)
    }

    fn bytes(&self) -> usize {
        DIGEST_OVERHEAD
            + self.calls.len() * CALL_BYTES
            + self
                .steps
                .values()
                .map(|v| STEP_BYTES + v.observation.len())
                .sum::<usize>()
            + self.prefix.len() * EVENT_BYTES
    }

    /// Reads what changed since the last read: receipts, usage, and the events the counts (and,
    /// with `steps`, the steps) have not seen.
    fn refresh(&mut self, s: &Sources<'_>, info: &SessionInfo, steps: bool) -> Result<()> {
        // Calls after the last held, and again from the first whose usage may still come.
        let unreported = self.calls.iter().position(|c| c.usage.is_none());
        let keep = unreported.unwrap_or(self.calls.len());
        let after = keep.checked_sub(1).map_or(0, |i| self.calls[i].id);
        let fresh = s.store.model_calls_after(&info.id, after)?;
        self.calls.truncate(keep);
        self.calls.extend(fresh.iter().map(|c| CallFacts::of(s, c)));

        // The full history is counted with the tokenizer of the newest rendered call.
        let model = self.calls.iter().rev().find_map(|c| c.model.as_deref());
        let meter = match model {
            Some(m) => Some(
                s.engine
                    .model(m, "model", true)
                    .map_err(|e| ApiError::internal(format!("counting with the model `{m}`: {e}")))?
                    .0,
            ),
            None => None,
        };
        if let Some(meter) = &meter {
            if meter.id() != self.meter {
                self.meter = meter.id();
                self.prefix.clear();
            }
        }
        if self.prefix.is_empty() {
            self.prefix.push(0);
        }
        let counted = self.prefix.len() as u64 - 1;
        let count_from = meter.as_ref().map(|_| counted + 1);
        let step_from = steps.then_some(self.stepped + 1);
        let Some(from) = count_from.into_iter().chain(step_from).min() else {
            return Ok(());
        };
        if from > info.event_count {
            return Ok(());
        }
        let events = s.store.read(&info.id, from..=info.event_count)?;
        if let Some(meter) = &meter {
            for e in events.iter().filter(|e| e.seq > counted) {
                let last = self.prefix.last().copied().unwrap_or(0);
                self.prefix.push(last + event_cost(meter, e));
            }
        }
        if steps {
            let new: Vec<Event> = events
                .iter()
                .filter(|e| e.seq > self.stepped)
                .cloned()
                .collect();
            let off = Offloader::new(s.store, s.blobs, &s.engine.reduce);
            for step in off.derive_known(&info.id, &mut self.ingest, &new)? {
                let view = StepView {
                    observation: preview(&step.observation).0,
                    reference: step.outcome_ref,
                };
                self.steps.insert(step.call_id, view);
            }
            self.stepped = new.last().map_or(self.stepped, |e| e.seq);
        }
        self.last_ms = events.last().map_or(self.last_ms, |e| e.ts_ms);
        Ok(())
    }
}

/// The start of `text`, and whether it was cut.
pub(crate) fn preview(text: &str) -> (String, bool) {
    match text.char_indices().nth(PREVIEW_CHARS) {
        Some((i, _)) => (text[..i].to_owned(), true),
        None => (text.to_owned(), false),
    }
}

/// Tokens one event costs in a request that sends the whole log.
fn event_cost(meter: &dyn CountTokens, e: &Event) -> u64 {
    let offloaded = match &e.body {
        EventBody::ToolResult {
            content: ToolOutput::Blob(_),
            stats,
            ..
        } => stats.bytes.div_ceil(BYTES_PER_TOKEN),
        // Loom's own exchanges, rewrites and repeats are not messages of the client's history.
        EventBody::Hidden { .. } | EventBody::Rewrite { .. } | EventBody::Repeat { .. } => {
            return 0
        }
        _ => 0,
    };
    loom_tokens::event_tokens(meter, &e.body).sent() + offloaded + MESSAGE_FRAMING
}

type Key = (SessionId, i64);

/// What a digest reads: the server's store, its blobs, and the engine (models and reducers).
pub(crate) struct Sources<'a> {
    pub(crate) store: &'a dyn Store,
    pub(crate) blobs: &'a dyn BlobStore,
    pub(crate) engine: &'a Engine,
}

/// The digests of a server's sessions.
#[derive(Debug, Default)]
pub(crate) struct Digests {
    inner: Mutex<Lru<Key, Digest>>,
}

impl Digests {
    /// Session `info`'s digest, brought up to date (its steps too, with `steps`), locked: two
    /// reads of one session wait for each other, reads of two sessions do not.
    pub(crate) fn read(&self, s: &Sources<'_>, info: &SessionInfo, steps: bool) -> Result<Held> {
        let key: Key = (info.id.clone(), info.created_ms);
        let digest = {
            let mut lru = lock(&self.inner);
            lru.touch(&key).unwrap_or_else(|| {
                let d = Arc::new(Mutex::new(Digest::default()));
                lru.insert(key.clone(), Arc::clone(&d), 0);
                d
            })
        };
        let mut held = lock_arc(&digest);
        if let Err(e) = held.refresh(s, info, steps) {
            // Half a refresh is not kept: the next read starts again.
            *held = Digest::default();
            return Err(e);
        }
        let size = held.bytes();
        let mut lru = lock(&self.inner);
        lru.measured(&key, size);
        lru.evict(usize::MAX, DIGEST_BYTES);
        drop(lru);
        drop(held);
        Ok(Held(digest))
    }
}

/// A digest as read, locked while the page is built from it.
pub(crate) struct Held(Arc<Mutex<Digest>>);

impl Held {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Digest> {
        lock_arc(&self.0)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn lock_arc(m: &Arc<Mutex<Digest>>) -> MutexGuard<'_, Digest> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
