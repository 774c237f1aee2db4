//! Compaction points: when the prefix may change, and what changes.
//!
//! Between compaction points the decision in [`CompactionState`] is fixed, so each request only
//! grows at its end and the provider's prompt cache keeps hitting (DESIGN.md, principle 6). A
//! point fires when the estimate crosses the high watermark; the free reducers then cut down to
//! the low watermark in one step, cheap to expensive: tool-result retention, stubbing old
//! results, folding old turns into the compact block, the latest summary. The decision is sticky:
//! stubbed results stay stubbed and folded turns stay folded.

use std::collections::HashMap;

use super::cost::{fingerprint, Coster, Eager, FxBuild};
use super::layout::{self, SummaryView};
use super::policy::{Budget, Policy, Retention};
use super::projection::{Projection, UnitBody};
use super::request::ResultForm;
use super::state::{CompactionState, PointReason, PointRecord};
use crate::event::Seq;

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
    let summary_of = |st: &CompactionState| summary_in(input.summaries, st);
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
        let summary = summary_in(input.summaries, &st);
        now = fold_until(proj, &mut st, protected, goal, summary, &mut est, coster);
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
        let summary = summary_in(input.summaries, &st);
        now = fold_until(proj, &mut st, last, hard, summary, &mut est, coster);
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

/// The summary a state adopted, among the session's summaries.
pub(crate) fn summary_in<'s>(
    summaries: &'s [SummaryView],
    st: &CompactionState,
) -> Option<&'s SummaryView> {
    st.summary
        .and_then(|(v, _)| summaries.iter().find(|s| s.version == v))
}

/// Moves the boundary forward (never past unit `limit`, never folding the last unit) to the
/// first unit at which the estimate is at most `goal`; returns the estimate.
///
/// Folding more almost always shrinks the request, so the boundary is found by binary search:
/// a logarithmic number of estimates per compaction point instead of one per folded unit. A
/// unit's cost does not depend on the boundary, so the units are costed once and each candidate
/// adds sums; only its compact block is built anew.
fn fold_until(
    proj: &Projection,
    st: &mut CompactionState,
    limit: usize,
    goal: u64,
    summary: Option<&SummaryView>,
    est: &mut impl FnMut(&CompactionState, &mut Coster<'_>) -> u64,
    coster: &mut Coster<'_>,
) -> u64 {
    let now = est(st, coster);
    if now <= goal {
        return now;
    }
    let start = proj.first_at(st.boundary);
    // Candidate k folds every unit before index k; the last unit always stays.
    let end = limit.min(proj.units.len().saturating_sub(1));
    if end <= start {
        return now;
    }
    // suffix[j]: units from start + j on; kept[j]: the kept ones among start..start + j (they
    // stay in place when folded past).
    let costs: Vec<u64> = (start..proj.units.len())
        .map(|i| coster.unit(proj, i, st))
        .collect();
    let mut suffix = vec![0u64; costs.len() + 1];
    for j in (0..costs.len()).rev() {
        suffix[j] = suffix[j + 1] + costs[j];
    }
    let mut kept = vec![0u64; costs.len() + 1];
    for j in 0..costs.len() {
        let stays = if proj.is_kept(start + j) { costs[j] } else { 0 };
        kept[j + 1] = kept[j] + stays;
    }
    // What does not move with the boundary: overhead and the kept units before `start`.
    let base = now - suffix[0] - coster.block(proj, st, summary);
    let at = |k: usize, st: &mut CompactionState, coster: &mut Coster<'_>| {
        st.boundary = proj.units[k].seq;
        let j = k - start;
        base + kept[j] + suffix[j] + coster.block(proj, st, summary)
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
