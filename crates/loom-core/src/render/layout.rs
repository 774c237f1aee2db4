//! Layout: units and the compaction decision in, neutral messages out.
//!
//! Order (DESIGN.md, Layout): kept units before the boundary (system prompt, pins, the task
//! statement) → the compact block (summary, then one line per folded step, or per group of
//! consecutive steps of one category with `group_steps`) → the verbatim tail →
//! per-turn injected content at the very end. Everything before the tail is the stable prefix.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;

use super::projection::{Paired, Projection, Unit, UnitBody};
use super::refs::{Locator, RecallRefs};
use super::request::{Msg, RenderedCall, ResultForm};
use super::state::CompactionState;
use crate::event::{MessageContent, NativeReasoning, Seq, ToolOutput};
use crate::step::{Category, Step, ToolKind};

/// Header of the compact block.
pub const COMPACT_HEADER: &str =
    "Earlier steps, compacted (each original is recoverable by its reference):";

/// A summary as the pipeline reads it (the store's record, without storage fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryView {
    /// Version, increasing per session.
    pub version: u32,
    /// Last seq covered; the summary covers `[1, to_seq]`.
    pub to_seq: Seq,
    /// The text.
    pub content: String,
}

/// Steps by call id, as derived at ingest.
pub type StepIndex = HashMap<String, Step>;

/// The form a paired result takes under `state`.
pub(crate) fn form_of(paired: &Paired, state: &CompactionState) -> ResultForm {
    match &paired.result {
        None => ResultForm::Missing,
        // A last resort may stub a result an earlier point elided: the later cut stands.
        Some(r) if state.stubbed.contains(&r.seq) => ResultForm::Stubbed,
        Some(r) if state.elided.contains(&r.seq) => ResultForm::Elided,
        // A diff only while the page it is against is still sent whole; when a compaction has
        // taken that page, the page is sent whole until the next render picks a new base.
        Some(r)
            if state
                .diffed
                .get(&r.seq)
                .is_some_and(|&b| sent_whole(state, b)) =>
        {
            ResultForm::Diff
        }
        // A blob output is not in the log view's memory: its step stands in for it.
        Some(r) if matches!(r.output, ToolOutput::Blob(_)) => ResultForm::Stubbed,
        Some(_) => ResultForm::Verbatim,
    }
}

/// Whether the result at `seq` is sent in place and whole under `state`.
pub(crate) fn sent_whole(state: &CompactionState, seq: Seq) -> bool {
    seq >= state.boundary
        && !state.stubbed.contains(&seq)
        && !state.elided.contains(&seq)
        && !state.diffed.contains_key(&seq)
}

impl Paired {
    /// Where the original of the result can be recovered: the step's `outcome_ref`, or its log
    /// seq when the output was not offloaded (the log itself holds it).
    pub fn reference(&self, step: Option<&Step>) -> String {
        match self.locator(step) {
            Some(at) => RecallRefs::See.name(at),
            None => "none".to_owned(),
        }
    }

    /// [`Paired::reference`] as a [`Locator`]; `None` for a call without a result.
    pub fn locator<'s>(&'s self, step: Option<&'s Step>) -> Option<Locator<'s>> {
        match (step.and_then(|s| s.outcome_ref.as_deref()), &self.result) {
            (Some(r), _) => Some(Locator::Output(r)),
            (None, Some(r)) => Some(Locator::Seq(r.seq)),
            (None, None) => None,
        }
    }

    /// The reference as `refs` writes it.
    fn named(&self, step: Option<&Step>, refs: &RecallRefs) -> String {
        match self.locator(step) {
            Some(at) => refs.name(at),
            None => "none".to_owned(),
        }
    }

    /// The one-line observation of the result: the step's, or one computed from the stats.
    pub fn observation(&self, step: Option<&Step>) -> String {
        if let Some(step) = step {
            return step.observation.clone();
        }
        match &self.result {
            Some(r) => format!(
                "{} returned {} bytes, {} lines of {}{}",
                self.call.name,
                r.stats.bytes,
                r.stats.lines,
                r.stats.content_type.as_str(),
                if r.is_error { " (error)" } else { "" }
            ),
            None => format!("{} has no result", self.call.name),
        }
    }
}

/// What rendering a result's text needs besides the result: the projection and the decision
/// (a page diff reads the page it is against), the steps, and the elision's sizes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Texts<'a> {
    pub(crate) proj: &'a Projection,
    pub(crate) state: &'a CompactionState,
    pub(crate) steps: &'a StepIndex,
    pub(crate) head_chars: usize,
    pub(crate) tail_chars: usize,
    pub(crate) refs: &'a RecallRefs,
}

