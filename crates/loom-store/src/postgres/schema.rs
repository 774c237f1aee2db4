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
const MIGRATIONS: &[Migration] = &[
    Migration {
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
    },
    Migration {
        version: 2,
        name: "a call's turn, and a small blob, each written in one statement",
        sql: TURN_FUNCTION,
    },
];

/// `loom_write_turn`: one call's turn (see `Store::write_turn`) as one statement, so that a
/// server writes it in one round trip. The caller has checked the events against the ledger it
/// holds and passes, for each call they name, the status it believes stored (`''`: absent) and the
/// state after the turn. The function locks the session's row and refuses the turn with SQLSTATE
/// `LM409` when the log is not `p_after` events long, a named call's status is not the one
/// believed, an alias points elsewhere, or the usage is already reported (the caller then takes
/// the long way, which says which); `LM404` when the session does not exist. It runs as one
/// statement, so a refusal leaves nothing behind. Returns the receipt's id, or NULL.
const TURN_FUNCTION: &str = r#"
    CREATE FUNCTION loom_write_turn(
        p_session TEXT, p_after BIGINT,
        p_ts BIGINT[], p_kinds TEXT[], p_bodies TEXT[],
        p_call_ids TEXT[], p_call_before TEXT[], p_call_tools TEXT[], p_call_seqs BIGINT[],
        p_call_status TEXT[], p_call_results BIGINT[],
        p_step_ids TEXT[], p_step_calls TEXT[], p_step_results BIGINT[], p_step_bodies TEXT[],
        p_aliases TEXT[], p_alias_blobs TEXT[],
        p_receipt TEXT, p_call_at BIGINT, p_call_created BIGINT,
        p_usage_call BIGINT, p_usage TEXT
    ) RETURNS BIGINT LANGUAGE plpgsql AS $fn$
    DECLARE
        v_pk   BIGINT;
        v_last BIGINT;
        v_call BIGINT;
    BEGIN
        SELECT pk, last_seq INTO v_pk, v_last FROM sessions WHERE id = p_session FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'session % not found', p_session USING ERRCODE = 'LM404';
        END IF;
        IF v_last <> p_after THEN
            RAISE EXCEPTION 'the log holds % events, not %', v_last, p_after
                USING ERRCODE = 'LM409';
        END IF;
        IF EXISTS (
            SELECT 1 FROM UNNEST(p_call_ids, p_call_before) AS b (call_id, was)
            LEFT JOIN tool_calls t ON t.session = v_pk AND t.call_id = b.call_id
            WHERE COALESCE(t.status, '') <> b.was
        ) THEN
            RAISE EXCEPTION 'a tool call changed state' USING ERRCODE = 'LM409';
        END IF;
        IF cardinality(p_ts) > 0 THEN
            INSERT INTO events (session, seq, ts_ms, kind, body)
            SELECT v_pk, p_after + e.n, e.ts_ms, e.kind, e.body
            FROM UNNEST(p_ts, p_kinds, p_bodies) WITH ORDINALITY AS e (ts_ms, kind, body, n);
            UPDATE sessions SET last_seq = p_after + cardinality(p_ts) WHERE pk = v_pk;
        END IF;
        INSERT INTO tool_calls (session, call_id, tool_name, call_seq, status, result_seq)
        SELECT v_pk, * FROM UNNEST(p_call_ids, p_call_tools, p_call_seqs, p_call_status,
                                   p_call_results)
        ON CONFLICT (session, call_id)
        DO UPDATE SET status = excluded.status, result_seq = excluded.result_seq;
        INSERT INTO steps (session, id, call_id, result_seq, body)
        SELECT v_pk, * FROM UNNEST(p_step_ids, p_step_calls, p_step_results, p_step_bodies)
        ON CONFLICT (session, id) DO UPDATE SET
            call_id = excluded.call_id, result_seq = excluded.result_seq, body = excluded.body;
        INSERT INTO aliases (session, alias, blob)
        SELECT v_pk, * FROM UNNEST(p_aliases, p_alias_blobs)
        ON CONFLICT (session, alias) DO NOTHING;
        IF EXISTS (
            SELECT 1 FROM UNNEST(p_aliases, p_alias_blobs) AS a (alias, blob)
            JOIN aliases s ON s.session = v_pk AND s.alias = a.alias
            WHERE s.blob <> a.blob
        ) THEN
            RAISE EXCEPTION 'an alias points at another blob' USING ERRCODE = 'LM409';
        END IF;
        IF p_usage IS NOT NULL THEN
            UPDATE model_calls SET usage = p_usage
            WHERE session = v_pk AND id = p_usage_call AND usage IS NULL;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'the usage of call % cannot be set here', p_usage_call
                    USING ERRCODE = 'LM409';
            END IF;
        END IF;
        IF p_receipt IS NOT NULL THEN
            INSERT INTO model_calls (session, id, at_seq, created_ms, receipt)
            SELECT v_pk, COALESCE(MAX(id), 0) + 1, p_call_at, p_call_created, p_receipt
            FROM model_calls WHERE session = v_pk
            RETURNING id INTO v_call;
        END IF;
        RETURN v_call;
    END
    $fn$;

    -- A blob of at most one chunk, in one statement: nothing is written when its hash is
    -- already stored; a writer that loses a race for the same hash removes its own chunk.
    -- Returns whether this call stored it.
    CREATE FUNCTION loom_put_blob(p_sha256 TEXT, p_data BYTEA, p_bytes BIGINT)
    RETURNS BOOLEAN LANGUAGE plpgsql AS $fn$
    DECLARE
        v_content BIGINT;
    BEGIN
        IF EXISTS (SELECT 1 FROM blobs WHERE sha256 = p_sha256) THEN
            RETURN FALSE;
        END IF;
        v_content := nextval('blob_contents');
        IF p_bytes > 0 THEN
            INSERT INTO blob_chunks (content, idx, data) VALUES (v_content, 0, p_data);
        END IF;
        INSERT INTO blobs (sha256, content, bytes, chunks)
        VALUES (p_sha256, v_content, p_bytes, CASE WHEN p_bytes > 0 THEN 1 ELSE 0 END)
        ON CONFLICT (sha256) DO NOTHING;
        IF NOT FOUND THEN
            DELETE FROM blob_chunks WHERE content = v_content;
            RETURN FALSE;
        END IF;
        RETURN TRUE;
    END
    $fn$;
"#;

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
