//! `loom export-steps SESSION DIR`: the session's steps in the seeds' workspace layout, for
//! people to inspect (seed 001, "Storage Strategy"):
//!
//! ```text
//! DIR/history/step_001.json      the full step
//! DIR/history/step_001.compact   its compact line
//! DIR/outputs/shell_003.log      each offloaded output, byte for byte
//! ```
//!
//! Nothing is written outside `DIR`: names come from validated step ids and aliases (no `..`, no
//! absolute paths), and existing symlinks are refused rather than followed.

use std::fs;
use std::io::Write;
use std::path::{Component, Path, PathBuf};

use anyhow::Context as _;
use loom_core::Step;
use loom_store::{BlobAlias, Opened};

use super::steps::{derive, load_config, open, session_id, ReduceArgs};
use super::Context;
use crate::exit;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The session.
    #[arg(value_name = "SESSION")]
    session: String,
    /// The folder to write (created if needed).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    #[command(flatten)]
    reduce: ReduceArgs,
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    let ws = open(ctx)?;
    let config = load_config(args.reduce.config.as_deref())?;
    let session = session_id(&args.session)?;
    let steps = derive(&ws, &config, &session, args.reduce.rebuild)?;
    let root = prepare_dir(&args.dir)?;
    let history = subdir(&root, "history")?;
    let outputs = subdir(&root, "outputs")?;
    let mut offloaded = 0;
    for step in &steps {
        let json = serde_json::to_vec_pretty(step)?;
        write_file(&history, &file_name(&step.id, "json")?, |f| {
            f.write_all(&json)
        })?;
        let compact = config.templates.compact(step);
        write_file(&history, &file_name(&step.id, "compact")?, |f| {
            writeln!(f, "{}", compact.summary)
        })?;
        if let Some(alias) = &step.outcome_ref {
            export_output(&ws, &outputs, step, alias)?;
            offloaded += 1;
        }
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "wrote {} steps and {offloaded} outputs to {}",
        steps.len(),
        args.dir.display()
    )?;
    Ok(())
}

/// Creates `dir` if needed and returns its real path; a symlinked `dir` is refused.
fn prepare_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    if fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(exit::bad_input(anyhow::anyhow!(
            "{} is a symlink; refusing to write through it",
            dir.display()
        )));
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    dir.canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))
}

/// `root/name`, created if needed, refused if it is a symlink or not a folder.
fn subdir(root: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let path = root.join(name);
    match fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() || !m.is_dir() => {
            return Err(exit::bad_input(anyhow::anyhow!(
                "{} exists and is not a plain folder; refusing to write into it",
                path.display()
            )))
        }
        Ok(_) => {}
        Err(_) => fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?,
    }
    Ok(path)
}

/// `step_003.json`: step ids are checked, since they name files.
fn file_name(id: &str, ext: &str) -> anyhow::Result<String> {
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        anyhow::bail!("step id `{id}` cannot name a file");
    }
    Ok(format!("{id}.{ext}"))
}

/// Writes `dir/name` (replacing a regular file, never following a symlink).
fn write_file(
    dir: &Path,
    name: &str,
    body: impl FnOnce(&mut std::io::BufWriter<fs::File>) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    let path = dir.join(name);
    if fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
        return Err(exit::bad_input(anyhow::anyhow!(
            "{} exists and is not a regular file; refusing to overwrite it",
            path.display()
        )));
    }
    let file = fs::File::create(&path).with_context(|| format!("writing {}", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    body(&mut w)
        .and_then(|()| w.flush())
        .with_context(|| format!("writing {}", path.display()))
}

/// Copies an offloaded output to `outputs/…` under its alias, checked against its hash.
fn export_output(ws: &Opened, outputs: &Path, step: &Step, alias: &str) -> anyhow::Result<()> {
    let alias = BlobAlias::new(alias)?;
    let relative = alias
        .as_str()
        .strip_prefix("outputs/")
        .unwrap_or(alias.as_str());
    let mut parts = Path::new(relative).components().peekable();
    let mut dir = outputs.to_owned();
    let mut name = None;
    while let Some(c) = parts.next() {
        let Component::Normal(part) = c else {
            anyhow::bail!("alias `{}` is not a plain relative path", alias.as_str());
        };
        if parts.peek().is_none() {
            name = part.to_str().map(str::to_owned);
        } else {
            dir = subdir(&dir, &part.to_string_lossy())?;
        }
    }
    let name = name.with_context(|| format!("alias `{}` has no file name", alias.as_str()))?;
    let blob = step
        .blob
        .as_ref()
        .with_context(|| format!("{} has an outcome_ref but no blob", step.id))?;
    write_file(&dir, &name, |w| {
        ws.blobs
            .copy_to(blob, w)
            .map(|_| ())
            .map_err(std::io::Error::other)
    })
}