/// The text a result is rendered as.
pub(crate) fn result_content(paired: &Paired, form: ResultForm, t: &Texts<'_>) -> MessageContent {
    let (steps, head_chars, tail_chars) = (t.steps, t.head_chars, t.tail_chars);
    let step = steps.get(&paired.call.id);
    match (form, &paired.result) {
        (ResultForm::Diff, Some(r)) => match page_diff_of(paired, r.seq, t) {
            Some(diff) => MessageContent::Text(diff),
            None => result_content(paired, ResultForm::Verbatim, t),
        },
        (ResultForm::Verbatim, Some(r)) => match &r.output {
            ToolOutput::Text(s) => MessageContent::Text(s.clone()),
            ToolOutput::Parts(parts) => MessageContent::Parts(parts.clone()),
            ToolOutput::Blob(_) => stub(paired, step, t.refs),
        },
        (ResultForm::Elided, Some(r)) => match &r.output {
            ToolOutput::Text(s) => {
                let (head, tail) = t.state.elision(r.seq, head_chars, tail_chars);
                MessageContent::Text(elide(s, head, tail, &paired.named(step, t.refs)))
            }
            _ => stub(paired, step, t.refs),
        },
        (ResultForm::Missing, _) | (_, None) => {
            MessageContent::Text("[no result was recorded for this call]".to_owned())
        }
        (ResultForm::Stubbed, Some(_)) => stub(paired, step, t.refs),
    }
}

/// The page `seq` as its diff against the page the decision names for it.
fn page_diff_of(paired: &Paired, seq: Seq, t: &Texts<'_>) -> Option<String> {
    let base_seq = *t.state.diffed.get(&seq)?;
    let base = t.proj.result_at(base_seq)?.result.as_ref()?;
    let page = paired.result.as_ref()?;
    let step = t.steps.get(&paired.call.id);
    match (&base.output, &page.output) {
        (ToolOutput::Text(base), ToolOutput::Text(page)) => super::diff::diff(
            super::diff::DiffOf::of(step),
            base,
            page,
            base_seq,
            &paired.named(step, t.refs),
        ),
        _ => None,
    }
}

fn stub(paired: &Paired, step: Option<&Step>, refs: &RecallRefs) -> MessageContent {
    let observation = paired.observation(step);
    let names = match (step, &paired.result) {
        (Some(s), Some(r)) if s.kind == ToolKind::ReadFile && s.success => match &r.output {
            ToolOutput::Text(code) => view_names(&observation, code),
            _ => String::new(),
        },
        _ => String::new(),
    };
    let cite = match paired.locator(step) {
        Some(at) => refs.cite(at),
        None => "(See none)".to_owned(),
    };
    MessageContent::Text(format!("{observation}{names} {cite}"))
}

/// Most characters a stubbed file view spends on the names its observation had no room for.
const STUB_NAMES_CHARS: usize = 800;

/// `; names: a, b.c, d`: the names a file view defines and the qualified names it uses that its
/// one-line observation leaves out, as many whole names as fit [`STUB_NAMES_CHARS`]. A view is
/// what the agent edits from, often long after it was stubbed, and what it names then is what
/// the code defines and calls.
fn view_names(observation: &str, code: &str) -> String {
    let defined = crate::reduce::code_definitions(code);
    let used = crate::reduce::code_uses(code);
    let mut out = String::new();
    for name in defined.iter().chain(&used) {
        if observation.contains(name) || out.contains(name) {
            continue;
        }
        let sep = if out.is_empty() { "; names: " } else { ", " };
        if out.len() + sep.len() + name.len() > STUB_NAMES_CHARS {
            break;
        }
        out.push_str(sep);
        out.push_str(name);
    }
    out
}

/// Keeps `head` chars and `tail` chars of `text` around an elision marker naming the reference.
fn elide(text: &str, head: usize, tail: usize, reference: &str) -> String {
    let chars = text.chars().count();
    if chars <= head + tail {
        return text.to_owned();
    }
    let head_end = text.char_indices().nth(head).map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(chars - tail)
        .map_or(text.len(), |(i, _)| i);
    format!(
        "{}\n[... {} characters elided; full output: {reference} ...]\n{}",
        &text[..head_end],
        chars - head - tail,
        &text[tail_start..]
    )
}

