//! The PostgreSQL memory backend: its tables beside the log's in the same database (and
//! schema), for many `loom serve` processes sharing one store.
//!
//! It keeps the SQLite backend's contract — the same items, provenance, deduplication,
//! supersession and `forget`, checked by one conformance suite — with PostgreSQL's own full
//! text: an English `tsvector` per item under a GIN index, ranked by BM25 computed from
//! per-agent statistics the backend keeps itself. Writes of one agent are serialized across
//! processes by a transaction-level advisory lock, so two servers indexing the same agent at
//! once still write one item for one fact.
//!
//! With an embedder, item vectors live in `memory_vectors` and are compared with the query's in
//! the server ([`vectors`]: pgvector where the extension is there, an exact scan in SQL
//! otherwise), fused with BM25 as in SQLite. The knowledge base ([`kb`]) and the LLM
//! extractor's marks are kept here too, so that every `Memory` method works on both backends.
//!
//! The driver is the synchronous `postgres` client: call it from a blocking thread (a server
//! uses `spawn_blocking`), never from inside an async task.

mod filters;
mod forget;
mod kb;
mod schema;
mod search;
mod vectors;
mod write;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use loom_tokens::{Encoding, Tokenizer};
use postgres::{Client, NoTls};

use loom_core::{AgentId, Seq, SessionId};

use crate::embed::Embedder;
use crate::error::{postgres as backend, MemoryError, Result};
use crate::extract::ExtractMark;
use crate::hybrid::{QueryCache, QueryVector};
use crate::item::{Forgotten, Hit, Item, ItemId, NewItem, Search, Written};
use crate::kb::{CountedChunk, KbAdded, KbFile, KbHit};
use crate::notes::{NewNote, Saved};
use crate::rules::{KbRows, MemoryRows};

/// Long-term memory in a PostgreSQL database.
pub struct PgMemory {
    config: postgres::Config,
    /// The URL with its password hidden, for errors.
    db: String,
    conn: Mutex<Option<Client>>,
    tokenizer: Tokenizer,
    embedder: Option<Arc<dyn Embedder>>,
    /// The last query embedded, so that the same question asked again is not embedded twice.
    last_query: QueryCache,
    /// Whether vectors are compared by pgvector (its extension is installed and visible here)
    /// rather than by the exact scan in SQL.
    pgvector: bool,
}

impl std::fmt::Debug for PgMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgMemory")
            .field("db", &self.db)
            .field("tokenizer", &self.tokenizer.name())
            .field("embedder", &self.embedder.as_ref().map(|e| e.model_id()))
            .field("pgvector", &self.pgvector)
            .finish_non_exhaustive()
    }
}

/// `url` with the password of its user, if any, hidden.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) if user.contains(':') => {
            let name = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{name}:***@{host}{tail}")
        }
        _ => url.to_owned(),
    }
}

impl PgMemory {
    /// Connects to the database at `url` — the log's URL, `schema=` and all, as `--db` takes
    /// it — and creates or migrates the memory tables. Token counts are exact `o200k_base`
    /// counts; see [`Self::with_tokenizer`].
    pub fn open(url: &str) -> Result<Self> {
        let db = redact(url);
        let config = loom_store::postgres_config(url).map_err(|e| MemoryError::Open {
            db: db.clone(),
            reason: e.to_string(),
        })?;
        let mut memory = Self {
            config,
            db,
            conn: Mutex::new(None),
            tokenizer: Tokenizer::Bpe(Encoding::O200kBase),
            embedder: None,
            last_query: QueryCache::default(),
            pgvector: false,
        };
        memory.pgvector = memory.with_client(schema::migrate)?;
        Ok(memory)
    }

    /// Adds vector similarity to search and embeds items as they are written: searches fuse
    /// BM25 with the similarity to the query's vector by their scores. Items written before
    /// (or by a memory without this embedder) get their vectors from
    /// [`Memory::embed_missing`], which `loom memory index` runs.
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self.last_query = QueryCache::default();
        self
    }

    /// The embedder, when one is configured.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// Whether vectors are compared by pgvector (`false`: by the exact scan in SQL).
    pub fn uses_pgvector(&self) -> bool {
        self.pgvector
    }

    /// Counts item tokens with `tokenizer` instead (the model's own). Counts are made when an
    /// item is written: set it before the first write.
    pub fn with_tokenizer(mut self, tokenizer: Tokenizer) -> Self {
        self.tokenizer = tokenizer;
        self
    }

    /// The memory schema version this build writes.
    pub fn schema_version() -> i64 {
        schema::latest_version()
    }

    fn lock(&self) -> MutexGuard<'_, Option<Client>> {
        // A panic while the lock was held dropped its transaction, which rolls it back.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the connection, connecting first when there is none or the server closed it
    /// (a restart): the call after a restart reconnects instead of failing for good.
    fn with_client<T>(&self, f: impl FnOnce(&mut Client) -> Result<T>) -> Result<T> {
        let mut slot = self.lock();
        if slot.as_ref().is_none_or(Client::is_closed) {
            let client = self.config.connect(NoTls).map_err(|e| MemoryError::Open {
                db: self.db.clone(),
                reason: e.to_string(),
            })?;
            *slot = Some(client);
        }
        let Some(client) = slot.as_mut() else {
            return Err(MemoryError::Open {
                db: self.db.clone(),
                reason: "no connection".into(),
            });
        };
        f(client)
    }

    /// Runs `f` in a transaction: all of it or nothing.
    fn tx<T>(&self, f: impl FnOnce(&mut postgres::Transaction<'_>) -> Result<T>) -> Result<T> {
        self.with_client(|client| {
            let mut tx = client
                .transaction()
                .map_err(backend("starting a memory transaction"))?;
            let out = f(&mut tx)?;
            tx.commit()
                .map_err(backend("committing a memory transaction"))?;
            Ok(out)
        })
    }
}

