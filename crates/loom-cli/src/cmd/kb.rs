//! `loom kb`: the knowledge base — files (Markdown, text, code, JSON) chunked on their
//! structure, each chunk keeping its file and line range, searched within a token budget. It
//! lives in the log's SQLite file beside memory; `loom run` injects its best chunks for the
//! current task when `[knowledge]` is configured.

use std::io::Write;
use std::path::{Path, PathBuf};

use loom_memory::{KbHit, Memory, DEFAULT_LIMIT};
use serde::Serialize;

use super::Context;
use crate::exit::bad_input;
use crate::exit::closed_pipe_is_fine;

/// The local user's knowledge base (a server tenant's scope is its name).
const LOCAL: &str = "";

/// Arguments of `loom kb`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// Add files (or re-add changed ones: their chunks are replaced).
    Add {
        /// Markdown, text, code or JSON files.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Print the reports as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Find the chunks that best match QUERY, within a token budget, best first.
    Search {
        /// Free text.
        query: String,
        /// The most tokens the hits may hold together (exact o200k_base counts).
        #[arg(long, value_name = "TOKENS", default_value_t = 1000)]
        budget: u64,
        /// The most hits.
        #[arg(long, value_name = "K", default_value_t = DEFAULT_LIMIT)]
        limit: usize,
        /// Print `{"hits": [{"path", "from_line", "to_line", "heading", "text", "tokens", "score"}]}`.
        #[arg(long)]
        json: bool,
    },
    /// List the files with their chunks and tokens.
    List {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a file and its chunks.
    Remove {
        /// The file, as added (or as `loom kb list` shows it).
        file: PathBuf,
    },
}

fn open(ctx: &Context) -> anyhow::Result<Box<dyn Memory>> {
    loom_memory::open(&ctx.database()?).map_err(crate::exit::mapped)
}

/// The name a file is stored under: its canonical path, so that the same file added from two
/// folders is one entry.
fn stored_name(file: &Path) -> anyhow::Result<String> {
    let full = file
        .canonicalize()
        .map_err(|e| bad_input(anyhow::anyhow!("{}: {e}", file.display())))?;
    Ok(full.to_string_lossy().into_owned())
}

#[derive(Serialize)]
struct Hits<'a> {
    hits: &'a [KbHit],
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    closed_pipe_is_fine(run_command(ctx, args))
}

fn run_command(ctx: &Context, args: Args) -> anyhow::Result<()> {
    let memory = open(ctx)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match args.command {
        Cmd::Add { files, json } => {
            // Every file is read and chunked before the first is stored.
            let mut read = Vec::new();
            for file in &files {
                let name = stored_name(file)?;
                let text = std::fs::read_to_string(file).map_err(|e| {
                    bad_input(anyhow::anyhow!(
                        "{}: cannot read it as text: {e}",
                        file.display()
                    ))
                })?;
                loom_memory::kb::chunk(&name, &text).map_err(crate::exit::mapped)?;
                read.push((name, text));
            }
            let mut reports = Vec::new();
            for (name, text) in &read {
                reports.push(
                    memory
                        .kb_add(LOCAL, name, text, super::now_ms())
                        .map_err(crate::exit::mapped)?,
                );
            }
            if json {
                serde_json::to_writer_pretty(&mut out, &reports)?;
                writeln!(out)?;
            } else {
                for r in &reports {
                    if r.unchanged {
                        writeln!(out, "{}: unchanged ({} chunks)", r.path, r.chunks)?;
                    } else {
                        writeln!(
                            out,
                            "{}: {} chunks ({}){}",
                            r.path,
                            r.chunks,
                            r.kind.as_str(),
                            if r.replaced > 0 {
                                format!(", replacing {}", r.replaced)
                            } else {
                                String::new()
                            }
                        )?;
                    }
                }
            }
        }
        Cmd::Search {
            query,
            budget,
            limit,
            json,
        } => {
            let hits = memory
                .kb_search(LOCAL, &query, budget, limit)
                .map_err(crate::exit::mapped)?;
            if json {
                serde_json::to_writer_pretty(&mut out, &Hits { hits: &hits })?;
                writeln!(out)?;
            } else if hits.is_empty() {
                writeln!(out, "no hits")?;
            } else {
                for h in &hits {
                    writeln!(
                        out,
                        "{}:{}-{} score {}, {} tokens\n  {}",
                        h.path,
                        h.from_line,
                        h.to_line,
                        super::memory::score(h.score),
                        h.tokens,
                        h.text.replace('\n', "\n  ")
                    )?;
                }
            }
        }
        Cmd::List { json } => {
            let files = memory.kb_list(LOCAL).map_err(crate::exit::mapped)?;
            if json {
                serde_json::to_writer_pretty(&mut out, &files)?;
                writeln!(out)?;
            } else if files.is_empty() {
                writeln!(out, "the knowledge base is empty (`loom kb add FILE…`)")?;
            } else {
                for f in &files {
                    writeln!(
                        out,
                        "{}\t{}\t{} chunks\t{} tokens",
                        f.path, f.kind, f.chunks, f.tokens
                    )?;
                }
            }
        }
        Cmd::Remove { file } => {
            // A file deleted since it was added cannot be canonicalized: its name as given.
            let name = stored_name(&file).unwrap_or_else(|_| file.to_string_lossy().into_owned());
            let n = memory
                .kb_remove(LOCAL, &name)
                .map_err(crate::exit::mapped)?;
            writeln!(out, "removed {name} ({n} chunks)")?;
        }
    }
    out.flush()?;
    Ok(())
}