/// The neutral message for a unit that is rendered in place.
pub(crate) fn unit_msg(unit: &Unit, t: &Texts<'_>) -> Msg {
    message(
        unit,
        t.state,
        t.head_chars,
        t.tail_chars,
        t.refs,
        |p, form| result_content(p, form, t),
    )
}

/// The message of a unit with every result's content empty: what a turn costs besides its
/// results (each format's cost is additive over result pieces).
pub(crate) fn head_msg(unit: &Unit, state: &CompactionState, refs: &RecallRefs) -> Msg {
    message(unit, state, 0, 0, refs, |_, _| {
        MessageContent::Text(String::new())
    })
}

fn message(
    unit: &Unit,
    state: &CompactionState,
    head_chars: usize,
    tail_chars: usize,
    refs: &RecallRefs,
    content: impl Fn(&Paired, ResultForm) -> MessageContent,
) -> Msg {
    match &unit.body {
        UnitBody::System(c) => Msg::System(c.clone()),
        UnitBody::Pin { label, content } => Msg::System(MessageContent::Text(match label {
            Some(l) => format!("[pinned: {l}]\n{content}"),
            None => format!("[pinned]\n{content}"),
        })),
        UnitBody::User { content, name } => Msg::User {
            content: match content {
                MessageContent::Text(text) if state.elided.contains(&unit.seq) => {
                    MessageContent::Text(elide(
                        text,
                        head_chars,
                        tail_chars,
                        &refs.name(Locator::Seq(unit.seq)),
                    ))
                }
                other => other.clone(),
            },
            name: name.clone(),
        },
        UnitBody::Note(text) => Msg::User {
            content: MessageContent::Text(text.clone()),
            name: None,
        },
        UnitBody::Turn(turn) => {
            let thinned = state.thinned.contains(&unit.seq) && !turn.calls.is_empty();
            Msg::Assistant {
                content: if thinned { None } else { turn.content.clone() },
                reasoning: turn.reasoning.clone(),
                name: turn.name.clone(),
                // A thinned turn is no longer the provider's turn as sent, and the providers accept
                // an earlier turn without its reasoning: the native items go with the text, but
                // for a Gemini call's signature, which goes with the call.
                native: if thinned {
                    turn.native.as_ref().and_then(NativeReasoning::calls_only)
                } else {
                    turn.native.clone()
                },
                calls: turn
                    .calls
                    .iter()
                    .map(|p| {
                        let form = form_of(p, state);
                        RenderedCall {
                            call: p.call.clone(),
                            content: content(p, form),
                            is_error: p.result.as_ref().is_some_and(|r| r.is_error),
                            form,
                        }
                    })
                    .collect(),
            }
        }
    }
}

/// Identity of a unit rendered in place: its seq, its text's form and the forms of its results
/// (equal keys render equal messages within a session).
pub(crate) fn unit_key(unit: &Unit, state: &CompactionState) -> u64 {
    use std::hash::{Hash, Hasher};
    // Integers only: the fast hasher is enough.
    let mut h = super::hash::Fx::default();
    (
        "unit",
        unit.seq,
        state.thinned.contains(&unit.seq),
        state.elided.contains(&unit.seq),
    )
        .hash(&mut h);
    if let UnitBody::Turn(turn) = &unit.body {
        for p in &turn.calls {
            form_of(p, state).hash(&mut h);
            if let Some(r) = &p.result {
                state.elided_chars.get(&r.seq).hash(&mut h);
            }
        }
    }
    h.finish()
}

/// First `max` chars of the first non-empty line of `text`, with an ellipsis when cut.
fn snippet(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut out: String = line.chars().take(max).collect();
    if line.chars().count() > max || text.trim().lines().count() > 1 {
        out.push('…');
    }
    out
}

/// The compact block: its text and the seqs whose lines were omitted from it.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub(crate) text: String,
    pub(crate) omitted: Vec<Seq>,
}

/// Whether a call failed: by its step, else by its result's error flag.
fn call_failed(p: &Paired, step: Option<&Step>) -> bool {
    step.map_or_else(
        || p.result.as_ref().is_some_and(|r| r.is_error),
        |s| !s.success,
    )
}

/// A step's own line, `[step_007] ✗ <observation> (See <reference>)`: the form of every step
/// shown alone, and of every failure, grouped or not.
fn step_line(p: &Paired, step: Option<&Step>, refs: &RecallRefs) -> String {
    let id = step.map_or_else(|| format!("call {}", p.call.id), |s| s.id.clone());
    let mark = if call_failed(p, step) { " ✗" } else { "" };
    let cite = match p.locator(step) {
        Some(at) => refs.cite(at),
        None => "(See none)".to_owned(),
    };
    format!("[{id}]{mark} {} {cite}", p.observation(step))
}

