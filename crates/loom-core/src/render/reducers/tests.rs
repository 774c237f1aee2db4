//! Each reducer on its own: a projection, a goal and a state in, a state out.

use std::collections::{BTreeMap, HashMap};

use super::*;
use crate::event::{Event, EventBody, ToolCall, ToolOutput};
use crate::render::cost::CostMemo;
use crate::render::format::Format;
use crate::render::meter::ApproxMeter;
use crate::render::policy::Retention;
use crate::render::projection::{Audience, UnitBody};
use crate::render::StepIndex;
use crate::stats::ContentStats;

/// A log: system prompt, task, then one call per `(tool, output words)`, each answered.
fn log(calls: &[(&str, usize)]) -> Vec<Event> {
    let mut events = Vec::new();
    let mut push = |body: EventBody| {
        let seq = events.len() as Seq + 1;
        events.push(Event {
            seq,
            ts_ms: seq as i64,
            body,
        });
    };
    push(EventBody::System {
        content: "You are an agent.".into(),
    });
    push(EventBody::User {
        content: "Fix the parser.".into(),
        name: None,
    });
    for (i, (tool, words)) in calls.iter().enumerate() {
        let id = format!("c{i}");
        push(EventBody::Assistant {
            content: Some(format!("step {i}").into()),
            reasoning: None,
            tool_calls: vec![ToolCall {
                id: id.clone(),
                name: (*tool).into(),
                arguments: format!("{{\"n\":{i}}}"),
            }],
            name: None,
            native: None,
        });
        let out: String = (0..*words).map(|w| format!("w{i}_{w} ")).collect();
        push(EventBody::ToolResult {
            call_id: id,
            tool_name: (*tool).into(),
            stats: ContentStats::of(out.as_bytes()),
            content: ToolOutput::Text(out),
            is_error: false,
        });
    }
    events
}

fn project(events: &[Event]) -> Projection {
    Projection::build(
        events,
        &Audience {
            agent: None,
            now_ms: 0,
        },
    )
}

/// Runs one reducer from `state` with the estimate it would be handed in the pipeline.
fn run(
    reducer: Reducer,
    events: &[Event],
    policy: &Policy,
    goal: u64,
    state: CompactionState,
) -> (CompactionState, u64) {
    run_with(reducer, events, policy, &[], goal, state)
}

/// [`run`], with the session's summaries.
fn run_with(
    reducer: Reducer,
    events: &[Event],
    policy: &Policy,
    summaries: &[SummaryView],
    goal: u64,
    state: CompactionState,
) -> (CompactionState, u64) {
    let proj = project(events);
    let steps: StepIndex = HashMap::new();
    let mut memo = CostMemo::new();
    let mut coster = Coster::new(Format::OPENAI_CHAT, &ApproxMeter, &steps, policy, &mut memo);
    let budget = policy.budget();
    let mut cx = Cx {
        policy,
        summaries,
        overhead: 0,
        coster: &mut coster,
        protected: proj.recent_turns_start(policy.protect_recent_turns),
        now: 0,
    };
    cx.now = cx.estimate(&proj, &state);
    let goal = Goal {
        tokens: goal,
        budget: &budget,
    };
    let out = reducer(&proj, &goal, state, &mut cx);
    let now = cx.now;
    assert_eq!(
        now,
        cx.estimate(&proj, &out),
        "the reducer left a stale estimate"
    );
    (out, now)
}

/// Result seqs of the calls, in order.
fn result_seqs(events: &[Event]) -> Vec<Seq> {
    events
        .iter()
        .filter(|e| matches!(e.body, EventBody::ToolResult { .. }))
        .map(|e| e.seq)
        .collect()
}

#[test]
fn retention_counts_per_tool_and_spares_never_evict() {
    let events = log(&[
        ("bash", 5),
        ("read", 5),
        ("bash", 5),
        ("bash", 5),
        ("read", 5),
    ]);
    let policy = Policy {
        default_retention: Retention::NeverEvict,
        retention: BTreeMap::from([("bash".to_owned(), Retention::Count { n: 1 })]),
        ..Policy::default()
    };
    let (st, _) = run(
        retention::reduce,
        &events,
        &policy,
        u64::MAX,
        CompactionState::default(),
    );
    let r = result_seqs(&events);
    // The two older bash results expire; the newest bash result and every read stay.
    assert_eq!(st.stubbed.iter().copied().collect::<Vec<_>>(), [r[0], r[2]]);
}

