//! Writing items in PostgreSQL: the SQLite backend's rules ([`crate::dedup`]), one agent's
//! writes serialized across processes by an advisory lock; and the LLM extractor's marks,
//! written in the same transaction as the facts of their window.
//!
//! Each statement is a round trip, and on loopback the round trips were most of an item's cost:
//! so a batch is written in segments of two statements each (what its items may already be,
//! then its rows), decided in between by the same rules as one item at a time, and the agents'
//! counts are added up once per batch.

use std::collections::{BTreeMap, BTreeSet};

use postgres::{Statement, Transaction};

use crate::dedup::{self, sketch, NEAR_DUPLICATE, NEAR_MIN_WORDS};
use crate::error::{postgres as backend, Result};
use crate::extract::ExtractMark;
use crate::item::{ItemId, ItemKind, NewItem, Tier, Written};
use crate::notes::{NewNote, Saved};
use crate::text;

/// What an item may already be, as [`Statements::lookup`] tags its rows; [`IDS`] rows carry
/// ids drawn for the segment's new items.
const KNOWN: i32 = 0;
const EXACT: i32 = 1;
const NEAR: i32 = 2;
const IDS: i32 = 3;

/// A batch's statements, prepared once for all its segments.
struct Statements {
    /// For every item of a segment (`$1`, its position), the item already written from the
    /// same source ([`KNOWN`]), the oldest current item with the same text ([`EXACT`]) and the
    /// current items sharing a sketch key whose size the near-duplicate threshold allows
    /// ([`NEAR`], with their text); and as many fresh item ids as the segment has items
    /// ([`IDS`]). One round trip.
    lookup: Statement,
    /// The segment's new items, their sketch keys and every provenance it adds (new items' and
    /// duplicates'), in one statement.
    insert: Statement,
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
                "WITH q AS (
                   SELECT * FROM unnest($1::int[], $2::text[], $3::bigint[], $4::bigint[],
                                        $5::text[], $6::text[], $7::text[], $8::text[],
                                        $9::int[], $10::int[])
                     AS q(n, session, from_seq, to_seq, agent, kind, same_text, hash, lo, hi)),
                 k AS (SELECT * FROM unnest($11::int[], $12::text[], $13::text[], $14::int[],
                                            $15::int[]) AS k(n, agent, word, lo, hi))
                 SELECT 0, q.n, known.item, NULL::text FROM q CROSS JOIN LATERAL (
                   SELECT s.item FROM memory_sources s JOIN memory_items i ON i.id = s.item
                   WHERE s.session = q.session AND s.from_seq = q.from_seq
                     AND s.to_seq = q.to_seq AND i.agent = q.agent AND i.kind = q.kind
                     AND (q.same_text IS NULL OR i.hash = q.same_text)
                   LIMIT 1) known
                 UNION ALL
                 SELECT 1, q.n, exact.id, NULL::text FROM q CROSS JOIN LATERAL (
                   -- The same text's items first (`OFFSET 0` keeps them a query of their own,
                   -- by the (agent, hash) index), then the oldest: ordered by id alone, the plan
                   -- would walk every id looking for the text, and a new text has none.
                   SELECT id FROM (
                     SELECT id FROM memory_items
                     WHERE agent = q.agent AND hash = q.hash AND superseded_by IS NULL
                       AND tier <> 'L2' OFFSET 0) same
                   ORDER BY id LIMIT 1) exact
                 UNION ALL
                 SELECT DISTINCT 2, k.n, i.id, i.text FROM k
                 -- Per key, by the (agent, word) index, then the item by its id: each step a
                 -- subquery of its own (`OFFSET 0`), so that the order holds. Left to the
                 -- planner, stale row counts (the tables grow faster than their statistics)
                 -- make it scan whole tables instead, at a cost that grows with the memory.
                 CROSS JOIN LATERAL (
                   SELECT item FROM memory_prefix WHERE agent = k.agent AND word = k.word
                   OFFSET 0) p
                 CROSS JOIN LATERAL (
                   SELECT id, text FROM memory_items
                   WHERE id = p.item AND superseded_by IS NULL AND words BETWEEN k.lo AND k.hi
                   OFFSET 0) i
                 UNION ALL
                 SELECT 3, g, nextval(pg_get_serial_sequence('memory_items', 'id')), NULL::text
                   FROM generate_series(1, cardinality($1::int[])) AS g",
            )?,
            insert: prepare(
                "WITH items AS (
                   INSERT INTO memory_items
                     (id, agent, tier, kind, text, tokens, hash, words, subject, value, valid_from,
                      terms)
                   SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[],
                                        $5::text[], $6::bigint[], $7::text[], $8::int[],
                                        $9::text[], $10::text[], $11::bigint[], $20::text[])
                   RETURNING id),
                 keys AS (
                   INSERT INTO memory_prefix (agent, word, item)
                   SELECT * FROM unnest($12::text[], $13::text[], $14::bigint[])
                   ON CONFLICT DO NOTHING),
                 sources AS (
                   INSERT INTO memory_sources (item, session, from_seq, to_seq, ts_ms)
                   SELECT * FROM unnest($15::bigint[], $16::text[], $17::bigint[], $18::bigint[],
                                        $19::bigint[])
                   ON CONFLICT DO NOTHING)
                 SELECT count(*) FROM items",
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

