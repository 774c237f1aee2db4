//! Memory's rules, written once over what a backend does in its own SQL.
//!
//! A backend ([`MemoryRows`]: SQLite, PostgreSQL) keeps rows: it writes items whose tokens are
//! counted, finds what a search asks for, removes, keeps notes, the knowledge base and the
//! extractors' marks, each in its own transactions. Everything around those rows is here, the same
//! for every backend (`impl<B: MemoryRows + KbRows> Memory for B`): a note is validated and expired
//! notes purged before it is saved; tokens are counted before a transaction, so that no lock is
//! held for a tokenizer; new items are embedded after their write, outside any transaction (a
//! remote embedder may take seconds), and a failed embedding leaves them searchable by full text
//! for `embed_missing` to fill in later, in batches each committed as it is done; a search's query
//! is embedded before its transaction, once per question; a knowledge-base file is chunked and
//! counted before it is stored.

use std::sync::Arc;

use loom_core::{AgentId, Seq, SessionId};
use loom_tokens::{CountTokens, Tokenizer};

use crate::embed::Embedder;
use crate::error::Result;
use crate::extract::ExtractMark;
use crate::hybrid::{embed_created, QueryCache, QueryVector};
use crate::item::{Forgotten, Hit, Item, ItemId, NewItem, Search, Written};
use crate::kb::{counted_chunks, CountedChunk, KbAdded, KbFile, KbHit};
use crate::notes::{wall_clock_ms, NewNote, Saved};
use crate::Memory;

/// Items embedded per call when back-filling: large enough to batch well, small enough that
/// progress is committed often.
const BACKFILL_BATCH: usize = 256;

/// What a memory backend does in its own storage, each call in its own transaction(s): rows
/// in, rows out. Implementing it and [`KbRows`] makes a [`Memory`], with the rules of this
/// module.
pub(crate) trait MemoryRows: Send + Sync + std::fmt::Debug {
    /// What item tokens are counted with.
    fn tokenizer(&self) -> &Tokenizer;

    /// The embedder, when vectors are kept.
    fn embedder(&self) -> Option<&Arc<dyn Embedder>>;

    /// The last query embedded.
    fn query_cache(&self) -> &QueryCache;

    /// Writes `items` (`tokens` counted for each), deduplicating and superseding as they go,
    /// and moves `mark` when given, in the transaction of the last items written.
    fn write_items(
        &self,
        items: &[NewItem],
        tokens: &[u64],
        mark: Option<&ExtractMark>,
    ) -> Result<Vec<Written>>;

    /// Stores `vectors` of `model` for their items (items removed meanwhile are skipped).
    fn store_vectors(&self, model: &str, vectors: &[(ItemId, Vec<f32>)]) -> Result<()>;

    /// Up to `n` items (of `agent`, when given) without a vector of `model`, oldest first.
    fn missing_vectors(
        &self,
        model: &str,
        agent: Option<&AgentId>,
        n: usize,
    ) -> Result<Vec<(ItemId, String)>>;

    /// The hits of `search` ([`crate::search::run`] over the backend's retrievers), ranked by
    /// similarity to `query` too when given.
    fn find(&self, search: &Search, query: Option<&QueryVector<'_>>) -> Result<Vec<Hit>>;

    /// See [`Memory::item`].
    fn load(&self, id: ItemId) -> Result<Item>;

    /// See [`Memory::forget`].
    fn remove(&self, id: ItemId) -> Result<Forgotten>;

    /// See [`Memory::forget_session`].
    fn remove_session(&self, agent: &AgentId, session: &SessionId) -> Result<Vec<ItemId>>;

    /// Deletes the notes expired at `now_ms`, then saves `note` (`tokens` counted), in one
    /// transaction.
    fn purge_and_save(&self, now_ms: i64, note: &NewNote, tokens: u64) -> Result<Saved>;

    /// See [`Memory::purge_expired`].
    fn purge(&self, now_ms: i64) -> Result<Vec<ItemId>>;

    /// See [`Memory::note_expiry`].
    fn expiry(&self, id: ItemId) -> Result<Option<i64>>;

    /// See [`Memory::extracted_to`].
    fn mark(&self, agent: &AgentId, session: &SessionId, extractor: &str) -> Result<Seq>;
}

/// What a backend does for the knowledge base, in its own storage: files' chunks per scope.
pub(crate) trait KbRows {
    /// Stores `chunks` (counted) as the file `path` of `scope`'s knowledge base, whose content
    /// hashes to `hash`.
    fn kb_store(
        &self,
        scope: &str,
        path: &str,
        hash: &str,
        chunks: &[CountedChunk],
        now_ms: i64,
    ) -> Result<KbAdded>;

