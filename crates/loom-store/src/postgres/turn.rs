//! A server's catch-up and a call's turn, each one statement (one round trip): see
//! [`crate::Turn`].

use loom_core::{Event, Seq, SessionId};
use postgres::error::SqlState;
use postgres::GenericClient;

use super::db::{backend, corrupt, driver_error, seq_bound, storable, to_json, Cols, Db};
use super::log::model_call;
use crate::calls::{call_row, status_name, touched_calls};
use crate::records::Summary;
use crate::rules::{last_of_each, storable_calls};
use crate::turn::{check, moved};
use crate::{CatchUp, Known, NewSummary, Result, StoreError, Turn, Written};

/// The catch-up's rows: the session's length and newest summary version (kind 0), the new events
/// (1), every summary when the newest version is not the known one (2), the newest receipt when
/// it is not the known one (3); a receipt's columns from `n` on are those `model_call` reads. One statement sees
/// one snapshot, so the parts agree with each other.
const CATCH_UP: &str = "
    WITH s AS (SELECT pk, last_seq FROM sessions WHERE id = $1),
    newest AS (
        SELECT COALESCE(MAX(m.version), 0) AS version
        FROM s JOIN summaries m ON m.session = s.pk
    ),
    c AS (
        SELECT m.* FROM s, LATERAL (
            SELECT * FROM model_calls WHERE session = s.pk ORDER BY id DESC LIMIT 1
        ) m
    )
    SELECT 0 AS kind, s.last_seq AS n, (SELECT version FROM newest) AS a, NULL::BIGINT AS b,
           NULL::TEXT AS x, NULL::TEXT AS y, NULL::BIGINT AS t
    FROM s
    UNION ALL
    SELECT 1, e.seq, NULL, NULL, e.body, NULL, e.ts_ms
    FROM s JOIN events e ON e.session = s.pk AND e.seq > $2
    UNION ALL
    SELECT 2, m.version, m.from_seq, m.to_seq, m.content, m.producer, m.created_ms
    FROM s JOIN summaries m ON m.session = s.pk
    WHERE (SELECT version FROM newest) <> $3
    UNION ALL
    SELECT 3, c.id, c.at_seq, c.created_ms, c.receipt, c.usage, NULL
    FROM c WHERE c.id <> $4
    ORDER BY 1, 2";

pub(super) fn catch_up(
    db: &mut Db<'_, impl GenericClient>,
    session: &SessionId,
    known: Known,
) -> Result<CatchUp> {
    const ACTION: &str = "catching up with a session";
    let known_call = i64::try_from(known.call).unwrap_or(i64::MAX);
    let rows = db.query(
        CATCH_UP,
        &[
            &session.as_str(),
            &seq_bound(known.seq),
            &i64::from(known.summary_version),
            &known_call,
        ],
        ACTION,
    )?;
    let mut out = CatchUp::default();
    let mut newest = None;
    let mut summaries = Vec::new();
    for row in &rows {
        let cols = |base, table| Cols {
            row,
            base,
            action: ACTION,
            table,
        };
        let kind: i32 = cols(0, "sessions").get(0)?;
        match kind {
            0 => {
                let c = cols(0, "sessions");
                out.last_seq = c.seq(1)?;
                let version: i64 = c.get(2)?;
                newest = Some(version);
            }
            1 => {
                let c = cols(0, "events");
                out.events.push(Event {
                    seq: c.seq(1)?,
                    body: c.json(4)?,
                    ts_ms: c.get(6)?,
                });
            }
            2 => {
                let c = cols(0, "summaries");
                let version: i64 = c.get(1)?;
                summaries.push(Summary {
                    version: u32::try_from(version).map_err(|_| {
                        corrupt("summaries", format!("version {version} out of range"))
                    })?,
                    summary: NewSummary {
                        session: session.clone(),
                        from_seq: c.seq(2)?,
                        to_seq: c.seq(3)?,
                        content: c.get(4)?,
                        producer: c.get(5)?,
                        created_ms: c.get(6)?,
                    },
                });
            }
            3 => out.last_call = Some(model_call(&cols(1, "model_calls"), session)?),
            other => return Err(corrupt("sessions", format!("catch-up row of kind {other}"))),
        }
    }
    let Some(newest) = newest else {
        return Err(StoreError::SessionNotFound(session.clone()));
    };
    if newest != i64::from(known.summary_version) {
        out.summaries = Some(summaries);
    }
    Ok(out)
}

