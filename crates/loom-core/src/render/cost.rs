//! Token costs of units under compaction decisions, memoised across renders: each piece is
//! counted once per form, a call between compaction points continues the previous call's sums,
//! and what is costly to build (compact lines, messages of the units in place) is kept while it
//! stays valid.

use std::collections::HashMap;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::format::{BodyMemo, Format};
pub(crate) use super::hash::{Fx, FxBuild};
use super::layout::{self, form_of, StepIndex, SummaryView};
use super::meter::TokenMeter;
use super::policy::Policy;
use super::projection::{Paired, Projection, UnitBody};
use super::receipt::{self, Folded};
use super::request::{Msg, Request, ResultForm, ToolSpec};
use super::state::CompactionState;
use super::Piece;
use crate::event::{MessageContent, Seq, ToolOutput};

/// A hash of everything in a state that decides what the units in place cost: the boundary, the
/// decisions about seqs at or after it, and the rest whole. Decisions about folded units are left
/// out (they no longer decide a cost), so the hash costs what the tail holds, not what the
/// session does.
pub(crate) fn fingerprint(state: &CompactionState) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = Fx::default();
    state.boundary.hash(&mut h);
    for seq in state.stubbed.range(state.boundary..) {
        seq.hash(&mut h);
    }
    h.write_u64(u64::MAX);
    for seq in state.thinned.range(state.boundary..) {
        seq.hash(&mut h);
    }
    // Elided seqs include the task statement, which stays in place before the boundary.
    state.elided.hash(&mut h);
    state.elided_chars.hash(&mut h);
    state.summary.hash(&mut h);
    state.block_lines.hash(&mut h);
    h.write_u64(u64::MAX);
    for (page, base) in state.diffed.range(state.boundary..) {
        (page, base).hash(&mut h);
    }
    h.finish()
}

/// Progress that lets a render continue from the previous one instead of rescanning the log:
/// valid only while the state it was computed under is the state passed in.
#[derive(Debug, Clone, Copy, Default)]
struct Running {
    /// Fingerprint of the state the sums below were computed under.
    state: u64,
    /// Units before this index are complete (no pending call) and summed in `sum`.
    complete: usize,
    /// Their tokens.
    sum: u64,
}

/// Progress of the eager rules (oversized results, superseded snapshots).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Eager {
    /// Fingerprint of the state the rules left behind.
    pub(crate) state: u64,
    /// Units before this index have been settled.
    pub(crate) from: usize,
    /// The snapshot result left verbatim as the newest page.
    pub(crate) snapshot: Option<Seq>,
    /// The page sent whole that newer pages are sent as diffs of (`page_diffs`).
    pub(crate) base: Option<Seq>,
}

/// Cost keys: the head of a unit, or one result in one form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// The head of the unit opened at this seq, whether its text is dropped, and how many of its
    /// calls have their results (an error result marks its call in some formats).
    Unit(Seq, bool, usize),
    /// One result of a unit in one form (with the characters an elided result keeps, when it
    /// keeps more than the policy's head and tail).
    Result(Seq, usize, ResultForm, u32),
    /// The compact block: boundary, summary version, line cap, a hash of the fold boundaries its
    /// groups are closed at (`None` when steps are not grouped), and how many results arrived
    /// late for folded units.
    Block(Seq, Option<u32>, usize, Option<u64>, usize),
    /// The text of the summary of this version alone (the receipt's `parts.summary`).
    Summary(u32),
}

/// Token costs of units under decisions, memoised: each piece is counted once per form.
pub(crate) struct Coster<'a> {
    pub(crate) format: Format,
    pub(crate) meter: &'a dyn TokenMeter,
    pub(crate) steps: &'a StepIndex,
    pub(crate) head_chars: usize,
    /// How references are written (the policy's `recall`).
    pub(crate) refs: super::refs::RecallRefs,
    pub(crate) tail_chars: usize,
    pub(crate) max_lines: usize,
    /// Whether the compact block groups steps (`group_steps`).
    pub(crate) group: bool,
    memo: &'a mut HashMap<Key, u64, FxBuild>,
    block: &'a mut Option<(Key, Option<Arc<layout::Block>>)>,
    slots: &'a mut layout::LineSlots,
    msgs: &'a mut Msgs,
    fates: &'a mut Option<(Key, Arc<Folded>)>,
    tools: &'a mut Option<ToolsMemo>,
    prefix: &'a mut Option<(u64, String)>,
    running: &'a mut Option<Running>,
    pub(crate) eager: &'a mut Option<Eager>,
}

