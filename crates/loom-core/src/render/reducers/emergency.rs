//! The last resorts, for a request still over the hard total after the free reducers: every
//! request fits, so these cut into what is normally protected — but never drop what the
//! provider needs for a valid request, and never the newest unit's call or its result's
//! reference.

use super::{Cx, Goal};
use crate::event::Seq;
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
