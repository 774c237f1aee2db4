//! The LLM extractor: facts with provenance checked against the lines shown, rejected facts
//! reported, marks that make a second run read only what is new, replies that cannot be read,
//! and the provider client's three wire formats against the mock upstream.

use std::sync::Mutex;
use std::time::Duration;

use loom_core::Api;
use loom_core::{AgentId, EventBody, MessageContent, NewEvent};
use loom_memory::extract::{Reply, DEFAULT_WINDOW_TOKENS, INSTRUCTIONS};
use loom_memory::{extract, FactModel, ItemKind, Memory, MemoryError, ProviderFacts, Search, Tier};
use loom_mock_upstream::{Fault, Mock, MockHandle};
use loom_provider::client::ProviderConfig;
use loom_store::{MemoryStore, NewSession, Store};

use super::support::{conformance, session};

/// A model that answers from a script, in order, and keeps what it was asked.
struct Scripted {
    replies: Mutex<Vec<String>>,
    inputs: Mutex<Vec<String>>,
}

impl Scripted {
    fn new(replies: &[&str]) -> Self {
        Self {
            replies: Mutex::new(replies.iter().rev().map(|r| (*r).to_owned()).collect()),
            inputs: Mutex::new(Vec::new()),
        }
    }

    fn inputs(&self) -> Vec<String> {
        self.inputs.lock().unwrap().clone()
    }
}

impl FactModel for Scripted {
    fn name(&self) -> &str {
        "scripted:test"
    }

    fn complete(&self, instructions: &str, input: &str) -> Result<Reply, String> {
        assert_eq!(instructions, INSTRUCTIONS);
        self.inputs.lock().unwrap().push(input.to_owned());
        let text = self
            .replies
            .lock()
            .unwrap()
            .pop()
            .ok_or("the script is out of replies")?;
        Ok(Reply {
            text,
            input_tokens: 100,
            output_tokens: 10,
        })
    }
}

fn say(ts: i64, user: bool, text: &str) -> NewEvent {
    let content = MessageContent::Text(text.into());
    NewEvent::new(
        ts,
        if user {
            EventBody::User {
                content,
                name: None,
            }
        } else {
            EventBody::Assistant {
                content: Some(content),
                reasoning: None,
                tool_calls: vec![],
                name: None,
                native: None,
            }
        },
    )
}

/// Day 2023-05-08 at noon, UTC, in milliseconds.
const MAY_8: i64 = 1_683_547_200_000;

fn store() -> MemoryStore {
    let store = MemoryStore::new();
    let s = NewSession {
        id: session("chat1"),
        agent: AgentId::new("caroline").unwrap(),
        parent: None,
        created_ms: MAY_8,
    };
    store
        .create_session(
            &s,
            &[
                say(
                    MAY_8,
                    true,
                    "Hi! I adopted a dog last week, her name is Luna.",
                ),
                say(MAY_8 + 1, false, "Congratulations! What breed is Luna?"),
                say(
                    MAY_8 + 2,
                    true,
                    "A border collie. Also, my sister Mel moved to Denver.",
                ),
            ],
        )
        .unwrap();
    store
}

