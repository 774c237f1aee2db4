//! `loom_recall` through the proxy: from the first render that leaves something out, the
//! request offers the tool; when the model calls it, Loom answers with the original, asks again,
//! and the client gets only the final reply; the hidden exchange is in the log, and the client's
//! next request extends the session. In `files` mode, the stub names a file holding the original.

use loom_core::{EventBody, SessionId};
use loom_server::config::RecallMode;
use loom_server::AuthMode;
use loom_store::ProxyMode;
use serde_json::{json, Value};

use super::support::{assert_forwarded_valid, start, start_with, Server};

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "bash", "description": "Run a command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}])
}

/// The output of build `n`: long, and different from every other build's.
fn output(n: usize) -> String {
    (1..=400)
        .map(|i| format!("build {n} step {i}: compiled module_{n}_{i}.rs in {i}ms\n"))
        .collect()
}

async fn send(s: &Server, session: &str, messages: &[Value]) -> reqwest::Response {
    let body = json!({"model": "gpt-4o", "messages": messages, "tools": tools()});
    s.post(
        "/v1/chat/completions",
        None,
        &[("x-loom-session", session), ("x-loom-budget", "6000")],
        &body,
    )
    .await
}

/// Runs `builds` tool-using turns (a user turn, the model's call, the client's result, the
/// model's answer); returns the conversation as the client holds it.
async fn builds(s: &Server, session: &str, builds: usize) -> Vec<Value> {
    let mut messages = vec![json!({"role": "system", "content": "You build things."})];
    for n in 0..builds {
        messages.push(json!({"role": "user", "content": format!("run build {n}")}));
        let r = send(s, session, &messages).await;
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        let msg = v["choices"][0]["message"].clone();
        let id = msg["tool_calls"][0]["id"].as_str().unwrap().to_owned();
        messages.push(msg);
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": output(n)}));
        let r = send(s, session, &messages).await;
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        messages.push(v["choices"][0]["message"].clone());
    }
    messages
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn the_proxy_answers_loom_recall_and_the_client_sees_only_the_final_reply() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let mut messages = builds(&s, "rc", 4).await;
    // Before anything was left out, the client's own request went as it came.
    let first = s.mock.requests()[0].body.clone();
    assert_eq!(tool_names(&first), ["bash"]);
    let last = s.mock.requests().last().unwrap().body.clone();
    assert_eq!(
        tool_names(&last),
        ["bash", "loom_recall"],
        "offered once fitted"
    );
    let text = last.to_string();
    assert!(
        text.contains("loom_recall ref="),
        "stubs say how to recall: {text}"
    );

    s.mock.clear();
    messages.push(json!({"role": "user", "content": "recall that output, please"}));
    let r = send(&s, "rc", &messages).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-loom-recall"], "offered");
    let reply: Value = r.json().await.unwrap();
    let msg = &reply["choices"][0]["message"];
    assert!(
        msg["content"]
            .as_str()
            .unwrap()
            .starts_with("Let me read that again. ok:"),
        "the text before the call comes first: {msg}"
    );
    assert!(msg.get("tool_calls").is_none(), "{msg}");
    // The upstream was asked twice; the second time with the call and its answer: an original,
    // byte for byte.
    let sent = s.mock.requests();
    assert_eq!(sent.len(), 2);
    let second = &sent[1].body;
    let answer = second["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(answer["role"], "tool");
    let answered = answer["content"].as_str().unwrap();
    // A quarter of the 6,000-token budget at most: the original's first lines, exactly, and how
    // to read the rest.
    let (shown, how) = answered.rsplit_once("\n[loom_recall: lines 1-").unwrap();
    assert!(
        (0..4).any(|n| output(n).starts_with(&format!("{shown}\n"))),
        "the answer is an original's beginning: {}",
        &answered[..answered.len().min(300)]
    );
    assert!(
        how.contains("of 400 shown; the rest: loom_recall ref="),
        "{how}"
    );
    assert!(shown.lines().count() > 50, "{}", shown.lines().count());
    // In the log as Loom's own exchange.
    let events = s
        .store()
        .read(&SessionId::new("rc").unwrap(), 1..=u64::MAX)
        .unwrap();
    let hidden = events
        .iter()
        .find_map(|e| match &e.body {
            EventBody::Hidden { events } => Some(*events),
            _ => None,
        })
        .expect("a hidden record");
    assert!(events.iter().any(|e| matches!(&e.body,
        EventBody::ToolResult { tool_name, .. } if tool_name == "loom_recall")));
    assert_eq!(hidden[1] - hidden[0], 1, "the call and its answer");
    // The client's next request extends the session: no fork, nothing re-read.
    messages.push(msg.clone());
    messages.push(json!({"role": "user", "content": "thanks, go on"}));
    let r = send(&s, "rc", &messages).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("x-loom-diverged").is_none());
    assert_eq!(r.headers()["x-loom-session"], "rc");
    assert_forwarded_valid(&s, "/v1/chat/completions", "CreateChatCompletionRequest");
    let metrics = s.get("/metrics", None).await.text().await.unwrap();
    assert!(metrics.contains("loom_recalls_total 1"), "{metrics}");
}

