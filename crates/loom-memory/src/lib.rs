//! Loom's long-term memory (DESIGN.md, "Memory"; issue 18): items derived from the log,
//! deterministically and with provenance back to the events they came from, deduplicated and
//! superseded as they are written, and searched by full text (and vectors, with an embedder)
//! under a token budget.
//!
//! - [`derive`] turns a session's log (user and assistant turns, step observations, summaries)
//!   into [`NewItem`]s; [`index`] does it for a stored session and writes them, idempotently.
//! - [`Memory`] is the backend trait; [`SqliteMemory`] keeps the items beside the log in the same
//!   SQLite file (or in RAM), with an FTS5 index.
//! - [`Memory::search`] ranks with BM25 and, when the memory has an [`Embedder`], with vector
//!   similarity too, fused by reciprocal rank; then neighbouring turns are smoothed in and the
//!   best hits packed into the budget.
//! - [`Embedder`] is the embedders' one trait: none (the default), an OpenAI-compatible
//!   endpoint ([`OpenAiEmbedder`]) and a local model folder ([`LocalEmbedder`]).

mod derive;
mod embed;
mod error;
mod index;
mod item;
mod sqlite;
mod text;

pub use derive::derive;
pub use embed::{embedder_from_spec, EmbedError, Embedder, LocalEmbedder, OpenAiEmbedder};
pub use error::{MemoryError, Result};
pub use index::{index, IndexReport};
pub use item::{
    Filters, Forgotten, Hit, Item, ItemId, ItemKind, NewItem, Provenance, Search, Source, Tier,
    Written, DEFAULT_LIMIT,
};
pub use sqlite::SqliteMemory;

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
}
