//! Tables added beside the versioned memory schema: note expiry (L2), the knowledge base and
//! the LLM extractor's marks.
//!
//! Each is created with `CREATE … IF NOT EXISTS` when the memory is opened, so a database
//! written before them gains them on first use and the schema version is left alone.

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{backend, Result};
use crate::extract::ExtractMark;

const SQL: &str = r#"
-- When an L2 note expires (UTC milliseconds); notes without a row never do.
CREATE TABLE IF NOT EXISTS memory_expiry (
    item        INTEGER PRIMARY KEY REFERENCES memory_items (id),
    expires_ms  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_expiry_at ON memory_expiry (expires_ms);

-- The knowledge base: files added by `loom kb add`, per scope (the local user's is '', a
-- server tenant's is its name), with the hash of the content they were chunked from.
CREATE TABLE IF NOT EXISTS kb_files (
    scope     TEXT    NOT NULL,
    path      TEXT    NOT NULL,
    kind      TEXT    NOT NULL,
    hash      TEXT    NOT NULL,
    added_ms  INTEGER NOT NULL,
    PRIMARY KEY (scope, path)
) WITHOUT ROWID;

-- One row per chunk, with its line range in the file (1-based, inclusive).
CREATE TABLE IF NOT EXISTS kb_chunks (
    id         INTEGER PRIMARY KEY,
    scope      TEXT    NOT NULL,
    path       TEXT    NOT NULL,
    from_line  INTEGER NOT NULL CHECK (from_line >= 1),
    to_line    INTEGER NOT NULL,
    heading    TEXT,
    text       TEXT    NOT NULL,
    tokens     INTEGER NOT NULL CHECK (tokens >= 0),
    CHECK (from_line <= to_line)
);
CREATE INDEX IF NOT EXISTS kb_chunks_file ON kb_chunks (scope, path);

-- Full text of the chunks, rowid = the chunk's id; the same tokenizer as memory_fts.
CREATE VIRTUAL TABLE IF NOT EXISTS kb_fts USING fts5 (
    text,
    tokenize = 'porter unicode61 remove_diacritics 2'
);

-- How far each LLM extractor (its API and model) has read each session of an agent.
CREATE TABLE IF NOT EXISTS memory_extracted (
    agent      TEXT    NOT NULL,
    session    TEXT    NOT NULL,
    extractor  TEXT    NOT NULL,
    to_seq     INTEGER NOT NULL CHECK (to_seq >= 0),
    PRIMARY KEY (agent, session, extractor)
) WITHOUT ROWID;
"#;

/// Creates the tables when they are missing.
pub(crate) fn ensure(conn: &Connection) -> Result<()> {
    conn.execute_batch(SQL).map_err(backend(
        "creating the notes, knowledge-base and extractor tables",
    ))
}

/// How far `extractor` has read `session` for `agent` (0: not at all).
pub(crate) fn extracted_to(
    conn: &Connection,
    agent: &str,
    session: &str,
    extractor: &str,
) -> Result<u64> {
    conn.prepare_cached(
        "SELECT to_seq FROM memory_extracted WHERE agent = ?1 AND session = ?2 AND extractor = ?3",
    )
    .and_then(|mut st| {
        st.query_row(params![agent, session, extractor], |r| r.get(0))
            .optional()
    })
    .map(Option::unwrap_or_default)
    .map_err(backend("reading the extractor's mark"))
}

/// Moves the mark of `mark.extractor` on its session to `mark.to_seq` (never back).
pub(crate) fn set_mark(conn: &Connection, mark: &ExtractMark) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO memory_extracted (agent, session, extractor, to_seq) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (agent, session, extractor) DO UPDATE
         SET to_seq = max(to_seq, excluded.to_seq)",
    )
    .and_then(|mut st| {
        st.execute(params![
            mark.agent.as_str(),
            mark.session.as_str(),
            mark.extractor,
            mark.to_seq
        ])
    })
    .map(drop)
    .map_err(backend("writing the extractor's mark"))
}
