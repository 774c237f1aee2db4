//! `loom db`: the database itself, apart from what it holds.
//!
//! `loom db migrate` brings the schema of the database `--db` names up to date (opening a
//! database does the same; this is for a deployment that migrates once before it starts its
//! servers) and says which version it is at. A database written by a newer build is refused.

use std::io::Write;

use super::Context;

/// Arguments of `loom db`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Db,
}

#[derive(Debug, clap::Subcommand)]
enum Db {
    /// Apply the schema migrations the database has not seen; print the version it is at.
    Migrate,
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    match args.command {
        Db::Migrate => {
            let opened = ctx.open()?;
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "{}: schema version {}",
                opened.database, opened.schema_version
            )?;
            out.flush()?;
            Ok(())
        }
    }
}
