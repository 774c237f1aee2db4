//! Tests of the whole pipeline on small, hand-written logs.

mod grouping;
mod native;
mod worth;

use std::collections::HashMap;

use super::*;
use crate::event::{ContentPart, EventBody, ToolCall, ToolOutput};
use crate::stats::ContentStats;

struct Log {
    events: Vec<Event>,
}

impl Log {
    fn new() -> Self {
        Self { events: Vec::new() }
    }
    fn push(&mut self, body: EventBody) -> Seq {
        let seq = self.events.len() as Seq + 1;
        self.events.push(Event {
            seq,
            ts_ms: 1_000 * seq as i64,
            body,
        });
        seq
    }
    fn system(&mut self, text: &str) {
        self.push(EventBody::System {
            content: text.into(),
        });
    }
    fn user(&mut self, text: &str) {
        self.push(EventBody::User {
            content: text.into(),
            name: None,
        });
    }
    fn step(&mut self, id: &str, output: &str) {
        self.push(EventBody::Assistant {
            content: Some(format!("thinking about {id}").into()),
            reasoning: None,
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "bash".into(),
                arguments: format!("{{\"command\":\"cat file_{id}.txt\"}}"),
            }],
            name: None,
            native: None,
        });
        self.push(EventBody::ToolResult {
            call_id: id.into(),
            tool_name: "bash".into(),
            content: ToolOutput::Text(output.into()),
            is_error: false,
            stats: ContentStats::of(output.as_bytes()),
        });
    }
}

fn words(n: usize, tag: &str) -> String {
    (0..n).map(|i| format!("{tag}{i} ")).collect()
}

struct Fixture {
    policy: Policy,
    steps: StepIndex,
    audience: Audience,
}

impl Fixture {
    fn new(window: u64) -> Self {
        Self {
            policy: Policy {
                context_window: window,
                response_reserve: 100,
                ..Policy::default()
            },
            steps: HashMap::new(),
            audience: Audience {
                agent: None,
                now_ms: 0,
            },
        }
    }

    fn input<'a>(&'a self, events: &'a [Event], format: Format) -> RenderInput<'a> {
        RenderInput {
            events,
            steps: &self.steps,
            summaries: &[],
            policy: &self.policy,
            format,
            model: "gpt-4o",
            tools: &[],
            injections: &[],
            audience: &self.audience,
            meter: &ApproxMeter,
        }
    }
}

/// Renders every prefix of the log that ends just before an assistant event, as a live agent
/// would be rendered for each call; returns bodies and states.
fn replay(fx: &Fixture, log: &Log, format: Format) -> Vec<Rendered> {
    let mut state = CompactionState::default();
    let mut memo = CostMemo::new();
    let mut out = Vec::new();
    for (i, e) in log.events.iter().enumerate() {
        if matches!(e.body, EventBody::Assistant { .. }) {
            let r = render(&fx.input(&log.events[..i], format), &state, &mut memo).unwrap();
            state = r.state.clone();
            out.push(r);
        }
    }
    out
}

fn long_log(steps: usize, output_words: usize) -> Log {
    let mut log = Log::new();
    log.system("You are a careful agent.");
    log.user("Fix the bug in parser.py");
    for i in 0..steps {
        log.step(&format!("c{i}"), &words(output_words, &format!("out{i}_")));
    }
    log
}

#[test]
fn small_log_renders_everything_verbatim() {
    let fx = Fixture::new(100_000);
    let log = long_log(3, 10);
    let r = render(
        &fx.input(&log.events, Format::OPENAI_CHAT),
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap();
    let body = r.body();
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2 + 3 * 2);
    assert_eq!(msgs[2]["tool_calls"][0]["id"], "c0");
    assert_eq!(msgs[3]["role"], "tool");
    assert_eq!(r.receipt.verbatim, vec![SeqRange { from: 1, to: 8 }]);
    assert!(r.receipt.compaction.is_none());
}

#[test]
fn every_request_fits_and_is_append_only_between_points() {
    let fx = Fixture::new(3_000);
    let log = long_log(60, 60);
    for format in [
        Format::OPENAI_CHAT,
        Format::ANTHROPIC,
        Format::OPENAI_RESPONSES,
    ] {
        let renders = replay(&fx, &log, format);
        let mut points = 0;
        for pair in renders.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(b.receipt.estimate <= b.receipt.budget.hard_total);
            if b.receipt.compaction.is_some() {
                points += 1;
                continue;
            }
            // Between points the previous request's messages are a prefix of this one's.
            let key = if format == Format::OPENAI_RESPONSES {
                "input"
            } else {
                "messages"
            };
            let (ba, bb) = (a.body(), b.body());
            let (ma, mb) = (ba[key].as_array().unwrap(), bb[key].as_array().unwrap());
            // Anthropic moves its tail cache breakpoint to the newest message.
            let strip = |v: &serde_json::Value| without_cache_control(v.clone()).to_string();
            for (x, y) in ma.iter().zip(mb.iter()) {
                assert_eq!(
                    strip(x),
                    strip(y),
                    "{format:?}: prefix changed without a point"
                );
            }
            assert!(mb.len() >= ma.len());
        }
        assert!(
            points >= 2,
            "{format:?}: expected several compaction points, got {points}"
        );
    }
}

