//! Writing items in PostgreSQL: the SQLite backend's rules ([`crate::dedup`]), one agent's
//! writes serialized across processes by an advisory lock; and the LLM extractor's marks,
//! written in the same transaction as the facts of their window.

use std::collections::BTreeSet;

use postgres::Transaction;

use crate::dedup::{self, sketch, NEAR_DUPLICATE, NEAR_MIN_WORDS};
use crate::error::{postgres as backend, Result};
use crate::extract::ExtractMark;
use crate::item::{Forgotten, ItemId, ItemKind, NewItem, Tier, Written};
use crate::notes::{NewNote, Saved};
use crate::text;

use super::search::load_item;

/// Writes `items` (with their token counts) in order.
pub(super) fn write_items(
    tx: &mut Transaction<'_>,
    items: &[NewItem],
    tokens: &[u64],
) -> Result<Vec<Written>> {
    // Whoever writes an agent's memory first holds it until commit: dedup and supersession
    // read what the other wrote, never a half of it. Locked in a fixed order, so two writers
    // of several agents cannot deadlock.
    let agents: BTreeSet<&str> = items.iter().map(|i| i.agent.as_str()).collect();
    for agent in agents {
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('loom memory ' || $1))",
            &[&agent],
        )
        .map_err(backend("locking an agent's memory"))?;
    }
    items
        .iter()
        .zip(tokens)
        .map(|(item, &n)| write_item(tx, item, n))
        .collect()
}

fn write_item(tx: &mut Transaction<'_>, item: &NewItem, tokens: u64) -> Result<Written> {
    let agent = item.agent.as_str();
    let src = &item.source;
    let (from, to) = (seq(src.from_seq), seq(src.to_seq));
    let hash = text::hash(&text::normalize(&item.text));
    // The same source seen again (re-indexing) changes nothing, whatever became of its item.
    // Many facts come from the same lines, so a fact is known only with the same text.
    let same_text = dedup::known_by_text(item.kind).then_some(hash.as_str());
    let known = tx
        .query_opt(
            "SELECT s.item FROM memory_sources s JOIN memory_items i ON i.id = s.item
             WHERE s.session = $1 AND s.from_seq = $2 AND s.to_seq = $3
               AND i.agent = $4 AND i.kind = $5 AND ($6::text IS NULL OR i.hash = $6)
             LIMIT 1",
            &[
                &src.session.as_str(),
                &from,
                &to,
                &agent,
                &item.kind.as_str(),
                &same_text,
            ],
        )
        .map_err(backend("looking up a memory source"))?;
    if let Some(row) = known {
        return Ok(Written::Known(row.get(0)));
    }

    let exact = tx
        .query_opt(
            "SELECT id FROM memory_items
             WHERE agent = $1 AND hash = $2 AND superseded_by IS NULL AND tier <> 'L2'
             ORDER BY id LIMIT 1",
            &[&agent, &hash],
        )
        .map_err(backend("looking up an exact duplicate"))?;
    if let Some(row) = exact {
        let id: ItemId = row.get(0);
        add_source(tx, id, item)?;
        return Ok(Written::Duplicate(id));
    }

    let words = text::word_set(&item.text);
    if let Some(id) = near_duplicate(tx, agent, &words)? {
        add_source(tx, id, item)?;
        return Ok(Written::NearDuplicate(id));
    }

    let key = text::subject_key(&item.text);
    let n_words = i32::try_from(words.len()).unwrap_or(i32::MAX);
    let tokens = i64::try_from(tokens).unwrap_or(i64::MAX);
    let id: ItemId = tx
        .query_one(
            "INSERT INTO memory_items
               (agent, tier, kind, text, tokens, hash, words, subject, value, valid_from)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
            &[
                &agent,
                &item.tier.as_str(),
                &item.kind.as_str(),
                &item.text,
                &tokens,
                &hash,
                &n_words,
                &key.as_ref().map(|(k, _)| k.as_str()),
                &key.as_ref().map(|(_, v)| v.as_str()),
                &src.ts_ms,
            ],
        )
        .map_err(backend("writing a memory item"))?
        .get(0);
    if words.len() >= NEAR_MIN_WORDS {
        let keys = sketch(&words);
        tx.execute(
            "INSERT INTO memory_prefix (agent, word, item)
             SELECT $1, k, $3 FROM unnest($2::text[]) AS k ON CONFLICT DO NOTHING",
            &[&agent, &keys, &id],
        )
        .map_err(backend("indexing a memory item's words"))?;
    }
    tx.execute(
        "INSERT INTO memory_stats (agent, items, words) VALUES ($1, 1, $2)
         ON CONFLICT (agent) DO UPDATE
         SET items = memory_stats.items + 1, words = memory_stats.words + excluded.words",
        &[&agent, &i64::from(n_words)],
    )
    .map_err(backend("counting an agent's memory"))?;
    add_source(tx, id, item)?;
    if let Some((subject, value)) = key {
        supersede(tx, agent, id, &subject, &value, src.ts_ms)?;
    }
    Ok(Written::Created(id))
}

