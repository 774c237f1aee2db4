//! The SQLite schema and its versioned migrations.
//!
//! The schema version lives in SQLite's `user_version` header field. Migrations are an ordered
//! list; opening a database applies the ones it has not seen, in one transaction, and refuses a
//! database written by a newer build rather than guessing at tables it does not know.

use rusqlite::{Connection, TransactionBehavior};

use super::backend;
use crate::{Result, StoreError};

/// One step from schema version `version - 1` to `version`.
struct Migration {
    version: i64,
    /// What the step does, for whoever reads the history.
    #[expect(dead_code, reason = "documentation for readers of the migration list")]
    name: &'static str,
    sql: &'static str,
}

/// Every migration, oldest first. Append only: a released step is never edited.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "the log and its derived records",
        sql: r#"
        -- One row per session. `last_seq` is the log's length, kept here so that appends
        -- and listings never count events.
        CREATE TABLE sessions (
            pk          INTEGER PRIMARY KEY,
            id          TEXT    NOT NULL UNIQUE,
            agent       TEXT    NOT NULL,
            parent      TEXT,
            created_ms  INTEGER NOT NULL,
            last_seq    INTEGER NOT NULL DEFAULT 0 CHECK (last_seq >= 0)
        );

        -- The log. `body` is the event's JSON (its `kind` tag included); `kind` is repeated as
        -- a column so that queries can filter on it without parsing JSON.
        CREATE TABLE events (
            session  INTEGER NOT NULL REFERENCES sessions (pk),
            seq      INTEGER NOT NULL CHECK (seq >= 1),
            ts_ms    INTEGER NOT NULL,
            kind     TEXT    NOT NULL,
            body     TEXT    NOT NULL,
            PRIMARY KEY (session, seq)
        );

        -- The ledger of tool calls, one row per call id, so that an append loads only the calls
        -- it touches.
        CREATE TABLE tool_calls (
            session     INTEGER NOT NULL REFERENCES sessions (pk),
            call_id     TEXT    NOT NULL,
            tool_name   TEXT    NOT NULL,
            call_seq    INTEGER NOT NULL,
            status      TEXT    NOT NULL
                CHECK (status IN ('pending', 'resolved', 'errored', 'expired')),
            result_seq  INTEGER,
            PRIMARY KEY (session, call_id),
            CHECK ((result_seq IS NOT NULL) = (status IN ('resolved', 'errored')))
        ) WITHOUT ROWID;

        CREATE TABLE summaries (
            session     INTEGER NOT NULL REFERENCES sessions (pk),
            version     INTEGER NOT NULL CHECK (version >= 1),
            from_seq    INTEGER NOT NULL CHECK (from_seq >= 1),
            to_seq      INTEGER NOT NULL,
            content     TEXT    NOT NULL,
            producer    TEXT    NOT NULL,
            created_ms  INTEGER NOT NULL,
            PRIMARY KEY (session, version),
            CHECK (from_seq <= to_seq)
        );

        CREATE TABLE model_calls (
            session     INTEGER NOT NULL REFERENCES sessions (pk),
            id          INTEGER NOT NULL CHECK (id >= 1),
            at_seq      INTEGER NOT NULL,
            created_ms  INTEGER NOT NULL,
            receipt     TEXT    NOT NULL,
            PRIMARY KEY (session, id)
        );

        CREATE TABLE steps (
            session     INTEGER NOT NULL REFERENCES sessions (pk),
            id          TEXT    NOT NULL,
            call_id     TEXT    NOT NULL,
            result_seq  INTEGER NOT NULL,
            body        TEXT    NOT NULL,
            PRIMARY KEY (session, id)
        );

        CREATE TABLE aliases (
            session  INTEGER NOT NULL REFERENCES sessions (pk),
            alias    TEXT    NOT NULL,
            blob     TEXT    NOT NULL,
            PRIMARY KEY (session, alias)
        ) WITHOUT ROWID;
    "#,
    },
    Migration {
        version: 2,
        name: "the provider's usage of a model call",
        sql: r#"
        -- A `Usage` as JSON, set once when the caller reports what the provider counted; NULL
        -- until then, and for every receipt recorded before this column existed.
        ALTER TABLE model_calls ADD COLUMN usage TEXT;
    "#,
    },
    Migration {
        version: 3,
        name: "api keys and their tenants",
        sql: r#"
        -- One row per API key. Only the SHA-256 of a key's secret is stored, never the secret.
        -- `hash` is UNIQUE, which is also the index every authenticated request looks its key
        -- up by. A revoked key keeps its row (`revoked_ms` set) so that it can be told apart
        -- from an unknown one.
        CREATE TABLE api_keys (
            id          TEXT    NOT NULL PRIMARY KEY,
            hash        TEXT    NOT NULL UNIQUE,
            tenant      TEXT    NOT NULL,
            agent       TEXT,
            mode        TEXT    CHECK (mode IN ('fit', 'observe')),
            created_ms  INTEGER NOT NULL,
            revoked_ms  INTEGER
        ) WITHOUT ROWID;
    "#,
    },
];

