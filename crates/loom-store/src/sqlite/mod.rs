//! The SQLite backend: the embedded default, one database file in WAL mode.
//!
//! Durability: every write is one transaction committed with `synchronous=FULL`, so an `Ok` means
//! the WAL has been synced and the write survives a crash or power loss. Concurrency: one
//! connection per store behind a mutex (threads take turns), and several processes may share the
//! file: WAL lets readers run beside the one writer, writes take the write lock up front
//! (`BEGIN IMMEDIATE`) so two writers can never read the same last seq, and a busy timeout makes a
//! writer wait its turn instead of failing.

mod group;
mod keys;
mod log;
mod rows;
mod schema;

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use loom_core::{AgentId, BlobRef, Event, NewEvent, Seq, SessionId, SessionInfo};
use rusqlite::{params, Connection, OpenFlags, TransactionBehavior};

use crate::records::{
    ModelCall, NewModelCall, NewSession, NewSummary, StepRecord, Summary, ToolCallRecord, Usage,
};
use crate::{rules, ApiKey, BlobAlias, KeyStore, NewApiKey, Result, Store, StoreError};
use log::Rows;
use rows::{corrupt, parse_status, query_all, require_session, seq_bound, Cols, SessionRow};

/// How long a write waits for another process's write to finish before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Prepared statements kept per connection; enough for every query this backend issues.
const STATEMENT_CACHE: usize = 64;

/// Wraps a backend error with what was being done.
pub(crate) fn backend(action: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |source| StoreError::Backend {
        action,
        source: Box::new(source),
    }
}

/// The log and its derived records in one SQLite file.
#[derive(Debug)]
pub struct SqliteStore {
    /// Writes, committed in groups (see `group`).
    writer: group::Writer,
    /// Reads: a connection of its own, so they never wait for a write's sync (WAL lets readers
    /// run beside the writer and shows them only committed data).
    reader: Mutex<Connection>,
    path: PathBuf,
}

