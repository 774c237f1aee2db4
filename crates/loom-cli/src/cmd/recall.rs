//! `loom recall REF`: write the original bytes behind a step's reference to stdout.
//!
//! `REF` is an alias a step shows (`outputs/shell_003.log`) or a blob address (`sha256:…`). The
//! bytes are checked against their SHA-256 before any is written. Aliases are names within a
//! session: when the same alias names different outputs in several sessions, `--session` says
//! which one is meant. Steps not derived yet are derived first (as `loom steps` would), since
//! that is when aliases are made.

use std::io::Write;

use loom_core::ReduceConfig;
use loom_store::{parse_blob_ref, Offloader, Resolution};

use super::steps::{open, session_id};
use super::Context;
use crate::exit;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// `outputs/shell_003.log` (as `loom steps` shows it) or `sha256:<64 hex digits>`.
    #[arg(value_name = "REF")]
    reference: String,
    /// The session the alias belongs to (needed when several sessions use the same alias).
    #[arg(long, value_name = "SESSION")]
    session: Option<String>,
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    let session = args.session.as_deref().map(session_id).transpose()?;
    let ws = open(ctx)?;
    let config = ReduceConfig::default();
    let off = Offloader::new(ws.store.as_ref(), ws.blobs.as_ref(), &config);
    // Aliases are made when steps are derived: derive the missing ones first, in the given
    // session or — to tell whether an alias is ambiguous — in all of them.
    let sessions = match &session {
        Some(s) => vec![s.clone()],
        None if parse_blob_ref(&args.reference).is_err() => {
            ws.store.sessions()?.into_iter().map(|s| s.id).collect()
        }
        None => Vec::new(),
    };
    for s in &sessions {
        if ws.store.session(s)?.is_some() {
            off.run(s, false)?;
        }
    }
    let blob = match off.resolve(session.as_ref(), &args.reference)? {
        Resolution::Found(blob) => blob,
        Resolution::Ambiguous(sessions) => {
            let names: Vec<&str> = sessions.iter().map(|s| s.as_str()).collect();
            return Err(exit::bad_input(anyhow::anyhow!(
                "`{}` names different outputs in sessions {}; pass --session",
                args.reference,
                names.join(", ")
            )));
        }
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    off.recall(&blob, &mut out)?;
    out.flush()?;
    Ok(())
}
