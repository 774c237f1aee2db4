//! `loom explain SESSION --event N`: what happened to one event in each model call.
//!
//! Reads the receipts recorded by `loom render`; a session with none is explained by rendering
//! each of its calls (every assistant event) under the given policy, without recording anything.
//! A recorded call whose usage was reported (`loom usage`) shows the provider's input tokens next
//! to the receipt's estimate, so that the estimate can be checked against what was billed.

use std::io::Write;

use loom_core::render::{CompactionState, CostMemo, Receipt};
use loom_core::EventBody;
use loom_store::Usage;

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
    /// Print JSON: a list of `{call, at_seq, fate}`, with `estimate` and `usage` for the calls
    /// whose usage was reported.
    #[arg(long)]
    json: bool,
}

/// One model call's line.
struct Row {
    call: String,
    at_seq: u64,
    fate: String,
    /// The receipt's estimate of the request's tokens and the provider's usage, when reported.
    reported: Option<(u64, Usage)>,
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
    let mut rows: Vec<Row> = Vec::new();
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
            rows.push(Row {
                call: format!("call {call} (simulated)"),
                at_seq: r.receipt.at_seq,
                fate: fate(&r.receipt, n),
                reported: None,
            });
        }
    } else {
        for mc in &recorded {
            let receipt: Receipt = serde_json::from_value(mc.call.receipt["receipt"].clone())
                .map_err(|e| anyhow::anyhow!("model call {}: unreadable receipt: {e}", mc.id))?;
            rows.push(Row {
                call: format!("call {}", mc.id),
                at_seq: mc.call.at_seq,
                fate: fate(&receipt, n),
                reported: mc.usage.map(|usage| (receipt.estimate, usage)),
            });
        }
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        let list: Vec<serde_json::Value> = rows
            .iter()
            .map(|row| match &row.reported {
                None => {
                    serde_json::json!({"call": row.call, "at_seq": row.at_seq, "fate": row.fate})
                }
                Some((estimate, usage)) => serde_json::json!({
                    "call": row.call,
                    "at_seq": row.at_seq,
                    "fate": row.fate,
                    "estimate": estimate,
                    "usage": usage,
                }),
            })
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
    for Row {
        call,
        at_seq,
        fate,
        reported,
    } in &rows
    {
        write!(out, "  {call:<22} log up to seq {at_seq:<6} {fate}")?;
        if let Some((estimate, usage)) = reported {
            write!(
                out,
                "; estimated {estimate} input tokens, provider reported {}",
                usage.input_tokens
            )?;
            if let Some(cached) = usage.cached_input_tokens {
                write!(out, " ({cached} cached)")?;
            }
        }
        writeln!(out)?;
    }
    // Whatever its fate, the event itself is in the log, and an offloaded output in the blob
    // store: say how to get it back.
    let step = match &event.body {
        EventBody::ToolResult { call_id, .. } => loaded.steps.get(call_id),
        _ => None,
    };
    match step.and_then(|s| s.outcome_ref.as_deref()) {
        Some(alias) => writeln!(
            out,
            "  original output: loom recall {alias} --session {}",
            loaded.session
        )?,
        None => writeln!(
            out,
            "  original: loom log {} --from {n} --to {n}",
            loaded.session
        )?,
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
