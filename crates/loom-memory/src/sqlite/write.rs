//! Writing derived items: exact and near-duplicate detection, provenance, supersession, and
//! `forget`, the only delete.

use std::collections::BTreeSet;

use loom_core::{AgentId, SessionId};
use rusqlite::{params, Connection, OptionalExtension};

use crate::dedup::{self, sketch, NEAR_DUPLICATE, NEAR_MIN_WORDS};
use crate::error::{backend, Result};
use crate::item::{Forgotten, ItemId, NewItem, Written};
use crate::text;

use super::read::load_item;
use super::terms;

/// The item an earlier write made from the same source (re-indexing): the same session and seqs,
/// agent and kind (and, for facts, which many come from the same lines, the same text: `hash`,
/// [`text::hash`] of the normalised text, made once by the caller).
pub(crate) fn known(tx: &Connection, item: &NewItem, hash: &str) -> Result<Option<ItemId>> {
    let src = &item.source;
    tx.prepare_cached(
        "SELECT s.item FROM memory_sources s JOIN memory_items i ON i.id = s.item
         WHERE s.session = ?1 AND s.from_seq = ?2 AND s.to_seq = ?3
           AND i.agent = ?4 AND i.kind = ?5 AND (?6 IS NULL OR i.hash = ?6) LIMIT 1",
    )
    .and_then(|mut st| {
        st.query_row(
            params![
                src.session.as_str(),
                src.from_seq,
                src.to_seq,
                item.agent.as_str(),
                item.kind.as_str(),
                dedup::known_by_text(item.kind).then_some(hash),
            ],
            |r| r.get(0),
        )
        .optional()
    })
    .map_err(backend("looking up a memory source"))
}

/// Writes one derived item inside `tx`, with its token count already made.
pub(crate) fn write_item(tx: &Connection, item: &NewItem, tokens: u64) -> Result<Written> {
    let agent = item.agent.as_str();
    let src = &item.source;
    let normalized = text::normalize(&item.text);
    let hash = text::hash(&normalized);
    // The same source seen again (re-indexing) changes nothing, whatever became of its item.
    let known = known(tx, item, &hash)?;
    if let Some(id) = known {
        return Ok(Written::Known(id));
    }

    // Only current items absorb duplicates: a superseded fact stated again is current again,
    // as a new item with its own validity (it then supersedes the one that replaced it).
    let exact: Option<ItemId> = tx
        .prepare_cached(
            "SELECT id FROM memory_items
             WHERE agent = ?1 AND hash = ?2 AND superseded_by IS NULL AND tier <> 'L2' LIMIT 1",
        )
        .and_then(|mut st| st.query_row(params![agent, hash], |r| r.get(0)).optional())
        .map_err(backend("looking up an exact duplicate"))?;
    if let Some(id) = exact {
        add_source(tx, id, item)?;
        return Ok(Written::Duplicate(id));
    }

    let words = text::word_set(&item.text);
    if let Some(id) = near_duplicate(tx, agent, &words)? {
        add_source(tx, id, item)?;
        return Ok(Written::NearDuplicate(id));
    }

    let key = text::subject_key(&item.text);
    tx.prepare_cached(
        "INSERT INTO memory_items
           (agent, tier, kind, text, tokens, hash, words, subject, value, valid_from)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )
    .and_then(|mut st| {
        st.execute(params![
            agent,
            item.tier.as_str(),
            item.kind.as_str(),
            item.text,
            tokens,
            hash,
            words.len(),
            key.as_ref().map(|(k, _)| k.as_str()),
            key.as_ref().map(|(_, v)| v.as_str()),
            src.ts_ms,
        ])
    })
    .map_err(backend("writing a memory item"))?;
    let id = tx.last_insert_rowid();
    terms::index(tx, id, agent, &item.text, words.len())?;
    if words.len() >= NEAR_MIN_WORDS {
        let mut st = tx
            .prepare_cached("INSERT INTO memory_prefix (agent, word, item) VALUES (?1, ?2, ?3)")
            .map_err(backend("indexing a memory item's words"))?;
        for key in sketch(&words) {
            st.execute(params![agent, key, id])
                .map_err(backend("indexing a memory item's words"))?;
        }
    }
    add_source(tx, id, item)?;
    if let Some((subject, value)) = key {
        supersede(tx, agent, id, &subject, &value, src.ts_ms)?;
    }
    Ok(Written::Created(id))
}

/// Records `item`'s source on stored item `id`.
fn add_source(tx: &Connection, id: ItemId, item: &NewItem) -> Result<()> {
    let s = &item.source;
    tx.prepare_cached(
        "INSERT OR IGNORE INTO memory_sources (item, session, from_seq, to_seq, ts_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut st| {
        st.execute(params![
            id,
            s.session.as_str(),
            s.from_seq,
            s.to_seq,
            s.ts_ms
        ])
    })
    .map_err(backend("writing a memory item's provenance"))?;
    Ok(())
}