/// Writes `items` (with their token counts) in order, with the rules and results of writing
/// them one by one.
///
/// The batch goes in segments: one statement finds what each item of a segment may already be
/// and draws ids for its new items, the segment is decided here (against what the statement
/// found and what the segment created before each item), and one statement writes it. An item
/// that states a subject ends its segment: when it is new, its supersession, which may change
/// which items are current, is written before the next segment looks anything up.
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
    let prepared: Vec<Prepared<'_>> = items.iter().zip(tokens).map(Prepared::of).collect();
    // Items and content words created per agent, added to `memory_stats` at the end (only
    // searches read them, and they see the batch whole or not at all).
    let mut counts: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    let mut written = Vec::with_capacity(items.len());
    let mut at = 0;
    while at < prepared.len() {
        let (done, stated) = write_segment(tx, &st, &prepared[at..])?;
        for (p, w) in prepared[at..].iter().zip(&done) {
            if let Written::Created(_) = w {
                let c = counts.entry(p.item.agent.as_str()).or_default();
                c.0 += 1;
                c.1 += i64::from(p.n_words);
            }
        }
        at += done.len();
        written.extend(done);
        if let Some((p, id)) = stated {
            if let Some((subject, value)) = &p.key {
                supersede(
                    tx,
                    &st,
                    p.item.agent.as_str(),
                    id,
                    subject,
                    value,
                    p.item.source.ts_ms,
                )?;
            }
        }
    }
    let created: Vec<ItemId> = written
        .iter()
        .filter_map(|w| match w {
            Written::Created(id) => Some(*id),
            _ => None,
        })
        .collect();
    count_terms(tx, &created, Terms::Add)?;
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

/// Counts the lexemes of items `ids` in their agents' document frequencies (`memory_terms`),
/// in one statement: added after the items are written, taken away before they are removed.
/// The writer holds the agents' locks, and rows are touched in key order.
pub(super) fn count_terms(tx: &mut Transaction<'_>, ids: &[ItemId], change: Terms) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    const COUNTED: &str = "SELECT i.agent, v.lexeme, count(*) AS n
         FROM memory_items i, unnest(i.tsv) AS v WHERE i.id = ANY($1)
         GROUP BY i.agent, v.lexeme ORDER BY i.agent, v.lexeme";
    let sql = match change {
        Terms::Add => format!(
            "INSERT INTO memory_terms (agent, lexeme, df) {COUNTED}
             ON CONFLICT (agent, lexeme) DO UPDATE SET df = memory_terms.df + excluded.df"
        ),
        Terms::Remove => format!(
            "UPDATE memory_terms t SET df = greatest(t.df - c.n, 0) FROM ({COUNTED}) c
             WHERE t.agent = c.agent AND t.lexeme = c.lexeme"
        ),
    };
    tx.execute(&sql, &[&ids])
        .map_err(backend("counting an item's terms"))?;
    Ok(())
}

/// Which way [`count_terms`] counts.
#[derive(Debug, Clone, Copy)]
pub(super) enum Terms {
    Add,
    Remove,
}

