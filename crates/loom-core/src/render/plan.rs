//! Compaction points: when the prefix may change, and what changes.
//!
//! Between compaction points the decision in [`CompactionState`] is fixed, so each request only
//! grows at its end and the provider's prompt cache keeps hitting (DESIGN.md, principle 6). A
//! point fires when the estimate crosses the high watermark; the free reducers then cut down to
//! the low watermark in one step, cheap to expensive: tool-result retention, stubbing old
//! results, folding old turns into the compact block, the latest summary. The decision is sticky:
//! stubbed results stay stubbed and folded turns stay folded.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::format::Format;
use super::layout::{self, form_of, StepIndex, SummaryView};
use super::meter::TokenMeter;
use super::policy::{Budget, Policy, Retention};
use super::projection::{Projection, UnitBody};
use super::request::{Msg, ResultForm};
use crate::event::{MessageContent, Seq};

/// Why a compaction point fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointReason {
    /// The estimate crossed the high watermark.
    HighWatermark,
    /// The estimate crossed the hard total (after an ineffective pass had disarmed the watermark).
    HardTotal,
    /// A result over the oversized share had been answered; only it was stubbed.
    Oversized,
    /// Tool results exceeded their tier cap.
    TierCap,
}

/// The record of one compaction point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointRecord {
    /// Last seq of the log when it fired.
    pub at_seq: Seq,
    /// Why it fired.
    pub reason: PointReason,
    /// Estimate before, in tokens.
    pub before: u64,
    /// Estimate after.
    pub after: u64,
    /// Whether the pass failed to reach the low watermark (the breaker).
    pub ineffective: bool,
}

/// The sticky compaction decision: derived state, stored between renders.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionState {
    /// Units opened before this seq are folded into the compact block (unless kept).
    pub boundary: Seq,
    /// Result seqs rendered as observation + reference.
    pub stubbed: BTreeSet<Seq>,
    /// Result seqs rendered as head + tail + reference.
    pub elided: BTreeSet<Seq>,
    /// Assistant turns (by seq) sent without their text: the calls and their arguments stay.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub thinned: BTreeSet<Seq>,
    /// The summary adopted at the last point: (version, to_seq).
    pub summary: Option<(u32, Seq)>,
    /// A tighter cap on compact-block lines than the policy's, set when even the folded history
    /// did not fit (failures are still never dropped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_lines: Option<u32>,
    /// The boundaries of earlier fold points, kept when steps are grouped (`group_steps`): the
    /// compact block groups steps only within the span between two of them, so a group is closed
    /// when its point forms it and the next point's block extends this one's.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub folds: BTreeSet<Seq>,
    /// How many points have fired.
    pub points: u32,
    /// The last point.
    pub last_point: Option<PointRecord>,
}

impl CompactionState {
    /// Lines the compact block may hold under this state, given the policy's cap.
    pub(crate) fn max_lines(&self, policy_max: usize) -> usize {
        self.block_lines
            .map_or(policy_max, |cap| policy_max.min(cap as usize))
    }

    /// Whether the breaker is tripped: the last pass could not reach the low watermark, so the
    /// next point waits for the hard total instead of rewriting the prefix every call.
    pub fn ineffective(&self) -> bool {
        self.last_point.as_ref().is_some_and(|p| p.ineffective)
    }
}

/// A small, fast hasher for the memo's integer keys (SipHash's DoS resistance buys nothing for
/// keys the pipeline makes itself, and the memo is hit several thousand times per render).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Fx(u64);

impl std::hash::Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type FxBuild = std::hash::BuildHasherDefault<Fx>;

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
    state.summary.hash(&mut h);
    state.block_lines.hash(&mut h);
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
struct Eager {
    /// Fingerprint of the state the rules left behind.
    state: u64,
    /// Units before this index have been settled.
    from: usize,
    /// The snapshot result left verbatim as the newest page.
    snapshot: Option<Seq>,
}

