//! `loom memory`: long-term memory derived from the log (issue 18).
//!
//! `index` derives memory items from sessions' logs (idempotent: it rebuilds what is missing and
//! leaves the rest), `search` finds the best items for a query within a token budget (one tier
//! with `--tier`: L1 the session's recent log, L2 its notes, L3 summaries, L4 long-term), `save`
//! writes an L2 note, `forget` removes one item and says what it removed. Memory lives beside
//! the log: in its SQLite file or its PostgreSQL database.

use std::io::Write;

use loom_core::{AgentId, SessionId};
use loom_memory::{Memory, MemoryError, NewNote, Recall, Tier};
use loom_store::Database;
use serde::Serialize;

use super::Context;
use crate::exit::bad_input;
use crate::exit::{closed_pipe_is_fine, mapped};

/// Arguments of `loom memory`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// Derive memory items from sessions' logs (all sessions of --agent, or those named);
    /// running it again adds only what is missing.
    Index {
        /// Sessions to index (default: every session of --agent, or every session).
        #[arg(value_name = "SESSION")]
        sessions: Vec<String>,
        /// Only this agent's sessions.
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
        #[command(flatten)]
        embedder: EmbedderArg,
        /// Print the reports as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Find the memory items that best match QUERY, within a token budget, best first.
    Search {
        /// Free text.
        query: String,
        /// Whose memory to search.
        #[arg(long, value_name = "NAME")]
        agent: String,
        /// The most tokens the hits may hold together (exact o200k_base counts).
        #[arg(long, value_name = "TOKENS", default_value_t = 1000)]
        budget: u64,
        /// The most hits (default: as many as the budget holds, one per 8 tokens, at most
        /// 1,000).
        #[arg(long, value_name = "K")]
        limit: Option<usize>,
        /// The session: L1 and L2 need one; L3 and L4 keep only items with a source in it;
        /// with no --tier, its notes and summaries plus L4 across sessions.
        #[arg(long, value_name = "S")]
        session: Option<String>,
        /// Only this tier: L1 (the session's recent log), L2 (its notes), L3 or L4.
        #[arg(long, value_name = "TIER")]
        tier: Option<String>,
        /// Include superseded items.
        #[arg(long)]
        history: bool,
        /// Only items from this time on: `YYYY-MM-DD`, RFC 3339 (`2023-05-08T13:56:00Z`) or UTC
        /// milliseconds.
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// Only items from this time or before (as --since).
        #[arg(long, value_name = "TIME")]
        until: Option<String>,
        #[command(flatten)]
        embedder: EmbedderArg,
        /// Print `{"hits": [{"text", "tokens", "score", "tier", "sources": [{"session", "seq"}]}]}`.
        #[arg(long)]
        json: bool,
    },
    /// Save a note into a session's working memory (L2), optionally with a time to live.
    Save {
        /// The note.
        text: String,
        /// Whose memory.
        #[arg(long, value_name = "NAME")]
        agent: String,
        /// The session it belongs to.
        #[arg(long, value_name = "S")]
        session: String,
        /// The event it points back to (default: the session's last event).
        #[arg(long, value_name = "SEQ")]
        seq: Option<u64>,
        /// Seconds it lives (default: until forgotten).
        #[arg(long, value_name = "SECONDS")]
        ttl: Option<u64>,
        /// Print `{"id", "created", "expires_ms"}`.
        #[arg(long)]
        json: bool,
    },
    /// Distil facts from sessions' logs with a model (the optional LLM extractor): each fact
    /// is an L4 item whose provenance is the lines it cites; a second run reads only what was
    /// appended since.
    Extract {
        /// Sessions to read (default: every session of --agent, or every session).
        #[arg(value_name = "SESSION")]
        sessions: Vec<String>,
        /// Only this agent's sessions; the facts go to its memory.
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
        /// The model asked (default: the configuration's `model`).
        #[arg(long, value_name = "M")]
        model: Option<String>,
        /// A configuration file whose `[provider]` table says where the model is (as for
        /// `loom run`); without one, OpenAI Chat Completions with `OPENAI_API_KEY` and
        /// `OPENAI_BASE_URL`.
        #[arg(long, value_name = "FILE")]
        config: Option<std::path::PathBuf>,
        /// The most tokens of log shown to the model per call.
        #[arg(long, value_name = "TOKENS", default_value_t = loom_memory::extract::DEFAULT_WINDOW_TOKENS)]
        window_tokens: u64,
        /// Print the reports as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove one memory item (the only delete) and print what was removed.
    Forget {
        /// The item's id, as `loom memory search` shows it.
        id: i64,
        /// Print the removed item as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn open_memory(ctx: &Context) -> anyhow::Result<Box<dyn Memory>> {
    loom_memory::open(&ctx.database()?).map_err(mapped)
}

/// Derives memory items for `sessions` (new or extended logs), when memory can live in the
/// database (SQLite); idempotent, so a session indexed before only gains its new events.
/// Returns the items created, or `None` when the database keeps no memory.
pub(crate) fn index_new(
    ctx: &Context,
    store: &dyn loom_store::Store,
    sessions: &[SessionId],
) -> anyhow::Result<Option<usize>> {
    if sessions.is_empty() || !matches!(ctx.database()?, Database::Sqlite(_)) {
        return Ok(None);
    }
    let memory = open_memory(ctx)?;
    let mut created = 0;
    for s in sessions {
        created += loom_memory::index(store, memory.as_ref(), s)
            .map_err(mapped)?
            .created;
    }
    Ok(Some(created))
}

/// `--embedder SPEC`, as every command that keeps or searches memory takes it.
#[derive(Debug, clap::Args)]
pub(crate) struct EmbedderArg {
    /// Embed items, and fuse full-text search with vector similarity, with this embedder:
    /// `none` (full text only), `openai:MODEL` (an OpenAI-compatible /v1/embeddings endpoint;
    /// see docs/memory.md for its variables) or `local:PATH` (a model folder). Items without a
    /// vector of its model are back-filled by `loom memory index`, and by `loom serve` once it
    /// listens.
    #[arg(
        long = "embedder",
        value_name = "SPEC",
        env = "LOOM_EMBEDDER",
        default_value = "none"
    )]
    pub(crate) spec: String,
}

