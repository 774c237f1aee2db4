//! Item vectors in `memory_vectors`: written after their items, back-filled for items that have
//! none of the current model, and compared exactly at search time — from a copy in RAM
//! ([`Cache`]), read once and again only when the table has changed.
//!
//! Why a copy: reading 100,000 vectors through SQLite for every search (a row and a join to
//! the item's filters each) took about half a second; the copy is one contiguous matrix that a
//! search scans in a few milliseconds. It costs the vectors' size in RAM (4 bytes a dimension:
//! 154 MB for 100,000 items of 384). A trigger counts every change to the table
//! (`memory_vectors_generation`), so a copy is known to be stale whoever wrote, this process or
//! another. The scan ranks the items; the search's filters (session, tier, time, superseded,
//! expired) are then checked in SQL for the best of them only, further ones read until enough
//! pass.

use std::sync::{Mutex, PoisonError};

use rusqlite::types::Value;
use rusqlite::{params, Connection};

use crate::embed::{dot, from_blob, to_blob, EmbedError};
use crate::error::{backend, Result};
use crate::hybrid::QueryVector;
use crate::item::ItemId;

use super::read::query_ids;

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

/// The vectors of one model as a matrix in RAM, with each row's item and agent.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    /// The value of `memory_vectors_generation` it was read at.
    generation: i64,
    model: String,
    dims: usize,
    /// A vector whose length is not `dims`, if one is stored (a search says so).
    odd: Option<usize>,
    ids: Vec<ItemId>,
    /// Per row, an index into `agents`.
    agent_of: Vec<u32>,
    agents: Vec<String>,
    /// `ids.len()` rows of `dims`.
    data: Vec<f32>,
}

/// A memory's copy of its vectors, shared by its searches.
#[derive(Debug, Default)]
pub(crate) struct Vectors(Mutex<Option<Cache>>);

/// The count of changes to `memory_vectors` (see the module documentation).
fn generation(conn: &Connection) -> Result<i64> {
    conn.prepare_cached("SELECT n FROM memory_vectors_generation")
        .and_then(|mut st| st.query_row([], |r| r.get(0)))
        .map_err(backend("reading the vectors' generation"))
}

/// Every vector of `model`, with its item's agent.
fn load(conn: &Connection, model: &str, dims: usize, generation: i64) -> Result<Cache> {
    let mut cache = Cache {
        generation,
        model: model.to_owned(),
        dims,
        ..Cache::default()
    };
    let mut agent_index = std::collections::HashMap::<String, u32>::new();
    let mut st = conn
        .prepare_cached(
            "SELECT v.item, i.agent, v.vector FROM memory_vectors v
             JOIN memory_items i ON i.id = v.item WHERE v.model = ?1",
        )
        .map_err(backend("reading memory vectors"))?;
    let mut rows = st
        .query([model])
        .map_err(backend("reading memory vectors"))?;
    while let Some(row) = rows.next().map_err(backend("reading memory vectors"))? {
        let id: ItemId = row.get(0).map_err(backend("reading memory vectors"))?;
        let agent = row
            .get_ref(1)
            .and_then(|v| v.as_str().map_err(Into::into))
            .map_err(backend("reading memory vectors"))?;
        let blob = row
            .get_ref(2)
            .and_then(|v| v.as_blob().map_err(Into::into))
            .map_err(backend("reading memory vectors"))?;
        let v = from_blob(blob).unwrap_or_default();
        if v.len() != dims {
            cache.odd = Some(v.len());
            continue;
        }
        let next = u32::try_from(cache.agents.len()).unwrap_or(u32::MAX);
        let a = *agent_index.entry(agent.to_owned()).or_insert_with(|| {
            cache.agents.push(agent.to_owned());
            next
        });
        cache.ids.push(id);
        cache.agent_of.push(a);
        cache.data.extend_from_slice(&v);
    }
    Ok(cache)
}

/// Rows scanned per thread at least: a smaller matrix is not worth a second thread.
const ROWS_PER_THREAD: usize = 16_384;