/// Cost keys: the head of a unit, or one result in one form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// The head of the unit opened at this seq, whether its text is dropped, and how many of its
    /// calls have their results (an error result marks its call in some formats).
    Unit(Seq, bool, usize),
    /// One result of a unit in one form.
    Result(Seq, usize, ResultForm),
    /// The compact block: boundary, summary version, line cap, a hash of the fold boundaries its
    /// groups are closed at (`None` when steps are not grouped), and how many results arrived
    /// late for folded units.
    Block(Seq, Option<u32>, usize, Option<u64>, usize),
}

/// Token costs of units under decisions, memoised: each piece is counted once per form.
pub(crate) struct Coster<'a> {
    pub(crate) format: Format,
    pub(crate) meter: &'a dyn TokenMeter,
    pub(crate) steps: &'a StepIndex,
    pub(crate) head_chars: usize,
    pub(crate) tail_chars: usize,
    pub(crate) max_lines: usize,
    /// Whether the compact block groups steps (`group_steps`).
    pub(crate) group: bool,
    memo: &'a mut HashMap<Key, u64, FxBuild>,
    block: &'a mut Option<(Key, Option<layout::Block>)>,
    slots: &'a mut layout::LineSlots,
    running: &'a mut Option<Running>,
    eager: &'a mut Option<Eager>,
}

/// A memo of token costs that outlives one render (keyed by piece; valid for one session, format,
/// meter and step index).
#[derive(Debug, Default, Clone)]
pub struct CostMemo {
    map: HashMap<Key, u64, FxBuild>,
    running: Option<Running>,
    eager: Option<Eager>,
    /// The last compact block built, by its key (its text is a function of the key).
    block: Option<(Key, Option<layout::Block>)>,
    /// The compact lines of settled units.
    slots: layout::LineSlots,
}

