//! One module per subcommand; each has `Args` (clap) and `run`.

pub(crate) mod approve;
pub(crate) mod blob;
pub(crate) mod compact;
pub(crate) mod db;
pub(crate) mod explain;
pub(crate) mod export_steps;
pub(crate) mod import;
pub(crate) mod kb;
pub(crate) mod keys;
pub(crate) mod log;
pub(crate) mod memory;
pub(crate) mod recall;
pub(crate) mod render;
pub(crate) mod replay;
pub(crate) mod run;
pub(crate) mod serve;
pub(crate) mod sessions;
pub(crate) mod steps;
pub(crate) mod tokens;
pub(crate) mod usage;

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use loom_store::{Database, Opened};

use crate::exit::bad_input;

/// What every command gets besides its own arguments.
#[derive(Debug)]
pub(crate) struct Context {
    /// The database as given: an SQLite path or a PostgreSQL URL.
    pub(crate) db: String,
}

impl Context {
    /// The database `--db` names; a value that names none is the user's to fix.
    pub(crate) fn database(&self) -> anyhow::Result<Database> {
        Database::parse(&self.db).map_err(bad_input)
    }

    /// Opens the database, creating it if it is missing.
    pub(crate) fn open(&self) -> anyhow::Result<Opened> {
        let db = self.database()?;
        db.open()
            .with_context(|| format!("opening the database {db}"))
    }

    /// Opens the database for reading; a missing SQLite file is the user's mistake (`hint` says
    /// what makes one), not a reason to create an empty database.
    pub(crate) fn open_existing(&self, hint: &str) -> anyhow::Result<Opened> {
        let db = self.database()?;
        if db.is_missing_file() {
            return Err(bad_input(anyhow::anyhow!(
                "no database at {db}; {hint}, or pass --db"
            )));
        }
        db.open()
            .with_context(|| format!("opening the database {db}"))
    }
}

/// The wall clock in UTC milliseconds, for records whose time only the caller's clock can say.
pub(crate) fn now_ms() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_millis()).unwrap_or(i64::MAX),
        // A clock set before 1970 is odd but not the caller's error; record it as it reads.
        Err(before) => i64::try_from(before.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}