/// The memory with the embedder `spec` names, if any: the model is loaded here, once, and
/// serves every search and index the memory does (`loom serve` and `loom run` open it at start).
pub(crate) fn open_embedded(ctx: &Context, spec: &EmbedderArg) -> anyhow::Result<Box<dyn Memory>> {
    let embedder = loom_memory::embedder_from_spec(&spec.spec)
        .map_err(|e| mapped(MemoryError::from(e)))
        .map_err(|e| e.context("--embedder"))?;
    loom_memory::open_with(&ctx.database()?, embedder).map_err(mapped)
}

/// The extractor's model: the configuration's `[provider]` (or OpenAI Chat Completions from the
/// environment) asked for `model`, or the configuration's own.
fn extractor(
    config: Option<&std::path::Path>,
    model: Option<String>,
) -> anyhow::Result<loom_memory::ProviderFacts> {
    let config = match config {
        Some(path) => loom_agent::Config::load(path).map_err(bad_input)?,
        None => loom_agent::Config::default(),
    };
    let model = model.or_else(|| config.model.clone()).ok_or_else(|| {
        bad_input(anyhow::anyhow!(
            "--model: name the model (or set `model` in --config)"
        ))
    })?;
    let provider = match &config.provider {
        Some(table) => {
            let mut raw: loom_provider::client::RawProviderConfig = table
                .clone()
                .try_into()
                .map_err(|e: toml::de::Error| bad_input(anyhow::anyhow!("[provider]: {e}")))?;
            raw.model = Some(model);
            raw.resolve()
        }
        None => loom_provider::client::ProviderConfig::from_env(loom_core::Api::OpenaiChat, model),
    }
    .map_err(|e| bad_input(anyhow::Error::new(e)))?;
    loom_memory::ProviderFacts::new(provider).map_err(mapped)
}

/// The sessions named, or every session of `agent` (every session without one); a named
/// session of another agent is refused.
fn chosen_sessions(
    store: &dyn loom_store::Store,
    sessions: Vec<String>,
    agent: Option<&AgentId>,
) -> anyhow::Result<Vec<SessionId>> {
    let mut chosen = Vec::new();
    for s in sessions {
        chosen.push(id("SESSION", SessionId::new, s)?);
    }
    let all = store.sessions()?;
    if chosen.is_empty() {
        return Ok(all
            .iter()
            .filter(|s| agent.is_none_or(|a| *a == s.agent))
            .map(|s| s.id.clone())
            .collect());
    }
    for s in &chosen {
        let info = all
            .iter()
            .find(|i| i.id == *s)
            .ok_or_else(|| bad_input(anyhow::anyhow!("SESSION: session `{s}` not found")))?;
        if let Some(a) = agent.filter(|a| **a != info.agent) {
            return Err(bad_input(anyhow::anyhow!(
                "session `{s}` belongs to agent `{}`, not `{a}`",
                info.agent
            )));
        }
    }
    Ok(chosen)
}

/// A time given as UTC milliseconds, `YYYY-MM-DD` or RFC 3339, as UTC milliseconds.
fn time(flag: &str, text: &str) -> anyhow::Result<i64> {
    if let Ok(ms) = text.trim().parse::<i64>() {
        return Ok(ms);
    }
    loom_runtime::task::parse_utc_ms(text)
        .map(|(ms, _)| ms)
        .map_err(|e| bad_input(anyhow::anyhow!("{flag} `{text}`: {e}")))
}