impl CostMemo {
    /// An empty memo.
    pub fn new() -> Self {
        Self::default()
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
            max_lines: policy.max_compact_lines as usize,
            group: policy.group_steps,
            memo: &mut memo.map,
            block: &mut memo.block,
            slots: &mut memo.slots,
            running: &mut memo.running,
            eager: &mut memo.eager,
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

    /// Tokens of a unit rendered in place under `state`.
    pub(crate) fn unit(&mut self, proj: &Projection, index: usize, state: &CompactionState) -> u64 {
        let unit = &proj.units[index];
        let UnitBody::Turn(turn) = &unit.body else {
            return self.memo(
                Key::Unit(unit.seq, state.elided.contains(&unit.seq), 0),
                |c| {
                    let msg = layout::unit_msg(unit, state, c.steps, c.head_chars, c.tail_chars);
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
                let msg = empty_results(layout::unit_msg(unit, state, c.steps, 0, 0));
                c.format.msg_tokens(&msg, c.meter)
            },
        );
        let mut total = head;
        for (i, paired) in turn.calls.iter().enumerate() {
            let form = form_of(paired, state);
            total += self.memo(Key::Result(unit.seq, i, form), |c| {
                let full =
                    layout::result_content(paired, form, c.steps, c.head_chars, c.tail_chars);
                let with = one_call(paired, full, form);
                let without = one_call(paired, MessageContent::Text(String::new()), form);
                c.format
                    .msg_tokens(&with, c.meter)
                    .saturating_sub(c.format.msg_tokens(&without, c.meter))
            });
        }
        total
    }

    /// Tokens of one result of a unit in one form.
    pub(crate) fn result(
        &mut self,
        proj: &Projection,
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
        self.memo(Key::Result(unit.seq, call, form), |c| {
            let full = layout::result_content(paired, form, c.steps, c.head_chars, c.tail_chars);
            let with = one_call(paired, full, form);
            let without = one_call(paired, MessageContent::Text(String::new()), form);
            c.format
                .msg_tokens(&with, c.meter)
                .saturating_sub(c.format.msg_tokens(&without, c.meter))
        })
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
    ) -> Option<layout::Block> {
        let key = self.block_key(proj, state, summary);
        if let Some((k, block)) = self.block.as_ref() {
            if *k == key {
                return block.clone();
            }
        }
        let max = state.max_lines(self.max_lines);
        let folds = self.group.then_some(&state.folds);
        let block = layout::compact_block(proj, state, summary, self.steps, self.slots, max, folds);
        *self.block = Some((key, block.clone()));
        block
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
                    content: MessageContent::Text(block.text),
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
                total += self.result(proj, i, c, form_of(paired, state));
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

/// The message with every result's content emptied (its head cost).
fn empty_results(msg: Msg) -> Msg {
    match msg {
        Msg::Assistant {
            content,
            reasoning,
            name,
            mut calls,
        } => {
            for c in &mut calls {
                c.content = MessageContent::Text(String::new());
            }
            Msg::Assistant {
                content,
                reasoning,
                name,
                calls,
            }
        }
        other => other,
    }
}

/// A bare assistant message holding one call with the given result content, for metering one
/// result piece.
fn one_call(paired: &super::projection::Paired, content: MessageContent, form: ResultForm) -> Msg {
    Msg::Assistant {
        content: None,
        reasoning: None,
        name: None,
        calls: vec![super::request::RenderedCall {
            call: paired.call.clone(),
            content,
            is_error: paired.result.as_ref().is_some_and(|r| r.is_error),
            form,
        }],
    }
}

/// What [`plan`] needs besides the projection.
pub(crate) struct PlanInput<'p> {
    pub(crate) policy: &'p Policy,
    pub(crate) budget: &'p Budget,
    pub(crate) overhead: u64,
    pub(crate) summaries: &'p [SummaryView],
    pub(crate) at_seq: Seq,
    pub(crate) reason: PointReason,
}

/// Takes one compaction point: returns the new sticky decision.
pub(crate) fn plan(
    proj: &Projection,
    prev: &CompactionState,
    input: &PlanInput<'_>,
    coster: &mut Coster<'_>,
) -> CompactionState {
    let mut st = prev.clone();
    // With grouped steps, the boundary as it stands closes every group before it: what this
    // point folds forms groups of its own after them.
    let closes = input.policy.group_steps && prev.boundary > 0 && st.folds.insert(prev.boundary);
    let summary_of = |st: &CompactionState| -> Option<&SummaryView> {
        st.summary
            .and_then(|(v, _)| input.summaries.iter().find(|s| s.version == v))
    };
    let mut est = |st: &CompactionState, c: &mut Coster<'_>| {
        input.overhead + c.total(proj, st, summary_of(st))
    };
    let before = est(&st, coster);
    let goal = input.budget.low;
    let protected = proj.recent_turns_start(input.policy.protect_recent_turns);

    // 1. Retention rules: results expired by their tool's rule, and results superseded by a
    //    later run of the identical call (same tool, same arguments), whose output is newer.
    apply_retention(proj, input.policy, &mut st);
    supersede_repeats(proj, input.policy, &mut st);
    let mut now = est(&st, coster);

    // 2. Stub old results, oldest first, outside the protected recent turns — also while tool
    //    results exceed their tier cap.
    let cap = input
        .budget
        .tier_caps
        .get(&super::policy::Tier::ToolResults)
        .copied();
    let mut results = cap.map(|_| coster.results(proj, &st));
    let over_cap = |results: Option<u64>| results.zip(cap).is_some_and(|(r, c)| r > c);
    if now > goal || over_cap(results) {
        // Kept units hold no results: the walk starts at the boundary.
        'stub: for i in proj.first_at(st.boundary)..protected {
            if let UnitBody::Turn(turn) = &proj.units[i].body {
                for paired in &turn.calls {
                    let Some(r) = &paired.result else { continue };
                    if matches!(
                        input.policy.retention_for(&paired.call.name),
                        Retention::NeverEvict
                    ) || st.stubbed.contains(&r.seq)
                    {
                        continue;
                    }
                    let before_unit = coster.unit(proj, i, &st);
                    st.stubbed.insert(r.seq);
                    let after_unit = coster.unit(proj, i, &st);
                    if after_unit >= before_unit {
                        // Stubbing a tiny result saves nothing; keep it verbatim.
                        st.stubbed.remove(&r.seq);
                        continue;
                    }
                    now = now - before_unit + after_unit;
                    results = results.map(|r| r.saturating_sub(before_unit - after_unit));
                    if now <= goal && !over_cap(results) {
                        break 'stub;
                    }
                }
            }
        }
        now = est(&st, coster);
    }

    // 3. Drop the text of old turns that made calls, oldest first: the calls, their arguments and
    //    their (stubbed) results stay, so what the agent did stays visible.
    if now > goal {
        for i in proj.first_at(st.boundary)..protected {
            let unit = &proj.units[i];
            let UnitBody::Turn(turn) = &unit.body else {
                continue;
            };
            if turn.calls.is_empty() || turn.content.is_none() || st.thinned.contains(&unit.seq) {
                continue;
            }
            let before_unit = coster.unit(proj, i, &st);
            st.thinned.insert(unit.seq);
            let after_unit = coster.unit(proj, i, &st);
            now = (now + after_unit).saturating_sub(before_unit);
            if now <= goal {
                break;
            }
        }
        now = est(&st, coster);
    }

    // 4. Fold old units into the compact block, oldest first, up to the protected turns.
    if now > goal && input.policy.step_compaction {
        now = fold_until(proj, &mut st, protected, goal, &mut est, coster);
    }

    // 5. The latest summary, when the free reducers were not enough.
    if now > goal {
        if let Some(s) = input
            .summaries
            .iter()
            .filter(|s| proj.units.get(protected).is_none_or(|u| s.to_seq < u.seq))
            .max_by_key(|s| s.version)
        {
            if st.summary.is_none_or(|(v, _)| v < s.version) {
                st.summary = Some((s.version, s.to_seq));
                st.boundary = st.boundary.max(s.to_seq + 1);
                now = est(&st, coster);
            }
        }
    }

    let ineffective = now > goal;

    // 6. Over the hard total even so: stub the protected turns' results (oldest first), then fold
    //    them, but never the newest unit; then reduce the newest unit's own results — head and
    //    tail with an elision marker first, observation + reference if even that is too big.
    let hard = input.budget.hard_total;
    let last = proj.units.len().saturating_sub(1);
    if now > hard {
        'protected: for i in protected..last {
            if let UnitBody::Turn(turn) = &proj.units[i].body {
                for paired in &turn.calls {
                    if let Some(r) = &paired.result {
                        st.stubbed.insert(r.seq);
                        now = est(&st, coster);
                        if now <= hard {
                            break 'protected;
                        }
                    }
                }
            }
        }
    }
    if now > hard {
        now = fold_until(proj, &mut st, last, hard, &mut est, coster);
    }
    if now > hard && st.boundary > 0 {
        st.block_lines = Some(0);
        now = est(&st, coster);
    }
    let newest: Vec<Seq> = match proj.units.last().map(|u| &u.body) {
        Some(UnitBody::Turn(turn)) => turn
            .calls
            .iter()
            .filter_map(|p| p.result.as_ref().map(|r| r.seq))
            .collect(),
        _ => Vec::new(),
    };
    for form in [ResultForm::Elided, ResultForm::Stubbed] {
        for seq in &newest {
            if now <= hard {
                break;
            }
            if form == ResultForm::Elided && !st.stubbed.contains(seq) {
                st.elided.insert(*seq);
            } else if form == ResultForm::Stubbed {
                st.elided.remove(seq);
                st.stubbed.insert(*seq);
            }
            now = est(&st, coster);
        }
    }
    // Last of all, a task statement too large for the budget keeps its head and tail (it is
    // still in the log at its seq): never dropped, but never the reason a request is refused.
    if now > hard {
        if let Some(first) = proj.first_user.and_then(|i| proj.units.get(i)) {
            st.elided.insert(first.seq);
            now = est(&st, coster);
        }
    }

