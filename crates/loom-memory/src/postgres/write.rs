//! Writing items in PostgreSQL: the SQLite backend's rules ([`crate::dedup`]), one agent's
//! writes serialized across processes by an advisory lock; and the LLM extractor's marks,
//! written in the same transaction as the facts of their window.
//!
//! Each statement is a round trip, and on loopback the round trips were most of an item's cost:
//! so the statements of a batch are prepared once, an item's three dedup lookups are one
//! statement, its row, sketch keys and provenance are written by another, and the agents'
//! counts are added up once per batch.

use std::collections::{BTreeMap, BTreeSet};

use loom_core::{AgentId, SessionId};
use postgres::{Statement, Transaction};

use crate::dedup::{self, sketch, NEAR_DUPLICATE, NEAR_MIN_WORDS};
use crate::error::{postgres as backend, Result};
use crate::extract::ExtractMark;
use crate::item::{Forgotten, ItemId, ItemKind, NewItem, Tier, Written};
use crate::notes::{NewNote, Saved};
use crate::text;

use super::search::load_item;

/// What an item may already be, as [`Statements::lookup`] tags its rows.
const KNOWN: i32 = 0;
const EXACT: i32 = 1;
const NEAR: i32 = 2;

/// A batch's statements, prepared once for all its items.
struct Statements {
    /// An item's dedup candidates, tagged: the item already written from the same source
    /// ([`KNOWN`]), the oldest current item with the same text ([`EXACT`]), and the current
    /// items sharing a sketch key whose size the near-duplicate threshold allows ([`NEAR`],
    /// with their text).
    lookup: Statement,
    /// A new item's row, its sketch keys and its first provenance; returns its id.
    insert: Statement,
    /// One more provenance for an existing item.
    source: Statement,
    /// The current items stating the same subject.
    same_subject: Statement,
    /// Marks an item superseded.
    supersede: Statement,
}

impl Statements {
    fn prepare(tx: &mut Transaction<'_>) -> Result<Self> {
        let mut prepare = |sql: &str| {
            tx.prepare(sql)
                .map_err(backend("preparing the memory writes"))
        };
        Ok(Self {
            lookup: prepare(
                "(SELECT 0, s.item, NULL::text FROM memory_sources s
                  JOIN memory_items i ON i.id = s.item
                  WHERE s.session = $1 AND s.from_seq = $2 AND s.to_seq = $3
                    AND i.agent = $4 AND i.kind = $5 AND ($6::text IS NULL OR i.hash = $6)
                  LIMIT 1)
                 UNION ALL
                 (SELECT 1, id, NULL::text FROM memory_items
                  WHERE agent = $4 AND hash = $7 AND superseded_by IS NULL AND tier <> 'L2'
                  ORDER BY id LIMIT 1)
                 UNION ALL
                 (SELECT DISTINCT 2, i.id, i.text FROM memory_prefix p
                  JOIN memory_items i ON i.id = p.item
                  WHERE p.agent = $4 AND p.word = ANY($8) AND i.superseded_by IS NULL
                    AND i.words BETWEEN $9 AND $10)",
            )?,
            insert: prepare(
                "WITH ins AS (
                   INSERT INTO memory_items
                     (agent, tier, kind, text, tokens, hash, words, subject, value, valid_from)
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id),
                 keys AS (
                   INSERT INTO memory_prefix (agent, word, item)
                   SELECT $1, k, ins.id FROM ins, unnest($11::text[]) AS k
                   ON CONFLICT DO NOTHING),
                 src AS (
                   INSERT INTO memory_sources (item, session, from_seq, to_seq, ts_ms)
                   SELECT ins.id, $12, $13, $14, $10 FROM ins ON CONFLICT DO NOTHING)
                 SELECT id FROM ins",
            )?,
            source: prepare(
                "INSERT INTO memory_sources (item, session, from_seq, to_seq, ts_ms)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            )?,
            same_subject: prepare(
                "SELECT id, coalesce(value, ''), valid_from FROM memory_items
                 WHERE agent = $1 AND subject = $2 AND superseded_by IS NULL AND id <> $3
                 ORDER BY valid_from, id",
            )?,
            supersede: prepare(
                "UPDATE memory_items SET superseded_by = $1, valid_to = $2 WHERE id = $3",
            )?,
        })
    }
}

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
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let st = Statements::prepare(tx)?;
    // Items and content words created per agent, added to `memory_stats` at the end (only
    // searches read them, and they see the batch whole or not at all).
    let mut counts: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    let mut written = Vec::with_capacity(items.len());
    for (item, &n) in items.iter().zip(tokens) {
        let (w, words) = write_item(tx, &st, item, n)?;
        if let Written::Created(_) = w {
            let c = counts.entry(item.agent.as_str()).or_default();
            c.0 += 1;
            c.1 += words;
        }
        written.push(w);
    }
    for (agent, (n, words)) in counts {
        tx.execute(
            "INSERT INTO memory_stats (agent, items, words) VALUES ($1, $2, $3)
             ON CONFLICT (agent) DO UPDATE
             SET items = memory_stats.items + excluded.items,
                 words = memory_stats.words + excluded.words",
            &[&agent, &n, &words],
        )
        .map_err(backend("counting an agent's memory"))?;
    }
    Ok(written)
}

