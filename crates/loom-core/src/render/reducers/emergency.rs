//! The last resorts, for a request still over the hard total after the free reducers: every
//! request fits, so these cut into what is normally protected — but never drop what the
//! provider needs for a valid request, and never the newest unit's call or its result's
//! reference.

use super::{Cx, Goal};
use crate::event::{Seq, ToolOutput};
use crate::render::projection::{Projection, UnitBody};
use crate::render::state::{CompactionState, CutRule};

/// Stubs the protected turns' results, oldest first (never the newest unit's).
pub(super) fn stub_protected(
    proj: &Projection,
    goal: &Goal<'_>,
    mut st: CompactionState,
    cx: &mut Cx<'_, '_>,
) -> CompactionState {
    let last = proj.units.len().saturating_sub(1);
    for i in cx.protected..last {
        let UnitBody::Turn(turn) = &proj.units[i].body else {
            continue;
        };
        for paired in &turn.calls {
            if let Some(r) = &paired.result {
                if st.stubbed.insert(r.seq) {
                    st.cut_by(r.seq, CutRule::LastResort);
                }
                cx.now = cx.estimate(proj, &st);
                if cx.now <= goal.tokens {
                    return st;
                }
            }
        }
    }
    st
}

/// The newest unit's results that are text, with their length in characters: what the model
/// is about to read, cut last and least.
pub(super) fn newest_texts(proj: &Projection) -> Vec<(Seq, usize)> {
    match proj.units.last().map(|u| &u.body) {
        Some(UnitBody::Turn(turn)) => turn
            .calls
            .iter()
            .filter_map(|p| p.result.as_ref())
            .filter_map(|r| match &r.output {
                ToolOutput::Text(s) => Some((r.seq, s.chars().count())),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Elides the newest unit's whole results, each keeping as much of its head and tail as lets
/// the request land at the low watermark (never less than the policy's head and tail): what the
/// model reads now is cut no further than the budget needs, and earlier turns are folded only
/// when even the policy's head and tail do not fit.
pub(super) fn elide_newest(
    proj: &Projection,
    goal: &Goal<'_>,
    mut st: CompactionState,
    cx: &mut Cx<'_, '_>,
) -> CompactionState {
    for (seq, chars) in newest_texts(proj) {
        if cx.now <= goal.tokens {
            break;
        }
        if st.stubbed.contains(&seq) || !st.elided.insert(seq) {
            continue;
        }
        cx.now = cx.estimate(proj, &st);
        st = grow(proj, goal.budget.low.min(goal.tokens), st, cx, seq, chars);
    }
    st
}

/// Lets the newest unit's elided results keep more, as long as the request stays at or under
/// the low watermark (and the goal): after the other last resorts made room, what the model
/// reads now gets it back.
pub(super) fn grow_newest(
    proj: &Projection,
    goal: &Goal<'_>,
    mut st: CompactionState,
    cx: &mut Cx<'_, '_>,
) -> CompactionState {
    for (seq, chars) in newest_texts(proj) {
        if st.elided.contains(&seq) && !st.stubbed.contains(&seq) {
            st = grow(proj, goal.budget.low.min(goal.tokens), st, cx, seq, chars);
        }
    }
    st
}

/// Characters a sized elision is searched to within: finer steps would cost estimates and
/// change the request by a few tokens.
const GROW_STEP: usize = 256;

/// The most of the elided result at `seq` (of `chars` characters) that keeps the request at or
/// under `target`, found by bisection on the characters kept.
fn grow(
    proj: &Projection,
    target: u64,
    mut st: CompactionState,
    cx: &mut Cx<'_, '_>,
    seq: Seq,
    chars: usize,
) -> CompactionState {
    let base = cx.coster.head_chars + cx.coster.tail_chars;
    let kept = st.elided_chars.get(&seq).map_or(base, |&k| k as usize);
    if cx.now >= target || chars <= kept + GROW_STEP {
        return st;
    }
    // `fits` keeps the request under the target; `over` does not (keeping every character is
    // no elision at all).
    let (mut fits, mut over) = (kept, chars);
    while over - fits > GROW_STEP {
        let mid = fits + (over - fits) / 2;
        st.elided_chars
            .insert(seq, u32::try_from(mid).unwrap_or(u32::MAX));
        if cx.estimate(proj, &st) <= target {
            fits = mid;
        } else {
            over = mid;
        }
    }
    if fits > base {
        st.elided_chars
            .insert(seq, u32::try_from(fits).unwrap_or(u32::MAX));
    } else {
        st.elided_chars.remove(&seq);
    }
    cx.now = cx.estimate(proj, &st);
    st
}

/// Folds the protected turns too, up to (never including) the newest unit.
pub(super) fn fold_to_last(
    proj: &Projection,
    goal: &Goal<'_>,
    mut st: CompactionState,
    cx: &mut Cx<'_, '_>,
) -> CompactionState {
    let last = proj.units.len().saturating_sub(1);
    cx.now = super::window::fold_until(proj, &mut st, last, goal.tokens, cx);
    st
}

/// Empties the compact block of its lines (failures included): its header, the summary and
/// the omitted count stay, and every original is still recoverable from the log.
pub(super) fn shrink_block(
    proj: &Projection,
    goal: &Goal<'_>,
    mut st: CompactionState,
    cx: &mut Cx<'_, '_>,
) -> CompactionState {
    if cx.now > goal.tokens && st.boundary > 0 {
        st.block_lines = Some(0);
        cx.now = cx.estimate(proj, &st);
    }
    st
}

/// Reduces the newest unit's own results: head and tail with an elision marker and the
/// reference first, observation plus reference if even that is too big.
pub(super) fn reduce_newest(
    proj: &Projection,
    goal: &Goal<'_>,
    mut st: CompactionState,
    cx: &mut Cx<'_, '_>,
) -> CompactionState {
    let newest: Vec<Seq> = match proj.units.last().map(|u| &u.body) {
        Some(UnitBody::Turn(turn)) => turn
            .calls
            .iter()
            .filter_map(|p| p.result.as_ref().map(|r| r.seq))
            .collect(),
        _ => return st,
    };
    for &seq in &newest {
        if cx.now <= goal.tokens {
            return st;
        }
        if !st.stubbed.contains(&seq) {
            st.elided.insert(seq);
            cx.now = cx.estimate(proj, &st);
        }
    }
    for &seq in &newest {
        if cx.now <= goal.tokens {
            return st;
        }
        st.elided.remove(&seq);
        st.elided_chars.remove(&seq);
        st.stubbed.insert(seq);
        st.cut_by(seq, CutRule::LastResort);
        cx.now = cx.estimate(proj, &st);
    }
    st
}

/// Last of all, a task statement too large for the budget keeps its head and tail (it is still
/// in the log at its seq): never dropped, but never the reason a request is refused.
pub(super) fn elide_task(
    proj: &Projection,
    goal: &Goal<'_>,
    mut st: CompactionState,
    cx: &mut Cx<'_, '_>,
) -> CompactionState {
    if cx.now <= goal.tokens {
        return st;
    }
    if let Some(first) = proj.first_user.and_then(|i| proj.units.get(i)) {
        st.elided.insert(first.seq);
        cx.now = cx.estimate(proj, &st);
    }
    st
}
