//! The memory tables in PostgreSQL and their migrations, beside the log's tables in the same
//! database and schema.
//!
//! As in SQLite, they are a table set with their own version (`memory_schema`), so that the
//! log's migrations are never touched and a database without memory is still a valid log.

use postgres::{Client, Transaction};

use crate::error::{postgres as backend, MemoryError, Result};

/// One step from memory schema version `version - 1` to `version`. Append only.
struct Migration {
    version: i64,
    sql: &'static str,
    /// What the step computes in Rust after its SQL, over the rows already there.
    fill: Option<fn(&mut Transaction<'_>) -> Result<()>>,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        fill: None,
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
    },
    Migration {
        version: 2,
        fill: None,
        sql: r#"
    -- Each item's vector when an embedder is configured, with the model that made it (vectors
    -- of different models are never compared); as given by the embedder, of length 1, so that a
    -- dot product is the cosine. Removed with its item.
    CREATE TABLE memory_vectors (
        item    BIGINT  PRIMARY KEY REFERENCES memory_items (id) ON DELETE CASCADE,
        model   TEXT    NOT NULL,
        dims    INTEGER NOT NULL CHECK (dims > 0),
        vector  real[]  NOT NULL CHECK (cardinality(vector) = dims)
    );
    CREATE INDEX memory_vectors_model ON memory_vectors (model, dims);

    -- The dot product of two vectors of one length, for the exact scan without pgvector. A
    -- loop in PL/pgSQL: measured at less than half the time of `sum(a * b)` over
    -- `unnest(a, b)`, whose set-returning call costs more than the arithmetic. Multiplied as
    -- float8: a product of two small reals underflows `real`, which PostgreSQL reports as an
    -- error rather than rounding to zero.
    CREATE OR REPLACE FUNCTION memory_dot(a real[], b real[]) RETURNS float8
        LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
    DECLARE
        s float8 := 0;
    BEGIN
        FOR i IN 1 .. coalesce(array_length(a, 1), 0) LOOP
            s := s + a[i]::float8 * b[i]::float8;
        END LOOP;
        RETURN s;
    END
    $$;

    -- The knowledge base: files added by `loom kb add`, per scope (the local user's is '', a
    -- server tenant's is its name), with the hash of the content they were chunked from.
    CREATE TABLE kb_files (
        scope     TEXT    NOT NULL,
        path      TEXT    NOT NULL,
        kind      TEXT    NOT NULL,
        hash      TEXT    NOT NULL,
        added_ms  BIGINT  NOT NULL,
        PRIMARY KEY (scope, path)
    );

    -- One row per chunk, with its line range in the file (1-based, inclusive). `tsv` is the
    -- heading and text's English full-text vector (a section is found by its title); `words`
    -- the size of their content-word set, BM25's document length.
    CREATE TABLE kb_chunks (
        id         BIGSERIAL PRIMARY KEY,
        scope      TEXT    NOT NULL,
        path       TEXT    NOT NULL,
        from_line  INTEGER NOT NULL CHECK (from_line >= 1),
        to_line    INTEGER NOT NULL,
        heading    TEXT,
        text       TEXT    NOT NULL,
        tokens     BIGINT  NOT NULL CHECK (tokens >= 0),
        words      INTEGER NOT NULL CHECK (words >= 0),
        tsv        tsvector GENERATED ALWAYS AS
                     (to_tsvector('english', coalesce(heading, '') || E'\n' || text)) STORED,
        CHECK (from_line <= to_line),
        FOREIGN KEY (scope, path) REFERENCES kb_files (scope, path) ON DELETE CASCADE
    );
    CREATE INDEX kb_chunks_file ON kb_chunks (scope, path);
    CREATE INDEX kb_chunks_tsv ON kb_chunks USING GIN (tsv);

    -- How far each LLM extractor (its API and model) has read each session of an agent.
    CREATE TABLE memory_extracted (
        agent      TEXT    NOT NULL,
        session    TEXT    NOT NULL,
        extractor  TEXT    NOT NULL,
        to_seq     BIGINT  NOT NULL CHECK (to_seq >= 0),
        PRIMARY KEY (agent, session, extractor)
    );
    "#,
    },
    Migration {
        version: 3,
        fill: None,
        sql: r#"
    -- Per agent and lexeme: how many of the agent's items hold the lexeme (BM25's document
    -- frequency), kept as items are written and removed, so a search reads its terms' weights
    -- in one lookup instead of counting their matches, and an agent's weights depend on its
    -- own items only. Filled from the items a database already has.
    CREATE TABLE memory_terms (
        agent   TEXT   NOT NULL,
        lexeme  TEXT   NOT NULL,
        df      BIGINT NOT NULL CHECK (df >= 0),
        PRIMARY KEY (agent, lexeme)
    );
    INSERT INTO memory_terms (agent, lexeme, df)
    SELECT i.agent, v.lexeme, count(*) FROM memory_items i, unnest(i.tsv) AS v
    GROUP BY i.agent, v.lexeme;
    "#,
    },
    Migration {
        version: 4,
        fill: Some(fill_terms),
        sql: r#"
    -- Each item's terms as Loom stems them (`text::stems`, space-separated), the same terms the
    -- SQLite backend indexes: filled from the items' text by Loom.
    ALTER TABLE memory_items ADD COLUMN terms TEXT NOT NULL DEFAULT '';
    "#,
    },
    Migration {
        version: 5,
        fill: None,
        sql: r#"
    -- The full-text vector is now made of those terms (the `simple` configuration keeps them as
    -- they are), so that both backends rank on one set of terms; the document frequencies are
    -- counted again over it.
    DROP INDEX memory_items_tsv;
    ALTER TABLE memory_items DROP COLUMN tsv;
    ALTER TABLE memory_items
        ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', terms)) STORED;
    CREATE INDEX memory_items_tsv ON memory_items USING GIN (tsv);
    DELETE FROM memory_terms;
    INSERT INTO memory_terms (agent, lexeme, df)
    SELECT i.agent, v.lexeme, count(*) FROM memory_items i, unnest(i.tsv) AS v
    GROUP BY i.agent, v.lexeme;
    "#,
    },
];

