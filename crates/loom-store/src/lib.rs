//! Loom's storage: the event log and the records derived from it, behind one trait.
//!
//! [`Store`] is implemented by every backend ([`MemoryStore`] for tests and embedding,
//! [`SqliteStore`], the embedded default, and [`PgStore`], for many servers sharing one
//! PostgreSQL) and all of them pass the one conformance suite in `tests/suite/`. Large and binary
//! outputs live in a [`BlobStore`], content-addressed and integrity-checked on every read. A
//! database named by the user (`--db`) is opened with [`open`], which picks the backend. The API keys `loom serve` authenticates clients with live in
//! the same store as the log ([`ApiKey`]), so that every server sharing a database sees them.

mod blob;
mod calls;
mod error;
mod keys;
mod memory;
mod offload;
mod open;
mod postgres;
pub mod recall;
mod records;
mod rules;
mod sqlite;
mod turn;
mod validate;
mod workspace;

pub use self::postgres::{postgres_config, PgBlobStore, PgStore};
pub use blob::{parse_blob_ref, BlobAlias, BlobInfo, BlobStore, FsBlobStore, MemoryBlobStore};
pub use calls::touched_calls;
pub use error::{Result, StoreError};
pub use keys::{hash_api_key, new_api_key, ApiKey, NewApiKey, ProxyMode, TenantId};
pub use memory::MemoryStore;
pub use offload::{OffloadReport, Offloader, Resolution, StagedWrites};
pub use open::{open, Database, Opened};
pub use records::{
    CallStatus, ModelCall, NewModelCall, NewSession, NewSummary, StepRecord, Summary,
    ToolCallRecord, Usage,
};
pub use sqlite::SqliteStore;
pub use turn::{CatchUp, Known, Turn, Written};
pub use workspace::Workspace;

use std::ops::RangeInclusive;

use loom_core::{BlobRef, Event, NewEvent, Seq, SessionId, SessionInfo};

/// API keys: the concern of `loom serve`'s authentication, apart from the log. Every [`Store`]
/// is one too (its keys live in the same database), and a caller that only checks keys needs
/// no more than this.
pub trait KeyStore: Send + Sync {
    /// Stores a new API key; returns it as stored (not revoked).
    ///
    /// A key whose id or hash is already stored is refused with [`StoreError::KeyExists`], a
    /// malformed id or hash (see [`NewApiKey`]) with [`StoreError::InvalidKey`]; either way
    /// nothing is written.
    fn create_key(&self, key: &NewApiKey) -> Result<ApiKey>;

    /// The key whose secret hashes to `hash` ([`hash_api_key`]), if any.
    ///
    /// Revoked keys are returned too, with `revoked_ms` set: refusing them is the caller's job,
    /// and it can then say why. This is on the path of every authenticated request, so backends
    /// answer it with one indexed lookup.
    fn key_by_hash(&self, hash: &str) -> Result<Option<ApiKey>>;

    /// Every key, revoked ones included, ordered by creation time, then id.
    fn keys(&self) -> Result<Vec<ApiKey>>;

    /// Revokes the key with this id; returns it as stored.
    ///
    /// Revoking a revoked key changes nothing (its first `revoked_ms` stays), so a retry is
    /// harmless. An unknown id is [`StoreError::KeyNotFound`].
    fn revoke_key(&self, id: &str, now_ms: i64) -> Result<ApiKey>;
}

/// The log and its derived records.
///
/// Every method is atomic: it either takes full effect or none, so bad input never leaves a
/// partial change behind. Appends are validated against the session's tool-call ledger (no orphan
/// results, no duplicate call ids, no stale results) before anything is written. An `Ok` from a
/// write means the write is durable.
pub trait Store: KeyStore + Send + Sync + std::fmt::Debug {
    /// Creates a session and appends its first events in one transaction.
    ///
    /// Fails with [`StoreError::SessionExists`] if the id is taken.
    fn create_session(&self, session: &NewSession, events: &[NewEvent]) -> Result<SessionInfo>;