fn id<T>(
    what: &str,
    make: impl FnOnce(String) -> loom_core::Result<T>,
    s: String,
) -> anyhow::Result<T> {
    make(s).map_err(|e| bad_input(anyhow::Error::new(e).context(what.to_owned())))
}

/// The search contract's JSON: exactly these fields.
#[derive(Serialize)]
struct Hits<'a> {
    hits: &'a [loom_memory::Hit],
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    match args.command {
        Cmd::Index {
            sessions,
            agent,
            embedder,
            json,
        } => {
            let ws = ctx.open_existing("run `loom import` first")?;
            let agent = agent.map(|a| id("--agent", AgentId::new, a)).transpose()?;
            let chosen = chosen_sessions(ws.store.as_ref(), sessions, agent.as_ref())?;
            let memory = open_embedded(ctx, &embedder)?;
            let mut reports = Vec::new();
            for s in &chosen {
                reports.push(
                    loom_memory::index(ws.store.as_ref(), memory.as_ref(), s).map_err(mapped)?,
                );
            }
            // Items written before this embedder (or under another model) get their vectors.
            let embedded = memory.embed_missing(agent.as_ref()).map_err(mapped)?;
            closed_pipe_is_fine(print_index(&reports, embedded, json))
        }
        Cmd::Search {
            query,
            agent,
            budget,
            limit,
            session,
            tier,
            history,
            since,
            until,
            embedder,
            json,
        } => {
            let agent = id("--agent", AgentId::new, agent)?;
            let from_ms = since.as_deref().map(|t| time("--since", t)).transpose()?;
            let to_ms = until.as_deref().map(|t| time("--until", t)).transpose()?;
            let session = session
                .map(|s| id("--session", SessionId::new, s))
                .transpose()?;
            let tier = tier
                .map(|t| t.parse::<Tier>())
                .transpose()
                .map_err(mapped)?;
            if ctx.database()?.is_missing_file() {
                return Err(bad_input(anyhow::anyhow!(
                    "no database at {}; run `loom import` and `loom memory index` first, or pass --db",
                    ctx.db
                )));
            }
            let memory = open_embedded(ctx, &embedder)?;
            // Only L1 reads the log.
            let ws = match tier {
                Some(Tier::L1) => Some(ctx.open_existing("run `loom import` first")?),
                _ => None,
            };
            let recall = Recall {
                query,
                agent,
                session,
                tier,
                budget,
                limit: limit.unwrap_or_else(|| loom_memory::limit_for(budget)),
                history,
                from_ms,
                to_ms,
            };
            let store = ws.as_ref().map(|w| w.store.as_ref());
            let hits = loom_memory::recall(memory.as_ref(), store, &recall).map_err(mapped)?;
            closed_pipe_is_fine(print_hits(&hits, json))
        }
        Cmd::Save {
            text,
            agent,
            session,
            seq,
            ttl,
            json,
        } => {
            let ws = ctx.open_existing("run `loom import` first")?;
            let agent = id("--agent", AgentId::new, agent)?;
            let session = id("--session", SessionId::new, session)?;
            let info = ws.store.session(&session)?.ok_or_else(|| {
                bad_input(anyhow::anyhow!("--session: session `{session}` not found"))
            })?;
            if info.agent != agent {
                return Err(bad_input(anyhow::anyhow!(
                    "--session: session `{session}` belongs to agent `{}`, not `{agent}`",
                    info.agent
                )));
            }
            let seq = seq.unwrap_or(info.event_count);
            if seq > info.event_count {
                return Err(bad_input(anyhow::anyhow!(
                    "--seq {seq}: session `{session}` has {} events",
                    info.event_count
                )));
            }
            let ttl_ms = ttl.map(|t| i64::try_from(t.saturating_mul(1000)).unwrap_or(i64::MAX));
            let memory = open_memory(ctx)?;
            let saved = memory
                .save(&NewNote {
                    agent,
                    text,
                    session,
                    seq,
                    saved_ms: super::now_ms(),
                    ttl_ms,
                })
                .map_err(mapped)?;
            let mut out = std::io::stdout().lock();
            if json {
                serde_json::to_writer(&mut out, &saved)?;
                writeln!(out)?;
            } else {
                let expiry = saved.expires_ms.map_or("never expires".to_owned(), |at| {
                    format!("expires at {at} ms")
                });
                let verb = if saved.created {
                    "saved"
                } else {
                    "already saved: added a source to"
                };
                writeln!(out, "{verb} note #{} (L2, {expiry})", saved.id)?;
            }
            Ok(())
        }
        Cmd::Extract {
            sessions,
            agent,
            model,
            config,
            window_tokens,
            json,
        } => {
            let ws = ctx.open_existing("run `loom import` first")?;
            let agent = agent.map(|a| id("--agent", AgentId::new, a)).transpose()?;
            let chosen = chosen_sessions(ws.store.as_ref(), sessions, agent.as_ref())?;
            let model = extractor(config.as_deref(), model)?;
            let memory = open_memory(ctx)?;
            let mut reports = Vec::new();
            for s in &chosen {
                // The windows read before an error stay written and marked: the next run
                // resumes at the window that failed.
                reports.push(
                    loom_memory::extract(
                        ws.store.as_ref(),
                        memory.as_ref(),
                        &model,
                        s,
                        agent.as_ref(),
                        window_tokens,
                    )
                    .map_err(mapped)?,
                );
            }
            closed_pipe_is_fine(print_extract(&reports, json))
        }
        Cmd::Forget { id, json } => {
            let memory = open_memory(ctx)?;
            let gone = memory.forget(id).map_err(mapped)?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            if json {
                serde_json::to_writer_pretty(&mut out, &gone)?;
                writeln!(out)?;
            } else {
                let sources: Vec<String> = gone
                    .item
                    .sources
                    .iter()
                    .map(|p| format!("{}#{}", p.session, p.from_seq))
                    .collect();
                writeln!(
                    out,
                    "forgot item {} ({}, {} tokens, from {}): {}",
                    gone.item.id,
                    gone.item.tier,
                    gone.item.tokens,
                    sources.join(", "),
                    gone.item.text
                )?;
                for r in &gone.restored {
                    writeln!(out, "item {r} is current again (it had superseded it)")?;
                }
            }
            out.flush()?;
            Ok(())
        }
    }
}

