//! Live sessions: what a server keeps in memory per session so that a call costs O(new events),
//! not a pass over the whole log.
//!
//! A [`Live`] session holds the log as read, its projection (pushed one event at a time), its
//! steps (derived as results arrive), the tool-call ledger, the summaries, the newest receipt and
//! the render's cost memo. It is a cache over the store, never the truth: every use starts with
//! [`Live::refresh`], one query that picks up what another process wrote since. A call's new
//! events are held ([`Live::stage`]) and written with its receipt as one turn
//! ([`Live::commit`]), which the store refuses whole when another writer moved the log on; the
//! state is then read again. [`LiveSessions`]
//! bounds how many are kept (least recently used go first), so memory stays bounded however
//! many sessions a server sees.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use loom_core::render::{Audience, CompactionState, StepIndex};
use loom_core::{AgentId, CallState, Event, Ledger, NewEvent, ReduceConfig, Seq, SessionId, Step};
use loom_store::{
    BlobStore, CallStatus, Known, ModelCall, NewModelCall, Offloader, StagedWrites, Store,
    StoreError, Summary, Turn, Usage,
};

use crate::counts::Counts;
use crate::error::Result;
use crate::lru::Lru;
use crate::memo::BodyMemo;
use crate::state::{SessionState, View};

/// What a live session reads and writes through.
#[derive(Debug, Clone, Copy)]
pub struct Backend<'a> {
    /// The log.
    pub store: &'a dyn Store,
    /// Offloaded outputs.
    pub blobs: &'a dyn BlobStore,
    /// Reduction settings for deriving steps.
    pub reduce: &'a ReduceConfig,
    /// The cache of live sessions.
    pub live: &'a LiveSessions,
}

/// One session's render state.
#[derive(Debug)]
pub struct Live {
    id: SessionId,
    /// The agent whose session it is.
    pub agent: AgentId,
    /// When the session was created.
    pub created_ms: i64,
    /// The log, its projection and steps, and the render's cost memo.
    state: SessionState,
    /// Token counts of texts, kept across renders.
    pub counts: Counts,
    /// The last client body synced into this session, so that the next is read from where it
    /// ended (see `proxy::ingest`).
    pub body: Option<BodyMemo>,
    /// What each client item the session has seen says (`proxy::fit::restore`): the hash of an
    /// item's raw bytes to the hash of its meaning, so a long history is not read again on
    /// every fitted call.
    pub meanings: std::collections::HashMap<u128, u64>,
    /// An estimate of the memory this state holds (see [`weight`]).
    bytes: usize,
    /// The tool calls' states after the last event held.
    ledger: Ledger,
    /// The session's summaries, oldest version first.
    summaries: Vec<Summary>,
    /// The newest receipt, which a render continues from.
    last_call: Option<ModelCall>,
    /// The largest anchoring factor this state has seen ([`Live::anchor`]).
    anchor: Option<f64>,
    /// The compaction state of the newest receipt as this state rendered it (by the receipt's
    /// id), so the next render continues from it without reading the receipt's JSON again.
    last_state: Option<(u64, Continued)>,
    /// The state of the render whose receipt is about to be written ([`Live::rendered`]).
    rendered: Option<Continued>,
    /// Events held but not yet written, with what was derived from them: the call's turn,
    /// written by [`Live::commit`].
    pending: Option<Pending>,
    /// A write of this state's turn failed: it may hold events the log does not, and is loaded
    /// again on its next use.
    broken: bool,
}

/// A render's compaction state with what it was made under: a later render continues from it
/// only under the same policy, model and format.
#[derive(Debug, Clone)]
pub struct Continued {
    /// The receipt's `at_seq`: the log's last seq when it was rendered.
    pub at_seq: Seq,
    /// The receipt's `created_ms`, which tells this render's receipt from another's.
    pub created_ms: i64,
    /// The policy's version.
    pub policy_version: String,
    /// The model.
    pub model: String,
    /// The format's name.
    pub format: String,
    /// The state.
    pub state: CompactionState,
}

/// A call's turn being prepared: events the state holds that the log does not have yet.
#[derive(Debug)]
struct Pending {
    /// The log's length before them.
    after: Seq,
    /// The states, before these events, of the calls they name.
    calls: Ledger,
    events: Vec<NewEvent>,
    writes: StagedWrites,
}

