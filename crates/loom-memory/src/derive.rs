//! Memory items derived from a session's log, deterministically and without a model: one per
//! user turn, per assistant turn with visible text, per reduced tool result (its step's
//! observation) and per summary, each with its provenance and the event's time.

use loom_core::{AgentId, Event, EventBody, SessionId, Step};
use loom_store::{StepRecord, Summary};

use crate::item::{ItemKind, NewItem, Provenance, Tier};

/// The items of one session's log, in seq order (summaries after the events they cover).
///
/// Events without text worth remembering (system prompts, tool calls alone, empty turns) give
/// none; tool results are remembered through their steps, never through their raw output, so a
/// 10 MB log file becomes one line. A step whose body is not a step is skipped, since the step
/// store is derived and can be rebuilt.
pub fn derive(
    agent: &AgentId,
    session: &SessionId,
    events: &[Event],
    steps: &[StepRecord],
    summaries: &[Summary],
) -> Vec<NewItem> {
    let item = |tier, kind, text: String, from_seq, to_seq, ts_ms| NewItem {
        agent: agent.clone(),
        tier,
        kind,
        text,
        source: Provenance {
            session: session.clone(),
            from_seq,
            to_seq,
            ts_ms,
        },
    };
    let mut out = Vec::new();
    for event in events {
        let (kind, text) = match &event.body {
            EventBody::User { content, .. } => (ItemKind::User, content.text()),
            EventBody::Assistant {
                content: Some(content),
                ..
            } => (ItemKind::Assistant, content.text()),
            _ => continue,
        };
        if text.trim().is_empty() {
            continue;
        }
        let text = text.trim().to_owned();
        out.push(item(
            Tier::L4,
            kind,
            text,
            event.seq,
            event.seq,
            event.ts_ms,
        ));
    }
    for record in steps {
        let Ok(step) = serde_json::from_value::<Step>(record.body.clone()) else {
            continue;
        };
        if step.observation.trim().is_empty() {
            continue;
        }
        out.push(item(
            Tier::L4,
            ItemKind::Observation,
            step.observation.trim().to_owned(),
            step.result_seq,
            step.result_seq,
            step.timestamp_ms,
        ));
    }
    for summary in summaries {
        let s = &summary.summary;
        if s.content.trim().is_empty() {
            continue;
        }
        out.push(item(
            Tier::L3,
            ItemKind::Summary,
            s.content.trim().to_owned(),
            s.from_seq,
            s.to_seq,
            s.created_ms,
        ));
    }
    out.sort_by_key(|i| (i.source.to_seq, i.source.from_seq));
    out
}