#[tokio::test]
async fn a_recall_round_the_budget_cannot_hold_cuts_its_answer_to_fit() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    // The question takes more and more of the 6,000 tokens, until Loom refuses the client's
    // own request. Every question before that must get its answer: a round whose request the
    // budget cannot hold elides the answer's middle or cuts it shorter, and never answers the
    // client 400 for something it did not send. (The conformance suite's Messages seeds 4500,
    // 5557 and 7776 reach the cut; this sweep walks the edge in Chat.)
    let mut answered = 0;
    for words in (1_560..2_000).step_by(8) {
        let session = format!("rc-tight-{words}");
        let mut messages = builds(&s, &session, 4).await;
        let filler: String = (0..words).map(|i| format!("note {i} ")).collect();
        messages.push(json!({"role": "user",
            "content": format!("recall that output, please. {filler}")}));
        s.mock.clear();
        let r = send(&s, &session, &messages).await;
        let status = r.status();
        let text = r.text().await.unwrap();
        let sent = s.mock.requests();
        if sent.is_empty() {
            // The question alone is over the budget: refused before anything went upstream.
            assert_eq!(status, 400, "{text}");
            assert!(text.contains("request needs"), "{text}");
            break;
        }
        assert_eq!(status, 200, "{words} words: {text}");
        assert_eq!(sent.len(), 2, "{words} words: the round went upstream");
        let answer = sent[1].body["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(answer["role"], "tool");
        let answer = answer["content"].as_str().unwrap();
        assert!(
            answer.contains("\n[loom_recall: lines 1-")
                && answer.contains("the rest: loom_recall ref="),
            "{words} words: the answer says where it was cut and how to read the rest: {answer}"
        );
        assert_forwarded_valid(&s, "/v1/chat/completions", "CreateChatCompletionRequest");
        answered += 1;
    }
    assert!(answered > 3, "{answered} questions fitted");
}

/// A client's summary request (its compaction) sends `tools: []` on purpose: Loom offers no
/// `loom_recall` there, though its render leaves things out.
#[tokio::test]
async fn a_request_with_an_empty_tool_list_is_offered_no_recall() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let mut messages = builds(&s, "summary", 4).await;
    let last = s.mock.requests().last().unwrap().body.clone();
    assert_eq!(tool_names(&last), ["bash", "loom_recall"], "offered before");
    messages.push(json!({"role": "user",
        "content": "Your task is to create a detailed summary of the conversation so far."}));
    s.mock.clear();
    let body = json!({"model": "gpt-4o", "messages": messages, "tools": []});
    let r = s
        .post(
            "/v1/chat/completions",
            None,
            &[("x-loom-session", "summary"), ("x-loom-budget", "6000")],
            &body,
        )
        .await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("x-loom-recall").is_none());
    let sent = s.mock.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].body["tools"],
        json!([]),
        "the client's empty list, as it came"
    );
    // Still fitted: the four builds' outputs come to about 80 kB, the budget to about 24.
    let size = sent[0].body.to_string().len();
    assert!(size < 40_000, "{size} bytes");
}

#[tokio::test]
async fn with_recall_off_no_tool_is_offered() {
    let s = start_with(AuthMode::None, ProxyMode::Fit, |c| {
        c.recall.mode = RecallMode::Off;
    })
    .await;
    builds(&s, "off", 3).await;
    let last = s.mock.requests().last().unwrap().body.clone();
    assert_eq!(tool_names(&last), ["bash"]);
    assert!(!last.to_string().contains("loom_recall"));
}

#[tokio::test]
async fn in_files_mode_a_stub_names_a_file_holding_the_original() {
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().to_owned();
    let s = start_with(AuthMode::None, ProxyMode::Fit, move |c| {
        c.recall.mode = RecallMode::Files;
        c.recall.folder = Some(path);
    })
    .await;
    builds(&s, "files", 4).await;
    let last = s.mock.requests().last().unwrap().body.to_string();
    let root = folder.path().display().to_string();
    let at = last
        .find(&format!("(See {root}"))
        .expect("a stub names a file");
    let named: String = last[at + 5..].chars().take_while(|c| *c != ')').collect();
    let bytes = std::fs::read_to_string(&named).unwrap();
    assert!((0..4).any(|n| bytes == output(n)), "{named}");
    // Removed with the session.
    let r = s.delete("/loom/v1/sessions/files", None).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["files_removed"], true);
    assert!(!std::path::Path::new(&named).exists());
    assert!(folder.path().exists(), "only the session's own folder goes");
}

