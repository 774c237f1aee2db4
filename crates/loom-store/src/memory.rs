//! The in-memory backend: the reference implementation of [`Store`], for tests and embedding.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::sync::{Mutex, MutexGuard};

use loom_core::{Event, Ledger, NewEvent, Seq, SessionId, SessionInfo};

use crate::records::{
    ModelCall, NewModelCall, NewSession, NewSummary, StepRecord, Summary, ToolCallRecord, Usage,
};
use crate::{keys, validate, ApiKey, KeyStore, NewApiKey, Result, Store, StoreError};

#[derive(Debug, Default)]
struct SessionData {
    info: Option<SessionInfo>,
    events: Vec<Event>,
    ledger: Ledger,
    summaries: Vec<Summary>,
    model_calls: Vec<StoredCall>,
    steps: BTreeMap<String, StepRecord>,
    aliases: BTreeMap<String, loom_core::BlobRef>,
}

/// A receipt as this store keeps it: its JSON as text (one allocation, however large the receipt
/// and its compaction state grow), read back into a record only when one is asked for — a live
/// session keeps the newest in hand, so a turn's write is the only use most receipts get.
#[derive(Debug, Clone)]
struct StoredCall {
    id: u64,
    session: SessionId,
    at_seq: Seq,
    created_ms: i64,
    receipt: Box<str>,
    usage: Option<Usage>,
}

impl StoredCall {
    fn new(id: u64, call: &NewModelCall) -> Self {
        Self {
            id,
            session: call.session.clone(),
            at_seq: call.at_seq,
            created_ms: call.created_ms,
            receipt: call.receipt.to_string().into_boxed_str(),
            usage: None,
        }
    }

    /// The record. The text was written from a JSON value and parses back to it (floats
    /// included: the crate parses them exactly).
    fn record(&self) -> ModelCall {
        ModelCall {
            id: self.id,
            call: NewModelCall {
                session: self.session.clone(),
                at_seq: self.at_seq,
                created_ms: self.created_ms,
                receipt: serde_json::from_str(&self.receipt).unwrap_or_default(),
            },
            usage: self.usage,
        }
    }
}

/// The API keys, by id, with the hash index every authenticated request goes through.
#[derive(Debug, Default)]
struct KeyTable {
    by_id: BTreeMap<String, ApiKey>,
    /// Hash to id.
    by_hash: BTreeMap<String, String>,
}

/// Nothing is written before the rules have checked it, so a table is never left half-changed.
impl keys::KeyRows for KeyTable {
    fn key(&mut self, id: &str) -> Result<Option<ApiKey>> {
        Ok(self.by_id.get(id).cloned())
    }

    fn insert_key(&mut self, key: &NewApiKey) -> Result<bool> {
        if self.by_id.contains_key(&key.id) || self.by_hash.contains_key(&key.hash) {
            return Ok(false);
        }
        self.by_hash.insert(key.hash.clone(), key.id.clone());
        self.by_id.insert(
            key.id.clone(),
            ApiKey {
                key: key.clone(),
                revoked_ms: None,
            },
        );
        Ok(true)
    }

    fn set_revoked(&mut self, id: &str, now_ms: i64) -> Result<()> {
        if let Some(key) = self.by_id.get_mut(id) {
            key.revoked_ms = Some(now_ms);
        }
        Ok(())
    }
}

/// Keeps everything in process memory; nothing survives the process.
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: Mutex<BTreeMap<SessionId, SessionData>>,
    keys: Mutex<KeyTable>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<SessionId, SessionData>> {
        // A panic while holding the lock cannot leave a half-applied change: every mutation
        // below is computed first and then committed with infallible operations.
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock_keys(&self) -> MutexGuard<'_, KeyTable> {
        // As for sessions: every change to the table is checked before it is made.
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn existing<'a>(
    map: &'a mut BTreeMap<SessionId, SessionData>,
    id: &SessionId,
) -> Result<&'a mut SessionData> {
    map.get_mut(id)
        .ok_or_else(|| StoreError::SessionNotFound(id.clone()))
}

fn append_to(
    data: &mut SessionData,
    session: &SessionId,
    events: &[NewEvent],
) -> Result<RangeInclusive<Seq>> {
    let first = data.events.len() as Seq + 1;
    // Checked against the states of the calls the batch names only (not a copy of the whole
    // ledger, which grows with the session), then applied.
    let mut partial = Ledger::from_states(
        crate::calls::touched_calls(events)
            .into_iter()
            .filter_map(|id| {
                data.ledger
                    .get(id)
                    .map(|state| (id.to_owned(), state.clone()))
            }),
    );
    validate::events(session, &mut partial, first, events)?;
    for (i, e) in events.iter().enumerate() {
        let seq = first + i as Seq;
        // Cannot fail: the batch was just checked against the same states.
        let _ = data.ledger.apply(seq, &e.body);
        data.events.push(Event {
            seq,
            ts_ms: e.ts_ms,
            body: e.body.clone(),
        });
    }
    if let Some(info) = data.info.as_mut() {
        info.event_count = data.events.len() as u64;
    }
    Ok(first..=first + events.len() as Seq - 1)
}