impl SqliteStore {
    /// Opens the database at `path`, creating it and bringing its schema up to date.
    ///
    /// Fails with [`StoreError::SchemaTooNew`] when the file was written by a newer build.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn =
            Connection::open_with_flags(path, flags).map_err(backend("opening the database"))?;
        configure(&conn)?;
        schema::migrate(&mut conn)?;
        let reader =
            Connection::open_with_flags(path, flags).map_err(backend("opening the database"))?;
        configure(&reader)?;
        Ok(Self {
            writer: group::Writer::new(conn),
            reader: Mutex::new(reader),
            path: path.to_owned(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version this build writes.
    pub fn schema_version() -> i64 {
        schema::latest_version()
    }

    /// The read connection.
    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while the lock was held dropped its transaction, which rolls it back, so the
        // connection is in a clean state and can be used again.
        self.reader.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` in a transaction that holds the write lock, and returns once it is durable.
    ///
    /// On `Err` everything `f` did is rolled back: nothing partial is ever written. Concurrent
    /// writes may share one commit (see `group`); an `Ok` still means this write is durable.
    fn write_deferred<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.writer.write_deferred(f)
    }

    fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.writer.write(f)
    }

    /// Runs `f` in a read transaction, so that it sees one consistent snapshot.
    fn read_tx<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(backend("starting a read transaction"))?;
        let out = f(&tx)?;
        // Ending a read-only transaction releases its snapshot; it writes nothing.
        tx.commit().map_err(backend("ending a read transaction"))?;
        Ok(out)
    }
}

/// Per-connection settings; none of them is stored in the file except the journal mode.
fn configure(conn: &Connection) -> Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(backend("setting the busy timeout"))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(backend("switching to WAL mode"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Backend {
            action: "switching to WAL mode",
            source: format!("the database stayed in `{mode}` journal mode").into(),
        });
    }
    // FULL syncs the WAL on every commit: an acknowledged write survives power loss, not only a
    // crash of this process.
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(backend("setting synchronous=FULL"))?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(backend("enabling foreign keys"))?;
    Ok(())
}

fn session_info(row: &Cols<'_, '_>) -> Result<SessionInfo> {
    Ok(SessionInfo {
        id: row.session_id(0)?,
        agent: AgentId::new(row.get::<String>(1)?).map_err(|e| corrupt("sessions", e))?,
        parent: match row.get::<Option<String>>(2)? {
            Some(_) => Some(row.session_id(2)?),
            None => None,
        },
        created_ms: row.get(3)?,
        event_count: row.seq(4)?,
    })
}

const SESSION_COLUMNS: &str = "SELECT id, agent, parent, created_ms, last_seq FROM sessions";

const MODEL_CALL_COLUMNS: &str = "SELECT id, at_seq, created_ms, receipt, usage FROM model_calls";

/// A `model_calls` row selected with [`MODEL_CALL_COLUMNS`].
fn model_call(row: &Cols<'_, '_>, session: &SessionId) -> Result<ModelCall> {
    Ok(ModelCall {
        id: row.get(0)?,
        call: NewModelCall {
            session: session.clone(),
            at_seq: row.seq(1)?,
            created_ms: row.get(2)?,
            receipt: row.json(3)?,
        },
        usage: row.opt_json(4)?,
    })
}

impl Store for SqliteStore {
    fn create_session(&self, session: &NewSession, events: &[NewEvent]) -> Result<SessionInfo> {
        self.write(|tx| rules::create(&mut Rows(tx), session, events))
    }

    fn create_sessions(
        &self,
        sessions: &[(NewSession, Vec<NewEvent>)],
    ) -> Result<Vec<SessionInfo>> {
        // One transaction for the batch: a bulk import pays one durable commit, not one per
        // session, and a failure leaves none of the batch behind.
        self.write(|tx| {
            sessions
                .iter()
                .map(|(session, events)| rules::create(&mut Rows(tx), session, events))
                .collect()
        })
    }

    fn delete_session(&self, id: &SessionId) -> Result<bool> {
        self.write(|tx| rules::delete(&mut Rows(tx), id))
    }

    fn session(&self, id: &SessionId) -> Result<Option<SessionInfo>> {
        let found = query_all(
            &self.lock(),
            &format!("{SESSION_COLUMNS} WHERE id = ?1"),
            [id.as_str()],
            ("sessions", "reading a session"),
            session_info,
        )?;
        Ok(found.into_iter().next())
    }

    fn sessions(&self) -> Result<Vec<SessionInfo>> {
        query_all(
            &self.lock(),
            &format!("{SESSION_COLUMNS} ORDER BY id"),
            [],
            ("sessions", "listing sessions"),
            session_info,
        )
    }

    fn append(&self, session: &SessionId, events: &[NewEvent]) -> Result<RangeInclusive<Seq>> {
        self.write(|tx| rules::append(&mut Rows(tx), session, events))
    }

    fn append_reply(
        &self,
        session: &SessionId,
        events: &[NewEvent],
        usage: Option<(u64, &Usage)>,
    ) -> Result<RangeInclusive<Seq>> {
        // One transaction, so one durable commit on the reply's path instead of two.
        self.write(|tx| rules::append_reply(&mut Rows(tx), session, events, usage))
    }

    fn read(&self, session: &SessionId, range: RangeInclusive<Seq>) -> Result<Vec<Event>> {
        self.read_tx(|tx| {
            let SessionRow { pk, .. } = require_session(tx, session)?;
            query_all(
                tx,
                "SELECT seq, ts_ms, body FROM events
                 WHERE session = ?1 AND seq BETWEEN ?2 AND ?3 ORDER BY seq",
                params![pk, seq_bound(*range.start()), seq_bound(*range.end())],
                ("events", "reading events"),
                |row| {
                    Ok(Event {
                        seq: row.seq(0)?,
                        ts_ms: row.get(1)?,
                        body: row.json(2)?,
                    })
                },
            )
        })
    }

    fn latest_seq(&self, session: &SessionId) -> Result<Seq> {
        Ok(require_session(&self.lock(), session)?.last_seq)
    }

    fn tool_calls(&self, session: &SessionId) -> Result<Vec<ToolCallRecord>> {
        self.read_tx(|tx| {
            let SessionRow { pk, .. } = require_session(tx, session)?;
            query_all(
                tx,
                "SELECT call_id, tool_name, call_seq, status, result_seq FROM tool_calls
                 WHERE session = ?1 ORDER BY call_seq, call_id",
                [pk],
                ("tool_calls", "listing tool calls"),
                |row| {
                    Ok(ToolCallRecord {
                        call_id: row.get(0)?,
                        tool_name: row.get(1)?,
                        call_seq: row.seq(2)?,
                        status: parse_status(&row.get::<String>(3)?)?,
                        result_seq: row.opt_seq(4)?,
                    })
                },
            )
        })
    }

    fn expire_tool_call(&self, session: &SessionId, call_id: &str) -> Result<()> {
        self.write(|tx| rules::expire_call(&mut Rows(tx), session, call_id))
    }

    fn put_summary(&self, summary: &NewSummary) -> Result<Summary> {
        self.write(|tx| rules::put_summary(&mut Rows(tx), summary))
    }

    fn summaries(&self, session: &SessionId) -> Result<Vec<Summary>> {
        self.read_tx(|tx| {
            let SessionRow { pk, .. } = require_session(tx, session)?;
            query_all(
                tx,
                "SELECT version, from_seq, to_seq, content, producer, created_ms
                 FROM summaries WHERE session = ?1 ORDER BY version",
                [pk],
                ("summaries", "listing summaries"),
                |row| {
                    Ok(Summary {
                        version: row.get(0)?,
                        summary: NewSummary {
                            session: session.clone(),
                            from_seq: row.seq(1)?,
                            to_seq: row.seq(2)?,
                            content: row.get(3)?,
                            producer: row.get(4)?,
                            created_ms: row.get(5)?,
                        },
                    })
                },
            )
        })
    }

    fn record_model_call(&self, call: &NewModelCall) -> Result<ModelCall> {
        self.write(|tx| rules::record_model_call(&mut Rows(tx), call))
    }

    fn model_calls(&self, session: &SessionId) -> Result<Vec<ModelCall>> {
        self.read_tx(|tx| {
            let SessionRow { pk, .. } = require_session(tx, session)?;
            query_all(
                tx,
                &format!("{MODEL_CALL_COLUMNS} WHERE session = ?1 ORDER BY id"),
                [pk],
                ("model_calls", "listing model calls"),
                |row| model_call(row, session),
            )
        })
    }

    fn model_calls_after(&self, session: &SessionId, after: u64) -> Result<Vec<ModelCall>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        self.read_tx(|tx| {
            let SessionRow { pk, .. } = require_session(tx, session)?;
            query_all(
                tx,
                &format!("{MODEL_CALL_COLUMNS} WHERE session = ?1 AND id > ?2 ORDER BY id"),
                rusqlite::params![pk, after],
                ("model_calls", "listing model calls"),
                |row| model_call(row, session),
            )
        })
    }

    fn last_model_call(&self, session: &SessionId) -> Result<Option<ModelCall>> {
        self.read_tx(|tx| {
            let SessionRow { pk, .. } = require_session(tx, session)?;
            Ok(query_all(
                tx,
                &format!("{MODEL_CALL_COLUMNS} WHERE session = ?1 ORDER BY id DESC LIMIT 1"),
                [pk],
                ("model_calls", "reading the last model call"),
                |row| model_call(row, session),
            )?
            .pop())
        })
    }

    fn report_usage(&self, session: &SessionId, call: u64, usage: &Usage) -> Result<ModelCall> {
        self.write(|tx| rules::report_usage(&mut Rows(tx), session, call, usage))
    }

    fn put_steps(&self, session: &SessionId, steps: &[StepRecord]) -> Result<()> {
        // Steps are derived from the log: they need not be durable before the caller goes on.
        self.write_deferred(|tx| rules::put_steps(&mut Rows(tx), session, steps))
    }

    fn steps(&self, session: &SessionId) -> Result<Vec<StepRecord>> {
        self.steps_after(session, 0)
    }

    fn steps_after(&self, session: &SessionId, after: Seq) -> Result<Vec<StepRecord>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        self.read_tx(|tx| {
            let SessionRow { pk, .. } = require_session(tx, session)?;
            query_all(
                tx,
                "SELECT id, call_id, result_seq, body FROM steps
                 WHERE session = ?1 AND result_seq > ?2 ORDER BY result_seq, id",
                rusqlite::params![pk, after],
                ("steps", "listing steps"),
                |row| {
                    Ok(StepRecord {
                        id: row.get(0)?,
                        call_id: row.get(1)?,
                        result_seq: row.seq(2)?,
                        body: row.json(3)?,
                    })
                },
            )
        })
    }

    fn put_alias(&self, session: &SessionId, alias: &BlobAlias, blob: &BlobRef) -> Result<()> {
        // Aliases are derived from the log, as steps are.
        self.write_deferred(|tx| rules::put_alias(&mut Rows(tx), session, alias, blob))
    }

    fn resolve_alias(&self, session: &SessionId, alias: &BlobAlias) -> Result<Option<BlobRef>> {
        self.read_tx(|tx| {
            let SessionRow { pk, .. } = require_session(tx, session)?;
            log::stored_alias(tx, pk, alias)
        })
    }
}

impl KeyStore for SqliteStore {
    fn create_key(&self, key: &NewApiKey) -> Result<ApiKey> {
        self.write(|tx| crate::keys::create(&mut Rows(tx), key))
    }

    fn key_by_hash(&self, hash: &str) -> Result<Option<ApiKey>> {
        keys::by_hash(&self.lock(), hash)
    }

    fn keys(&self) -> Result<Vec<ApiKey>> {
        keys::all(&self.lock())
    }

    fn revoke_key(&self, id: &str, now_ms: i64) -> Result<ApiKey> {
        self.write(|tx| crate::keys::revoke(&mut Rows(tx), id, now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_durable_wal() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("t.db")).unwrap();
        let conn = store.lock();
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        let sync: i64 = conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        let fks: i64 = conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        assert_eq!(sync, 2, "synchronous must be FULL (2)");
        assert_eq!(fks, 1);
    }

    #[test]
    fn appended_events_read_back_after_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let id = SessionId::new("s").unwrap();
        let event = |text: &str| {
            NewEvent::new(
                7,
                loom_core::EventBody::User {
                    content: text.into(),
                    name: None,
                },
            )
        };
        {
            let store = SqliteStore::open(&path).unwrap();
            let session = NewSession {
                id: id.clone(),
                agent: AgentId::new("a").unwrap(),
                parent: None,
                created_ms: 1,
            };
            store.create_session(&session, &[event("one")]).unwrap();
            assert_eq!(store.append(&id, &[event("two")]).unwrap(), 2..=2);
        }
        let store = SqliteStore::open(&path).unwrap();
        let events = store.read(&id, 1..=Seq::MAX).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].body, event("two").body);
        assert_eq!(store.sessions().unwrap()[0].event_count, 2);
    }
}
