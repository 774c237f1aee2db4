//! The sliding window over the dialogue, with step compaction of what it leaves behind: whole
//! units before the boundary are folded into the compact block (one line per step, or per group
//! of steps with `group_steps`), never the protected recent turns, the system prompt, pins or the
//! task statement.

use super::{Cx, Goal};
use crate::render::cost::Coster;
use crate::render::projection::Projection;
use crate::render::state::CompactionState;

/// Folds old units, oldest first, up to the protected turns, until the request is at the goal.
pub(super) fn reduce(
    proj: &Projection,
    goal: &Goal<'_>,
    mut st: CompactionState,
    cx: &mut Cx<'_, '_>,
) -> CompactionState {
    if cx.now > goal.tokens && cx.policy.step_compaction {
        cx.now = fold_until(proj, &mut st, cx.protected, goal.tokens, cx);
    }
    st
}

/// Moves the boundary forward (never past unit `limit`, never folding the last unit) to the
/// first unit at which the estimate is at most `goal`; returns the estimate.
///
/// Folding more almost always shrinks the request, so the boundary is found by binary search:
/// a logarithmic number of estimates per compaction point instead of one per folded unit. A
/// unit's cost does not depend on the boundary, so the units are costed once and each candidate
/// adds sums; only its compact block is built anew.
pub(super) fn fold_until(
    proj: &Projection,
    st: &mut CompactionState,
    limit: usize,
    goal: u64,
    cx: &mut Cx<'_, '_>,
) -> u64 {
    let now = cx.estimate(proj, st);
    if now <= goal {
        return now;
    }
    let summary = super::summary_in(cx.summaries, st);
    let coster = &mut *cx.coster;
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
