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
//! The driver is the synchronous `postgres` client: call it from a blocking thread (a server
//! uses `spawn_blocking`), never from inside an async task.

mod schema;
mod search;
mod write;

use std::sync::{Mutex, MutexGuard, PoisonError};

use loom_tokens::{CountTokens, Encoding, Tokenizer};
use postgres::{Client, NoTls};

use crate::error::{postgres as backend, MemoryError, Result};
use crate::item::{Forgotten, Hit, Item, ItemId, NewItem, Search, Written};
use crate::notes::{wall_clock_ms, NewNote, Saved};
use crate::Memory;

/// Long-term memory in a PostgreSQL database.
pub struct PgMemory {
    config: postgres::Config,
    /// The URL with its password hidden, for errors.
    db: String,
    conn: Mutex<Option<Client>>,
    tokenizer: Tokenizer,
}

impl std::fmt::Debug for PgMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgMemory")
            .field("db", &self.db)
            .field("tokenizer", &self.tokenizer.name())
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
        let memory = Self {
            config,
            db,
            conn: Mutex::new(None),
            tokenizer: Tokenizer::Bpe(Encoding::O200kBase),
        };
        memory.with_client(schema::migrate)?;
        Ok(memory)
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

impl Memory for PgMemory {
    fn write(&self, items: &[NewItem]) -> Result<Vec<Written>> {
        // Counted before the transaction, so that the lock is held for SQL only.
        let tokens: Vec<u64> = items
            .iter()
            .map(|i| self.tokenizer.count(&i.text))
            .collect();
        self.tx(|tx| write::write_items(tx, items, &tokens))
    }

    fn search(&self, search: &Search) -> Result<Vec<Hit>> {
        self.tx(|tx| search::search(tx, search))
    }

    fn item(&self, id: ItemId) -> Result<Item> {
        self.tx(|tx| search::load_item(tx, id))
    }

    fn forget(&self, id: ItemId) -> Result<Forgotten> {
        self.tx(|tx| write::forget(tx, id))
    }

    fn count_tokens(&self, text: &str) -> u64 {
        self.tokenizer.count(text)
    }

    fn save(&self, note: &NewNote) -> Result<Saved> {
        note.validate()?;
        let tokens = self.tokenizer.count(&note.text);
        let now = wall_clock_ms();
        self.tx(|tx| {
            write::purge(tx, now)?;
            write::save(tx, note, tokens)
        })
    }

    fn note_expiry(&self, id: ItemId) -> Result<Option<i64>> {
        self.tx(|tx| write::expiry(tx, id))
    }

    fn purge_expired(&self, now_ms: i64) -> Result<Vec<ItemId>> {
        self.tx(|tx| write::purge(tx, now_ms))
    }
}
