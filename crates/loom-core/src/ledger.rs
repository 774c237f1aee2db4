//! The pairing rules of the log: every tool result answers exactly one earlier, pending call.
//!
//! Importers and stores both run events through a [`Ledger`] before accepting them, so a log can
//! never hold an orphaned result, a duplicate call id or a second (stale) result for one call.

use std::collections::HashMap;

use crate::error::{LogError, Result};
use crate::event::{EventBody, Seq, ToolCall};

/// Where a tool call stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallState {
    /// Made, no result yet.
    Pending {
        /// Tool name on the call.
        tool_name: String,
        /// Seq of the assistant event that made it.
        call_seq: Seq,
    },
    /// Answered by the result at `result_seq`.
    Resolved {
        /// Tool name on the call.
        tool_name: String,
        /// Seq of the assistant event that made it.
        call_seq: Seq,
        /// Seq of the result.
        result_seq: Seq,
        /// Whether the result was an error.
        is_error: bool,
    },
    /// Given up on: no result will be accepted any more.
    Expired {
        /// Tool name on the call.
        tool_name: String,
        /// Seq of the assistant event that made it.
        call_seq: Seq,
    },
}

impl CallState {
    /// Tool name on the call.
    pub fn tool_name(&self) -> &str {
        match self {
            Self::Pending { tool_name, .. }
            | Self::Resolved { tool_name, .. }
            | Self::Expired { tool_name, .. } => tool_name,
        }
    }

    /// Seq of the assistant event that made the call.
    pub fn call_seq(&self) -> Seq {
        match self {
            Self::Pending { call_seq, .. }
            | Self::Resolved { call_seq, .. }
            | Self::Expired { call_seq, .. } => *call_seq,
        }
    }
}

/// Tool-call bookkeeping for one session.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    calls: HashMap<String, CallState>,
}

impl Ledger {
    /// An empty ledger (a new session).
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuilds a ledger from known call states (e.g. loaded from a store).
    pub fn from_states(states: impl IntoIterator<Item = (String, CallState)>) -> Self {
        Self {
            calls: states.into_iter().collect(),
        }
    }

    /// The state of a call, if it was made.
    pub fn get(&self, call_id: &str) -> Option<&CallState> {
        self.calls.get(call_id)
    }

