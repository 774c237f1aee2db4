//! Loom's long-term memory (DESIGN.md, "Memory"; issue 18): items derived from the log,
//! deterministically and with provenance back to the events they came from, deduplicated and
//! superseded as they are written, and searched by full text (and vectors, with an embedder)
//! under a token budget.
//!
//! - [`derive`] turns a session's log (user and assistant turns, step observations, summaries)
//!   into [`NewItem`]s; [`index`] does it for a stored session and writes them, idempotently.
//! - [`Memory`] is the backend trait; [`SqliteMemory`] keeps the items beside the log in the same
//!   SQLite file (or in RAM), with an FTS5 index; [`PgMemory`] in the same PostgreSQL database,
//!   with its full-text search; [`open`] picks the one beside a log.
//! - The tiers (DESIGN.md, Memory): L1 is the session's recent log ([`recent`]), L2 the notes
//!   saved during a session with a time to live ([`Memory::save`]), L3 session summaries and L4
//!   long-term items from the log; [`recall`] searches one tier, or a session's L1–L3 with L4.
//! - [`kb`] chunks files on their structure for the knowledge base ([`Memory::kb_add`],
//!   [`Memory::kb_search`]), kept by both backends.
//! - [`Memory::search`] ranks with BM25 and, when the memory has an [`Embedder`], with vector
//!   similarity too, fused by their scores; then neighbouring turns are smoothed in and the
//!   best hits packed into the budget.
//! - [`extract`] is the optional LLM extractor: a model distils facts from windows of a log,
//!   each checked against the lines it cites and written as an L4 item with that provenance.
//! - [`Embedder`] is the embedders' one trait: none (the default), an OpenAI-compatible
//!   endpoint ([`OpenAiEmbedder`]) and a local model folder ([`LocalEmbedder`]).

use loom_core::{AgentId, Seq, SessionId};

mod bm25;
mod dedup;
mod derive;
mod embed;
mod error;
pub mod extract;
mod hybrid;
mod index;
mod item;
pub mod kb;
mod notes;
mod par;
mod postgres;
mod rules;
mod search;
mod sqlite;
mod text;
mod tiers;

pub use derive::derive;
pub use embed::{embedder_from_spec, EmbedError, Embedder, LocalEmbedder, OpenAiEmbedder};
pub use error::{MemoryError, Result};
pub use extract::{extract, ExtractMark, ExtractReport, FactModel, ProviderFacts};
pub use index::{index, index_after, index_as, IndexReport};
pub use item::limit_for;
pub use item::{
    Filters, Forgotten, Hit, Item, ItemId, ItemKind, NewItem, Provenance, Search, Source, Tier,
    Written, DEFAULT_LIMIT, MIN_HIT_TOKENS,
};
pub use kb::{FileKind, KbAdded, KbFile, KbHit};
pub use notes::{NewNote, Saved, MAX_NOTE_BYTES};
pub use postgres::PgMemory;
pub use sqlite::SqliteMemory;
pub use tiers::{recall, recent, Recall, L1_WINDOW};

/// The memory that lives beside the log of `db`: in the same SQLite file, or in the same
/// PostgreSQL database and schema. Every front end opens memory this way, so that one `--db`
/// names one place for both.
pub fn open(db: &loom_store::Database) -> Result<Box<dyn Memory>> {
    open_with(db, None)
}

/// [`open`], with vector search by `embedder` when one is given: vectors are kept beside the
/// items, in the SQLite file or the PostgreSQL database.
pub fn open_with(
    db: &loom_store::Database,
    embedder: Option<std::sync::Arc<dyn Embedder>>,
) -> Result<Box<dyn Memory>> {
    Ok(match db {
        loom_store::Database::Sqlite(path) => {
            let m = SqliteMemory::open(path)?;
            Box::new(match embedder {
                Some(e) => m.with_embedder(e),
                None => m,
            })
        }
        loom_store::Database::Postgres(url) => {
            let m = PgMemory::open(url)?;
            Box::new(match embedder {
                Some(e) => m.with_embedder(e),
                None => m,
            })
        }
        other => {
            return Err(MemoryError::Open {
                db: other.to_string(),
                reason: "this build keeps memory in SQLite or PostgreSQL only".into(),
            })
        }
    })
}

