//! One module per subcommand; each has `Args` (clap) and `run`.

pub(crate) mod blob;
pub(crate) mod compact;
pub(crate) mod explain;
pub(crate) mod export_steps;
pub(crate) mod import;
pub(crate) mod log;
pub(crate) mod recall;
pub(crate) mod render;
pub(crate) mod replay;
pub(crate) mod sessions;
pub(crate) mod steps;
pub(crate) mod tokens;
pub(crate) mod usage;

use std::path::PathBuf;

/// What every command gets besides its own arguments.
#[derive(Debug)]
pub(crate) struct Context {
    /// The database path.
    pub(crate) db: PathBuf,
}