/// The turn as the function's parameters, checked as a backend checks an append.
pub(super) fn write_turn<C: GenericClient>(db: &mut Db<'_, C>, turn: &Turn<'_>) -> Result<Written> {
    const ACTION: &str = "writing a turn";
    let session = turn.session;
    storable_calls::<Db<'_, C>>(session, turn.events)?;
    for step in turn.steps {
        storable(session, || format!("step {}", step.id), "id", &step.id)?;
    }
    let touched = touched_calls(turn.events);
    let before: Vec<&str> = touched
        .iter()
        .map(|id| {
            turn.calls
                .get(id)
                .map_or("", |s| status_name(call_row(s).0))
        })
        .collect();
    let ledger = check(turn)?;
    let last = turn.after + turn.events.len() as Seq;
    let times: Vec<i64> = turn.events.iter().map(|e| e.ts_ms).collect();
    let kinds: Vec<&str> = turn.events.iter().map(|e| e.body.kind().as_str()).collect();
    let bodies = turn
        .events
        .iter()
        .map(|e| to_json(&e.body, "events"))
        .collect::<Result<Vec<String>>>()?;
    let mut call_ids = Vec::new();
    let mut was = Vec::new();
    let mut tools = Vec::new();
    let mut call_seqs = Vec::new();
    let mut statuses = Vec::new();
    let mut results = Vec::new();
    for (id, before) in touched.iter().zip(&before) {
        let Some(state) = ledger.get(id) else {
            continue;
        };
        let (status, result) = call_row(state);
        call_ids.push(*id);
        was.push(*before);
        tools.push(state.tool_name());
        call_seqs.push(seq_bound(state.call_seq()));
        statuses.push(status_name(status));
        results.push(result.map(seq_bound));
    }
    let steps = last_of_each(turn.steps, |s| s.id.as_str());
    let step_ids: Vec<&str> = steps.iter().map(|s| s.id.as_str()).collect();
    let step_calls: Vec<&str> = steps.iter().map(|s| s.call_id.as_str()).collect();
    let step_seqs: Vec<i64> = steps.iter().map(|s| seq_bound(s.result_seq)).collect();
    let step_bodies = steps
        .iter()
        .map(|s| to_json(&s.body, "steps"))
        .collect::<Result<Vec<String>>>()?;
    let aliases: Vec<&str> = turn.aliases.iter().map(|(a, _)| a.as_str()).collect();
    let blobs: Vec<String> = turn.aliases.iter().map(|(_, b)| b.to_string()).collect();
    let receipt = turn
        .receipt
        .map(|r| to_json(&r.receipt, "model_calls"))
        .transpose()?;
    let call_at = turn.receipt.map(|r| seq_bound(r.at_seq));
    let call_created = turn.receipt.map(|r| r.created_ms);
    let usage_call = turn
        .usage
        .map(|(call, _)| i64::try_from(call).unwrap_or(i64::MAX));
    let usage = turn
        .usage
        .map(|(_, u)| to_json(u, "model_calls"))
        .transpose()?;
    let row = db.query_opt(
        "SELECT loom_write_turn($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, \
         $15, $16, $17, $18, $19, $20, $21, $22)",
        &[
            &session.as_str(),
            &seq_bound(turn.after),
            &times,
            &kinds,
            &bodies,
            &call_ids,
            &was,
            &tools,
            &call_seqs,
            &statuses,
            &results,
            &step_ids,
            &step_calls,
            &step_seqs,
            &step_bodies,
            &aliases,
            &blobs,
            &receipt,
            &call_at,
            &call_created,
            &usage_call,
            &usage,
        ],
        ACTION,
    );
    let row = match row {
        Ok(row) => row,
        Err(e) => {
            let code = driver_error(&e).and_then(postgres::Error::code);
            return Err(match code.map(SqlState::code) {
                Some("LM404") => StoreError::SessionNotFound(session.clone()),
                Some("LM409") => moved(
                    session,
                    driver_error(&e)
                        .and_then(postgres::Error::as_db_error)
                        .map_or_else(|| "refused".to_owned(), |d| d.message().to_owned()),
                ),
                _ => e,
            });
        }
    };
    let call: Option<i64> = row
        .map(|row| row.try_get(0))
        .transpose()
        .map_err(backend(ACTION))?
        .flatten();
    let call = call
        .map(|id| u64::try_from(id).map_err(|_| corrupt("model_calls", format!("id {id}"))))
        .transpose()?;
    Ok(Written {
        seqs: turn.after + 1..=last,
        call,
    })
}