/// A seq as PostgreSQL's BIGINT (seqs are far below its limit; a larger one saturates and then
/// fails the schema's checks rather than wrapping).
fn seq(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn add_source(tx: &mut Transaction<'_>, id: ItemId, item: &NewItem) -> Result<()> {
    let s = &item.source;
    tx.execute(
        "INSERT INTO memory_sources (item, session, from_seq, to_seq, ts_ms)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        &[
            &id,
            &s.session.as_str(),
            &seq(s.from_seq),
            &seq(s.to_seq),
            &s.ts_ms,
        ],
    )
    .map_err(backend("writing a memory item's provenance"))?;
    Ok(())
}

/// As the SQLite backend: candidates share a sketch key and have a size the threshold allows;
/// the exact Jaccard decides; the lowest id wins.
fn near_duplicate(
    tx: &mut Transaction<'_>,
    agent: &str,
    words: &BTreeSet<String>,
) -> Result<Option<ItemId>> {
    if words.len() < NEAR_MIN_WORDS {
        return Ok(None);
    }
    let size = words.len() as f64;
    let lo = (size * NEAR_DUPLICATE).ceil() as i32;
    let hi = (size / NEAR_DUPLICATE).floor() as i32;
    let rows = tx
        .query(
            "SELECT DISTINCT i.id, i.text FROM memory_prefix p
             JOIN memory_items i ON i.id = p.item
             WHERE p.agent = $1 AND p.word = ANY($2) AND i.superseded_by IS NULL
               AND i.words BETWEEN $3 AND $4
             ORDER BY i.id",
            &[&agent, &sketch(words), &lo, &hi],
        )
        .map_err(backend("looking up near duplicates"))?;
    for row in rows {
        let other: String = row.get(1);
        if text::jaccard(words, &text::word_set(&other)) >= NEAR_DUPLICATE {
            return Ok(Some(row.get(0)));
        }
    }
    Ok(None)
}