fn facts_are_written_with_the_provenance_of_the_lines_they_cite(m: &dyn Memory) {
    let store = store();
    let model = Scripted::new(&[r#"```json
{"facts": [
  {"text": "Caroline adopted a dog named Luna in the week before 2023-05-08.", "seqs": [1]},
  {"text": "Luna is a border collie.", "seqs": [1, 3]},
  {"text": "Caroline's sister Mel moved to Denver.", "seqs": [3]},
  {"text": "Mel likes skiing.", "seqs": [9]},
  {"text": "", "seqs": [1]},
  {"text": "No seqs at all."},
  {"text": "Seq is text.", "seqs": ["one"]}
]}
```"#]);
    let report = extract(
        &store,
        m,
        &model,
        &session("chat1"),
        None,
        DEFAULT_WINDOW_TOKENS,
    )
    .unwrap();
    assert_eq!(
        (report.windows, report.facts, report.created),
        (1, 3, 3),
        "{report:?}"
    );
    assert_eq!((report.from_mark, report.to_mark), (0, 3));
    assert_eq!((report.input_tokens, report.output_tokens), (100, 10));
    let rejected: Vec<(&str, &str)> = report
        .rejected
        .iter()
        .map(|r| (r.field.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        rejected,
        [
            ("facts[3].seqs", "9 is not a line the model was shown"),
            ("facts[4].text", "empty"),
            ("facts[5].seqs", "expected a non-empty array of seqs"),
            ("facts[6].seqs", "\"one\" is not a seq number"),
        ]
    );

    // The model saw numbered, dated lines of both speakers.
    let input = &model.inputs()[0];
    assert!(input.starts_with(
        "[1] 2023-05-08 user: Hi! I adopted a dog last week, her name is Luna.\n[2] 2023-05-08 assistant:"
    ), "{input}");

    let hits = m.search(&Search::new("border collie", 10_000)).unwrap();
    let luna = hits
        .iter()
        .find(|h| h.text == "Luna is a border collie.")
        .unwrap_or_else(|| panic!("the fact is searchable: {hits:?}"));
    assert_eq!(luna.tier, Tier::L4);
    assert_eq!(
        (
            luna.sources[0].session.as_str(),
            luna.sources[0].seq,
            luna.sources[0].to_seq
        ),
        ("chat1", 1, Some(3))
    );
    let item = m.item(luna.id).unwrap();
    assert_eq!(item.kind, ItemKind::Fact);
    assert_eq!(item.agent.as_str(), "caroline");
}

fn a_second_run_reads_only_what_was_appended(m: &dyn Memory) {
    let store = store();
    let first =
        Scripted::new(&[r#"{"facts": [{"text": "Caroline has a dog named Luna.", "seqs": [1]}]}"#]);
    extract(&store, m, &first, &session("chat1"), None, 1_000).unwrap();

    // Nothing new: no call at all.
    let idle = Scripted::new(&[]);
    let report = extract(&store, m, &idle, &session("chat1"), None, 1_000).unwrap();
    assert_eq!(
        (report.windows, report.from_mark, report.to_mark),
        (0, 3, 3)
    );
    assert!(idle.inputs().is_empty());

    store
        .append(
            &session("chat1"),
            &[say(MAY_8 + 10, true, "Luna learned to fetch today.")],
        )
        .unwrap();
    let next = Scripted::new(&[
        r#"{"facts": [{"text": "Luna learned to fetch on 2023-05-08.", "seqs": [4]}, {"text": "Caroline has a dog named Luna.", "seqs": [4]}]}"#,
    ]);
    let report = extract(&store, m, &next, &session("chat1"), None, 1_000).unwrap();
    assert_eq!((report.from_mark, report.to_mark), (3, 4));
    assert_eq!((report.created, report.duplicates), (1, 1), "{report:?}");
    let input = &next.inputs()[0];
    assert!(
        input.starts_with("[4] "),
        "only the new line is shown: {input}"
    );
}

fn a_reply_that_is_not_json_stops_with_the_window_and_keeps_earlier_windows(m: &dyn Memory) {
    let store = store();
    // A tiny window: one line per call.
    let model = Scripted::new(&[
        r#"{"facts": [{"text": "Caroline adopted a dog named Luna.", "seqs": [1]}]}"#,
        r#"{"facts": []}"#,
        "Sorry, I cannot help with that.",
    ]);
    let err = extract(&store, m, &model, &session("chat1"), None, 1).unwrap_err();
    match &err {
        MemoryError::Extract {
            session,
            from_seq,
            to_seq,
            reason,
        } => {
            assert_eq!((session.as_str(), *from_seq, *to_seq), ("chat1", 3, 3));
            assert!(reason.contains("not the JSON asked for"), "{reason}");
        }
        other => panic!("expected an extract error, got {other:?}"),
    }
    let agent = AgentId::new("caroline").unwrap();
    assert_eq!(
        m.extracted_to(&agent, &session("chat1"), "scripted:test")
            .unwrap(),
        2,
        "the windows before the bad reply stay written and marked"
    );
    assert_eq!(m.search(&Search::new("Luna", 10_000)).unwrap().len(), 1);

    // A rerun resumes at the failed window.
    let retry = Scripted::new(&[r#"{"facts": [{"text": "Mel moved to Denver.", "seqs": [3]}]}"#]);
    let report = extract(&store, m, &retry, &session("chat1"), None, 1).unwrap();
    assert_eq!((report.windows, report.created, report.to_mark), (1, 1, 3));
}

fn facts_from_the_same_lines_are_distinct_items_and_a_new_value_supersedes(m: &dyn Memory) {
    let store = store();
    let model = Scripted::new(&[r#"{"facts": [
        {"text": "Caroline's sister is named Mel.", "seqs": [3]},
        {"text": "Mel is in Denver.", "seqs": [3]}
    ]}"#]);
    let report = extract(&store, m, &model, &session("chat1"), None, 10_000).unwrap();
    assert_eq!(report.created, 2, "{report:?}");
    store
        .append(
            &session("chat1"),
            &[say(MAY_8 + 20, true, "Mel just moved again, to Austin.")],
        )
        .unwrap();
    let model = Scripted::new(&[r#"{"facts": [{"text": "Mel is in Austin.", "seqs": [4]}]}"#]);
    extract(&store, m, &model, &session("chat1"), None, 10_000).unwrap();
    let current: Vec<String> = m
        .search(&Search::new("Mel Denver Austin", 10_000))
        .unwrap()
        .into_iter()
        .map(|h| h.text)
        .collect();
    assert!(
        current.contains(&"Mel is in Austin.".to_owned()),
        "{current:?}"
    );
    assert!(
        !current.contains(&"Mel is in Denver.".to_owned()),
        "{current:?}"
    );
    // The older value stays, returned when history is asked for.
    let mut with_history = Search::new("Mel Denver Austin", 10_000);
    with_history.history = true;
    let all: Vec<String> = m
        .search(&with_history)
        .unwrap()
        .into_iter()
        .map(|h| h.text)
        .collect();
    assert!(all.contains(&"Mel is in Denver.".to_owned()), "{all:?}");
}

conformance!(
    facts_are_written_with_the_provenance_of_the_lines_they_cite,
    a_second_run_reads_only_what_was_appended,
    a_reply_that_is_not_json_stops_with_the_window_and_keeps_earlier_windows,
    facts_from_the_same_lines_are_distinct_items_and_a_new_value_supersedes,
);

/// A mock served by its own runtime, so the blocking client runs on the test's thread.
fn upstream() -> (MockHandle, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.block_on(Mock::spawn()).unwrap();
    (handle, runtime)
}

/// A reply body of `api` whose text is `text`, as the provider sends it.
fn reply_body(api: Api, text: &str) -> String {
    let body = match api {
        Api::OpenaiChat => serde_json::json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 321, "completion_tokens": 12, "total_tokens": 333}
        }),
        Api::OpenaiResponses => serde_json::json!({
            "id": "resp_1", "object": "response", "created_at": 1, "status": "completed",
            "model": "gpt-4o-mini",
            "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "usage": {"input_tokens": 321, "output_tokens": 12, "total_tokens": 333}
        }),
        Api::Anthropic => serde_json::json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 321, "output_tokens": 12}
        }),
        Api::Gemini => serde_json::json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 321, "candidatesTokenCount": 12,
                "totalTokenCount": 333},
            "modelVersion": "gemini-3-flash", "responseId": "r1"
        }),
    };
    body.to_string()
}

#[test]
fn the_provider_extractor_speaks_each_api_and_records_its_usage() {
    let (up, _rt) = upstream();
    for (api, model, path) in [
        (Api::OpenaiChat, "gpt-4o-mini", "/v1/chat/completions"),
        (Api::OpenaiResponses, "gpt-4o-mini", "/v1/responses"),
        (Api::Anthropic, "claude-haiku-4-5", "/v1/messages"),
        (
            Api::Gemini,
            "gemini-3-flash",
            "/v1beta/models/gemini-3-flash:generateContent",
        ),
    ] {
        up.reset();
        let mut c = ProviderConfig::new(api, up.base_url());
        c.api_key = Some("test-key".into());
        c.model = Some(model.into());
        c.timeout = Duration::from_secs(20);
        let facts = ProviderFacts::new(c).unwrap();
        up.push_fault(Fault {
            body: Some(reply_body(
                api,
                r#"{"facts": [{"text": "Luna is a border collie.", "seqs": [1, 3]}]}"#,
            )),
            ..Fault::default()
        });
        let m = super::support::memory();
        let report = extract(&store(), &m, &facts, &session("chat1"), None, 10_000).unwrap();
        assert_eq!(
            (report.created, report.input_tokens, report.output_tokens),
            (1, 321, 12)
        );
        assert!(report.extractor.ends_with(model), "{}", report.extractor);

        let sent = up.requests();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].path, path);
        let body = &sent[0].body;
        // Gemini names the model in the path.
        if api != Api::Gemini {
            assert_eq!(body["model"], model);
        }
        let (system, user) = match api {
            Api::OpenaiChat => (
                body["messages"][0]["content"].clone(),
                body["messages"][1]["content"].clone(),
            ),
            Api::OpenaiResponses => (body["instructions"].clone(), body["input"].clone()),
            Api::Anthropic => (
                body["system"].clone(),
                body["messages"][0]["content"].clone(),
            ),
            Api::Gemini => (
                body["systemInstruction"]["parts"][0]["text"].clone(),
                body["contents"][0]["parts"][0]["text"].clone(),
            ),
        };
        assert_eq!(system, INSTRUCTIONS);
        assert!(user
            .as_str()
            .unwrap()
            .contains("[3] 2023-05-08 user: A border collie."));
    }
}

#[test]
fn a_provider_error_names_the_window_and_writes_nothing() {
    let (up, _rt) = upstream();
    let mut c = ProviderConfig::new(Api::OpenaiChat, up.base_url());
    c.model = Some("gpt-4o-mini".into());
    c.max_retries = 0;
    let facts = ProviderFacts::new(c).unwrap();
    up.push_fault(Fault::status(400));
    let m = super::support::memory();
    let err = extract(&store(), &m, &facts, &session("chat1"), None, 10_000).unwrap_err();
    assert!(
        matches!(
            &err,
            MemoryError::Extract {
                from_seq: 1,
                to_seq: 3,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("400"), "{err}");
    let agent = AgentId::new("caroline").unwrap();
    assert_eq!(
        m.extracted_to(&agent, &session("chat1"), facts.name())
            .unwrap(),
        0
    );
}

#[test]
fn an_extractor_without_a_model_is_refused() {
    let c = ProviderConfig::new(Api::OpenaiChat, "http://127.0.0.1:9");
    let err = ProviderFacts::new(c).unwrap_err();
    assert!(err.to_string().contains("extractor.model"), "{err}");
}