/// Where a compact line comes from: a unit, and the call within it for a step line. Slots are
/// computed once per unit and kept across renders ([`LineSlots`]), so a compaction point's
/// estimates do not look every folded call's step up again.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LineSlot {
    unit: usize,
    call: Option<usize>,
    failed: bool,
    /// What consecutive steps must share to form a group (an index into [`LineSlots`]' group
    /// keys); `None` for a line that never groups: a message, a call ingest derived no step
    /// for, or a file view.
    group: Option<u32>,
    /// The line shown when the step or message stands alone (or fails inside a group).
    line: Option<String>,
}

/// The line slots of the units a session has settled (no pending call), in unit order, kept
/// across renders: a unit's lines are fixed once its results are in.
#[derive(Debug, Clone, Default)]
pub(crate) struct LineSlots {
    slots: Vec<LineSlot>,
    /// Units before this index are covered.
    upto: usize,
    /// The distinct group keys met so far: slots compare indices, not categories and names.
    groups: Vec<(Category, Option<String>)>,
}

impl LineSlots {
    /// Extends the cache to cover settled units before `end`; returns the slots of the units
    /// before `end` (settled ones from the cache, later ones computed afresh).
    fn upto<'c>(
        &'c mut self,
        proj: &Projection,
        steps: &StepIndex,
        refs: &RecallRefs,
        end: usize,
    ) -> std::borrow::Cow<'c, [LineSlot]> {
        let end = end.min(proj.units.len());
        while self.upto < end && !pending(&proj.units[self.upto]) {
            line_slots(
                proj,
                self.upto,
                steps,
                refs,
                &mut self.groups,
                &mut self.slots,
            );
            self.upto += 1;
        }
        let cached = self.slots.partition_point(|r| r.unit < end);
        if self.upto >= end {
            return std::borrow::Cow::Borrowed(&self.slots[..cached]);
        }
        let mut all = self.slots[..cached].to_vec();
        for i in self.upto..end {
            line_slots(proj, i, steps, refs, &mut self.groups, &mut all);
        }
        std::borrow::Cow::Owned(all)
    }
}

/// Whether a unit still waits for a result (its lines may change when it arrives).
pub(crate) fn pending(unit: &Unit) -> bool {
    matches!(&unit.body, UnitBody::Turn(turn) if turn.calls.iter().any(|p| p.result.is_none()))
}

/// The line slots a unit contributes when folded (none for units kept in place).
fn line_slots(
    proj: &Projection,
    index: usize,
    steps: &StepIndex,
    refs: &RecallRefs,
    groups: &mut Vec<(Category, Option<String>)>,
    out: &mut Vec<LineSlot>,
) {
    if proj.is_kept(index) {
        return;
    }
    let unit = &proj.units[index];
    match &unit.body {
        UnitBody::System(_) | UnitBody::Pin { .. } => {}
        UnitBody::Turn(turn) if !turn.calls.is_empty() => {
            for (c, p) in turn.calls.iter().enumerate() {
                let step = steps.get(&p.call.id);
                out.push(LineSlot {
                    unit: index,
                    call: Some(c),
                    failed: call_failed(p, step),
                    // A file view keeps its own line: its observation names what the code
                    // defines and uses, which a group's totals would drop.
                    group: step
                        .filter(|s| s.kind != ToolKind::ReadFile)
                        .map(|s| intern(groups, group_key(s))),
                    line: Some(step_line(p, step, refs)),
                });
            }
        }
        _ => out.push(LineSlot {
            unit: index,
            call: None,
            failed: false,
            group: None,
            line: single_line(unit, refs),
        }),
    }
}

/// The line of a message (a turn without calls, a user message or a note); with the recall
/// tool, a message cut short says how to read it whole.
fn single_line(unit: &Unit, refs: &RecallRefs) -> Option<String> {
    let (label, text, max) = match &unit.body {
        UnitBody::Turn(turn) => {
            let text = turn
                .content
                .as_ref()
                .map(|c| c.text().into_owned())
                .unwrap_or_default();
            ("assistant", text, 160)
        }
        UnitBody::User { content, .. } => ("user", content.text().into_owned(), 200),
        UnitBody::Note(text) => ("note", text.clone(), 160),
        UnitBody::System(_) | UnitBody::Pin { .. } => return None,
    };
    let line = snippet(&text, max);
    let more = if line.ends_with('…') {
        refs.suffix(Locator::Seq(unit.seq))
    } else {
        String::new()
    };
    Some(format!("[{label}] {line}{more}"))
}

