//! Choosing a backend by the database a user names: a plain path is an SQLite file (the
//! embedded default), a `postgres://` or `postgresql://` URL is PostgreSQL, and any other
//! `scheme://` is refused rather than taken for a file name.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::postgres::redact;
use crate::{BlobStore, PgStore, Result, SqliteStore, Store, StoreError, Workspace};

/// A database as named by `--db` or `LOOM_DB`.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Database {
    /// An SQLite file; its blobs live in the workspace folder beside it.
    Sqlite(PathBuf),
    /// A PostgreSQL URL; the blobs live in the same database.
    Postgres(String),
}

impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Through `Display`, so that a URL's password never reaches a log.
        write!(f, "Database({self})")
    }
}

impl fmt::Display for Database {
    /// The path, or the URL with its password hidden.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "{}", path.display()),
            Self::Postgres(url) => f.write_str(&redact(url)),
        }
    }
}

/// The scheme of `db` if it is written as a URL (`scheme://...`).
fn scheme(db: &str) -> Option<&str> {
    let (scheme, _) = db.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

impl Database {
    /// Reads a `--db` value.
    ///
    /// An empty value, or a URL whose scheme is not PostgreSQL's, is
    /// [`StoreError::UnsupportedDatabase`].
    pub fn parse(db: &str) -> Result<Self> {
        let refuse = |reason: &str| StoreError::UnsupportedDatabase {
            db: redact(db),
            reason: reason.to_owned(),
        };
        if db.trim().is_empty() {
            return Err(refuse(
                "it is empty; give an SQLite file path or a postgres:// URL",
            ));
        }
        match scheme(db) {
            None => Ok(Self::Sqlite(PathBuf::from(db))),
            Some(s)
                if s.eq_ignore_ascii_case("postgres") || s.eq_ignore_ascii_case("postgresql") =>
            {
                Ok(Self::Postgres(db.to_owned()))
            }
            Some(_) => Err(refuse(
                "unknown URL scheme; expected an SQLite file path or a postgres:// (or \
                 postgresql://) URL",
            )),
        }
    }

    /// Whether this names an SQLite file that is not there yet. Commands that only read use it
    /// to tell a mistaken `--db` from an empty store; a PostgreSQL database is never "missing"
    /// (opening it says whether it can be reached).
    pub fn is_missing_file(&self) -> bool {
        match self {
            Self::Sqlite(path) => !path.exists(),
            Self::Postgres(_) => false,
        }
    }

    /// Opens the log and the blobs, creating an SQLite file or PostgreSQL tables as needed and
    /// bringing the schema up to date ([`StoreError::SchemaTooNew`] when it is newer than this
    /// build).
    pub fn open(&self) -> Result<Opened> {
        match self {
            Self::Sqlite(path) => {
                let ws = Workspace::open(path)?;
                Ok(Opened {
                    store: Arc::new(ws.store),
                    blobs: Arc::new(ws.blobs),
                    schema_version: SqliteStore::schema_version(),
                    database: self.clone(),
                })
            }
            Self::Postgres(url) => {
                let store = PgStore::open(url)?;
                Ok(Opened {
                    blobs: Arc::new(store.blobs()),
                    schema_version: store.database_version(),
                    store: Arc::new(store),
                    database: self.clone(),
                })
            }
        }
    }
}

/// A database opened: the log and its records, and the blobs, whichever backend holds them.
#[derive(Debug, Clone)]
pub struct Opened {
    /// The log and derived records.
    pub store: Arc<dyn Store>,
    /// Offloaded outputs.
    pub blobs: Arc<dyn BlobStore>,
    /// The schema version the database is at (this build's, once opened).
    pub schema_version: i64,
    /// What was opened.
    pub database: Database,
}

/// Opens the database `db` names (see [`Database::parse`] and [`Database::open`]).
pub fn open(db: &str) -> Result<Opened> {
    Database::parse(db)?.open()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_urls_are_told_apart() {
        for path in [
            "loom.db",
            "dir/loom.db",
            "/abs/x.db",
            "postgres",
            "postgres:x",
            "./a://b",
        ] {
            assert_eq!(
                Database::parse(path).unwrap(),
                Database::Sqlite(PathBuf::from(path)),
                "{path}"
            );
        }
        for url in [
            "postgres://loom@127.0.0.1:5432/loom",
            "postgresql://u:p@h/d",
            "POSTGRES://h/d",
        ] {
            assert_eq!(
                Database::parse(url).unwrap(),
                Database::Postgres(url.to_owned())
            );
        }
        for bad in ["", "  ", "mysql://h/d", "sqlite://x.db", "http://h"] {
            let err = Database::parse(bad).unwrap_err();
            assert!(
                matches!(err, StoreError::UnsupportedDatabase { .. }),
                "{bad:?}: {err}"
            );
            assert!(err.is_bad_input());
        }
    }

    #[test]
    fn a_password_is_never_shown() {
        let url = "postgres://loom:hunter2@db/loom";
        let db = Database::parse(url).unwrap();
        assert!(!db.to_string().contains("hunter2"));
        assert!(!format!("{db:?}").contains("hunter2"));
        let err = Database::parse("mysql://loom:hunter2@db/loom").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn a_path_opens_sqlite_and_its_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("loom.db");
        let opened = open(db.to_str().unwrap()).unwrap();
        assert!(db.is_file());
        assert!(dir.path().join("loom.workspace").is_dir());
        assert_eq!(opened.schema_version, SqliteStore::schema_version());
        let blob = opened.blobs.put(b"x").unwrap().blob;
        assert!(opened.blobs.contains(&blob).unwrap());
    }
}
