//! The PostgreSQL schema and its versioned migrations.
//!
//! Applied migrations are rows of `loom_migrations`; the schema's version is the highest one.
//! Opening a store applies the migrations the database has not seen, in one transaction under an
//! advisory lock (several servers starting at once migrate once), and refuses a database written
//! by a newer build rather than guessing at tables it does not know.
//!
//! Text keys are declared `COLLATE "C"`, so that every listing is in byte order, as SQLite and
//! the in-memory reference order them, whatever the database's locale.

use postgres::Client;

use super::db::backend;
use crate::{Result, StoreError};

/// One step from schema version `version - 1` to `version`.
struct Migration {
    version: i64,
    /// What the step does; recorded beside the version for whoever reads the database.
    name: &'static str,
    sql: &'static str,
}

/// Every migration, oldest first. Append only: a released step is never edited.
const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "the log, its derived records, api keys and blobs",
    sql: r#"
        -- One row per session. `last_seq` is the log's length; appends lock this row
        -- (`SELECT ... FOR UPDATE`), which is what keeps seqs contiguous and unique when several
        -- servers append to one session.
        CREATE TABLE sessions (
            pk          BIGSERIAL PRIMARY KEY,
            id          TEXT COLLATE "C" NOT NULL UNIQUE,
            agent       TEXT   NOT NULL,
            parent      TEXT COLLATE "C",
            created_ms  BIGINT NOT NULL,
            last_seq    BIGINT NOT NULL DEFAULT 0 CHECK (last_seq >= 0)
        );

        -- The log. `body` is the event's JSON as text (not jsonb, which would reorder keys and
        -- renormalise numbers); `kind` is repeated so that queries can filter without parsing.
        CREATE TABLE events (
            session  BIGINT NOT NULL REFERENCES sessions (pk),
            seq      BIGINT NOT NULL CHECK (seq >= 1),
            ts_ms    BIGINT NOT NULL,
            kind     TEXT   NOT NULL,
            body     TEXT   NOT NULL,
            PRIMARY KEY (session, seq)
        );

        CREATE TABLE tool_calls (
            session     BIGINT NOT NULL REFERENCES sessions (pk),
            call_id     TEXT COLLATE "C" NOT NULL,
            tool_name   TEXT   NOT NULL,
            call_seq    BIGINT NOT NULL,
            status      TEXT   NOT NULL
                CHECK (status IN ('pending', 'resolved', 'errored', 'expired')),
            result_seq  BIGINT,
            PRIMARY KEY (session, call_id),
            CHECK ((result_seq IS NOT NULL) = (status IN ('resolved', 'errored')))
        );

        CREATE TABLE summaries (
            session     BIGINT NOT NULL REFERENCES sessions (pk),
            version     BIGINT NOT NULL CHECK (version >= 1),
            from_seq    BIGINT NOT NULL CHECK (from_seq >= 1),
            to_seq      BIGINT NOT NULL,
            content     TEXT   NOT NULL,
            producer    TEXT   NOT NULL,
            created_ms  BIGINT NOT NULL,
            PRIMARY KEY (session, version),
            CHECK (from_seq <= to_seq)
        );

        -- `usage` is a `Usage` as JSON, set once when the caller reports what the provider
        -- counted.
        CREATE TABLE model_calls (
            session     BIGINT NOT NULL REFERENCES sessions (pk),
            id          BIGINT NOT NULL CHECK (id >= 1),
            at_seq      BIGINT NOT NULL,
            created_ms  BIGINT NOT NULL,
            receipt     TEXT   NOT NULL,
            usage       TEXT,
            PRIMARY KEY (session, id)
        );

        CREATE TABLE steps (
            session     BIGINT NOT NULL REFERENCES sessions (pk),
            id          TEXT COLLATE "C" NOT NULL,
            call_id     TEXT   NOT NULL,
            result_seq  BIGINT NOT NULL,
            body        TEXT   NOT NULL,
            PRIMARY KEY (session, id)
        );

        CREATE TABLE aliases (
            session  BIGINT NOT NULL REFERENCES sessions (pk),
            alias    TEXT COLLATE "C" NOT NULL,
            blob     TEXT   NOT NULL,
            PRIMARY KEY (session, alias)
        );

        -- Only the SHA-256 of a key's secret is stored. `hash` is UNIQUE, which is also the
        -- index every authenticated request looks its key up by.
        CREATE TABLE api_keys (
            id          TEXT COLLATE "C" NOT NULL PRIMARY KEY,
            hash        TEXT   NOT NULL UNIQUE,
            tenant      TEXT   NOT NULL,
            agent       TEXT,
            mode        TEXT   CHECK (mode IN ('fit', 'observe')),
            created_ms  BIGINT NOT NULL,
            revoked_ms  BIGINT
        );

        -- Blobs: `blobs` names each stored content by its SHA-256; the bytes are the rows of
        -- `blob_chunks` under the content's id, in order. A content is written under a fresh id
        -- before its hash is known, and becomes a blob when its `blobs` row commits.
        CREATE SEQUENCE blob_contents;
        CREATE TABLE blobs (
            sha256   TEXT   NOT NULL PRIMARY KEY,
            content  BIGINT NOT NULL UNIQUE,
            bytes    BIGINT NOT NULL CHECK (bytes >= 0),
            chunks   BIGINT NOT NULL CHECK (chunks >= 0)
        );
        CREATE TABLE blob_chunks (
            content  BIGINT NOT NULL,
            idx      BIGINT NOT NULL CHECK (idx >= 0),
            data     BYTEA  NOT NULL,
            PRIMARY KEY (content, idx)
        );
        -- Outputs are often already compressed, and the hash is checked on every read anyway:
        -- storing chunks uncompressed saves the CPU of compressing them.
        ALTER TABLE blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
    "#,
}];

