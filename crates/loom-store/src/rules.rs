//! The log's rules, written once for every SQL backend: what a write must find, check and leave
//! behind (a session's row, the ledger of the calls a batch names, the checks of `validate`,
//! numbering, first-report-wins usage, aliases that never move), over [`LogRows`], the rows a
//! backend reads and writes inside one of its write transactions.
//!
//! A backend keeps only its transactions and its SQL. Where it can do a common case in fewer
//! round trips than the general rule (PostgreSQL's appends that name no tool call, its first
//! report of a usage), it offers a shortcut the rules take when the case allows it; a backend
//! without one answers `None` and the general rule runs.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use loom_core::{BlobRef, EventBody, Ledger, NewEvent, Seq, SessionId, SessionInfo};

use crate::calls::touched_calls;
use crate::records::{ModelCall, NewModelCall, NewSession, NewSummary, StepRecord, Summary, Usage};
use crate::{validate, BlobAlias, Result, StoreError};

/// A session's row key and the last seq of its log.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionRow {
    pub(crate) pk: i64,
    pub(crate) last_seq: Seq,
}

/// The rows of the log a backend reads and writes inside one write transaction: rows in, rows
/// out, no rule. Everything it is handed has been checked.
pub(crate) trait LogRows {
    /// Whether [`LogRows::append_plain`] and [`LogRows::report_first`] are shortcuts of this
    /// backend; without them the rules do not check a case twice to try one.
    const SHORTCUTS: bool = false;

    /// The session's row, if it exists.
    fn find_session(&mut self, id: &SessionId) -> Result<Option<SessionRow>>;

    /// The session's row held until the transaction ends, so that other writers to the session
    /// wait for this one (a backend whose write transactions already exclude each other finds it).
    fn lock_session(&mut self, id: &SessionId) -> Result<Option<SessionRow>>;

    /// Inserts a session's row with an empty log; `None` when the id is taken.
    fn insert_session(&mut self, session: &NewSession) -> Result<Option<i64>>;

    /// Deletes the session's row and everything stored for it.
    fn delete_session(&mut self, pk: i64) -> Result<()>;

    /// A ledger holding the stored state of those of `call_ids` that exist.
    fn load_ledger(&mut self, pk: i64, call_ids: &[&str]) -> Result<Ledger>;

    /// Writes the ledger's state of `call_ids` (inserting new calls, updating others).
    fn store_calls(&mut self, pk: i64, ledger: &Ledger, call_ids: &[&str]) -> Result<()>;

    /// Writes checked events from seq `first`, the ledger's state of the calls they name, and
    /// the log's new length.
    fn write_events(
        &mut self,
        pk: i64,
        first: Seq,
        events: &[NewEvent],
        ledger: &Ledger,
    ) -> Result<()>;

    /// Appends checked events that name no tool call, taking the seqs after the log's length as
    /// it is when the write lands, without reading it first; `None` when the backend has no such
    /// shortcut. `Err(SessionNotFound)` when there is no such session.
    fn append_plain(
        &mut self,
        _session: &SessionId,
        _events: &[NewEvent],
    ) -> Result<Option<RangeInclusive<Seq>>> {
        Ok(None)
    }

    /// Refuses a text value the backend cannot store, naming the record and field; anything
    /// else passes.
    fn check_text(
        _session: &SessionId,
        _record: impl FnOnce() -> String,
        _field: &str,
        _value: &str,
    ) -> Result<()> {
        Ok(())
    }

    /// Stores a checked summary under the next version, returned.
    fn insert_summary(&mut self, pk: i64, summary: &NewSummary) -> Result<u32>;

    /// Stores a checked receipt under the next id, returned.
    fn insert_model_call(&mut self, pk: i64, call: &NewModelCall) -> Result<u64>;

    /// A stored receipt, held until the transaction ends.
    fn model_call(&mut self, pk: i64, session: &SessionId, id: u64) -> Result<Option<ModelCall>>;

    /// How many receipts the session has.
    fn count_model_calls(&mut self, pk: i64) -> Result<u64>;

    /// Records a receipt's usage.
    fn set_usage(&mut self, pk: i64, id: u64, usage: &Usage) -> Result<()>;

    /// Records the first report of a checked usage for a receipt that exists and has none, and
    /// returns the receipt; `None` when that is not the case (or the backend has no shortcut).
    fn report_first(
        &mut self,
        _session: &SessionId,
        _call: u64,
        _usage: &Usage,
    ) -> Result<Option<ModelCall>> {
        Ok(None)
    }

    /// Writes checked steps, replacing those with the same id; no two share an id.
    fn upsert_steps(&mut self, pk: i64, steps: &[&StepRecord]) -> Result<()>;

