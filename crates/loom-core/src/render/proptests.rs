//! Property tests: for random logs and random policies, every request of every format is valid
//! by its provider's rules and fits its budget — or the pipeline says, with a typed error, that
//! the irreducible floor itself does not fit.
//!
//! `LOOM_PROPTEST_CASES` sets the number of cases (the long mode runs 1,000,000:
//! `LOOM_PROPTEST_CASES=1000000 cargo test --release -p loom-core render::proptests`).

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;
use crate::event::{EventBody, ToolCall, ToolOutput};
use crate::ledger::Ledger;
use crate::stats::ContentStats;

#[derive(Debug, Clone)]
enum Action {
    User(usize),
    Assistant {
        text: Option<usize>,
        calls: usize,
    },
    Results {
        order: Vec<usize>,
        skip_last: bool,
        error: bool,
        words: usize,
    },
    Direct {
        to_me: bool,
        ttl: Option<u64>,
    },
    Pin(usize),
    System(usize),
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        2 => (0usize..80).prop_map(Action::User),
        4 => (proptest::option::of(0usize..60), 0usize..4)
            .prop_map(|(text, calls)| Action::Assistant { text, calls }),
        4 => (proptest::collection::vec(0usize..4, 0..4), any::<bool>(), any::<bool>(), 0usize..900)
            .prop_map(|(order, skip_last, error, words)| Action::Results { order, skip_last, error, words }),
        1 => (any::<bool>(), proptest::option::of(0u64..5))
            .prop_map(|(to_me, ttl)| Action::Direct { to_me, ttl }),
        1 => (0usize..40).prop_map(Action::Pin),
        1 => (0usize..40).prop_map(Action::System),
    ]
}

fn retention() -> impl Strategy<Value = Retention> {
    prop_oneof![
        Just(Retention::Keep),
        Just(Retention::NeverEvict),
        (0u32..4).prop_map(|n| Retention::Count { n }),
        (0u32..4).prop_map(|turns| Retention::Age { turns }),
    ]
}

fn policy() -> impl Strategy<Value = Policy> {
    (
        200u64..12_000,
        0u64..200,
        0.3f64..0.95,
        0.1f64..1.0,
        retention(),
        retention(),
        0u32..4,
        any::<bool>(),
        0u32..30,
        (0u32..400, 0u32..400),
    )
        .prop_map(
            |(
                window,
                reserve,
                high,
                low_share,
                default_retention,
                bash,
                protect,
                fold,
                lines,
                (h, t),
            )| {
                let mut retention = std::collections::BTreeMap::new();
                retention.insert("bash".to_owned(), bash);
                Policy {
                    context_window: window + reserve + 1,
                    response_reserve: reserve,
                    high_watermark: high,
                    low_watermark: (high * low_share).max(0.01),
                    default_retention,
                    retention,
                    protect_recent_turns: protect,
                    step_compaction: fold,
                    max_compact_lines: lines,
                    elide_head_chars: h,
                    elide_tail_chars: t,
                    ..Policy::default()
                }
            },
        )
}

