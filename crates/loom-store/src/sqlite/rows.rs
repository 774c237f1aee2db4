//! Conversions between stored rows and the store's records, and the ledger queries appends share.
//!
//! Everything that reads a column and could meet a value this build did not write (a corrupt file,
//! a hand edit) turns it into [`StoreError::Corrupt`] instead of panicking.

use loom_core::{Seq, SessionId};
use rusqlite::types::FromSql;
use rusqlite::{Connection, OptionalExtension, Params, Row};

use super::backend;
pub(super) use crate::calls::{call_state, parse_status, status_name};
use crate::{Result, StoreError};

pub(super) use crate::rules::SessionRow;

pub(super) fn corrupt(table: &'static str, reason: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        table,
        reason: reason.to_string(),
    }
}

/// Seqs are `u64` but SQLite integers are `i64`; a bound past `i64::MAX` means "to the end".
pub(super) fn seq_bound(seq: Seq) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

pub(super) fn to_json<T: serde::Serialize>(value: &T, table: &'static str) -> Result<String> {
    serde_json::to_string(value).map_err(|e| corrupt(table, format!("cannot encode: {e}")))
}

pub(super) fn from_json<T: serde::de::DeserializeOwned>(
    text: &str,
    table: &'static str,
) -> Result<T> {
    serde_json::from_str(text).map_err(|e| corrupt(table, format!("cannot decode: {e}")))
}

/// One row being decoded; every error names the action and the table.
pub(super) struct Cols<'a, 'r> {
    row: &'a Row<'r>,
    action: &'static str,
    table: &'static str,
}

impl Cols<'_, '_> {
    pub(super) fn get<T: FromSql>(&self, idx: usize) -> Result<T> {
        self.row.get(idx).map_err(backend(self.action))
    }

    pub(super) fn seq(&self, idx: usize) -> Result<Seq> {
        let raw: i64 = self.get(idx)?;
        Seq::try_from(raw).map_err(|_| corrupt(self.table, format!("negative seq {raw}")))
    }

    pub(super) fn opt_seq(&self, idx: usize) -> Result<Option<Seq>> {
        let raw: Option<i64> = self.get(idx)?;
        raw.map(|raw| {
            Seq::try_from(raw).map_err(|_| corrupt(self.table, format!("negative seq {raw}")))
        })
        .transpose()
    }

    pub(super) fn json<T: serde::de::DeserializeOwned>(&self, idx: usize) -> Result<T> {
        let text: String = self.get(idx)?;
        from_json(&text, self.table)
    }

    /// A nullable JSON column: `None` for SQL NULL.
    pub(super) fn opt_json<T: serde::de::DeserializeOwned>(&self, idx: usize) -> Result<Option<T>> {
        let text: Option<String> = self.get(idx)?;
        text.map(|text| from_json(&text, self.table)).transpose()
    }

    pub(super) fn session_id(&self, idx: usize) -> Result<SessionId> {
        SessionId::new(self.get::<String>(idx)?).map_err(|e| corrupt(self.table, e))
    }
}

/// Runs a query and decodes every row it returns, in order.
pub(super) fn query_all<T>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    (table, action): (&'static str, &'static str),
    mut decode: impl FnMut(&Cols<'_, '_>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql).map_err(backend(action))?;
    let mut rows = stmt.query(params).map_err(backend(action))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(backend(action))? {
        out.push(decode(&Cols { row, action, table })?);
    }
    Ok(out)
}

/// The session's row, if it exists.
pub(super) fn find_session(conn: &Connection, id: &SessionId) -> Result<Option<SessionRow>> {
    let mut stmt = conn
        .prepare_cached("SELECT pk, last_seq FROM sessions WHERE id = ?1")
        .map_err(backend("looking up a session"))?;
    let row = stmt
        .query_row([id.as_str()], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?))
        })
        .optional()
        .map_err(backend("looking up a session"))?;
    row.map(|(pk, last)| {
        let last_seq = Seq::try_from(last)
            .map_err(|_| corrupt("sessions", format!("negative last_seq {last}")))?;
        Ok(SessionRow { pk, last_seq })
    })
    .transpose()
}

/// The session's row, or [`StoreError::SessionNotFound`].
pub(super) fn require_session(conn: &Connection, id: &SessionId) -> Result<SessionRow> {
    find_session(conn, id)?.ok_or_else(|| StoreError::SessionNotFound(id.clone()))
}
