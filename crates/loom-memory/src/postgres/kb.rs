//! The knowledge base in PostgreSQL: chunks of files with their line ranges, per scope, found
//! by the same English full text and BM25 as memory items ([`super::search::bm25_sql`]), with
//! the SQLite backend's results contract ([`crate::kb::pack`]).
//!
//! A scope's statistics (its chunk count and average length, each term's matches) are counted
//! at search time: a knowledge base is a few files, not a memory's hundred thousand items.

use postgres::Transaction;

use crate::error::{postgres as backend, MemoryError, Result};
use crate::kb::{pack, Chunk, FileKind, KbAdded, KbFile, KbHit};
use crate::text;

use super::search::{bm25_sql, lexeme, terms_cte};
use crate::bm25::idf;

/// Candidates read per requested hit (some of the best may not fit the budget).
const CANDIDATES_PER_HIT: usize = 4;
/// The fewest candidates read, for small limits.
const MIN_CANDIDATES: usize = 64;

/// Holds `scope`'s knowledge base until commit, so that two servers adding the same file at
/// once leave one version of it, never a mix of both.
fn lock(tx: &mut Transaction<'_>, scope: &str) -> Result<()> {
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('loom kb ' || $1))",
        &[&scope],
    )
    .map_err(backend("locking a knowledge base"))?;
    Ok(())
}

