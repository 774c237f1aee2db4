//! The memory tables and their migrations, in the log's own SQLite file.
//!
//! They are a separate table set with their own version (in `memory_schema`), so that the log's
//! migrations (SQLite's `user_version`) are never touched: memory is created on first use, and a
//! database without it is still a valid log.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use crate::error::{backend, MemoryError, Result};

/// One step from memory schema version `version - 1` to `version`. Append only.
struct Migration {
    version: i64,
    sql: &'static str,
    /// What the step computes in Rust after its SQL, over the rows already there.
    fill: Option<fn(&Connection) -> Result<()>>,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        fill: None,
        sql: r#"
    -- One row per memory item. `hash` is the SHA-256 of the normalized text (exact
    -- duplicates); `words` the size of its content-word set (near duplicates are only
    -- compared with items of a similar size); `subject`/`value` the statement's key and value
    -- when it is a short "X is Y" (supersession).
    CREATE TABLE memory_items (
        id             INTEGER PRIMARY KEY,
        agent          TEXT    NOT NULL,
        tier           TEXT    NOT NULL CHECK (tier IN ('L1', 'L2', 'L3', 'L4')),
        kind           TEXT    NOT NULL,
        text           TEXT    NOT NULL,
        tokens         INTEGER NOT NULL CHECK (tokens >= 0),
        hash           TEXT    NOT NULL,
        words          INTEGER NOT NULL,
        subject        TEXT,
        value          TEXT,
        valid_from     INTEGER NOT NULL,
        valid_to       INTEGER,
        superseded_by  INTEGER REFERENCES memory_items (id),
        CHECK ((valid_to IS NULL) = (superseded_by IS NULL))
    );
    CREATE INDEX memory_items_hash ON memory_items (agent, hash);
    CREATE INDEX memory_items_subject ON memory_items (agent, subject)
        WHERE subject IS NOT NULL;
    CREATE INDEX memory_items_superseded ON memory_items (superseded_by)
        WHERE superseded_by IS NOT NULL;

    -- Provenance: the log events an item was derived from; an item written twice has two.
    CREATE TABLE memory_sources (
        item      INTEGER NOT NULL REFERENCES memory_items (id),
        session   TEXT    NOT NULL,
        from_seq  INTEGER NOT NULL CHECK (from_seq >= 1),
        to_seq    INTEGER NOT NULL,
        ts_ms     INTEGER NOT NULL,
        PRIMARY KEY (item, session, from_seq, to_seq),
        CHECK (from_seq <= to_seq)
    ) WITHOUT ROWID;
    CREATE INDEX memory_sources_at ON memory_sources (session, from_seq, to_seq);

    -- Candidates for near duplicates: each item's sketch keys (MinHash bands of its word
    -- set, see `write::sketch`); similar items share a key. `word` holds the key.
    CREATE TABLE memory_prefix (
        agent  TEXT    NOT NULL,
        word   TEXT    NOT NULL,
        item   INTEGER NOT NULL REFERENCES memory_items (id),
        PRIMARY KEY (agent, word, item)
    ) WITHOUT ROWID;
    CREATE INDEX memory_prefix_item ON memory_prefix (item);

    -- Full text, rowid = the item's id. Porter stemming over Unicode words, so that "hiking"
    -- finds "hike".
    CREATE VIRTUAL TABLE memory_fts USING fts5 (
        text,
        tokenize = 'porter unicode61 remove_diacritics 2'
    );
    "#,
    },
    Migration {
        version: 2,
        fill: Some(super::terms::fill),
        sql: r#"
    -- Full text over the items' terms (`text::stems`, written by Loom, space-separated;
    -- rowid = the item's id): the index only finds the items holding a term, Loom ranks them
    -- (`bm25`) from the statistics below, and FTS5's own tokenizer, kept from splitting or
    -- stemming again, is the plain `ascii` one. The terms are kept as content: a search counts
    -- a term's frequency in an item from them.
    DROP TABLE memory_fts;
    CREATE VIRTUAL TABLE memory_fts USING fts5 (terms, tokenize = 'ascii', detail = 'none');

    -- Per agent and term: how many of the agent's items hold the term (BM25's document
    -- frequency); and per agent, its items and their content words (the average length).
    -- Kept as items are written and removed, so that an agent's weights depend on its own
    -- items only.
    CREATE TABLE memory_terms (
        agent  TEXT    NOT NULL,
        term   TEXT    NOT NULL,
        df     INTEGER NOT NULL CHECK (df >= 0),
        PRIMARY KEY (agent, term)
    ) WITHOUT ROWID;
    CREATE INDEX memory_terms_term ON memory_terms (term);
    CREATE TABLE memory_stats (
        agent  TEXT    PRIMARY KEY,
        items  INTEGER NOT NULL CHECK (items >= 0),
        words  INTEGER NOT NULL CHECK (words >= 0)
    ) WITHOUT ROWID;
    "#,
    },
];

