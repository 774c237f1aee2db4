//! Tool-result retention: the per-tool rules (count, age, never evict), results superseded by a
//! later run of the identical call, and the eager rules that apply on every render (results over
//! the oversized share once answered, browser snapshots a newer one supersedes, pages and the
//! outputs of calls made again sent as diffs).
//!
//! An expired result renders as its step's observation plus `outcome_ref`: the call stays, the
//! pairing stays.

use std::collections::HashMap;

use super::{Cx, Goal};
use crate::event::Seq;
use crate::event::ToolOutput;
use crate::render::cost::{fingerprint, Coster, Eager};
use crate::render::diff::DiffOf;
use crate::render::hash::FxBuild;
use crate::render::layout;
use crate::render::policy::{Budget, Policy, Retention};
use crate::render::projection::{Paired, Projection, UnitBody};
use crate::render::request::ResultForm;
use crate::render::state::{CompactionState, CutRule};

/// The retention reducer: results its tool's rule has expired, and results superseded by a later
/// run of the identical call (same tool, same arguments), whose output is newer. Rules are rules:
/// it applies whatever the goal.
pub(super) fn reduce(
    proj: &Projection,
    _goal: &Goal<'_>,
    mut st: CompactionState,
    cx: &mut Cx<'_, '_>,
) -> CompactionState {
    apply_retention(proj, cx.policy, &mut st);
    supersede_repeats(proj, cx.policy, &mut st);
    cx.now = cx.estimate(proj, &st);
    st
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
            if !seen.insert(key) && !never && st.stubbed.insert(r.seq) {
                st.cut_by(r.seq, CutRule::Repeated);
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
            if expired && st.stubbed.insert(r.seq) {
                st.cut_by(r.seq, CutRule::Retention);
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
    let mut base = progress.base;
    let mut superseded: Vec<Seq> = Vec::new();
    let mut changed = false;
    for (index, unit) in proj.units.iter().enumerate().skip(progress.from) {
        let UnitBody::Turn(turn) = &unit.body else {
            continue;
        };
        for (c, paired) in turn.calls.iter().enumerate() {
            let Some(r) = &paired.result else { continue };
            if !snapshot(&paired.call.id) {
                // Only outputs no request has held yet (the newest turn's): what was sent whole
                // stays as it was sent. Nothing sent changes, so this is no compaction point.
                // Only once the session has needed a point: while everything fits, the request
                // is the history as it happened.
                if policy.output_diffs
                    && st.points > 0
                    && index == last_turn
                    && evictable(&paired.call.name)
                    && layout::sent_whole(st, r.seq)
                {
                    if let Some(b) = earlier_run(proj, st, index, c) {
                        if output_diff_pays(proj, policy, b, paired) {
                            // Sent as its changes; the earlier output stays, byte-stable.
                            st.diffed.insert(r.seq, b);
                        }
                    }
                }
                continue;
            }
            if newest.is_some_and(|n| n >= r.seq) {
                continue;
            }
            let evictable = evictable(&paired.call.name);
            if policy.page_diffs && evictable {
                if let Some(b) = base.filter(|&b| layout::sent_whole(st, b)) {
                    if st.diffed.get(&r.seq) == Some(&b) || diff_pays(proj, policy, b, paired) {
                        // Sent as its changes; the page sent whole stays, byte-stable.
                        changed |= st.diffed.insert(r.seq, b).is_none();
                        newest = Some(r.seq);
                        continue;
                    }
                }
                // A new page sent whole: the old one and the diffs against it are superseded.
                superseded.extend(base);
                superseded.extend(
                    st.diffed
                        .iter()
                        .filter(|&(&page, &against)| Some(against) == base && page != r.seq)
                        .map(|(&page, _)| page),
                );
                changed |= st.diffed.remove(&r.seq).is_some();
                base = Some(r.seq);
                newest = Some(r.seq);
                continue;
            }
            superseded.extend(newest);
            newest = evictable.then_some(r.seq);
        }
    }
    // Folded results are rendered as their compact lines whatever their form: only results in
    // place are decided about.
    for seq in superseded {
        st.diffed.remove(&seq);
        if seq >= st.boundary && !st.elided.contains(&seq) && st.stubbed.insert(seq) {
            st.cut_by(seq, CutRule::Superseded);
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
            // The page sent whole that later pages are diffs of stays while it is their base.
            if st.stubbed.contains(&r.seq)
                || st.elided.contains(&r.seq)
                || base == Some(r.seq)
                || !evictable(&paired.call.name)
            {
                continue;
            }
            // A result sent as a diff is measured as its diff.
            let form = match layout::form_of(paired, st) {
                ResultForm::Diff => ResultForm::Diff,
                _ => ResultForm::Verbatim,
            };
            let tokens = coster.result(proj, st, i, c, form);
            // The latest view of a file is what the agent edits or rewrites from: it waits for
            // a compaction point, which cuts it first unless the agent is editing that file.
            let view = tokens <= budget.oversized.saturating_mul(2)
                && latest_view(proj, coster.steps, i, &paired.call.id);
            if tokens > budget.oversized && !view {
                st.stubbed.insert(r.seq);
                st.cut_by(r.seq, CutRule::Oversized);
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
        base,
    });
    changed
}

/// Whether the call `call_id` of unit `index` read a file that no later call reads again.
fn latest_view(
    proj: &Projection,
    steps: &crate::render::layout::StepIndex,
    index: usize,
    call_id: &str,
) -> bool {
    let Some(path) = steps.get(call_id).and_then(super::stub::read_path) else {
        return false;
    };
    !proj.units[index + 1..].iter().any(|u| match &u.body {
        UnitBody::Turn(turn) => turn
            .calls
            .iter()
            .any(|p| steps.get(&p.call.id).and_then(super::stub::read_path) == Some(path)),
        _ => false,
    })
}

/// Whether the page `paired` is smaller as its diff against the page at `base` than
/// `page_diff_share` of itself.
fn diff_pays(proj: &Projection, policy: &Policy, base: Seq, paired: &Paired) -> bool {
    smaller_as_diff(proj, DiffOf::Page, policy.page_diff_share, base, paired)
}

/// Whether the output `paired` is smaller as its diff against the output at `base` than
/// `output_diff_share` of itself.
fn output_diff_pays(proj: &Projection, policy: &Policy, base: Seq, paired: &Paired) -> bool {
    smaller_as_diff(proj, DiffOf::Output, policy.output_diff_share, base, paired)
}

fn smaller_as_diff(proj: &Projection, of: DiffOf, share: f64, base: Seq, paired: &Paired) -> bool {
    let base = proj.result_at(base).and_then(|p| p.result.as_ref());
    let (Some(base), Some(new)) = (base, paired.result.as_ref()) else {
        return false;
    };
    let (ToolOutput::Text(base_text), ToolOutput::Text(new_text)) = (&base.output, &new.output)
    else {
        return false;
    };
    crate::render::diff::diff(of, base_text, new_text, base.seq, "")
        .is_some_and(|d| (d.len() as f64) <= share * new_text.len() as f64)
}

/// The result seq of the latest earlier run of call `c` of unit `index` (same tool, same
/// arguments) whose output is still sent in place and whole, if any.
fn earlier_run(proj: &Projection, st: &CompactionState, index: usize, c: usize) -> Option<Seq> {
    let UnitBody::Turn(turn) = &proj.units[index].body else {
        return None;
    };
    let call = &turn.calls[c].call;
    let first = proj.first_at(st.boundary);
    if index < first {
        return None;
    }
    let earlier_in_unit = turn.calls[..c].iter().rev();
    let earlier_units = proj.units[first..index]
        .iter()
        .rev()
        .filter_map(|u| match &u.body {
            UnitBody::Turn(t) => Some(t.calls.iter().rev()),
            _ => None,
        })
        .flatten();
    earlier_in_unit
        .chain(earlier_units)
        .filter(|p| p.call.name == call.name && p.call.arguments == call.arguments)
        .filter_map(|p| p.result.as_ref())
        .map(|r| r.seq)
        .find(|&seq| layout::sent_whole(st, seq))
}