    /// Creates several sessions with their first events, for bulk imports.
    ///
    /// Each session is atomic, as with [`Store::create_session`]. A backend may commit the whole
    /// batch together (SQLite does: one transaction, one sync instead of one per session), in
    /// which case an error creates none of them; otherwise the sessions before the failing one
    /// may remain. The session that fails is never created.
    fn create_sessions(
        &self,
        sessions: &[(NewSession, Vec<NewEvent>)],
    ) -> Result<Vec<SessionInfo>> {
        sessions
            .iter()
            .map(|(session, events)| self.create_session(session, events))
            .collect()
    }

    /// The session, if it exists.
    fn session(&self, id: &SessionId) -> Result<Option<SessionInfo>>;

    /// Every session, ordered by id.
    fn sessions(&self) -> Result<Vec<SessionInfo>>;

    /// Appends events to an existing session; returns the seqs they were given.
    fn append(&self, session: &SessionId, events: &[NewEvent]) -> Result<RangeInclusive<Seq>>;

    /// Deletes session `id` and everything recorded for it (its log, tool calls, summaries,
    /// model calls, steps and aliases), in one transaction; `false` when there was no such
    /// session. Blobs stay: they are content-addressed and may be another session's too.
    /// Sessions spawned from it keep their own logs (and its id as their parent).
    fn delete_session(&self, id: &SessionId) -> Result<bool>;

    /// Appends a model's reply and records the usage the provider reported for the call that
    /// produced it (`(call id, usage)`): both or neither. SQLite commits them together, so the
    /// reply's path pays one durable commit instead of two; the default checks the report
    /// before it appends.
    fn append_reply(
        &self,
        session: &SessionId,
        events: &[NewEvent],
        usage: Option<(u64, &Usage)>,
    ) -> Result<RangeInclusive<Seq>> {
        let Some((call, usage)) = usage else {
            return self.append(session, events);
        };
        let refused = |reason: &str| StoreError::InvalidRecord {
            session: session.clone(),
            record: format!("model call {call}"),
            reason: reason.to_owned(),
        };
        let known = self
            .model_calls(session)?
            .into_iter()
            .find(|c| c.id == call)
            .ok_or_else(|| StoreError::ModelCallNotFound {
                session: session.clone(),
                call,
                reason: "the session has no model call with this id".into(),
            })?;
        if known
            .usage
            .is_some_and(|stored| !stored.same_figures(usage))
        {
            return Err(StoreError::Conflict {
                session: session.clone(),
                record: format!("model call {call}"),
                reason: "its usage was already reported with other figures".into(),
            });
        }
        if usage
            .cached_input_tokens
            .is_some_and(|c| c > usage.input_tokens)
        {
            return Err(refused("cached input tokens exceed the input tokens"));
        }
        let seqs = self.append(session, events)?;
        self.report_usage(session, call, usage)?;
        Ok(seqs)
    }

    /// Events whose seq lies in `range` (clamped to the log), in seq order.
    fn read(&self, session: &SessionId, range: RangeInclusive<Seq>) -> Result<Vec<Event>>;

    /// The last seq of the session (0 when it has no events).
    fn latest_seq(&self, session: &SessionId) -> Result<Seq>;

    /// Every tool call of the session with its status, ordered by the seq that made it.
    fn tool_calls(&self, session: &SessionId) -> Result<Vec<ToolCallRecord>>;

    /// Marks a pending call as expired; a call in any other state is an error.
    fn expire_tool_call(&self, session: &SessionId, call_id: &str) -> Result<()>;

    /// Stores a summary of `[from_seq, to_seq]`; the store assigns the next version.
    fn put_summary(&self, summary: &NewSummary) -> Result<Summary>;

    /// Every summary of the session, oldest version first.
    fn summaries(&self, session: &SessionId) -> Result<Vec<Summary>>;

    /// Records a model-call receipt; returns its id (1-based, per session).
    fn record_model_call(&self, call: &NewModelCall) -> Result<ModelCall>;

