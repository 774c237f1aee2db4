//! Approval requests and answers, kept in the log as events.
//!
//! A call that must be approved pauses the run: the runtime appends a direct message from `loom`
//! to `user` naming the call (`metadata: {"loom.approval": "request", "call_id", "tool",
//! "reason"}`), and stops. `loom approve SESSION CALL --once|--session|--deny` appends the answer,
//! a direct message from `user` to `loom` (`"loom.approval": "once" | "session" | "deny"`), and
//! `loom run --resume` goes on. Neither message is addressed to the agent, so neither enters its
//! requests; both stay in the log, so a run's approvals are auditable and replayable.

use std::collections::{BTreeMap, BTreeSet};

use loom_core::{Event, EventBody, NewEvent, SessionId};
use loom_store::Store;
use serde_json::Value;

use crate::error::{AgentError, Result};

/// The metadata key that marks approval messages.
pub const KEY: &str = "loom.approval";
/// The runtime's name as a message source.
pub const RUNTIME: &str = "loom";
/// The user's name as a message target.
pub const USER: &str = "user";

/// The user's answer to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Run this call.
    Once,
    /// Run this call, and the same tool (for shell: the same command) for the rest of the session.
    Session,
    /// Do not run it.
    Deny,
}

impl Answer {
    fn as_str(self) -> &'static str {
        match self {
            Self::Once => "once",
            Self::Session => "session",
            Self::Deny => "deny",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "once" => Some(Self::Once),
            "session" => Some(Self::Session),
            "deny" => Some(Self::Deny),
            _ => None,
        }
    }
}

fn approval_meta(e: &Event) -> Option<(&str, &BTreeMap<String, Value>)> {
    match &e.body {
        EventBody::DirectMessage { metadata, .. } => Some((metadata.get(KEY)?.as_str()?, metadata)),
        _ => None,
    }
}

/// The request event for a call.
pub fn request(ts_ms: i64, call_id: &str, tool: &str, grant: &str, reason: &str) -> NewEvent {
    let mut metadata = BTreeMap::new();
    metadata.insert(KEY.into(), Value::from("request"));
    metadata.insert("call_id".into(), Value::from(call_id));
    metadata.insert("tool".into(), Value::from(tool));
    metadata.insert("grant".into(), Value::from(grant));
    metadata.insert("reason".into(), Value::from(reason));
    NewEvent::new(
        ts_ms,
        EventBody::DirectMessage {
            source: RUNTIME.into(),
            target: USER.into(),
            content: format!("approval needed for call {call_id} ({tool}): {reason}"),
            priority: 1.0,
            ttl_seconds: None,
            parent_task_id: None,
            metadata,
        },
    )
}

/// The answer event for a call.
pub fn answer(ts_ms: i64, call_id: &str, grant: &str, answer: Answer) -> NewEvent {
    let mut metadata = BTreeMap::new();
    metadata.insert(KEY.into(), Value::from(answer.as_str()));
    metadata.insert("call_id".into(), Value::from(call_id));
    metadata.insert("grant".into(), Value::from(grant));
    NewEvent::new(
        ts_ms,
        EventBody::DirectMessage {
            source: USER.into(),
            target: RUNTIME.into(),
            content: format!("call {call_id}: {}", answer.as_str()),
            priority: 1.0,
            ttl_seconds: None,
            parent_task_id: None,
            metadata,
        },
    )
}

/// What the log says about approvals: requests and answers by call, and the session grants.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Requests by call id: the grant key asked for.
    pub requested: BTreeMap<String, String>,
    /// Answers by call id.
    pub answered: BTreeMap<String, Answer>,
    /// Grants for the rest of the session.
    pub granted: BTreeSet<String>,
}

impl Ledger {
    /// Reads the approval messages of a log.
    pub fn read(events: &[Event]) -> Self {
        let mut ledger = Self::default();
        for e in events {
            let Some((kind, meta)) = approval_meta(e) else {
                continue;
            };
            let Some(call) = meta.get("call_id").and_then(Value::as_str) else {
                continue;
            };
            let grant = meta
                .get("grant")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if kind == "request" {
                ledger.requested.insert(call.into(), grant.into());
            } else if let Some(answer) = Answer::parse(kind) {
                ledger.answered.insert(call.into(), answer);
                if answer == Answer::Session {
                    ledger.granted.insert(grant.into());
                }
            }
        }
        ledger
    }
}

/// Answers a call that waits for approval (`loom approve`): appends the answer to the log.
/// Refused when the call is unknown, already has a result, or was not asked about.
pub fn approve(
    store: &dyn Store,
    session: &SessionId,
    call_id: &str,
    answer: Answer,
) -> Result<()> {
    let Some(info) = store.session(session)? else {
        return Err(AgentError::session(session, "no such session"));
    };
    let events = store.read(session, 1..=info.event_count)?;
    let ledger = Ledger::read(&events);
    let Some(grant) = ledger.requested.get(call_id) else {
        return Err(AgentError::session(
            session,
            format!(
                "call `{call_id}` is not waiting for approval (waiting: {})",
                {
                    let waiting: Vec<&String> = ledger
                        .requested
                        .keys()
                        .filter(|c| !ledger.answered.contains_key(*c))
                        .collect();
                    if waiting.is_empty() {
                        "none".to_owned()
                    } else {
                        waiting
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                }
            ),
        ));
    };
    if ledger.answered.contains_key(call_id) {
        return Err(AgentError::session(
            session,
            format!("call `{call_id}` was already answered"),
        ));
    }
    let answered = events
        .iter()
        .any(|e| matches!(&e.body, EventBody::ToolResult { call_id: c, .. } if c == call_id));
    if answered {
        return Err(AgentError::session(
            session,
            format!("call `{call_id}` already has a result"),
        ));
    }
    store.append(
        session,
        &[self::answer(crate::now_ms(), call_id, grant, answer)],
    )?;
    Ok(())
}
