//! The knowledge base's storage and search: chunks of files with their line ranges, a full-text
//! index over them, per scope.

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{backend, MemoryError, Result};
use crate::kb::{pack, Chunk, FileKind, KbAdded, KbFile, KbHit};
use crate::text;

/// Stores `chunks` of the file `path` (content hash `hash`) in `scope`, replacing the chunks of
/// an earlier version; the same content again changes nothing.
pub(crate) fn add(
    tx: &Connection,
    scope: &str,
    path: &str,
    hash: &str,
    chunks: &[(Chunk, u64)],
    now_ms: i64,
) -> Result<KbAdded> {
    let kind = FileKind::of(path);
    let old: Option<String> = tx
        .prepare_cached("SELECT hash FROM kb_files WHERE scope = ?1 AND path = ?2")
        .and_then(|mut st| st.query_row(params![scope, path], |r| r.get(0)).optional())
        .map_err(backend("looking up a knowledge-base file"))?;
    if old.as_deref() == Some(hash) {
        let n: i64 = tx
            .prepare_cached("SELECT count(*) FROM kb_chunks WHERE scope = ?1 AND path = ?2")
            .and_then(|mut st| st.query_row(params![scope, path], |r| r.get(0)))
            .map_err(backend("counting a file's chunks"))?;
        return Ok(KbAdded {
            path: path.to_owned(),
            kind,
            chunks: usize::try_from(n).unwrap_or(0),
            replaced: 0,
            unchanged: true,
        });
    }
    let replaced = remove_chunks(tx, scope, path)?;
    tx.prepare_cached(
        "INSERT INTO kb_files (scope, path, kind, hash, added_ms) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (scope, path) DO UPDATE SET kind = excluded.kind, hash = excluded.hash,
           added_ms = excluded.added_ms",
    )
    .and_then(|mut st| st.execute(params![scope, path, kind.as_str(), hash, now_ms]))
    .map_err(backend("recording a knowledge-base file"))?;
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO kb_chunks (scope, path, from_line, to_line, heading, text, tokens)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .map_err(backend("writing a knowledge-base chunk"))?;
    let mut fts = tx
        .prepare_cached("INSERT INTO kb_fts (rowid, text) VALUES (?1, ?2)")
        .map_err(backend("indexing a knowledge-base chunk"))?;
    for (c, tokens) in chunks {
        insert
            .execute(params![
                scope,
                path,
                c.from_line,
                c.to_line,
                c.heading,
                c.text,
                tokens
            ])
            .map_err(backend("writing a knowledge-base chunk"))?;
        let id = tx.last_insert_rowid();
        // The heading is searchable with the text, so a section is found by its title.
        let indexed = match &c.heading {
            Some(h) => format!("{h}\n{}", c.text),
            None => c.text.clone(),
        };
        fts.execute(params![id, indexed])
            .map_err(backend("indexing a knowledge-base chunk"))?;
    }
    Ok(KbAdded {
        path: path.to_owned(),
        kind,
        chunks: chunks.len(),
        replaced,
        unchanged: false,
    })
}

/// Deletes the chunks of `path` in `scope` (not the file's row); returns how many there were.
fn remove_chunks(tx: &Connection, scope: &str, path: &str) -> Result<usize> {
    let ids: Vec<i64> = tx
        .prepare_cached("SELECT id FROM kb_chunks WHERE scope = ?1 AND path = ?2")
        .and_then(|mut st| st.query_map(params![scope, path], |r| r.get(0))?.collect())
        .map_err(backend("finding a file's chunks"))?;
    let mut fts = tx
        .prepare_cached("DELETE FROM kb_fts WHERE rowid = ?1")
        .map_err(backend("removing a chunk's text index"))?;
    for id in &ids {
        fts.execute([id])
            .map_err(backend("removing a chunk's text index"))?;
    }
    tx.prepare_cached("DELETE FROM kb_chunks WHERE scope = ?1 AND path = ?2")
        .and_then(|mut st| st.execute(params![scope, path]))
        .map_err(backend("removing a file's chunks"))?;
    Ok(ids.len())
}

/// Removes file `path` from `scope`; returns how many chunks it had.
pub(crate) fn remove(tx: &Connection, scope: &str, path: &str) -> Result<usize> {
    let gone = tx
        .prepare_cached("DELETE FROM kb_files WHERE scope = ?1 AND path = ?2")
        .and_then(|mut st| st.execute(params![scope, path]))
        .map_err(backend("removing a knowledge-base file"))?;
    if gone == 0 {
        return Err(MemoryError::InvalidInput {
            field: "file",
            reason: format!("{path} is not in the knowledge base (see `loom kb list`)"),
        });
    }
    remove_chunks(tx, scope, path)
}

/// The files of `scope`, by path.
pub(crate) fn list(conn: &Connection, scope: &str) -> Result<Vec<KbFile>> {
    conn.prepare_cached(
        "SELECT f.path, f.kind, f.added_ms, count(c.id), coalesce(sum(c.tokens), 0)
         FROM kb_files f LEFT JOIN kb_chunks c ON c.scope = f.scope AND c.path = f.path
         WHERE f.scope = ?1 GROUP BY f.path ORDER BY f.path",
    )
    .and_then(|mut st| {
        st.query_map([scope], |r| {
            Ok(KbFile {
                path: r.get(0)?,
                kind: r.get(1)?,
                added_ms: r.get(2)?,
                chunks: usize::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
                tokens: u64::try_from(r.get::<_, i64>(4)?).unwrap_or(0),
            })
        })?
        .collect()
    })
    .map_err(backend("listing the knowledge base"))
}

/// A chunk as a search reads it: path, lines, heading, text, tokens and BM25 rank.
type ChunkRow = (String, u32, u32, Option<String>, String, i64, f64);

/// The chunks of `scope` best matching `query`, best first, whose tokens sum to at most
/// `budget`, at most `limit` of them. Packing is greedy: a chunk that does not fit is skipped.
pub(crate) fn search(
    conn: &Connection,
    scope: &str,
    query: &str,
    budget: u64,
    limit: usize,
) -> Result<Vec<KbHit>> {
    let terms = text::query_terms(query);
    if terms.is_empty() || budget == 0 || limit == 0 {
        return Ok(Vec::new());
    }
    let expr = terms
        .iter()
        .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" OR ");
    let candidates = i64::try_from(limit.saturating_mul(4).max(64)).unwrap_or(i64::MAX);
    let budget_i = i64::try_from(budget).unwrap_or(i64::MAX);
    let rows: Vec<ChunkRow> = conn
        .prepare_cached(
            "SELECT c.path, c.from_line, c.to_line, c.heading, c.text, c.tokens, bm25(kb_fts)
             FROM kb_fts JOIN kb_chunks c ON c.id = kb_fts.rowid
             WHERE kb_fts MATCH ?1 AND c.scope = ?2 AND c.tokens <= ?3
             ORDER BY bm25(kb_fts), c.id LIMIT ?4",
        )
        .and_then(|mut st| {
            st.query_map(params![expr, scope, budget_i, candidates], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            })?
            .collect()
        })
        .map_err(backend("searching the knowledge base"))?;
    let hits =
        rows.into_iter().map(
            |(path, from_line, to_line, heading, text, tokens, rank)| KbHit {
                path,
                from_line,
                to_line,
                heading,
                text,
                tokens: u64::try_from(tokens).unwrap_or(u64::MAX),
                score: -rank,
            },
        );
    Ok(pack(hits, budget, limit))
}
