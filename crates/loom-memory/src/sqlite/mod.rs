//! The SQLite memory backend: its tables beside the log in the same file (or in memory, for
//! tests and embedding), one connection behind a mutex.
//!
//! Memory is derived from the log and can be rebuilt from it (`loom memory index`), so its
//! writes are committed with `synchronous=NORMAL`: a crash may lose the last writes, never
//! corrupt them, and re-indexing restores them.

mod extra;
mod kb;
mod notes;
mod rank;
mod read;
mod schema;
mod search;
mod terms;
mod vectors;
mod write;

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use loom_tokens::{Encoding, Tokenizer};
use rusqlite::{Connection, TransactionBehavior};

use loom_core::{AgentId, Seq, SessionId};

use crate::embed::Embedder;
use crate::error::{backend, Result};
use crate::extract::ExtractMark;
use crate::hybrid::{QueryCache, QueryVector};
use crate::item::{Forgotten, Hit, Item, ItemId, NewItem, Search, Written};
use crate::kb::{CountedChunk, KbAdded, KbFile, KbHit};
use crate::notes::{NewNote, Saved};
use crate::rules::{KbRows, MemoryRows};
use crate::Memory;

/// How long a write waits for another process's write to the file to finish.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Long-term memory in an SQLite database.
pub struct SqliteMemory {
    conn: Mutex<Connection>,
    tokenizer: Tokenizer,
    embedder: Option<Arc<dyn Embedder>>,
    /// The last query embedded, so that the same question asked again is not embedded twice.
    last_query: QueryCache,
    /// The vectors in RAM, for search.
    vectors: vectors::Vectors,
}

impl std::fmt::Debug for SqliteMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteMemory")
            .field("tokenizer", &self.tokenizer.name())
            .field("embedder", &self.embedder.as_ref().map(|e| e.model_id()))
            .finish_non_exhaustive()
    }
}

