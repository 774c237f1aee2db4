//! The tool-call ledger as stored rows, shared by the SQL backends: statuses by name, a call's
//! state rebuilt from its columns, and the calls a batch of events can touch.

use std::collections::BTreeSet;

use loom_core::{CallState, EventBody, NewEvent, Seq};

use crate::records::CallStatus;
use crate::{Result, StoreError};

fn corrupt(reason: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        table: "tool_calls",
        reason: reason.to_string(),
    }
}

pub(crate) fn status_name(status: CallStatus) -> &'static str {
    match status {
        CallStatus::Pending => "pending",
        CallStatus::Resolved => "resolved",
        CallStatus::Errored => "errored",
        CallStatus::Expired => "expired",
    }
}

pub(crate) fn parse_status(name: &str) -> Result<CallStatus> {
    match name {
        "pending" => Ok(CallStatus::Pending),
        "resolved" => Ok(CallStatus::Resolved),
        "errored" => Ok(CallStatus::Errored),
        "expired" => Ok(CallStatus::Expired),
        other => Err(corrupt(format!("unknown status `{other}`"))),
    }
}

/// The status and result seq a call's state is stored as.
pub(crate) fn call_row(state: &CallState) -> (CallStatus, Option<Seq>) {
    match state {
        CallState::Pending { .. } => (CallStatus::Pending, None),
        CallState::Expired { .. } => (CallStatus::Expired, None),
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
    }
}

pub(crate) fn call_state(
    tool_name: String,
    call_seq: Seq,
    status: CallStatus,
    result_seq: Option<Seq>,
) -> Result<CallState> {
    Ok(match (status, result_seq) {
        (CallStatus::Pending, _) => CallState::Pending {
            tool_name,
            call_seq,
        },
        (CallStatus::Expired, _) => CallState::Expired {
            tool_name,
            call_seq,
        },
        (CallStatus::Resolved | CallStatus::Errored, Some(result_seq)) => CallState::Resolved {
            tool_name,
            call_seq,
            result_seq,
            is_error: status == CallStatus::Errored,
        },
        (_, None) => return Err(corrupt("a resolved call has no result_seq")),
    })
}

/// The call ids a batch of events makes or answers: the only ledger entries it can touch.
pub fn touched_calls(events: &[NewEvent]) -> BTreeSet<&str> {
    let mut ids = BTreeSet::new();
    for event in events {
        match &event.body {
            EventBody::Assistant { tool_calls, .. } => {
                ids.extend(tool_calls.iter().map(|c| c.id.as_str()));
            }
            EventBody::ToolResult { call_id, .. } => {
                ids.insert(call_id.as_str());
            }
            _ => {}
        }
    }
    ids
}
