//! The projection: the log regrouped into units the pipeline can reduce without breaking pairs.
//!
//! A [`Turn`] holds each tool call together with its result ([`Paired`]), so no reducer can drop
//! one half of a pair: an orphaned call or result cannot be represented. Units are whole: the
//! sliding window and step compaction cut between units, never inside one.

use std::collections::HashMap;

use crate::event::{
    AgentId, Event, EventBody, MessageContent, NativeReasoning, Seq, ToolCall, ToolOutput,
};
use crate::stats::ContentStats;

/// One result as the log holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultView {
    /// Seq of the tool result event.
    pub seq: Seq,
    /// The output (a blob output is rendered from its step unless the caller hydrated it).
    pub output: ToolOutput,
    /// Whether the tool reported an error.
    pub is_error: bool,
    /// Stats of the original output.
    pub stats: ContentStats,
}

/// A call and, when it arrived, its result.
#[derive(Debug, Clone, PartialEq)]
pub struct Paired {
    /// The call.
    pub call: ToolCall,
    /// Its result; `None` while pending (rendered as an explicit "no result" stub).
    pub result: Option<ResultView>,
}

/// An assistant event with its calls and their results.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// Visible text.
    pub content: Option<MessageContent>,
    /// Reasoning text.
    pub reasoning: Option<String>,
    /// Participant name.
    pub name: Option<String>,
    /// Reasoning as the provider sent it, replayed only to that provider's API.
    pub native: Option<NativeReasoning>,
    /// Calls with their results, in call order.
    pub calls: Vec<Paired>,
}

/// What a unit holds.
#[derive(Debug, Clone, PartialEq)]
pub enum UnitBody {
    /// A system event.
    System(MessageContent),
    /// Pinned content.
    Pin {
        /// Its label.
        label: Option<String>,
        /// Its text.
        content: String,
    },
    /// A user message.
    User {
        /// Content.
        content: MessageContent,
        /// Participant name.
        name: Option<String>,
    },
    /// A direct message, spawn or agent result, rendered as a user-side note.
    Note(String),
    /// An assistant turn.
    Turn(Turn),
}

/// A whole unit of the conversation, starting at `seq`.
#[derive(Debug, Clone, PartialEq)]
pub struct Unit {
    /// Seq of the event that opened the unit.
    pub seq: Seq,
    /// What it holds.
    pub body: UnitBody,
}

impl Unit {
    /// Whether this unit is an assistant turn.
    pub fn is_turn(&self) -> bool {
        matches!(self.body, UnitBody::Turn(_))
    }
}

/// The log as units, plus what the reducers need to know about it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Projection {
    /// Units in log order.
    pub units: Vec<Unit>,
    /// Index of the first user unit: the task statement, never dropped.
    pub first_user: Option<usize>,
    /// Result seqs that could not be paired (their call lies outside the view); not rendered.
    pub unpaired: Vec<Seq>,
    /// Direct-message seqs left out because they target another agent or have expired, and
    /// repeats of no message.
    pub filtered: Vec<Seq>,
    /// Seqs a client replaced when it rewrote its conversation, with the rewrites' own records:
    /// left out as the client left them out.
    pub replaced: Vec<Seq>,
    /// Indices of the units that stay in place even before the boundary (system prompts, pins
    /// and the task statement), in order.
    kept: Vec<usize>,
    /// Units that received a result after a later unit had opened, in arrival order: what the
    /// compact block says of a folded unit changes when one arrives.
    late: Vec<usize>,
    calls: HashMap<String, (usize, usize)>,
    /// Harness messages kept before the task was found.
    opening_notes: usize,
    /// Where each paired result is: its unit and call.
    results: HashMap<Seq, (usize, usize)>,
    /// The messages a rewrite left out, by seq, for a [`EventBody::Repeat`] of one.
    moved_out: HashMap<Seq, UnitBody>,
}

/// Whether a unit may stand for a [`EventBody::Repeat`]: a message that called no tool.
fn repeatable(body: &UnitBody) -> bool {
    match body {
        UnitBody::System(_) | UnitBody::User { .. } => true,
        UnitBody::Turn(turn) => turn.calls.is_empty(),
        _ => false,
    }
}

/// Harness messages before the task kept in place at most.
const MAX_OPENING_NOTES: usize = 16;

