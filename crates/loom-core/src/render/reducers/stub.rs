//! Step compaction in cache-stable mode, inside the verbatim tail: old results become their
//! step's observation plus reference, and old turns that made calls lose their text, outside the
//! protected recent turns. Nothing is reordered, so the tail keeps its shape.
//!
//! What goes first is decided by value per token, not by age alone: large outputs that say
//! little per token (listings, searches, test and build logs, whole-file views the agent is no
//! longer working on) are stubbed first, then the text of old turns is thinned, then other
//! results, oldest first; small code reads and the latest view of a file the agent is still
//! editing go last.

use std::collections::{HashMap, HashSet};

use super::{Cx, Goal};
use crate::event::Seq;
use crate::render::hash::FxBuild;
use crate::render::policy::{Retention, Tier};
use crate::render::projection::{Projection, UnitBody};
use crate::render::request::ResultForm;
use crate::render::state::{CompactionState, CutRule};
use crate::step::{Step, ToolKind};

/// How much a result is worth keeping per token: the order a compaction point cuts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Worth {
    /// A large output that says little per token: stubbed first.
    Low,
    /// Thinning old turns' text comes between the low and the ordinary results.
    Text,
    /// Everything else, oldest first.
    Ordinary,
    /// A small code read, or the latest view of a file the agent is still editing: cut last.
    Kept,
}

/// One cut a point may make.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// Stub the result at this seq (in unit `index`).
    Stub { index: usize, seq: Seq },
    /// Thin the turn at unit `index`.
    Thin { index: usize },
}

/// Turns before the newest in which a file written counts as still being worked on.
const WORKING_TURNS: usize = 10;

/// The path a step read or wrote, when it names one.
fn path_of(step: &Step) -> Option<&str> {
    step.minimal_args.get("path").and_then(|v| v.as_str())
}

/// The path a step read, when it is a file view.
pub(super) fn read_path(step: &Step) -> Option<&str> {
    (step.kind == ToolKind::ReadFile)
        .then(|| path_of(step))
        .flatten()
}

/// Paths the agent wrote in its last [`WORKING_TURNS`] turns: the files it is still working on.
fn working_paths<'p>(
    proj: &Projection,
    steps: &'p crate::render::layout::StepIndex,
) -> HashSet<&'p str, FxBuild> {
    let mut out: HashSet<&str, FxBuild> = HashSet::default();
    let turns = proj.units.iter().rev().filter_map(|u| match &u.body {
        UnitBody::Turn(t) => Some(t),
        _ => None,
    });
    for turn in turns.take(WORKING_TURNS) {
        for p in &turn.calls {
            if let Some(step) = steps.get(&p.call.id) {
                if step.kind == ToolKind::WriteFile {
                    out.extend(path_of(step));
                }
            }
        }
    }
    out
}

/// Stubs and thins by value per token until the request is at the goal and tool results are
/// within their tier cap. A result that `never_evict` protects, or whose stub would not be
/// smaller, stays verbatim.
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
    let cuts = plan_cuts(proj, goal, &st, cx);
    for (worth, cut) in cuts {
        // Tier caps are on results: once only the cap is exceeded, thinning helps nothing.
        if worth == Worth::Text && cx.now <= goal.tokens {
            continue;
        }
        let index = cut.index();
        let before = cx.coster.unit(proj, index, &st);
        if !cut.apply(proj, &mut st, true) {
            continue;
        }
        let after = cx.coster.unit(proj, index, &st);
        if after >= before {
            // Cutting a tiny result saves nothing; keep it verbatim.
            cut.apply(proj, &mut st, false);
            continue;
        }
        cx.now = cx.now - before + after;
        results = results.map(|r| r.saturating_sub(before - after));
        st.cut_by(cut.seq(proj), worth.rule());
        if cx.now <= goal.tokens && !over_cap(results) {
            break;
        }
    }
    cx.now = cx.estimate(proj, &st);
    st
}

