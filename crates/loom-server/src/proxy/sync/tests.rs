use super::*;
use axum::body::Bytes;
use loom_core::Api;
use loom_core::{MessageContent, ToolCall};
use loom_session::MemoryBackend as TestBackend;
use serde_json::{json, Value};

fn assistant(text: &str, calls: &[(&str, &str)]) -> NewEvent {
    NewEvent::new(
        1,
        EventBody::Assistant {
            content: Some(MessageContent::from(text)),
            reasoning: None,
            native: None,
            tool_calls: calls
                .iter()
                .map(|(id, args)| ToolCall {
                    id: (*id).into(),
                    name: "f".into(),
                    arguments: (*args).into(),
                })
                .collect(),
            name: None,
        },
    )
}

fn chat(messages: &[Value]) -> RequestBody {
    let body = json!({"model": "gpt-4o", "messages": messages});
    RequestBody::parse(Api::OpenaiChat, Bytes::from(body.to_string())).unwrap()
}

fn u(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn a(text: &str, calls: &[&str]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|id| json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}))
        .collect();
    if calls.is_empty() {
        json!({"role": "assistant", "content": text})
    } else {
        json!({"role": "assistant", "content": text, "tool_calls": calls})
    }
}

fn tool(id: &str, text: &str) -> Value {
    json!({"role": "tool", "tool_call_id": id, "content": text})
}

/// Syncs `body` into the conversation `s` and writes the turn: (session, appended, diverged
/// from, continued).
fn run(b: Backend<'_>, body: &RequestBody) -> Result<(String, usize, Option<String>, bool)> {
    let r = sync(
        b,
        &SessionId::new("s").unwrap(),
        &AgentId::new("a").unwrap(),
        body,
    )?;
    // As a call does once it has rendered: the turn is written.
    lock_live(&r.live).commit(b, None, None)?;
    let id = lock_live(&r.live).id().to_string();
    Ok((
        id,
        r.appended,
        r.diverged_from.map(|d| d.to_string()),
        r.continued,
    ))
}