impl Store for MemoryStore {
    fn create_session(&self, session: &NewSession, events: &[NewEvent]) -> Result<SessionInfo> {
        let mut map = self.lock();
        if map.contains_key(&session.id) {
            return Err(StoreError::SessionExists(session.id.clone()));
        }
        let mut data = SessionData {
            info: Some(SessionInfo {
                id: session.id.clone(),
                agent: session.agent.clone(),
                parent: session.parent.clone(),
                created_ms: session.created_ms,
                event_count: 0,
            }),
            ..SessionData::default()
        };
        if !events.is_empty() {
            append_to(&mut data, &session.id, events)?;
        }
        let info = data.info.clone().ok_or_else(|| StoreError::Corrupt {
            table: "sessions",
            reason: "new session lost its info".into(),
        })?;
        map.insert(session.id.clone(), data);
        Ok(info)
    }

    fn delete_session(&self, id: &SessionId) -> Result<bool> {
        Ok(self
            .lock()
            .remove(id)
            .is_some_and(|data| data.info.is_some()))
    }

    fn session(&self, id: &SessionId) -> Result<Option<SessionInfo>> {
        Ok(self.lock().get(id).and_then(|d| d.info.clone()))
    }

    fn sessions(&self) -> Result<Vec<SessionInfo>> {
        Ok(self
            .lock()
            .values()
            .filter_map(|d| d.info.clone())
            .collect())
    }

    fn append(&self, session: &SessionId, events: &[NewEvent]) -> Result<RangeInclusive<Seq>> {
        let mut map = self.lock();
        let data = existing(&mut map, session)?;
        if events.is_empty() {
            let last = data.events.len() as Seq;
            return Ok(last + 1..=last);
        }
        append_to(data, session, events)
    }

    fn read(&self, session: &SessionId, range: RangeInclusive<Seq>) -> Result<Vec<Event>> {
        let mut map = self.lock();
        let data = existing(&mut map, session)?;
        let (from, to) = (*range.start(), *range.end());
        Ok(data
            .events
            .iter()
            .filter(|e| e.seq >= from && e.seq <= to)
            .cloned()
            .collect())
    }

    fn latest_seq(&self, session: &SessionId) -> Result<Seq> {
        let mut map = self.lock();
        Ok(existing(&mut map, session)?.events.len() as Seq)
    }

    fn catch_up(&self, session: &SessionId, known: crate::Known) -> Result<crate::CatchUp> {
        // One lock, and only what changed is copied: a live session catches up on every call,
        // and the newest receipt (with its compaction state) is the largest record there is.
        let mut map = self.lock();
        let data = existing(&mut map, session)?;
        let last_seq = data.events.len() as Seq;
        let from = usize::try_from(known.seq)
            .unwrap_or(usize::MAX)
            .min(data.events.len());
        let newest = data.summaries.last().map_or(0, |s| s.version);
        Ok(crate::CatchUp {
            last_seq,
            events: data.events[from..].to_vec(),
            summaries: (newest != known.summary_version).then(|| data.summaries.clone()),
            last_call: data
                .model_calls
                .last()
                .filter(|c| c.id != known.call)
                .map(StoredCall::record),
        })
    }

    fn tool_calls(&self, session: &SessionId) -> Result<Vec<ToolCallRecord>> {
        let mut map = self.lock();
        let data = existing(&mut map, session)?;
        Ok(validate::call_records(&data.ledger))
    }

    fn expire_tool_call(&self, session: &SessionId, call_id: &str) -> Result<()> {
        let mut map = self.lock();
        let data = existing(&mut map, session)?;
        data.ledger
            .expire(call_id)
            .map_err(|source| StoreError::CallState {
                session: session.clone(),
                source,
            })
    }

    fn put_summary(&self, summary: &NewSummary) -> Result<Summary> {
        let mut map = self.lock();
        let data = existing(&mut map, &summary.session)?;
        validate::summary(summary, data.events.len() as Seq)?;
        let stored = Summary {
            version: data.summaries.len() as u32 + 1,
            summary: summary.clone(),
        };
        data.summaries.push(stored.clone());
        Ok(stored)
    }

    fn summaries(&self, session: &SessionId) -> Result<Vec<Summary>> {
        let mut map = self.lock();
        Ok(existing(&mut map, session)?.summaries.clone())
    }