/// What one event is estimated to cost in memory: its JSON text, held in the log and again, in
/// pieces, by the projection, the steps and the cost memo, plus the structures around it. The
/// factors are calibrated against the resident memory the load tool's `sessions` scenario
/// measures (docs/performance.md).
fn weight(e: &Event) -> usize {
    let json = serde_json::to_vec(&e.body).map_or(0, |v| v.len());
    3 * json + EVENT_OVERHEAD
}

/// How many times a call prepares its turn when the store refuses it because another writer
/// moved the session on meanwhile; past it the call fails with 409.
pub const TURN_ATTEMPTS: u32 = 3;

/// Bytes a live session's structures hold besides its events, and each event besides its text.
const SESSION_OVERHEAD: usize = 8 << 10;
const EVENT_OVERHEAD: usize = 512;

impl Live {
    /// Reads the session whole; `None` when it does not exist.
    fn load(b: Backend<'_>, id: &SessionId) -> Result<Option<Self>> {
        let Some(info) = b.store.session(id)? else {
            return Ok(None);
        };
        let off = Offloader::new(b.store, b.blobs, b.reduce);
        let steps: StepIndex = off
            .steps(id)?
            .into_iter()
            .map(|s| (s.call_id.clone(), s))
            .collect();
        let all = b.store.catch_up(id, Known::default())?;
        let events = all.events;
        let mut state = SessionState::new();
        let mut ledger = Ledger::new();
        for e in &events {
            // Steps are already derived; the ingest only has to count them.
            state.ingest().next(e);
            // The log keeps its rules, so this fails only on a log written by another build,
            // which the store's own checks (on the next write) answer for.
            let _ = ledger.apply(e.seq, &e.body);
        }
        // Expiry is not an event: it is read from the stored calls.
        for call in b.store.tool_calls(id)? {
            if call.status == CallStatus::Expired {
                let _ = ledger.expire(&call.call_id);
            }
        }
        let mut live = Self {
            id: id.clone(),
            agent: info.agent,
            created_ms: info.created_ms,
            state,
            counts: Counts::default(),
            body: None,
            meanings: std::collections::HashMap::new(),
            bytes: SESSION_OVERHEAD,
            ledger,
            summaries: all.summaries.unwrap_or_default(),
            last_call: all.last_call,
            anchor: None,
            last_state: None,
            rendered: None,
            pending: None,
            broken: false,
        };
        for step in steps.into_values() {
            live.state.insert_step(step);
        }
        let audience = live.audience_at(events.last().map_or(info.created_ms, |e| e.ts_ms));
        for e in events {
            live.bytes += weight(&e);
            live.state.push(e, &audience);
        }
        Ok(Some(live))
    }

    /// The seq of the last event held (written or not).
    pub fn last_seq(&self) -> Seq {
        self.state.last_seq()
    }

    /// Gives the calls of new events their log ids, as reading them from a client's history
    /// would ([`Ledger::fresh_id`]): a model that repeats an id (`call_0` every turn) gets an
    /// alias, never a refused write. `prefix` goes before each id first (Loom's own hidden
    /// calls take one, so that their ids never shift the aliases of the calls a client sees).
    pub fn alias_calls(&self, events: &mut [NewEvent], prefix: &str) {
        let mut taken: Vec<String> = Vec::new();
        for e in events {
            if let loom_core::EventBody::Assistant { tool_calls, .. } = &mut e.body {
                for call in tool_calls {
                    let id = self
                        .ledger
                        .fresh_id(&format!("{prefix}{}", call.id), &taken);
                    call.id = id.clone();
                    taken.push(id);
                }
            }
        }
    }

    /// Points each result in `events` that names a call the log answered already at the
    /// alias of that call still waiting for its result, if there is one
    /// ([`loom_core::Ledger::answered_id`]).
    pub fn answer_aliases(&self, events: &mut [NewEvent]) {
        for e in events {
            if let loom_core::EventBody::ToolResult { call_id, .. } = &mut e.body {
                if let Some(alias) = self.ledger.answered_id(call_id) {
                    *call_id = alias;
                }
            }
        }
    }

    /// The log as held (written or not), in seq order.
    pub fn events(&self) -> &[Event] {
        self.state.events()
    }

    /// The steps derived so far, by call id.
    pub fn steps(&self) -> &StepIndex {
        self.state.steps()
    }

    /// The session's summaries, oldest version first.
    pub fn summaries(&self) -> &[Summary] {
        &self.summaries
    }