/// A memo of token costs that outlives one render (keyed by piece; valid for one session and its
/// growing step index). It remembers the format, meter and policy it was filled under and starts
/// over when a render uses others, so a caller that switches model or policy mid-session cannot
/// be handed costs or forms of the old ones.
#[derive(Debug, Default, Clone)]
pub struct CostMemo {
    /// Format, meter name and policy version the entries were made under.
    scope: Option<(Format, String, String)>,
    map: HashMap<Key, u64, FxBuild>,
    running: Option<Running>,
    eager: Option<Eager>,
    /// The last compact block built, by its key (its text is a function of the key).
    block: Option<(Key, Option<Arc<layout::Block>>)>,
    /// The receipt's account of the folded units, by the key of their block.
    fates: Option<(Key, Arc<Folded>)>,
    /// The tool list last rendered, with its overhead and the prefix hash's state after it.
    tools: Option<ToolsMemo>,
    /// The last prefix hash, by a hash of the prefix's piece keys.
    prefix: Option<(u64, String)>,
    /// The compact lines of settled units.
    slots: layout::LineSlots,
    /// The messages of the units in place, by unit seq.
    msgs: Msgs,
    /// The body last written, for the next to copy the messages they share.
    pub(crate) body: BodyMemo,
}

/// A tool list in one format: its overhead tokens and the prefix hash's state after its wire form.
#[derive(Debug, Clone)]
struct ToolsMemo {
    format: Format,
    tools: Vec<ToolSpec>,
    overhead: u64,
    hasher: Sha256,
}

/// The messages of the units the last render put in place, by unit seq, with the identity each
/// was built under: a call rebuilds only the messages whose form changed or that are new.
#[derive(Debug, Default, Clone)]
struct Msgs {
    map: HashMap<Seq, (u64, Msg), FxBuild>,
    /// The boundary the map was last trimmed at.
    boundary: Seq,
}

impl CostMemo {
    /// An empty memo.
    pub fn new() -> Self {
        Self::default()
    }

    /// Readies the memo for a render in `format` with `meter` under the policy of
    /// `policy_version`: empties it when it was filled under other ones.
    pub(crate) fn enter(&mut self, format: Format, meter: &str, policy_version: &str) {
        let same = self
            .scope
            .as_ref()
            .is_some_and(|(f, m, p)| *f == format && m == meter && p == policy_version);
        if !same {
            *self = Self {
                scope: Some((format, meter.to_owned(), policy_version.to_owned())),
                ..Self::default()
            };
        }
    }
}

impl<'a> Coster<'a> {
    pub(crate) fn new(
        format: Format,
        meter: &'a dyn TokenMeter,
        steps: &'a StepIndex,
        policy: &Policy,
        memo: &'a mut CostMemo,
    ) -> Self {
        Self {
            format,
            meter,
            steps,
            head_chars: policy.elide_head_chars as usize,
            tail_chars: policy.elide_tail_chars as usize,
            refs: policy.recall.clone(),
            max_lines: policy.max_compact_lines as usize,
            group: policy.group_steps,
            memo: &mut memo.map,
            block: &mut memo.block,
            slots: &mut memo.slots,
            msgs: &mut memo.msgs,
            fates: &mut memo.fates,
            tools: &mut memo.tools,
            prefix: &mut memo.prefix,
            running: &mut memo.running,
            eager: &mut memo.eager,
        }
    }

