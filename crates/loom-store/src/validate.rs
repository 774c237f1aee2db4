//! Checks every backend applies before writing, so they all accept and refuse the same things.

use loom_core::{BlobRef, CallState, Ledger, NewEvent, Seq, SessionId};

use crate::records::{NewModelCall, NewSummary, StepRecord, ToolCallRecord, Usage};
use crate::{BlobAlias, Result, StoreError};

/// Runs `events` (to be stored from seq `first`) through `ledger`, which is updated.
pub(crate) fn events(
    session: &SessionId,
    ledger: &mut Ledger,
    first: Seq,
    events: &[NewEvent],
) -> Result<()> {
    for (index, event) in events.iter().enumerate() {
        let seq = first + index as Seq;
        ledger
            .apply(seq, &event.body)
            .map_err(|source| StoreError::InvalidEvent {
                session: session.clone(),
                index,
                seq,
                source,
            })?;
    }
    Ok(())
}

/// The ledger's calls as records, ordered by the seq that made them, then by id.
pub(crate) fn call_records(ledger: &Ledger) -> Vec<ToolCallRecord> {
    let mut records: Vec<ToolCallRecord> = ledger
        .iter()
        .map(|(id, state)| {
            let (status, result_seq) = crate::calls::call_row(state);
            ToolCallRecord {
                call_id: id.to_owned(),
                tool_name: state.tool_name().to_owned(),
                call_seq: state.call_seq(),
                status,
                result_seq,
            }
        })
        .collect();
    records.sort_by(|a, b| (a.call_seq, &a.call_id).cmp(&(b.call_seq, &b.call_id)));
    records
}

pub(crate) fn summary(summary: &NewSummary, latest: Seq) -> Result<()> {
    let bad = |reason: String| StoreError::InvalidRecord {
        session: summary.session.clone(),
        record: "summary".into(),
        reason,
    };
    if summary.from_seq == 0 {
        return Err(bad("from_seq must be at least 1".into()));
    }
    if summary.from_seq > summary.to_seq {
        return Err(bad(format!(
            "from_seq {} is after to_seq {}",
            summary.from_seq, summary.to_seq
        )));
    }
    if summary.to_seq > latest {
        return Err(bad(format!(
            "to_seq {} is past the log's last seq {latest}",
            summary.to_seq
        )));
    }
    Ok(())
}

pub(crate) fn model_call(call: &NewModelCall, latest: Seq) -> Result<()> {
    if call.at_seq > latest {
        return Err(StoreError::InvalidRecord {
            session: call.session.clone(),
            record: "model call".into(),
            reason: format!("at_seq {} is past the log's last seq {latest}", call.at_seq),
        });
    }
    Ok(())
}

/// The error for a model call the store does not hold: `recorded` is how many calls the session
/// has, or `None` when the session itself does not exist.
pub(crate) fn unknown_model_call(
    session: &SessionId,
    call: u64,
    recorded: Option<u64>,
) -> StoreError {
    let reason = match recorded {
        None => "the session does not exist".to_owned(),
        Some(0) => "the session has no model calls".to_owned(),
        Some(1) => "the session's only model call is 1".to_owned(),
        Some(n) => format!("the session's model calls are 1 to {n}"),
    };
    StoreError::ModelCallNotFound {
        session: session.clone(),
        call,
        reason,
    }
}

/// Checks a usage report for model call `call`, which holds `stored`, and says whether it is to
/// be written: `false` means it repeats the stored report (a retry), which changes nothing.
///
/// A call's usage is written once: a report whose figures differ from the stored ones is refused
/// rather than replacing them, since two different counts for one call means one of them is
/// about another call.
pub(crate) fn usage(
    session: &SessionId,
    call: u64,
    stored: Option<&Usage>,
    new: &Usage,
) -> Result<bool> {
    if let Some(cached) = new.cached_input_tokens {
        if cached > new.input_tokens {
            return Err(StoreError::InvalidRecord {
                session: session.clone(),
                record: format!("usage of model call {call}"),
                reason: format!(
                    "cached_input_tokens {cached} exceeds input_tokens {}; cached tokens are \
                     part of the input",
                    new.input_tokens
                ),
            });
        }
    }
    match stored {
        None => Ok(true),
        Some(old) if old.same_figures(new) => Ok(false),
        Some(old) => Err(StoreError::Conflict {
            session: session.clone(),
            record: format!("model call {call}"),
            reason: format!(
                "already has a usage ({}); refusing to replace it with ({})",
                figures(old),
                figures(new)
            ),
        }),
    }
}

/// A usage's token figures, every field named so that a conflict shows which one differs.
fn figures(usage: &Usage) -> String {
    let opt = |v: Option<u64>| v.map_or_else(|| "not reported".to_owned(), |n| n.to_string());
    format!(
        "input_tokens {}, cached_input_tokens {}, output_tokens {}",
        usage.input_tokens,
        opt(usage.cached_input_tokens),
        opt(usage.output_tokens)
    )
}

pub(crate) fn step(session: &SessionId, step: &StepRecord, ledger: &Ledger) -> Result<()> {
    let bad = |reason: String| StoreError::InvalidRecord {
        session: session.clone(),
        record: format!("step {}", step.id),
        reason,
    };
    if step.id.is_empty() {
        return Err(bad("id must not be empty".into()));
    }
    match ledger.get(&step.call_id) {
        Some(CallState::Resolved { result_seq, .. }) if *result_seq == step.result_seq => Ok(()),
        Some(CallState::Resolved { result_seq, .. }) => Err(bad(format!(
            "result_seq {} does not match call `{}`'s result at seq {result_seq}",
            step.result_seq, step.call_id
        ))),
        Some(_) => Err(bad(format!("call `{}` has no result", step.call_id))),
        None => Err(bad(format!("call `{}` is not in the log", step.call_id))),
    }
}

pub(crate) fn alias_conflict(
    session: &SessionId,
    alias: &BlobAlias,
    old: &BlobRef,
    new: &BlobRef,
) -> StoreError {
    StoreError::InvalidRecord {
        session: session.clone(),
        record: format!("alias {}", alias.as_str()),
        reason: format!("already points at {old}; refusing to repoint it at {new}"),
    }
}
