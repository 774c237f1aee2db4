//! Every `loom_recall ref=…` a `fit` request carries brings the original back in one call: over
//! the whole shared corpus, each trace imported, every model call rendered with the tool's
//! wording (`loom replay --emit-requests` with `[recall] mode = "tool"`), and every reference
//! answered as the proxy answers the tool (`loom_store::recall::answer`, uncapped).

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;

use loom_core::render::ApproxMeter;
use loom_core::ReduceConfig;
use loom_core::{EventBody, SessionId, ToolOutput};
use loom_store::recall::{answer, RecallArgs};
use loom_store::Offloader;
use sha2::{Digest, Sha256};

use super::{trace_files, Loom};

const MARK: &str = "loom_recall ref=";

/// The references in a request's JSON text, as a model reads them.
fn references(request: &str, out: &mut BTreeSet<String>) {
    let mut rest = request;
    while let Some(at) = rest.find(MARK) {
        rest = &rest[at + MARK.len()..];
        let reference: String = rest
            .chars()
            .take_while(|c| !c.is_whitespace() && !matches!(c, ')' | '"' | '\\' | ']' | ','))
            .collect();
        out.insert(reference.trim_end_matches(['.', ';', ':']).to_owned());
    }
}

fn sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn every_reference_in_a_fit_request_recalls_the_original() {
    let loom = Loom::new();
    let files = trace_files();
    let paths: Vec<&std::path::Path> = files.iter().map(|p| p.as_path()).collect();
    loom.import(&paths);
    let policy = loom.file("recall.toml", "[recall]\nmode = \"tool\"\n");
    let requests = loom.dir.path().join("requests.jsonl");
    let mut args: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    args.extend([
        "replay".into(),
        "--budget".into(),
        "16000".into(),
        "--policy".into(),
        policy.display().to_string(),
        "--emit-requests".into(),
        requests.display().to_string(),
    ]);
    args.rotate_right(7);
    loom.run(&args).ok();

    // Every reference, by session.
    let mut wanted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let reader = std::io::BufReader::new(std::fs::File::open(&requests).unwrap());
    for line in reader.lines() {
        let line = line.unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let session = v["trace_id"].as_str().unwrap().to_owned();
        references(
            &v["request"].to_string(),
            wanted.entry(session).or_default(),
        );
    }
    let total: usize = wanted.values().map(BTreeSet::len).sum();
    assert!(
        total > 500,
        "the corpus at 16k should stub: {total} references"
    );

    let ws = loom_store::open(loom.db().to_str().unwrap()).unwrap();
    let (store, blobs) = (ws.store.as_ref(), ws.blobs.as_ref());
    let reduce = ReduceConfig::default();
    let meter = ApproxMeter;
    let mut failures = Vec::new();
    let mut outputs = 0usize;
    for (session, refs) in &wanted {
        let id = SessionId::new(session).unwrap();
        Offloader::new(store, blobs, &reduce)
            .run(&id, false)
            .unwrap();
        let latest = store.latest_seq(&id).unwrap();
        let events = store.read(&id, 1..=latest).unwrap();
        let originals: BTreeSet<&str> = events
            .iter()
            .filter_map(|e| match &e.body {
                EventBody::ToolResult { stats, .. } => Some(stats.sha256.as_str()),
                _ => None,
            })
            .collect();
        for reference in refs {
            let args = RecallArgs {
                reference: reference.clone(),
                start_line: None,
                end_line: None,
            };
            let a = answer(store, blobs, &reduce, &id, &args, u64::MAX, &meter).unwrap();
            if a.is_error {
                failures.push(format!("{session} {reference}: {}", a.text));
                continue;
            }
            let range = reference.strip_prefix("seq:");
            let single = range.and_then(|r| r.parse::<u64>().ok());
            let whole_output = match (range, single) {
                (None, _) => true,
                (Some(_), Some(seq)) => matches!(
                    events.get(seq as usize - 1).map(|e| &e.body),
                    Some(EventBody::ToolResult {
                        content: ToolOutput::Text(_) | ToolOutput::Blob(_),
                        ..
                    })
                ),
                (Some(_), None) => false,
            };
            if whole_output {
                outputs += 1;
                if !originals.contains(sha256(&a.text).as_str()) {
                    failures.push(format!(
                        "{session} {reference}: the answer is not an original's bytes"
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} references failed; first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    assert!(outputs > 100, "{outputs} outputs recalled whole");
    eprintln!("{total} references recalled; {outputs} of them whole outputs, byte for byte");
}