/// Whether a user message states something of the user's own: not only harness context a client
/// wraps in one tag (`<environment_context>…</environment_context>`, `<system-reminder>…`) or
/// parts Loom does not model.
pub(crate) fn is_task(content: &MessageContent) -> bool {
    match content {
        MessageContent::Text(text) => !is_harness_text(text),
        MessageContent::Parts(parts) => parts.iter().any(|p| match p {
            crate::event::ContentPart::Text { text } => !is_harness_text(text),
            crate::event::ContentPart::Image { .. } => true,
            crate::event::ContentPart::Opaque { .. } => false,
        }),
    }
}

/// Text that is empty or one element of markup a client adds around its own context.
fn is_harness_text(text: &str) -> bool {
    let t = text.trim();
    if t.is_empty() {
        return true;
    }
    let Some(rest) = t.strip_prefix('<') else {
        return false;
    };
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    !name.is_empty() && t.ends_with(&format!("</{name}>"))
}

/// Who the projection is for and when, which decides the direct messages it includes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audience {
    /// The agent whose request this is; messages to other targets are left out.
    pub agent: Option<AgentId>,
    /// The render's clock, UTC milliseconds (for TTL expiry). An input, so renders replay.
    pub now_ms: i64,
}

impl Projection {
    /// Projects a whole log.
    pub fn build<'a>(events: impl IntoIterator<Item = &'a Event>, audience: &Audience) -> Self {
        let mut p = Self::default();
        for e in events {
            p.push(e, audience);
        }
        p
    }

    /// Adds the next event of the log.
    pub fn push(&mut self, event: &Event, audience: &Audience) {
        let seq = event.seq;
        let index = self.units.len();
        let body = match &event.body {
            EventBody::System { content } => UnitBody::System(content.clone()),
            EventBody::Pin { label, content } => UnitBody::Pin {
                label: label.clone(),
                content: content.clone(),
            },
            EventBody::User { content, name } => {
                self.opening(index, content);
                UnitBody::User {
                    content: content.clone(),
                    name: name.clone(),
                }
            }
            EventBody::Assistant {
                content,
                reasoning,
                tool_calls,
                name,
                native,
            } => {
                for (i, call) in tool_calls.iter().enumerate() {
                    self.calls.insert(call.id.clone(), (index, i));
                }
                UnitBody::Turn(Turn {
                    content: content.clone(),
                    reasoning: reasoning.clone(),
                    name: name.clone(),
                    native: native.clone(),
                    calls: tool_calls
                        .iter()
                        .map(|call| Paired {
                            call: call.clone(),
                            result: None,
                        })
                        .collect(),
                })
            }
            EventBody::ToolResult {
                call_id,
                content,
                is_error,
                stats,
                ..
            } => {
                let slot = self.calls.get(call_id).copied();
                let paired = slot.and_then(|(u, c)| match &mut self.units[u].body {
                    UnitBody::Turn(turn) => turn.calls.get_mut(c),
                    _ => None,
                });
                match paired {
                    Some(paired) if paired.result.is_none() => {
                        if let Some(at) = slot {
                            self.results.insert(seq, at);
                        }
                        paired.result = Some(ResultView {
                            seq,
                            output: content.clone(),
                            is_error: *is_error,
                            stats: stats.clone(),
                        });
                        if let Some((u, _)) = slot.filter(|&(u, _)| u + 1 < self.units.len()) {
                            self.late.push(u);
                        }
                    }
                    _ => self.unpaired.push(seq),
                }
                return;
            }
            EventBody::DirectMessage {
                source,
                target,
                content,
                priority,
                ttl_seconds,
                ..
            } => {
                let for_us = match &audience.agent {
                    None => true,
                    Some(agent) => target == agent.as_str() || target == "*",
                };
                let expired = ttl_seconds.is_some_and(|ttl| {
                    let ttl_ms = i64::try_from(ttl).unwrap_or(i64::MAX).saturating_mul(1000);
                    event.ts_ms.saturating_add(ttl_ms) <= audience.now_ms
                });
                if !for_us || expired {
                    self.filtered.push(seq);
                    return;
                }
                UnitBody::Note(format!(
                    "[direct message from {source} to {target}, priority {priority}]\n{content}"
                ))
            }
            EventBody::Spawn {
                child, agent, goal, ..
            } => UnitBody::Note(format!(
                "[spawned agent {agent} in session {child} with goal]\n{goal}"
            )),
            EventBody::AgentResult {
                child,
                agent,
                result,
                success,
            } => {
                let outcome = if *success { "succeeded" } else { "failed" };
                UnitBody::Note(format!(
                    "[agent {agent} (session {child}) {outcome} and returned]\n{result}"
                ))
            }
            EventBody::Rewrite { replaced, .. } => {
                self.rewrite(seq, replaced);
                return;
            }
            // The model saw the hidden events as they stand; the record is for the client's side.
            EventBody::Hidden { .. } => {
                self.filtered.push(seq);
                return;
            }
            EventBody::Repeat { of } => match self.said(*of) {
                Some(UnitBody::User { content, name }) => {
                    self.opening(index, &content);
                    UnitBody::User { content, name }
                }
                Some(body) => body,
                // Nothing to repeat (a seq that is no message): it stands for nothing.
                None => {
                    self.filtered.push(seq);
                    return;
                }
            },
        };
        if matches!(body, UnitBody::System(_) | UnitBody::Pin { .. }) {
            self.kept.push(index);
        }
        self.units.push(Unit { seq, body });
    }

    /// Takes note of a user message at unit `index` while the task is not found yet: the first
    /// that states something of the user's own is the task; harness context a client sends
    /// before it (`<environment_context>`, a reminder, an item Loom does not model) stays with
    /// the opening too, so the task is what it is about (a bounded number of them).
    fn opening(&mut self, index: usize, content: &MessageContent) {
        if self.first_user.is_some() {
            return;
        }
        if is_task(content) {
            self.first_user = Some(index);
            self.kept.push(index);
        } else if self.opening_notes < MAX_OPENING_NOTES {
            self.opening_notes += 1;
            self.kept.push(index);
        }
    }

    /// The message at `seq` as a unit, for a [`EventBody::Repeat`] of it: in place, or left out
    /// by a rewrite (which is where a client's rebuilt context comes from).
    fn said(&self, seq: Seq) -> Option<UnitBody> {
        if let Some(body) = self.moved_out.get(&seq) {
            return Some(body.clone());
        }
        let unit = self
            .units
            .get(self.first_at(seq))
            .filter(|u| u.seq == seq)?;
        repeatable(&unit.body).then(|| unit.body.clone())
    }

    /// Leaves out what the client replaced (an [`EventBody::Rewrite`] at `seq`), as if it had
    /// never been pushed: the units and results in `replaced` go, with the record itself, to
    /// `self.replaced`, and the indices are rebuilt from what stays.
    fn rewrite(&mut self, seq: Seq, replaced: &[[Seq; 2]]) {
        let gone = |s: Seq| replaced.iter().any(|[from, to]| *from <= s && s <= *to);
        let mut left_out = vec![seq];
        for unit in &mut self.units {
            if let UnitBody::Turn(turn) = &mut unit.body {
                let whole = gone(unit.seq);
                for call in &mut turn.calls {
                    if let Some(r) = call.result.as_ref().filter(|r| whole || gone(r.seq)) {
                        left_out.push(r.seq);
                        call.result = None;
                    }
                }
            }
        }
        let moved_out = &mut self.moved_out;
        self.units.retain(|u| {
            let keep = !gone(u.seq);
            if !keep {
                left_out.push(u.seq);
                // A client that rebuilds context every turn sends it again as it was.
                if repeatable(&u.body) {
                    moved_out.insert(u.seq, u.body.clone());
                }
            }
            keep
        });
        self.filtered.retain(|&s| {
            let keep = !gone(s);
            if !keep {
                left_out.push(s);
            }
            keep
        });
        self.unpaired.retain(|&s| {
            let keep = !gone(s);
            if !keep {
                left_out.push(s);
            }
            keep
        });
        self.replaced.extend(left_out);
        self.replaced.sort_unstable();
        self.replaced.dedup();
        self.reindex();
    }

    /// Rebuilds every index from the units, as pushing them one by one would have.
    fn reindex(&mut self) {
        self.first_user = None;
        self.kept.clear();
        self.opening_notes = 0;
        self.calls.clear();
        self.results.clear();
        let mut late: Vec<(Seq, usize)> = Vec::new();
        let units = std::mem::take(&mut self.units);
        for (index, unit) in units.iter().enumerate() {
            match &unit.body {
                UnitBody::System(_) | UnitBody::Pin { .. } => self.kept.push(index),
                UnitBody::User { content, .. } => self.opening(index, content),
                UnitBody::Turn(turn) => {
                    let next = units.get(index + 1).map(|u| u.seq);
                    for (c, call) in turn.calls.iter().enumerate() {
                        self.calls.insert(call.call.id.clone(), (index, c));
                        if let Some(r) = &call.result {
                            self.results.insert(r.seq, (index, c));
                            if next.is_some_and(|n| r.seq > n) {
                                late.push((r.seq, index));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        self.units = units;
        late.sort_unstable();
        self.late = late.into_iter().map(|(_, u)| u).collect();
    }

    /// The paired result logged at `seq`.
    pub fn result_at(&self, seq: Seq) -> Option<&Paired> {
        let &(u, c) = self.results.get(&seq)?;
        match &self.units.get(u)?.body {
            UnitBody::Turn(turn) => turn.calls.get(c),
            _ => None,
        }
    }

    /// Whether unit `index` stays in place even before the boundary: a system prompt, a pin or
    /// the task statement.
    pub fn is_kept(&self, index: usize) -> bool {
        self.kept.binary_search(&index).is_ok()
    }

    /// Indices of the units kept in place that lie before unit `end`.
    pub fn kept_before(&self, end: usize) -> &[usize] {
        &self.kept[..self.kept.partition_point(|&i| i < end)]
    }

    /// How many results arrived late (after a later unit opened) for units before unit `end`.
    pub fn late_before(&self, end: usize) -> usize {
        self.late.iter().filter(|&&u| u < end).count()
    }

    /// Index of the first unit opened at or after `seq` (`units.len()` when none is).
    pub fn first_at(&self, seq: Seq) -> usize {
        self.units.partition_point(|u| u.seq < seq)
    }

    /// Index of the first unit of the last `n` assistant turns (`units.len()` when `n` is 0).
    pub fn recent_turns_start(&self, n: u32) -> usize {
        if n == 0 {
            return self.units.len();
        }
        let mut seen = 0;
        for (i, unit) in self.units.iter().enumerate().rev() {
            if unit.is_turn() {
                seen += 1;
                if seen == n {
                    return i;
                }
            }
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: Seq, body: EventBody) -> Event {
        Event {
            seq,
            ts_ms: 1_000,
            body,
        }
    }

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: "{}".into(),
        }
    }

    fn result(id: &str) -> EventBody {
        EventBody::ToolResult {
            call_id: id.into(),
            tool_name: "bash".into(),
            content: ToolOutput::Text("out".into()),
            is_error: false,
            stats: ContentStats::of(b"out"),
        }
    }

    fn user(text: &str) -> EventBody {
        EventBody::User {
            content: text.into(),
            name: None,
        }
    }

    fn turn(calls: &[&str]) -> EventBody {
        EventBody::Assistant {
            content: None,
            reasoning: None,
            tool_calls: calls.iter().map(|c| call(c)).collect(),
            name: None,
            native: None,
        }
    }

    #[test]
    fn a_repeat_stands_for_the_message_it_repeats_in_its_new_place() {
        let rewrite = |replaced: Vec<[Seq; 2]>| EventBody::Rewrite {
            replaced,
            compaction: false,
        };
        let events = vec![
            ev(1, user("the task")),
            ev(2, user("files v1")),
            ev(3, turn(&["a"])),
            ev(4, result("a")),
            ev(5, rewrite(vec![[2, 2]])),
            ev(6, EventBody::Repeat { of: 2 }),
            ev(7, turn(&["b"])),
            ev(8, result("b")),
            ev(9, rewrite(vec![[6, 6]])),
            // Repeated again after a rewrite that left out the earlier repeat.
            ev(10, EventBody::Repeat { of: 2 }),
            // A turn with calls is never repeated; neither is a seq that holds no message.
            ev(11, EventBody::Repeat { of: 3 }),
            ev(12, EventBody::Repeat { of: 99 }),
        ];
        let audience = Audience {
            agent: None,
            now_ms: 0,
        };
        let p = Projection::build(&events, &audience);
        let seqs: Vec<Seq> = p.units.iter().map(|u| u.seq).collect();
        assert_eq!(seqs, vec![1, 3, 7, 10]);
        let last = p.units.last().unwrap();
        assert!(
            matches!(&last.body, UnitBody::User { content, .. } if content.text() == "files v1"),
            "{last:?}"
        );
        assert_eq!(p.filtered, vec![11, 12]);
        assert_eq!(p.first_user, Some(0), "the task stays the task");
        // Pushed one by one, as a live session does, it is the same projection.
        let mut live = Projection::default();
        for e in &events {
            live.push(e, &audience);
        }
        assert_eq!(live, p);
        // The conversation view reads the repeat as its message, in its place.
        let view = crate::event::conversation(&events);
        let said: Vec<(Seq, Seq)> = view.iter().map(|s| (s.seq, s.origin)).collect();
        assert_eq!(said, vec![(1, 1), (3, 3), (4, 4), (7, 7), (8, 8), (10, 2)]);
    }

    #[test]
    fn a_rewrite_leaves_out_what_the_client_replaced_as_if_never_pushed() {
        let events = vec![
            ev(
                1,
                EventBody::System {
                    content: "sys".into(),
                },
            ),
            ev(2, user("<environment_context>cwd</environment_context>")),
            ev(3, user("files v1")),
            ev(4, turn(&["a"])),
            ev(5, result("a")),
            ev(6, user("the task")),
            ev(7, turn(&["b"])),
            ev(8, result("b")),
            ev(
                9,
                EventBody::Rewrite {
                    replaced: vec![[3, 5]],
                    compaction: false,
                },
            ),
            ev(10, user("files v2")),
            ev(11, turn(&["a"])),
            ev(12, result("a")),
        ];
        let audience = Audience {
            agent: None,
            now_ms: 0,
        };
        let p = Projection::build(&events, &audience);
        let kept: Vec<Seq> = events
            .iter()
            .filter(|e| ![3, 4, 5, 9].contains(&e.seq))
            .cloned()
            .collect::<Vec<_>>()
            .iter()
            .map(|e| e.seq)
            .collect();
        let without: Vec<Event> = events
            .iter()
            .filter(|e| kept.contains(&e.seq))
            .cloned()
            .collect();
        let direct = Projection::build(&without, &audience);
        assert_eq!(p.units, direct.units);
        assert_eq!(p.replaced, vec![3, 4, 5, 9]);
        assert_eq!(p.first_user, direct.first_user);
        assert_eq!(p.kept, direct.kept);
        // The call `a` made again after the rewrite pairs with its new result.
        assert!(p.result_at(12).is_some());
        assert!(p.result_at(5).is_none());
        // The harness message before the task stays with the opening; the task is the task.
        assert_eq!(p.units[p.first_user.unwrap()].seq, 6);
        assert!(p.is_kept(1));
    }

    #[test]
    fn results_nest_in_their_turn_even_when_out_of_order() {
        let events = vec![
            ev(
                1,
                EventBody::User {
                    content: "go".into(),
                    name: None,
                },
            ),
            ev(
                2,
                EventBody::Assistant {
                    content: None,
                    reasoning: None,
                    tool_calls: vec![call("a"), call("b")],
                    name: None,
                    native: None,
                },
            ),
            ev(3, result("b")),
            ev(4, result("a")),
            ev(5, result("zzz")),
        ];
        let audience = Audience {
            agent: None,
            now_ms: 0,
        };
        let p = Projection::build(&events, &audience);
        assert_eq!(p.units.len(), 2);
        let UnitBody::Turn(turn) = &p.units[1].body else {
            panic!("expected a turn")
        };
        assert_eq!(turn.calls[0].result.as_ref().unwrap().seq, 4);
        assert_eq!(turn.calls[1].result.as_ref().unwrap().seq, 3);
        assert_eq!(p.unpaired, vec![5]);
        assert_eq!(p.first_user, Some(0));
    }

    #[test]
    fn direct_messages_filter_by_target_and_ttl() {
        let dm = |target: &str, ttl: Option<u64>| EventBody::DirectMessage {
            source: "boss".into(),
            target: target.into(),
            content: "hi".into(),
            priority: 0.5,
            ttl_seconds: ttl,
            parent_task_id: None,
            metadata: Default::default(),
        };
        let events = vec![
            ev(1, dm("me", None)),
            ev(2, dm("other", None)),
            ev(3, dm("me", Some(1))),
            ev(4, dm("me", Some(100))),
        ];
        let audience = Audience {
            agent: Some(AgentId::new("me").unwrap()),
            now_ms: 1_000 + 2_000,
        };
        let p = Projection::build(&events, &audience);
        assert_eq!(
            p.units.iter().map(|u| u.seq).collect::<Vec<_>>(),
            vec![1, 4]
        );
        assert_eq!(p.filtered, vec![2, 3]);
    }
}