fn print_index(
    reports: &[loom_memory::IndexReport],
    embedded: usize,
    json: bool,
) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if json {
        serde_json::to_writer_pretty(&mut out, reports)?;
        writeln!(out)?;
    } else {
        if reports.is_empty() {
            writeln!(out, "no sessions to index")?;
        }
        for r in reports {
            let name = r.session.as_ref().map_or("", SessionId::as_str);
            writeln!(
                out,
                "{name}: {} items derived, {} new, {} duplicates, {} near duplicates, {} already indexed",
                r.derived, r.created, r.duplicates, r.near_duplicates, r.known
            )?;
        }
        if embedded > 0 {
            writeln!(
                out,
                "{embedded} items without a vector of this model embedded"
            )?;
        }
    }
    out.flush()?;
    Ok(())
}

fn print_extract(reports: &[loom_memory::ExtractReport], json: bool) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if json {
        serde_json::to_writer_pretty(&mut out, reports)?;
        writeln!(out)?;
    } else {
        if reports.is_empty() {
            writeln!(out, "no sessions to read")?;
        }
        for r in reports {
            let name = r.session.as_ref().map_or("", SessionId::as_str);
            writeln!(
                out,
                "{name}: read seqs {}–{} in {} calls of {} ({} input, {} output tokens): {} facts, {} new, {} duplicates, {} already extracted, {} rejected",
                r.from_mark + 1,
                r.to_mark,
                r.windows,
                r.extractor,
                r.input_tokens,
                r.output_tokens,
                r.facts,
                r.created,
                r.duplicates,
                r.known,
                r.rejected.len()
            )?;
            for x in &r.rejected {
                writeln!(
                    out,
                    "  rejected in seqs {}–{}: {}: {}",
                    x.from_seq, x.to_seq, x.field, x.reason
                )?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// A score readable at any scale: BM25 is tiny over a handful of items and large over many.
pub(crate) fn score(s: f64) -> String {
    if s != 0.0 && s.abs() < 0.01 {
        format!("{s:.3e}")
    } else {
        format!("{s:.3}")
    }
}

fn print_hits(hits: &[loom_memory::Hit], json: bool) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if json {
        serde_json::to_writer_pretty(&mut out, &Hits { hits })?;
        writeln!(out)?;
    } else if hits.is_empty() {
        writeln!(out, "no hits")?;
    } else {
        for h in hits {
            let sources: Vec<String> = h
                .sources
                .iter()
                .map(|s| format!("{}#{}", s.session, s.seq))
                .collect();
            writeln!(
                out,
                "{} {} score {}, {} tokens, from {}\n  {}",
                // L1 hits are the log itself, not stored items: they have no id to forget.
                if h.id > 0 {
                    format!("#{}", h.id)
                } else {
                    "(log)".to_owned()
                },
                h.tier,
                score(h.score),
                h.tokens,
                sources.join(", "),
                h.text.replace('\n', "\n  ")
            )?;
        }
    }
    out.flush()?;
    Ok(())
}