#[test]
fn retention_by_age_expires_results_older_than_k_turns() {
    let events = log(&[("bash", 5), ("bash", 5), ("bash", 5)]);
    let policy = Policy {
        default_retention: Retention::Age { turns: 2 },
        ..Policy::default()
    };
    let (st, _) = run(
        retention::reduce,
        &events,
        &policy,
        u64::MAX,
        CompactionState::default(),
    );
    assert_eq!(
        st.stubbed.iter().copied().collect::<Vec<_>>(),
        [result_seqs(&events)[0]]
    );
}

#[test]
fn stubbing_stops_at_the_goal_and_never_touches_protected_turns() {
    let events = log(&[("bash", 200), ("bash", 200), ("bash", 200), ("bash", 200)]);
    let policy = Policy {
        protect_recent_turns: 2,
        ..Policy::default()
    };
    let (full, _) = run(stub::reduce, &events, &policy, u64::MAX, Default::default());
    assert!(full.stubbed.is_empty(), "under the goal nothing changes");
    let (_, before) = run(stub::reduce, &events, &policy, u64::MAX, Default::default());
    // A goal just under the full size: stubbing the oldest result is enough.
    let (st, now) = run(
        stub::reduce,
        &events,
        &policy,
        before - 10,
        Default::default(),
    );
    let r = result_seqs(&events);
    assert_eq!(st.stubbed.iter().copied().collect::<Vec<_>>(), [r[0]]);
    assert!(now <= before - 10);
    // A goal nothing reaches: only the unprotected results are stubbed.
    let (st, _) = run(stub::reduce, &events, &policy, 0, Default::default());
    assert_eq!(st.stubbed.iter().copied().collect::<Vec<_>>(), [r[0], r[1]]);
}

#[test]
fn the_window_folds_whole_units_and_keeps_system_task_and_protected_turns() {
    let events = log(&[("bash", 200), ("bash", 200), ("bash", 200), ("bash", 200)]);
    let policy = Policy {
        protect_recent_turns: 1,
        ..Policy::default()
    };
    let (st, _) = run(window::reduce, &events, &policy, 0, Default::default());
    let proj = project(&events);
    // The boundary opens a unit: no unit is cut in half, and no result is parted from its call.
    let at = proj.first_at(st.boundary);
    assert_eq!(proj.units[at].seq, st.boundary);
    // Everything before the newest turn is folded; the system prompt and the task stay in place.
    assert_eq!(at, proj.recent_turns_start(1));
    assert!(matches!(proj.units[0].body, UnitBody::System(_)));
    assert_eq!(proj.kept_before(at), [0, 1]);
}

#[test]
fn the_summary_replaces_what_it_covers_only_outside_the_protected_turns() {
    let events = log(&[("bash", 50), ("bash", 50), ("bash", 50)]);
    let policy = Policy {
        protect_recent_turns: 1,
        ..Policy::default()
    };
    let proj = project(&events);
    let protected_seq = proj.units[proj.recent_turns_start(1)].seq;
    let summaries = [
        SummaryView {
            version: 1,
            to_seq: 4,
            content: "turn one".into(),
        },
        SummaryView {
            version: 2,
            to_seq: protected_seq,
            content: "reaches into the protected turn".into(),
        },
    ];
    let (st, _) = run_with(
        summary::reduce,
        &events,
        &policy,
        &summaries,
        0,
        Default::default(),
    );
    assert_eq!(st.summary, Some((1, 4)));
    assert_eq!(st.boundary, 5);
}

#[test]
fn the_newest_result_is_elided_before_it_is_stubbed() {
    let events = log(&[("bash", 2_000)]);
    let policy = Policy::default();
    let (_, full) = run(
        emergency::reduce_newest,
        &events,
        &policy,
        u64::MAX,
        Default::default(),
    );
    let newest = *result_seqs(&events).last().unwrap();
    let (st, now) = run(
        emergency::reduce_newest,
        &events,
        &policy,
        full / 2,
        Default::default(),
    );
    assert!(st.elided.contains(&newest) && !st.stubbed.contains(&newest));
    assert!(now <= full / 2);
    let (st, _) = run(
        emergency::reduce_newest,
        &events,
        &policy,
        1,
        Default::default(),
    );
    assert!(st.stubbed.contains(&newest) && !st.elided.contains(&newest));
}