    /// The newest receipt.
    pub fn last_call(&self) -> Option<&ModelCall> {
        self.last_call.as_ref()
    }

    /// How much more than Loom's estimate the provider counts this session's requests: its
    /// reported input over the estimate of the newest rendered call, rounded up to the next
    /// sixteenth and never lowered while the session is held (a factor that moved with every
    /// call would change the policy, and with it the cached prefix, on every call). `None` while
    /// the provider has never counted more than the estimate.
    pub fn anchor(&mut self) -> Option<f64> {
        let seen = self
            .last_call
            .as_ref()
            .and_then(crate::engine::reported_ratio)
            .filter(|f| *f > 1.0)
            .map(|f| (f * 16.0).ceil() / 16.0);
        self.anchor = match (self.anchor, seen) {
            (Some(held), Some(seen)) => Some(held.max(seen)),
            (held, seen) => held.or(seen),
        };
        self.anchor
    }

    /// Takes the compaction state of the newest receipt when this state rendered it; `None`
    /// when the newest receipt came from elsewhere (another writer, an older process), which
    /// the caller then reads from the receipt itself.
    pub fn take_state(&mut self) -> Option<Continued> {
        let id = self.last_call.as_ref()?.id;
        match self.last_state.take() {
            Some((held, state)) if held == id => Some(state),
            _ => None,
        }
    }

    /// Holds the state of a render whose receipt the next [`Live::commit`] writes (matched by
    /// the receipt's `at_seq` and `created_ms`), so the render after it need not parse it back.
    pub fn rendered(&mut self, state: Option<Continued>) {
        self.rendered = state;
    }

