//! Reduction as a log grows: the calls seen so far and the step numbering, so each tool result
//! is reduced with its call the moment it arrives.

use std::collections::HashMap;

use crate::event::{Event, EventBody, Seq, ToolCall, ToolOutput};

use super::{ReduceConfig, Reduction, ResultInput, StepContext};

/// Derives the steps of one session event by event (DESIGN.md: reduction at ingest).
///
/// Feed it every event in seq order with [`Ingest::push`]; it remembers each call with the seq
/// of its assistant event and numbers steps in the order their results arrive, as the store's
/// offloader does.
#[derive(Debug, Default, Clone)]
pub struct Ingest {
    calls: HashMap<String, (ToolCall, Seq)>,
    steps: u32,
}

impl Ingest {
    /// Nothing seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next event. For a tool result, returns its reduction: from `original` when
    /// given (the bytes behind a blob reference), else from the event's inline text; a result
    /// whose bytes are neither (an offloaded output the caller did not load, or inline parts)
    /// is counted but not reduced.
    pub fn push(
        &mut self,
        config: &ReduceConfig,
        event: &Event,
        original: Option<&[u8]>,
    ) -> Option<Reduction> {
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
                content,
                is_error,
                stats,
            } => {
                self.steps = self.steps.saturating_add(1);
                let bytes = match (original, content) {
                    (Some(bytes), _) => bytes,
                    (None, ToolOutput::Text(text)) => text.as_bytes(),
                    (None, _) => return None,
                };
                let call = self.calls.get(call_id);
                Some(config.reduce(
                    &ResultInput {
                        call: call.map(|(c, _)| c),
                        call_id,
                        tool_name,
                        content: bytes,
                        is_error: *is_error,
                        stats,
                    },
                    &StepContext {
                        number: self.steps,
                        call_seq: call.map_or(0, |(_, seq)| *seq),
                        result_seq: event.seq,
                        timestamp_ms: event.ts_ms,
                    },
                ))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::ContentStats;

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