/// What deciding an item needs, computed once.
struct Prepared<'a> {
    item: &'a NewItem,
    tokens: i64,
    hash: String,
    /// The hash a source is known by, for kinds known only with the same text.
    same_text: Option<String>,
    words: BTreeSet<String>,
    n_words: i32,
    keys: Vec<String>,
    lo: i32,
    hi: i32,
    key: Option<(String, String)>,
}

impl<'a> Prepared<'a> {
    fn of((item, &tokens): (&'a NewItem, &u64)) -> Self {
        let hash = text::hash(&text::normalize(&item.text));
        // The same source seen again (re-indexing) changes nothing, whatever became of its
        // item. Many facts come from the same lines, so a fact is known only with the same text.
        let same_text = dedup::known_by_text(item.kind).then(|| hash.clone());
        let words = text::word_set(&item.text);
        // Near duplicates are only looked for among items of a size the threshold allows, and
        // never for short texts (no sketch keys, so no candidates).
        let keys = if words.len() >= NEAR_MIN_WORDS {
            sketch(&words)
        } else {
            Vec::new()
        };
        let size = words.len() as f64;
        Self {
            item,
            tokens: i64::try_from(tokens).unwrap_or(i64::MAX),
            same_text,
            n_words: i32::try_from(words.len()).unwrap_or(i32::MAX),
            lo: (size * NEAR_DUPLICATE).ceil() as i32,
            hi: (size / NEAR_DUPLICATE).floor() as i32,
            key: text::subject_key(&item.text),
            hash,
            words,
            keys,
        }
    }
}

/// What a segment found in the database for its items, by position.
#[derive(Default)]
struct Found {
    known: BTreeMap<usize, ItemId>,
    exact: BTreeMap<usize, ItemId>,
    near: BTreeMap<usize, Vec<(ItemId, String)>>,
    ids: Vec<ItemId>,
}

/// A source as a segment keys it: session, from, to, agent, kind.
type SourceKey<'a> = (&'a str, u64, u64, &'a str, &'a str);

/// A new item as a near-duplicate candidate: its id, size and words.
type Candidate<'a> = (ItemId, i32, &'a BTreeSet<String>);

/// What a segment created or added so far, for the items after it in the segment.
#[derive(Default)]
struct Segment<'a> {
    /// Sources recorded: the item and its hash.
    sources: BTreeMap<SourceKey<'a>, Vec<(ItemId, &'a str)>>,
    /// New items by (agent, hash), the first (lowest id) kept, unless of tier L2.
    by_hash: BTreeMap<(&'a str, &'a str), ItemId>,
    /// New items by (agent, sketch key).
    by_key: BTreeMap<(&'a str, &'a str), Vec<Candidate<'a>>>,
}

/// What became of a segment's items, and its last item when that states a subject (with its
/// id): its supersession is written before the next segment.
type Decided<'a> = (Vec<Written>, Option<(&'a Prepared<'a>, ItemId)>);

