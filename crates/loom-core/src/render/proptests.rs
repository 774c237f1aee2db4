//! Property tests: for random logs and random policies, every request of every format is valid
//! by its provider's rules and fits its budget — or the pipeline says, with a typed error, that
//! the irreducible floor itself does not fit.
//!
//! The random world holds what a live engine renders from: steps derived at ingest for some
//! results (others have none, as when ingest lags), summaries of growing prefixes that appear as
//! the log grows, tool definitions, and content injected by hooks for each turn.
//!
//! `LOOM_PROPTEST_CASES` sets the number of cases (the long mode runs 1,000,000:
//! `LOOM_PROPTEST_CASES=1000000 cargo test --release -p loom-core render::proptests`).

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::*;
use crate::event::{ContentPart, EventBody, MessageContent, ToolCall, ToolOutput};
use crate::ledger::Ledger;
use crate::reduce::{Ingest, ReduceConfig};
use crate::stats::ContentStats;

#[derive(Debug, Clone)]
enum Action {
    User {
        words: usize,
        /// Whether the message carries an image part.
        image: bool,
    },
    Assistant {
        text: Option<usize>,
        calls: usize,
        reasoning: bool,
    },
    Results {
        order: Vec<usize>,
        skip_last: bool,
        error: bool,
        words: usize,
        /// Whether ingest derived steps for these results.
        stepped: bool,
        /// The shape of the output: words, a JSON object, numbered lines, offloaded to a blob, or
        /// text with an image.
        shape: u8,
    },
    Direct {
        to_me: bool,
        ttl: Option<u64>,
    },
    Pin(usize),
    System(usize),
    Spawn(usize),
    AgentResult {
        words: usize,
        success: bool,
    },
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        2 => (0usize..80, proptest::bool::weighted(0.1))
            .prop_map(|(words, image)| Action::User { words, image }),
        4 => (proptest::option::of(0usize..60), 0usize..4, proptest::bool::weighted(0.2))
            .prop_map(|(text, calls, reasoning)| Action::Assistant { text, calls, reasoning }),
        4 => (
            proptest::collection::vec(0usize..4, 0..4),
            any::<bool>(),
            any::<bool>(),
            0usize..900,
            proptest::bool::weighted(0.8),
            0u8..5,
        )
            .prop_map(|(order, skip_last, error, words, stepped, shape)| Action::Results {
                order,
                skip_last,
                error,
                words,
                stepped,
                shape,
            }),
        1 => (any::<bool>(), proptest::option::of(0u64..5))
            .prop_map(|(to_me, ttl)| Action::Direct { to_me, ttl }),
        1 => (0usize..40).prop_map(Action::Pin),
        1 => (0usize..40).prop_map(Action::System),
        1 => (0usize..40).prop_map(Action::Spawn),
        1 => (0usize..200, any::<bool>()).prop_map(|(words, success)| Action::AgentResult { words, success }),
    ]
}

/// A browser page: a stable frame of elements and a few lines that depend on `n`.
fn page(n: usize) -> String {
    let mut lines: Vec<String> = (0..40).map(|i| format!("[a{i}] link 'item {i}'")).collect();
    for k in 0..n % 7 {
        lines.insert((n + k * 5) % 40, format!("[b{n}{k}] button 'changed {k}'"));
    }
    lines.join("\n")
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
        (
            0u64..300,
            0.05f64..=1.0,
            any::<bool>(),
            proptest::option::of(0.05f64..=1.0),
            any::<bool>(),
            prop_oneof![
                Just(RecallRefs::See),
                Just(RecallRefs::Tool),
                Just(RecallRefs::Files {
                    dir: "/tmp/recall/s".into()
                }),
            ],
        ),
        (any::<bool>(), 0.05f64..=1.0, any::<bool>(), 0.05f64..=1.0),
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
                (injection, oversized, supersede, cap, group, recall),
                (page_diffs, page_diff_share, output_diffs, output_diff_share),
            )| {
                let mut retention = std::collections::BTreeMap::new();
                retention.insert("bash".to_owned(), bash);
                let tier_caps = cap.map(|c| (Tier::ToolResults, c)).into_iter().collect();
                // Every field is drawn (no `..Policy::default()`), so a new policy field does not
                // compile here until the property test draws it too.
                Policy {
                    context_window: window + reserve + injection + 1,
                    response_reserve: reserve,
                    injection_reserve: injection,
                    oversized_share: oversized,
                    supersede_snapshots: supersede,
                    page_diffs,
                    page_diff_share,
                    output_diffs,
                    output_diff_share,
                    tier_caps,
                    group_steps: group,
                    high_watermark: high,
                    low_watermark: (high * low_share).max(0.01),
                    default_retention,
                    retention,
                    protect_recent_turns: protect,
                    step_compaction: fold,
                    max_compact_lines: lines,
                    elide_head_chars: h,
                    elide_tail_chars: t,
                    recall,
                }
            },
        )
}