/// A current item of `agent` whose word set is a near duplicate of `words`, if any: candidates
/// share a sketch key and have a size that the threshold allows, then the exact Jaccard
/// decides. The lowest id wins, so the answer does not depend on the order rows come back in.
fn near_duplicate(
    tx: &Connection,
    agent: &str,
    words: &BTreeSet<String>,
) -> Result<Option<ItemId>> {
    if words.len() < NEAR_MIN_WORDS {
        return Ok(None);
    }
    let size = words.len() as f64;
    let (lo, hi) = (
        (size * NEAR_DUPLICATE).ceil() as i64,
        (size / NEAR_DUPLICATE).floor() as i64,
    );
    let mut candidates = BTreeSet::new();
    let mut st = tx
        .prepare_cached(
            "SELECT p.item FROM memory_prefix p JOIN memory_items i ON i.id = p.item
             WHERE p.agent = ?1 AND p.word = ?2 AND i.superseded_by IS NULL
               AND i.words BETWEEN ?3 AND ?4",
        )
        .map_err(backend("looking up near duplicates"))?;
    for key in sketch(words) {
        let rows = st
            .query_map(params![agent, key, lo, hi], |r| r.get::<_, ItemId>(0))
            .map_err(backend("looking up near duplicates"))?;
        for id in rows {
            candidates.insert(id.map_err(backend("reading a near duplicate"))?);
        }
    }
    let mut text_of = tx
        .prepare_cached("SELECT text FROM memory_items WHERE id = ?1")
        .map_err(backend("reading a near duplicate"))?;
    for id in candidates {
        let other: String = text_of
            .query_row([id], |r| r.get(0))
            .map_err(backend("reading a near duplicate"))?;
        if text::jaccard(words, &text::word_set(&other)) >= NEAR_DUPLICATE {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// Applies supersession for new item `id` stating `value` for `subject` at `ts`, by the rule
/// of [`dedup::supersession`].
fn supersede(
    tx: &Connection,
    agent: &str,
    id: ItemId,
    subject: &str,
    value: &str,
    ts: i64,
) -> Result<()> {
    let others: Vec<dedup::Stated> = tx
        .prepare_cached(
            "SELECT id, value, valid_from FROM memory_items
             WHERE agent = ?1 AND subject = ?2 AND superseded_by IS NULL AND id <> ?3
             ORDER BY valid_from, id",
        )
        .and_then(|mut st| {
            st.query_map(params![agent, subject, id], |r| {
                Ok(dedup::Stated {
                    id: r.get(0)?,
                    value: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                    valid_from: r.get(2)?,
                })
            })?
            .collect()
        })
        .map_err(backend("looking up statements with the same subject"))?;
    let mut mark = tx
        .prepare_cached("UPDATE memory_items SET superseded_by = ?1, valid_to = ?2 WHERE id = ?3")
        .map_err(backend("marking a superseded item"))?;
    for m in dedup::supersession(&others, id, value, ts) {
        mark.execute(params![m.by, m.at, m.item])
            .map_err(backend("marking a superseded item"))?;
    }
    Ok(())
}

/// [`crate::Memory::forget_session`] in one transaction.
pub(crate) fn forget_session(
    tx: &Connection,
    agent: &AgentId,
    session: &SessionId,
) -> Result<Vec<ItemId>> {
    const FIND: &str = "finding a session's memory items";
    let items: Vec<(ItemId, i64)> = tx
        .prepare_cached(
            "SELECT s.item, (SELECT COUNT(*) FROM memory_sources o
                             WHERE o.item = s.item AND o.session <> ?2)
             FROM memory_sources s JOIN memory_items i ON i.id = s.item
             WHERE s.session = ?2 AND i.agent = ?1
             GROUP BY s.item ORDER BY s.item",
        )
        .and_then(|mut st| {
            st.query_map([agent.as_str(), session.as_str()], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect()
        })
        .map_err(backend(FIND))?;
    let mut gone = Vec::new();
    for (id, elsewhere) in items {
        if elsewhere == 0 {
            forget(tx, id)?;
            gone.push(id);
        } else {
            tx.prepare_cached("DELETE FROM memory_sources WHERE item = ?1 AND session = ?2")
                .and_then(|mut st| st.execute(params![id, session.as_str()]))
                .map_err(backend("removing a session's provenance"))?;
        }
    }
    tx.prepare_cached("DELETE FROM memory_extracted WHERE agent = ?1 AND session = ?2")
        .and_then(|mut st| st.execute([agent.as_str(), session.as_str()]))
        .map_err(backend("removing a session's extraction marks"))?;
    Ok(gone)
}

/// Removes item `id` with its provenance and index entries; items it superseded become current
/// again (nothing may point at a removed item).
pub(crate) fn forget(tx: &Connection, id: ItemId) -> Result<Forgotten> {
    let item = load_item(tx, id)?;
    let restored: Vec<ItemId> = tx
        .prepare_cached("SELECT id FROM memory_items WHERE superseded_by = ?1 ORDER BY id")
        .and_then(|mut st| st.query_map([id], |r| r.get(0))?.collect())
        .map_err(backend("finding the items a forgotten item superseded"))?;
    terms::unindex(tx, id)?;
    let steps: [(&str, &'static str); 6] = [
        (
            "UPDATE memory_items SET superseded_by = NULL, valid_to = NULL WHERE superseded_by = ?1",
            "restoring superseded items",
        ),
        ("DELETE FROM memory_prefix WHERE item = ?1", "removing an item's word index"),
        ("DELETE FROM memory_expiry WHERE item = ?1", "removing a note's expiry"),
        ("DELETE FROM memory_vectors WHERE item = ?1", "removing an item's vector"),
        ("DELETE FROM memory_sources WHERE item = ?1", "removing an item's provenance"),
        ("DELETE FROM memory_items WHERE id = ?1", "removing a memory item"),
    ];
    for (sql, action) in steps {
        tx.prepare_cached(sql)
            .and_then(|mut st| st.execute([id]))
            .map_err(backend(action))?;
    }
    Ok(Forgotten { item, restored })
}