#[tokio::test]
async fn a_streamed_reply_that_recalls_reaches_the_client_as_one_stream() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let mut messages = builds(&s, "rcs", 4).await;
    s.mock.clear();
    messages.push(json!({"role": "user", "content": "recall that output, please"}));
    let body = json!({"model": "gpt-4o", "messages": messages, "tools": tools(), "stream": true,
        "stream_options": {"include_usage": true}});
    let r = s
        .post(
            "/v1/chat/completions",
            None,
            &[("x-loom-session", "rcs"), ("x-loom-budget", "6000")],
            &body,
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-loom-recall"], "offered");
    let text = r.text().await.unwrap();
    let mut parser = loom_wire::SseParser::new();
    let events = parser.push(text.as_bytes());
    assert_eq!(events.last().unwrap().data, "[DONE]", "{text}");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect();
    let ids: std::collections::BTreeSet<&str> =
        chunks.iter().filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(ids.len(), 1, "one completion: {ids:?}");
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(content.starts_with("Let me read that again. ok:"), "{text}");
    assert!(
        !text.contains("tool_calls\":[{"),
        "no call reaches the client: {text}"
    );
    let finish: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
        .collect();
    assert_eq!(finish, ["stop"]);
    assert!(chunks.last().unwrap()["usage"].is_object(), "usage last");
    // The second upstream request was streamed and held the answer.
    let sent = s.mock.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1].body["stream"], true);
    let answer = sent[1].body["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(answer["role"], "tool");
    // The receipt of the call that carried the answer lists the recall.
    let r: Value = s
        .get("/loom/v1/sessions/rcs/receipts", None)
        .await
        .json()
        .await
        .unwrap();
    let last = r["receipts"].as_array().unwrap().last().unwrap().clone();
    let recalls = last["receipt"]["recalls"]
        .as_array()
        .expect("recalls listed");
    assert_eq!(recalls.len(), 1, "{last}");
    assert!(
        recalls[0]["ref"].as_str().unwrap().starts_with("seq:")
            || recalls[0]["ref"].as_str().unwrap().starts_with("outputs/"),
        "{recalls:?}"
    );
    assert!(recalls[0]["tokens"].as_u64().unwrap() > 100);
    assert_eq!(recalls[0]["found"], true);
    // Logged as the client received it; the next request extends the session.
    messages.push(json!({"role": "assistant", "content": content}));
    messages.push(json!({"role": "user", "content": "thanks, go on"}));
    let r = send(&s, "rcs", &messages).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("x-loom-diverged").is_none());
    assert_eq!(r.headers()["x-loom-session"], "rcs");
    assert_forwarded_valid(&s, "/v1/chat/completions", "CreateChatCompletionRequest");
}

/// The ids of the calls in `session`'s log, in order.
fn logged_call_ids(s: &Server, session: &str) -> Vec<String> {
    s.store()
        .read(&SessionId::new(session).unwrap(), 1..=u64::MAX)
        .unwrap()
        .into_iter()
        .flat_map(|e| match e.body {
            EventBody::Assistant { tool_calls, .. } => {
                tool_calls.into_iter().map(|c| c.id).collect()
            }
            _ => Vec::new(),
        })
        .collect()
}

