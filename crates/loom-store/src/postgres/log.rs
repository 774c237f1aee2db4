//! The log's rows in PostgreSQL: what [`LogRows`] asks of a backend, as SQL in the caller's
//! transaction, most of it one statement (one round trip) per step. The rules that decide what
//! may be written are `crate::rules`.
//!
//! A write holds its session's row (`SELECT ... FOR UPDATE`): writers to one session, in any
//! number of processes, take turns, so the seq an append reads is still the last one when it
//! commits, and the ledger it checks is the ledger it updates.

use std::ops::RangeInclusive;

use loom_core::{BlobRef, Ledger, NewEvent, Seq, SessionId};
use postgres::GenericClient;

use super::db::{backend, corrupt, seq_bound, storable, to_json, Db};
use crate::calls::{call_state, parse_status, status_name, touched_calls};
use crate::records::{ModelCall, NewModelCall, NewSession, NewSummary, StepRecord, Usage};
use crate::rules::{LogRows, SessionRow};
use crate::{BlobAlias, Result, StoreError};

/// The row `sql` (selecting `pk, last_seq` by the session's id) finds, if any.
fn session_row(
    db: &mut Db<'_, impl GenericClient>,
    sql: &'static str,
    action: &'static str,
    id: &SessionId,
) -> Result<Option<SessionRow>> {
    let Some(row) = db.query_opt(sql, &[&id.as_str()], action)? else {
        return Ok(None);
    };
    let pk: i64 = row.try_get(0).map_err(backend(action))?;
    let last: i64 = row.try_get(1).map_err(backend(action))?;
    let last_seq = Seq::try_from(last)
        .map_err(|_| corrupt("sessions", format!("negative last_seq {last}")))?;
    Ok(Some(SessionRow { pk, last_seq }))
}

/// The session's row, if it exists.
pub(super) fn find_session(
    db: &mut Db<'_, impl GenericClient>,
    id: &SessionId,
) -> Result<Option<SessionRow>> {
    session_row(
        db,
        "SELECT pk, last_seq FROM sessions WHERE id = $1",
        "looking up a session",
        id,
    )
}

/// The session's row, or [`StoreError::SessionNotFound`].
pub(super) fn require_session(
    db: &mut Db<'_, impl GenericClient>,
    id: &SessionId,
) -> Result<SessionRow> {
    find_session(db, id)?.ok_or_else(|| StoreError::SessionNotFound(id.clone()))
}

/// The session's row, locked until the transaction ends.
fn lock_session(db: &mut Db<'_, impl GenericClient>, id: &SessionId) -> Result<Option<SessionRow>> {
    session_row(
        db,
        "SELECT pk, last_seq FROM sessions WHERE id = $1 FOR UPDATE",
        "locking a session",
        id,
    )
}