/// The similarity of `query` to every row of `cache` (of agent `only`, when given), as
/// (score, row), the rows split over the machine's cores when there are many.
fn scores(cache: &Cache, query: &[f32], only: Option<u32>) -> Vec<(f32, usize)> {
    let dims = cache.dims.max(1);
    let part = |from: usize, to: usize| -> Vec<(f32, usize)> {
        (from..to)
            .filter(|&row| only.is_none_or(|o| cache.agent_of[row] == o))
            .map(|row| (dot(query, &cache.data[row * dims..(row + 1) * dims]), row))
            .collect()
    };
    let rows = cache.ids.len();
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(rows / ROWS_PER_THREAD)
        .max(1);
    if threads == 1 {
        return part(0, rows);
    }
    let per = rows.div_ceil(threads);
    crate::par::each(threads, |k| part(k * per, ((k + 1) * per).min(rows)))
        .into_iter()
        .flatten()
        .collect()
}

/// The items passing `filters` (SQL over `i`, as the full-text search builds it, with `args`)
/// ranked by cosine similarity to `query` among the vectors of its model, of `agent` when given:
/// the best `k`, best first.
pub(crate) fn nearest(
    conn: &Connection,
    vectors: &Vectors,
    query: &QueryVector<'_>,
    agent: Option<&str>,
    filters: &str,
    args: &[(&'static str, Value)],
    k: usize,
) -> Result<Vec<(ItemId, f64)>> {
    let (model, query) = (query.model, query.vector.as_slice());
    let now = generation(conn)?;
    let mut guard = vectors.0.lock().unwrap_or_else(PoisonError::into_inner);
    let fresh = guard
        .as_ref()
        .is_some_and(|c| c.generation == now && c.model == model && c.dims == query.len());
    if !fresh {
        *guard = Some(load(conn, model, query.len(), now)?);
    }
    let Some(cache) = guard.as_ref() else {
        return Ok(Vec::new());
    };
    if let Some(got) = cache.odd {
        return Err(EmbedError::Dimensions {
            model: model.to_owned(),
            expected: query.len(),
            got,
        }
        .into());
    }
    let only = match agent {
        Some(a) => match cache.agents.iter().position(|x| x == a) {
            Some(i) => Some(u32::try_from(i).unwrap_or(u32::MAX)),
            None => return Ok(Vec::new()),
        },
        None => None,
    };
    let mut scored = scores(cache, query, only);
    let better = |a: &(f32, usize), b: &(f32, usize)| {
        b.0.total_cmp(&a.0)
            .then(cache.ids[a.1].cmp(&cache.ids[b.1]))
    };
    // The best rows, in batches twice the size asked for, each checked against the filters in
    // SQL, until `k` pass or none are left.
    // Driven by the list (CROSS JOIN keeps SQLite from scanning the agent's items instead).
    let check = format!(
        "SELECT i.id, 0 FROM json_each(:ids) j CROSS JOIN memory_items i ON i.id = j.value
         WHERE 1{filters}"
    );
    let mut out = Vec::with_capacity(k);
    let mut from = 0;
    let mut batch = k.saturating_mul(2).max(64);
    while out.len() < k && from < scored.len() {
        let to = from.saturating_add(batch).min(scored.len());
        if to < scored.len() {
            scored[from..].select_nth_unstable_by(to - from - 1, better);
        }
        scored[from..to].sort_unstable_by(better);
        let ids: Vec<ItemId> = scored[from..to].iter().map(|s| cache.ids[s.1]).collect();
        let list = Value::Text(serde_json::to_string(&ids).unwrap_or_default());
        let passed: std::collections::HashSet<ItemId> = query_ids::<i64>(
            conn,
            &check,
            args,
            &[(":ids", list)],
            "filtering memory vectors",
        )?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
        for s in &scored[from..to] {
            let id = cache.ids[s.1];
            if out.len() < k && passed.contains(&id) {
                out.push((id, f64::from(s.0)));
            }
        }
        from = to;
        batch = batch.saturating_mul(2);
    }
    Ok(out)
}
