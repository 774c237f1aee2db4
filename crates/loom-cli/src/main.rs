//! The `loom` binary: parse the command line, run the command, map its error to an exit code.

mod cmd;
mod exit;
mod progress;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Loom: a context engine for LLM agents.
#[derive(Debug, Parser)]
#[command(name = "loom", version, about, propagate_version = true)]
struct Cli {
    /// The database: an SQLite file path (blobs live in the folder beside it with the extension
    /// `.workspace`), or a `postgres://user@host:port/dbname` URL (blobs live in the database).
    #[arg(
        long,
        global = true,
        env = "LOOM_DB",
        hide_env_values = true,
        default_value = "loom.db"
    )]
    db: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Import agent histories (OpenAI Chat, Anthropic Messages, OpenAI Responses) into the log.
    Import(cmd::import::Args),
    /// List sessions.
    Sessions(cmd::sessions::Args),
    /// Print a session's events.
    Log(cmd::log::Args),
    /// Write a blob's original bytes to stdout.
    Blob(cmd::blob::Args),
    /// List a session's tool results as reduced steps (observation, outcome_ref, success).
    Steps(cmd::steps::Args),
    /// Print a session's step history compacted (seed 003): recent steps in full, older ones
    /// grouped into one-line summaries, failures kept, the oldest counted.
    Compact(cmd::compact::Args),
    /// Write the original bytes behind a step's reference (`outputs/shell_003.log`) to stdout.
    Recall(cmd::recall::Args),
    /// Write a session's steps in the seeds' layout: history/step_NNN.{json,compact}, outputs/.
    ExportSteps(cmd::export_steps::Args),
    /// Print the exact request body for a session's next model call.
    Render(cmd::render::Args),
    /// Record the token usage the provider reported for a model call `render` recorded.
    Usage(cmd::usage::Args),
    /// Say what happened to one event in each model call.
    Explain(cmd::explain::Args),
    /// Replay agent traces through Loom and its baselines; report tokens, cost, cache and recall.
    Replay(cmd::replay::Args),
    /// Count tokens of a text file, or per trajectory of a JSONL trace (request-level).
    Tokens(cmd::tokens::Args),
    /// Create, list and revoke the API keys `loom serve --auth keys` accepts.
    Keys(cmd::keys::Args),
    /// Serve the drop-in proxy for OpenAI and Anthropic clients and the HTTP API.
    Serve(cmd::serve::Args),
    /// Run an agent on Loom's engine: tools, sandbox, approvals, sub-agents (`--resume` continues).
    Run(cmd::run::Args),
    /// Answer a tool call that waits for approval in a paused run.
    Approve(cmd::approve::Args),
    /// Manage the database itself: `loom db migrate` brings its schema up to date.
    Db(cmd::db::Args),
    /// Memory derived from the log: `index`, `search` by tier within a token budget, `save` a
    /// note, `forget`.
    Memory(cmd::memory::Args),
    /// The knowledge base: `add` files (chunked on their structure), `search`, `list`, `remove`.
    Kb(cmd::kb::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let ctx = cmd::Context { db: cli.db };
    let result = match cli.command {
        Command::Import(args) => cmd::import::run(&ctx, args),
        Command::Sessions(args) => cmd::sessions::run(&ctx, args),
        Command::Log(args) => cmd::log::run(&ctx, args),
        Command::Blob(args) => cmd::blob::run(&ctx, args),
        Command::Steps(args) => cmd::steps::run(&ctx, args),
        Command::Compact(args) => cmd::compact::run(&ctx, args),
        Command::Recall(args) => cmd::recall::run(&ctx, args),
        Command::ExportSteps(args) => cmd::export_steps::run(&ctx, args),
        Command::Replay(args) => cmd::replay::run(&ctx, args),
        Command::Render(args) => cmd::render::run(&ctx, args),
        Command::Usage(args) => cmd::usage::run(&ctx, args),
        Command::Explain(args) => cmd::explain::run(&ctx, args),
        Command::Tokens(args) => cmd::tokens::run(&ctx, args),
        Command::Keys(args) => cmd::keys::run(&ctx, args),
        Command::Serve(args) => cmd::serve::run(&ctx, args),
        Command::Db(args) => cmd::db::run(&ctx, args),
        Command::Memory(args) => cmd::memory::run(&ctx, args),
        Command::Kb(args) => cmd::kb::run(&ctx, args),
        Command::Run(args) => cmd::run::run(&ctx, args),
        Command::Approve(args) => cmd::approve::run(&ctx, args),
    };
    exit::report(result)
}
