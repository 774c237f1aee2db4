//! Saving L2 notes and purging the expired ones.

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{backend, Result};
use crate::item::{ItemId, ItemKind, Tier};
use crate::notes::{NewNote, Saved};
use crate::text;

/// Saves `note` (already validated, its tokens counted) inside `tx`: the same text saved again
/// in the same session is one note with one more provenance, living until the later expiry.
pub(crate) fn save(tx: &Connection, note: &NewNote, tokens: u64) -> Result<Saved> {
    let agent = note.agent.as_str();
    let hash = text::hash(&text::normalize(&note.text));
    let expires = note.expires_ms();
    let same: Option<ItemId> = tx
        .prepare_cached(
            "SELECT i.id FROM memory_items i JOIN memory_sources s ON s.item = i.id
             WHERE i.agent = ?1 AND i.tier = 'L2' AND i.hash = ?2 AND s.session = ?3 LIMIT 1",
        )
        .and_then(|mut st| {
            st.query_row(params![agent, hash, note.session.as_str()], |r| r.get(0))
                .optional()
        })
        .map_err(backend("looking up a saved note"))?;
    let (id, created) = match same {
        Some(id) => (id, false),
        None => {
            let words = text::word_set(&note.text).len();
            tx.prepare_cached(
                "INSERT INTO memory_items (agent, tier, kind, text, tokens, hash, words, valid_from)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    agent,
                    Tier::L2.as_str(),
                    ItemKind::Note.as_str(),
                    note.text,
                    tokens,
                    hash,
                    words,
                    note.saved_ms,
                ])
            })
            .map_err(backend("writing a note"))?;
            let id = tx.last_insert_rowid();
            super::terms::index(tx, id, agent, &note.text, words)?;
            (id, true)
        }
    };
    tx.prepare_cached(
        "INSERT OR IGNORE INTO memory_sources (item, session, from_seq, to_seq, ts_ms)
         VALUES (?1, ?2, ?3, ?3, ?4)",
    )
    .and_then(|mut st| st.execute(params![id, note.session.as_str(), note.seq, note.saved_ms]))
    .map_err(backend("writing a note's provenance"))?;
    let old: Option<i64> = tx
        .prepare_cached("SELECT expires_ms FROM memory_expiry WHERE item = ?1")
        .and_then(|mut st| st.query_row([id], |r| r.get(0)).optional())
        .map_err(backend("reading a note's expiry"))?;
    // A note that lives forever stays so; otherwise the later expiry wins.
    let kept = match (created, old, expires) {
        (_, _, None) => None,
        (true, _, Some(new)) => Some(new),
        (false, None, Some(_)) => None,
        (false, Some(old), Some(new)) => Some(old.max(new)),
    };
    match kept {
        Some(at) => tx
            .prepare_cached(
                "INSERT INTO memory_expiry (item, expires_ms) VALUES (?1, ?2)
                 ON CONFLICT (item) DO UPDATE SET expires_ms = excluded.expires_ms",
            )
            .and_then(|mut st| st.execute(params![id, at])),
        None => tx
            .prepare_cached("DELETE FROM memory_expiry WHERE item = ?1")
            .and_then(|mut st| st.execute([id])),
    }
    .map_err(backend("writing a note's expiry"))?;
    Ok(Saved {
        id,
        created,
        expires_ms: kept,
    })
}

/// Deletes every note that expired at or before `now_ms`; returns their ids.
pub(crate) fn purge(tx: &Connection, now_ms: i64) -> Result<Vec<ItemId>> {
    let ids: Vec<ItemId> = tx
        .prepare_cached("SELECT item FROM memory_expiry WHERE expires_ms <= ?1 ORDER BY item")
        .and_then(|mut st| st.query_map([now_ms], |r| r.get(0))?.collect())
        .map_err(backend("finding expired notes"))?;
    for &id in &ids {
        super::write::forget(tx, id)?;
    }
    Ok(ids)
}

/// When note `id` expires, if it does.
pub(crate) fn expiry(conn: &Connection, id: ItemId) -> Result<Option<i64>> {
    conn.prepare_cached("SELECT expires_ms FROM memory_expiry WHERE item = ?1")
        .and_then(|mut st| st.query_row([id], |r| r.get(0)).optional())
        .map_err(backend("reading a note's expiry"))
}