    /// The blob an alias points at, if it is stored.
    fn alias(&mut self, pk: i64, alias: &BlobAlias) -> Result<Option<BlobRef>>;

    /// Stores a new alias.
    fn insert_alias(&mut self, pk: i64, alias: &BlobAlias, blob: &BlobRef) -> Result<()>;
}

fn locked(rows: &mut impl LogRows, session: &SessionId) -> Result<SessionRow> {
    rows.lock_session(session)?
        .ok_or_else(|| StoreError::SessionNotFound(session.clone()))
}

/// Refuses a batch whose call ids or tool names the backend cannot store; the rest of each event
/// is stored as escaped JSON, which holds anything.
pub(crate) fn storable_calls<R: LogRows>(session: &SessionId, events: &[NewEvent]) -> Result<()> {
    for (index, event) in events.iter().enumerate() {
        let record = || format!("event {index} of the batch");
        match &event.body {
            EventBody::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    R::check_text(session, record, "tool call id", &call.id)?;
                    R::check_text(session, record, "tool name", &call.name)?;
                }
            }
            EventBody::ToolResult {
                call_id, tool_name, ..
            } => {
                R::check_text(session, record, "call id", call_id)?;
                R::check_text(session, record, "tool name", tool_name)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Creates a session with its first events, checked as a log of its own.
pub(crate) fn create<R: LogRows>(
    rows: &mut R,
    session: &NewSession,
    events: &[NewEvent],
) -> Result<SessionInfo> {
    // Inserted first: a taken id is the error whatever the events, and a concurrent creator of
    // the same id waits for this one and then sees it. A failed check below rolls it back.
    let Some(pk) = rows.insert_session(session)? else {
        return Err(StoreError::SessionExists(session.id.clone()));
    };
    let mut ledger = Ledger::new();
    validate::events(&session.id, &mut ledger, 1, events)?;
    storable_calls::<R>(&session.id, events)?;
    if !events.is_empty() {
        rows.write_events(pk, 1, events, &ledger)?;
    }
    Ok(SessionInfo {
        id: session.id.clone(),
        agent: session.agent.clone(),
        parent: session.parent.clone(),
        created_ms: session.created_ms,
        event_count: events.len() as u64,
    })
}

/// Deletes a session and everything stored for it; `false` when there was none.
pub(crate) fn delete(rows: &mut impl LogRows, id: &SessionId) -> Result<bool> {
    // The session's row held first, as every writer does: an append in flight finishes before,
    // or finds no session after.
    let Some(SessionRow { pk, .. }) = rows.lock_session(id)? else {
        return Ok(false);
    };
    rows.delete_session(pk)?;
    Ok(true)
}

/// Appends events after checking them against the stored state of the calls they name.
pub(crate) fn append<R: LogRows>(
    rows: &mut R,
    session: &SessionId,
    events: &[NewEvent],
) -> Result<RangeInclusive<Seq>> {
    if events.is_empty() {
        let SessionRow { last_seq, .. } = rows
            .find_session(session)?
            .ok_or_else(|| StoreError::SessionNotFound(session.clone()))?;
        return Ok(last_seq + 1..=last_seq);
    }
    storable_calls::<R>(session, events)?;
    let touched: Vec<&str> = touched_calls(events).into_iter().collect();
    // A batch that names no tool call is checked by its bodies alone, whatever its seqs. One that
    // fails that check takes the general way below, whose error names the seq the event would
    // have had.
    if R::SHORTCUTS
        && touched.is_empty()
        && validate::events(session, &mut Ledger::new(), 1, events).is_ok()
    {
        if let Some(seqs) = rows.append_plain(session, events)? {
            return Ok(seqs);
        }
    }
    // The ledger is read once the session is held: what it says is what the append updates.
    let SessionRow { pk, last_seq } = locked(rows, session)?;
    let mut ledger = rows.load_ledger(pk, &touched)?;
    let first = last_seq + 1;
    validate::events(session, &mut ledger, first, events)?;
    rows.write_events(pk, first, events, &ledger)?;
    Ok(first..=last_seq + events.len() as Seq)
}

/// Marks a pending call expired.
pub(crate) fn expire_call(
    rows: &mut impl LogRows,
    session: &SessionId,
    call_id: &str,
) -> Result<()> {
    let SessionRow { pk, .. } = locked(rows, session)?;
    let mut ledger = rows.load_ledger(pk, &[call_id])?;
    ledger
        .expire(call_id)
        .map_err(|source| StoreError::CallState {
            session: session.clone(),
            source,
        })?;
    rows.store_calls(pk, &ledger, &[call_id])
}

/// Stores a summary of a range of the log under the next version.
pub(crate) fn put_summary<R: LogRows>(rows: &mut R, summary: &NewSummary) -> Result<Summary> {
    let SessionRow { pk, last_seq } = locked(rows, &summary.session)?;
    validate::summary(summary, last_seq)?;
    let record = || "summary".to_owned();
    R::check_text(&summary.session, record, "content", &summary.content)?;
    R::check_text(&summary.session, record, "producer", &summary.producer)?;
    let version = rows.insert_summary(pk, summary)?;
    Ok(Summary {
        version,
        summary: summary.clone(),
    })
}

/// Stores a model call's receipt under the next id.
pub(crate) fn record_model_call(rows: &mut impl LogRows, call: &NewModelCall) -> Result<ModelCall> {
    let SessionRow { pk, last_seq } = locked(rows, &call.session)?;
    validate::model_call(call, last_seq)?;
    let id = rows.insert_model_call(pk, call)?;
    Ok(ModelCall {
        id,
        call: call.clone(),
        usage: None,
    })
}

/// Records a model call's usage: the first report wins, the same report again is accepted, a
/// different one is refused (see [`Store::report_usage`](crate::Store::report_usage)).
pub(crate) fn report_usage<R: LogRows>(
    rows: &mut R,
    session: &SessionId,
    call: u64,
    usage: &Usage,
) -> Result<ModelCall> {
    // The common case, the first report of a call that exists, in the backend's shortcut;
    // anything else (a retry, a conflict, an unknown call, bad figures) takes the general way,
    // which says which it is.
    if R::SHORTCUTS && validate::usage(session, call, None, usage).is_ok() {
        if let Some(stored) = rows.report_first(session, call, usage)? {
            return Ok(stored);
        }
    }
    let SessionRow { pk, .. } = rows
        .find_session(session)?
        .ok_or_else(|| validate::unknown_model_call(session, call, None))?;
    let Some(mut stored) = rows.model_call(pk, session, call)? else {
        let recorded = rows.count_model_calls(pk)?;
        return Err(validate::unknown_model_call(session, call, Some(recorded)));
    };
    if validate::usage(session, call, stored.usage.as_ref(), usage)? {
        rows.set_usage(pk, call, usage)?;
        stored.usage = Some(*usage);
    }
    Ok(stored)
}

/// A reply's events and the usage of the call that produced them, in one transaction.
pub(crate) fn append_reply(
    rows: &mut impl LogRows,
    session: &SessionId,
    events: &[NewEvent],
    usage: Option<(u64, &Usage)>,
) -> Result<RangeInclusive<Seq>> {
    let seqs = append(rows, session, events)?;
    if let Some((call, usage)) = usage {
        report_usage(rows, session, call, usage)?;
    }
    Ok(seqs)
}

/// Stores steps, each checked against its call's result.
pub(crate) fn put_steps<R: LogRows>(
    rows: &mut R,
    session: &SessionId,
    steps: &[StepRecord],
) -> Result<()> {
    let SessionRow { pk, .. } = locked(rows, session)?;
    let call_ids: Vec<&str> = steps.iter().map(|s| s.call_id.as_str()).collect();
    let ledger = rows.load_ledger(pk, &call_ids)?;
    for step in steps {
        validate::step(session, step, &ledger)?;
        R::check_text(session, || format!("step {}", step.id), "id", &step.id)?;
    }
    // Of several steps with one id the last is written, as one upsert after another would
    // leave it.
    let steps = last_of_each(steps, |s| s.id.as_str());
    if steps.is_empty() {
        return Ok(());
    }
    rows.upsert_steps(pk, &steps)
}

/// Stores an alias; the same alias again is accepted, an alias never points somewhere else.
pub(crate) fn put_alias(
    rows: &mut impl LogRows,
    session: &SessionId,
    alias: &BlobAlias,
    blob: &BlobRef,
) -> Result<()> {
    let SessionRow { pk, .. } = locked(rows, session)?;
    match rows.alias(pk, alias)? {
        Some(old) if &old != blob => Err(validate::alias_conflict(session, alias, &old, blob)),
        Some(_) => Ok(()),
        None => rows.insert_alias(pk, alias, blob),
    }
}

/// The items whose id no later item has: of several with one id the last wins, in order.
pub(crate) fn last_of_each<T>(items: &[T], id: impl Fn(&T) -> &str) -> Vec<&T> {
    let mut last: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        last.insert(id(item), i);
    }
    items
        .iter()
        .enumerate()
        .filter(|(i, item)| last.get(id(item)) == Some(i))
        .map(|(_, item)| item)
        .collect()
}