    if closes && st.boundary == prev.boundary {
        // Nothing was folded: no group was formed, so there is nothing to close — unless
        // reopening changes the block's grouping so that the request no longer fits what the
        // estimates above measured.
        st.folds.remove(&prev.boundary);
        let reopened = est(&st, coster);
        if reopened > now {
            st.folds.insert(prev.boundary);
        } else {
            now = reopened;
        }
    }
    // Boundaries the summary covers close nothing any more (it replaces their lines).
    if let Some((_, to)) = st.summary {
        st.folds = st.folds.split_off(&(to + 1));
        now = est(&st, coster);
    }
    // Decisions about folded units decide nothing any more: the state keeps what the tail needs.
    // (A result opens after its call, so a result seq before the boundary belongs to a folded
    // turn; the task statement, kept in place, may be elided and stays.)
    st.stubbed = st.stubbed.split_off(&st.boundary);
    st.thinned = st.thinned.split_off(&st.boundary);
    st.points += 1;
    st.last_point = Some(PointRecord {
        at_seq: input.at_seq,
        reason: input.reason,
        before,
        after: now,
        ineffective,
    });
    st
}

/// Moves the boundary forward (never past unit `limit`, never folding the last unit) to the
/// first unit at which the estimate is at most `goal`; returns the estimate.
///
/// Folding more almost always shrinks the request, so the boundary is found by binary search:
/// a logarithmic number of estimates per compaction point instead of one per folded unit.
fn fold_until(
    proj: &Projection,
    st: &mut CompactionState,
    limit: usize,
    goal: u64,
    est: &mut impl FnMut(&CompactionState, &mut Coster<'_>) -> u64,
    coster: &mut Coster<'_>,
) -> u64 {
    let now = est(st, coster);
    if now <= goal {
        return now;
    }
    let start = proj
        .units
        .iter()
        .position(|u| u.seq >= st.boundary)
        .unwrap_or(proj.units.len());
    // Candidate k folds every unit before index k; the last unit always stays.
    let end = limit.min(proj.units.len().saturating_sub(1));
    if end <= start {
        return now;
    }
    // Candidates differ only in the boundary: it is moved in place, never the sets cloned.
    let mut at = |k: usize, st: &mut CompactionState, coster: &mut Coster<'_>| {
        st.boundary = proj.units[k].seq;
        est(st, coster)
    };
    let (mut lo, mut hi) = (start + 1, end);
    let mut best = at(hi, st, coster);
    if best > goal {
        return best;
    }
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let e = at(mid, st, coster);
        if e <= goal {
            hi = mid;
            best = e;
        } else {
            lo = mid + 1;
        }
    }
    if hi == end {
        st.boundary = proj.units[hi].seq;
        return best;
    }
    at(hi, st, coster)
}