/// Tool definitions, summaries and per-turn injections: the rest of what a render reads.
#[derive(Debug, Clone)]
struct World {
    /// Words of each tool's description.
    tools: Vec<usize>,
    /// Summaries as (share of the log covered, in 256ths; words), older first.
    summaries: Vec<(u8, usize)>,
    /// Words of each injection, the same for every turn.
    injections: Vec<usize>,
}

fn world() -> impl Strategy<Value = World> {
    (
        proptest::collection::vec(0usize..30, 0..3),
        proptest::collection::vec((any::<u8>(), 1usize..120), 0..3),
        proptest::collection::vec(1usize..40, 0..3),
    )
        .prop_map(|(tools, summaries, injections)| World {
            tools,
            summaries,
            injections,
        })
}

fn words(n: usize, tag: &str) -> String {
    (0..n).map(|i| format!("{tag}{i} ")).collect()
}

impl World {
    fn tools(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .enumerate()
            .map(|(i, &n)| ToolSpec {
                name: format!("tool_{i}"),
                description: words(n, "d"),
                parameters: serde_json::json!({
                    "type": "object",
                    "properties": {"n": {"type": "integer"}},
                }),
            })
            .collect()
    }

    /// The summaries a store holds once the log reaches `last`: each covers a prefix that ends
    /// before it, and a newer version covers more, as the summary worker makes them.
    fn summaries(&self, events: &[Event], last: Seq) -> Vec<SummaryView> {
        let mut shares: Vec<(u8, usize)> = self.summaries.clone();
        shares.sort_unstable();
        let total = events.len() as u64;
        shares
            .iter()
            .enumerate()
            .map(|(i, &(share, n))| SummaryView {
                version: i as u32 + 1,
                to_seq: (total * u64::from(share) / 256).max(1),
                content: words(n, "S"),
            })
            .filter(|s| s.to_seq < last)
            .collect()
    }

    fn injections(&self) -> Vec<Injection> {
        self.injections
            .iter()
            .enumerate()
            .map(|(i, &n)| Injection {
                hook: format!("hook_{i}"),
                content: words(n, "k"),
            })
            .collect()
    }
}

/// A one-pixel PNG as a `data:` URL.
const PIXEL: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// The text of a result in one of its shapes.
fn output(shape: u8, n: usize) -> String {
    match shape {
        1 => serde_json::json!({"status": "ok", "items": words(n, "j").split(' ').collect::<Vec<_>>()})
            .to_string(),
        2 => (0..n).map(|i| format!("{i}: line r{i}\n")).collect(),
        _ => words(n, "r"),
    }
}

/// How a result's text is stored: inline, offloaded (by its content address), or as parts with
/// an image.
fn stored(shape: u8, text: String) -> ToolOutput {
    match shape {
        3 => {
            use sha2::{Digest, Sha256};
            let hex = hex::encode(Sha256::digest(text.as_bytes()));
            ToolOutput::Blob(crate::event::BlobRef::from_hex(&hex).expect("a sha256 digest"))
        }
        4 => ToolOutput::Parts(vec![
            ContentPart::Text { text },
            ContentPart::Image {
                url: PIXEL.to_owned(),
                detail: None,
            },
        ]),
        _ => ToolOutput::Text(text),
    }
}

/// Steps derived at ingest, with the seq of the result each was derived from.
type Ingested = Vec<(Seq, String, crate::step::Step)>;

/// The steps a store holds once the log reaches `last`.
fn steps_until(ingested: &Ingested, last: Seq) -> StepIndex {
    ingested
        .iter()
        .filter(|(seq, _, _)| *seq <= last)
        .map(|(_, id, step)| (id.clone(), step.clone()))
        .collect()
}

