//! `loom steps SESSION`: the session's tool results as reduced steps — one truthful line each,
//! with the reference that returns the original output.
//!
//! Steps are derived from the log on first use and stored; `--rebuild` derives them again (after
//! changing the reduction settings). Deriving writes the offloaded outputs to the blob store.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use loom_core::{ReduceConfig, SessionId, Step};
use loom_store::{Offloader, Opened};

use super::Context;
use crate::exit;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The session.
    #[arg(value_name = "SESSION")]
    session: String,
    /// Print a JSON list of steps (`id`, `call_id`, `tool_name`, `kind`, `observation`,
    /// `outcome_ref`, `success`, `error`, `stats`, ...).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    reduce: ReduceArgs,
}

/// Options shared by the commands that derive steps.
#[derive(Debug, clap::Args)]
pub(crate) struct ReduceArgs {
    /// Reduction settings (TOML): tool-kind mappings, offload thresholds, observation length,
    /// compact templates.
    #[arg(long = "reduce-config", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Derive every step again instead of reusing the stored ones.
    #[arg(long)]
    pub(crate) rebuild: bool,
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    let ws = open(ctx)?;
    let config = load_config(args.reduce.config.as_deref())?;
    let session = session_id(&args.session)?;
    let steps = derive(&ws, &config, &session, args.reduce.rebuild)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.json {
        serde_json::to_writer_pretty(&mut out, &steps)?;
        writeln!(out)?;
        out.flush()?;
        return Ok(());
    }
    if steps.is_empty() {
        writeln!(out, "no tool results in session {session}")?;
    }
    for step in &steps {
        let mark = if step.success { "ok  " } else { "FAIL" };
        write!(out, "{}  {mark}  {}", step.id, step.observation)?;
        if let Some(r) = &step.outcome_ref {
            write!(out, "  [{r}]")?;
        }
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}

/// The session's steps, derived where missing (or all again with `rebuild`).
pub(crate) fn derive(
    ws: &Opened,
    config: &ReduceConfig,
    session: &SessionId,
    rebuild: bool,
) -> anyhow::Result<Vec<Step>> {
    let off = Offloader::new(ws.store.as_ref(), ws.blobs.as_ref(), config);
    if rebuild {
        off.run(session, true)
            .with_context(|| format!("deriving the steps of session {session}"))?;
    }
    off.steps(session)
        .with_context(|| format!("deriving the steps of session {session}"))
}

/// Opens an existing database (one definition for every reading command).
pub(crate) use super::sessions::open_existing as open;

/// Reads the reduction settings, or the defaults.
pub(crate) fn load_config(path: Option<&Path>) -> anyhow::Result<ReduceConfig> {
    let Some(path) = path else {
        return Ok(ReduceConfig::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading {}", path.display()))
        .map_err(exit::bad_input)?;
    ReduceConfig::from_toml(&text)
        .with_context(|| format!("in {}", path.display()))
        .map_err(exit::bad_input)
}

/// A session id from the command line.
pub(crate) fn session_id(text: &str) -> anyhow::Result<SessionId> {
    SessionId::new(text).map_err(|e| exit::bad_input(anyhow::Error::new(e).context("SESSION")))
}