/// Items written per transaction (see `write_items` below): a few statements each, so the
/// agent's lock is held for milliseconds.
const WRITE_CHUNK: usize = 256;

impl MemoryRows for PgMemory {
    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    fn query_cache(&self) -> &QueryCache {
        &self.last_query
    }

    /// Writes `items` (their tokens counted), [`WRITE_CHUNK`] per transaction, and moves
    /// `mark` in the last one. Short transactions hold an agent's advisory lock (and a pooled
    /// connection) briefly, so a request that writes the same agent's memory, or needs the
    /// connection, waits for one of them at most. Each transaction is whole; an error leaves the
    /// chunks before it written, which indexing again would write anyway.
    fn write_items(
        &self,
        items: &[NewItem],
        tokens: &[u64],
        mark: Option<&ExtractMark>,
    ) -> Result<Vec<Written>> {
        let mut written = Vec::with_capacity(items.len());
        let chunks = items.len().div_ceil(WRITE_CHUNK).max(1);
        for n in 0..chunks {
            let range = n * WRITE_CHUNK..((n + 1) * WRITE_CHUNK).min(items.len());
            let last = n + 1 == chunks;
            written.extend(self.tx(|tx| {
                let done = write::write_items(tx, &items[range.clone()], &tokens[range.clone()])?;
                if let (true, Some(mark)) = (last, mark) {
                    write::set_mark(tx, mark)?;
                }
                Ok(done)
            })?);
        }
        Ok(written)
    }

    fn store_vectors(&self, model: &str, pairs: &[(ItemId, Vec<f32>)]) -> Result<()> {
        self.tx(|tx| vectors::store(tx, model, pairs, self.pgvector))
    }

    fn missing_vectors(
        &self,
        model: &str,
        agent: Option<&AgentId>,
        n: usize,
    ) -> Result<Vec<(ItemId, String)>> {
        self.tx(|tx| vectors::missing(tx, model, agent.map(AgentId::as_str), n))
    }

    fn find(&self, search: &Search, query: Option<&QueryVector<'_>>) -> Result<Vec<Hit>> {
        self.tx(|tx| search::search(tx, search, query, self.pgvector))
    }

    fn load(&self, id: ItemId) -> Result<Item> {
        self.tx(|tx| search::load_item(tx, id))
    }

    fn remove(&self, id: ItemId) -> Result<Forgotten> {
        self.tx(|tx| forget::forget(tx, id))
    }

    fn remove_session(&self, agent: &AgentId, session: &SessionId) -> Result<Vec<ItemId>> {
        self.tx(|tx| forget::forget_session(tx, agent, session))
    }

    fn purge_and_save(&self, now_ms: i64, note: &NewNote, tokens: u64) -> Result<Saved> {
        self.tx(|tx| {
            forget::purge(tx, now_ms)?;
            write::save(tx, note, tokens)
        })
    }

    fn purge(&self, now_ms: i64) -> Result<Vec<ItemId>> {
        self.tx(|tx| forget::purge(tx, now_ms))
    }

    fn expiry(&self, id: ItemId) -> Result<Option<i64>> {
        self.tx(|tx| write::expiry(tx, id))
    }

    fn mark(&self, agent: &AgentId, session: &SessionId, extractor: &str) -> Result<Seq> {
        self.tx(|tx| write::extracted_to(tx, agent.as_str(), session.as_str(), extractor))
    }
}

impl KbRows for PgMemory {
    fn kb_store(
        &self,
        scope: &str,
        path: &str,
        hash: &str,
        chunks: &[CountedChunk],
        now_ms: i64,
    ) -> Result<KbAdded> {
        self.tx(|tx| kb::add(tx, scope, path, hash, chunks, now_ms))
    }

    fn kb_find(&self, scope: &str, query: &str, budget: u64, limit: usize) -> Result<Vec<KbHit>> {
        self.tx(|tx| kb::search(tx, scope, query, budget, limit))
    }

    fn kb_files(&self, scope: &str) -> Result<Vec<KbFile>> {
        self.tx(|tx| kb::list(tx, scope))
    }

    fn kb_delete(&self, scope: &str, path: &str) -> Result<usize> {
        self.tx(|tx| kb::remove(tx, scope, path))
    }
}