fn supersede(
    tx: &mut Transaction<'_>,
    agent: &str,
    id: ItemId,
    subject: &str,
    value: &str,
    ts: i64,
) -> Result<()> {
    let others: Vec<dedup::Stated> = tx
        .query(
            "SELECT id, coalesce(value, ''), valid_from FROM memory_items
             WHERE agent = $1 AND subject = $2 AND superseded_by IS NULL AND id <> $3
             ORDER BY valid_from, id",
            &[&agent, &subject, &id],
        )
        .map_err(backend("looking up statements with the same subject"))?
        .iter()
        .map(|r| dedup::Stated {
            id: r.get(0),
            value: r.get(1),
            valid_from: r.get(2),
        })
        .collect();
    for m in dedup::supersession(&others, id, value, ts) {
        tx.execute(
            "UPDATE memory_items SET superseded_by = $1, valid_to = $2 WHERE id = $3",
            &[&m.by, &m.at, &m.item],
        )
        .map_err(backend("marking a superseded item"))?;
    }
    Ok(())
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

/// Saves `note` (validated, its tokens counted): the same text saved again in the same session
/// is one note with one more provenance, living until the later expiry — the SQLite backend's
/// rule.
pub(super) fn save(tx: &mut Transaction<'_>, note: &NewNote, tokens: u64) -> Result<Saved> {
    let agent = note.agent.as_str();
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('loom memory ' || $1))",
        &[&agent],
    )
    .map_err(backend("locking an agent's memory"))?;
    let hash = text::hash(&text::normalize(&note.text));
    let session = note.session.as_str();
    let same = tx
        .query_opt(
            "SELECT i.id FROM memory_items i JOIN memory_sources s ON s.item = i.id
             WHERE i.agent = $1 AND i.tier = 'L2' AND i.hash = $2 AND s.session = $3
             ORDER BY i.id LIMIT 1",
            &[&agent, &hash, &session],
        )
        .map_err(backend("looking up a saved note"))?;
    let (id, created): (ItemId, bool) = match same {
        Some(row) => (row.get(0), false),
        None => {
            let words = i32::try_from(text::word_set(&note.text).len()).unwrap_or(i32::MAX);
            let id: ItemId = tx
                .query_one(
                    "INSERT INTO memory_items
                       (agent, tier, kind, text, tokens, hash, words, valid_from)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
                    &[
                        &agent,
                        &Tier::L2.as_str(),
                        &ItemKind::Note.as_str(),
                        &note.text,
                        &i64::try_from(tokens).unwrap_or(i64::MAX),
                        &hash,
                        &words,
                        &note.saved_ms,
                    ],
                )
                .map_err(backend("writing a note"))?
                .get(0);
            tx.execute(
                "INSERT INTO memory_stats (agent, items, words) VALUES ($1, 1, $2)
                 ON CONFLICT (agent) DO UPDATE
                 SET items = memory_stats.items + 1, words = memory_stats.words + excluded.words",
                &[&agent, &i64::from(words)],
            )
            .map_err(backend("counting an agent's memory"))?;
            (id, true)
        }
    };
    let at = seq(note.seq);
    tx.execute(
        "INSERT INTO memory_sources (item, session, from_seq, to_seq, ts_ms)
         VALUES ($1, $2, $3, $3, $4) ON CONFLICT DO NOTHING",
        &[&id, &session, &at, &note.saved_ms],
    )
    .map_err(backend("writing a note's provenance"))?;
    let old: Option<i64> = tx
        .query_opt(
            "SELECT expires_ms FROM memory_expiry WHERE item = $1",
            &[&id],
        )
        .map_err(backend("reading a note's expiry"))?
        .map(|r| r.get(0));
    // A note that lives forever stays so; otherwise the later expiry wins.
    let kept = match (created, old, note.expires_ms()) {
        (_, _, None) | (false, None, Some(_)) => None,
        (true, _, Some(new)) => Some(new),
        (false, Some(old), Some(new)) => Some(old.max(new)),
    };
    match kept {
        Some(at) => tx.execute(
            "INSERT INTO memory_expiry (item, expires_ms) VALUES ($1, $2)
             ON CONFLICT (item) DO UPDATE SET expires_ms = excluded.expires_ms",
            &[&id, &at],
        ),
        None => tx.execute("DELETE FROM memory_expiry WHERE item = $1", &[&id]),
    }
    .map_err(backend("writing a note's expiry"))?;
    Ok(Saved {
        id,
        created,
        expires_ms: kept,
    })
}

/// How far `extractor` has read `session` for `agent` (0: not at all).
pub(super) fn extracted_to(
    tx: &mut Transaction<'_>,
    agent: &str,
    session: &str,
    extractor: &str,
) -> Result<u64> {
    let to: Option<i64> = tx
        .query_opt(
            "SELECT to_seq FROM memory_extracted
             WHERE agent = $1 AND session = $2 AND extractor = $3",
            &[&agent, &session, &extractor],
        )
        .map_err(backend("reading the extractor's mark"))?
        .map(|r| r.try_get(0))
        .transpose()
        .map_err(backend("reading the extractor's mark"))?;
    // The schema keeps marks non-negative.
    Ok(to.map_or(0, |n| u64::try_from(n).unwrap_or(0)))
}

/// Moves the mark of `mark.extractor` on its session to `mark.to_seq` (never back: two
/// extractions racing leave the further mark).
pub(super) fn set_mark(tx: &mut Transaction<'_>, mark: &ExtractMark) -> Result<()> {
    tx.execute(
        "INSERT INTO memory_extracted (agent, session, extractor, to_seq) VALUES ($1, $2, $3, $4)
         ON CONFLICT (agent, session, extractor) DO UPDATE
         SET to_seq = greatest(memory_extracted.to_seq, excluded.to_seq)",
        &[
            &mark.agent.as_str(),
            &mark.session.as_str(),
            &mark.extractor,
            &seq(mark.to_seq),
        ],
    )
    .map_err(backend("writing the extractor's mark"))?;
    Ok(())
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

/// When note `id` expires, if it does.
pub(super) fn expiry(tx: &mut Transaction<'_>, id: ItemId) -> Result<Option<i64>> {
    Ok(tx
        .query_opt(
            "SELECT expires_ms FROM memory_expiry WHERE item = $1",
            &[&id],
        )
        .map_err(backend("reading a note's expiry"))?
        .map(|r| r.get(0)))
}