#[test]
fn hysteresis_cuts_to_the_low_watermark() {
    let fx = Fixture::new(3_000);
    let log = long_log(60, 60);
    let renders = replay(&fx, &log, Format::OPENAI_CHAT);
    let budget = fx.policy.budget();
    for r in &renders {
        if let Some(p) = &r.receipt.compaction {
            assert!(p.before > budget.high);
            if !p.ineffective {
                assert!(p.after <= budget.low, "{p:?}");
            }
        }
    }
}

#[test]
fn rendering_is_deterministic() {
    let fx = Fixture::new(3_000);
    let log = long_log(40, 50);
    let a = replay(&fx, &log, Format::ANTHROPIC);
    let b = replay(&fx, &log, Format::ANTHROPIC);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.body().to_string(), y.body().to_string());
    }
    // From scratch with the final state equals the incremental result.
    let last = a.last().unwrap();
    let n = log.events.len() - 2;
    let fresh = render(
        &fx.input(&log.events[..n], Format::ANTHROPIC),
        &a[a.len() - 2].state,
        &mut CostMemo::new(),
    )
    .unwrap();
    assert_eq!(fresh.body().to_string(), last.body().to_string());
}

#[test]
fn estimate_matches_metering_the_body() {
    let fx = Fixture::new(3_000);
    let log = long_log(30, 50);
    for r in replay(&fx, &log, Format::OPENAI_CHAT) {
        let counted: u64 = r.body()["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| message_tokens(m, &ApproxMeter))
            .sum::<u64>()
            + REPLY_PRIMING;
        assert_eq!(counted, r.receipt.estimate);
        assert_eq!(r.tokens(), r.receipt.estimate);
        assert_eq!(r.pieces.len(), r.request.messages.len());
    }
    // Results are metered on their own (their content value alone); every piece must still
    // equal its whole message metered in its wire form, in every format.
    for format in Format::ALL {
        for r in replay(&fx, &log, format) {
            for (piece, msg) in r.pieces.iter().zip(&r.request.messages) {
                assert_eq!(
                    piece.tokens,
                    format.msg_tokens(msg, &ApproxMeter),
                    "{format:?}"
                );
            }
        }
    }
}

#[test]
fn task_statement_and_system_survive_folding() {
    let fx = Fixture::new(2_000);
    let log = long_log(80, 40);
    let last = replay(&fx, &log, Format::OPENAI_CHAT).pop().unwrap();
    let body = last.body();
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["content"], "You are a careful agent.");
    assert_eq!(msgs[1]["content"], "Fix the bug in parser.py");
    let block = msgs[2]["content"].as_str().unwrap();
    assert!(block.starts_with(COMPACT_HEADER), "{block}");
    assert!(!last.receipt.grouped.is_empty() || !last.receipt.dropped.is_empty());
}