impl SqliteMemory {
    /// Opens the memory tables of the database at `path` (the log's file), creating them on
    /// first use. Token counts are exact `o200k_base` counts; see [`Self::with_tokenizer`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let conn = Connection::open(path).map_err(backend("opening the memory database"))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(backend("setting the busy timeout"))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(backend("switching to WAL mode"))?;
        Self::init(conn)
    }

    /// Memory held in RAM only: for tests, benchmarks and embedding without a file.
    pub fn open_in_memory() -> Result<Self> {
        let conn = Connection::open_in_memory().map_err(backend("opening memory in RAM"))?;
        Self::init(conn)
    }

    fn init(mut conn: Connection) -> Result<Self> {
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(backend("setting synchronous=NORMAL"))?;
        schema::migrate(&mut conn)?;
        extra::ensure(&conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
            tokenizer: Tokenizer::Bpe(Encoding::O200kBase),
            embedder: None,
            last_query: QueryCache::default(),
            vectors: vectors::Vectors::default(),
        })
    }

    /// Adds vector similarity to search and embeds items as they are written: searches fuse
    /// BM25 with the similarity to the query's vector by their scores. Items written before
    /// (or by a memory without this embedder) get their vectors from [`Self::embed_missing`],
    /// which `loom memory index` runs.
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self.last_query = QueryCache::default();
        self
    }

    /// The embedder, when one is configured.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// Embeds every item (of `agent`, when given) that has no vector of the current embedder's
    /// model — items written without an embedder, or under another model — in batches, each
    /// committed as it is done; returns how many were embedded (0 without an embedder).
    pub fn embed_missing(&self, agent: Option<&AgentId>) -> Result<usize> {
        Memory::embed_missing(self, agent)
    }

    /// Counts item tokens with `tokenizer` instead (the model's own, so that budgets are in the
    /// tokens the model will be billed). Counts are made when an item is written: set it before
    /// the first write.
    pub fn with_tokenizer(mut self, tokenizer: Tokenizer) -> Self {
        self.tokenizer = tokenizer;
        self
    }

    /// The memory schema version this build writes.
    pub fn schema_version() -> i64 {
        schema::latest_version()
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while the lock was held dropped its transaction, which rolls it back.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` in a write transaction: all of it or nothing.
    fn write_tx<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(backend("starting a memory write"))?;
        let out = f(&tx)?;
        tx.commit().map_err(backend("committing a memory write"))?;
        Ok(out)
    }

    /// Runs `f` in a read transaction, so that it sees one snapshot.
    fn read_tx<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(backend("starting a memory read"))?;
        let out = f(&tx)?;
        tx.commit().map_err(backend("ending a memory read"))?;
        Ok(out)
    }
}

/// Items written per transaction: short enough that the log's writes, which wait for the same
/// lock, wait for one of them at most a few milliseconds.
const WRITE_CHUNK: usize = 16;

impl MemoryRows for SqliteMemory {
    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    fn query_cache(&self) -> &QueryCache {
        &self.last_query
    }

    /// Writes `items` (their tokens counted) and moves `mark` in the transaction of the last
    /// items written.
    ///
    /// The write lock is the store's too (one database file): the log's writes wait while it is
    /// held. So what an earlier indexing already wrote is found first, in a read (WAL readers
    /// never block the writer), and the rest is written [`WRITE_CHUNK`] items per transaction,
    /// the lock given up between them, so a request's write waits for one short transaction at
    /// most. Each transaction is whole; an error leaves the chunks before it written, which is
    /// what indexing again would write anyway (every write is idempotent by source).
    fn write_items(
        &self,
        items: &[NewItem],
        tokens: &[u64],
        mark: Option<&ExtractMark>,
    ) -> Result<Vec<Written>> {
        let known: Vec<Option<ItemId>> = self.read_tx(|tx| {
            items
                .iter()
                .map(|i| write::known(tx, i, &crate::text::hash(&crate::text::normalize(&i.text))))
                .collect()
        })?;
        let mut written: Vec<Option<Written>> =
            known.iter().map(|k| k.map(Written::Known)).collect();
        let todo: Vec<usize> = (0..items.len()).filter(|&i| known[i].is_none()).collect();
        let chunks: Vec<&[usize]> = todo.chunks(WRITE_CHUNK).collect();
        if chunks.is_empty() {
            if let Some(mark) = mark {
                self.write_tx(|tx| extra::set_mark(tx, mark))?;
            }
        }
        for (n, chunk) in chunks.iter().enumerate() {
            let last = n + 1 == chunks.len();
            let done: Vec<Written> = self.write_tx(|tx| {
                let done = chunk
                    .iter()
                    .map(|&i| write::write_item(tx, &items[i], tokens[i]))
                    .collect::<Result<Vec<_>>>()?;
                if let (true, Some(mark)) = (last, mark) {
                    extra::set_mark(tx, mark)?;
                }
                Ok(done)
            })?;
            for (&i, w) in chunk.iter().zip(done) {
                written[i] = Some(w);
            }
            if !last {
                std::thread::yield_now();
            }
        }
        Ok(written.into_iter().flatten().collect())
    }

    fn store_vectors(&self, model: &str, pairs: &[(ItemId, Vec<f32>)]) -> Result<()> {
        self.write_tx(|tx| vectors::store(tx, model, pairs))
    }

    fn missing_vectors(
        &self,
        model: &str,
        agent: Option<&AgentId>,
        n: usize,
    ) -> Result<Vec<(ItemId, String)>> {
        self.read_tx(|tx| vectors::missing(tx, model, agent.map(AgentId::as_str), n))
    }

    fn find(&self, search: &Search, query: Option<&QueryVector<'_>>) -> Result<Vec<Hit>> {
        self.read_tx(|tx| search::search(tx, &self.vectors, search, query))
    }

    fn load(&self, id: ItemId) -> Result<Item> {
        self.read_tx(|tx| read::load_item(tx, id))
    }

    fn remove(&self, id: ItemId) -> Result<Forgotten> {
        self.write_tx(|tx| write::forget(tx, id))
    }

    fn remove_session(&self, agent: &AgentId, session: &SessionId) -> Result<Vec<ItemId>> {
        self.write_tx(|tx| write::forget_session(tx, agent, session))
    }

    fn purge_and_save(&self, now_ms: i64, note: &NewNote, tokens: u64) -> Result<Saved> {
        self.write_tx(|tx| {
            notes::purge(tx, now_ms)?;
            notes::save(tx, note, tokens)
        })
    }

    fn purge(&self, now_ms: i64) -> Result<Vec<ItemId>> {
        self.write_tx(|tx| notes::purge(tx, now_ms))
    }

    fn expiry(&self, id: ItemId) -> Result<Option<i64>> {
        self.read_tx(|tx| notes::expiry(tx, id))
    }

    fn mark(&self, agent: &AgentId, session: &SessionId, extractor: &str) -> Result<Seq> {
        self.read_tx(|tx| extra::extracted_to(tx, agent.as_str(), session.as_str(), extractor))
    }
}

impl KbRows for SqliteMemory {
    fn kb_store(
        &self,
        scope: &str,
        path: &str,
        hash: &str,
        chunks: &[CountedChunk],
        now_ms: i64,
    ) -> Result<KbAdded> {
        self.write_tx(|tx| kb::add(tx, scope, path, hash, chunks, now_ms))
    }

    fn kb_find(&self, scope: &str, query: &str, budget: u64, limit: usize) -> Result<Vec<KbHit>> {
        self.read_tx(|tx| kb::search(tx, scope, query, budget, limit))
    }

    fn kb_files(&self, scope: &str) -> Result<Vec<KbFile>> {
        self.read_tx(|tx| kb::list(tx, scope))
    }

    fn kb_delete(&self, scope: &str, path: &str) -> Result<usize> {
        self.write_tx(|tx| kb::remove(tx, scope, path))
    }
}