/// The index of `key` among the group keys met so far (there are a handful per session).
fn intern(groups: &mut Vec<(Category, Option<String>)>, key: (Category, Option<String>)) -> u32 {
    let at = groups.iter().position(|g| *g == key).unwrap_or_else(|| {
        groups.push(key);
        groups.len() - 1
    });
    u32::try_from(at).unwrap_or(u32::MAX)
}

/// What consecutive steps must share to form a group: the compactor's rule, their category, or
/// their tool name when the category is unknown.
fn group_key(step: &Step) -> (Category, Option<String>) {
    match step.kind.category() {
        Category::Other => (Category::Other, Some(step.tool_name.clone())),
        known => (known, None),
    }
}

/// The entries of the block as ranges of `refs`: one ref each, or a run of at least two steps
/// that share a group key with no earlier fold point's boundary between them (only when `folds`
/// is given, i.e. when steps are grouped): a group formed at one point is closed, and the next
/// point's steps start groups of their own.
fn entries(
    proj: &Projection,
    refs: &[LineSlot],
    folds: Option<&BTreeSet<Seq>>,
) -> Vec<Range<usize>> {
    let Some(folds) = folds else {
        return (0..refs.len()).map(|i| i..i + 1).collect();
    };
    let folds: Vec<Seq> = folds.iter().copied().collect();
    let mut out = Vec::new();
    let mut start = 0;
    // The first fold boundary after the previous ref's unit: refs come in log order.
    let mut next = 0;
    for i in 1..=refs.len() {
        let more = i < refs.len() && {
            let (a, b) = (&refs[i - 1], &refs[i]);
            let (from, to) = (proj.units[a.unit].seq, proj.units[b.unit].seq);
            while folds.get(next).is_some_and(|&f| f <= from) {
                next += 1;
            }
            a.call.is_some()
                && b.call.is_some()
                && a.group.is_some()
                && a.group == b.group
                && (from >= to || folds.get(next).is_none_or(|&f| f > to))
        };
        if !more {
            out.push(start..i);
            start = i;
        }
    }
    out
}

/// The seqs a run of lines covers: its first unit's to its last unit's last result.
fn span_of(proj: &Projection, run: &[LineSlot]) -> Option<(Seq, Seq)> {
    let first = proj.units[run.first()?.unit].seq;
    let last = &proj.units[run.last()?.unit];
    let end = match &last.body {
        UnitBody::Turn(turn) => turn
            .calls
            .iter()
            .filter_map(|p| p.result.as_ref().map(|r| r.seq))
            .max()
            .unwrap_or(last.seq)
            .max(last.seq),
        _ => last.seq,
    };
    Some((first, end))
}

/// The summary line of a group, formatted by the step compactor:
/// `[step_004..007] 4 commands executed (1 failed)`, with the recall tool followed by the
/// range of the log it covers. Its failures get their own lines after it.
fn group_lines(
    proj: &Projection,
    run: &[LineSlot],
    steps: &StepIndex,
    refs: &RecallRefs,
) -> Vec<String> {
    let more =
        span_of(proj, run).map_or_else(String::new, |(a, b)| refs.suffix(Locator::Span(a, b)));
    let steps: Vec<Step> = run
        .iter()
        .filter_map(|r| {
            let UnitBody::Turn(turn) = &proj.units[r.unit].body else {
                return None;
            };
            steps.get(&turn.calls.get(r.call?)?.call.id).cloned()
        })
        .collect();
    crate::compact::group_blocks(&steps, 0, true, false)
        .into_iter()
        .filter_map(|b| b.summary)
        .map(|s| format!("[{}] {}{more}", s.id, s.summary))
        .collect()
}