/// Gives the items a database already holds their terms (migration 4), a thousand at a time.
fn fill_terms(tx: &mut Transaction<'_>) -> Result<()> {
    let mut after: i64 = 0;
    loop {
        let rows = tx
            .query(
                "SELECT id, text FROM memory_items WHERE id > $1 ORDER BY id LIMIT 1000",
                &[&after],
            )
            .map_err(backend("reading the items to index"))?;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        after = last.get(0);
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        let terms: Vec<String> = rows
            .iter()
            .map(|r| crate::text::stems(r.get::<_, &str>(1)).join(" "))
            .collect();
        tx.execute(
            "UPDATE memory_items SET terms = u.terms
             FROM unnest($1::bigint[], $2::text[]) AS u(id, terms) WHERE memory_items.id = u.id",
            &[&ids, &terms],
        )
        .map_err(backend("indexing the items' terms"))?;
    }
}

/// The memory schema version this build writes.
pub(crate) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Creates the memory tables or brings them up to date, in one transaction; refuses a database
/// whose memory was written by a newer build. Servers starting together wait for each other on
/// an advisory lock, so the tables are created once. Returns whether vectors are compared by
/// pgvector (see [`pgvector`]).
pub(crate) fn migrate(client: &mut Client) -> Result<bool> {
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
        if let Some(fill) = m.fill {
            fill(&mut tx)?;
        }
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
    let pgvector = pgvector(&mut tx)?;
    tx.commit()
        .map_err(backend("committing the memory migration"))?;
    Ok(pgvector)
}

/// Gives `memory_vectors` a pgvector column, `embedding`, when the server has the extension
/// (installing it when it may): vectors are then compared by pgvector's `<=>`, in C, rather
/// than by the exact scan in SQL. Kept small on purpose — the Debian packages CI installs have
/// no pgvector, so the exact scan is the path the suite runs. Returns whether the column is
/// there and usable.
fn pgvector(tx: &mut Transaction<'_>) -> Result<bool> {
    let available: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')",
            &[],
        )
        .and_then(|r| r.try_get(0))
        .map_err(backend("looking for the pgvector extension"))?;
    if !available {
        return Ok(false);
    }
    // A role that may not create extensions still gets memory: the attempt is undone alone.
    let mut attempt = tx
        .savepoint("loom_pgvector")
        .map_err(backend("installing the pgvector extension"))?;
    let installed = attempt
        .batch_execute("CREATE EXTENSION IF NOT EXISTS vector")
        .is_ok();
    if installed {
        attempt
            .commit()
            .map_err(backend("installing the pgvector extension"))?;
    } else {
        attempt
            .rollback()
            .map_err(backend("installing the pgvector extension"))?;
    }
    // The extension lives in one schema of the database: its type must be visible from this one.
    let visible: bool = tx
        .query_one("SELECT to_regtype('vector') IS NOT NULL", &[])
        .and_then(|r| r.try_get(0))
        .map_err(backend("looking for the pgvector extension"))?;
    if !visible {
        return Ok(false);
    }
    tx.batch_execute(
        "ALTER TABLE memory_vectors ADD COLUMN IF NOT EXISTS embedding vector;
         UPDATE memory_vectors SET embedding = vector::vector WHERE embedding IS NULL;",
    )
    .map_err(backend("adding the pgvector column"))?;
    Ok(true)
}

/// When an L2 note expires (UTC milliseconds); notes without a row never do.
const EXTRA: &str = "
    CREATE TABLE IF NOT EXISTS memory_expiry (
        item        BIGINT PRIMARY KEY REFERENCES memory_items (id),
        expires_ms  BIGINT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS memory_expiry_at ON memory_expiry (expires_ms);
";
