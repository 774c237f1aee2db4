//! Reduction as a log grows: the calls seen so far and the step numbering, so each tool result
//! is reduced with its call the moment it arrives.

use std::collections::HashMap;

use crate::event::{Event, EventBody, Seq, ToolCall, ToolOutput};
use crate::stats::ContentStats;

use super::{ReduceConfig, Reduction, ResultInput, StepContext};

/// Derives the steps of one session event by event (DESIGN.md: reduction at ingest).
///
/// Feed it every event in seq order; it remembers each call with the seq of its assistant event
/// until its result arrives, and numbers steps in the order their results arrive, so the numbers (and the aliases built
/// from them) are the same on every run. [`Ingest::push`] reduces a result at once;
/// [`Ingest::next`] hands back the arrived result, for callers that must load its bytes first
/// or may skip it (the store's offloader).
#[derive(Debug, Default, Clone)]
pub struct Ingest {
    calls: HashMap<String, (ToolCall, Seq)>,
    steps: u32,
}

/// A tool result that has just arrived, with its call and its step number.
#[derive(Debug, Clone)]
pub struct Arrived<'a> {
    event: &'a Event,
    call_id: &'a str,
    tool_name: &'a str,
    is_error: bool,
    call: Option<(ToolCall, Seq)>,
    number: u32,
}

impl Arrived<'_> {
    /// The call id the result answers.
    pub fn call_id(&self) -> &str {
        self.call_id
    }

    /// Reduces the result from its original bytes and their stats.
    pub fn reduce(&self, config: &ReduceConfig, content: &[u8], stats: &ContentStats) -> Reduction {
        config.reduce(
            &ResultInput {
                call: self.call.as_ref().map(|(c, _)| c),
                call_id: self.call_id,
                tool_name: self.tool_name,
                content,
                is_error: self.is_error,
                stats,
            },
            &StepContext {
                number: self.number,
                call_seq: self.call.as_ref().map_or(0, |(_, seq)| *seq),
                result_seq: self.event.seq,
                timestamp_ms: self.event.ts_ms,
            },
        )
    }
}

impl Ingest {
    /// Nothing seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next event: remembers an assistant's calls, and for a tool result returns it
    /// with its call and the next step number.
    pub fn next<'a>(&mut self, event: &'a Event) -> Option<Arrived<'a>> {
        match &event.body {
            EventBody::Assistant { tool_calls, .. } => {
                for c in tool_calls {
                    self.calls.insert(c.id.clone(), (c.clone(), event.seq));
                }
                None
            }
            EventBody::ToolResult {
                call_id,
                tool_name,
                is_error,
                ..
            } => {
                self.steps = self.steps.saturating_add(1);
                Some(Arrived {
                    event,
                    call_id,
                    tool_name,
                    is_error: *is_error,
                    // A call has one result (the ledger says so): it is not needed after.
                    call: self.calls.remove(call_id.as_str()),
                    number: self.steps,
                })
            }
            _ => None,
        }
    }

    /// Takes the next event and reduces it if it is a tool result: from `original` when given
    /// (the bytes behind a blob reference), else from the event's inline text, with the
    /// event's stats. A result whose bytes are neither (an offloaded output the caller did not
    /// load, or inline parts) is counted but not reduced.
    pub fn push(
        &mut self,
        config: &ReduceConfig,
        event: &Event,
        original: Option<&[u8]>,
    ) -> Option<Reduction> {
        let EventBody::ToolResult { content, stats, .. } = &event.body else {
            self.next(event);
            return None;
        };
        let arrived = self.next(event)?;
        let bytes = match (original, content) {
            (Some(bytes), _) => bytes,
            (None, ToolOutput::Text(text)) => text.as_bytes(),
            (None, _) => return None,
        };
        Some(arrived.reduce(config, bytes, stats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: Seq, body: EventBody) -> Event {
        Event {
            seq,
            ts_ms: seq as i64,
            body,
        }
    }

    #[test]
    fn results_are_reduced_with_their_calls_and_numbered_in_arrival_order() {
        let config = ReduceConfig::default();
        let mut ingest = Ingest::new();
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: format!("{{\"command\":\"./run {id}\"}}"),
        };
        let result = |id: &str, text: &str| EventBody::ToolResult {
            call_id: id.into(),
            tool_name: "bash".into(),
            stats: ContentStats::of(text.as_bytes()),
            content: ToolOutput::Text(text.into()),
            is_error: false,
        };
        let assistant = event(
            1,
            EventBody::Assistant {
                content: None,
                reasoning: None,
                tool_calls: vec![call("a"), call("b")],
                name: None,
                native: None,
            },
        );
        assert!(ingest.push(&config, &assistant, None).is_none());
        let b = ingest
            .push(&config, &event(2, result("b", "two")), None)
            .unwrap();
        let a = ingest
            .push(&config, &event(3, result("a", "one")), Some(b"uno"))
            .unwrap();
        assert_eq!(
            (b.step.id.as_str(), a.step.id.as_str()),
            ("step_001", "step_002")
        );
        assert_eq!(b.step.minimal_args["command"], "./run b");
        assert!(a.step.observation.contains("uno"), "{}", a.step.observation);
    }
}
