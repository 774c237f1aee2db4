//! The log's writes: creating sessions, appending events under the session's row lock, and the
//! tool-call ledger those appends are checked against.
//!
//! Every function runs inside the caller's transaction. A write first locks its session's row
//! (`SELECT ... FOR UPDATE`): writers to one session, in any number of processes, take turns, so
//! the seq an append reads is still the last one when it commits, and the ledger it checks is
//! the ledger it updates.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use loom_core::{EventBody, Ledger, NewEvent, Seq, SessionId, SessionInfo};
use postgres::GenericClient;

use super::db::{corrupt, seq_bound, storable, to_json, Db};
use crate::calls::{call_state, parse_status, status_name, touched_calls};
use crate::records::{ModelCall, NewModelCall, NewSession, Usage};
use crate::{validate, Result, StoreError};

/// A session's row key and the last seq of its log.
#[derive(Debug, Clone, Copy)]
pub(super) struct SessionRow {
    pub(super) pk: i64,
    pub(super) last_seq: Seq,
}

fn session_row(pk: i64, last: i64) -> Result<SessionRow> {
    let last_seq = Seq::try_from(last)
        .map_err(|_| corrupt("sessions", format!("negative last_seq {last}")))?;
    Ok(SessionRow { pk, last_seq })
}

/// The session's row, if it exists.
pub(super) fn find_session(
    db: &mut Db<'_, impl GenericClient>,
    id: &SessionId,
) -> Result<Option<SessionRow>> {
    const ACTION: &str = "looking up a session";
    db.query_opt(
        "SELECT pk, last_seq FROM sessions WHERE id = $1",
        &[&id.as_str()],
        ACTION,
    )?
    .map(|row| {
        session_row(
            row.try_get(0).map_err(super::db::backend(ACTION))?,
            row.try_get(1).map_err(super::db::backend(ACTION))?,
        )
    })
    .transpose()
}

/// The session's row, or [`StoreError::SessionNotFound`].
pub(super) fn require_session(
    db: &mut Db<'_, impl GenericClient>,
    id: &SessionId,
) -> Result<SessionRow> {
    find_session(db, id)?.ok_or_else(|| StoreError::SessionNotFound(id.clone()))
}

/// The session's row, locked until the transaction ends; or [`StoreError::SessionNotFound`].
pub(super) fn lock_session(
    db: &mut Db<'_, impl GenericClient>,
    id: &SessionId,
) -> Result<SessionRow> {
    const ACTION: &str = "locking a session";
    let row = db
        .query_opt(
            "SELECT pk, last_seq FROM sessions WHERE id = $1 FOR UPDATE",
            &[&id.as_str()],
            ACTION,
        )?
        .ok_or_else(|| StoreError::SessionNotFound(id.clone()))?;
    session_row(
        row.try_get(0).map_err(super::db::backend(ACTION))?,
        row.try_get(1).map_err(super::db::backend(ACTION))?,
    )
}

/// A ledger holding the stored state of `call_ids` (those that exist), read in one statement.
///
/// Pairing rules only ever look at the calls an event names, so loading just those gives the
/// same verdicts as loading the session's whole ledger, at a cost that does not grow with the log.
pub(super) fn load_ledger<'a>(
    db: &mut Db<'_, impl GenericClient>,
    session_pk: i64,
    call_ids: impl IntoIterator<Item = &'a str>,
) -> Result<Ledger> {
    let ids: Vec<&str> = call_ids.into_iter().collect();
    if ids.is_empty() {
        return Ok(Ledger::new());
    }
    let states = db.all(
        "SELECT call_id, tool_name, call_seq, status, result_seq FROM tool_calls
         WHERE session = $1 AND call_id = ANY($2)",
        &[&session_pk, &ids],
        ("tool_calls", "loading tool calls"),
        |row| {
            let state = call_state(
                row.get(1)?,
                row.seq(2)?,
                parse_status(row.get(3)?)?,
                row.opt_seq(4)?,
            )?;
            Ok((row.get::<String>(0)?, state))
        },
    )?;
    Ok(Ledger::from_states(states))
}

/// The ledger's state of some calls as columns, for one `UNNEST` upsert.
#[derive(Default)]
struct CallRows<'a> {
    ids: Vec<&'a str>,
    tools: Vec<&'a str>,
    call_seqs: Vec<i64>,
    statuses: Vec<&'static str>,
    result_seqs: Vec<Option<i64>>,
}

