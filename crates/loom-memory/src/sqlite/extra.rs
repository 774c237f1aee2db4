//! Tables added beside the versioned memory schema: note expiry (L2) and the knowledge base.
//!
//! Each is created with `CREATE … IF NOT EXISTS` when the memory is opened, so a database
//! written before them gains them on first use and the schema version is left alone.

use rusqlite::Connection;

use crate::error::{backend, Result};

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
"#;

/// Creates the tables when they are missing.
pub(crate) fn ensure(conn: &Connection) -> Result<()> {
    conn.execute_batch(SQL)
        .map_err(backend("creating the notes and knowledge-base tables"))
}
