//! `loom blob`: write a blob's original bytes to stdout.
//!
//! Only `sha256:<hex>` references (or the 64 bare hex digits) are accepted; anything path-like is
//! refused before the store is touched, so this command cannot read outside the workspace.

use std::io::Write;

use loom_store::parse_blob_ref;

use super::sessions::open_existing;
use super::Context;
use crate::exit::closed_pipe_is_fine;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The blob: `sha256:<64 hex digits>`, as `loom log` shows it.
    #[arg(value_name = "REF")]
    reference: String,
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    let blob = parse_blob_ref(&args.reference)?;
    let ws = open_existing(ctx)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    closed_pipe_is_fine(
        ws.blobs
            .copy_to(&blob, &mut out)
            .map_err(anyhow::Error::from)
            .and_then(|_| Ok(out.flush()?)),
    )
}
