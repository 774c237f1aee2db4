//! The summary reducer: the latest summary that ends before the protected turns replaces the
//! events it covers, and the verbatim tail follows it.

use super::{Cx, Goal};
use crate::render::projection::Projection;
use crate::render::state::CompactionState;

/// Adopts the latest applicable summary when the cheaper reducers were not enough: it covers
/// `[1, to_seq]`, so the boundary moves past `to_seq`.
pub(super) fn reduce(
    proj: &Projection,
    goal: &Goal<'_>,
    mut st: CompactionState,
    cx: &mut Cx<'_, '_>,
) -> CompactionState {
    if cx.now <= goal.tokens {
        return st;
    }
    let protected = proj.units.get(cx.protected).map(|u| u.seq);
    let latest = cx
        .summaries
        .iter()
        .filter(|s| protected.is_none_or(|seq| s.to_seq < seq))
        .max_by_key(|s| s.version);
    if let Some(s) = latest {
        if st.summary.is_none_or(|(v, _)| v < s.version) {
            st.summary = Some((s.version, s.to_seq));
            st.boundary = st.boundary.max(s.to_seq + 1);
            cx.now = cx.estimate(proj, &st);
        }
    }
    st
}
