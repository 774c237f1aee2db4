//! Statements run through a connection's statement cache, and the decoding of their rows.
//!
//! Every statement is prepared once per connection and reused, so a call costs one round trip
//! per statement rather than two. Everything that reads a column and could meet a value this
//! build did not write turns it into [`StoreError::Corrupt`] instead of panicking.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use loom_core::{Seq, SessionId};
use postgres::error::SqlState;
use postgres::types::{FromSql, ToSql};
use postgres::{GenericClient, Row, Statement};

use crate::{Result, StoreError};

/// Wraps a driver error with what was being done.
pub(super) fn backend(action: &'static str) -> impl FnOnce(postgres::Error) -> StoreError {
    move |source| StoreError::Backend {
        action,
        source: Box::new(source),
    }
}

pub(super) fn corrupt(table: &'static str, reason: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        table,
        reason: reason.to_string(),
    }
}

/// The driver error inside a store error, if it came from the driver.
pub(super) fn driver_error(e: &StoreError) -> Option<&postgres::Error> {
    match e {
        StoreError::Backend { source, .. } => source.downcast_ref::<postgres::Error>(),
        _ => None,
    }
}

/// Whether a transaction failed only because it ran beside another one (a serialisation failure
/// or a deadlock): PostgreSQL rolled it back, and running it again is safe.
pub(super) fn is_conflict(e: &StoreError) -> bool {
    driver_error(e)
        .and_then(postgres::Error::code)
        .is_some_and(|code| {
            *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED
        })
}

/// Whether the connection is gone under the statement: closed, broken (an I/O error), or ended
/// by the server shutting down or restarting. Whatever ran on it and was not committed was rolled
/// back by the server.
pub(super) fn is_disconnect(e: &StoreError) -> bool {
    use std::error::Error as _;
    driver_error(e).is_some_and(|e| {
        e.is_closed()
            || e.source().is_some_and(|s| s.is::<std::io::Error>())
            || e.code().is_some_and(|code| {
                *code == SqlState::ADMIN_SHUTDOWN
                    || *code == SqlState::CRASH_SHUTDOWN
                    || *code == SqlState::CANNOT_CONNECT_NOW
                    // Class 08: connection exceptions.
                    || code.code().starts_with("08")
            })
    })
}

/// Refuses text PostgreSQL cannot store: its `text` type holds no NUL character (SQLite's does),
/// so such a value is the caller's to fix, named by `record` and `field`, and never reaches the
/// database as an error it would report as its own.
pub(super) fn storable(
    session: &SessionId,
    record: impl FnOnce() -> String,
    field: &str,
    value: &str,
) -> Result<()> {
    if value.contains('\0') {
        return Err(StoreError::InvalidRecord {
            session: session.clone(),
            record: record(),
            reason: format!("its {field} contains a NUL character, which PostgreSQL cannot store"),
        });
    }
    Ok(())
}

/// Seqs are `u64` but PostgreSQL integers are `i64`; a bound past `i64::MAX` means "to the end".
pub(super) fn seq_bound(seq: Seq) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

pub(super) fn to_json<T: serde::Serialize>(value: &T, table: &'static str) -> Result<String> {
    serde_json::to_string(value).map_err(|e| corrupt(table, format!("cannot encode: {e}")))
}

/// A client (a connection or an open transaction) with its connection's statement cache.
pub(super) struct Db<'a, C: GenericClient> {
    pub(super) client: &'a mut C,
    pub(super) stmts: &'a mut HashMap<&'static str, Statement>,
    /// Counts every round trip this sends.
    pub(super) trips: &'a AtomicU64,
}

/// Parameters of a statement, in order.
pub(super) type Params<'p> = [&'p (dyn ToSql + Sync)];

impl<C: GenericClient> Db<'_, C> {
    fn stmt(&mut self, sql: &'static str, action: &'static str) -> Result<Statement> {
        if let Some(stmt) = self.stmts.get(sql) {
            return Ok(stmt.clone());
        }
        self.trips.fetch_add(1, Ordering::Relaxed);
        let stmt = self.client.prepare(sql).map_err(backend(action))?;
        self.stmts.insert(sql, stmt.clone());
        Ok(stmt)
    }

    pub(super) fn query(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
        action: &'static str,
    ) -> Result<Vec<Row>> {
        let stmt = self.stmt(sql, action)?;
        self.trips.fetch_add(1, Ordering::Relaxed);
        self.client.query(&stmt, params).map_err(backend(action))
    }

    pub(super) fn query_opt(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
        action: &'static str,
    ) -> Result<Option<Row>> {
        let stmt = self.stmt(sql, action)?;
        self.trips.fetch_add(1, Ordering::Relaxed);
        self.client
            .query_opt(&stmt, params)
            .map_err(backend(action))
    }

    pub(super) fn execute(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
        action: &'static str,
    ) -> Result<u64> {
        let stmt = self.stmt(sql, action)?;
        self.trips.fetch_add(1, Ordering::Relaxed);
        self.client.execute(&stmt, params).map_err(backend(action))
    }

    /// Runs `sql` and decodes every row it returns, in order.
    pub(super) fn all<T>(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
        (table, action): (&'static str, &'static str),
        mut decode: impl FnMut(&Cols<'_>) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.query(sql, params, action)?
            .iter()
            .map(|row| {
                decode(&Cols {
                    row,
                    base: 0,
                    action,
                    table,
                })
            })
            .collect()
    }

    /// A session's records read with the session itself, in one statement: `sql` joins the
    /// session's row (`WHERE s.id = $1`) to its records with a `LEFT JOIN`, and selects first
    /// whether the row holds a record, then the record's columns, which `decode` reads from 0.
    /// `None` when the session does not exist.
    pub(super) fn records_of<T>(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
        (table, action): (&'static str, &'static str),
        mut decode: impl FnMut(&Cols<'_>) -> Result<T>,
    ) -> Result<Option<Vec<T>>> {
        let rows = self.query(sql, params, action)?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let cols = Cols {
                row,
                base: 1,
                action,
                table,
            };
            // A session with no records gives one row, with NULLs.
            if row.try_get::<_, bool>(0).map_err(backend(action))? {
                out.push(decode(&cols)?);
            }
        }
        Ok(Some(out))
    }
}

/// One row being decoded; every error names the action and the table.
pub(super) struct Cols<'a> {
    pub(super) row: &'a Row,
    /// The column that `get(0)` reads.
    pub(super) base: usize,
    pub(super) action: &'static str,
    pub(super) table: &'static str,
}

impl<'a> Cols<'a> {
    pub(super) fn get<T: FromSql<'a>>(&self, idx: usize) -> Result<T> {
        self.row
            .try_get(self.base + idx)
            .map_err(backend(self.action))
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
        let text: &str = self.get(idx)?;
        serde_json::from_str(text).map_err(|e| corrupt(self.table, format!("cannot decode: {e}")))
    }

    /// A nullable JSON column: `None` for SQL NULL.
    pub(super) fn opt_json<T: serde::de::DeserializeOwned>(&self, idx: usize) -> Result<Option<T>> {
        let text: Option<&str> = self.get(idx)?;
        text.map(|text| {
            serde_json::from_str(text)
                .map_err(|e| corrupt(self.table, format!("cannot decode: {e}")))
        })
        .transpose()
    }

    pub(super) fn session_id(&self, idx: usize) -> Result<SessionId> {
        SessionId::new(self.get::<String>(idx)?).map_err(|e| corrupt(self.table, e))
    }
}