impl Worth {
    /// The rule a cut of this worth is recorded under.
    fn rule(self) -> CutRule {
        match self {
            Self::Low => CutRule::LowDensity,
            Self::Text => CutRule::Thinned,
            Self::Ordinary => CutRule::Oldest,
            Self::Kept => CutRule::LastKept,
        }
    }
}

impl Cut {
    /// The seq the cut is recorded at: the result's, or the turn's.
    fn seq(self, proj: &Projection) -> Seq {
        match self {
            Self::Stub { seq, .. } => seq,
            Self::Thin { index } => proj.units[index].seq,
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Stub { index, .. } | Self::Thin { index } => index,
        }
    }

    /// Makes (`on`) or undoes the cut; whether making it changed anything.
    fn apply(self, proj: &Projection, st: &mut CompactionState, on: bool) -> bool {
        let (set, seq) = match self {
            Self::Stub { seq, .. } => (&mut st.stubbed, seq),
            Self::Thin { index } => (&mut st.thinned, proj.units[index].seq),
        };
        if on {
            set.insert(seq)
        } else {
            set.remove(&seq)
        }
    }
}

/// The cuts a point may make between the boundary and the protected turns, in the order it
/// makes them: by worth, then oldest first.
fn plan_cuts(
    proj: &Projection,
    goal: &Goal<'_>,
    st: &CompactionState,
    cx: &mut Cx<'_, '_>,
) -> Vec<(Worth, Cut)> {
    let steps = cx.coster.steps;
    let working = working_paths(proj, steps);
    // A read of this size or less is a small code read; a whole-file view is over `large`.
    let small = goal.budget.target / 16;
    let large = goal.budget.target / 8;
    // The latest read of each path in place, by result seq.
    let mut latest_read: HashMap<&str, Seq, FxBuild> = HashMap::default();
    let start = proj.first_at(st.boundary);
    for unit in &proj.units[start..] {
        let UnitBody::Turn(turn) = &unit.body else {
            continue;
        };
        for p in &turn.calls {
            let (Some(r), Some(step)) = (&p.result, steps.get(&p.call.id)) else {
                continue;
            };
            if let Some(path) = read_path(step) {
                latest_read.insert(path, r.seq);
            }
        }
    }
    let mut cuts = Vec::new();
    for i in start..cx.protected {
        let unit = &proj.units[i];
        let UnitBody::Turn(turn) = &unit.body else {
            continue;
        };
        let has_text = turn.content.is_some() || turn.native.is_some();
        if !turn.calls.is_empty() && has_text && !st.thinned.contains(&unit.seq) {
            cuts.push((Worth::Text, Cut::Thin { index: i }));
        }
        for (c, paired) in turn.calls.iter().enumerate() {
            let Some(r) = &paired.result else { continue };
            if matches!(
                cx.policy.retention_for(&paired.call.name),
                Retention::NeverEvict
            ) || st.stubbed.contains(&r.seq)
            {
                continue;
            }
            let tokens = cx.coster.result(proj, st, i, c, ResultForm::Verbatim);
            let worth = match steps.get(&paired.call.id) {
                Some(step) => match step.kind {
                    ToolKind::ReadFile => {
                        let path = path_of(step);
                        let latest = path.is_some_and(|p| latest_read.get(p) == Some(&r.seq));
                        let editing = latest && path.is_some_and(|p| working.contains(p));
                        if editing || tokens <= small {
                            Worth::Kept
                        } else if tokens > large {
                            Worth::Low
                        } else {
                            Worth::Ordinary
                        }
                    }
                    ToolKind::ListDir | ToolKind::Grep | ToolKind::Shell | ToolKind::WebSearch
                        if tokens > small / 4 =>
                    {
                        Worth::Low
                    }
                    _ => Worth::Ordinary,
                },
                None => Worth::Ordinary,
            };
            cuts.push((
                worth,
                Cut::Stub {
                    index: i,
                    seq: r.seq,
                },
            ));
        }
    }
    // Stable: within a worth, oldest first.
    cuts.sort_by_key(|(w, _)| *w);
    cuts
}
