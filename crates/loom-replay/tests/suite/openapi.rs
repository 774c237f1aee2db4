//! Every request Loom renders from the shared traces is valid against OpenAI's published API
//! description: every call of a sample of trajectories from each trace file, replayed as `loom
//! replay` does, in OpenAI Chat and OpenAI Responses at one budget.
//!
//! All calls of all trajectories take minutes in a debug build (replaying is per trajectory, call
//! after call, so the sample is of trajectories): each file contributes its longest trajectory
//! (the one that compacts most at this budget), its shortest and its median one by message
//! count, and every call of those is validated.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Instant;

use loom_core::render::{Format, Policy};
use loom_core::ReduceConfig;
use loom_import::{parse_file, ParseOptions, ParsedSession};
use loom_replay::{EncodingMeter, ReplayOptions, Replayer};
use loom_store::MemoryBlobStore;
use loom_testkit::OpenApi;
use loom_tokens::Encoding;

/// The budget every call is rendered at: small enough that long traces compact.
const BUDGET: u64 = 16_000;

/// At most this many invalid bodies are shown in the failure message.
const SHOWN: usize = 5;

fn trace_files(shared: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(shared.join("traces"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    files
}

/// The shortest, median and longest trajectory of a file, by number of events.
fn sample(mut list: Vec<ParsedSession>) -> Vec<ParsedSession> {
    list.sort_by_key(|s| (s.events.len(), s.id.clone()));
    let picks: BTreeSet<usize> = [0, list.len() / 2, list.len().saturating_sub(1)]
        .into_iter()
        .collect();
    list.into_iter()
        .enumerate()
        .filter(|(i, _)| picks.contains(i))
        .map(|(_, s)| s)
        .collect()
}

#[test]
fn every_rendered_request_is_valid_against_the_openai_description() {
    let Some(shared) = loom_testkit::shared_dir() else {
        eprintln!(
            "SKIPPED: ../shared (OpenAI's API description and the traces) is not beside the \
             workspace, so rendered requests cannot be validated"
        );
        return;
    };
    let api = OpenApi::load().unwrap();
    let files = trace_files(&shared);
    assert!(!files.is_empty(), "no traces under {}", shared.display());
    let blobs = MemoryBlobStore::new();
    let sessions: Vec<(String, Vec<_>)> = files
        .iter()
        .map(|p| {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            let list = parse_file(p, &ParseOptions::new(0), &blobs)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (stem, sample(list))
        })
        .collect();
    let meter = EncodingMeter(Encoding::O200kBase);
    let mut invalid: Vec<String> = Vec::new();
    let mut checked = 0usize;
    let mut compacted = 0usize;
    let started = Instant::now();
    for (format, schema) in [
        (Format::OPENAI_CHAT, "CreateChatCompletionRequest"),
        (Format::OPENAI_RESPONSES, "CreateResponse"),
    ] {
        let opts = ReplayOptions {
            model: "gpt-4o".into(),
            budget: BUDGET,
            policy: Policy::default(),
            format,
            reduce: ReduceConfig::default(),
        };
        let replayer = Replayer::new(opts, &meter, &blobs);
        for (source, list) in &sessions {
            for session in list {
                let mut emit = |call: usize, r: &loom_core::render::Rendered| {
                    checked += 1;
                    if let Err(errors) = api.validate(schema, &r.body()) {
                        invalid.push(format!(
                            "{source} / {} / call {call} ({}): {}",
                            session.id,
                            format.as_str(),
                            errors.join("\n    ")
                        ));
                    }
                };
                let run = replayer.run(session, source, &mut emit).unwrap();
                compacted += run.calls.iter().filter(|c| c.compaction).count();
                assert!(
                    run.error.is_none(),
                    "{source} / {}: {:?}",
                    session.id,
                    run.error
                );
            }
        }
    }
    eprintln!(
        "validated {checked} rendered requests ({compacted} at a compaction point) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(checked > 0, "no request was rendered");
    assert!(compacted > 0, "the sample must include compacted requests");
    assert!(
        invalid.is_empty(),
        "{} of {checked} rendered requests are invalid; the first {}:\n{}",
        invalid.len(),
        SHOWN.min(invalid.len()),
        invalid[..SHOWN.min(invalid.len())].join("\n")
    );
}