#[test]
fn only_the_new_part_is_appended_and_a_divergence_forks() {
    let t = TestBackend::new(8);
    let (store, b) = (&t.store, t.backend());
    let base = SessionId::new("s").unwrap();
    let mut history = vec![u("hi")];
    let (_, appended, diverged, _) = run(b, &chat(&history)).unwrap();
    assert_eq!((appended, diverged), (1, None));
    // The reply is logged behind the live session's back, as another server would.
    store.append(&base, &[assistant("hello", &[])]).unwrap();
    // The client sends the reply back, and a new message: only those are read.
    history.push(a("hello", &[]));
    history.push(u("more"));
    let (id, appended, _, continued) = run(b, &chat(&history)).unwrap();
    assert_eq!((id.as_str(), appended, continued), ("s", 1, true));
    assert_eq!(store.latest_seq(&base).unwrap(), 3);
    // The same history again appends nothing.
    assert_eq!(run(b, &chat(&history)).unwrap().1, 0);
    // A history that departs before the model's latest reply (an edited or regenerated
    // turn) starts a fork that records where it came from.
    let edited = vec![u("hi"), a("something else", &[]), u("other")];
    let (fork_id, _, diverged, continued) = run(b, &chat(&edited)).unwrap();
    assert_eq!((fork_id.as_str(), continued), ("s~2", false));
    assert_eq!(diverged.as_deref(), Some("s"));
    assert_eq!(
        store.latest_seq(&base).unwrap(),
        3,
        "the log is never rewritten"
    );
    let fork = store
        .session(&SessionId::new(&fork_id).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(fork.parent.as_ref().map(SessionId::as_str), Some("s"));
    // Each history continues the fork it extends, each read from where it was left.
    let mut first = history.clone();
    first.push(u("again"));
    assert_eq!(run(b, &chat(&first)).unwrap(), ("s".into(), 1, None, true));
    let mut second = edited.clone();
    second.push(u("again"));
    assert_eq!(
        run(b, &chat(&second)).unwrap(),
        ("s~2".into(), 1, None, true)
    );
}

#[test]
fn a_history_rewritten_after_the_latest_reply_continues_as_the_clients_rewrite() {
    let t = TestBackend::new(8);
    let (store, b) = (&t.store, t.backend());
    let base = SessionId::new("s").unwrap();
    let context = |v: &str| u(&format!("files in chat, version {v}"));
    run(b, &chat(&[context("1"), u("change a")])).unwrap();
    store.append(&base, &[assistant("done a", &[])]).unwrap();
    // The context moves after the history, in a new version.
    let history = vec![u("change a"), a("done a", &[]), context("2"), u("change b")];
    let (id, appended, diverged, _) = run(b, &chat(&history)).unwrap();
    assert_eq!((id.as_str(), diverged), ("s", None));
    assert_eq!(
        appended, 3,
        "the rewrite, the new context and the new message"
    );
    let log = store.read(&base, 1..=u64::MAX).unwrap();
    assert_eq!(
        log[3].body,
        EventBody::Rewrite {
            replaced: vec![[1, 1]],
            compaction: false
        }
    );
    // The session's conversation is the history: the next call extends it.
    store.append(&base, &[assistant("done b", &[])]).unwrap();
    let mut next = history.clone();
    next.push(a("done b", &[]));
    next.push(u("change c"));
    let (id, appended, diverged, _) = run(b, &chat(&next)).unwrap();
    assert_eq!((id.as_str(), appended, diverged), ("s", 1, None));
}

/// A conversation of `turns` calls in `api`'s shape, each body extending the last, with
/// calls and results (sometimes two calls in a turn).
fn conversation(api: Api, turns: usize) -> Vec<Value> {
    let mut items: Vec<Value> = Vec::new();
    let mut bodies = Vec::new();
    for turn in 0..turns {
        let ids: Vec<String> = (0..1 + turn % 2)
            .map(|k| format!("call_{turn}_{k}"))
            .collect();
        match api {
            Api::OpenaiChat => {
                if turn == 0 {
                    items.push(json!({"role": "system", "content": "be brief"}));
                    items.push(u("fix the bug"));
                } else {
                    let calls: Vec<&str> = ids.iter().map(String::as_str).collect();
                    items.push(a(&format!("step {turn}"), &calls));
                    for id in &ids {
                        items.push(tool(id, &format!("output of {id}\nline two")));
                    }
                }
                bodies.push(json!({"model": "gpt-4o", "messages": items}));
            }
            Api::Anthropic => {
                if turn == 0 {
                    items.push(json!({"role": "user", "content": "fix the bug"}));
                } else {
                    let mut content = vec![json!({"type": "text", "text": format!("step {turn}")})];
                    content.extend(ids.iter().map(|id| json!({"type": "tool_use", "id": id, "name": "f", "input": {"n": turn}})));
                    items.push(json!({"role": "assistant", "content": content}));
                    let results: Vec<Value> = ids.iter().map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": format!("out {id}")})).collect();
                    items.push(json!({"role": "user", "content": results}));
                }
                bodies.push(json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "system": "be brief", "messages": items}));
            }
            Api::OpenaiResponses => {
                if turn == 0 {
                    items.push(json!({"role": "user", "content": "fix the bug"}));
                } else {
                    items.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": format!("step {turn}")}]}));
                    for id in &ids {
                        items.push(json!({"type": "function_call", "call_id": id, "name": "f", "arguments": "{}"}));
                    }
                    for id in &ids {
                        items.push(json!({"type": "function_call_output", "call_id": id, "output": format!("out {id}")}));
                    }
                }
                bodies.push(json!({"model": "gpt-4o", "instructions": "be brief", "input": items}));
            }
            Api::Gemini => {
                if turn == 0 {
                    items.push(json!({"role": "user", "parts": [{"text": "fix the bug"}]}));
                } else {
                    let mut parts = vec![json!({"text": format!("step {turn}")})];
                    parts.extend(ids.iter().enumerate().map(|(k, id)| {
                        let mut p =
                            json!({"functionCall": {"id": id, "name": "f", "args": {"n": turn}}});
                        if k == 0 {
                            p["thoughtSignature"] = json!(format!("sig-{id}"));
                        }
                        p
                    }));
                    items.push(json!({"role": "model", "parts": parts}));
                    let results: Vec<Value> = ids.iter().map(|id| json!({"functionResponse": {"id": id, "name": "f", "response": {"output": format!("out {id}")}}})).collect();
                    items.push(json!({"role": "user", "parts": results}));
                }
                bodies.push(json!({"systemInstruction": {"parts": [{"text": "be brief"}]}, "contents": items}));
            }
        }
    }
    bodies
}

