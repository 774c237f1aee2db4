//! `loom usage SESSION --call N --input-tokens X`: record what the provider said a model call
//! used, against the receipt `loom render` recorded for it (render prints the call's id on
//! stderr).
//!
//! A call's usage is recorded once; running the same command again is a harmless retry, while
//! different figures for the same call are refused (exit 2) and change nothing.

use std::io::Write;

use loom_core::SessionId;
use loom_store::Usage;

use super::Context;
use crate::exit::bad_input;

/// Arguments of `loom usage`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The session.
    session: String,
    /// The model call's id, as `loom render` printed it (`model call N`).
    #[arg(long, value_name = "N")]
    call: u64,
    /// Input tokens the provider reported, cached ones included.
    #[arg(long, value_name = "X")]
    input_tokens: u64,
    /// How many of the input tokens the provider served from its cache.
    #[arg(long, value_name = "Y")]
    cached_input_tokens: Option<u64>,
    /// Output tokens the provider reported.
    #[arg(long, value_name = "Z")]
    output_tokens: Option<u64>,
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    let session = SessionId::new(args.session).map_err(bad_input)?;
    let ws = super::sessions::open_existing(ctx)?;
    let usage = Usage {
        input_tokens: args.input_tokens,
        cached_input_tokens: args.cached_input_tokens,
        output_tokens: args.output_tokens,
        // When the report arrived, which only the caller's clock can say (unlike a render's
        // time, which is taken from the log so that renders repeat).
        reported_ms: super::now_ms(),
    };
    // Unknown sessions and calls, conflicting figures and cached > input are store errors that
    // name the session and call; the exit mapping makes them bad input.
    let call = ws.store.report_usage(&session, args.call, &usage)?;
    let stored = call.usage.unwrap_or(usage);
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "model call {} of session {}: {}",
        call.id,
        session,
        describe(&stored)
    )?;
    Ok(())
}

/// `1300 input tokens (1024 cached), 57 output tokens`, leaving out what was not reported.
fn describe(usage: &Usage) -> String {
    let mut text = format!("{} input tokens", usage.input_tokens);
    if let Some(cached) = usage.cached_input_tokens {
        text += &format!(" ({cached} cached)");
    }
    if let Some(output) = usage.output_tokens {
        text += &format!(", {output} output tokens");
    }
    text
}