    /// What rendering a result's text needs, for `proj` under `state`.
    fn texts<'t>(&'t self, proj: &'t Projection, state: &'t CompactionState) -> layout::Texts<'t> {
        layout::Texts {
            proj,
            state,
            steps: self.steps,
            head_chars: self.head_chars,
            tail_chars: self.tail_chars,
            refs: &self.refs,
        }
    }

    fn memo(&mut self, key: Key, f: impl FnOnce(&mut Self) -> u64) -> u64 {
        if let Some(&v) = self.memo.get(&key) {
            return v;
        }
        let v = f(self);
        self.memo.insert(key, v);
        v
    }

    /// Tokens of `summary`'s text alone.
    pub(crate) fn summary(&mut self, summary: &SummaryView) -> u64 {
        self.memo(Key::Summary(summary.version), |c| {
            c.meter.count(&summary.content)
        })
    }

    /// Tokens of a unit rendered in place under `state`.
    pub(crate) fn unit(&mut self, proj: &Projection, index: usize, state: &CompactionState) -> u64 {
        let unit = &proj.units[index];
        let UnitBody::Turn(turn) = &unit.body else {
            return self.memo(
                Key::Unit(unit.seq, state.elided.contains(&unit.seq), 0),
                |c| {
                    let msg = layout::unit_msg(unit, &c.texts(proj, state));
                    c.format.msg_tokens(&msg, c.meter)
                },
            );
        };
        // An assistant turn costs its head (the call message with empty results) plus each
        // result in its form: every format's cost is additive over result pieces.
        let answered = turn.calls.iter().filter(|p| p.result.is_some()).count();
        let head = self.memo(
            Key::Unit(unit.seq, state.thinned.contains(&unit.seq), answered),
            |c| {
                let msg = layout::head_msg(unit, state, &c.refs);
                c.format.msg_tokens(&msg, c.meter)
            },
        );
        let mut total = head;
        for (i, paired) in turn.calls.iter().enumerate() {
            total += self.result(proj, state, index, i, form_of(paired, state));
        }
        total
    }

    /// The message of a unit rendered in place under `state`, and its identity.
    pub(crate) fn msg(
        &mut self,
        proj: &Projection,
        index: usize,
        state: &CompactionState,
    ) -> (u64, Msg) {
        if self.msgs.boundary != state.boundary {
            // Folded units are not rendered in place any more; kept units still are.
            let kept: Vec<Seq> = proj
                .kept_before(proj.first_at(state.boundary))
                .iter()
                .map(|&i| proj.units[i].seq)
                .collect();
            let boundary = state.boundary;
            self.msgs
                .map
                .retain(|seq, _| *seq >= boundary || kept.contains(seq));
            self.msgs.boundary = boundary;
        }
        let unit = &proj.units[index];
        let key = layout::unit_key(unit, state);
        if let Some((k, msg)) = self.msgs.map.get(&unit.seq) {
            if *k == key {
                return (key, msg.clone());
            }
        }
        let msg = layout::unit_msg(unit, &self.texts(proj, state));
        self.msgs.map.insert(unit.seq, (key, msg.clone()));
        (key, msg)
    }

    /// Tokens of one result of a unit in one form.
    pub(crate) fn result(
        &mut self,
        proj: &Projection,
        state: &CompactionState,
        index: usize,
        call: usize,
        form: ResultForm,
    ) -> u64 {
        let unit = &proj.units[index];
        let UnitBody::Turn(turn) = &unit.body else {
            return 0;
        };
        let Some(paired) = turn.calls.get(call) else {
            return 0;
        };
        let kept = match (form, &paired.result) {
            (ResultForm::Elided, Some(r)) => state.elided_chars.get(&r.seq).copied().unwrap_or(0),
            _ => 0,
        };
        self.memo(Key::Result(unit.seq, call, form, kept), |c| {
            c.result_piece(proj, state, paired, form)
        })
    }

    /// What one result adds to its turn's cost: in the JSON formats its content is one string
    /// value, so that value is metered alone (a verbatim text output straight from the log,
    /// without copying it); the ReAct prompt, where the observation is part of one text, meters
    /// the turn with and without it.
    fn result_piece(
        &self,
        proj: &Projection,
        state: &CompactionState,
        paired: &Paired,
        form: ResultForm,
    ) -> u64 {
        let verbatim_text = match (form, &paired.result) {
            (ResultForm::Verbatim, Some(r)) => match &r.output {
                ToolOutput::Text(s) => Some(s.as_str()),
                _ => None,
            },
            _ => None,
        };
        if let Some(tokens) =
            verbatim_text.and_then(|s| self.format.result_text_tokens(s, self.meter))
        {
            return tokens;
        }
        let full = layout::result_content(paired, form, &self.texts(proj, state));
        if let Some(tokens) = self.format.result_tokens(&full, self.meter) {
            return tokens;
        }
        let with = one_call(paired, full, form);
        let without = one_call(paired, MessageContent::Text(String::new()), form);
        self.format
            .msg_tokens(&with, self.meter)
            .saturating_sub(self.format.msg_tokens(&without, self.meter))
    }

    fn block_key(
        &self,
        proj: &Projection,
        state: &CompactionState,
        summary: Option<&SummaryView>,
    ) -> Key {
        let folds = self.group.then(|| {
            use std::hash::{Hash, Hasher};
            let mut h = Fx::default();
            state.folds.hash(&mut h);
            h.finish()
        });
        Key::Block(
            state.boundary,
            summary.map(|s| s.version),
            state.max_lines(self.max_lines),
            folds,
            proj.late_before(proj.first_at(state.boundary)),
        )
    }

    /// The compact block under `state`, built once per key.
    pub(crate) fn block_text(
        &mut self,
        proj: &Projection,
        state: &CompactionState,
        summary: Option<&SummaryView>,
    ) -> Option<Arc<layout::Block>> {
        let key = self.block_key(proj, state, summary);
        if let Some((k, block)) = self.block.as_ref() {
            if *k == key {
                return block.clone();
            }
        }
        let max = state.max_lines(self.max_lines);
        let folds = self.group.then_some(&state.folds);
        let block = layout::compact_block(
            proj, state, summary, self.steps, self.slots, max, folds, &self.refs,
        )
        .map(Arc::new);
        *self.block = Some((key, block.clone()));
        block
    }

    /// What happened to the folded units under `state`: a function of the compact block, so
    /// computed once per block.
    pub(crate) fn folded(
        &mut self,
        proj: &Projection,
        state: &CompactionState,
        summary: Option<&SummaryView>,
    ) -> Arc<Folded> {
        let key = self.block_key(proj, state, summary);
        if let Some((k, folded)) = self.fates.as_ref() {
            if *k == key {
                return folded.clone();
            }
        }
        let omitted = self
            .block_text(proj, state, summary)
            .map(|b| b.omitted.clone())
            .unwrap_or_default();
        let tail = proj.first_at(state.boundary);
        let folded = Arc::new(receipt::folded(proj, tail, summary, &omitted));
        *self.fates = Some((key, folded.clone()));
        folded
    }

    /// Tokens of the request besides its messages (priming and tool definitions): counted once
    /// per tool list, since the tools rarely change within a session.
    pub(crate) fn overhead(&mut self, tools: &[ToolSpec]) -> u64 {
        self.tools(tools).overhead
    }

    fn tools(&mut self, tools: &[ToolSpec]) -> &ToolsMemo {
        let format = self.format;
        if self
            .tools
            .as_ref()
            .is_some_and(|t| t.format != format || t.tools != tools)
        {
            *self.tools = None;
        }
        let meter = self.meter;
        self.tools.get_or_insert_with(|| {
            let req = Request {
                model: String::new(),
                tools: tools.to_vec(),
                messages: Vec::new(),
                stable_len: 0,
                max_output_tokens: 0,
            };
            let wire = format.tools(&req);
            let mut hasher = Sha256::new();
            for tool in &wire {
                hasher.update(tool.to_string().as_bytes());
            }
            ToolsMemo {
                format,
                overhead: format.overhead_tokens(&wire, meter),
                tools: req.tools,
                hasher,
            }
        })
    }

    /// SHA-256 of the stable prefix's wire form (tools, then the prefix messages), hashed again
    /// only when the prefix's pieces changed.
    pub(crate) fn prefix_hash(&mut self, request: &Request, pieces: &[Piece]) -> String {
        let stable = request.stable_len.min(request.messages.len());
        let key = {
            use std::hash::{Hash, Hasher};
            let mut h = Fx::default();
            for p in &pieces[..stable] {
                p.key.hash(&mut h);
            }
            h.finish()
        };
        let tools = self.tools(&request.tools).hasher.clone();
        if let Some((k, hash)) = self.prefix.as_ref() {
            if *k == key {
                return hash.clone();
            }
        }
        let mut hasher = tools;
        for msg in &request.messages[..stable] {
            for w in self.format.wire(msg) {
                hasher.update(w.to_string().as_bytes());
            }
        }
        let hash = hex::encode(hasher.finalize());
        *self.prefix = Some((key, hash.clone()));
        hash
    }

    /// Tokens of the compact block under `state`.
    pub(crate) fn block(
        &mut self,
        proj: &Projection,
        state: &CompactionState,
        summary: Option<&SummaryView>,
    ) -> u64 {
        let key = self.block_key(proj, state, summary);
        self.memo(key, |c| match c.block_text(proj, state, summary) {
            None => 0,
            Some(block) => c.format.msg_tokens(
                &Msg::User {
                    content: MessageContent::Text(block.text.clone()),
                    name: None,
                },
                c.meter,
            ),
        })
    }

    /// Tokens of the results rendered in place under `state` (the `tool_results` tier). Kept
    /// units hold no results, so only the tail is walked.
    pub(crate) fn results(&mut self, proj: &Projection, state: &CompactionState) -> u64 {
        let mut total = 0;
        for i in proj.first_at(state.boundary)..proj.units.len() {
            let UnitBody::Turn(turn) = &proj.units[i].body else {
                continue;
            };
            for (c, paired) in turn.calls.iter().enumerate() {
                total += self.result(proj, state, i, c, form_of(paired, state));
            }
        }
        total
    }

    /// Tokens of all units and the compact block under `state` (without request overhead).
    ///
    /// The kept units before the boundary are few; the tail is summed from where the previous
    /// call under the same state stopped, so a call between compaction points costs what the
    /// new units add.
    pub(crate) fn total(
        &mut self,
        proj: &Projection,
        state: &CompactionState,
        summary: Option<&SummaryView>,
    ) -> u64 {
        let tail = proj.first_at(state.boundary);
        let kept: u64 = proj
            .kept_before(tail)
            .iter()
            .map(|&i| self.unit(proj, i, state))
            .sum();
        let fp = fingerprint(state);
        let (start, mut sum) = match *self.running {
            Some(r) if r.state == fp && (tail..=proj.units.len()).contains(&r.complete) => {
                (r.complete, r.sum)
            }
            _ => (tail, 0),
        };
        let (mut complete, mut complete_sum, mut settled) = (start, sum, true);
        for i in start..proj.units.len() {
            sum += self.unit(proj, i, state);
            // A unit with a pending call may still change; the running sum stops before it.
            if settled && !layout::pending(&proj.units[i]) && i + 1 < proj.units.len() {
                complete = i + 1;
                complete_sum = sum;
            } else {
                settled = false;
            }
        }
        *self.running = Some(Running {
            state: fp,
            complete,
            sum: complete_sum,
        });
        kept + sum + self.block(proj, state, summary)
    }

    /// Records that the eager rules' progress holds for `state` too: a compaction point only
    /// adds decisions, so what was settled before it stays settled.
    pub(crate) fn carry_eager(&mut self, state: &CompactionState) {
        if let Some(e) = self.eager.as_mut() {
            e.state = fingerprint(state);
        }
    }
}

/// A bare assistant message holding one call with the given result content, for metering one
/// result piece.
fn one_call(paired: &super::projection::Paired, content: MessageContent, form: ResultForm) -> Msg {
    Msg::Assistant {
        content: None,
        reasoning: None,
        name: None,
        native: None,
        calls: vec![super::request::RenderedCall {
            call: paired.call.clone(),
            content,
            is_error: paired.result.as_ref().is_some_and(|r| r.is_error),
            form,
        }],
    }
}