    /// See [`Memory::kb_search`].
    fn kb_find(&self, scope: &str, query: &str, budget: u64, limit: usize) -> Result<Vec<KbHit>>;

    /// See [`Memory::kb_list`].
    fn kb_files(&self, scope: &str) -> Result<Vec<KbFile>>;

    /// See [`Memory::kb_remove`].
    fn kb_delete(&self, scope: &str, path: &str) -> Result<usize>;
}

/// Writes `items`, then embeds the new ones (see the module's rules).
fn write<B: MemoryRows>(
    b: &B,
    items: &[NewItem],
    mark: Option<&ExtractMark>,
) -> Result<Vec<Written>> {
    let tokens: Vec<u64> = items.iter().map(|i| b.tokenizer().count(&i.text)).collect();
    let written = b.write_items(items, &tokens, mark)?;
    if let Some(embedder) = b.embedder() {
        let pairs = embed_created(embedder.as_ref(), &written, items)?;
        if !pairs.is_empty() {
            b.store_vectors(embedder.model_id(), &pairs)?;
        }
    }
    Ok(written)
}

impl<B: MemoryRows + KbRows> Memory for B {
    fn write(&self, items: &[NewItem]) -> Result<Vec<Written>> {
        write(self, items, None)
    }

    fn search(&self, search: &Search) -> Result<Vec<Hit>> {
        let query = match self.embedder() {
            Some(e) => self.query_cache().vector(e.as_ref(), search)?,
            None => None,
        };
        self.find(search, query.as_ref())
    }

    fn item(&self, id: ItemId) -> Result<Item> {
        self.load(id)
    }

    fn forget(&self, id: ItemId) -> Result<Forgotten> {
        self.remove(id)
    }

    fn forget_session(&self, agent: &AgentId, session: &SessionId) -> Result<Vec<ItemId>> {
        self.remove_session(agent, session)
    }

    fn count_tokens(&self, text: &str) -> u64 {
        self.tokenizer().count(text)
    }

    fn embed_missing(&self, agent: Option<&AgentId>) -> Result<usize> {
        let Some(embedder) = self.embedder() else {
            return Ok(0);
        };
        let model = embedder.model_id();
        let mut done = 0;
        loop {
            let batch = self.missing_vectors(model, agent, BACKFILL_BATCH)?;
            if batch.is_empty() {
                return Ok(done);
            }
            let texts: Vec<&str> = batch.iter().map(|(_, t)| t.as_str()).collect();
            let vectors = embedder.embed(&texts)?;
            let pairs: Vec<(ItemId, Vec<f32>)> =
                batch.iter().map(|(id, _)| *id).zip(vectors).collect();
            self.store_vectors(model, &pairs)?;
            done += batch.len();
        }
    }

    fn note_expiry(&self, id: ItemId) -> Result<Option<i64>> {
        self.expiry(id)
    }

    fn kb_add(&self, scope: &str, path: &str, text: &str, now_ms: i64) -> Result<KbAdded> {
        let counted = counted_chunks(path, text, self.tokenizer())?;
        self.kb_store(scope, path, &crate::text::hash(text), &counted, now_ms)
    }

    fn kb_search(&self, scope: &str, query: &str, budget: u64, limit: usize) -> Result<Vec<KbHit>> {
        self.kb_find(scope, query, budget, limit)
    }

    fn kb_list(&self, scope: &str) -> Result<Vec<KbFile>> {
        self.kb_files(scope)
    }

    fn kb_remove(&self, scope: &str, path: &str) -> Result<usize> {
        self.kb_delete(scope, path)
    }

    fn extracted_to(&self, agent: &AgentId, session: &SessionId, extractor: &str) -> Result<Seq> {
        self.mark(agent, session, extractor)
    }

    fn write_extracted(&self, items: &[NewItem], mark: &ExtractMark) -> Result<Vec<Written>> {
        write(self, items, Some(mark))
    }

    fn save(&self, note: &NewNote) -> Result<Saved> {
        note.validate()?;
        let tokens = self.tokenizer().count(&note.text);
        self.purge_and_save(wall_clock_ms(), note, tokens)
    }

    fn purge_expired(&self, now_ms: i64) -> Result<Vec<ItemId>> {
        self.purge(now_ms)
    }
}