#[test]
fn an_oversized_newest_result_is_elided_not_sent_over_budget() {
    let fx = Fixture::new(1_500);
    let mut log = Log::new();
    log.system("sys");
    log.user("read the page");
    log.step("big", &words(5_000, "w"));
    let r = render(
        &fx.input(&log.events, Format::OPENAI_CHAT),
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap();
    assert!(r.receipt.estimate <= r.receipt.budget.hard_total);
    let tool = &r.body()["messages"][3]["content"];
    assert!(
        tool.as_str().unwrap().contains("characters elided"),
        "{tool}"
    );
    assert_eq!(r.receipt.elided, vec![SeqRange { from: 4, to: 4 }]);
}

#[test]
fn a_point_under_a_large_floor_lands_at_the_low_watermark_keeping_most_of_the_newest_output() {
    // The shape of a coding agent at a tight budget: a system prompt that takes 40% of it, and
    // reads whose output alone is more than half of it. Every call is a point; each must cut
    // the newest output only as far as the low watermark needs, not to the policy's 3,000
    // characters with every earlier step dropped and the request far below the watermark.
    let fx = Fixture::new(20_100);
    let budget = fx.policy.budget();
    let mut log = Log::new();
    log.system(&words(4_000, "sys"));
    log.user("read every part, then summarise");
    for i in 0..6 {
        log.step(&format!("p{i}"), &words(5_000, &format!("part{i}_x")));
    }
    log.user("go on");
    let renders = replay(&fx, &log, Format::OPENAI_CHAT);
    let policy_cut = (fx.policy.elide_head_chars + fx.policy.elide_tail_chars) as usize;
    let mut points = 0;
    for r in &renders {
        assert!(r.receipt.estimate <= budget.hard_total, "{:?}", r.receipt);
        let Some(p) = &r.receipt.compaction else {
            continue;
        };
        points += 1;
        let body = r.body();
        let newest = body["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(newest.contains("characters elided"), "{newest:.200}");
        assert!(
            newest.len() > policy_cut * 2,
            "the newest output keeps what the budget allows, not the policy's head and tail: {} chars",
            newest.len()
        );
        assert!(
            p.after <= budget.low && p.after + budget.low / 20 >= budget.low,
            "the point lands at the low watermark ({}), not far below it: {p:?}",
            budget.low
        );
        assert!(!p.ineffective, "{p:?}");
    }
    assert!(points >= 3, "{points} points");
}

#[test]
fn an_impossible_floor_is_a_typed_error() {
    let mut fx = Fixture::new(300);
    fx.policy.response_reserve = 10;
    let mut log = Log::new();
    log.system(&words(400, "s"));
    log.user("go");
    let err = render(
        &fx.input(&log.events, Format::OPENAI_CHAT),
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap_err();
    match err {
        RenderError::OverBudget {
            floor,
            hard_total,
            over,
            ..
        } => {
            assert!(floor > hard_total);
            assert!(over > 0);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn injection_overflow_names_the_hook() {
    let mut fx = Fixture::new(10_000);
    fx.policy.injection_reserve = 20;
    let log = long_log(1, 5);
    let injections = [
        Injection {
            hook: "kb".into(),
            content: "short".into(),
        },
        Injection {
            hook: "memory".into(),
            content: words(100, "m"),
        },
    ];
    let mut input = fx.input(&log.events, Format::OPENAI_CHAT);
    input.injections = &injections;
    let err = render(&input, &CompactionState::default(), &mut CostMemo::new()).unwrap_err();
    assert!(
        matches!(&err, RenderError::InjectionOverflow { hook, .. } if hook == "memory"),
        "{err}"
    );
}

/// A compaction point's last resorts used to cut down to the hard total alone, so a turn whose
/// messages fit but whose injected content did not failed as over budget although reducing the
/// newest result would have made room (found by the validity proptest once it injected content).
#[test]
fn a_point_leaves_room_for_the_turns_injected_content() {
    let mut log = Log::new();
    log.system("sys");
    log.user("read the page");
    log.step("big", &words(400, "w"));
    let injections = [Injection {
        hook: "kb".into(),
        content: words(30, "k"),
    }];
    let plain = Fixture::new(100_000);
    let alone = render(
        &plain.input(&log.events, Format::OPENAI_CHAT),
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap()
    .receipt
    .estimate;
    // The messages alone fit the hard total; with the injection they do not.
    let mut fx = Fixture::new(alone + 5 + 100);
    fx.policy.injection_reserve = 60;
    let mut input = fx.input(&log.events, Format::OPENAI_CHAT);
    input.injections = &injections;
    let r = render(&input, &CompactionState::default(), &mut CostMemo::new()).unwrap();
    assert!(r.receipt.estimate <= r.receipt.budget.hard_total);
    assert_eq!(r.receipt.injected.len(), 1);
    assert_ne!(
        r.receipt.verbatim.last(),
        Some(&SeqRange { from: 4, to: 4 })
    );
}

/// The cost memo used to be keyed by piece alone, so a render under a new policy (here, other
/// elision lengths) reused the old policy's elided text (found by the policy-change proptest).
#[test]
fn a_memo_filled_under_another_policy_is_not_reused() {
    let mut log = Log::new();
    log.system("sys");
    log.user("read the page");
    log.step("big", &words(5_000, "w"));
    let mut fx = Fixture::new(1_500);
    let mut memo = CostMemo::new();
    let first = render(
        &fx.input(&log.events, Format::OPENAI_CHAT),
        &CompactionState::default(),
        &mut memo,
    )
    .unwrap();
    fx.policy.elide_head_chars = 300;
    fx.policy.elide_tail_chars = 100;
    let input = fx.input(&log.events, Format::OPENAI_CHAT);
    let warm = render(&input, &first.state, &mut memo).unwrap();
    let cold = render(&input, &first.state, &mut CostMemo::new()).unwrap();
    assert_eq!(warm.body(), cold.body());
    assert_eq!(warm.receipt.estimate, cold.receipt.estimate);
    assert_ne!(first.body(), warm.body());
}

#[test]
fn pending_call_gets_an_explicit_missing_result() {
    let fx = Fixture::new(10_000);
    let mut log = Log::new();
    log.user("go");
    log.push(EventBody::Assistant {
        content: None,
        reasoning: None,
        tool_calls: vec![ToolCall {
            id: "p".into(),
            name: "bash".into(),
            arguments: "{}".into(),
        }],
        name: None,
        native: None,
    });
    let r = render(
        &fx.input(&log.events, Format::OPENAI_CHAT),
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap();
    assert_eq!(r.body()["messages"][2]["tool_call_id"], "p");
}

#[test]
fn anthropic_has_system_apart_and_cache_breakpoints() {
    let fx = Fixture::new(100_000);
    let mut log = long_log(2, 5);
    log.push(EventBody::User {
        content: MessageContent::Parts(vec![
            ContentPart::Text { text: "see".into() },
            ContentPart::Image {
                url: "data:image/png;base64,AAAA".into(),
                detail: None,
            },
        ]),
        name: None,
    });
    let r = render(
        &fx.input(&log.events, Format::ANTHROPIC),
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap();
    let body = &r.body();
    assert_eq!(body["system"][0]["text"], "You are a careful agent.");
    assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["role"], "user");
    assert_eq!(msgs[1]["content"][1]["type"], "tool_use");
    assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
    assert_eq!(
        msgs.last().unwrap()["content"][1]["source"]["media_type"],
        "image/png"
    );
}

fn without_cache_control(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(k, _)| k != "cache_control")
                .map(|(k, v)| (k, without_cache_control(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_cache_control).collect()),
        other => other,
    }
}

#[test]
fn tool_results_tier_cap_triggers_stubbing() {
    let mut fx = Fixture::new(100_000);
    fx.policy.tier_caps.insert(Tier::ToolResults, 0.01);
    let log = long_log(30, 60);
    let renders = replay(&fx, &log, Format::OPENAI_CHAT);
    let last = renders.last().unwrap();
    let cap = last.receipt.budget.tier_caps[&Tier::ToolResults];
    assert!(!last.receipt.stubbed.is_empty());
    assert!(renders.iter().any(|r| matches!(
        r.receipt.compaction.as_ref().map(|p| p.reason),
        Some(PointReason::TierCap)
    )));
    // Right after a point the results fit their cap (protected turns aside).
    let after_point = renders
        .iter()
        .rev()
        .find(|r| r.receipt.compaction.is_some())
        .unwrap();
    assert!(after_point.receipt.tiers[&Tier::ToolResults] > 0);
    assert!(cap > 0);
    let bad = Policy {
        tier_caps: [(Tier::Dialogue, 0.5)].into_iter().collect(),
        ..Policy::default()
    };
    assert!(bad
        .validate()
        .unwrap_err()
        .to_string()
        .contains("tier_caps.dialogue"));
}

#[test]
fn an_oversized_task_statement_is_elided_as_a_last_resort() {
    let fx = Fixture::new(1_200);
    let mut log = Log::new();
    log.system("sys");
    log.user(&words(3_000, "task"));
    log.step("a", "ok");
    let r = render(
        &fx.input(&log.events, Format::OPENAI_CHAT),
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap();
    assert!(r.receipt.estimate <= r.receipt.budget.hard_total);
    let body = r.body();
    let task = body["messages"][1]["content"].as_str().unwrap();
    assert!(task.starts_with("task0 "), "{task}");
    assert!(
        task.contains("characters elided; full output: seq 2"),
        "{task}"
    );
    assert_eq!(r.receipt.fate(2), "elided");
}

#[test]
fn unaccounted_finds_a_seq_in_no_list_or_in_two() {
    let fx = Fixture::new(100_000);
    let log = long_log(2, 5);
    let r = render(
        &fx.input(&log.events, Format::OPENAI_CHAT),
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap();
    assert_eq!(r.receipt.unaccounted(), None);
    let mut twice = r.receipt.clone();
    twice.dropped.push(SeqRange { from: 3, to: 3 });
    assert_eq!(twice.unaccounted(), Some((3, 2)));
    let mut missing = r.receipt.clone();
    missing.verbatim = vec![SeqRange { from: 1, to: 4 }];
    assert_eq!(missing.unaccounted(), Some((5, 0)));
    let mut outside = r.receipt;
    outside.stubbed.push(SeqRange { from: 9, to: 99 });
    assert_eq!(outside.unaccounted(), Some((outside.at_seq + 1, 1)));
}
