//! Compaction points: when the prefix may change, and the reducers that decide what changes.
//!
//! Between compaction points the decision in [`CompactionState`] is fixed, so each request only
//! grows at its end and the provider's prompt cache keeps hitting (DESIGN.md, principle 6). A
//! point fires when the estimate crosses the high watermark; the free reducers then cut down to
//! the low watermark in one step, cheap to expensive. When even that leaves the request over the
//! hard total, the last resorts cut into what is normally protected.
//!
//! Every reducer has one shape, [`Reducer`]: `reduce(projection, goal, state) -> state`. The
//! projection itself is never rewritten — it holds each call with its result, so no reducer can
//! break a pair — and a reducer's decisions (stub this result, fold before that seq, adopt that
//! summary) live in the state; the reduced projection is the pair of the two, and that is what
//! the next reducer reads. The goal carries the token target and the budget with its per-tier
//! caps. Decisions are sticky: stubbed results stay stubbed and folded turns stay folded.

mod emergency;
mod retention;
mod stub;
mod summary;
#[cfg(test)]
mod tests;
mod window;

pub(crate) use retention::expire_oversized;

use super::cost::Coster;
use super::layout::SummaryView;
use super::policy::{Budget, Policy};
use super::projection::Projection;
use super::state::{CompactionState, PointReason, PointRecord};
use crate::event::Seq;

/// What a reducer cuts down to: a token target for the whole request, and the budget whose
/// per-tier caps it also honours.
pub(crate) struct Goal<'b> {
    /// Tokens the request should come down to.
    pub(crate) tokens: u64,
    /// The budget (tier caps included).
    pub(crate) budget: &'b Budget,
}

/// What every reducer reads besides the projection: the policy, the summaries, the costs of
/// units under decisions, and the estimate of the state it is handed.
pub(crate) struct Cx<'c, 'm> {
    pub(crate) policy: &'c Policy,
    pub(crate) summaries: &'c [SummaryView],
    pub(crate) overhead: u64,
    pub(crate) coster: &'c mut Coster<'m>,
    /// Index of the first unit of the protected recent turns.
    pub(crate) protected: usize,
    /// The estimate of the state the current reducer was handed; each reducer leaves it equal
    /// to the estimate of the state it returns.
    pub(crate) now: u64,
}

impl Cx<'_, '_> {
    /// Tokens of the whole request under `state`.
    pub(crate) fn estimate(&mut self, proj: &Projection, state: &CompactionState) -> u64 {
        self.overhead
            + self
                .coster
                .total(proj, state, summary_in(self.summaries, state))
    }
}

/// One reducer: a pure function of the projection, the goal and the state it is handed.
pub(crate) type Reducer =
    fn(&Projection, &Goal<'_>, CompactionState, &mut Cx<'_, '_>) -> CompactionState;

/// The free reducers, cheap to expensive, cutting down to the low watermark. Retention rules
/// always apply; the others act only while the estimate (or a tier) is over the goal.
const FREE: [Reducer; 4] = [
    retention::reduce,
    stub::reduce,
    window::reduce,
    summary::reduce,
];

/// The last resorts, run only when the request is still over the hard total: they cut into the
/// protected recent turns, the compact block, the newest results and the task statement, and
/// never drop what the provider needs for a valid request.
const LAST_RESORTS: [Reducer; 6] = [
    emergency::stub_protected,
    emergency::elide_newest,
    emergency::fold_to_last,
    emergency::shrink_block,
    emergency::reduce_newest,
    emergency::elide_task,
];

/// What [`plan`] needs besides the projection.
pub(crate) struct PlanInput<'p> {
    pub(crate) policy: &'p Policy,
    pub(crate) budget: &'p Budget,
    pub(crate) overhead: u64,
    pub(crate) summaries: &'p [SummaryView],
    /// What the messages may take: the hard total less the turn's injected content.
    pub(crate) room: u64,
    pub(crate) at_seq: Seq,
    pub(crate) reason: PointReason,
}

/// Takes one compaction point: runs the reducers and returns the new sticky decision.
pub(crate) fn plan(
    proj: &Projection,
    prev: &CompactionState,
    input: &PlanInput<'_>,
    coster: &mut Coster<'_>,
) -> CompactionState {
    let mut st = prev.clone();
    // A sized elision is for what the model reads now: once a newer unit arrived, the result
    // keeps the policy's head and tail like every other.
    let newest = emergency::newest_texts(proj);
    st.elided_chars
        .retain(|seq, _| newest.iter().any(|(s, _)| s == seq));
    // With grouped steps, the boundary as it stands closes every group before it: what this
    // point folds forms groups of its own after them.
    let closes = input.policy.group_steps && prev.boundary > 0 && st.folds.insert(prev.boundary);
    let mut cx = Cx {
        policy: input.policy,
        summaries: input.summaries,
        overhead: input.overhead,
        coster,
        protected: proj.recent_turns_start(input.policy.protect_recent_turns),
        now: 0,
    };
    cx.now = cx.estimate(proj, &st);
    let before = cx.now;

    let low = Goal {
        tokens: input.budget.low,
        budget: input.budget,
    };
    for reducer in FREE {
        st = reducer(proj, &low, st, &mut cx);
    }

    let hard = Goal {
        tokens: input.room,
        budget: input.budget,
    };
    for reducer in LAST_RESORTS {
        if cx.now <= hard.tokens {
            break;
        }
        st = reducer(proj, &hard, st, &mut cx);
    }
    // What the last resorts freed goes back to the newest results, up to the low watermark:
    // the point lands there, not far below it.
    st = emergency::grow_newest(proj, &hard, st, &mut cx);

    if closes && st.boundary == prev.boundary {
        // Nothing was folded: no group was formed, so there is nothing to close — unless
        // reopening changes the block's grouping so that the request no longer fits what the
        // estimates above measured.
        st.folds.remove(&prev.boundary);
        let reopened = cx.estimate(proj, &st);
        if reopened > cx.now {
            st.folds.insert(prev.boundary);
        } else {
            cx.now = reopened;
        }
    }
    // Boundaries the summary covers close nothing any more (it replaces their lines).
    if let Some((_, to)) = st.summary {
        st.folds = st.folds.split_off(&(to + 1));
        cx.now = cx.estimate(proj, &st);
    }
    // Decisions about folded units decide nothing any more: the state keeps what the tail needs.
    // (A result opens after its call, so a result seq before the boundary belongs to a folded
    // turn; the task statement, kept in place, may be elided and stays.)
    st.stubbed = st.stubbed.split_off(&st.boundary);
    st.thinned = st.thinned.split_off(&st.boundary);
    st.rules = st.rules.split_off(&st.boundary);
    st.elided_chars = st.elided_chars.split_off(&st.boundary);
    let stubbed = &st.stubbed;
    st.elided.retain(|seq| !stubbed.contains(seq));
    st.elided_chars.retain(|seq, _| !stubbed.contains(seq));
    st.points += 1;
    // A point that could not reach the low watermark, even with the last resorts, disarms it
    // until the hard total (the breaker).
    let ineffective = cx.now > low.tokens;
    st.last_point = Some(PointRecord {
        at_seq: input.at_seq,
        reason: input.reason,
        before,
        after: cx.now,
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