    /// The session's id.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// The memory this state is estimated to hold, in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes + self.counts.len() * crate::counts::ENTRY_BYTES
    }

    /// Who the session's renders are for, at `now_ms`.
    pub fn audience_at(&self, now_ms: i64) -> Audience {
        Audience {
            agent: Some(self.agent.clone()),
            now_ms,
        }
    }

    /// The render's clock: the time of the last event (so renders repeat).
    pub fn now_ms(&self) -> i64 {
        self.state.last_ms().unwrap_or(self.created_ms)
    }

    /// What a render reads ([`SessionState::view`]) at `audience`, with the session's token
    /// counts.
    pub fn parts(&mut self, audience: &Audience) -> (View<'_>, &mut Counts) {
        (self.state.view(audience), &mut self.counts)
    }

    /// Catches up with the store: the events another process appended since, and the summaries
    /// and receipt when newer ones exist (one read).
    pub fn refresh(&mut self, b: Backend<'_>) -> Result<()> {
        let known = Known {
            seq: self.last_seq(),
            summary_version: self.summaries.last().map_or(0, |s| s.version),
            call: self.last_call.as_ref().map_or(0, |c| c.id),
        };
        let new = b.store.catch_up(&self.id, known)?;
        if let Some(summaries) = new.summaries {
            self.summaries = summaries;
        }
        if new.last_call.is_some() {
            self.last_call = new.last_call;
            self.last_state = None;
        }
        if !new.events.is_empty() {
            for e in &new.events {
                let _ = self.ledger.apply(e.seq, &e.body);
            }
            let off = Offloader::new(b.store, b.blobs, b.reduce);
            let steps = off.derive_known(&self.id, self.state.ingest(), &new.events)?;
            self.absorb(steps, new.events);
        }
        Ok(())
    }

    /// Takes `new` as the log's next events, to be written with the call's receipt by
    /// [`Live::commit`]: they are checked against the tool-call ledger (a batch that breaks it
    /// is refused whole, as the store refuses it), their steps derived and their large outputs
    /// stored, and the state holds them from now on.
    pub fn stage(&mut self, b: Backend<'_>, new: &[NewEvent]) -> Result<()> {
        if new.is_empty() {
            return Ok(());
        }
        let first = self.last_seq() + 1;
        let touched = loom_store::touched_calls(new);
        let states = |ledger: &Ledger| {
            Ledger::from_states(
                touched
                    .iter()
                    .filter_map(|id| ledger.get(id).map(|s| ((*id).to_owned(), s.clone()))),
            )
        };
        let mut check = states(&self.ledger);
        for (index, e) in new.iter().enumerate() {
            let seq = first + index as Seq;
            check
                .apply(seq, &e.body)
                .map_err(|source| StoreError::InvalidEvent {
                    session: self.id.clone(),
                    index,
                    seq,
                    source,
                })?;
        }
        let before = states(&self.ledger);
        let pending = self.pending.get_or_insert_with(|| Pending {
            after: first - 1,
            calls: Ledger::new(),
            events: Vec::new(),
            writes: StagedWrites::default(),
        });
        // The states before the turn: a call named earlier in it keeps the state it had then.
        if before.iter().any(|(id, _)| pending.calls.get(id).is_none()) {
            let mut merged: Vec<(String, CallState)> = before
                .iter()
                .map(|(id, state)| (id.to_owned(), state.clone()))
                .collect();
            merged.extend(
                pending
                    .calls
                    .iter()
                    .map(|(id, state)| (id.to_owned(), state.clone())),
            );
            // `from_states` keeps the last of an id: the earlier state wins.
            pending.calls = Ledger::from_states(merged);
        }
        for (index, e) in new.iter().enumerate() {
            let _ = self.ledger.apply(first + index as Seq, &e.body);
        }
        pending.events.extend_from_slice(new);
        let events: Vec<Event> = new
            .iter()
            .zip(first..)
            .map(|(e, seq)| Event {
                seq,
                ts_ms: e.ts_ms,
                body: e.body.clone(),
            })
            .collect();
        let off = Offloader::new(b.store, b.blobs, b.reduce);
        let derived = off.derive_staged(&self.id, self.state.ingest(), &events);
        let (steps, writes) = match derived {
            Ok(derived) => derived,
            Err(e) => {
                // The ledger and the ingest have moved on: this state is reloaded.
                self.broken = true;
                return Err(e.into());
            }
        };
        if let Some(pending) = &mut self.pending {
            pending.writes.steps.extend(writes.steps);
            pending.writes.aliases.extend(writes.aliases);
        }
        self.absorb(steps, events);
        Ok(())
    }

    /// Appends `new` to the log now (one write) and to this state.
    pub fn append(&mut self, b: Backend<'_>, new: &[NewEvent]) -> Result<()> {
        self.stage(b, new)?;
        self.commit(b, None, None)?;
        Ok(())
    }

    /// Writes the call's turn: the events [`Live::stage`] took, what was derived from them, the
    /// receipt and the usage, in one write. A turn with nothing to write writes nothing. On an
    /// error (the log moved on: [`StoreError::Moved`]) nothing was written and this state is
    /// loaded again on its next use.
    pub fn commit(
        &mut self,
        b: Backend<'_>,
        receipt: Option<&NewModelCall>,
        usage: Option<(u64, &Usage)>,
    ) -> Result<Option<u64>, StoreError> {
        self.commit_cow(b, receipt.map(Cow::Borrowed), usage)
    }

    /// [`Live::commit`] of a receipt the caller hands over, which this state then keeps as the
    /// newest without copying it.
    pub fn commit_owned(
        &mut self,
        b: Backend<'_>,
        receipt: Option<NewModelCall>,
        usage: Option<(u64, &Usage)>,
    ) -> Result<Option<u64>, StoreError> {
        self.commit_cow(b, receipt.map(Cow::Owned), usage)
    }

    fn commit_cow(
        &mut self,
        b: Backend<'_>,
        receipt: Option<Cow<'_, NewModelCall>>,
        usage: Option<(u64, &Usage)>,
    ) -> Result<Option<u64>, StoreError> {
        let Some(pending) = self.pending.take() else {
            if receipt.is_none() && usage.is_none() {
                self.rendered = None;
                return Ok(None);
            }
            return self.write(b, None, receipt, usage);
        };
        self.write(b, Some(pending), receipt, usage)
    }

    /// Drops the events [`Live::stage`] took since the last commit (a turn the caller will
    /// stage again differently), reading this state again from the store; nothing was written.
    pub fn unstage(&mut self, b: Backend<'_>) -> Result<()> {
        if self.pending.is_none() && !self.broken {
            return Ok(());
        }
        *self = Self::load(b, &self.id)?.ok_or_else(|| {
            crate::error::SessionError::from(StoreError::SessionNotFound(self.id.clone()))
        })?;
        Ok(())
    }

    /// Marks this state as not to be trusted (a turn that failed or was abandoned): it is read
    /// again on its next use.
    pub fn discard(&mut self) {
        self.broken = true;
    }

    fn write(
        &mut self,
        b: Backend<'_>,
        pending: Option<Pending>,
        receipt: Option<Cow<'_, NewModelCall>>,
        usage: Option<(u64, &Usage)>,
    ) -> Result<Option<u64>, StoreError> {
        let rendered = self.rendered.take();
        let none = Ledger::new();
        let turn = match &pending {
            Some(p) => Turn {
                session: &self.id,
                after: p.after,
                calls: &p.calls,
                events: &p.events,
                steps: &p.writes.steps,
                aliases: &p.writes.aliases,
                receipt: receipt.as_deref(),
                usage,
            },
            None => Turn {
                session: &self.id,
                after: self.last_seq(),
                calls: &none,
                events: &[],
                steps: &[],
                aliases: &[],
                receipt: receipt.as_deref(),
                usage,
            },
        };
        match b.store.write_turn(&turn) {
            Ok(written) => {
                if let (Some(id), Some(receipt)) = (written.call, receipt) {
                    self.last_state = rendered
                        .filter(|r| {
                            r.at_seq == receipt.at_seq && r.created_ms == receipt.created_ms
                        })
                        .map(|r| (id, r));
                    self.last_call = Some(ModelCall {
                        id,
                        call: receipt.into_owned(),
                        usage: None,
                    });
                }
                if let (Some((call, usage)), Some(last)) = (usage, &mut self.last_call) {
                    if last.id == call {
                        last.usage = Some(*usage);
                    }
                }
                Ok(written.call)
            }
            Err(e) => {
                self.broken = pending.is_some();
                Err(e)
            }
        }
    }

    fn absorb(&mut self, steps: Vec<Step>, events: Vec<Event>) {
        for step in steps {
            self.state.insert_step(step);
        }
        let audience = self.audience_at(events.last().map_or(self.now_ms(), |e| e.ts_ms));
        for e in events {
            self.bytes += weight(&e);
            self.state.push(e, &audience);
        }
    }
}

