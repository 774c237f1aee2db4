//! Builders for events and sessions, and the harnesses that give each scenario a fresh backend.

use std::path::PathBuf;

use loom_core::{AgentId, ContentStats, EventBody, NewEvent, SessionId, ToolCall, ToolOutput};
use loom_store::{
    BlobStore, FsBlobStore, MemoryBlobStore, MemoryStore, NewSession, PgBlobStore, PgStore,
    SqliteStore, Store,
};
use tempfile::TempDir;

pub(crate) use loom_testkit::pg::{fresh_schema, PgSchema};

/// A fresh store of one backend, able to close and reopen it over the same storage.
pub(crate) trait StoreHarness {
    /// The backend.
    type Store: Store;
    /// A new, empty store.
    fn open() -> Self;
    /// A new, empty store, or `None` when the backend cannot run here (PostgreSQL with no
    /// cluster to test against; the reason has been printed).
    fn try_open() -> Option<Self>
    where
        Self: Sized,
    {
        Some(Self::open())
    }
    /// The store under test.
    fn store(&self) -> &Self::Store;
    /// Closes the store and opens it again over the same storage. The memory backend's storage
    /// is the instance itself, so it keeps it.
    fn reopen(&mut self);
}

/// The in-memory backend.
#[derive(Debug)]
pub(crate) struct MemoryHarness(MemoryStore);

impl StoreHarness for MemoryHarness {
    type Store = MemoryStore;
    fn open() -> Self {
        Self(MemoryStore::new())
    }
    fn store(&self) -> &MemoryStore {
        &self.0
    }
    fn reopen(&mut self) {}
}

/// The SQLite backend on a file in a temporary folder.
#[derive(Debug)]
pub(crate) struct SqliteHarness {
    store: SqliteStore,
    path: PathBuf,
    _dir: TempDir,
}

impl SqliteHarness {
    /// The database file.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl StoreHarness for SqliteHarness {
    type Store = SqliteStore;
    fn open() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("loom.db");
        Self {
            store: SqliteStore::open(&path).unwrap(),
            path,
            _dir: dir,
        }
    }
    fn store(&self) -> &SqliteStore {
        &self.store
    }
    fn reopen(&mut self) {
        self.store = SqliteStore::open(&self.path).unwrap();
    }
}

/// The PostgreSQL backend in a schema of its own on the test cluster (see `pg_support`).
#[derive(Debug)]
pub(crate) struct PgHarness {
    store: PgStore,
    pub(crate) schema: PgSchema,
}

impl StoreHarness for PgHarness {
    type Store = PgStore;
    fn open() -> Self {
        Self::try_open().unwrap()
    }
    fn try_open() -> Option<Self> {
        let schema = fresh_schema()?;
        let store = PgStore::open(&schema.url).unwrap();
        Some(Self { store, schema })
    }
    fn store(&self) -> &PgStore {
        &self.store
    }
    fn reopen(&mut self) {
        self.store = PgStore::open(&self.schema.url).unwrap();
    }
}

/// A fresh blob store of one backend.
pub(crate) trait BlobHarness {
    /// The backend.
    type Blobs: BlobStore;
    /// A new, empty blob store.
    fn open() -> Self;
    /// A new, empty blob store, or `None` when the backend cannot run here.
    fn try_open() -> Option<Self>
    where
        Self: Sized,
    {
        Some(Self::open())
    }
    /// The store under test.
    fn blobs(&self) -> &Self::Blobs;
}

/// Blobs in memory.
#[derive(Debug)]
pub(crate) struct MemoryBlobHarness(MemoryBlobStore);

impl BlobHarness for MemoryBlobHarness {
    type Blobs = MemoryBlobStore;
    fn open() -> Self {
        Self(MemoryBlobStore::new())
    }
    fn blobs(&self) -> &MemoryBlobStore {
        &self.0
    }
}

/// Blobs as files in a temporary workspace.
#[derive(Debug)]
pub(crate) struct FsBlobHarness {
    pub(crate) blobs: FsBlobStore,
    pub(crate) dir: TempDir,
}

impl BlobHarness for FsBlobHarness {
    type Blobs = FsBlobStore;
    fn open() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let blobs = FsBlobStore::open(dir.path().join("loom.workspace")).unwrap();
        Self { blobs, dir }
    }
    fn blobs(&self) -> &FsBlobStore {
        &self.blobs
    }
}

/// Blobs in a PostgreSQL schema of their own.
#[derive(Debug)]
pub(crate) struct PgBlobHarness {
    pub(crate) blobs: PgBlobStore,
    pub(crate) schema: PgSchema,
}

impl BlobHarness for PgBlobHarness {
    type Blobs = PgBlobStore;
    fn open() -> Self {
        Self::try_open().unwrap()
    }
    fn try_open() -> Option<Self> {
        let schema = fresh_schema()?;
        let blobs = PgStore::open(&schema.url).unwrap().blobs();
        Some(Self { blobs, schema })
    }
    fn blobs(&self) -> &PgBlobStore {
        &self.blobs
    }
}

pub(crate) fn sid(id: &str) -> SessionId {
    SessionId::new(id).unwrap()
}

pub(crate) fn new_session(id: &str) -> NewSession {
    NewSession {
        id: sid(id),
        agent: AgentId::new("agent").unwrap(),
        parent: None,
        created_ms: 1_700_000_000_000,
    }
}

/// A store holding one empty session with this id.
pub(crate) fn with_session(store: &impl Store, id: &str) -> SessionId {
    store.create_session(&new_session(id), &[]).unwrap();
    sid(id)
}

pub(crate) fn user(text: &str) -> NewEvent {
    NewEvent::new(
        1_700_000_000_000,
        EventBody::User {
            content: text.into(),
            name: None,
        },
    )
}

/// An assistant turn making `calls` as (call id, tool name), in parallel.
pub(crate) fn calls(calls: &[(&str, &str)]) -> NewEvent {
    NewEvent::new(
        1_700_000_000_001,
        EventBody::Assistant {
            content: None,
            reasoning: None,
            tool_calls: calls
                .iter()
                .map(|(id, name)| ToolCall {
                    id: (*id).into(),
                    name: (*name).into(),
                    arguments: "{}".into(),
                })
                .collect(),
            name: None,
            native: None,
        },
    )
}

pub(crate) fn call(id: &str, tool: &str) -> NewEvent {
    calls(&[(id, tool)])
}

pub(crate) fn result(id: &str, tool: &str, is_error: bool) -> NewEvent {
    let text = format!("output of {id}");
    NewEvent::new(
        1_700_000_000_002,
        EventBody::ToolResult {
            call_id: id.into(),
            tool_name: tool.into(),
            stats: ContentStats::of(text.as_bytes()),
            content: ToolOutput::Text(text),
            is_error,
        },
    )
}
