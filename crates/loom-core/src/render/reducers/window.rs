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
/// A unit's cost does not depend on the boundary, so the units are costed once and each
/// candidate adds sums; only its compact block is built anew, for as few candidates as the
/// search can manage (see below).
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
    let block_now = coster.block(proj, st, summary);
    let base = now - suffix[0] - block_now;
    let at = |k: usize, st: &mut CompactionState, coster: &mut Coster<'_>| {
        st.boundary = proj.units[k].seq;
        let j = k - start;
        base + kept[j] + suffix[j] + coster.block(proj, st, summary)
    };
    // The units' share is exact and falls as k grows; the block, which each candidate would
    // have to build and count, mostly grows a little. So the first candidate whose units fit
    // beside the block as it stands is where the search starts, walking up a few candidates
    // while the grown block does not fit — a couple of block builds per point instead of a
    // binary search's dozen. Should the block grow faster than folding frees, the search falls
    // back to bisecting the rest.
    let units_fit = |k: usize| base + kept[k - start] + suffix[k - start] + block_now <= goal;
    let (mut lo, mut hi) = (start + 1, end);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if units_fit(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let mut k = lo;
    for _ in 0..4 {
        let e = at(k, st, coster);
        if e <= goal || k == end {
            return e;
        }
        k += 1;
    }
    (lo, hi) = (k, end);
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
