//! Step grouping in the compact block (`group_steps`): groups form within the span between two
//! fold points, keep their failures on lines of their own, and a later point's block extends an
//! earlier one's.

use std::collections::BTreeSet;

use super::*;
use crate::step::{Step, ToolKind};

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
    let renders = replay(&fx, &log, Format::OPENAI_CHAT);
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
        &RecallRefs::See,
    )
    .unwrap();
    let merged = open
        .text
        .lines()
        .filter(|l| l.contains(" commands executed"))
        .count();
    assert!(merged < groups, "{}", open.text);
}

/// system, task, `c0..c5` shell (`c2` failed), a user message, `c6..c9` file writes (file
/// views are never grouped).
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
            _ => step_for(i, ToolKind::WriteFile, None),
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
            &RecallRefs::See,
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

/// With the recall tool, every line says how to read its original: a step by its reference, a
/// group and an omitted run by the range of the log they cover.
#[test]
fn with_the_recall_tool_every_line_says_how_to_recall_it() {
    let (log, steps, audience) = grouping_fixture();
    let proj = Projection::build(&log.events, &audience);
    let all = log.events.len() as Seq + 1;
    let open = BTreeSet::new();
    let block = |max: usize| {
        layout::compact_block(
            &proj,
            &folded_to(all, &[]),
            None,
            &steps,
            &mut Default::default(),
            max,
            Some(&open),
            &RecallRefs::Tool,
        )
        .unwrap()
        .text
    };
    let whole = block(1_000);
    let lines: Vec<&str> = whole.lines().skip(2).collect();
    assert_eq!(
        lines,
        [
            "[step_001..006] 6 commands executed (1 failed) (loom_recall ref=seq:3-14)",
            "[step_003] ✗ `cat file_c2.txt` exit 2: no such file (loom_recall ref=seq:8)",
            "[user] keep going",
            "[step_007..010] 4 file operations (0.8KB total) (loom_recall ref=seq:16-23)",
        ],
        "{whole}"
    );
    assert!(
        whole.lines().nth(1).unwrap().contains("loom_recall"),
        "{whole}"
    );
    let cut = block(2);
    assert!(
        cut.ends_with("(5 earlier steps and 1 earlier messages omitted above; their originals: loom_recall ref=seq:3-15)"),
        "{cut}"
    );
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
        &RecallRefs::See,
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
        &RecallRefs::See,
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
            &RecallRefs::See,
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
        ToolKind::WriteFile,
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
            native: None,
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
        for format in [Format::OPENAI_CHAT, Format::ANTHROPIC] {
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
