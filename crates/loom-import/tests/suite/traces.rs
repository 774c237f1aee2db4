//! Every shared trace imports with zero errors, one event per message.

use std::path::PathBuf;

use loom_core::Api;
use loom_core::EventBody;
use loom_import::parse_file;
use loom_store::MemoryBlobStore;

use super::{opts, TRACES};

fn trace_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(TRACES)
        .expect("the shared traces are readable")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no traces under {TRACES}");
    files
}

/// (trajectories, messages) counted straight from the JSONL.
fn direct_count(path: &PathBuf) -> (usize, usize) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut sessions = 0;
    let mut messages = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        sessions += 1;
        messages += v["messages"].as_array().unwrap().len();
    }
    (sessions, messages)
}

#[test]
fn every_trace_file_parses_with_one_event_per_message() {
    for path in trace_files() {
        let blobs = MemoryBlobStore::new();
        let sessions = parse_file(&path, &opts(None), &blobs)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (want_sessions, want_events) = direct_count(&path);
        let events: usize = sessions.iter().map(|s| s.events.len()).sum();
        assert_eq!(sessions.len(), want_sessions, "{}", path.display());
        assert_eq!(events, want_events, "{}", path.display());
        assert!(sessions.iter().all(|s| s.format == Api::OpenaiChat));
    }
}

#[test]
fn ids_and_agents_come_from_the_trajectories() {
    let path = PathBuf::from(TRACES).join("fireact_hotpotqa__gpt35ft_run.jsonl");
    let first_line = std::fs::read_to_string(&path).unwrap();
    let first: serde_json::Value =
        serde_json::from_str(first_line.lines().next().unwrap()).unwrap();
    let blobs = MemoryBlobStore::new();
    let sessions = parse_file(&path, &opts(None), &blobs).unwrap();
    assert_eq!(sessions[0].id.as_str(), first["id"].as_str().unwrap());
    assert_eq!(
        sessions[0].agent.as_str(),
        first["source"].as_str().unwrap()
    );
    assert_eq!(sessions[0].at.line, Some(1));
    assert_eq!(sessions[1].at.line, Some(2));
}

#[test]
fn reused_call_ids_are_renamed_and_results_follow_them() {
    // tau-bench reuses call ids once their result is in.
    let path = PathBuf::from(TRACES).join("tau_bench_airline_gpt4o.jsonl");
    let blobs = MemoryBlobStore::new();
    let sessions = parse_file(&path, &opts(None), &blobs).unwrap();
    let mut renamed = 0;
    for s in &sessions {
        let mut calls = std::collections::BTreeSet::new();
        for e in &s.events {
            match &e.body {
                EventBody::Assistant { tool_calls, .. } => {
                    for c in tool_calls {
                        assert!(calls.insert(c.id.clone()), "{}: id {} twice", s.id, c.id);
                        renamed += usize::from(c.id.contains("_r"));
                    }
                }
                EventBody::ToolResult { call_id, .. } => assert!(calls.contains(call_id)),
                _ => {}
            }
        }
    }
    assert!(renamed > 0, "tau-bench is known to reuse call ids");
}

#[test]
fn a_trace_file_reads_from_memory_as_the_streaming_reader_reads_it() {
    // The shared traces, read whole and line by line, against the streaming reader.
    for path in trace_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        super::same_as_file(&text, None);
    }
    let line = r#"{"id": "t1", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}"#;
    let other = r#"{"id": "t2", "messages": [{"role": "user", "content": "more"}]}"#;
    for text in [
        // Blank lines, CRLF, a byte-order mark, indentation: the fast path.
        format!("\u{feff}{line}\r\n\r\n  {other}\t\n"),
        // A record over several lines, or two on one line: the streaming reader reads them.
        format!("{line}\n{{\"id\": \"t2\",\n \"messages\": [{{\"role\": \"user\", \"content\": \"x\"}}]}}\n"),
        format!("{line} {other}\n"),
        // Errors: bad JSON on line 3, a bare word, an empty file.
        format!("{line}\n\n{{\"id\": \"t2\", \"messages\": [}}\n"),
        format!("{line}\nnot json\n"),
        String::new(),
    ] {
        super::same_as_file(&text, None);
    }
}