/// Stubs results whose identical call (tool name and arguments) was made again later and
/// answered: the later output is the current one.
///
/// Only the units in place are walked: a folded result is rendered as its compact line whatever
/// its form, so deciding about it would change nothing.
fn supersede_repeats(proj: &Projection, policy: &Policy, st: &mut CompactionState) {
    let mut seen: std::collections::HashSet<(&str, &str), FxBuild> = Default::default();
    for unit in proj.units[proj.first_at(st.boundary)..].iter().rev() {
        let UnitBody::Turn(turn) = &unit.body else {
            continue;
        };
        for paired in turn.calls.iter().rev() {
            let Some(r) = &paired.result else { continue };
            let key = (paired.call.name.as_str(), paired.call.arguments.as_str());
            let never = matches!(policy.retention_for(key.0), Retention::NeverEvict);
            if !seen.insert(key) && !never {
                st.stubbed.insert(r.seq);
            }
        }
    }
}

/// Stubs every result its tool's retention rule has expired.
///
/// Counts and ages run from the newest unit, so only the units in place need walking: a folded
/// result is rendered as its compact line whatever its form.
fn apply_retention(proj: &Projection, policy: &Policy, st: &mut CompactionState) {
    let mut per_tool_seen: HashMap<&str, u32, FxBuild> = HashMap::default();
    let mut turns_after = 0usize;
    // Walk newest first so counts and ages are relative to the end.
    for unit in proj.units[proj.first_at(st.boundary)..].iter().rev() {
        let UnitBody::Turn(turn) = &unit.body else {
            continue;
        };
        for paired in turn.calls.iter().rev() {
            let Some(r) = &paired.result else { continue };
            let seen = per_tool_seen.entry(paired.call.name.as_str()).or_default();
            *seen += 1;
            let expired = match policy.retention_for(&paired.call.name) {
                Retention::Keep | Retention::NeverEvict => false,
                Retention::Count { n } => *seen > n,
                Retention::Age { turns } => turns_after >= turns as usize,
            };
            if expired {
                st.stubbed.insert(r.seq);
            }
        }
        turns_after += 1;
    }
}