/// The live sessions of a server, least recently used dropped past a bound on their number and
/// one on their estimated bytes.
#[derive(Debug)]
pub struct LiveSessions {
    capacity: usize,
    byte_limit: usize,
    inner: Mutex<Lru<SessionId, Live>>,
}

/// A live session, locked for one call.
pub type LiveGuard<'a> = MutexGuard<'a, Live>;

impl LiveSessions {
    /// A cache of at most `capacity` sessions.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            byte_limit: usize::MAX,
            inner: Mutex::new(Lru::default()),
        }
    }

    /// The same cache, also bounded to `bytes` of estimated state.
    pub fn with_byte_limit(mut self, bytes: usize) -> Self {
        self.byte_limit = bytes.max(1);
        self
    }

    /// The estimated bytes the live sessions hold (as last measured).
    pub fn bytes(&self) -> usize {
        self.lock().bytes()
    }

    /// How many sessions are live.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether session `id` is live (without touching its place in the order).
    pub fn contains(&self, id: &SessionId) -> bool {
        self.lock().contains_key(id)
    }

    /// Drops session `id`'s state, if it is live (the session was deleted).
    pub fn forget(&self, id: &SessionId) {
        self.lock().remove(id);
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Lru<SessionId, Live>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live session `id`, loaded from the store when it is not cached, and caught up with
    /// the store; `None` when the session does not exist.
    pub fn get(&self, b: Backend<'_>, id: &SessionId) -> Result<Option<Arc<Mutex<Live>>>> {
        let cached = self.lock().touch(id);
        // A state whose turn was never written (its call failed between the two) holds events
        // the log may not: it is dropped and read again.
        let cached = cached.filter(|live| {
            let state = lock_live(live);
            !(state.broken || state.pending.is_some())
        });
        if let Some(live) = cached {
            let bytes = {
                let mut state = lock_live(&live);
                state.refresh(b)?;
                state.bytes()
            };
            let mut lru = self.lock();
            lru.measured(id, bytes);
            lru.evict(self.capacity, self.byte_limit);
            return Ok(Some(live));
        }
        let Some(live) = Live::load(b, id)? else {
            return Ok(None);
        };
        let bytes = live.bytes();
        let live = Arc::new(Mutex::new(live));
        let mut lru = self.lock();
        // Another call may have loaded it meanwhile: keep the first, so both use one state
        // (unless it is one being dropped for a failed turn).
        if let Some(existing) = lru.peek(id) {
            // Never waits for a session's lock while holding the cache's: one in use is kept.
            let usable = match existing.try_lock() {
                Ok(state) => !(state.broken || state.pending.is_some()),
                Err(std::sync::TryLockError::Poisoned(state)) => {
                    let state = state.into_inner();
                    !(state.broken || state.pending.is_some())
                }
                Err(std::sync::TryLockError::WouldBlock) => true,
            };
            if usable {
                return Ok(Some(Arc::clone(existing)));
            }
        }
        lru.insert(id.clone(), Arc::clone(&live), bytes);
        lru.evict(self.capacity, self.byte_limit);
        Ok(Some(live))
    }
}