/// A ledger holding the stored state of `call_ids` (those that exist), read in one statement.
///
/// Pairing rules only ever look at the calls an event names, so loading just those gives the
/// same verdicts as loading the session's whole ledger, at a cost that does not grow with the log.
fn load_ledger(
    db: &mut Db<'_, impl GenericClient>,
    session_pk: i64,
    ids: &[&str],
) -> Result<Ledger> {
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

impl<C: GenericClient> LogRows for Db<'_, C> {
    const SHORTCUTS: bool = true;

    fn find_session(&mut self, id: &SessionId) -> Result<Option<SessionRow>> {
        find_session(self, id)
    }

    fn lock_session(&mut self, id: &SessionId) -> Result<Option<SessionRow>> {
        lock_session(self, id)
    }

    fn insert_session(&mut self, session: &NewSession) -> Result<Option<i64>> {
        // No error on a taken id: the transaction stays usable, and a concurrent creator of the
        // same id waits for this one and then sees it.
        self.query_opt(
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
        .map_err(backend("creating a session"))
    }

    fn delete_session(&mut self, pk: i64) -> Result<()> {
        // One statement, one round trip: every derived table, then the session.
        self.execute(
            "WITH e AS (DELETE FROM events WHERE session = $1),
                  c AS (DELETE FROM tool_calls WHERE session = $1),
                  s AS (DELETE FROM summaries WHERE session = $1),
                  m AS (DELETE FROM model_calls WHERE session = $1),
                  t AS (DELETE FROM steps WHERE session = $1),
                  a AS (DELETE FROM aliases WHERE session = $1)
             DELETE FROM sessions WHERE pk = $1",
            &[&pk],
            "deleting a session",
        )?;
        Ok(())
    }

    /// Read in one statement. Pairing rules only ever look at the calls an event names, so
    /// loading just those gives the same verdicts as loading the session's whole ledger, at a
    /// cost that does not grow with the log.
    fn load_ledger(&mut self, pk: i64, call_ids: &[&str]) -> Result<Ledger> {
        load_ledger(self, pk, call_ids)
    }

    fn store_calls(&mut self, pk: i64, ledger: &Ledger, call_ids: &[&str]) -> Result<()> {
        let rows = CallRows::of(ledger, call_ids.iter().copied());
        if rows.ids.is_empty() {
            return Ok(());
        }
        self.execute(
            "INSERT INTO tool_calls (session, call_id, tool_name, call_seq, status, result_seq)
             SELECT $1, * FROM UNNEST($2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::TEXT[],
                                      $6::BIGINT[])
             ON CONFLICT (session, call_id)
             DO UPDATE SET status = excluded.status, result_seq = excluded.result_seq",
            &[
                &pk,
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

    /// In one statement (one round trip).
    fn write_events(
        &mut self,
        pk: i64,
        first: Seq,
        events: &[NewEvent],
        ledger: &Ledger,
    ) -> Result<()> {
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
        let updated = self.execute(
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
                &pk,
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
                format!("the session's row (pk {pk}) vanished during an append"),
            ));
        }
        Ok(())
    }

    /// The session's lock, its length and the new seqs taken in the same statement as the
    /// write (one round trip).
    ///
    /// The `UPDATE` takes the session's row lock; one that had to wait for another writer reads
    /// the row again as that writer committed it (PostgreSQL rechecks an updated row under READ
    /// COMMITTED), so the seqs it hands out follow the other writer's. Nothing else the
    /// statement reads could be stale: it reads no ledger.
    fn append_plain(
        &mut self,
        session: &SessionId,
        events: &[NewEvent],
    ) -> Result<Option<RangeInclusive<Seq>>> {
        const ACTION: &str = "appending events";
        let count = seq_bound(events.len() as Seq);
        let times: Vec<i64> = events.iter().map(|e| e.ts_ms).collect();
        let kinds: Vec<&str> = events.iter().map(|e| e.body.kind().as_str()).collect();
        let bodies = events
            .iter()
            .map(|e| to_json(&e.body, "events"))
            .collect::<Result<Vec<String>>>()?;
        let row = self
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
        let last: i64 = row.try_get(0).map_err(backend(ACTION))?;
        let first = Seq::try_from(last)
            .ok()
            .and_then(|last| last.checked_sub(events.len() as Seq))
            .ok_or_else(|| corrupt("sessions", format!("last_seq {last} after an append")))?;
        Ok(Some(first + 1..=first + events.len() as Seq))
    }

    /// Text holding a NUL character (see [`storable`]).
    fn check_text(
        session: &SessionId,
        record: impl FnOnce() -> String,
        field: &str,
        value: &str,
    ) -> Result<()> {
        storable(session, record, field, value)
    }

    /// Numbered and stored in one statement; the session's row is locked, so no other writer
    /// can take the same version.
    fn insert_summary(&mut self, pk: i64, summary: &NewSummary) -> Result<u32> {
        const ACTION: &str = "storing a summary";
        let version: i64 = self
            .query_opt(
                "INSERT INTO summaries
                     (session, version, from_seq, to_seq, content, producer, created_ms)
                 SELECT $1, COALESCE(MAX(version), 0) + 1, $2, $3, $4, $5, $6
                 FROM summaries WHERE session = $1
                 RETURNING version",
                &[
                    &pk,
                    &seq_bound(summary.from_seq),
                    &seq_bound(summary.to_seq),
                    &summary.content,
                    &summary.producer,
                    &summary.created_ms,
                ],
                ACTION,
            )?
            .map(|row| row.try_get(0))
            .transpose()
            .map_err(backend(ACTION))?
            .ok_or_else(|| corrupt("summaries", "the new summary was not numbered"))?;
        u32::try_from(version)
            .map_err(|_| corrupt("summaries", format!("version {version} out of range")))
    }

    /// Numbered and stored in one statement, under the session's lock.
    fn insert_model_call(&mut self, pk: i64, call: &NewModelCall) -> Result<u64> {
        const ACTION: &str = "recording a model call";
        let receipt = to_json(&call.receipt, "model_calls")?;
        let id: i64 = self
            .query_opt(
                "INSERT INTO model_calls (session, id, at_seq, created_ms, receipt)
                 SELECT $1, COALESCE(MAX(id), 0) + 1, $2, $3, $4
                 FROM model_calls WHERE session = $1
                 RETURNING id",
                &[&pk, &seq_bound(call.at_seq), &call.created_ms, &receipt],
                ACTION,
            )?
            .map(|row| row.try_get(0))
            .transpose()
            .map_err(backend(ACTION))?
            .ok_or_else(|| corrupt("model_calls", "the new receipt was not numbered"))?;
        u64::try_from(id).map_err(|_| corrupt("model_calls", format!("id {id} out of range")))
    }

    /// Held (`FOR UPDATE`), so that two reports of one call take turns.
    fn model_call(&mut self, pk: i64, session: &SessionId, id: u64) -> Result<Option<ModelCall>> {
        // An id past PostgreSQL's integer range cannot be stored, so clamping it finds nothing.
        let found = self.all(
            concat!(
                model_call_columns!(),
                " WHERE session = $1 AND id = $2 FOR UPDATE"
            ),
            &[&pk, &seq_bound(id)],
            ("model_calls", "reading a model call"),
            |row| model_call(row, session),
        )?;
        Ok(found.into_iter().next())
    }

    fn count_model_calls(&mut self, pk: i64) -> Result<u64> {
        const ACTION: &str = "counting model calls";
        let recorded: i64 = self
            .query_opt(
                "SELECT COUNT(*) FROM model_calls WHERE session = $1",
                &[&pk],
                ACTION,
            )?
            .map(|row| row.try_get(0))
            .transpose()
            .map_err(backend(ACTION))?
            .unwrap_or(0);
        Ok(u64::try_from(recorded).unwrap_or(0))
    }

    fn set_usage(&mut self, pk: i64, id: u64, usage: &Usage) -> Result<()> {
        let text = to_json(usage, "model_calls")?;
        self.execute(
            "UPDATE model_calls SET usage = $3 WHERE session = $1 AND id = $2",
            &[&pk, &seq_bound(id), &text],
            "recording a model call's usage",
        )?;
        Ok(())
    }

    /// In one statement: the receipt's row is updated only if it has no usage yet.
    fn report_first(
        &mut self,
        session: &SessionId,
        call: u64,
        usage: &Usage,
    ) -> Result<Option<ModelCall>> {
        let text = to_json(usage, "model_calls")?;
        let reported = self.all(
            "UPDATE model_calls m SET usage = $3 FROM sessions s
             WHERE s.id = $1 AND m.session = s.pk AND m.id = $2 AND m.usage IS NULL
             RETURNING m.id, m.at_seq, m.created_ms, m.receipt, m.usage",
            &[&session.as_str(), &seq_bound(call), &text],
            ("model_calls", "recording a model call's usage"),
            |row| model_call(row, session),
        )?;
        Ok(reported.into_iter().next())
    }

    /// In one statement (one `UNNEST` upsert).
    fn upsert_steps(&mut self, pk: i64, steps: &[&StepRecord]) -> Result<()> {
        let ids: Vec<&str> = steps.iter().map(|s| s.id.as_str()).collect();
        let calls: Vec<&str> = steps.iter().map(|s| s.call_id.as_str()).collect();
        let seqs: Vec<i64> = steps.iter().map(|s| seq_bound(s.result_seq)).collect();
        let bodies = steps
            .iter()
            .map(|s| to_json(&s.body, "steps"))
            .collect::<Result<Vec<String>>>()?;
        self.execute(
            "INSERT INTO steps (session, id, call_id, result_seq, body)
             SELECT $1, * FROM UNNEST($2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::TEXT[])
             ON CONFLICT (session, id) DO UPDATE SET
                 call_id = excluded.call_id,
                 result_seq = excluded.result_seq,
                 body = excluded.body",
            &[&pk, &ids, &calls, &seqs, &bodies],
            "storing steps",
        )?;
        Ok(())
    }

    fn alias(&mut self, pk: i64, alias: &BlobAlias) -> Result<Option<BlobRef>> {
        let found = self.all(
            "SELECT blob FROM aliases WHERE session = $1 AND alias = $2",
            &[&pk, &alias.as_str()],
            ("aliases", "resolving an alias"),
            |row| BlobRef::try_from(row.get::<String>(0)?).map_err(|e| corrupt("aliases", e)),
        )?;
        Ok(found.into_iter().next())
    }

    fn insert_alias(&mut self, pk: i64, alias: &BlobAlias, blob: &BlobRef) -> Result<()> {
        self.execute(
            "INSERT INTO aliases (session, alias, blob) VALUES ($1, $2, $3)",
            &[&pk, &alias.as_str(), &blob.to_string()],
            "storing an alias",
        )?;
        Ok(())
    }
}
