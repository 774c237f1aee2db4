//! Item vectors in `memory_vectors`: written after their items, back-filled for items that have
//! none of the current model, and scanned exactly at search time (memory per agent is small
//! enough that an index would cost more than it saves).

use rusqlite::types::Value;
use rusqlite::{params, Connection, ToSql};

use crate::embed::{dot, from_blob, to_blob, EmbedError};
use crate::error::{backend, Result};
use crate::item::ItemId;

/// Stores `vectors` for their items under `model`, replacing any earlier vector (of another
/// model) of the same item. Items removed meanwhile are skipped.
pub(crate) fn store(tx: &Connection, model: &str, vectors: &[(ItemId, Vec<f32>)]) -> Result<()> {
    let mut st = tx
        .prepare_cached(
            "INSERT OR REPLACE INTO memory_vectors (item, model, dims, vector)
             SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM memory_items WHERE id = ?1)",
        )
        .map_err(backend("writing a memory vector"))?;
    for (id, v) in vectors {
        st.execute(params![id, model, v.len(), to_blob(v)])
            .map_err(backend("writing a memory vector"))?;
    }
    Ok(())
}

/// Up to `n` items (of `agent`, when given) that have no vector of `model`, oldest first.
pub(crate) fn missing(
    conn: &Connection,
    model: &str,
    agent: Option<&str>,
    n: usize,
) -> Result<Vec<(ItemId, String)>> {
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    conn.prepare_cached(
        "SELECT i.id, i.text FROM memory_items i
         LEFT JOIN memory_vectors v ON v.item = i.id AND v.model = ?1
         WHERE v.item IS NULL AND (?2 IS NULL OR i.agent = ?2)
         ORDER BY i.id LIMIT ?3",
    )
    .and_then(|mut st| {
        st.query_map(params![model, agent, n], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect()
    })
    .map_err(backend("finding items without a vector"))
}

/// The items passing `filters` (SQL over `i`, as the full-text search builds it) ranked by
/// cosine similarity to `query` among the vectors of `model`: the best `k`, best first.
pub(crate) fn nearest(
    conn: &Connection,
    model: &str,
    query: &[f32],
    filters: &str,
    args: &[(&'static str, Value)],
    k: usize,
) -> Result<Vec<(ItemId, f64)>> {
    let sql = format!(
        "SELECT v.item, v.vector FROM memory_vectors v JOIN memory_items i ON i.id = v.item
         WHERE v.model = :model{filters}"
    );
    let model_arg = Value::Text(model.to_owned());
    let all: Vec<(&str, &dyn ToSql)> = args
        .iter()
        .map(|(n, v)| (*n, v as &dyn ToSql))
        .chain(std::iter::once((":model", &model_arg as &dyn ToSql)))
        .collect();
    let mut st = conn
        .prepare_cached(&sql)
        .map_err(backend("reading memory vectors"))?;
    let mut rows = st
        .query(all.as_slice())
        .map_err(backend("reading memory vectors"))?;
    let mut scored: Vec<(ItemId, f64)> = Vec::new();
    while let Some(row) = rows.next().map_err(backend("reading memory vectors"))? {
        let id: ItemId = row.get(0).map_err(backend("reading memory vectors"))?;
        let blob = row
            .get_ref(1)
            .and_then(|v| v.as_blob().map_err(Into::into))
            .map_err(backend("reading memory vectors"))?;
        let v = from_blob(blob).unwrap_or_default();
        if v.len() != query.len() {
            return Err(EmbedError::Dimensions {
                model: model.to_owned(),
                expected: query.len(),
                got: v.len(),
            }
            .into());
        }
        scored.push((id, f64::from(dot(query, &v))));
    }
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(k);
    Ok(scored)
}