/// Decides and writes the first items of `items` up to and including the first item that
/// states a subject (the whole slice when none does); returns what became of each, and that
/// item with its id when it is new (its supersession is then written before the next segment).
fn write_segment<'a>(
    tx: &mut Transaction<'_>,
    st: &Statements,
    items: &'a [Prepared<'a>],
) -> Result<Decided<'a>> {
    // The segment ends at its first new item that states a subject at the latest, so only the
    // items up to the first that states one are looked up (and the next segment goes on from
    // there): a lookup of the whole rest, most of it looked up again by the next segment, read
    // each item more than twice on average.
    let end = items
        .iter()
        .position(|p| p.key.is_some())
        .map_or(items.len(), |i| i + 1);
    let items = &items[..end];
    let found = look_up(tx, st, items)?;
    let mut ids = found.ids.iter().copied();
    let mut seg = Segment::default();
    let mut rows = Rows::default();
    let mut written = Vec::new();
    let mut stated = None;
    for (n, p) in items.iter().enumerate() {
        let src = &p.item.source;
        let agent = p.item.agent.as_str();
        let source_key = (
            src.session.as_str(),
            src.from_seq,
            src.to_seq,
            agent,
            p.item.kind.as_str(),
        );
        let same = |hash: &str| p.same_text.as_deref().is_none_or(|t| t == hash);
        let known_here = seg
            .sources
            .get(&source_key)
            .and_then(|v| v.iter().find(|(_, h)| same(h)).map(|(id, _)| *id));
        let w = if let Some(id) = found.known.get(&n).copied().or(known_here) {
            Written::Known(id)
        } else if let Some(id) = found
            .exact
            .get(&n)
            .copied()
            .or_else(|| seg.by_hash.get(&(agent, p.hash.as_str())).copied())
        {
            Written::Duplicate(id)
        } else if let Some(id) = near(&found, &seg, n, p) {
            Written::NearDuplicate(id)
        } else {
            let id = ids
                .next()
                .ok_or_else(|| crate::error::MemoryError::Corrupt {
                    record: "memory ids".into(),
                    reason: "the lookup drew fewer ids than the segment has items".into(),
                })?;
            rows.item(p, id);
            if p.item.tier != Tier::L2 {
                seg.by_hash.entry((agent, p.hash.as_str())).or_insert(id);
            }
            for k in &p.keys {
                seg.by_key
                    .entry((agent, k.as_str()))
                    .or_default()
                    .push((id, p.n_words, &p.words));
            }
            Written::Created(id)
        };
        if !matches!(w, Written::Known(_)) {
            rows.source(p, w.item());
            seg.sources
                .entry(source_key)
                .or_default()
                .push((w.item(), p.hash.as_str()));
        }
        written.push(w);
        if let (Written::Created(id), Some(_)) = (w, &p.key) {
            stated = Some((p, id));
            break;
        }
    }
    rows.write(tx, st)?;
    Ok((written, stated))
}

/// The lowest id among the near duplicates of item `n`: found in the database, or created
/// earlier in the segment.
fn near(found: &Found, seg: &Segment<'_>, n: usize, p: &Prepared<'_>) -> Option<ItemId> {
    let agent = p.item.agent.as_str();
    let mut candidates: Vec<ItemId> = found
        .near
        .get(&n)
        .into_iter()
        .flatten()
        .filter(|(_, other)| text::jaccard(&p.words, &text::word_set(other)) >= NEAR_DUPLICATE)
        .map(|(id, _)| *id)
        .collect();
    for k in &p.keys {
        for (id, size, words) in seg.by_key.get(&(agent, k.as_str())).into_iter().flatten() {
            if (p.lo..=p.hi).contains(size) && text::jaccard(&p.words, words) >= NEAR_DUPLICATE {
                candidates.push(*id);
            }
        }
    }
    // As the SQLite backend: the exact Jaccard decides; the lowest id wins.
    candidates.into_iter().min()
}

/// Runs the segment's lookup: its items' candidates and fresh ids.
fn look_up(tx: &mut Transaction<'_>, st: &Statements, items: &[Prepared<'_>]) -> Result<Found> {
    let n: Vec<i32> = (0..items.len()).map(|i| i as i32).collect();
    let session: Vec<&str> = items
        .iter()
        .map(|p| p.item.source.session.as_str())
        .collect();
    let from: Vec<i64> = items.iter().map(|p| seq(p.item.source.from_seq)).collect();
    let to: Vec<i64> = items.iter().map(|p| seq(p.item.source.to_seq)).collect();
    let agent: Vec<&str> = items.iter().map(|p| p.item.agent.as_str()).collect();
    let kind: Vec<&str> = items.iter().map(|p| p.item.kind.as_str()).collect();
    let same_text: Vec<Option<&str>> = items.iter().map(|p| p.same_text.as_deref()).collect();
    let hash: Vec<&str> = items.iter().map(|p| p.hash.as_str()).collect();
    let lo: Vec<i32> = items.iter().map(|p| p.lo).collect();
    let hi: Vec<i32> = items.iter().map(|p| p.hi).collect();
    let (mut key_n, mut key_agent, mut key_word, mut key_lo, mut key_hi) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, p) in items.iter().enumerate() {
        for k in &p.keys {
            key_n.push(i as i32);
            key_agent.push(p.item.agent.as_str());
            key_word.push(k.as_str());
            key_lo.push(p.lo);
            key_hi.push(p.hi);
        }
    }
    let rows = tx
        .query(
            &st.lookup,
            &[
                &n, &session, &from, &to, &agent, &kind, &same_text, &hash, &lo, &hi, &key_n,
                &key_agent, &key_word, &key_lo, &key_hi,
            ],
        )
        .map_err(backend("looking up memory items' duplicates"))?;
    let mut found = Found::default();
    for r in &rows {
        let tag: i32 = r.get(0);
        let at: i32 = r.get(1);
        let id: ItemId = r.get(2);
        let at = usize::try_from(at).unwrap_or(usize::MAX);
        match tag {
            KNOWN => {
                found.known.entry(at).or_insert(id);
            }
            EXACT => {
                found.exact.entry(at).or_insert(id);
            }
            NEAR => found.near.entry(at).or_default().push((id, r.get(3))),
            IDS => found.ids.push(id),
            _ => {}
        }
    }
    found.ids.sort_unstable();
    Ok(found)
}