/// Some OpenAI-compatible servers number the calls of every reply from 0, so `call_0` comes
/// back every turn, and a model may repeat an id in a recall round. The provider takes such a
/// history; Loom must too, in both modes: no error reaches the client, every request extends
/// the one session, and the log gives each call an alias of its own.
#[tokio::test]
async fn call_ids_reused_in_every_turn_are_aliased_in_both_modes_and_in_recall_rounds() {
    for mode in [ProxyMode::Observe, ProxyMode::Fit] {
        let s = start(AuthMode::None, mode).await;
        s.mock.mock().set_call_ids_per_reply(true);
        let mut messages = vec![json!({"role": "system", "content": "You build things."})];
        let ask = async |s: &Server, messages: &mut Vec<Value>| {
            let r = send(s, "ids", messages).await;
            assert_eq!(r.status(), 200, "{mode:?}");
            assert!(r.headers().get("x-loom-diverged").is_none(), "{mode:?}");
            assert!(
                r.headers().get("x-loom-warning").is_none(),
                "{mode:?}: {:?}",
                r.headers()
            );
            assert_eq!(r.headers()["x-loom-session"], "ids");
            let v: Value = r.json().await.unwrap();
            let msg = v["choices"][0]["message"].clone();
            messages.push(msg.clone());
            msg
        };
        for n in 0..4 {
            messages.push(json!({"role": "user", "content": format!("run build {n}")}));
            let msg = ask(&s, &mut messages).await;
            assert_eq!(msg["tool_calls"][0]["id"], "call_0", "{msg}");
            messages.push(json!({"role": "tool", "tool_call_id": "call_0", "content": output(n)}));
            ask(&s, &mut messages).await;
        }
        assert_eq!(
            logged_call_ids(&s, "ids"),
            ["call_0", "call_0_r2", "call_0_r3", "call_0_r4"],
            "{mode:?}"
        );
        if mode == ProxyMode::Fit {
            // The model calls `loom_recall` as `call_0` again: Loom answers it under an id of
            // its own, and the client's next request still extends the session.
            s.mock.clear();
            messages.push(json!({"role": "user", "content": "recall that output, please"}));
            let msg = ask(&s, &mut messages).await;
            assert!(msg.get("tool_calls").is_none(), "{msg}");
            assert_eq!(s.mock.requests().len(), 2, "one hidden round");
            messages.push(json!({"role": "user", "content": "now run build 9"}));
            let msg = ask(&s, &mut messages).await;
            assert_eq!(msg["tool_calls"][0]["id"], "call_0", "{msg}");
            messages.push(json!({"role": "tool", "tool_call_id": "call_0", "content": output(9)}));
            ask(&s, &mut messages).await;
            let ids = logged_call_ids(&s, "ids");
            assert_eq!(
                ids[4..],
                ["loom_call_0", "call_0_r5"],
                "the hidden call is Loom's own; the client's next call is aliased as the \
                 client's history alone gives it"
            );
            assert_forwarded_valid(&s, "/v1/chat/completions", "CreateChatCompletionRequest");
            let metrics = s.get("/metrics", None).await.text().await.unwrap();
            assert!(!metrics.contains("fit_check_failed"), "{metrics}");
        }
    }
}

/// A reference from before the client's own compaction still opens the original: the client's
/// summary (written by the model, which saw Loom's stubs) names a reference, the window after the
/// summary continues the same session, and the model's `loom_recall` of that reference is
/// answered with the output the client no longer sends.
#[tokio::test]
async fn a_reference_from_before_the_clients_compaction_is_recalled() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let before = builds(&s, "rc-compact", 4).await;
    let fitted = s.mock.requests().last().unwrap().body.to_string();
    let marker = "loom_recall ref=";
    let at = fitted.find(marker).expect("a stub with a reference") + marker.len();
    let reference: String = fitted[at..]
        .chars()
        .take_while(|c| !c.is_whitespace() && !matches!(c, ')' | '"' | '\\' | ']'))
        .collect();
    // The client compacts (aider's summary opening, as opencode's or Claude Code's would do):
    // the builds are gone from what it sends, but the summary quotes the reference.
    let messages = vec![
        before[0].clone(),
        json!({"role": "user", "content": format!(
            "I spoke to you previously about a number of things.\nWe ran four builds; the \
             first one's log is at {marker}{reference}")}),
        json!({"role": "assistant", "content": "Ok."}),
        json!({"role": "user", "content": "recall that build log, please"}),
    ];
    s.mock.clear();
    let r = send(&s, "rc-compact", &messages).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("x-loom-diverged").is_none(), "one session");
    assert_eq!(r.headers()["x-loom-recall"], "offered");
    let sent = s.mock.requests();
    assert_eq!(
        sent.len(),
        2,
        "the model recalled, Loom answered, the model went on"
    );
    let answer = sent[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(answer["role"], "tool");
    let answer = answer["content"].as_str().unwrap();
    let shown = answer.split("\n[loom_recall:").next().unwrap();
    assert!(
        shown.lines().count() > 20 && (0..4).any(|n| output(n).starts_with(shown)),
        "the answer is a build's output from before the compaction: {}",
        &answer[..answer.len().min(300)]
    );
    let events = s
        .store()
        .read(&SessionId::new("rc-compact").unwrap(), 1..=u64::MAX)
        .unwrap();
    assert!(events.iter().any(|e| matches!(
        e.body,
        EventBody::Rewrite {
            compaction: true,
            ..
        }
    )));
}
