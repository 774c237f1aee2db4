//! The memory tables in PostgreSQL and their migrations, beside the log's tables in the same
//! database and schema.
//!
//! As in SQLite, they are a table set with their own version (`memory_schema`), so that the
//! log's migrations are never touched and a database without memory is still a valid log.

use postgres::Client;

use crate::error::{postgres as backend, MemoryError, Result};

/// One step from memory schema version `version - 1` to `version`. Append only.
struct Migration {
    version: i64,
    sql: &'static str,
}

const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    sql: r#"
    -- One row per memory item; the columns mean what they mean in the SQLite backend. `tsv` is
    -- the text's English full-text vector (Snowball stemming, stop words out), kept by
    -- PostgreSQL itself.
    CREATE TABLE memory_items (
        id             BIGSERIAL PRIMARY KEY,
        agent          TEXT    NOT NULL,
        tier           TEXT    NOT NULL CHECK (tier IN ('L1', 'L2', 'L3', 'L4')),
        kind           TEXT    NOT NULL,
        text           TEXT    NOT NULL,
        tokens         BIGINT  NOT NULL CHECK (tokens >= 0),
        hash           TEXT    NOT NULL,
        words          INTEGER NOT NULL,
        subject        TEXT,
        value          TEXT,
        valid_from     BIGINT  NOT NULL,
        valid_to       BIGINT,
        superseded_by  BIGINT REFERENCES memory_items (id),
        tsv            tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
        CHECK ((valid_to IS NULL) = (superseded_by IS NULL))
    );
    CREATE INDEX memory_items_hash ON memory_items (agent, hash);
    CREATE INDEX memory_items_subject ON memory_items (agent, subject)
        WHERE subject IS NOT NULL;
    CREATE INDEX memory_items_superseded ON memory_items (superseded_by)
        WHERE superseded_by IS NOT NULL;
    CREATE INDEX memory_items_tsv ON memory_items USING GIN (tsv);

    CREATE TABLE memory_sources (
        item      BIGINT  NOT NULL REFERENCES memory_items (id),
        session   TEXT    NOT NULL,
        from_seq  BIGINT  NOT NULL CHECK (from_seq >= 1),
        to_seq    BIGINT  NOT NULL,
        ts_ms     BIGINT  NOT NULL,
        PRIMARY KEY (item, session, from_seq, to_seq),
        CHECK (from_seq <= to_seq)
    );
    CREATE INDEX memory_sources_at ON memory_sources (session, from_seq, to_seq);

    CREATE TABLE memory_prefix (
        agent  TEXT    NOT NULL,
        word   TEXT    NOT NULL,
        item   BIGINT  NOT NULL REFERENCES memory_items (id),
        PRIMARY KEY (agent, word, item)
    );
    CREATE INDEX memory_prefix_item ON memory_prefix (item);

    -- Per agent: how many items it has and their content words in all, for BM25's inverse
    -- document frequency and length norm without counting at every search.
    CREATE TABLE memory_stats (
        agent  TEXT   PRIMARY KEY,
        items  BIGINT NOT NULL CHECK (items >= 0),
        words  BIGINT NOT NULL CHECK (words >= 0)
    );
    "#,
}];

/// The memory schema version this build writes.
pub(crate) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Creates the memory tables or brings them up to date, in one transaction; refuses a database
/// whose memory was written by a newer build. Servers starting together wait for each other on
/// an advisory lock, so the tables are created once.
pub(crate) fn migrate(client: &mut Client) -> Result<()> {
    let mut tx = client
        .transaction()
        .map_err(backend("starting the memory migration"))?;
    tx.batch_execute(
        "SELECT pg_advisory_xact_lock(hashtext('loom memory schema'));
         CREATE TABLE IF NOT EXISTS memory_schema (version BIGINT NOT NULL);",
    )
    .map_err(backend("creating the memory schema table"))?;
    let current: i64 = tx
        .query_one("SELECT coalesce(max(version), 0) FROM memory_schema", &[])
        .and_then(|r| r.try_get(0))
        .map_err(backend("reading the memory schema version"))?;
    if current > latest_version() {
        return Err(MemoryError::schema_too_new(current, latest_version()));
    }
    for m in MIGRATIONS.iter().filter(|m| m.version > current) {
        tx.batch_execute(m.sql)
            .map_err(backend("creating the memory tables"))?;
        tx.execute(
            "INSERT INTO memory_schema (version) VALUES ($1)",
            &[&m.version],
        )
        .map_err(backend("recording the memory schema version"))?;
    }
    // Tables added beside the versioned set (as in SQLite): a database written before them
    // gains them on first use.
    tx.batch_execute(EXTRA)
        .map_err(backend("creating the notes tables"))?;
    tx.commit()
        .map_err(backend("committing the memory migration"))
}

/// When an L2 note expires (UTC milliseconds); notes without a row never do.
const EXTRA: &str = "
    CREATE TABLE IF NOT EXISTS memory_expiry (
        item        BIGINT PRIMARY KEY REFERENCES memory_items (id),
        expires_ms  BIGINT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS memory_expiry_at ON memory_expiry (expires_ms);
";
