//! `loom explain SESSION --event N`: what happened to one event in each model call.
//!
//! Reads the receipts recorded by `loom render`; a session with none is explained by rendering
//! each of its calls (every assistant event) under the given policy, without recording anything.

use std::io::Write;

use loom_core::render::{CompactionState, CostMemo, Receipt};
use loom_core::EventBody;
use loom_store::Store;

use super::render::{load, RenderArgs};
use super::Context;
use crate::exit::bad_input;

/// Arguments of `loom explain`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The session.
    session: String,
    /// The event's seq.
    #[arg(long)]
    event: u64,
    #[command(flatten)]
    render: RenderArgs,
    /// Print JSON: a list of `{call, at_seq, fate}`.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    let loaded = load(ctx, &args.session, &args.render)?;
    let n = args.event;
    let event = loaded
        .events
        .get(usize::try_from(n).unwrap_or(usize::MAX).wrapping_sub(1))
        .ok_or_else(|| {
            bad_input(anyhow::anyhow!(
                "session `{}` has no event {n} (it has {})",
                loaded.session,
                loaded.events.len()
            ))
        })?;
    let recorded = loaded.ws.store.model_calls(&loaded.session)?;
    let mut rows: Vec<(String, u64, String)> = Vec::new();
    if recorded.is_empty() {
        let mut state = CompactionState::default();
        let mut memo = CostMemo::new();
        let mut call = 0;
        for (i, e) in loaded.events.iter().enumerate() {
            if !matches!(e.body, EventBody::Assistant { .. }) || i == 0 {
                continue;
            }
            call += 1;
            let r = loaded
                .render(i, &args.render.model, args.render.format, &state, &mut memo)
                .map_err(bad_input)?;
            state = r.state.clone();
            rows.push((
                format!("call {call} (simulated)"),
                r.receipt.at_seq,
                fate(&r.receipt, n),
            ));
        }
    } else {
        for mc in &recorded {
            let receipt: Receipt = serde_json::from_value(mc.call.receipt["receipt"].clone())
                .map_err(|e| anyhow::anyhow!("model call {}: unreadable receipt: {e}", mc.id))?;
            rows.push((format!("call {}", mc.id), mc.call.at_seq, fate(&receipt, n)));
        }
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        let list: Vec<serde_json::Value> = rows
            .iter()
            .map(|(call, at, fate)| serde_json::json!({"call": call, "at_seq": at, "fate": fate}))
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(list))?;
        return Ok(());
    }
    writeln!(
        out,
        "event {n} ({}) of session {}",
        event.body.kind().as_str(),
        loaded.session
    )?;
    for (call, at, fate) in rows {
        writeln!(out, "  {call:<22} log up to seq {at:<6} {fate}")?;
    }
    Ok(())
}

fn fate(receipt: &Receipt, seq: u64) -> String {
    let f = receipt.fate(seq);
    match (f, &receipt.compaction) {
        (_, Some(p)) if f != "verbatim" && f != "not yet in the log" => format!(
            "{f} (compaction point at seq {}: {:?}, {} -> {} tokens)",
            p.at_seq, p.reason, p.before, p.after
        ),
        _ => f.to_owned(),
    }
}