    /// Ids of the calls still waiting for a result, sorted.
    pub fn pending(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self
            .calls
            .iter()
            .filter(|(_, s)| matches!(s, CallState::Pending { .. }))
            .map(|(id, _)| id.as_str())
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Checks `body` (to be stored at `seq`) against the calls made so far, without changing
    /// anything.
    pub fn check(&self, body: &EventBody) -> Result<()> {
        body.validate()?;
        match body {
            EventBody::Assistant { tool_calls, .. } => {
                let mut seen: HashMap<&str, ()> = HashMap::new();
                for call in tool_calls {
                    if let Some(state) = self.calls.get(&call.id) {
                        return Err(LogError::DuplicateCall {
                            call_id: call.id.clone(),
                            first_seq: state.call_seq(),
                        });
                    }
                    if seen.insert(&call.id, ()).is_some() {
                        return Err(LogError::invalid(
                            "tool_calls",
                            format!("call id `{}` appears twice in one assistant turn", call.id),
                        ));
                    }
                }
                Ok(())
            }
            EventBody::ToolResult {
                call_id, tool_name, ..
            } => match self.calls.get(call_id) {
                None => Err(LogError::UnknownCall {
                    call_id: call_id.clone(),
                }),
                Some(CallState::Resolved { result_seq, .. }) => Err(LogError::AlreadyResolved {
                    call_id: call_id.clone(),
                    resolved_seq: *result_seq,
                }),
                Some(CallState::Expired { .. }) => Err(LogError::Expired {
                    call_id: call_id.clone(),
                }),
                Some(CallState::Pending {
                    tool_name: expected,
                    ..
                }) if expected != tool_name => Err(LogError::ToolNameMismatch {
                    call_id: call_id.clone(),
                    expected: expected.clone(),
                    got: tool_name.clone(),
                }),
                Some(CallState::Pending { .. }) => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// Marks a pending call as expired; any other state is left alone and reported.
    pub fn expire(&mut self, call_id: &str) -> Result<()> {
        match self.calls.get_mut(call_id) {
            None => Err(LogError::UnknownCall {
                call_id: call_id.to_owned(),
            }),
            Some(CallState::Resolved { result_seq, .. }) => Err(LogError::AlreadyResolved {
                call_id: call_id.to_owned(),
                resolved_seq: *result_seq,
            }),
            Some(CallState::Expired { .. }) => Err(LogError::Expired {
                call_id: call_id.to_owned(),
            }),
            Some(state @ CallState::Pending { .. }) => {
                *state = CallState::Expired {
                    tool_name: state.tool_name().to_owned(),
                    call_seq: state.call_seq(),
                };
                Ok(())
            }
        }
    }

    /// The id a call made now gets in the log: its own when no call has used it (in this
    /// ledger or in `turn`, the ids already given to the same turn's calls), otherwise
    /// `<id>_r<n>` with the smallest `n` from 2 that is free.
    ///
    /// Providers that number calls per turn (`call_0` in every turn) and models that repeat an
    /// id are valid on the wire, but the log needs one id per call. The alias depends only on
    /// the ids used before, so the same history read again, or a reply read into the log and
    /// then sent back by the client, gets the same aliases.
    pub fn fresh_id(&self, id: &str, turn: &[String]) -> String {
        let free = |candidate: &str| {
            !self.calls.contains_key(candidate) && !turn.iter().any(|t| t == candidate)
        };
        if free(id) {
            return id.to_owned();
        }
        (2u64..)
            .map(|n| format!("{id}_r{n}"))
            .find(|candidate| free(candidate))
            .unwrap_or_else(|| id.to_owned())
    }

    /// The call a result naming `call_id` answers in this log: `call_id` itself, unless that
    /// call is answered already and the log holds an alias of it still waiting for its result
    /// (`<call_id>_r<n>`, [`Ledger::fresh_id`]): a model that repeated an id had its call
    /// aliased, and the client answers it by the id it was shown.
    pub fn answered_id(&self, call_id: &str) -> Option<String> {
        if !matches!(self.calls.get(call_id), Some(CallState::Resolved { .. })) {
            return None;
        }
        (2u64..)
            .map(|n| format!("{call_id}_r{n}"))
            .map_while(|alias| self.calls.get(&alias).map(|state| (alias, state)))
            .find(|(_, state)| matches!(state, CallState::Pending { .. }))
            .map(|(alias, _)| alias)
    }

    /// Gives the calls of one new assistant turn their log ids ([`Ledger::fresh_id`]); returns
    /// whether any was renamed.
    pub fn alias_calls(&self, calls: &mut [ToolCall]) -> bool {
        let mut turn: Vec<String> = Vec::with_capacity(calls.len());
        let mut renamed = false;
        for call in calls.iter_mut() {
            let id = self.fresh_id(&call.id, &turn);
            if id != call.id {
                call.id = id.clone();
                renamed = true;
            }
            turn.push(id);
        }
        renamed
    }

    /// Every call and its state, sorted by call id.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &CallState)> {
        let mut all: Vec<(&str, &CallState)> =
            self.calls.iter().map(|(k, v)| (k.as_str(), v)).collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        all.into_iter()
    }

    /// Checks `body` and records it as stored at `seq`.
    pub fn apply(&mut self, seq: Seq, body: &EventBody) -> Result<()> {
        self.check(body)?;
        match body {
            EventBody::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    self.calls.insert(
                        call.id.clone(),
                        CallState::Pending {
                            tool_name: call.name.clone(),
                            call_seq: seq,
                        },
                    );
                }
            }
            EventBody::ToolResult {
                call_id, is_error, ..
            } => {
                if let Some(state) = self.calls.get_mut(call_id) {
                    if let CallState::Pending {
                        tool_name,
                        call_seq,
                    } = state
                    {
                        *state = CallState::Resolved {
                            tool_name: std::mem::take(tool_name),
                            call_seq: *call_seq,
                            result_seq: seq,
                            is_error: *is_error,
                        };
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ToolCall, ToolOutput};
    use crate::stats::ContentStats;

    fn call(id: &str) -> EventBody {
        EventBody::Assistant {
            content: None,
            reasoning: None,
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "bash".into(),
                arguments: "{}".into(),
            }],
            name: None,
            native: None,
        }
    }

    fn result(id: &str, tool: &str) -> EventBody {
        EventBody::ToolResult {
            call_id: id.into(),
            tool_name: tool.into(),
            content: ToolOutput::Text("ok".into()),
            is_error: false,
            stats: ContentStats::of(b"ok"),
        }
    }

    #[test]
    fn a_result_for_an_answered_call_answers_its_waiting_alias() {
        let mut l = Ledger::new();
        l.apply(1, &call("a")).unwrap();
        assert_eq!(l.answered_id("a"), None, "still waiting: it answers itself");
        l.apply(2, &result("a", "bash")).unwrap();
        assert_eq!(l.answered_id("a"), None, "no alias");
        l.apply(3, &call("a_r2")).unwrap();
        assert_eq!(l.answered_id("a").as_deref(), Some("a_r2"));
        l.apply(4, &result("a_r2", "bash")).unwrap();
        l.apply(5, &call("a_r3")).unwrap();
        assert_eq!(l.answered_id("a").as_deref(), Some("a_r3"));
        assert_eq!(l.answered_id("b"), None);
    }

    #[test]
    fn pairs_calls_and_results() {
        let mut l = Ledger::new();
        l.apply(1, &call("a")).unwrap();
        assert_eq!(l.pending(), vec!["a"]);
        l.apply(2, &result("a", "bash")).unwrap();
        assert!(l.pending().is_empty());
    }

    #[test]
    fn rejects_unknown_duplicate_stale_and_mismatched() {
        let mut l = Ledger::new();
        assert!(matches!(
            l.apply(1, &result("x", "bash")),
            Err(LogError::UnknownCall { .. })
        ));
        l.apply(1, &call("a")).unwrap();
        assert!(matches!(
            l.apply(2, &call("a")),
            Err(LogError::DuplicateCall { first_seq: 1, .. })
        ));
        assert!(matches!(
            l.apply(2, &result("a", "python")),
            Err(LogError::ToolNameMismatch { .. })
        ));
        l.apply(2, &result("a", "bash")).unwrap();
        assert!(matches!(
            l.apply(3, &result("a", "bash")),
            Err(LogError::AlreadyResolved {
                resolved_seq: 2,
                ..
            })
        ));
    }
}