/// Writes one item; returns what became of it and, when it was created, its content words.
fn write_item(
    tx: &mut Transaction<'_>,
    st: &Statements,
    item: &NewItem,
    tokens: u64,
) -> Result<(Written, i64)> {
    let agent = item.agent.as_str();
    let src = &item.source;
    let (from, to) = (seq(src.from_seq), seq(src.to_seq));
    let hash = text::hash(&text::normalize(&item.text));
    // The same source seen again (re-indexing) changes nothing, whatever became of its item.
    // Many facts come from the same lines, so a fact is known only with the same text.
    let same_text = dedup::known_by_text(item.kind).then_some(hash.as_str());
    let words = text::word_set(&item.text);
    // Near duplicates are only looked for among items of a size the threshold allows, and
    // never for short texts (no sketch keys, so no candidates).
    let keys = if words.len() >= NEAR_MIN_WORDS {
        sketch(&words)
    } else {
        Vec::new()
    };
    let size = words.len() as f64;
    let lo = (size * NEAR_DUPLICATE).ceil() as i32;
    let hi = (size / NEAR_DUPLICATE).floor() as i32;
    let rows = tx
        .query(
            &st.lookup,
            &[
                &src.session.as_str(),
                &from,
                &to,
                &agent,
                &item.kind.as_str(),
                &same_text,
                &hash,
                &keys,
                &lo,
                &hi,
            ],
        )
        .map_err(backend("looking up a memory item's duplicates"))?;
    let tagged = |tag: i32| rows.iter().filter(move |r| r.get::<_, i32>(0) == tag);
    if let Some(row) = tagged(KNOWN).next() {
        return Ok((Written::Known(row.get(1)), 0));
    }
    if let Some(row) = tagged(EXACT).next() {
        let id: ItemId = row.get(1);
        add_source(tx, st, id, item)?;
        return Ok((Written::Duplicate(id), 0));
    }
    // As the SQLite backend: the exact Jaccard decides; the lowest id wins.
    let mut near: Vec<(ItemId, String)> = tagged(NEAR).map(|r| (r.get(1), r.get(2))).collect();
    near.sort();
    if let Some((id, _)) = near
        .iter()
        .find(|(_, other)| text::jaccard(&words, &text::word_set(other)) >= NEAR_DUPLICATE)
    {
        add_source(tx, st, *id, item)?;
        return Ok((Written::NearDuplicate(*id), 0));
    }

    let key = text::subject_key(&item.text);
    let n_words = i32::try_from(words.len()).unwrap_or(i32::MAX);
    let tokens = i64::try_from(tokens).unwrap_or(i64::MAX);
    let id: ItemId = tx
        .query_one(
            &st.insert,
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
                &keys,
                &src.session.as_str(),
                &from,
                &to,
            ],
        )
        .map_err(backend("writing a memory item"))?
        .get(0);
    if let Some((subject, value)) = key {
        supersede(tx, st, agent, id, &subject, &value, src.ts_ms)?;
    }
    Ok((Written::Created(id), i64::from(n_words)))
}

/// A seq as PostgreSQL's BIGINT (seqs are far below its limit; a larger one saturates and then
/// fails the schema's checks rather than wrapping).
fn seq(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn add_source(tx: &mut Transaction<'_>, st: &Statements, id: ItemId, item: &NewItem) -> Result<()> {
    let s = &item.source;
    tx.execute(
        &st.source,
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

fn supersede(
    tx: &mut Transaction<'_>,
    st: &Statements,
    agent: &str,
    id: ItemId,
    subject: &str,
    value: &str,
    ts: i64,
) -> Result<()> {
    let others: Vec<dedup::Stated> = tx
        .query(&st.same_subject, &[&agent, &subject, &id])
        .map_err(backend("looking up statements with the same subject"))?
        .iter()
        .map(|r| dedup::Stated {
            id: r.get(0),
            value: r.get(1),
            valid_from: r.get(2),
        })
        .collect();
    for m in dedup::supersession(&others, id, value, ts) {
        tx.execute(&st.supersede, &[&m.by, &m.at, &m.item])
            .map_err(backend("marking a superseded item"))?;
    }
    Ok(())
}

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