/// The rows a segment writes, as the columns of its insert.
#[derive(Default)]
struct Rows<'a> {
    id: Vec<ItemId>,
    agent: Vec<&'a str>,
    tier: Vec<&'a str>,
    kind: Vec<&'a str>,
    text: Vec<&'a str>,
    tokens: Vec<i64>,
    hash: Vec<&'a str>,
    words: Vec<i32>,
    subject: Vec<Option<&'a str>>,
    value: Vec<Option<&'a str>>,
    valid_from: Vec<i64>,
    terms: Vec<String>,
    key_agent: Vec<&'a str>,
    key_word: Vec<&'a str>,
    key_item: Vec<ItemId>,
    src_item: Vec<ItemId>,
    src_session: Vec<&'a str>,
    src_from: Vec<i64>,
    src_to: Vec<i64>,
    src_ts: Vec<i64>,
}

impl<'a> Rows<'a> {
    fn item(&mut self, p: &'a Prepared<'a>, id: ItemId) {
        let item = p.item;
        self.id.push(id);
        self.agent.push(item.agent.as_str());
        self.tier.push(item.tier.as_str());
        self.kind.push(item.kind.as_str());
        self.text.push(&item.text);
        self.tokens.push(p.tokens);
        self.hash.push(&p.hash);
        self.words.push(p.n_words);
        self.subject.push(p.key.as_ref().map(|(k, _)| k.as_str()));
        self.value.push(p.key.as_ref().map(|(_, v)| v.as_str()));
        self.valid_from.push(item.source.ts_ms);
        self.terms.push(text::stems(&item.text).join(" "));
        for k in &p.keys {
            self.key_agent.push(item.agent.as_str());
            self.key_word.push(k);
            self.key_item.push(id);
        }
    }

    fn source(&mut self, p: &'a Prepared<'a>, id: ItemId) {
        let s = &p.item.source;
        self.src_item.push(id);
        self.src_session.push(s.session.as_str());
        self.src_from.push(seq(s.from_seq));
        self.src_to.push(seq(s.to_seq));
        self.src_ts.push(s.ts_ms);
    }

    fn write(&self, tx: &mut Transaction<'_>, st: &Statements) -> Result<()> {
        if self.id.is_empty() && self.src_item.is_empty() {
            return Ok(());
        }
        tx.query_one(
            &st.insert,
            &[
                &self.id,
                &self.agent,
                &self.tier,
                &self.kind,
                &self.text,
                &self.tokens,
                &self.hash,
                &self.words,
                &self.subject,
                &self.value,
                &self.valid_from,
                &self.key_agent,
                &self.key_word,
                &self.key_item,
                &self.src_item,
                &self.src_session,
                &self.src_from,
                &self.src_to,
                &self.src_ts,
                &self.terms,
            ],
        )
        .map_err(backend("writing memory items"))?;
        Ok(())
    }
}

/// A seq as PostgreSQL's BIGINT (seqs are far below its limit; a larger one saturates and then
/// fails the schema's checks rather than wrapping).
fn seq(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
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
                       (agent, tier, kind, text, tokens, hash, words, valid_from, terms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
                    &[
                        &agent,
                        &Tier::L2.as_str(),
                        &ItemKind::Note.as_str(),
                        &note.text,
                        &i64::try_from(tokens).unwrap_or(i64::MAX),
                        &hash,
                        &words,
                        &note.saved_ms,
                        &text::stems(&note.text).join(" "),
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
            count_terms(tx, &[id], Terms::Add)?;
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
