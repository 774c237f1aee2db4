//! Cutting by value per token at a compaction point: the file being worked on stays, large
//! low-density outputs go first.

use super::*;
use crate::reduce::{Ingest, ReduceConfig};

/// A shell step whose command and output are given; its step is derived as at ingest.
fn shell(log: &mut Log, id: &str, command: &str, output: &str) {
    log.push(EventBody::Assistant {
        content: Some(format!("Next I run `{command}`.").into()),
        reasoning: None,
        tool_calls: vec![ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: serde_json::json!({ "command": command }).to_string(),
        }],
        name: None,
        native: None,
    });
    log.push(EventBody::ToolResult {
        call_id: id.into(),
        tool_name: "bash".into(),
        content: ToolOutput::Text(output.into()),
        is_error: false,
        stats: ContentStats::of(output.as_bytes()),
    });
}

/// The seq of the result of call `id`.
fn result_seq(log: &Log, id: &str) -> Seq {
    log.events
        .iter()
        .find_map(|e| match &e.body {
            EventBody::ToolResult { call_id, .. } if call_id == id => Some(e.seq),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result of {id}"))
}

/// The steps ingest derives for the log's results.
fn steps_of(log: &Log) -> StepIndex {
    let mut ingest = Ingest::new();
    let mut steps = StepIndex::new();
    for e in &log.events {
        if let (Some(arrived), EventBody::ToolResult { content, stats, .. }) =
            (ingest.next(e), &e.body)
        {
            let ToolOutput::Text(text) = content else {
                continue;
            };
            let step = arrived
                .reduce(&ReduceConfig::default(), text.as_bytes(), stats)
                .step;
            steps.insert(arrived.call_id().to_owned(), step);
        }
    }
    steps
}

fn source(name: &str, defs: usize) -> String {
    (0..defs)
        .map(|i| {
            format!(
                "def {name}_{i}(tokens):\n    # the token at this position, moved by its offset\n    \
                 return tokens[{i}] + offset_{i}\n"
            )
        })
        .collect()
}

/// A session that views the file it is asked to fix and two others, lists the tree, edits the
/// file and runs the tests. The point that the test log sets off cuts the listing and the views
/// of the files the agent is not working on, and keeps the view of the file it is editing, though
/// that view is the oldest result (oldest first, it would have gone first).
fn working_session() -> Log {
    let mut log = Log::new();
    log.system("You are a careful agent.");
    log.user("Fix the bug in src/parser.py");
    shell(&mut log, "c0", "cat src/parser.py", &source("parse", 20));
    shell(&mut log, "c1", "cat src/lexer.py", &source("lex", 30));
    shell(&mut log, "c2", "cat src/utils.py", &source("util", 30));
    let listing: String = (0..120)
        .map(|i| format!("src/module_{i}/file_{i}.py\n"))
        .collect();
    shell(&mut log, "c3", "ls -R", &listing);
    shell(
        &mut log,
        "c4",
        "sed -i 's/offset_3/offset_4/' src/parser.py",
        "",
    );
    let test_log: String = (0..120)
        .map(|i| format!("tests/test_parser.py::test_case_{i} PASSED [{i}%]\n"))
        .collect();
    shell(&mut log, "c5", "python -m pytest tests", &test_log);
    shell(
        &mut log,
        "c6",
        "python -m pytest tests/test_parser.py -q",
        "1 failed, 59 passed",
    );
    log
}

/// Each message as one line: its role and form, and the head of its text.
fn outline(r: &Rendered) -> String {
    let mut out = String::new();
    for m in &r.request.messages {
        let line = match m {
            Msg::System(c) => format!("system: {}", c.text()),
            Msg::User { content, .. } => format!("user: {}", content.text()),
            Msg::Assistant { content, calls, .. } => {
                let mut s = format!(
                    "assistant{}:",
                    if content.is_some() { "" } else { " (thinned)" }
                );
                for c in calls {
                    let text = c.content.text();
                    let head: String = text.lines().next().unwrap_or("").chars().take(70).collect();
                    s.push_str(&format!(
                        " {} [{:?}, {} lines] {head}",
                        c.call.arguments,
                        c.form,
                        text.lines().count()
                    ));
                }
                s
            }
        };
        let line: String = line.replace('\n', " / ").chars().take(200).collect();
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[test]
fn the_view_of_the_file_being_edited_stays_verbatim() {
    let log = working_session();
    let mut fx = Fixture::new(4_100);
    // Room after the point for what the protected turns hold (the test log) and the kept view.
    fx.policy.low_watermark = 0.7;
    fx.steps = steps_of(&log);
    let renders = replay(&fx, &log, Format::OPENAI_CHAT);
    let last = renders.last().unwrap();
    assert!(last.receipt.points >= 1, "the session must compact");
    let result_seq = |id: &str| result_seq(&log, id);
    let cut = |id: &str| {
        let seq = result_seq(id);
        last.state.stubbed.contains(&seq) || seq < last.state.boundary
    };
    assert!(
        !cut("c0"),
        "the view of the file being edited was cut: {}",
        outline(last)
    );
    for low in ["c1", "c2", "c3"] {
        assert!(
            cut(low),
            "{low} should go before the working file: {}",
            outline(last)
        );
    }
    // The receipt names the rule that took each: the point's low-density cut for every one.
    for low in ["c1", "c2", "c3"] {
        assert_eq!(
            last.receipt.rules.get(&result_seq(low)),
            Some(&CutRule::LowDensity),
            "{low}"
        );
    }
    // A stubbed view names what its one-line observation had no room for.
    let body = last.body().to_string();
    assert!(
        body.contains("; names: ") && body.contains("lex_29"),
        "{body}"
    );
    insta::assert_snapshot!("kept_working_file", outline(last));
}

#[test]
fn a_view_goes_by_its_size_once_work_on_its_file_has_moved_on() {
    let mut log = working_session();
    // Ten more turns on other files: parser.py is no longer being worked on.
    for i in 0..10 {
        shell(
            &mut log,
            &format!("d{i}"),
            &format!("sed -i 's/a/b/' src/other_{i}.py"),
            "",
        );
    }
    // A large output takes the request over the budget again.
    let listing: String = (0..150)
        .map(|i| format!("src/pkg_{i}/mod_{i}.py\n"))
        .collect();
    shell(&mut log, "e0", "ls -R src", &listing);
    shell(&mut log, "e1", "git status", "nothing to commit");
    let mut fx = Fixture::new(2_100);
    fx.steps = steps_of(&log);
    let renders = replay(&fx, &log, Format::OPENAI_CHAT);
    let last = renders.last().unwrap();
    let view = log
        .events
        .iter()
        .find_map(|e| match &e.body {
            EventBody::ToolResult { call_id, .. } if call_id == "c0" => Some(e.seq),
            _ => None,
        })
        .unwrap();
    assert!(
        last.state.stubbed.contains(&view) || view < last.state.boundary,
        "the old view stayed though work moved on: {}",
        outline(last)
    );
}

/// A test suite's output with one failing case (or none), as `pytest -v` prints it.
fn test_run(failing: Option<usize>) -> String {
    let mut out: String = (0..60)
        .map(|i| {
            let verdict = if Some(i) == failing {
                "FAILED"
            } else {
                "PASSED"
            };
            format!(
                "tests/test_parser.py::test_case_{i} {verdict} [{}%]\n",
                i * 100 / 60
            )
        })
        .collect();
    out.push_str(match failing {
        Some(_) => "======== 1 failed, 59 passed in 0.42s ========\n",
        None => "======== 60 passed in 0.41s ========\n",
    });
    out
}

/// The start of a fix: the task, a listing of the tree too large to keep once read (stubbed by
/// the oversized rule, the session's first point), and the tests failing.
fn failing_tests() -> Log {
    let mut log = Log::new();
    log.system("You are a careful agent.");
    log.user("Fix the failing test in tests/test_parser.py");
    let listing: String = (0..600)
        .map(|i| format!("src/module_{i}/file_{i}.py\n"))
        .collect();
    shell(&mut log, "ls", "ls -R", &listing);
    shell(
        &mut log,
        "c0",
        "python -m pytest tests -v",
        &test_run(Some(7)),
    );
    log
}

/// A final answer without calls: the render before it holds every result.
fn answer(log: &mut Log, text: &str) {
    log.push(EventBody::Assistant {
        content: Some(text.into()),
        reasoning: None,
        tool_calls: vec![],
        name: None,
        native: None,
    });
}

/// The session of a fix: the tests fail, the agent edits, runs the same tests again, and answers.
fn rerun_session() -> Log {
    let mut log = failing_tests();
    shell(
        &mut log,
        "c1",
        "sed -i 's/offset_3/offset_4/' src/parser.py",
        "",
    );
    shell(&mut log, "c2", "python -m pytest tests -v", &test_run(None));
    answer(&mut log, "All tests pass.");
    log
}

fn result_text(r: &Rendered, id: &str) -> String {
    r.request
        .messages
        .iter()
        .find_map(|m| match m {
            Msg::Assistant { calls, .. } => calls
                .iter()
                .find(|c| c.call.id == id)
                .map(|c| c.content.text().into_owned()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result of {id}"))
}

#[test]
fn the_output_of_a_call_made_again_is_sent_as_its_changes() {
    let log = rerun_session();
    let mut fx = Fixture::new(8_000);
    fx.steps = steps_of(&log);
    let renders = replay(&fx, &log, Format::OPENAI_CHAT);
    let last = renders.last().unwrap();
    // The listing's stub was the one point; nothing sent changed after it: the rerun's diff is
    // no point, and every request from then on extends the last.
    assert_eq!(last.receipt.points, 1);
    assert!(last.state.stubbed.contains(&result_seq(&log, "ls")));
    let first_point = renders.iter().position(|r| r.receipt.points == 1).unwrap();
    for pair in renders[first_point..].windows(2) {
        let (before, after) = (pair[0].body(), pair[1].body());
        let (before, after) = (
            before["messages"].as_array().unwrap(),
            after["messages"].as_array().unwrap(),
        );
        assert_eq!(before[..], after[..before.len()], "not append-only");
    }
    // The first run stays whole; the second is the lines that changed, with its reference.
    assert_eq!(result_text(last, "c0"), test_run(Some(7)));
    let rerun = result_text(last, "c2");
    assert!(rerun.len() * 4 < test_run(None).len(), "{rerun}");
    let seq = |id: &str| result_seq(&log, id);
    assert_eq!(last.state.diffed.get(&seq("c2")), Some(&seq("c0")));
    assert_eq!(
        last.receipt.diffed,
        vec![SeqRange {
            from: seq("c2"),
            to: seq("c2")
        }]
    );
    insta::assert_snapshot!("rerun_output_diff", rerun);

    // Without the rule the second run is sent whole.
    fx.policy.output_diffs = false;
    let whole = replay(&fx, &log, Format::OPENAI_CHAT);
    assert_eq!(result_text(whole.last().unwrap(), "c2"), test_run(None));

    // While everything fits (no point yet: the listing is small enough to keep), the request is
    // the history as it happened, the rerun included.
    fx.policy.output_diffs = true;
    fx.policy.context_window = 40_000;
    let fits = replay(&fx, &log, Format::OPENAI_CHAT);
    let fits = fits.last().unwrap();
    assert_eq!(fits.receipt.points, 0);
    assert_eq!(result_text(fits, "c2"), test_run(None));
}

#[test]
fn a_rerun_is_sent_whole_once_its_earlier_run_is_stubbed() {
    let log = rerun_session();
    let mut fx = Fixture::new(8_000);
    fx.steps = steps_of(&log);
    let renders = replay(&fx, &log, Format::OPENAI_CHAT);
    let mut state = renders.last().unwrap().state.clone();
    let (&rerun, &base) = state.diffed.iter().next().expect("the rerun is diffed");
    // A later point stubs the earlier run (superseded by the rerun): the diff would have
    // nothing to be read against, so the rerun is sent whole.
    state.stubbed.insert(base);
    let events = &log.events[..log.events.len() - 1];
    let r = render(
        &fx.input(events, Format::OPENAI_CHAT),
        &state,
        &mut CostMemo::new(),
    )
    .unwrap();
    assert_eq!(result_text(&r, "c2"), test_run(None));
    assert!(result_text(&r, "c0").contains("(See "), "{}", outline(&r));
    assert!(r.receipt.diffed.is_empty());
    assert!(r
        .receipt
        .verbatim
        .iter()
        .any(|s| (s.from..=s.to).contains(&rerun)));
    crate::render::check_request(r.format, &r.body()).unwrap();
}

#[test]
fn a_diff_over_the_oversized_share_is_stubbed_once_answered() {
    // The rerun prints the whole suite again and 300 lines of warnings: its diff is the
    // warnings, too large to keep once the agent has read them.
    let mut log = failing_tests();
    let mut noisy = test_run(Some(7));
    for i in 0..300 {
        noisy.push_str(&format!(
            "src/parser.py:{i}: DeprecationWarning: offset_{i} is deprecated\n"
        ));
    }
    shell(&mut log, "c2", "python -m pytest tests -v", &noisy);
    shell(&mut log, "c3", "git status", "nothing to commit");
    answer(&mut log, "Done.");
    let mut fx = Fixture::new(12_000);
    fx.policy.output_diff_share = 0.9;
    fx.steps = steps_of(&log);
    let renders = replay(&fx, &log, Format::OPENAI_CHAT);
    let seq = |id: &str| result_seq(&log, id);
    // Sent as its diff when it arrived, then stubbed by its size once the agent answered it.
    let arrived = &renders[renders.len() - 2];
    assert!(result_text(arrived, "c2").starts_with("[The output of this call"));
    let last = renders.last().unwrap();
    assert!(last.state.stubbed.contains(&seq("c2")), "{}", outline(last));
    assert_eq!(
        last.receipt.rules.get(&seq("c2")),
        Some(&CutRule::Oversized)
    );
    assert_eq!(result_text(last, "c0"), test_run(Some(7)));
}
