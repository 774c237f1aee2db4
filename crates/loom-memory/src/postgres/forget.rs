//! Removing memory in PostgreSQL: an item (its provenance, index entries and term counts; the
//! items it superseded current again), a deleted session's share, and expired notes.

use std::collections::BTreeSet;

use loom_core::{AgentId, SessionId};
use postgres::Transaction;

use crate::error::{postgres as backend, Result};
use crate::item::{Forgotten, ItemId};

use super::search::load_item;
use super::write::{count_terms, Terms};

/// [`crate::Memory::forget_session`] in one transaction.
pub(super) fn forget_session(
    tx: &mut Transaction<'_>,
    agent: &AgentId,
    session: &SessionId,
) -> Result<Vec<ItemId>> {
    let items: Vec<(ItemId, i64)> = tx
        .query(
            "SELECT s.item, (SELECT COUNT(*) FROM memory_sources o
                             WHERE o.item = s.item AND o.session <> $2)
             FROM memory_sources s JOIN memory_items i ON i.id = s.item
             WHERE s.session = $2 AND i.agent = $1
             GROUP BY s.item ORDER BY s.item",
            &[&agent.as_str(), &session.as_str()],
        )
        .map_err(backend("finding a session's memory items"))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut gone = Vec::new();
    for (id, elsewhere) in items {
        if elsewhere == 0 {
            forget(tx, id)?;
            gone.push(id);
        } else {
            tx.execute(
                "DELETE FROM memory_sources WHERE item = $1 AND session = $2",
                &[&id, &session.as_str()],
            )
            .map_err(backend("removing a session's provenance"))?;
        }
    }
    tx.execute(
        "DELETE FROM memory_extracted WHERE agent = $1 AND session = $2",
        &[&agent.as_str(), &session.as_str()],
    )
    .map_err(backend("removing a session's extraction marks"))?;
    Ok(gone)
}

/// Removes item `id` with its provenance and index entries; the items it superseded become
/// current again.
pub(super) fn forget(tx: &mut Transaction<'_>, id: ItemId) -> Result<Forgotten> {
    let item = load_item(tx, id)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('loom memory ' || $1))",
        &[&item.agent.as_str()],
    )
    .map_err(backend("locking an agent's memory"))?;
    let restored: Vec<ItemId> = tx
        .query(
            "UPDATE memory_items SET superseded_by = NULL, valid_to = NULL
             WHERE superseded_by = $1 RETURNING id",
            &[&id],
        )
        .map_err(backend("restoring superseded items"))?
        .iter()
        .map(|r| r.get(0))
        .collect::<BTreeSet<ItemId>>()
        .into_iter()
        .collect();
    let words: i32 = tx
        .query_one("SELECT words FROM memory_items WHERE id = $1", &[&id])
        .map_err(backend("reading a memory item"))?
        .get(0);
    let steps: [(&str, &'static str); 4] = [
        (
            "DELETE FROM memory_prefix WHERE item = $1",
            "removing an item's word index",
        ),
        (
            "DELETE FROM memory_expiry WHERE item = $1",
            "removing a note's expiry",
        ),
        (
            "DELETE FROM memory_sources WHERE item = $1",
            "removing an item's provenance",
        ),
        (
            "DELETE FROM memory_items WHERE id = $1",
            "removing a memory item",
        ),
    ];
    count_terms(tx, &[id], Terms::Remove)?;
    for (sql, action) in steps {
        tx.execute(sql, &[&id]).map_err(backend(action))?;
    }
    tx.execute(
        "UPDATE memory_stats SET items = greatest(items - 1, 0),
                                 words = greatest(words - $2, 0)
         WHERE agent = $1",
        &[&item.agent.as_str(), &i64::from(words)],
    )
    .map_err(backend("counting an agent's memory"))?;
    Ok(Forgotten { item, restored })
}

/// Deletes every note that expired at or before `now_ms`; returns their ids.
pub(super) fn purge(tx: &mut Transaction<'_>, now_ms: i64) -> Result<Vec<ItemId>> {
    let ids: Vec<ItemId> = tx
        .query(
            "SELECT item FROM memory_expiry WHERE expires_ms <= $1 ORDER BY item",
            &[&now_ms],
        )
        .map_err(backend("finding expired notes"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for &id in &ids {
        forget(tx, id)?;
    }
    Ok(ids)
}