/// The memory schema version this build writes.
pub(crate) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Creates the memory tables or brings them up to date, in one transaction; refuses a database
/// whose memory was written by a newer build.
pub(crate) fn migrate(conn: &mut Connection) -> Result<()> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend("starting the memory migration"))?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS memory_schema (version INTEGER NOT NULL);")
        .map_err(backend("creating the memory schema table"))?;
    let current: i64 = tx
        .query_row("SELECT max(version) FROM memory_schema", [], |r| {
            r.get::<_, Option<i64>>(0)
        })
        .optional()
        .map_err(backend("reading the memory schema version"))?
        .flatten()
        .unwrap_or(0);
    if current > latest_version() {
        return Err(MemoryError::schema_too_new(current, latest_version()));
    }
    for m in MIGRATIONS.iter().filter(|m| m.version > current) {
        tx.execute_batch(m.sql)
            .map_err(backend("creating the memory tables"))?;
        if let Some(fill) = m.fill {
            fill(&tx)?;
        }
        tx.execute(
            "INSERT INTO memory_schema (version) VALUES (?1)",
            [m.version],
        )
        .map_err(backend("recording the memory schema version"))?;
    }
    tx.execute_batch(VECTORS)
        .map_err(backend("creating the memory vectors table"))?;
    tx.commit()
        .map_err(backend("committing the memory migration"))
}

/// Each item's vector when an embedder is configured, with the model that made it (vectors of
/// different models are never compared). Created when missing rather than by a migration, so a
/// file written before vectors existed gains the table and stays readable by older builds.
/// `vector` is little-endian f32, normalized to length 1.
const VECTORS: &str = "
    CREATE TABLE IF NOT EXISTS memory_vectors (
        item    INTEGER PRIMARY KEY REFERENCES memory_items (id),
        model   TEXT    NOT NULL,
        dims    INTEGER NOT NULL CHECK (dims > 0),
        vector  BLOB    NOT NULL
    );
    CREATE INDEX IF NOT EXISTS memory_vectors_model ON memory_vectors (model);
    -- Every change to the vectors counted, so that a copy in RAM knows when it is stale.
    CREATE TABLE IF NOT EXISTS memory_vectors_generation (n INTEGER NOT NULL);
    INSERT INTO memory_vectors_generation (n)
        SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM memory_vectors_generation);
    CREATE TRIGGER IF NOT EXISTS memory_vectors_inserted AFTER INSERT ON memory_vectors
        BEGIN UPDATE memory_vectors_generation SET n = n + 1; END;
    CREATE TRIGGER IF NOT EXISTS memory_vectors_updated AFTER UPDATE ON memory_vectors
        BEGIN UPDATE memory_vectors_generation SET n = n + 1; END;
    CREATE TRIGGER IF NOT EXISTS memory_vectors_deleted AFTER DELETE ON memory_vectors
        BEGIN UPDATE memory_vectors_generation SET n = n + 1; END;
";
