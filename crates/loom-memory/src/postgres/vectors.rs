//! Item vectors in PostgreSQL's `memory_vectors`: written after their items, back-filled for
//! items that have none of the current model, and compared with the query's vector inside the
//! server, so that a search never pulls the vectors to the client.
//!
//! Without pgvector (CI's Debian packages have none) the comparison is an exact scan: each
//! vector of the model that passes the search's filters is dotted with the query's in the
//! server by `memory_dot` (`real[]`, unit length, so the dot product is the cosine). Its cost
//! grows with items × dimensions (see PERFORMANCE.md): fine for one agent's memory of a few
//! thousand items, slow for a hundred thousand. With pgvector the stored
//! `embedding` column is compared by its `<=>` (cosine distance) instead; still exact, as no
//! vector index is built (models differ in length, and one agent's memory is small).

use postgres::Transaction;

use crate::embed::EmbedError;
use crate::error::{postgres as backend, Result};
use crate::item::{ItemId, Search};

use super::filters::{filter_sql, refs, Param};

/// Stores `vectors` for their items under `model`, replacing any earlier vector (of another
/// model) of the same item. Items removed meanwhile are skipped.
pub(super) fn store(
    tx: &mut Transaction<'_>,
    model: &str,
    vectors: &[(ItemId, Vec<f32>)],
    pgvector: bool,
) -> Result<()> {
    let sql = if pgvector {
        "INSERT INTO memory_vectors (item, model, dims, vector, embedding)
         SELECT $1, $2, $3, $4, $4::real[]::vector
         WHERE EXISTS (SELECT 1 FROM memory_items WHERE id = $1)
         ON CONFLICT (item) DO UPDATE SET model = excluded.model, dims = excluded.dims,
           vector = excluded.vector, embedding = excluded.embedding"
    } else {
        "INSERT INTO memory_vectors (item, model, dims, vector)
         SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM memory_items WHERE id = $1)
         ON CONFLICT (item) DO UPDATE SET model = excluded.model, dims = excluded.dims,
           vector = excluded.vector"
    };
    let st = tx
        .prepare(sql)
        .map_err(backend("writing a memory vector"))?;
    for (id, v) in vectors {
        let dims = i32::try_from(v.len()).unwrap_or(i32::MAX);
        tx.execute(&st, &[id, &model, &dims, v])
            .map_err(backend("writing a memory vector"))?;
    }
    Ok(())
}

/// Up to `n` items (of `agent`, when given) that have no vector of `model`, oldest first.
pub(super) fn missing(
    tx: &mut Transaction<'_>,
    model: &str,
    agent: Option<&str>,
    n: usize,
) -> Result<Vec<(ItemId, String)>> {
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    Ok(tx
        .query(
            "SELECT i.id, i.text FROM memory_items i
             LEFT JOIN memory_vectors v ON v.item = i.id AND v.model = $1
             WHERE v.item IS NULL AND ($2::text IS NULL OR i.agent = $2)
             ORDER BY i.id LIMIT $3",
            &[&model, &agent, &n],
        )
        .map_err(backend("finding items without a vector"))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}

/// The items passing `search`'s filters ranked by cosine similarity to `query` among the
/// vectors of `model`: the best `k`, best first. A stored vector of `model` with another length
/// than the query's is an error (the model changed under the same name), as in SQLite.
pub(super) fn nearest(
    tx: &mut Transaction<'_>,
    search: &Search,
    model: &str,
    query: &[f32],
    k: usize,
    pgvector: bool,
) -> Result<Vec<(ItemId, f64)>> {
    let dims = i32::try_from(query.len()).unwrap_or(i32::MAX);
    let other = tx
        .query_opt(
            "SELECT dims FROM memory_vectors WHERE model = $1 AND dims <> $2 LIMIT 1",
            &[&model, &dims],
        )
        .map_err(backend("reading memory vectors"))?;
    if let Some(row) = other {
        let got: i32 = row.get(0);
        return Err(EmbedError::Dimensions {
            model: model.to_owned(),
            expected: query.len(),
            got: usize::try_from(got).unwrap_or(0),
        }
        .into());
    }
    let mut params: Vec<Param> = vec![
        Box::new(query.to_vec()),
        Box::new(model.to_owned()),
        Box::new(dims),
    ];
    let filters = filter_sql(search, &mut params);
    // A vector written by a process that opened the memory before pgvector was installed has
    // no `embedding` until the next opening fills it in: it is left out, as a missing one is.
    let (similarity, present) = if pgvector {
        (
            "1 - (v.embedding <=> $1::real[]::vector)",
            " AND v.embedding IS NOT NULL",
        )
    } else {
        ("memory_dot(v.vector, $1::real[])", "")
    };
    let sql = format!(
        "SELECT v.item, {similarity} AS similarity
         FROM memory_vectors v JOIN memory_items i ON i.id = v.item
         WHERE v.model = $2 AND v.dims = $3{present}{filters}
         ORDER BY similarity DESC, v.item LIMIT {k}"
    );
    Ok(tx
        .query(&sql, &refs(&params))
        .map_err(backend("ranking memory by vector"))?
        .iter()
        .map(|r| (r.get(0), r.get::<_, Option<f64>>(1).unwrap_or(0.0)))
        .collect())
}
