//! `loom approve SESSION CALL [--once|--session|--deny]`: answer a call that waits for approval.
//! The answer is appended to the session's log; `loom run --resume` then runs (or denies) it.

use std::io::Write;

use loom_agent::Answer;
use loom_core::SessionId;

use super::Context;
use crate::exit::bad_input;

/// Arguments of `loom approve`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("answer").args(["once", "session_wide", "deny"])))]
pub(crate) struct Args {
    /// The session whose call waits (a child's own session when a child asked).
    #[arg(value_name = "SESSION")]
    session_id: String,
    /// The call's id, as `loom run` printed it.
    call: String,
    /// Run this call (the default).
    #[arg(long)]
    once: bool,
    /// Run it, and the same tool (for shell: the same command) for the rest of the session.
    #[arg(long = "session")]
    session_wide: bool,
    /// Do not run it: its result says it was denied.
    #[arg(long)]
    deny: bool,
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    let session = SessionId::new(args.session_id).map_err(bad_input)?;
    let answer = if args.deny {
        Answer::Deny
    } else if args.session_wide {
        Answer::Session
    } else {
        Answer::Once
    };
    let opened = ctx.open_existing("`loom run` makes one")?;
    loom_agent::approve(opened.store.as_ref(), &session, &args.call, answer).map_err(bad_input)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "call {} of session {session}: {answer:?}", args.call)?;
    Ok(())
}
