//! The embedded default on disk: one SQLite file plus a workspace folder beside it for blobs.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use crate::{FsBlobStore, Result, SqliteStore, StoreError};

/// The log and the blobs of one database: `loom.db` and its `loom.workspace/` folder.
#[derive(Debug)]
pub struct Workspace {
    /// The log and derived records.
    pub store: SqliteStore,
    /// Offloaded outputs.
    pub blobs: FsBlobStore,
}

impl Workspace {
    /// Opens (creating if needed) the database at `db_path` and its workspace folder.
    pub fn open(db_path: &Path) -> Result<Self> {
        if let Some(parent) = db_path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(|source| StoreError::Io {
                action: "creating the database folder",
                path: parent.to_owned(),
                source,
            })?;
        }
        let store = SqliteStore::open(db_path)?;
        let blobs = FsBlobStore::open(Self::folder_of(db_path))?;
        Ok(Self { store, blobs })
    }

    /// The workspace folder that belongs to `db_path`: its extension replaced by `workspace`.
    pub fn folder_of(db_path: &Path) -> PathBuf {
        let folder = db_path.with_extension("workspace");
        if folder == db_path {
            // A database already named `*.workspace` must not share its path with its folder.
            let mut name = OsString::from(db_path.as_os_str());
            name.push(".workspace");
            return PathBuf::from(name);
        }
        folder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_sits_beside_the_database() {
        assert_eq!(
            Workspace::folder_of(Path::new("x/loom.db")),
            PathBuf::from("x/loom.workspace")
        );
        assert_eq!(
            Workspace::folder_of(Path::new("plain")),
            PathBuf::from("plain.workspace")
        );
        assert_eq!(
            Workspace::folder_of(Path::new("a.workspace")),
            PathBuf::from("a.workspace.workspace")
        );
    }

    #[test]
    fn open_creates_both() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("nested/loom.db");
        let ws = Workspace::open(&db).unwrap();
        assert!(db.is_file());
        assert!(dir.path().join("nested/loom.workspace/blobs").is_dir());
        assert_eq!(ws.store.path(), db);
    }
}
