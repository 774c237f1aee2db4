//! Step compaction in cache-stable mode, inside the verbatim tail: old results become their
//! step's observation plus reference, and old turns that made calls lose their text, oldest
//! first, outside the protected recent turns. Nothing is reordered, so the tail keeps its shape.

use super::{Cx, Goal};
use crate::render::policy::{Retention, Tier};
use crate::render::projection::{Projection, UnitBody};
use crate::render::state::CompactionState;

/// Stubs old results, oldest first, until the request is at the goal and tool results are within
/// their tier cap. A result that `never_evict` protects, or whose stub would not be smaller,
/// stays verbatim.
pub(super) fn reduce(
    proj: &Projection,
    goal: &Goal<'_>,
    mut st: CompactionState,
    cx: &mut Cx<'_, '_>,
) -> CompactionState {
    let cap = goal.budget.tier_caps.get(&Tier::ToolResults).copied();
    let mut results = cap.map(|_| cx.coster.results(proj, &st));
    let over_cap = |results: Option<u64>| results.zip(cap).is_some_and(|(r, c)| r > c);
    if cx.now <= goal.tokens && !over_cap(results) {
        return st;
    }
    // Kept units hold no results: the walk starts at the boundary.
    'stub: for i in proj.first_at(st.boundary)..cx.protected {
        let UnitBody::Turn(turn) = &proj.units[i].body else {
            continue;
        };
        for paired in &turn.calls {
            let Some(r) = &paired.result else { continue };
            if matches!(
                cx.policy.retention_for(&paired.call.name),
                Retention::NeverEvict
            ) || st.stubbed.contains(&r.seq)
            {
                continue;
            }
            let before = cx.coster.unit(proj, i, &st);
            st.stubbed.insert(r.seq);
            let after = cx.coster.unit(proj, i, &st);
            if after >= before {
                // Stubbing a tiny result saves nothing; keep it verbatim.
                st.stubbed.remove(&r.seq);
                continue;
            }
            cx.now = cx.now - before + after;
            results = results.map(|r| r.saturating_sub(before - after));
            if cx.now <= goal.tokens && !over_cap(results) {
                break 'stub;
            }
        }
    }
    cx.now = cx.estimate(proj, &st);
    st
}

/// Drops the text (and provider-native reasoning) of old turns that made calls, oldest first: the
/// calls, their arguments and their (stubbed) results stay, so what the agent did stays visible.
pub(super) fn thin(
    proj: &Projection,
    goal: &Goal<'_>,
    mut st: CompactionState,
    cx: &mut Cx<'_, '_>,
) -> CompactionState {
    if cx.now <= goal.tokens {
        return st;
    }
    for i in proj.first_at(st.boundary)..cx.protected {
        let unit = &proj.units[i];
        let UnitBody::Turn(turn) = &unit.body else {
            continue;
        };
        let nothing_to_thin = turn.content.is_none() && turn.native.is_none();
        if turn.calls.is_empty() || nothing_to_thin || st.thinned.contains(&unit.seq) {
            continue;
        }
        let before = cx.coster.unit(proj, i, &st);
        st.thinned.insert(unit.seq);
        let after = cx.coster.unit(proj, i, &st);
        cx.now = (cx.now + after).saturating_sub(before);
        if cx.now <= goal.tokens {
            break;
        }
    }
    cx.now = cx.estimate(proj, &st);
    st
}