impl<'a> CallRows<'a> {
    /// The state of each of `call_ids` that the ledger holds.
    fn of(ledger: &'a Ledger, call_ids: impl IntoIterator<Item = &'a str>) -> Self {
        let mut rows = Self::default();
        for call_id in call_ids {
            let Some(state) = ledger.get(call_id) else {
                continue;
            };
            let (status, result_seq) = crate::calls::call_row(state);
            let result_seq = result_seq.map(seq_bound);
            rows.ids.push(call_id);
            rows.tools.push(state.tool_name());
            rows.call_seqs.push(seq_bound(state.call_seq()));
            rows.statuses.push(status_name(status));
            rows.result_seqs.push(result_seq);
        }
        rows
    }
}

/// Writes the ledger's state of `call_ids` (inserting new calls, updating answered ones).
pub(super) fn store_calls<'a>(
    db: &mut Db<'_, impl GenericClient>,
    session_pk: i64,
    ledger: &'a Ledger,
    call_ids: impl IntoIterator<Item = &'a str>,
) -> Result<()> {
    let rows = CallRows::of(ledger, call_ids);
    if rows.ids.is_empty() {
        return Ok(());
    }
    db.execute(
        "INSERT INTO tool_calls (session, call_id, tool_name, call_seq, status, result_seq)
         SELECT $1, * FROM UNNEST($2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::TEXT[], $6::BIGINT[])
         ON CONFLICT (session, call_id)
         DO UPDATE SET status = excluded.status, result_seq = excluded.result_seq",
        &[
            &session_pk,
            &rows.ids,
            &rows.tools,
            &rows.call_seqs,
            &rows.statuses,
            &rows.result_seqs,
        ],
        "storing tool calls",
    )?;
    Ok(())
}

/// Writes already validated events from seq `first`, the touched calls' states, and the new
/// length of the log, in one statement (one round trip).
fn write_events(
    db: &mut Db<'_, impl GenericClient>,
    session_pk: i64,
    first: Seq,
    events: &[NewEvent],
    ledger: &Ledger,
) -> Result<RangeInclusive<Seq>> {
    let last = first + events.len() as Seq - 1;
    let seqs: Vec<i64> = (first..=last).map(seq_bound).collect();
    let times: Vec<i64> = events.iter().map(|e| e.ts_ms).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.body.kind().as_str()).collect();
    let bodies = events
        .iter()
        .map(|e| to_json(&e.body, "events"))
        .collect::<Result<Vec<String>>>()?;
    let calls = CallRows::of(ledger, touched_calls(events));
    // Every part of a statement with data-modifying CTEs runs, whether or not its result is
    // read; an empty array inserts nothing.
    let updated = db.execute(
        "WITH appended AS (
             INSERT INTO events (session, seq, ts_ms, kind, body)
             SELECT $1, * FROM UNNEST($2::BIGINT[], $3::BIGINT[], $4::TEXT[], $5::TEXT[])
         ), calls AS (
             INSERT INTO tool_calls (session, call_id, tool_name, call_seq, status, result_seq)
             SELECT $1, * FROM UNNEST($6::TEXT[], $7::TEXT[], $8::BIGINT[], $9::TEXT[],
                                      $10::BIGINT[])
             ON CONFLICT (session, call_id)
             DO UPDATE SET status = excluded.status, result_seq = excluded.result_seq
         )
         UPDATE sessions SET last_seq = $11 WHERE pk = $1",
        &[
            &session_pk,
            &seqs,
            &times,
            &kinds,
            &bodies,
            &calls.ids,
            &calls.tools,
            &calls.call_seqs,
            &calls.statuses,
            &calls.result_seqs,
            &seq_bound(last),
        ],
        "appending events",
    )?;
    if updated != 1 {
        return Err(corrupt(
            "sessions",
            format!("the session's row (pk {session_pk}) vanished during an append"),
        ));
    }
    Ok(first..=last)
}