/// A memory backend: where items live and how they are found.
///
/// Every method is atomic. Writing is where deduplication and supersession happen, so that a
/// search never has to reconcile contradicting items at read time.
pub trait Memory: Send + Sync + std::fmt::Debug {
    /// Writes derived items in order, in one transaction; says for each what became of it
    /// (created, merged into an exact or near duplicate, or already known).
    fn write(&self, items: &[NewItem]) -> Result<Vec<Written>>;

    /// The best items for `search`, best first, whose tokens sum to at most its budget.
    fn search(&self, search: &Search) -> Result<Vec<Hit>>;

    /// Item `id` with its provenance ([`MemoryError::ItemNotFound`] when there is none).
    fn item(&self, id: ItemId) -> Result<Item>;

    /// Removes item `id`: the only delete. Returns what was removed and which items it had
    /// superseded (they become current again).
    fn forget(&self, id: ItemId) -> Result<Forgotten>;

    /// Forgets what `session` of `agent` gave memory (the session was deleted): an item whose
    /// every source is in it is forgotten as [`Memory::forget`] does, any other loses that
    /// session's sources, and the extractors' marks for it go. Returns the items forgotten.
    fn forget_session(&self, agent: &AgentId, session: &SessionId) -> Result<Vec<ItemId>>;

    /// Exact token count of `text` with the memory's tokenizer (what budgets are counted in).
    fn count_tokens(&self, text: &str) -> u64;

    /// Embeds the items (of `agent`, when given) that have no vector of the memory's embedder's
    /// model; returns how many (0 for a memory without an embedder).
    fn embed_missing(&self, agent: Option<&AgentId>) -> Result<usize> {
        let _ = agent;
        Ok(0)
    }

    /// When note `id` expires (`None`: it does not, or it is not a note).
    fn note_expiry(&self, id: ItemId) -> Result<Option<i64>>;

    /// Adds (or re-adds) the file `path` with content `text` to the knowledge base of `scope`
    /// (`""` for the local user, a tenant's name in the server): it is chunked on its structure
    /// and replaces the chunks of an earlier version; the same content again changes nothing.
    fn kb_add(&self, scope: &str, path: &str, text: &str, now_ms: i64) -> Result<KbAdded> {
        let _ = (scope, path, text, now_ms);
        Err(MemoryError::Unsupported("a knowledge base"))
    }

    /// The chunks of `scope`'s knowledge base best matching `query`, best first, whose tokens
    /// sum to at most `budget`.
    fn kb_search(&self, scope: &str, query: &str, budget: u64, limit: usize) -> Result<Vec<KbHit>> {
        let _ = (scope, query, budget, limit);
        Err(MemoryError::Unsupported("a knowledge base"))
    }

    /// The files of `scope`'s knowledge base, by path.
    fn kb_list(&self, scope: &str) -> Result<Vec<KbFile>> {
        let _ = scope;
        Err(MemoryError::Unsupported("a knowledge base"))
    }

    /// Removes file `path` from `scope`'s knowledge base; returns how many chunks it had
    /// ([`MemoryError::InvalidInput`] when it is not there).
    fn kb_remove(&self, scope: &str, path: &str) -> Result<usize> {
        let _ = (scope, path);
        Err(MemoryError::Unsupported("a knowledge base"))
    }

    /// How far the extractor named `extractor` has read `session` for `agent` (0: not at all).
    fn extracted_to(&self, agent: &AgentId, session: &SessionId, extractor: &str) -> Result<Seq> {
        let _ = (agent, session, extractor);
        Err(MemoryError::Unsupported("the LLM extractor"))
    }

    /// Writes extracted facts as [`Memory::write`] does and moves the extractor's mark to
    /// `mark.to_seq`, in one transaction: a window is either written and marked, or neither.
    fn write_extracted(&self, items: &[NewItem], mark: &ExtractMark) -> Result<Vec<Written>> {
        let _ = (items, mark);
        Err(MemoryError::Unsupported("the LLM extractor"))
    }

    /// Saves a note into L2 (session working memory), with its provenance and time to live.
    /// Backends without notes refuse it.
    fn save(&self, note: &NewNote) -> Result<Saved> {
        let _ = note;
        Err(MemoryError::Unsupported("saving notes"))
    }

    /// Deletes the notes that expired at or before `now_ms` (they are never returned after
    /// they expire; this frees their rows). Returns their ids.
    fn purge_expired(&self, now_ms: i64) -> Result<Vec<ItemId>> {
        let _ = now_ms;
        Ok(Vec::new())
    }
}