/// Builds a valid log from the actions (the ledger refuses what a store would refuse), with the
/// steps ingest derived for the results whose action says so.
fn build_log(actions: &[Action]) -> (Vec<Event>, Ingested) {
    let mut events: Vec<Event> = Vec::new();
    let mut steps = Ingested::new();
    let reduce = ReduceConfig::default();
    let mut ingest = Ingest::new();
    let mut ledger = Ledger::new();
    let mut pending: Vec<(String, String)> = Vec::new();
    let mut next_call = 0usize;
    let mut spawned = 0usize;
    let mut texts: HashMap<String, String> = HashMap::new();
    for a in actions {
        let mut stepped = false;
        let body = match a {
            Action::User { words: n, image } => vec![EventBody::User {
                content: if *image {
                    MessageContent::Parts(vec![
                        ContentPart::Text {
                            text: words(*n + 1, "u"),
                        },
                        ContentPart::Image {
                            url: PIXEL.to_owned(),
                            detail: Some("low".into()),
                        },
                    ])
                } else {
                    words(*n + 1, "u").into()
                },
                name: None,
            }],
            Action::Assistant {
                text,
                calls,
                reasoning,
            } => {
                let tool_calls: Vec<ToolCall> = (0..*calls)
                    .map(|_| {
                        next_call += 1;
                        let name = ["read", "bash", "browser_action"][next_call % 3];
                        // Shell commands repeat (a test run again): their outputs may be sent
                        // as diffs, and earlier runs superseded.
                        let n = if name == "bash" {
                            next_call % 4
                        } else {
                            next_call
                        };
                        ToolCall {
                            id: format!("call_{next_call}"),
                            name: name.to_owned(),
                            arguments: format!("{{\"n\":{n}}}"),
                        }
                    })
                    .collect();
                pending.extend(tool_calls.iter().map(|c| (c.id.clone(), c.name.clone())));
                vec![EventBody::Assistant {
                    content: text.map(|n| words(n, "a").into()),
                    reasoning: reasoning.then(|| words(12, "think")),
                    tool_calls,
                    name: None,
                    native: None,
                }]
            }
            Action::Results {
                order,
                skip_last,
                error,
                words: n,
                stepped: with_steps,
                shape,
            } => {
                stepped = *with_steps;
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
                    // Pages of one site: mostly the same lines, a few that change.
                    let text = if name == "browser_action" {
                        page(*n)
                    } else {
                        output(*shape, *n)
                    };
                    texts.insert(id.clone(), text.clone());
                    out.push(EventBody::ToolResult {
                        call_id: id,
                        tool_name: name,
                        stats: ContentStats::of(text.as_bytes()),
                        content: stored(*shape, text),
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
            Action::Spawn(n) => {
                spawned += 1;
                vec![EventBody::Spawn {
                    child: crate::event::SessionId::new(format!("child-{spawned}"))
                        .expect("a valid id"),
                    agent: crate::event::AgentId::new(format!("helper-{spawned}"))
                        .expect("a valid id"),
                    goal: words(*n + 1, "g"),
                    extract: None,
                }]
            }
            Action::AgentResult { words: n, success } if spawned > 0 => {
                vec![EventBody::AgentResult {
                    child: crate::event::SessionId::new(format!("child-{spawned}"))
                        .expect("a valid id"),
                    agent: crate::event::AgentId::new(format!("helper-{spawned}"))
                        .expect("a valid id"),
                    result: words(*n + 1, "res"),
                    success: *success,
                }]
            }
            Action::AgentResult { .. } => Vec::new(),
        };
        for b in body {
            let seq = events.len() as Seq + 1;
            if ledger.apply(seq, &b).is_err() {
                continue;
            }
            let event = Event {
                seq,
                ts_ms: seq as i64 * 1_000,
                body: b,
            };
            let original = match &event.body {
                EventBody::ToolResult { call_id, .. } => texts.get(call_id).map(String::as_bytes),
                _ => None,
            };
            if let (Some(reduction), true, EventBody::ToolResult { call_id, .. }) =
                (ingest.push(&reduce, &event, original), stepped, &event.body)
            {
                steps.push((seq, call_id.clone(), reduction.step));
            }
            events.push(event);
        }
    }
    (events, steps)
}

/// Whether a result arrived in `events[from..to]` for a call made before `from`: such a late
/// result changes what the earlier request said of its call (verbatim or in the compact block),
/// so the request may change there without a compaction point.
fn late_result(events: &[Event], from: usize, to: usize) -> bool {
    let called: std::collections::HashSet<&str> = events[..from]
        .iter()
        .flat_map(|e| match &e.body {
            EventBody::Assistant { tool_calls, .. } => {
                tool_calls.iter().map(|c| c.id.as_str()).collect()
            }
            _ => Vec::new(),
        })
        .collect();
    events[from..to].iter().any(|e| {
        matches!(&e.body, EventBody::ToolResult { call_id, .. } if called.contains(call_id.as_str()))
    })
}

/// Between compaction points a request only grows at its end: the previous one's messages (less
/// the turn's injected content, which always comes last) start this one's, with the same model
/// and tools.
fn extends(prev: &Rendered, now: &Rendered, injected: usize) -> bool {
    let (a, b) = (&prev.request, &now.request);
    let kept = a.messages.len().saturating_sub(injected);
    a.model == b.model
        && a.tools == b.tools
        && b.messages.len() >= a.messages.len()
        && a.messages[..kept] == b.messages[..kept]
        && prev.pieces[..kept] == now.pieces[..kept]
}

fn cases() -> u32 {
    std::env::var("LOOM_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// What one case renders: the log and everything else a render reads, and the policies in force
/// (the second from call `switch` on, when the policy changes mid-session).
struct Case<'c> {
    events: &'c [Event],
    ingested: &'c Ingested,
    world: &'c World,
    audience: &'c Audience,
    policy: &'c Policy,
    switch: Option<(usize, &'c Policy)>,
}

impl Case<'_> {
    fn policy_at(&self, call: usize) -> &Policy {
        match self.switch {
            Some((at, second)) if call >= at => second,
            _ => self.policy,
        }
    }
}

/// Renders every call of the case in every format, as a live engine would (state and memo kept
/// across calls), and checks each request.
fn check_session(case: &Case<'_>) -> Result<(), TestCaseError> {
    let events = case.events;
    let tools = case.world.tools();
    let injections = case.world.injections();
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
        let mut prev: Option<(Rendered, usize)> = None;
        for (call, cut) in cuts.into_iter().enumerate() {
            if cut == 0 {
                continue;
            }
            let policy = case.policy_at(call);
            let budget = policy.budget();
            let last = events[cut - 1].seq;
            let summaries = case.world.summaries(events, last);
            let steps = steps_until(case.ingested, last);
            let input = RenderInput {
                events: &events[..cut],
                steps: &steps,
                summaries: &summaries,
                policy,
                format,
                model: "m",
                tools: &tools,
                injections: &injections,
                audience: case.audience,
                meter: &ApproxMeter,
            };
            let warm = render(&input, &state, &mut memo);
            // What the memo carries between calls is only a cache: a restarted engine with an
            // empty memo and the stored state renders the same bytes and the same state.
            // (Checked in one format per case, chosen by the log, to keep the long mode
            // affordable.)
            if Format::ALL[events.len() % Format::ALL.len()] == format {
                let cold = render(&input, &state, &mut CostMemo::new());
                match (&warm, &cold) {
                    (Ok(w), Ok(c)) => {
                        prop_assert_eq!(
                            w.body(),
                            c.body(),
                            "{:?}: a cold memo renders other bytes",
                            format
                        );
                        prop_assert_eq!(
                            &w.state,
                            &c.state,
                            "{:?}: a cold memo decides otherwise",
                            format
                        );
                    }
                    _ => prop_assert_eq!(
                        warm.is_ok(),
                        cold.is_ok(),
                        "{:?}: a cold memo fails otherwise",
                        format
                    ),
                }
            }
            match warm {
                Ok(r) => {
                    prop_assert!(
                        r.receipt.estimate <= budget.hard_total,
                        "{format:?}: estimate {} over {}",
                        r.receipt.estimate,
                        budget.hard_total
                    );
                    if let Err(v) = check_request(format, &r.body()) {
                        prop_assert!(false, "{format:?}: {v}\n{}", r.body());
                    }
                    // The bytes written straight from the request are the body serialised.
                    let body = serde_json::to_vec(&r.body()).unwrap();
                    prop_assert!(
                        r.body_bytes().unwrap() == body,
                        "{format:?}: the body's bytes differ from the body serialised"
                    );
                    prop_assert!(
                        r.body_bytes_with(&mut memo).unwrap() == body,
                        "{format:?}: the body's bytes, reusing the last call's, differ from the \
                         body serialised"
                    );
                    // Each split tier is the sum of its parts.
                    let (tiers, parts) = (&r.receipt.tiers, &r.receipt.parts);
                    let tier = |t: Tier| tiers.get(&t).copied().unwrap_or(0);
                    prop_assert_eq!(
                        parts.turns + parts.verbatim + parts.stubbed + parts.elided + parts.diffed,
                        tier(Tier::ToolResults),
                        "{:?}: tool_results' parts {:?}",
                        format,
                        parts
                    );
                    prop_assert_eq!(
                        parts.summary + parts.compact,
                        tier(Tier::Summary),
                        "{:?}: summary's parts {:?}",
                        format,
                        parts
                    );
                    prop_assert!(
                        r.receipt.stubbed.is_empty() || parts.stubbed > 0,
                        "{format:?}: stubbed results but no stubbed tokens: {parts:?}"
                    );
                    if let Some((seq, n)) = r.receipt.unaccounted() {
                        prop_assert!(
                            false,
                            "{format:?}: seq {seq} is in {n} lists of the receipt"
                        );
                    }
                    // A late result, or a policy changed since the previous call, may change the
                    // request without a compaction point; otherwise it only grows at its end.
                    let same_policy = call == 0 || case.policy_at(call - 1) == policy;
                    if let (Some((p, from)), None, true) =
                        (&prev, &r.receipt.compaction, same_policy)
                    {
                        if !late_result(events, *from, cut) {
                            prop_assert!(
                                extends(p, &r, injections.len()),
                                "{format:?}: the request at seq {} does not extend the one at seq {} \
                                 without a compaction point\nbefore: {:#?}\nafter: {:#?}",
                                r.receipt.at_seq,
                                p.receipt.at_seq,
                                p.request.messages,
                                r.request.messages
                            );
                        }
                    }
                    state = r.state.clone();
                    prev = Some((r, cut));
                }
                Err(RenderError::OverBudget {
                    floor,
                    hard_total,
                    needed,
                    ..
                }) => {
                    prop_assert!(
                        floor > hard_total,
                        "{format:?}: over budget ({needed} needed) although the floor {floor} fits {hard_total}"
                    );
                    break;
                }
                Err(RenderError::InjectionOverflow {
                    tokens, reserve, ..
                }) => {
                    prop_assert!(
                        tokens > reserve,
                        "{format:?}: injection overflow of {tokens} within {reserve}"
                    );
                    break;
                }
                Err(RenderError::NothingToRender { .. }) => {
                    let proj = Projection::build(&events[..cut], case.audience);
                    prop_assert!(proj.units.is_empty());
                }
                Err(e) => prop_assert!(false, "{format:?}: unexpected error {e}"),
            }
        }
    }
    Ok(())
}

/// Direct messages are for "me": rendered for that agent, or for no agent in particular; they
/// expire by their TTL against the turn's clock.
fn audience(addressed: bool, now_ms: i64) -> Audience {
    let agent = addressed.then(|| crate::event::AgentId::new("me").expect("a valid id"));
    Audience { agent, now_ms }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn every_request_is_valid_and_fits(
        actions in proptest::collection::vec(action(), 1..40),
        policy in policy(),
        world in world(),
        (addressed, now_ms) in (proptest::bool::weighted(0.8), 0i64..20_000),
    ) {
        let (events, ingested) = build_log(&actions);
        let audience = audience(addressed, now_ms);
        check_session(&Case { events: &events, ingested: &ingested, world: &world, audience: &audience, policy: &policy, switch: None })?;
    }

    /// The policy changes between two calls (another model's window, other retention rules):
    /// the state stored under the old policy must still lead to valid requests that fit the new
    /// one.
    #[test]
    fn a_policy_changed_mid_session_still_gives_valid_requests_that_fit(
        actions in proptest::collection::vec(action(), 1..40),
        policy in policy(),
        (switch, second) in (0usize..20, policy()),
        world in world(),
        (addressed, now_ms) in (proptest::bool::weighted(0.8), 0i64..20_000),
    ) {
        let (events, ingested) = build_log(&actions);
        let audience = audience(addressed, now_ms);
        let switch = Some((switch, &second));
        check_session(&Case { events: &events, ingested: &ingested, world: &world, audience: &audience, policy: &policy, switch })?;
    }
}