/// The compact block for the folded units, or `None` when nothing is folded.
///
/// Each folded step gets a line, or, with `folds` given (`group_steps`), consecutive steps of
/// one category form a group line with computed totals. Groups form only within the span
/// between two consecutive fold boundaries (`folds`, then `state.boundary`), so the block of a
/// later compaction point extends the block of an earlier one rather than rewriting its groups.
///
/// Lines beyond `max_lines` are omitted oldest first — except failures, which are never
/// dropped, grouped or not — and the block says how many steps (not lines or groups) were
/// omitted. Only the lines kept are formatted, so the cost follows `max_lines`, not the length
/// of the session.
#[expect(
    clippy::too_many_arguments,
    reason = "the block's inputs, each read once; the cost model calls it with its memo's parts"
)]
pub(crate) fn compact_block(
    proj: &Projection,
    state: &CompactionState,
    summary: Option<&SummaryView>,
    steps: &StepIndex,
    slots: &mut LineSlots,
    max_lines: usize,
    folds: Option<&BTreeSet<Seq>>,
    recall: &RecallRefs,
) -> Option<Block> {
    let summarized_to = summary.map_or(0, |s| s.to_seq);
    let tail = proj.first_at(state.boundary);
    let folded_any = tail > proj.kept_before(tail).len();
    if !folded_any && summary.is_none() {
        return None;
    }
    let all = slots.upto(proj, steps, recall, tail);
    let refs = &all[all.partition_point(|r| proj.units[r.unit].seq <= summarized_to)..];
    let entries = entries(proj, refs, folds);
    // A single ref is one line; a group is its summary line plus one line per failure.
    let failures = refs.iter().filter(|r| r.failed).count();
    let lines: usize = entries
        .iter()
        .map(|e| match e.len() {
            1 => 1,
            _ => 1 + refs[e.clone()].iter().filter(|r| r.failed).count(),
        })
        .sum();
    let mut excess = lines.saturating_sub(max_lines.max(failures));
    let (mut omitted_steps, mut omitted_messages) = (0usize, 0usize);
    let mut omitted: Vec<Seq> = Vec::new();
    // The log range the omitted lines cover.
    let mut omitted_span: Option<(Seq, Seq)> = None;
    // Each kept entry, and whether its own line (a group's summary) is shown.
    let mut kept: Vec<(Range<usize>, bool)> =
        Vec::with_capacity(entries.len().min(max_lines.max(failures)));
    for e in entries {
        let group = e.len() > 1;
        if excess > 0 && (group || !refs[e.start].failed) {
            excess -= 1;
            // A group's failures keep their lines, so they are not omitted steps.
            for r in refs[e.clone()].iter().filter(|r| !r.failed) {
                if r.call.is_some() {
                    omitted_steps += 1;
                } else {
                    omitted_messages += 1;
                }
                let seq = proj.units[r.unit].seq;
                if omitted.last() != Some(&seq) {
                    omitted.push(seq);
                }
            }
            if let Some((a, b)) = span_of(proj, &refs[e.clone()]) {
                omitted_span = Some(omitted_span.map_or((a, b), |(a0, b0)| (a0.min(a), b0.max(b))));
            }
            if group {
                kept.push((e, false));
            }
        } else {
            kept.push((e, true));
        }
    }
    let mut out = String::from(COMPACT_HEADER);
    if recall.uses_tool() {
        out.push_str(&format!(
            "\nTo read an original again, call the {} tool with the ref shown.",
            super::refs::RECALL_TOOL
        ));
    }
    if let Some(s) = summary {
        match recall.suffix(Locator::Span(1, s.to_seq)) {
            more if more.is_empty() => out.push_str("\nSummary of the conversation so far:\n"),
            more => out.push_str(&format!(
                "\nSummary of the conversation so far (the original:{more}):\n"
            )),
        }
        out.push_str(&s.content);
    }
    let mut push = |line: String| {
        out.push('\n');
        out.push_str(&line);
    };
    for (e, shown) in kept {
        let run = &refs[e];
        if run.len() == 1 {
            run.iter()
                .filter_map(|r| r.line.clone())
                .for_each(&mut push);
            continue;
        }
        if shown {
            group_lines(proj, run, steps, recall)
                .into_iter()
                .for_each(&mut push);
        }
        run.iter()
            .filter(|r| r.failed)
            .filter_map(|r| r.line.clone())
            .for_each(&mut push);
    }
    // The count goes last: it changes whenever more lines are omitted, and text after the lines
    // is the only place where that change does not rewrite what a prompt cache already holds.
    if omitted_steps + omitted_messages > 0 {
        let how = match omitted_span {
            Some((a, b)) if recall.uses_tool() => {
                format!("their originals: {}", recall.name(Locator::Span(a, b)))
            }
            _ => "all are recoverable from the log".to_owned(),
        };
        out.push_str(&format!(
            "\n({omitted_steps} earlier steps and {omitted_messages} earlier messages omitted \
             above; {how})"
        ));
    }
    Some(Block { text: out, omitted })
}
