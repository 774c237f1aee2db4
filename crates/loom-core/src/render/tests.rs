//! Tests of the whole pipeline on small, hand-written logs.

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
        &fx.input(&log.events, Format::OpenaiChat),
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
        Format::OpenaiChat,
        Format::Anthropic,
        Format::OpenaiResponses,
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
            let key = if format == Format::OpenaiResponses {
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
    let renders = replay(&fx, &log, Format::OpenaiChat);
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
    let a = replay(&fx, &log, Format::Anthropic);
    let b = replay(&fx, &log, Format::Anthropic);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.body().to_string(), y.body().to_string());
    }
    // From scratch with the final state equals the incremental result.
    let last = a.last().unwrap();
    let n = log.events.len() - 2;
    let fresh = render(
        &fx.input(&log.events[..n], Format::Anthropic),
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
    for r in replay(&fx, &log, Format::OpenaiChat) {
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
                assert_eq!(piece.tokens, format.msg_tokens(msg, &ApproxMeter), "{format:?}");
            }
        }
    }
}

#[test]
fn task_statement_and_system_survive_folding() {
    let fx = Fixture::new(2_000);
    let log = long_log(80, 40);
    let last = replay(&fx, &log, Format::OpenaiChat).pop().unwrap();
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
        &fx.input(&log.events, Format::OpenaiChat),
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
fn an_impossible_floor_is_a_typed_error() {
    let mut fx = Fixture::new(300);
    fx.policy.response_reserve = 10;
    let mut log = Log::new();
    log.system(&words(400, "s"));
    log.user("go");
    let err = render(
        &fx.input(&log.events, Format::OpenaiChat),
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
    let mut input = fx.input(&log.events, Format::OpenaiChat);
    input.injections = &injections;
    let err = render(&input, &CompactionState::default(), &mut CostMemo::new()).unwrap_err();
    assert!(
        matches!(&err, RenderError::InjectionOverflow { hook, .. } if hook == "memory"),
        "{err}"
    );
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
    });
    let r = render(
        &fx.input(&log.events, Format::OpenaiChat),
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
        &fx.input(&log.events, Format::Anthropic),
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
    let renders = replay(&fx, &log, Format::OpenaiChat);
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

// ---- Step grouping in the compact block (`group_steps`) ----

use crate::step::{Step, ToolKind};
use std::collections::BTreeSet;

/// The step of call `c{i}` (`step_{i+1:03}`), failed with `error` when given. A failure's
/// observation says its error, as the reducers' observations of failures do.
fn step_for(i: usize, kind: ToolKind, error: Option<&str>) -> (String, Step) {
    let mut s = match error {
        Some(e) => crate::compact::testing::failed(i + 1, kind, e),
        None => crate::compact::testing::step(i + 1, kind),
    };
    s.call_id = format!("c{i}");
    if let Some(e) = error {
        s.observation = format!("`cat file_c{i}.txt` {e}");
    }
    (s.call_id.clone(), s)
}

/// The compact block of a rendered request, if it has one.
fn block_of(r: &Rendered) -> Option<String> {
    r.request.messages.iter().find_map(|m| match m {
        Msg::User { content, .. } if content.text().starts_with(COMPACT_HEADER) => {
            Some(content.text().into_owned())
        }
        _ => None,
    })
}

/// The block without its omitted-count line (the only line allowed to change at its end).
fn without_count(block: &str) -> &str {
    match block.rsplit_once('\n') {
        Some((head, last)) if last.contains("omitted above") => head,
        _ => block,
    }
}

#[test]
fn grouped_blocks_extend_each_other_across_compaction_points() {
    let mut fx = Fixture::new(3_000);
    fx.policy.group_steps = true;
    fx.policy.max_compact_lines = 1_000;
    let log = long_log(150, 60);
    fx.steps = (0..150)
        .map(|i| step_for(i, ToolKind::Shell, (i % 7 == 3).then_some("exit 1: boom")))
        .collect();
    let renders = replay(&fx, &log, Format::OpenaiChat);
    let blocks: Vec<String> = renders.iter().filter_map(block_of).collect();
    let mut distinct = 1;
    for w in blocks.windows(2) {
        assert!(!w[1].contains("omitted above"), "{}", w[1]);
        assert!(
            w[1].starts_with(without_count(&w[0])),
            "a later block rewrote an earlier one:\n{}\n---\n{}",
            w[0],
            w[1]
        );
        distinct += usize::from(w[0] != w[1]);
    }
    assert!(
        distinct >= 3,
        "expected several fold points, got {distinct}"
    );
    let last = renders.last().unwrap();
    let block = block_of(last).unwrap();
    // One category throughout, yet several closed groups rather than one that grows.
    let groups = block
        .lines()
        .filter(|l| l.contains(" commands executed"))
        .count();
    assert!(groups >= 2, "{block}");
    assert!(!last.state.folds.is_empty());
    // Every failure folded so far has its own line with its error.
    let folded_failures: Vec<&Step> = fx
        .steps
        .values()
        .filter(|s| !s.success && block.contains(&format!("[{}]", s.id)))
        .collect();
    assert!(folded_failures.len() >= 2, "{block}");
    for s in folded_failures {
        let line = block
            .lines()
            .find(|l| l.starts_with(&format!("[{}] ✗", s.id)))
            .unwrap_or_else(|| panic!("no line of its own for {}:\n{block}", s.id));
        assert!(line.contains("exit 1: boom"), "{line}");
    }
    // Without the fold boundaries the same steps would merge into fewer, growing groups.
    let proj = Projection::build(&log.events, &fx.audience);
    let open = layout::compact_block(
        &proj,
        &last.state,
        None,
        &fx.steps,
        &mut Default::default(),
        1_000,
        Some(&BTreeSet::new()),
    )
    .unwrap();
    let merged = open
        .text
        .lines()
        .filter(|l| l.contains(" commands executed"))
        .count();
    assert!(merged < groups, "{}", open.text);
}

/// system, task, `c0..c5` shell (`c2` failed), a user message, `c6..c9` file reads.
fn grouping_fixture() -> (Log, StepIndex, Audience) {
    let mut log = Log::new();
    log.system("sys");
    log.user("task");
    for i in 0..6 {
        log.step(&format!("c{i}"), "ok");
    }
    log.user("keep going");
    for i in 6..10 {
        log.step(&format!("c{i}"), "ok");
    }
    let steps = (0..10)
        .map(|i| match i {
            2 => step_for(i, ToolKind::Shell, Some("exit 2: no such file")),
            0..6 => step_for(i, ToolKind::Shell, None),
            _ => step_for(i, ToolKind::ReadFile, None),
        })
        .collect();
    let audience = Audience {
        agent: None,
        now_ms: 0,
    };
    (log, steps, audience)
}

fn folded_to(boundary: Seq, folds: &[Seq]) -> CompactionState {
    CompactionState {
        boundary,
        folds: folds.iter().copied().collect(),
        ..CompactionState::default()
    }
}

#[test]
fn groups_keep_failures_on_their_own_line() {
    let (log, steps, audience) = grouping_fixture();
    let proj = Projection::build(&log.events, &audience);
    let all = log.events.len() as Seq + 1;
    let block = |max: usize, folds: Option<&BTreeSet<Seq>>| {
        layout::compact_block(
            &proj,
            &folded_to(all, &[]),
            None,
            &steps,
            &mut Default::default(),
            max,
            folds,
        )
        .unwrap()
        .text
    };
    let grouped = block(1_000, Some(&BTreeSet::new()));
    let lines: Vec<&str> = grouped.lines().skip(1).collect();
    assert_eq!(
        lines,
        [
            "[step_001..006] 6 commands executed (1 failed)",
            "[step_003] ✗ `cat file_c2.txt` exit 2: no such file (See seq 8)",
            "[user] keep going",
            "[step_007..010] 4 file operations (0.8KB total)",
        ]
    );
    // Off, one line per step, as before.
    let flat = block(1_000, None);
    assert_eq!(flat.lines().count(), 1 + 10 + 1);
    assert!(flat.contains("[step_003] ✗ `cat file_c2.txt` exit 2: no such file (See seq 8)"));
}

#[test]
fn omitted_count_counts_steps_not_groups() {
    let (log, steps, audience) = grouping_fixture();
    let proj = Projection::build(&log.events, &audience);
    let all = log.events.len() as Seq + 1;
    let open = BTreeSet::new();
    // Four lines (two group lines, the user line, one failure) into two: the oldest group
    // and the user line go; the group held five steps besides its failure.
    let b = layout::compact_block(
        &proj,
        &folded_to(all, &[]),
        None,
        &steps,
        &mut Default::default(),
        2,
        Some(&open),
    )
    .unwrap();
    let lines: Vec<&str> = b.text.lines().skip(1).collect();
    assert_eq!(
        lines,
        [
            "[step_003] ✗ `cat file_c2.txt` exit 2: no such file (See seq 8)",
            "[step_007..010] 4 file operations (0.8KB total)",
            "(5 earlier steps and 1 earlier messages omitted above; all are recoverable from the log)",
        ]
    );
    // The receipt's omitted units: the five steps' turns and the user message, not the failure.
    assert_eq!(b.omitted, vec![3, 5, 9, 11, 13, 15]);
    // Cut to nothing but failures, every step but the failed one is counted.
    let b = layout::compact_block(
        &proj,
        &folded_to(all, &[]),
        None,
        &steps,
        &mut Default::default(),
        0,
        Some(&open),
    )
    .unwrap();
    assert!(b.text.contains("[step_003] ✗"), "{}", b.text);
    assert!(
        b.text.ends_with("(9 earlier steps and 1 earlier messages omitted above; all are recoverable from the log)"),
        "{}",
        b.text
    );
}

#[test]
fn a_later_point_extends_the_groups_of_an_earlier_one() {
    let (log, steps, audience) = grouping_fixture();
    let proj = Projection::build(&log.events, &audience);
    let all = log.events.len() as Seq + 1;
    // Point 1 folded up to c3's turn (seq 9); point 2 folds the rest.
    let c3 = 9;
    assert!(
        matches!(&log.events[c3 as usize - 1].body, EventBody::Assistant { tool_calls, .. } if tool_calls[0].id == "c3")
    );
    let text = |state: &CompactionState| {
        layout::compact_block(
            &proj,
            state,
            None,
            &steps,
            &mut Default::default(),
            1_000,
            Some(&state.folds),
        )
        .unwrap()
        .text
    };
    let first = text(&folded_to(c3, &[]));
    let second = text(&folded_to(all, &[c3]));
    assert!(
        second.starts_with(without_count(&first)),
        "{first}\n---\n{second}"
    );
    assert!(second.contains("[step_001..003] 3 commands executed (1 failed)"));
    assert!(second.contains("[step_004..006] 3 commands executed\n"));
    // Without the earlier boundary the first group would grow and rewrite the prefix.
    let regrouped = text(&folded_to(all, &[]));
    assert!(!regrouped.starts_with(&first));
}

#[test]
fn fold_boundaries_are_serde_compatible() {
    let state = CompactionState::default();
    let json = serde_json::to_value(&state).unwrap();
    assert!(json.get("folds").is_none(), "{json}");
    let back: CompactionState = serde_json::from_value(json).unwrap();
    assert!(back.folds.is_empty());
    let state = folded_to(12, &[5, 9]);
    let json = serde_json::to_string(&state).unwrap();
    assert_eq!(
        serde_json::from_str::<CompactionState>(&json).unwrap(),
        state
    );
}

/// One model turn of a generated log: the kind of its calls, whether they fail, how many
/// parallel calls it makes, result size, and whether a user message comes before it.
type GenTurn = (usize, bool, usize, usize, bool);

/// A log of answered calls with a step for each; returns it with each call's turn seq.
fn grouped_log(turns: &[GenTurn]) -> (Log, StepIndex, Vec<(String, Seq)>) {
    let kinds = [
        ToolKind::Shell,
        ToolKind::ReadFile,
        ToolKind::WebSearch,
        ToolKind::Unknown,
    ];
    let mut log = Log::new();
    log.system("sys");
    log.user("task");
    let mut steps = StepIndex::new();
    let mut turn_of = Vec::new();
    let mut n = 0;
    for &(kind, fail, calls, size, user) in turns {
        if user {
            log.user("more");
        }
        let ids: Vec<String> = (n..n + calls).map(|i| format!("c{i}")).collect();
        let seq = log.push(EventBody::Assistant {
            content: Some(format!("turn {n}").into()),
            reasoning: None,
            tool_calls: ids
                .iter()
                .map(|id| ToolCall {
                    id: id.clone(),
                    name: "bash".into(),
                    arguments: format!("{{\"command\":\"cat {id}\"}}"),
                })
                .collect(),
            name: None,
        });
        for id in ids {
            let text = words(size, &format!("{id}_"));
            log.push(EventBody::ToolResult {
                call_id: id.clone(),
                tool_name: "bash".into(),
                stats: ContentStats::of(text.as_bytes()),
                content: ToolOutput::Text(text),
                is_error: false,
            });
            let (call, step) = step_for(n, kinds[kind].clone(), fail.then_some("exit 1: boom"));
            steps.insert(call, step);
            turn_of.push((id, seq));
            n += 1;
        }
    }
    (log, steps, turn_of)
}

fn grouping_cases() -> u32 {
    std::env::var("LOOM_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: grouping_cases(),
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// With grouping on: every request fits and is valid, every folded failure has its own
    /// line, and while nothing is omitted each block extends the one before it.
    #[test]
    fn grouped_blocks_fit_keep_failures_and_only_extend(
        turns in proptest::collection::vec((0usize..4, proptest::bool::weighted(0.2), 1usize..3, 0usize..200, proptest::bool::weighted(0.1)), 1..50),
        window in 300u64..5_000,
        max_lines in 0u32..30,
        protect in 0u32..3,
    ) {
        let (log, steps, turn_of) = grouped_log(&turns);
        let mut fx = Fixture::new(window + 100);
        fx.policy.group_steps = true;
        fx.policy.max_compact_lines = max_lines;
        fx.policy.protect_recent_turns = protect;
        fx.steps = steps;
        let budget = fx.policy.budget();
        for format in [Format::OpenaiChat, Format::Anthropic] {
            let mut state = CompactionState::default();
            let mut memo = CostMemo::new();
            let mut prev: Option<String> = None;
            let ends = log.events.iter().enumerate()
                .filter(|(_, e)| matches!(e.body, EventBody::Assistant { .. }))
                .map(|(i, _)| i)
                .chain([log.events.len()]);
            for end in ends {
                let r = match render(&fx.input(&log.events[..end], format), &state, &mut memo) {
                    Ok(r) => r,
                    Err(RenderError::OverBudget { floor, hard_total, .. }) => {
                        proptest::prop_assert!(floor > hard_total);
                        break;
                    }
                    Err(e) => return Err(proptest::test_runner::TestCaseError::fail(e.to_string())),
                };
                proptest::prop_assert!(r.receipt.estimate <= budget.hard_total);
                if let Err(v) = check_request(format, &r.body()) {
                    proptest::prop_assert!(false, "{format:?}: {v}");
                }
                let block = block_of(&r);
                if let Some(b) = &block {
                    for (call, seq) in &turn_of {
                        let s = &fx.steps[call];
                        if !s.success && *seq < r.state.boundary {
                            let own = format!("[{}] ✗", s.id);
                            proptest::prop_assert!(b.contains(&own), "{own} missing:\n{b}");
                        }
                    }
                }
                if let (Some(a), Some(b)) = (&prev, &block) {
                    // Below the line cap nothing was omitted (a group line whose steps all
                    // failed can go without a count: its failures say everything).
                    let intact = |t: &str| {
                        !t.contains("omitted above") && t.lines().count() - 1 < max_lines as usize
                    };
                    if intact(a) && intact(b) && r.state.block_lines.is_none() {
                        proptest::prop_assert!(b.starts_with(a.as_str()), "{a}\n---\n{b}");
                    }
                }
                prev = block;
                state = r.state;
            }
        }
    }
}

#[test]
fn an_oversized_task_statement_is_elided_as_a_last_resort() {
    let fx = Fixture::new(1_200);
    let mut log = Log::new();
    log.system("sys");
    log.user(&words(3_000, "task"));
    log.step("a", "ok");
    let r = render(
        &fx.input(&log.events, Format::OpenaiChat),
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