/// The newest schema version this build knows.
pub(crate) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

fn user_version(conn: &Connection) -> Result<i64> {
    conn.query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(backend("reading the schema version"))
}

fn too_new(found: i64) -> StoreError {
    StoreError::SchemaTooNew {
        found,
        supported: latest_version(),
    }
}

/// Brings the database up to [`latest_version`], or refuses it if it is newer.
pub(crate) fn migrate(conn: &mut Connection) -> Result<()> {
    // A cheap check first, so that an up-to-date database never takes the write lock.
    let found = user_version(conn)?;
    if found > latest_version() {
        return Err(too_new(found));
    }
    if found == latest_version() {
        return Ok(());
    }
    // Another process may be migrating the same file: take the write lock, then look again.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend("starting the schema migration"))?;
    let found = user_version(&tx)?;
    if found > latest_version() {
        return Err(too_new(found));
    }
    for migration in MIGRATIONS.iter().filter(|m| m.version > found) {
        tx.execute_batch(migration.sql)
            .map_err(backend("applying a schema migration"))?;
        // `user_version` is part of the database header, so it commits with the migration.
        tx.pragma_update(None, "user_version", migration.version)
            .map_err(backend("recording the schema version"))?;
    }
    tx.commit()
        .map_err(backend("committing the schema migration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_consecutive_from_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "migration {i} is out of order");
        }
    }

    #[test]
    fn migrating_twice_is_a_no_op() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(user_version(&conn).unwrap(), latest_version());
    }

    /// A database as a version-1 build left it: migration 1 only, holding one receipt.
    fn version_1_database(path: &std::path::Path) {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch(MIGRATIONS[0].sql).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute_batch(
            r#"
            INSERT INTO sessions (pk, id, agent, created_ms) VALUES (1, 's', 'agent', 1);
            INSERT INTO model_calls (session, id, at_seq, created_ms, receipt)
                VALUES (1, 1, 0, 2, '{"estimate": 120}');
            "#,
        )
        .unwrap();
    }

    #[test]
    fn a_version_1_database_is_upgraded_and_keeps_its_receipts() {
        use crate::{SqliteStore, Store, Usage};

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        version_1_database(&path);
        let id = loom_core::SessionId::new("s").unwrap();
        let usage = Usage {
            input_tokens: 130,
            cached_input_tokens: Some(64),
            output_tokens: None,
            reported_ms: 3,
        };
        {
            let store = SqliteStore::open(&path).unwrap();
            let calls = store.model_calls(&id).unwrap();
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0].call.receipt, serde_json::json!({"estimate": 120}));
            assert_eq!(calls[0].usage, None, "a receipt from before usage has none");
            store.report_usage(&id, 1, &usage).unwrap();
        }
        let conn = Connection::open(&path).unwrap();
        assert_eq!(user_version(&conn).unwrap(), latest_version());
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.model_calls(&id).unwrap()[0].usage, Some(usage));
    }
}
