//! Checks every backend applies before writing, so they all accept and refuse the same things.

use loom_core::{BlobRef, CallState, Ledger, NewEvent, Seq, SessionId};

use crate::records::{CallStatus, NewModelCall, NewSummary, StepRecord, ToolCallRecord};
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
            let (status, result_seq) = match state {
                CallState::Pending { .. } => (CallStatus::Pending, None),
                CallState::Resolved {
                    result_seq,
                    is_error,
                    ..
                } => {
                    let status = if *is_error {
                        CallStatus::Errored
                    } else {
                        CallStatus::Resolved
                    };
                    (status, Some(*result_seq))
                }
                CallState::Expired { .. } => (CallStatus::Expired, None),
            };
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