    /// [`Store::record_model_call`] for a caller that needs only the id (a turn's write): a
    /// backend that would copy the stored record to return it can skip the copy.
    fn record_model_call_id(&self, call: &NewModelCall) -> Result<u64> {
        Ok(self.record_model_call(call)?.id)
    }

    /// What changed in the session since `known`: the events after its length, the summaries
    /// when a newer one exists, the newest receipt when it is not the known one (see
    /// [`turn`](crate::Turn)). [`StoreError::SessionNotFound`] when the session does not exist.
    fn catch_up(&self, session: &SessionId, known: Known) -> Result<CatchUp> {
        turn::catch_up(self, session, known)
    }

    /// Writes one call's turn: its events from seq `turn.after + 1` (checked against the
    /// ledger), its steps and aliases, its receipt at the end of its events, and the usage it
    /// reports. Refused with [`StoreError::Moved`] when the log no longer holds `turn.after`
    /// events, or holds other states for the calls the events name than `turn.calls`; any other
    /// refusal is an error that names the record. A backend that writes it in one transaction
    /// writes all or nothing; the default writes the events (with the usage) first, then the
    /// aliases, steps and receipt, each atomic.
    fn write_turn(&self, turn: &Turn<'_>) -> Result<Written> {
        turn::write_turn(self, turn)
    }

    /// Every receipt of the session, in the order they were recorded.
    fn model_calls(&self, session: &SessionId) -> Result<Vec<ModelCall>>;

    /// The receipts of the session numbered above `after`, in order: what a reader that holds
    /// the first `after` (and their usage) has yet to read. Backends answer it without reading
    /// the others.
    fn model_calls_after(&self, session: &SessionId, after: u64) -> Result<Vec<ModelCall>> {
        let mut calls = self.model_calls(session)?;
        calls.retain(|c| c.id > after);
        Ok(calls)
    }

    /// The last receipt of the session, if any: what a render continues from. Backends answer
    /// it without reading every receipt.
    fn last_model_call(&self, session: &SessionId) -> Result<Option<ModelCall>> {
        Ok(self.model_calls(session)?.pop())
    }

    /// Records what the provider reported model call `call` of the session used; returns the
    /// call as stored.
    ///
    /// A call holds one usage for good. Reporting the same figures again is accepted and changes
    /// nothing (the stored usage, with its first `reported_ms`, is returned), so a caller may
    /// retry after a lost reply; different figures are refused with
    /// [`StoreError::InvalidRecord`]. An unknown session or call id is
    /// [`StoreError::ModelCallNotFound`]; cached input tokens above the input tokens are
    /// [`StoreError::InvalidRecord`].
    fn report_usage(&self, session: &SessionId, call: u64, usage: &Usage) -> Result<ModelCall>;

    /// Inserts or replaces steps (keyed by session and step id).
    ///
    /// Steps (like aliases) are derived from the log and can be derived again, so a backend may
    /// return before they are durable, provided they become durable no later than any write
    /// that follows them.
    fn put_steps(&self, session: &SessionId, steps: &[StepRecord]) -> Result<()>;

    /// Every step of the session, ordered by the seq of its result.
    fn steps(&self, session: &SessionId) -> Result<Vec<StepRecord>>;

    /// The steps whose result came after `after` (a seq), ordered as [`Store::steps`]: what a
    /// reader that has seen the log up to `after` has not seen yet. The default filters
    /// [`Store::steps`]; a backend with an index reads only the range.
    fn steps_after(&self, session: &SessionId, after: Seq) -> Result<Vec<StepRecord>> {
        let mut steps = self.steps(session)?;
        steps.retain(|s| s.result_seq > after);
        Ok(steps)
    }

    /// Names a blob with a human-readable alias within the session (`outputs/search_001.json`).
    ///
    /// An alias, once set, points at one blob forever: setting it again to the same blob is a
    /// no-op, to another blob an error.
    fn put_alias(&self, session: &SessionId, alias: &BlobAlias, blob: &BlobRef) -> Result<()>;

    /// The blob an alias points at, if it is set.
    fn resolve_alias(&self, session: &SessionId, alias: &BlobAlias) -> Result<Option<BlobRef>>;
}