/// Locks a live session (a panic in another call leaves a state that a refresh repairs).
pub fn lock_live(live: &Mutex<Live>) -> MutexGuard<'_, Live> {
    live.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A store, blobs, settings and cache in memory: for tests of live sessions and of what builds
/// on them (the proxy's sync), and for tools that need a session engine without a database.
#[derive(Debug)]
pub struct MemoryBackend {
    /// The log.
    pub store: loom_store::MemoryStore,
    blobs: loom_store::MemoryBlobStore,
    reduce: ReduceConfig,
    /// The cache of live sessions.
    pub live: LiveSessions,
}

impl MemoryBackend {
    /// Empty, caching at most `capacity` live sessions.
    pub fn new(capacity: usize) -> Self {
        Self {
            store: loom_store::MemoryStore::new(),
            blobs: loom_store::MemoryBlobStore::new(),
            reduce: ReduceConfig::default(),
            live: LiveSessions::new(capacity),
        }
    }

    /// The backend over it.
    pub fn backend(&self) -> Backend<'_> {
        Backend {
            store: &self.store,
            blobs: &self.blobs,
            reduce: &self.reduce,
            live: &self.live,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loom_core::{EventBody, MessageContent};
    use loom_store::NewSession;

    fn user(text: &str) -> NewEvent {
        NewEvent::new(
            5,
            EventBody::User {
                content: MessageContent::from(text),
                name: None,
            },
        )
    }

    #[test]
    fn a_render_continues_from_the_state_its_receipt_records() {
        use crate::engine::RenderSpec;
        use loom_core::render::Format;
        let t = MemoryBackend::new(4);
        let b = t.backend();
        let engine = crate::Engine::built_in().unwrap();
        let a = SessionId::new("a").unwrap();
        t.store
            .create_session(
                &NewSession {
                    id: a.clone(),
                    agent: AgentId::new("x").unwrap(),
                    parent: None,
                    created_ms: 1,
                },
                &[user("the task")],
            )
            .unwrap();
        let spec = RenderSpec {
            model: "gpt-4o".into(),
            budget: Some(1_500),
            format: Format::OPENAI_CHAT,
            tools: Vec::new(),
            always_record: true,
            injections: Vec::new(),
            limits: Default::default(),
            recall: None,
        };
        let mut points = 0;
        for i in 0..60 {
            t.store
                .append(
                    &a,
                    &[user(&format!("message {i}: {}", "words ".repeat(30)))],
                )
                .unwrap();
            let out = engine.render_session(b, &a, &spec).unwrap().unwrap();
            points = out.receipt.points;
            let live = b.live.get(b, &a).unwrap().unwrap();
            let state = lock_live(&live);
            // What the next render takes is what the stored receipt records.
            let (id, held) = state
                .last_state
                .clone()
                .expect("the rendered state is kept");
            let last = state.last_call.clone().unwrap();
            assert_eq!(id, last.id);
            let stored: CompactionState =
                serde_json::from_value(last.call.receipt["state"].clone()).unwrap();
            assert_eq!(held.state, stored, "render {i}");
            assert_eq!(held.at_seq, last.call.at_seq);
            let from_store = t.store.last_model_call(&a).unwrap().unwrap();
            assert_eq!(
                from_store, last,
                "the store reads back what the session holds"
            );
        }
        assert!(
            points > 0,
            "the session compacted, so its state is not the default"
        );
        // A receipt another writer recorded is read from the store, not taken from the state.
        t.store
            .record_model_call(&NewModelCall {
                session: a.clone(),
                at_seq: 1,
                created_ms: 2,
                receipt: serde_json::json!({"observe": {}}),
            })
            .unwrap();
        let live = b.live.get(b, &a).unwrap().unwrap();
        assert!(lock_live(&live).take_state().is_none());
    }
}
