//! The LLM summarizer against the local mock: both wire formats, the conversation's prefix reused
//! byte for byte, the instruction last, bounded input, errors and rejections.

use std::sync::Arc;
use std::time::Duration;

use loom_core::render::{render, CompactionState, CostMemo, Format, RenderInput, Rendered};
use loom_core::Api;
use loom_runtime::summary::{identifiers, Entry, EntryKind, PreviousSummary};
use loom_runtime::{
    summarize_next, summary_views, ChunkOutcome, HttpSummarizer, Job, Rejection, RuntimeError,
    Summarizer, SummaryRequest, WorkerConfig, DEFAULT_SECTIONS,
};
use loom_store::{MemoryStore, Store};
use serde_json::Value;

use super::mock::{last_user_text, MockServer, Reply};
use super::support::{audience, policy, session, setup, store_with, words, Log};

/// The window of the conversation and of the worker (they must render alike).
const WINDOW: u64 = 2_000;

/// A task, a 50 KB read early on, many steps, and later turns that mention a path and a step id
/// from the early part.
fn conversation() -> Log {
    let mut log = Log::new();
    log.system("You are a careful agent. Work in the repository at /repo.");
    log.user("Fix the failing test in src/parser_v2.py");
    let big = format!(
        "{}MARKER_MIDDLE_OF_BIG_RESULT {}",
        words(4_000, "head"),
        words(4_000, "tail")
    );
    assert!(big.len() > 50_000);
    log.step("c0", "bash", r#"{"command":"cat src/parser_v2.py"}"#, &big);
    for i in 1..10 {
        log.step(
            &format!("c{i}"),
            "bash",
            &format!(r#"{{"command":"grep -n token src/mod_{i}.py"}}"#),
            &words(80, &format!("line{i}_")),
        );
        log.assistant(&format!("Checked module {i}; {}", words(20, "note")));
    }
    log.user("Now rerun the tests for src/parser_v2.py and report");
    log.step(
        "c10",
        "bash",
        r#"{"command":"pytest src/parser_v2.py tests/test_parser_v2.py"}"#,
        "1 failed",
    );
    log.step("c11", "bash", r#"{"command":"echo done"}"#, "done");
    log
}

fn conversation_render(store: &MemoryStore, log: &Log, format: Format) -> Rendered {
    let events = store.read(&session(), 1..=u64::MAX).unwrap();
    let views = summary_views(&store.summaries(&session()).unwrap());
    let steps = log.step_index();
    let setup = setup(format);
    let audience = audience(10_000_000);
    let policy = policy(WINDOW);
    render(
        &RenderInput {
            events: &events,
            steps: &steps,
            summaries: &views,
            policy: &policy,
            format,
            model: &setup.model,
            tools: &setup.tools,
            injections: &[],
            audience: &audience,
            meter: &*setup.meter,
        },
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap()
}

fn config(format: Format) -> WorkerConfig {
    WorkerConfig {
        trigger: None,
        min_chunk_tokens: 0,
        ..WorkerConfig::new(policy(WINDOW), setup(format))
    }
}

fn run(api: Api) -> (MockServer, Rendered, ChunkOutcome, Arc<MemoryStore>) {
    let log = conversation();
    let store = store_with(&log);
    let format = Format::from(api);
    let conv = conversation_render(&store, &log, format);
    assert!(
        conv.request.stable_len > 1,
        "the fixture should have compacted (a compact block in the prefix)"
    );
    let server = MockServer::start();
    let summarizer = HttpSummarizer::new(api, &server.url)
        .api_key("test-key")
        .timeout(Duration::from_secs(20));
    let job = Job {
        session: session(),
        state: conv.state.clone(),
        now_ms: 10_000_000,
    };
    let outcome = summarize_next(&*store, &summarizer, &config(format), &job).unwrap();
    (server, conv, outcome, store)
}

fn instruction_tail() -> &'static str {
    "Do not call tools. Reply with the summary only."
}

fn check_common(server: &MockServer, conv: &Rendered, outcome: &ChunkOutcome, store: &MemoryStore) {
    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    let req = &seen[0];
    let body = &req.body;
    let conv_body = &conv.body();

    // Same model and tools as the conversation.
    assert_eq!(body["model"], conv_body["model"]);
    assert_eq!(body["tools"], conv_body["tools"]);
    // The conversation's messages up to the summary prompt, byte for byte.
    let msgs = body["messages"].as_array().unwrap();
    let conv_msgs = conv_body["messages"].as_array().unwrap();
    let prefix = msgs.len() - 1;
    assert!(prefix >= 1);
    assert_eq!(
        serde_json::to_string(&msgs[..prefix]).unwrap(),
        serde_json::to_string(&conv_msgs[..prefix]).unwrap()
    );
    // The instruction is last.
    let prompt = last_user_text(&req.path, body);
    assert!(prompt.ends_with(instruction_tail()), "{prompt}");
    let events_at = prompt.find("Events seq").unwrap();
    let instruction_at = prompt.find("Update the running summary").unwrap();
    assert!(events_at < instruction_at);

    // Bounded input: the 50 KB result went in as its observation, not raw.
    let text = body.to_string();
    assert!(!text.contains("MARKER_MIDDLE_OF_BIG_RESULT"));
    assert!(
        text.len() < 20_000,
        "summary request is {} bytes",
        text.len()
    );
    assert!(prompt.contains("cat src/parser_v2.py"));

    // Identifiers from the covered span that later turns use are required, and kept.
    assert!(prompt.contains("src/parser_v2.py"));
    let ChunkOutcome::Stored(summary) = outcome else {
        panic!("expected a stored summary, got {outcome:?}")
    };
    assert_eq!(summary.summary.from_seq, 1);
    assert!(identifiers(&summary.summary.content).contains(&"src/parser_v2.py".to_owned()));
    assert_eq!(store.summaries(&session()).unwrap(), vec![summary.clone()]);
    assert!(summary.summary.producer.starts_with("http:"));
}

#[test]
fn openai_request_reuses_the_conversation_prefix_with_the_instruction_last() {
    let (server, conv, outcome, store) = run(Api::OpenaiChat);
    check_common(&server, &conv, &outcome, &store);
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.body["messages"][0]["role"], "system");
    assert!(req.body["max_tokens"].is_u64());
    assert!(req.body.get("tool_choice").is_none());
}

#[test]
fn anthropic_request_reuses_the_conversation_prefix_with_the_instruction_last() {
    let (server, conv, outcome, store) = run(Api::Anthropic);
    check_common(&server, &conv, &outcome, &store);
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/messages");
    assert_eq!(req.body["system"], conv.body()["system"]);
    assert_eq!(req.headers["anthropic-version"], "2023-06-01");
    // The cache breakpoint sits on the same block as in the conversation.
    let marked = |v: &Value| {
        v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .position(|m| m.to_string().contains("cache_control"))
    };
    assert_eq!(marked(&req.body), marked(&conv.body()));
}

fn request() -> SummaryRequest {
    SummaryRequest {
        session: session(),
        task: Some("fix it".into()),
        previous: Some(PreviousSummary {
            version: 1,
            to_seq: 4,
            content: "## Goal\nfix it\n## Progress\n- started\n## Open items\n- none".into(),
        }),
        from_seq: 5,
        to_seq: 9,
        entries: vec![Entry {
            seq: 5,
            kind: EntryKind::Step,
            text: format!("step_001 bash(ls) → {} (See seq 6)", words(60, "f")),
            brief: "step_001 listed files (See seq 6)".into(),
            failed: false,
        }],
        must_keep: vec!["conf/app_v2.toml".into()],
        sections: DEFAULT_SECTIONS.iter().map(|s| (*s).to_owned()).collect(),
        prefix: None,
        max_output_tokens: 256,
    }
}

#[test]
fn an_error_status_is_a_typed_error_with_the_status() {
    let server = MockServer::start();
    server.set_reply(Reply::Status(529));
    let s = HttpSummarizer::new(Api::Anthropic, format!("{}/v1/", server.url))
        .api_key("test-key")
        .model("claude-test");
    let err = s.summarize(&request()).unwrap_err();
    assert!(
        matches!(err, RuntimeError::Http { status: Some(529), ref url, .. } if url.ends_with("/v1/messages")),
        "{err}"
    );
}

#[test]
fn a_request_without_prefix_needs_a_model() {
    let s = HttpSummarizer::new(Api::OpenaiChat, "http://127.0.0.1:9");
    let err = s.request_body(&request()).unwrap_err();
    assert!(err.to_string().contains("summarizer.model"), "{err}");
    let body = s.model("gpt-test").request_body(&request()).unwrap();
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(body["messages"].as_array().unwrap().len(), 1);
}

#[test]
fn an_unreachable_server_is_a_transport_error() {
    // Bind then drop a listener: the port is closed.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let s = HttpSummarizer::new(Api::OpenaiChat, format!("http://{addr}"))
        .model("m")
        .timeout(Duration::from_secs(5));
    let err = s.summarize(&request()).unwrap_err();
    assert!(
        matches!(err, RuntimeError::Http { status: None, .. }),
        "{err}"
    );
}

#[test]
fn a_reply_that_fails_the_checks_is_discarded_with_the_reason() {
    let log = conversation();
    let store = store_with(&log);
    let server = MockServer::start();
    let summarizer = HttpSummarizer::new(Api::OpenaiChat, &server.url).api_key("test-key");
    let job = Job {
        session: session(),
        state: CompactionState::default(),
        now_ms: 10_000_000,
    };
    let cfg = config(Format::OPENAI_CHAT);
    for (reply, expect) in [
        (
            "## Goal\nfix\n## Progress\n- src/parser_v2.py",
            "missing sections",
        ),
        (
            "## Goal\nfix\n## Progress\n- x\n## Open items\n- y",
            "missing identifiers",
        ),
    ] {
        server.set_reply(Reply::Text(reply.into()));
        let outcome = summarize_next(&*store, &summarizer, &cfg, &job).unwrap();
        let ChunkOutcome::Rejected { rejection, .. } = outcome else {
            panic!("expected a rejection for {expect}: {outcome:?}")
        };
        match expect {
            "missing sections" => assert_eq!(
                rejection,
                Rejection::MissingSections {
                    missing: vec!["Open items".into()]
                }
            ),
            "missing identifiers" => assert!(
                matches!(rejection, Rejection::MissingIdentifiers { ref missing } if missing.contains(&"src/parser_v2.py".to_owned()))
            ),
            _ => unreachable!(),
        }
    }
    assert!(store.summaries(&session()).unwrap().is_empty());

    // A reply with no text at all is an error of the response, not a summary to check.
    server.set_reply(Reply::Text("   ".into()));
    let err = summarize_next(&*store, &summarizer, &cfg, &job).unwrap_err();
    assert!(matches!(err, RuntimeError::Response { .. }), "{err}");
}
