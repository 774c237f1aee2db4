//! Summary input and output: bounded, turn-aligned chunks; the checks; the deterministic
//! summarizer.

use loom_core::render::{ApproxMeter, Projection, TokenMeter};
use loom_core::{EventBody, Seq};
use loom_runtime::summary::{identifiers, next_chunk, Chunk, EntryLimits, PreviousSummary};
use loom_runtime::{
    check_summary, DeterministicSummarizer, Rejection, Summarizer, SummaryRequest, DEFAULT_SECTIONS,
};

use super::support::{audience, session, words, Log};

fn busy_log() -> Log {
    let mut log = Log::new();
    log.system("You are an agent.");
    log.user("Migrate the billing tables in db/schema_v3.sql");
    let big = format!("{}SECRET_MIDDLE {}", words(5_000, "x"), words(5_000, "y"));
    log.step("a0", "bash", r#"{"command":"cat db/schema_v3.sql"}"#, &big);
    // Parallel calls whose results arrive after a user message: the turn must stay whole.
    log.calls(
        Some("Reading two files at once"),
        &[
            ("p1", "bash", r#"{"command":"cat a_1.txt"}"#),
            ("p2", "bash", r#"{"command":"cat b_2.txt"}"#),
        ],
    );
    log.result("p1", &words(30, "p1_"), false);
    log.user("also check the indexes");
    log.result("p2", &words(30, "p2_"), false);
    for i in 0..8 {
        log.step(
            &format!("s{i}"),
            "bash",
            &format!(r#"{{"command":"psql -c 'select {i}'"}}"#),
            &words(40, &format!("r{i}_")),
        );
        log.assistant(&words(25, &format!("said{i}_")));
    }
    log.calls(
        None,
        &[("bad", "bash", r#"{"command":"psql -f db/migrate_7.sql"}"#)],
    );
    log.result("bad", "ERROR: relation billing_v2 does not exist", true);
    log.user("and what about db/schema_v3.sql?");
    log.step("last", "bash", r#"{"command":"ls"}"#, "a b c");
    log
}

fn all_chunks(log: &Log, cap: u64, limits: &EntryLimits) -> Vec<Chunk> {
    let events = log.log();
    let proj = Projection::build(&events, &audience(0));
    let steps = log.step_index();
    let limit = proj.recent_turns_start(1);
    let mut out: Vec<Chunk> = Vec::new();
    let mut covered = 0;
    while let Some(c) = next_chunk(&proj, &steps, covered, limit, cap, &ApproxMeter, limits) {
        covered = c.to_seq;
        out.push(c);
        assert!(out.len() < 1_000);
    }
    out
}

/// Result seqs of every call made at or before `to`, by call seq.
fn results_of_calls_up_to(log: &Log, to: Seq) -> Vec<(Seq, Seq)> {
    let events = log.log();
    let mut out = Vec::new();
    for e in &events {
        if let EventBody::Assistant { tool_calls, .. } = &e.body {
            for c in tool_calls {
                let r = events
                    .iter()
                    .find(|r| matches!(&r.body, EventBody::ToolResult { call_id, .. } if *call_id == c.id))
                    .map(|r| r.seq)
                    .unwrap();
                if e.seq <= to {
                    out.push((e.seq, r));
                }
            }
        }
    }
    out
}

#[test]
fn chunks_are_bounded_contiguous_and_never_split_a_turn_from_its_results() {
    let log = busy_log();
    let limits = EntryLimits::default();
    for cap in [60, 120, 250, 600, 5_000] {
        let chunks = all_chunks(&log, cap, &limits);
        assert!(!chunks.is_empty(), "cap {cap}");
        let mut expected_from = 1;
        for c in &chunks {
            assert_eq!(
                c.from_seq, expected_from,
                "cap {cap}: chunks are contiguous"
            );
            expected_from = c.to_seq + 1;
            assert!(c.tokens <= cap, "cap {cap}: chunk of {} tokens", c.tokens);
            let counted: u64 = c.entries.iter().map(|e| ApproxMeter.count(&e.line())).sum();
            assert_eq!(counted, c.tokens);
            for (call, result) in results_of_calls_up_to(&log, c.to_seq) {
                assert!(
                    result <= c.to_seq,
                    "cap {cap}: chunk ending at {} covers the call at {call} but not its result at {result}",
                    c.to_seq
                );
            }
        }
        // Every chunk stays before the protected last turn.
        let events = log.log();
        let proj = Projection::build(&events, &audience(0));
        let protected = proj.units[proj.recent_turns_start(1)].seq;
        assert!(chunks.last().unwrap().to_seq < protected);
    }
}

#[test]
fn a_50kb_result_enters_as_its_observation_never_raw() {
    let log = busy_log();
    let chunks = all_chunks(&log, 100_000, &EntryLimits::default());
    let text: String = chunks
        .iter()
        .flat_map(|c| c.entries.iter().map(|e| e.line()))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!text.contains("SECRET_MIDDLE"));
    assert!(!text.contains("x4000"));
    let first = &chunks[0].entries;
    let step = first
        .iter()
        .find(|e| e.text.contains("cat db/schema_v3.sql"))
        .unwrap();
    // The observation comes from the step reduced at ingest, with its reference.
    let observation = &log.step_index()["a0"].observation;
    assert!(step.text.contains(observation.as_str()), "{}", step.text);
    assert!(step.text.contains("(See "));
    assert!(text.len() < 12_000, "transcript is {} bytes", text.len());
}

#[test]
fn a_pending_call_is_not_covered() {
    let mut log = Log::new();
    log.user("go");
    log.step("a", "bash", "{}", "ok");
    log.calls(None, &[("b", "bash", "{}")]);
    log.user("still waiting");
    log.step("c", "bash", "{}", "ok");
    let events = log.log();
    let proj = Projection::build(&events, &audience(0));
    let chunk = next_chunk(
        &proj,
        &log.step_index(),
        0,
        proj.units.len(),
        10_000,
        &ApproxMeter,
        &EntryLimits::default(),
    )
    .unwrap();
    // Stops before the turn at seq 4 whose call has no result.
    assert_eq!(chunk.to_seq, 3);
}

fn request_for(log: &Log, later_mentions: &str) -> SummaryRequest {
    let chunks = all_chunks(log, 100_000, &EntryLimits::default());
    let c = &chunks[0];
    let later: Vec<String> = identifiers(later_mentions);
    let must_keep = c
        .entries
        .iter()
        .flat_map(|e| identifiers(&e.line()))
        .filter(|id| later.contains(id))
        .collect();
    SummaryRequest {
        session: session(),
        task: Some("Migrate the billing tables in db/schema_v3.sql".into()),
        previous: None,
        from_seq: c.from_seq,
        to_seq: c.to_seq,
        entries: c.entries.clone(),
        must_keep,
        sections: DEFAULT_SECTIONS.iter().map(|s| (*s).to_owned()).collect(),
        prefix: None,
        max_output_tokens: 512,
    }
}

#[test]
fn the_checks_name_what_is_wrong() {
    let log = busy_log();
    let req = request_for(&log, "rerun db/migrate_7.sql");
    assert_eq!(req.must_keep, vec!["db/migrate_7.sql".to_owned()]);
    let good =
        "## Goal\nMigrate billing.\n## Progress\n- db/migrate_7.sql failed\n## Open items\n- fix";
    assert_eq!(check_summary(good, &req, &ApproxMeter), Ok(()));
    assert_eq!(
        check_summary(" \n", &req, &ApproxMeter),
        Err(Rejection::Empty)
    );
    let no_id =
        "## Goal\nMigrate billing.\n## Progress\n- a migration failed\n## Open items\n- fix";
    assert_eq!(
        check_summary(no_id, &req, &ApproxMeter),
        Err(Rejection::MissingIdentifiers {
            missing: vec!["db/migrate_7.sql".into()]
        })
    );
    let no_open = "## Goal\nMigrate billing.\n## Progress\n- db/migrate_7.sql failed";
    assert_eq!(
        check_summary(no_open, &req, &ApproxMeter),
        Err(Rejection::MissingSections {
            missing: vec!["Open items".into()]
        })
    );
    let long = format!("{good}\n{}", req.transcript());
    assert!(matches!(
        check_summary(&long, &req, &ApproxMeter),
        Err(Rejection::NotShorter { output_tokens, replaced_tokens }) if output_tokens >= replaced_tokens
    ));
}

#[test]
fn the_deterministic_summary_passes_its_checks_and_keeps_failures() {
    let log = busy_log();
    let req = request_for(&log, "see db/migrate_7.sql and a_1.txt again");
    assert_eq!(req.must_keep.len(), 2);
    let s = DeterministicSummarizer::default();
    let out = s.summarize(&req).unwrap();
    assert_eq!(check_summary(&out, &req, &ApproxMeter), Ok(()), "{out}");
    assert_eq!(s.summarize(&req).unwrap(), out, "deterministic");
    assert!(out.contains("## Goal\nMigrate the billing tables in db/schema_v3.sql"));
    // The failed step is a progress line and an open item.
    assert!(out.lines().any(|l| l.contains("✗")), "{out}");
    assert!(out.contains("failures to revisit"));

    // Under a tight cap, old lines are counted as omitted and the failure survives.
    let tight = DeterministicSummarizer {
        max_progress_lines: 3,
        ..DeterministicSummarizer::default()
    };
    let out = tight.summarize(&req).unwrap();
    let progress: Vec<&str> = out.lines().filter(|l| l.starts_with("- [seq")).collect();
    assert_eq!(progress.len(), 3);
    assert!(progress.iter().any(|l| l.contains("✗")));
    let omitted = req.entries.len() - 3;
    assert!(
        out.contains(&format!("({omitted} earlier entries omitted")),
        "{out}"
    );
}

#[test]
fn the_deterministic_summary_extends_the_previous_one() {
    let log = busy_log();
    let mut req = request_for(&log, "");
    let first = DeterministicSummarizer::default().summarize(&req).unwrap();
    req.previous = Some(PreviousSummary {
        version: 1,
        to_seq: req.to_seq,
        content: first.clone(),
    });
    req.from_seq = req.to_seq + 1;
    req.to_seq += 10;
    req.task = None;
    req.entries.truncate(2);
    let second = DeterministicSummarizer::default().summarize(&req).unwrap();
    assert!(second.contains("## Goal\nMigrate the billing tables"));
    // Every earlier progress line is still there, followed by the new ones.
    let lines = |s: &str| {
        s.lines()
            .filter(|l| l.starts_with("- [seq"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let (a, b) = (lines(&first), lines(&second));
    assert_eq!(&b[..a.len()], a.as_slice());
    assert_eq!(b.len(), a.len() + 2);
}
