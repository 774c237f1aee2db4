//! One module per subcommand; each has `Args` (clap) and `run`.

pub(crate) mod blob;
pub(crate) mod compact;
pub(crate) mod explain;
pub(crate) mod export_steps;
pub(crate) mod import;
pub(crate) mod keys;
pub(crate) mod log;
pub(crate) mod recall;
pub(crate) mod render;
pub(crate) mod replay;
pub(crate) mod serve;
pub(crate) mod sessions;
pub(crate) mod steps;
pub(crate) mod tokens;
pub(crate) mod usage;

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// What every command gets besides its own arguments.
#[derive(Debug)]
pub(crate) struct Context {
    /// The database path.
    pub(crate) db: PathBuf,
}

/// The wall clock in UTC milliseconds, for records whose time only the caller's clock can say.
pub(crate) fn now_ms() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_millis()).unwrap_or(i64::MAX),
        // A clock set before 1970 is odd but not the caller's error; record it as it reads.
        Err(before) => i64::try_from(before.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}