fn count(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Stores `chunks` (with their token counts) of the file `path` (content hash `hash`) in
/// `scope`, replacing the chunks of an earlier version; the same content again changes nothing.
pub(super) fn add(
    tx: &mut Transaction<'_>,
    scope: &str,
    path: &str,
    hash: &str,
    chunks: &[(Chunk, u64)],
    now_ms: i64,
) -> Result<KbAdded> {
    lock(tx, scope)?;
    let kind = FileKind::of(path);
    let old: Option<String> = tx
        .query_opt(
            "SELECT hash FROM kb_files WHERE scope = $1 AND path = $2",
            &[&scope, &path],
        )
        .map_err(backend("looking up a knowledge-base file"))?
        .map(|r| r.get(0));
    if old.as_deref() == Some(hash) {
        let n: i64 = tx
            .query_one(
                "SELECT count(*) FROM kb_chunks WHERE scope = $1 AND path = $2",
                &[&scope, &path],
            )
            .map_err(backend("counting a file's chunks"))?
            .get(0);
        return Ok(KbAdded {
            path: path.to_owned(),
            kind,
            chunks: usize::try_from(n).unwrap_or(0),
            replaced: 0,
            unchanged: true,
        });
    }
    let replaced = tx
        .execute(
            "DELETE FROM kb_chunks WHERE scope = $1 AND path = $2",
            &[&scope, &path],
        )
        .map_err(backend("removing a file's chunks"))?;
    tx.execute(
        "INSERT INTO kb_files (scope, path, kind, hash, added_ms) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (scope, path) DO UPDATE SET kind = excluded.kind, hash = excluded.hash,
           added_ms = excluded.added_ms",
        &[&scope, &path, &kind.as_str(), &hash, &now_ms],
    )
    .map_err(backend("recording a knowledge-base file"))?;
    let insert = tx
        .prepare(
            "INSERT INTO kb_chunks (scope, path, from_line, to_line, heading, text, tokens, words)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .map_err(backend("writing a knowledge-base chunk"))?;
    for (c, tokens) in chunks {
        let line = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
        // The heading is searchable with the text (the generated `tsv` holds both), so its
        // words count in the chunk's length too.
        let words = match &c.heading {
            Some(h) => text::word_set(&format!("{h}\n{}", c.text)).len(),
            None => text::word_set(&c.text).len(),
        };
        tx.execute(
            &insert,
            &[
                &scope,
                &path,
                &line(c.from_line),
                &line(c.to_line),
                &c.heading,
                &c.text,
                &i64::try_from(*tokens).unwrap_or(i64::MAX),
                &i32::try_from(words).unwrap_or(i32::MAX),
            ],
        )
        .map_err(backend("writing a knowledge-base chunk"))?;
    }
    Ok(KbAdded {
        path: path.to_owned(),
        kind,
        chunks: chunks.len(),
        replaced: count(replaced),
        unchanged: false,
    })
}

/// Removes file `path` from `scope`; returns how many chunks it had.
pub(super) fn remove(tx: &mut Transaction<'_>, scope: &str, path: &str) -> Result<usize> {
    lock(tx, scope)?;
    let chunks = tx
        .execute(
            "DELETE FROM kb_chunks WHERE scope = $1 AND path = $2",
            &[&scope, &path],
        )
        .map_err(backend("removing a file's chunks"))?;
    let gone = tx
        .execute(
            "DELETE FROM kb_files WHERE scope = $1 AND path = $2",
            &[&scope, &path],
        )
        .map_err(backend("removing a knowledge-base file"))?;
    if gone == 0 {
        return Err(MemoryError::InvalidInput {
            field: "file",
            reason: format!("{path} is not in the knowledge base (see `loom kb list`)"),
        });
    }
    Ok(count(chunks))
}

/// The files of `scope`, by path (byte order, as SQLite sorts them).
pub(super) fn list(tx: &mut Transaction<'_>, scope: &str) -> Result<Vec<KbFile>> {
    tx.query(
        "SELECT f.path, f.kind, f.added_ms, count(c.id), coalesce(sum(c.tokens), 0)::bigint
         FROM kb_files f LEFT JOIN kb_chunks c ON c.scope = f.scope AND c.path = f.path
         WHERE f.scope = $1 GROUP BY f.path, f.kind, f.added_ms ORDER BY f.path COLLATE \"C\"",
        &[&scope],
    )
    .map_err(backend("listing the knowledge base"))?
    .iter()
    .map(|r| {
        Ok(KbFile {
            path: r.try_get(0)?,
            kind: r.try_get(1)?,
            added_ms: r.try_get(2)?,
            chunks: usize::try_from(r.try_get::<_, i64>(3)?).unwrap_or(0),
            tokens: u64::try_from(r.try_get::<_, i64>(4)?).unwrap_or(0),
        })
    })
    .collect::<std::result::Result<_, postgres::Error>>()
    .map_err(backend("reading the knowledge base's files"))
}

/// The chunks of `scope` best matching `query` by BM25, best first, whose tokens sum to at most
/// `budget`, at most `limit` of them; a chunk that does not fit is skipped.
pub(super) fn search(
    tx: &mut Transaction<'_>,
    scope: &str,
    query: &str,
    budget: u64,
    limit: usize,
) -> Result<Vec<KbHit>> {
    let terms = text::query_terms(query);
    if terms.is_empty() || budget == 0 || limit == 0 {
        return Ok(Vec::new());
    }
    let lexemes: Vec<String> = terms.iter().map(|t| lexeme(t)).collect();
    let size = tx
        .query_one(
            "SELECT count(*), coalesce(avg(words), 1)::float8 FROM kb_chunks WHERE scope = $1",
            &[&scope],
        )
        .map_err(backend("reading the knowledge base's size"))?;
    let (chunks, avg_words): (i64, f64) = (size.get(0), size.get(1));
    let (kept, weights): (Vec<String>, Vec<f64>) = tx
        .query(
            "SELECT t.q, (SELECT count(*) FROM kb_chunks
                          WHERE scope = $2 AND tsv @@ to_tsquery('english', t.q))
             FROM unnest($1::text[]) WITH ORDINALITY AS t(q, n) ORDER BY t.n",
            &[&lexemes, &scope],
        )
        .map_err(backend("counting a term's matches"))?
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
        .filter(|&(_, df)| df > 0)
        .map(|(t, df)| (t, idf(chunks, df)))
        .unzip();
    if kept.is_empty() {
        return Ok(Vec::new());
    }
    let candidates = limit
        .saturating_mul(CANDIDATES_PER_HIT)
        .max(MIN_CANDIDATES)
        .min(i64::MAX as usize);
    let sql = format!(
        "WITH {terms}
         SELECT c.path, c.from_line, c.to_line, c.heading, c.text, c.tokens, {score} AS score
         FROM kb_chunks c, a
         WHERE c.tsv @@ a.q AND c.scope = $4 AND c.tokens <= $5
         ORDER BY score DESC, c.id LIMIT {candidates}",
        terms = terms_cte("english"),
        score = bm25_sql("c", "$3::float8"),
    );
    let budget_i = i64::try_from(budget).unwrap_or(i64::MAX);
    let rows = tx
        .query(
            &sql,
            &[&kept, &weights, &avg_words.max(1.0), &scope, &budget_i],
        )
        .map_err(backend("searching the knowledge base"))?;
    let hits = rows
        .iter()
        .map(hit)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(backend("reading a knowledge-base hit"))?;
    Ok(pack(hits, budget, limit))
}

/// A row of [`search`]'s statement as a hit.
fn hit(r: &postgres::Row) -> std::result::Result<KbHit, postgres::Error> {
    let line =
        |i: usize| Ok::<_, postgres::Error>(u32::try_from(r.try_get::<_, i32>(i)?).unwrap_or(0));
    Ok(KbHit {
        path: r.try_get(0)?,
        from_line: line(1)?,
        to_line: line(2)?,
        heading: r.try_get(3)?,
        text: r.try_get(4)?,
        tokens: u64::try_from(r.try_get::<_, i64>(5)?).unwrap_or(u64::MAX),
        score: r.try_get(6)?,
    })
}