#[test]
fn reading_only_the_new_messages_logs_what_reading_the_whole_body_logs() {
    for api in Api::ALL {
        let (fast, slow) = (TestBackend::new(8), TestBackend::new(8));
        let mut continued = 0;
        for body in conversation(api, 12) {
            let body = RequestBody::parse(api, Bytes::from(body.to_string())).unwrap();
            continued += usize::from(run(fast.backend(), &body).unwrap().3);
            // The other server forgets every body, so it reads each whole.
            let r = run(slow.backend(), &body).unwrap();
            assert!(!r.3);
            let live = slow.live.get(slow.backend(), &SessionId::new("s").unwrap());
            lock_live(&live.unwrap().unwrap()).body = None;
        }
        assert_eq!(
            continued, 11,
            "{api:?}: every call after the first read only its news"
        );
        let s = SessionId::new("s").unwrap();
        let bodies = |t: &TestBackend| -> Vec<EventBody> {
            let n = t.store.latest_seq(&s).unwrap();
            t.store
                .read(&s, 1..=n)
                .unwrap()
                .into_iter()
                .map(|e| e.body)
                .collect()
        };
        assert_eq!(bodies(&fast), bodies(&slow), "{api:?}");
        assert!(bodies(&fast).len() >= 25);
    }
}

#[test]
fn a_bad_continuation_gets_the_error_of_the_whole_body() {
    let t = TestBackend::new(8);
    let b = t.backend();
    let mut history = vec![u("hi"), a("", &["c1"]), tool("c1", "ok")];
    run(b, &chat(&history)).unwrap();
    // A result for a call nobody made, at its place in the whole conversation.
    history.push(a("next", &[]));
    history.push(tool("nope", "?"));
    let e = run(b, &chat(&history)).unwrap_err();
    assert_eq!(
        e.field.as_deref(),
        Some("messages[4].tool_call_id"),
        "{e:?}"
    );
    assert_eq!(
        t.store.latest_seq(&SessionId::new("s").unwrap()).unwrap(),
        3,
        "nothing stored"
    );
    // A call id the conversation already used: valid on OpenAI's wire, read whole, aliased.
    history.pop();
    history.pop();
    history.push(a("again", &["c1"]));
    history.push(tool("c1", "ok"));
    run(b, &chat(&history)).unwrap();
    let events = t.store.read(&SessionId::new("s").unwrap(), 4..=5).unwrap();
    assert!(
        matches!(&events[0].body, EventBody::Assistant { tool_calls, .. } if tool_calls[0].id == "c1_r2"),
        "{events:?}"
    );
    assert!(
        matches!(&events[1].body, EventBody::ToolResult { call_id, .. } if call_id == "c1_r2"),
        "{events:?}"
    );
}

#[test]
fn a_changed_system_prompt_is_read_whole() {
    let t = TestBackend::new(8);
    let b = t.backend();
    let body = |system: &str, messages: &[Value]| {
        let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 5, "system": system, "messages": messages});
        RequestBody::parse(Api::Anthropic, Bytes::from(body.to_string())).unwrap()
    };
    run(b, &body("one", &[u("hi")])).unwrap();
    let r = run(b, &body("two", &[u("hi"), a("yes", &[]), u("more")])).unwrap();
    assert_eq!((r.0.as_str(), r.3), ("s~2", false));
}

#[test]
fn arguments_compare_as_json() {
    assert!(same(
        &assistant("", &[("c1", "{\"a\": 1}")]).body,
        &assistant("", &[("c1", "{\"a\":1}")]).body
    ));
    assert!(!same(
        &assistant("", &[("c1", "{\"a\": 1}")]).body,
        &assistant("", &[("c2", "{\"a\": 1}")]).body
    ));
}