/// Stubs, among results the model has already answered (a turn follows them), those over
/// `budget.oversized` tokens and the browser-state snapshots that a newer snapshot supersedes
/// (every page action returns the whole page, so only the newest is current; the seeds offload
/// pages always). Returns whether anything changed.
pub(crate) fn expire_oversized(
    proj: &Projection,
    st: &mut CompactionState,
    policy: &Policy,
    budget: &Budget,
    coster: &mut Coster<'_>,
) -> bool {
    let Some(last_turn) = proj.units.iter().rposition(|u| u.is_turn()) else {
        return false;
    };
    // Continue from the last render when it left exactly this state; otherwise start over.
    let progress = match *coster.eager {
        Some(e) if e.state == fingerprint(st) && e.from <= last_turn => e,
        _ => Eager::default(),
    };
    let snapshot = |call_id: &str| {
        policy.supersede_snapshots
            && coster.steps.get(call_id).is_some_and(|s| {
                matches!(
                    s.kind,
                    crate::step::ToolKind::Navigate | crate::step::ToolKind::BrowserAction
                )
            })
    };
    let evictable = |name: &str| !matches!(policy.retention_for(name), Retention::NeverEvict);
    let mut newest = progress.snapshot;
    let mut superseded: Vec<Seq> = Vec::new();
    for unit in &proj.units[progress.from..] {
        let UnitBody::Turn(turn) = &unit.body else {
            continue;
        };
        for paired in &turn.calls {
            let Some(r) = &paired.result else { continue };
            if snapshot(&paired.call.id) && newest.is_none_or(|n| n < r.seq) {
                superseded.extend(newest);
                newest = evictable(&paired.call.name).then_some(r.seq);
            }
        }
    }
    // Folded results are rendered as their compact lines whatever their form: only results in
    // place are decided about.
    let mut changed = false;
    for seq in superseded {
        if seq >= st.boundary && !st.elided.contains(&seq) && st.stubbed.insert(seq) {
            changed = true;
        }
    }
    // Only answered results (before the last turn) are eligible for the size rule.
    for i in progress.from.max(proj.first_at(st.boundary))..last_turn {
        let UnitBody::Turn(turn) = &proj.units[i].body else {
            continue;
        };
        for (c, paired) in turn.calls.iter().enumerate() {
            let Some(r) = &paired.result else { continue };
            if st.stubbed.contains(&r.seq)
                || st.elided.contains(&r.seq)
                || !evictable(&paired.call.name)
            {
                continue;
            }
            if coster.result(proj, i, c, ResultForm::Verbatim) > budget.oversized {
                st.stubbed.insert(r.seq);
                changed = true;
            }
        }
    }
    // A turn still waiting for a result is not settled: the next render looks at it again.
    let settled = (progress.from..last_turn)
        .find(|&i| layout::pending(&proj.units[i]))
        .unwrap_or(last_turn);
    *coster.eager = Some(Eager {
        state: fingerprint(st),
        from: settled,
        snapshot: newest,
    });
    changed
}