/// The table of applied migrations.
const CREATE_MIGRATIONS: &str = "CREATE TABLE IF NOT EXISTS loom_migrations (
    version     BIGINT PRIMARY KEY,
    name        TEXT   NOT NULL,
    applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
)";

/// The newest schema version this build knows.
pub(super) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

fn too_new(found: i64) -> StoreError {
    StoreError::SchemaTooNew {
        found,
        supported: latest_version(),
    }
}

/// The database's schema version (0 when nothing was ever applied).
fn current(client: &mut impl postgres::GenericClient) -> Result<i64> {
    let exists: bool = client
        .query_one("SELECT to_regclass('loom_migrations') IS NOT NULL", &[])
        .and_then(|row| row.try_get(0))
        .map_err(backend("reading the schema version"))?;
    if !exists {
        return Ok(0);
    }
    client
        .query_one("SELECT COALESCE(MAX(version), 0) FROM loom_migrations", &[])
        .and_then(|row| row.try_get(0))
        .map_err(backend("reading the schema version"))
}

/// Brings the database up to [`latest_version`], or refuses it if it is newer; returns the
/// version it is at.
pub(super) fn migrate(client: &mut Client) -> Result<i64> {
    // A cheap check first, so that an up-to-date database takes no lock.
    let found = current(client)?;
    if found > latest_version() {
        return Err(too_new(found));
    }
    if found == latest_version() {
        return Ok(found);
    }
    let mut tx = client
        .transaction()
        .map_err(backend("starting the schema migration"))?;
    // Servers starting together queue here; the lock is per schema, so stores in other schemas
    // of the same database do not wait for each other.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('loom migrations ' || current_schema()))",
        &[],
    )
    .map_err(backend("locking the schema for migration"))?;
    tx.batch_execute(CREATE_MIGRATIONS)
        .map_err(backend("creating the migrations table"))?;
    let found = current(&mut tx)?;
    if found > latest_version() {
        return Err(too_new(found));
    }
    for migration in MIGRATIONS.iter().filter(|m| m.version > found) {
        tx.batch_execute(migration.sql)
            .map_err(backend("applying a schema migration"))?;
        tx.execute(
            "INSERT INTO loom_migrations (version, name) VALUES ($1, $2)",
            &[&migration.version, &migration.name],
        )
        .map_err(backend("recording the schema version"))?;
    }
    tx.commit()
        .map_err(backend("committing the schema migration"))?;
    Ok(latest_version())
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
}