/// Creates a session and writes its first events.
pub(super) fn create_in(
    db: &mut Db<'_, impl GenericClient>,
    session: &NewSession,
    events: &[NewEvent],
) -> Result<SessionInfo> {
    // Inserting first, with no error on a taken id, keeps the transaction usable and makes a
    // concurrent creator of the same id wait for this one and then see it.
    let pk: Option<i64> = db
        .query_opt(
            "INSERT INTO sessions (id, agent, parent, created_ms) VALUES ($1, $2, $3, $4)
             ON CONFLICT (id) DO NOTHING RETURNING pk",
            &[
                &session.id.as_str(),
                &session.agent.as_str(),
                &session.parent.as_ref().map(SessionId::as_str),
                &session.created_ms,
            ],
            "creating a session",
        )?
        .map(|row| row.try_get(0))
        .transpose()
        .map_err(super::db::backend("creating a session"))?;
    let Some(pk) = pk else {
        return Err(StoreError::SessionExists(session.id.clone()));
    };
    let mut ledger = Ledger::new();
    validate::events(&session.id, &mut ledger, 1, events)?;
    storable_calls(&session.id, events)?;
    if !events.is_empty() {
        write_events(db, pk, 1, events, &ledger)?;
    }
    Ok(SessionInfo {
        id: session.id.clone(),
        agent: session.agent.clone(),
        parent: session.parent.clone(),
        created_ms: session.created_ms,
        event_count: events.len() as u64,
    })
}

/// Refuses a batch whose call ids or tool names PostgreSQL cannot store (see [`storable`]); the
/// rest of each event is stored as escaped JSON, which can hold anything.
pub(super) fn storable_calls(session: &SessionId, events: &[NewEvent]) -> Result<()> {
    for (index, event) in events.iter().enumerate() {
        let record = || format!("event {index} of the batch");
        match &event.body {
            EventBody::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    storable(session, record, "tool call id", &call.id)?;
                    storable(session, record, "tool name", &call.name)?;
                }
            }
            EventBody::ToolResult {
                call_id, tool_name, ..
            } => {
                storable(session, record, "call id", call_id)?;
                storable(session, record, "tool name", tool_name)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Appends already validated events that touch no tool call, taking the session's lock, its
/// length and the new seqs in the same statement as the write (one round trip).
///
/// The `UPDATE` takes the session's row lock; one that had to wait for another writer reads the
/// row again as that writer committed it (PostgreSQL rechecks an updated row under READ
/// COMMITTED), so the seqs it hands out follow the other writer's. Nothing else the statement
/// reads could be stale: it reads no ledger.
fn append_plain(
    db: &mut Db<'_, impl GenericClient>,
    session: &SessionId,
    events: &[NewEvent],
) -> Result<RangeInclusive<Seq>> {
    const ACTION: &str = "appending events";
    let count = seq_bound(events.len() as Seq);
    let times: Vec<i64> = events.iter().map(|e| e.ts_ms).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.body.kind().as_str()).collect();
    let bodies = events
        .iter()
        .map(|e| to_json(&e.body, "events"))
        .collect::<Result<Vec<String>>>()?;
    let row = db
        .query_opt(
            "WITH locked AS (
                 UPDATE sessions SET last_seq = last_seq + $2 WHERE id = $1
                 RETURNING pk, last_seq
             ), appended AS (
                 INSERT INTO events (session, seq, ts_ms, kind, body)
                 SELECT locked.pk, locked.last_seq - $2 + e.n, e.ts_ms, e.kind, e.body
                 FROM locked,
                      UNNEST($3::BIGINT[], $4::TEXT[], $5::TEXT[])
                          WITH ORDINALITY AS e (ts_ms, kind, body, n)
             )
             SELECT last_seq FROM locked",
            &[&session.as_str(), &count, &times, &kinds, &bodies],
            ACTION,
        )?
        .ok_or_else(|| StoreError::SessionNotFound(session.clone()))?;
    let last: i64 = row.try_get(0).map_err(super::db::backend(ACTION))?;
    let first = Seq::try_from(last)
        .ok()
        .and_then(|last| last.checked_sub(events.len() as Seq))
        .ok_or_else(|| corrupt("sessions", format!("last_seq {last} after an append")))?;
    Ok(first + 1..=first + events.len() as Seq)
}