/// Builds a valid log from the actions (the ledger refuses what a store would refuse).
fn build_log(actions: &[Action]) -> Vec<Event> {
    let mut events: Vec<Event> = Vec::new();
    let mut ledger = Ledger::new();
    let mut pending: Vec<(String, String)> = Vec::new();
    let mut next_call = 0usize;
    let words = |n: usize, tag: &str| -> String { (0..n).map(|i| format!("{tag}{i} ")).collect() };
    for a in actions {
        let body = match a {
            Action::User(n) => vec![EventBody::User {
                content: words(*n + 1, "u").into(),
                name: None,
            }],
            Action::Assistant { text, calls } => {
                let tool_calls: Vec<ToolCall> = (0..*calls)
                    .map(|_| {
                        next_call += 1;
                        let name = if next_call % 2 == 0 { "bash" } else { "read" };
                        ToolCall {
                            id: format!("call_{next_call}"),
                            name: name.to_owned(),
                            arguments: format!("{{\"n\":{next_call}}}"),
                        }
                    })
                    .collect();
                pending.extend(tool_calls.iter().map(|c| (c.id.clone(), c.name.clone())));
                vec![EventBody::Assistant {
                    content: text.map(|n| words(n, "a").into()),
                    reasoning: None,
                    tool_calls,
                    name: None,
                }]
            }
            Action::Results {
                order,
                skip_last,
                error,
                words: n,
            } => {
                let mut out = Vec::new();
                let mut take: Vec<usize> = order
                    .iter()
                    .filter(|&&i| i < pending.len())
                    .copied()
                    .collect();
                take.dedup();
                if *skip_last {
                    take.pop();
                }
                let mut chosen: Vec<(String, String)> = Vec::new();
                let mut idx: Vec<usize> = take;
                idx.sort_unstable();
                idx.dedup();
                for i in idx.into_iter().rev() {
                    chosen.push(pending.remove(i));
                }
                for (id, name) in chosen {
                    let text = words(*n, "r");
                    out.push(EventBody::ToolResult {
                        call_id: id,
                        tool_name: name,
                        stats: ContentStats::of(text.as_bytes()),
                        content: ToolOutput::Text(text),
                        is_error: *error,
                    });
                }
                out
            }
            Action::Direct { to_me, ttl } => vec![EventBody::DirectMessage {
                source: "peer".into(),
                target: if *to_me { "me".into() } else { "other".into() },
                content: "please hurry".into(),
                priority: 0.7,
                ttl_seconds: *ttl,
                parent_task_id: None,
                metadata: Default::default(),
            }],
            Action::Pin(n) => vec![EventBody::Pin {
                label: Some("plan".into()),
                content: words(*n + 1, "p"),
            }],
            Action::System(n) => vec![EventBody::System {
                content: words(*n + 1, "s").into(),
            }],
        };
        for b in body {
            let seq = events.len() as Seq + 1;
            if ledger.apply(seq, &b).is_ok() {
                events.push(Event {
                    seq,
                    ts_ms: seq as i64 * 1_000,
                    body: b,
                });
            }
        }
    }
    events
}

fn cases() -> u32 {
    std::env::var("LOOM_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn every_request_is_valid_and_fits(
        actions in proptest::collection::vec(action(), 1..40),
        policy in policy(),
    ) {
        let events = build_log(&actions);
        let steps: StepIndex = HashMap::new();
        let audience = Audience { agent: Some(crate::event::AgentId::new("me").unwrap()), now_ms: 3_000 };
        let budget = policy.budget();
        for format in Format::ALL {
            let mut state = CompactionState::default();
            let mut memo = CostMemo::new();
            let mut cuts: Vec<usize> = events
                .iter()
                .enumerate()
                .filter(|(_, e)| matches!(e.body, EventBody::Assistant { .. }))
                .map(|(i, _)| i)
                .collect();
            cuts.push(events.len());
            for cut in cuts {
                if cut == 0 { continue; }
                let input = RenderInput {
                    events: &events[..cut],
                    steps: &steps,
                    summaries: &[],
                    policy: &policy,
                    format,
                    model: "m",
                    tools: &[],
                    injections: &[],
                    audience: &audience,
                    meter: &ApproxMeter,
                };
                let warm = render(&input, &state, &mut memo);
                // What the memo carries between calls is only a cache: a restarted engine with
                // an empty memo and the stored state renders the same bytes and the same state.
                // (Checked in one format per case, chosen by the log, to keep the long mode
                // affordable.)
                if Format::ALL[events.len() % Format::ALL.len()] == format {
                    let cold = render(&input, &state, &mut CostMemo::new());
                    match (&warm, &cold) {
                        (Ok(w), Ok(c)) => {
                            prop_assert_eq!(w.body(), c.body(), "{:?}: a cold memo renders other bytes", format);
                            prop_assert_eq!(&w.state, &c.state, "{:?}: a cold memo decides otherwise", format);
                        }
                        _ => prop_assert_eq!(warm.is_ok(), cold.is_ok(), "{:?}: a cold memo fails otherwise", format),
                    }
                }
                match warm {
                    Ok(r) => {
                        prop_assert!(r.receipt.estimate <= budget.hard_total,
                            "{format:?}: estimate {} over {}", r.receipt.estimate, budget.hard_total);
                        if let Err(v) = check_request(format, &r.body()) {
                            prop_assert!(false, "{format:?}: {v}\n{}", r.body());
                        }
                        state = r.state;
                    }
                    Err(RenderError::OverBudget { floor, hard_total, needed, .. }) => {
                        prop_assert!(floor > hard_total,
                            "{format:?}: over budget ({needed} needed) although the floor {floor} fits {hard_total}");
                        break;
                    }
                    Err(RenderError::NothingToRender { .. }) => {
                        let proj = Projection::build(&events[..cut], &audience);
                        prop_assert!(proj.units.is_empty());
                    }
                    Err(e) => prop_assert!(false, "{format:?}: unexpected error {e}"),
                }
            }
        }
    }
}
