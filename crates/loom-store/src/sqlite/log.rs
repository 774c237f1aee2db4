//! The log's rows in SQLite: what [`LogRows`] asks of a backend, as SQL on the write
//! transaction's connection. The rules that decide what may be written are `crate::rules`.
//!
//! A write transaction holds the database's write lock from its first statement
//! (`BEGIN IMMEDIATE`), so holding a session's row is finding it.

use loom_core::{BlobRef, Ledger, NewEvent, Seq, SessionId};
use rusqlite::{params, Connection, OptionalExtension};

use super::backend;
use super::rows::{
    call_state, corrupt, find_session, parse_status, query_all, seq_bound, status_name, to_json,
};
use super::{model_call, MODEL_CALL_COLUMNS};
use crate::calls::touched_calls;
use crate::records::{ModelCall, NewModelCall, NewSession, NewSummary, StepRecord, Usage};
use crate::rules::{LogRows, SessionRow};
use crate::{BlobAlias, Result};

/// A write transaction's connection, as the rules see it.
pub(super) struct Rows<'a>(pub(super) &'a Connection);

impl LogRows for Rows<'_> {
    fn find_session(&mut self, id: &SessionId) -> Result<Option<SessionRow>> {
        find_session(self.0, id)
    }

    fn lock_session(&mut self, id: &SessionId) -> Result<Option<SessionRow>> {
        find_session(self.0, id)
    }

    fn insert_session(&mut self, session: &NewSession) -> Result<Option<i64>> {
        if find_session(self.0, &session.id)?.is_some() {
            return Ok(None);
        }
        self.0
            .prepare_cached(
                "INSERT INTO sessions (id, agent, parent, created_ms) VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    session.id.as_str(),
                    session.agent.as_str(),
                    session.parent.as_ref().map(SessionId::as_str),
                    session.created_ms,
                ])
            })
            .map_err(backend("creating a session"))?;
        Ok(Some(self.0.last_insert_rowid()))
    }

    fn delete_session(&mut self, pk: i64) -> Result<()> {
        for sql in [
            "DELETE FROM events WHERE session = ?1",
            "DELETE FROM tool_calls WHERE session = ?1",
            "DELETE FROM summaries WHERE session = ?1",
            "DELETE FROM model_calls WHERE session = ?1",
            "DELETE FROM steps WHERE session = ?1",
            "DELETE FROM aliases WHERE session = ?1",
            "DELETE FROM sessions WHERE pk = ?1",
        ] {
            self.0
                .prepare_cached(sql)
                .and_then(|mut stmt| stmt.execute([pk]))
                .map_err(backend("deleting a session"))?;
        }
        Ok(())
    }

    /// Pairing rules only ever look at the calls an event names, so loading just those gives
    /// the same verdicts as loading the session's whole ledger, at a cost that does not grow
    /// with the log.
    fn load_ledger(&mut self, pk: i64, call_ids: &[&str]) -> Result<Ledger> {
        let mut stmt = self
            .0
            .prepare_cached(
                "SELECT tool_name, call_seq, status, result_seq FROM tool_calls
                 WHERE session = ?1 AND call_id = ?2",
            )
            .map_err(backend("loading tool calls"))?;
        let mut states = Vec::new();
        for &call_id in call_ids {
            let row = stmt
                .query_row(params![pk, call_id], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, Option<i64>>(3)?,
                    ))
                })
                .optional()
                .map_err(backend("loading tool calls"))?;
            if let Some((tool_name, call_seq, status, result_seq)) = row {
                let seq = |v: i64| {
                    Seq::try_from(v).map_err(|_| corrupt("tool_calls", format!("negative seq {v}")))
                };
                let state = call_state(
                    tool_name,
                    seq(call_seq)?,
                    parse_status(&status)?,
                    result_seq.map(seq).transpose()?,
                )?;
                states.push((call_id.to_owned(), state));
            }
        }
        Ok(Ledger::from_states(states))
    }

    fn store_calls(&mut self, pk: i64, ledger: &Ledger, call_ids: &[&str]) -> Result<()> {
        let mut stmt = self
            .0
            .prepare_cached(
                "INSERT INTO tool_calls (session, call_id, tool_name, call_seq, status, result_seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (session, call_id)
                 DO UPDATE SET status = excluded.status, result_seq = excluded.result_seq",
            )
            .map_err(backend("storing tool calls"))?;
        for &call_id in call_ids {
            let Some(state) = ledger.get(call_id) else {
                continue;
            };
            let (status, result_seq) = crate::calls::call_row(state);
            stmt.execute(params![
                pk,
                call_id,
                state.tool_name(),
                seq_bound(state.call_seq()),
                status_name(status),
                result_seq.map(seq_bound),
            ])
            .map_err(backend("storing tool calls"))?;
        }
        Ok(())
    }

    fn write_events(
        &mut self,
        pk: i64,
        first: Seq,
        events: &[NewEvent],
        ledger: &Ledger,
    ) -> Result<()> {
        let mut insert = self
            .0
            .prepare_cached(
                "INSERT INTO events (session, seq, ts_ms, kind, body) VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .map_err(backend("appending events"))?;
        let mut seq = first;
        for event in events {
            let body = to_json(&event.body, "events")?;
            insert
                .execute(params![
                    pk,
                    seq_bound(seq),
                    event.ts_ms,
                    event.body.kind().as_str(),
                    body
                ])
                .map_err(backend("appending events"))?;
            seq += 1;
        }
        let touched: Vec<&str> = touched_calls(events).into_iter().collect();
        self.store_calls(pk, ledger, &touched)?;
        self.0
            .prepare_cached("UPDATE sessions SET last_seq = ?2 WHERE pk = ?1")
            .and_then(|mut stmt| stmt.execute(params![pk, seq_bound(seq - 1)]))
            .map_err(backend("updating the session's last seq"))?;
        Ok(())
    }

    fn insert_summary(&mut self, pk: i64, summary: &NewSummary) -> Result<u32> {
        let version: u32 = self
            .0
            .query_row(
                "SELECT COALESCE(MAX(version), 0) + 1 FROM summaries WHERE session = ?1",
                [pk],
                |row| row.get(0),
            )
            .map_err(backend("numbering a summary"))?;
        self.0
            .prepare_cached(
                "INSERT INTO summaries
                     (session, version, from_seq, to_seq, content, producer, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    pk,
                    version,
                    seq_bound(summary.from_seq),
                    seq_bound(summary.to_seq),
                    summary.content,
                    summary.producer,
                    summary.created_ms,
                ])
            })
            .map_err(backend("storing a summary"))?;
        Ok(version)
    }

    fn insert_model_call(&mut self, pk: i64, call: &NewModelCall) -> Result<u64> {
        let id: u64 = self
            .0
            .query_row(
                "SELECT COALESCE(MAX(id), 0) + 1 FROM model_calls WHERE session = ?1",
                [pk],
                |row| row.get(0),
            )
            .map_err(backend("numbering a model call"))?;
        let receipt = to_json(&call.receipt, "model_calls")?;
        self.0
            .prepare_cached(
                "INSERT INTO model_calls (session, id, at_seq, created_ms, receipt)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    pk,
                    id,
                    seq_bound(call.at_seq),
                    call.created_ms,
                    receipt
                ])
            })
            .map_err(backend("recording a model call"))?;
        Ok(id)
    }

    fn model_call(&mut self, pk: i64, session: &SessionId, id: u64) -> Result<Option<ModelCall>> {
        // An id past SQLite's integer range cannot be stored, so clamping it finds nothing.
        let found = query_all(
            self.0,
            &format!("{MODEL_CALL_COLUMNS} WHERE session = ?1 AND id = ?2"),
            params![pk, seq_bound(id)],
            ("model_calls", "reading a model call"),
            |row| model_call(row, session),
        )?;
        Ok(found.into_iter().next())
    }

    fn count_model_calls(&mut self, pk: i64) -> Result<u64> {
        self.0
            .query_row(
                "SELECT COUNT(*) FROM model_calls WHERE session = ?1",
                [pk],
                |row| row.get(0),
            )
            .map_err(backend("counting model calls"))
    }

    fn set_usage(&mut self, pk: i64, id: u64, usage: &Usage) -> Result<()> {
        let text = to_json(usage, "model_calls")?;
        self.0
            .prepare_cached("UPDATE model_calls SET usage = ?3 WHERE session = ?1 AND id = ?2")
            .and_then(|mut stmt| stmt.execute(params![pk, seq_bound(id), text]))
            .map_err(backend("recording a model call's usage"))?;
        Ok(())
    }

    fn upsert_steps(&mut self, pk: i64, steps: &[&StepRecord]) -> Result<()> {
        let mut stmt = self
            .0
            .prepare_cached(
                "INSERT INTO steps (session, id, call_id, result_seq, body)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (session, id) DO UPDATE SET
                     call_id = excluded.call_id,
                     result_seq = excluded.result_seq,
                     body = excluded.body",
            )
            .map_err(backend("storing steps"))?;
        for step in steps {
            let body = to_json(&step.body, "steps")?;
            stmt.execute(params![
                pk,
                step.id,
                step.call_id,
                seq_bound(step.result_seq),
                body
            ])
            .map_err(backend("storing steps"))?;
        }
        Ok(())
    }

    fn alias(&mut self, pk: i64, alias: &BlobAlias) -> Result<Option<BlobRef>> {
        stored_alias(self.0, pk, alias)
    }

    fn insert_alias(&mut self, pk: i64, alias: &BlobAlias, blob: &BlobRef) -> Result<()> {
        self.0
            .prepare_cached("INSERT INTO aliases (session, alias, blob) VALUES (?1, ?2, ?3)")
            .and_then(|mut stmt| stmt.execute(params![pk, alias.as_str(), blob.to_string()]))
            .map_err(backend("storing an alias"))?;
        Ok(())
    }
}

/// The blob an alias points at, if it is stored.
pub(super) fn stored_alias(
    conn: &Connection,
    session_pk: i64,
    alias: &BlobAlias,
) -> Result<Option<BlobRef>> {
    let blob: Option<String> = conn
        .prepare_cached("SELECT blob FROM aliases WHERE session = ?1 AND alias = ?2")
        .and_then(|mut stmt| {
            stmt.query_row(params![session_pk, alias.as_str()], |row| row.get(0))
                .optional()
        })
        .map_err(backend("resolving an alias"))?;
    blob.map(|b| BlobRef::try_from(b).map_err(|e| corrupt("aliases", e)))
        .transpose()
}