    fn record_model_call(&self, call: &NewModelCall) -> Result<ModelCall> {
        let mut map = self.lock();
        let data = existing(&mut map, &call.session)?;
        Ok(record_in(data, call)?.record())
    }

    fn record_model_call_id(&self, call: &NewModelCall) -> Result<u64> {
        // A turn's write needs only the id: nothing is read back.
        let mut map = self.lock();
        let data = existing(&mut map, &call.session)?;
        Ok(record_in(data, call)?.id)
    }

    fn model_calls(&self, session: &SessionId) -> Result<Vec<ModelCall>> {
        let mut map = self.lock();
        Ok(existing(&mut map, session)?
            .model_calls
            .iter()
            .map(StoredCall::record)
            .collect())
    }

    fn last_model_call(&self, session: &SessionId) -> Result<Option<ModelCall>> {
        let mut map = self.lock();
        Ok(existing(&mut map, session)?
            .model_calls
            .last()
            .map(StoredCall::record))
    }

    fn report_usage(&self, session: &SessionId, call: u64, usage: &Usage) -> Result<ModelCall> {
        let mut map = self.lock();
        let data = map
            .get_mut(session)
            .ok_or_else(|| validate::unknown_model_call(session, call, None))?;
        let recorded = data.model_calls.len() as u64;
        // Ids are 1-based and contiguous, so call `n` sits at index `n - 1`.
        let stored = call
            .checked_sub(1)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| data.model_calls.get_mut(i))
            .ok_or_else(|| validate::unknown_model_call(session, call, Some(recorded)))?;
        if validate::usage(session, call, stored.usage.as_ref(), usage)? {
            stored.usage = Some(*usage);
        }
        Ok(stored.record())
    }

    fn put_steps(&self, session: &SessionId, steps: &[StepRecord]) -> Result<()> {
        let mut map = self.lock();
        let data = existing(&mut map, session)?;
        for step in steps {
            validate::step(session, step, &data.ledger)?;
        }
        for step in steps {
            data.steps.insert(step.id.clone(), step.clone());
        }
        Ok(())
    }

    fn steps(&self, session: &SessionId) -> Result<Vec<StepRecord>> {
        let mut map = self.lock();
        let mut steps: Vec<StepRecord> = existing(&mut map, session)?
            .steps
            .values()
            .cloned()
            .collect();
        steps.sort_by(|a, b| (a.result_seq, &a.id).cmp(&(b.result_seq, &b.id)));
        Ok(steps)
    }

    fn put_alias(
        &self,
        session: &SessionId,
        alias: &crate::BlobAlias,
        blob: &loom_core::BlobRef,
    ) -> Result<()> {
        let mut map = self.lock();
        let data = existing(&mut map, session)?;
        match data.aliases.get(alias.as_str()) {
            Some(old) if old != blob => Err(validate::alias_conflict(session, alias, old, blob)),
            Some(_) => Ok(()),
            None => {
                data.aliases.insert(alias.as_str().to_owned(), blob.clone());
                Ok(())
            }
        }
    }

    fn resolve_alias(
        &self,
        session: &SessionId,
        alias: &crate::BlobAlias,
    ) -> Result<Option<loom_core::BlobRef>> {
        let mut map = self.lock();
        Ok(existing(&mut map, session)?
            .aliases
            .get(alias.as_str())
            .cloned())
    }
}

impl KeyStore for MemoryStore {
    fn create_key(&self, key: &NewApiKey) -> Result<ApiKey> {
        keys::create(&mut *self.lock_keys(), key)
    }

    fn key_by_hash(&self, hash: &str) -> Result<Option<ApiKey>> {
        let table = self.lock_keys();
        Ok(table
            .by_hash
            .get(hash)
            .and_then(|id| table.by_id.get(id))
            .cloned())
    }

    fn keys(&self) -> Result<Vec<ApiKey>> {
        let mut keys: Vec<ApiKey> = self.lock_keys().by_id.values().cloned().collect();
        keys.sort_by(|a, b| (a.key.created_ms, &a.key.id).cmp(&(b.key.created_ms, &b.key.id)));
        Ok(keys)
    }

    fn revoke_key(&self, id: &str, now_ms: i64) -> Result<ApiKey> {
        keys::revoke(&mut *self.lock_keys(), id, now_ms)
    }
}

/// Checks and keeps a receipt in `data`; the stored record.
fn record_in<'d>(data: &'d mut SessionData, call: &NewModelCall) -> Result<&'d StoredCall> {
    validate::model_call(call, data.events.len() as Seq)?;
    let index = data.model_calls.len();
    data.model_calls
        .push(StoredCall::new(index as u64 + 1, call));
    Ok(&data.model_calls[index])
}