/// Appends events to a session after checking them against its ledger.
pub(super) fn append_in(
    db: &mut Db<'_, impl GenericClient>,
    session: &SessionId,
    events: &[NewEvent],
) -> Result<RangeInclusive<Seq>> {
    if events.is_empty() {
        let SessionRow { last_seq, .. } = require_session(db, session)?;
        return Ok(last_seq + 1..=last_seq);
    }
    storable_calls(session, events)?;
    let touched = touched_calls(events);
    // A batch that names no tool call is checked by its bodies alone, whatever its seqs: it
    // needs neither the ledger nor the session's length before it is written. A batch that fails
    // that check takes the long way below, whose error names the seq the event would have had.
    if touched.is_empty() && validate::events(session, &mut Ledger::new(), 1, events).is_ok() {
        return append_plain(db, session, events);
    }
    // The ledger is read in a statement of its own, once the lock is held: a statement sees what
    // was committed when it began, and a lock that had to wait began before the writer it waited
    // for committed its calls (read in the locking statement, they would be stale).
    let SessionRow { pk, last_seq } = lock_session(db, session)?;
    let mut ledger = load_ledger(db, pk, touched.iter().copied())?;
    let first = last_seq + 1;
    validate::events(session, &mut ledger, first, events)?;
    write_events(db, pk, first, events, &ledger)
}

/// The columns [`model_call`] decodes.
macro_rules! model_call_columns {
    () => {
        "SELECT id, at_seq, created_ms, receipt, usage FROM model_calls"
    };
}

/// A `model_calls` row selected with [`model_call_columns!`].
pub(super) fn model_call(row: &super::db::Cols<'_>, session: &SessionId) -> Result<ModelCall> {
    let id: i64 = row.get(0)?;
    Ok(ModelCall {
        id: u64::try_from(id).map_err(|_| corrupt("model_calls", format!("negative id {id}")))?,
        call: NewModelCall {
            session: session.clone(),
            at_seq: row.seq(1)?,
            created_ms: row.get(2)?,
            receipt: row.json(3)?,
        },
        usage: row.opt_json(4)?,
    })
}

/// Records a model call's usage (see [`Store::report_usage`](crate::Store::report_usage)),
/// holding the call's row so that two reports of one call take turns.
pub(super) fn report_in(
    db: &mut Db<'_, impl GenericClient>,
    session: &SessionId,
    call: u64,
    usage: &Usage,
) -> Result<ModelCall> {
    // The common case, the first report of a call that exists, in one statement; anything else
    // (a retry, a conflict, an unknown call, bad figures) takes the long way below, which says
    // which it is.
    if validate::usage(session, call, None, usage).is_ok() {
        let text = to_json(usage, "model_calls")?;
        let reported = db.all(
            "UPDATE model_calls m SET usage = $3 FROM sessions s
             WHERE s.id = $1 AND m.session = s.pk AND m.id = $2 AND m.usage IS NULL
             RETURNING m.id, m.at_seq, m.created_ms, m.receipt, m.usage",
            &[&session.as_str(), &seq_bound(call), &text],
            ("model_calls", "recording a model call's usage"),
            |row| model_call(row, session),
        )?;
        if let Some(stored) = reported.into_iter().next() {
            return Ok(stored);
        }
    }
    let SessionRow { pk, .. } = find_session(db, session)?
        .ok_or_else(|| validate::unknown_model_call(session, call, None))?;
    // An id past PostgreSQL's integer range cannot be stored, so clamping it finds nothing.
    let found = db.all(
        concat!(
            model_call_columns!(),
            " WHERE session = $1 AND id = $2 FOR UPDATE"
        ),
        &[&pk, &seq_bound(call)],
        ("model_calls", "reading a model call"),
        |row| model_call(row, session),
    )?;
    let Some(mut stored) = found.into_iter().next() else {
        let recorded: i64 = db
            .query_opt(
                "SELECT COUNT(*) FROM model_calls WHERE session = $1",
                &[&pk],
                "counting model calls",
            )?
            .map(|row| row.try_get(0))
            .transpose()
            .map_err(super::db::backend("counting model calls"))?
            .unwrap_or(0);
        let recorded = u64::try_from(recorded).unwrap_or(0);
        return Err(validate::unknown_model_call(session, call, Some(recorded)));
    };
    if validate::usage(session, call, stored.usage.as_ref(), usage)? {
        let text = to_json(usage, "model_calls")?;
        db.execute(
            "UPDATE model_calls SET usage = $3 WHERE session = $1 AND id = $2",
            &[&pk, &seq_bound(call), &text],
            "recording a model call's usage",
        )?;
        stored.usage = Some(*usage);
    }
    Ok(stored)
}

/// The items whose id no later item has: of several with one id the last wins, in order.
pub(super) fn last_of_each<T>(items: &[T], id: impl Fn(&T) -> &str) -> Vec<&T> {
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
