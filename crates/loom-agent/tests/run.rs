//! Scripted runs end to end: the log, the receipts and every request.

// A panic is a test's failure report.
#![expect(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use loom_agent::{Approval, Limits, RunSpec, Stop};
use loom_core::{AgentId, EventBody, SessionId};
use serde_json::json;
use support::*;

fn spec(approval: Approval) -> RunSpec {
    RunSpec {
        model: "gpt-4o".into(),
        budget: Some(16_000),
        approval,
        limits: Limits {
            max_turns: Some(20),
            ..Limits::default()
        },
        prices: None,
        system: loom_agent::DEFAULT_SYSTEM.into(),
        agent: AgentId::new("main").unwrap(),
        max_depth: 2,
    }
}

#[test]
fn a_task_is_read_fixed_tested_with_a_child_and_answered() {
    let (_dir, ws) = workspace();
    let env = env();
    let script = json!([
        call("fs__read_file", json!({"path": "calc.sh"})),
        call("agent__spawn", json!({"goal": "CHILD-GOAL: find which file the test sources, and say it"})),
        // The child's turns.
        call("system__shell", json!({"command": "grep -l calc ../../test.sh && echo CHILD-SECRET-OUTPUT"})),
        {"content": "test.sh sources calc.sh"},
        // The parent again.
        call("fs__write_file", json!({"path": "calc.sh", "content": "add() { echo $(( $1 + $2 )); }\n"})),
        call("system__shell", json!({"command": "sh test.sh"})),
        {"content": "Fixed add in calc.sh; the test passes."}
    ]);
    let (mut model, requests) = Recording::new(script);
    let parent = SessionId::new("fix").unwrap();
    let report = start(
        &env,
        &mut model,
        spec(Approval::Untrusted),
        "PARENT-GOAL: make the test pass",
        &parent,
        &ws,
    );
    assert_eq!(
        report.stop,
        Stop::Answered("Fixed add in calc.sh; the test passes.".into())
    );
    assert_eq!(report.totals.turns, 7);
    assert_eq!(
        std::fs::read_to_string(ws.join("calc.sh")).unwrap(),
        "add() { echo $(( $1 + $2 )); }\n"
    );

    // The parent's log: goal, calls each followed by its result, the spawn and the child's result.
    let events = env.store.read(&parent, 1..=100).unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.body.kind().as_str()).collect();
    assert_eq!(
        kinds,
        [
            "system",
            "user",
            "assistant",
            "tool_result",
            "assistant",
            "spawn",
            "agent_result",
            "tool_result",
            "assistant",
            "tool_result",
            "assistant",
            "tool_result",
            "assistant"
        ]
    );
    let EventBody::ToolResult {
        content, is_error, ..
    } = &events[11].body
    else {
        panic!()
    };
    assert!(
        !is_error && format!("{content:?}").contains("PASS"),
        "{content:?}"
    );
    // A receipt per model call of the parent (5), each with the request's estimate.
    let calls = env.store.model_calls(&parent).unwrap();
    assert_eq!(calls.len(), 5);

    // The child: its own session, its goal only, its own workspace.
    let child = SessionId::new("fix.1").unwrap();
    let info = env.store.session(&child).unwrap().unwrap();
    assert_eq!(info.parent.as_ref(), Some(&parent));
    assert!(ws.join(".agents/1").is_dir());

    // Request by request: nothing of one agent in the other's context, except the goal given
    // and the result returned.
    let requests = requests.lock().unwrap();
    assert_eq!(requests.len(), 7);
    let (parent_reqs, child_reqs): (Vec<_>, Vec<_>) = requests
        .iter()
        .enumerate()
        .partition(|(i, _)| !matches!(i, 2 | 3));
    for (_, body) in &child_reqs {
        let text = text_of(body);
        assert!(text.contains("CHILD-GOAL"));
        assert!(
            !text.contains("PARENT-GOAL"),
            "the parent's goal reached the child"
        );
        assert!(
            !text.contains("calc.sh\\\"}"),
            "the parent's calls reached the child"
        );
    }
    for (i, body) in &parent_reqs {
        let text = text_of(body);
        assert!(text.contains("PARENT-GOAL"));
        assert!(
            !text.contains("CHILD-SECRET-OUTPUT"),
            "request {i}: the child's tool output reached the parent"
        );
    }
    // The child's result reaches the parent's next request.
    assert!(text_of(parent_reqs[2].1).contains("test.sh sources calc.sh"));
}

#[test]
fn a_call_waits_for_approval_and_the_run_resumes_after_it() {
    let (_dir, ws) = workspace();
    std::fs::write(ws.join("junk.txt"), "x").unwrap();
    let env = env();
    let script = json!([
        call("system__shell", json!({"command": "rm junk.txt"})),
        {"content": "removed"}
    ]);
    let id = SessionId::new("ask").unwrap();
    let (mut model, _) = Recording::new(script.clone());
    let report = start(
        &env,
        &mut model,
        spec(Approval::OnRequest),
        "clean up",
        &id,
        &ws,
    );
    let Stop::Paused {
        call_id, session, ..
    } = &report.stop
    else {
        panic!("{:?}", report.stop)
    };
    assert_eq!(session, &id);
    assert!(
        ws.join("junk.txt").exists(),
        "nothing ran before the approval"
    );
    // An unknown call or a second answer is refused; the right one is recorded.
    assert!(
        loom_agent::approve(env.store.as_ref(), &id, "nope", loom_agent::Answer::Once).is_err()
    );
    loom_agent::approve(env.store.as_ref(), &id, call_id, loom_agent::Answer::Once).unwrap();
    assert!(
        loom_agent::approve(env.store.as_ref(), &id, call_id, loom_agent::Answer::Deny).is_err()
    );
    // Resume: the script's first reply is already in the log.
    let (mut model, requests) = Recording::new(script);
    model.inner.skip(1);
    let report = resume(&env, &mut model, spec(Approval::OnRequest), &id, &ws);
    assert_eq!(report.stop, Stop::Answered("removed".into()));
    assert!(!ws.join("junk.txt").exists());
    // The approval messages are in the log, but not in the agent's request.
    let text = text_of(&requests.lock().unwrap()[0]);
    assert!(!text.contains("approval needed"), "{text}");
}

#[test]
fn denied_forbidden_and_broken_calls_still_get_results() {
    let (_dir, ws) = workspace();
    let env = env();
    let script = json!([
        {"content": null, "tool_calls": [
            {"function": {"name": "system__shell", "arguments": {"command": "curl http://example.com"}}},
            {"function": {"name": "system__shell", "arguments": {"command": "python3 -c 'print(1)'"}}},
            {"function": {"name": "fs__read_file", "arguments": "{not json"}},
            {"function": {"name": "nope__tool", "arguments": {}}},
            {"function": {"name": "fs__read_file", "arguments": {"path": "../../etc/passwd"}}}
        ]},
        {"content": "gave up"}
    ]);
    let (mut model, _) = Recording::new(script);
    let id = SessionId::new("deny").unwrap();
    let report = start(
        &env,
        &mut model,
        spec(Approval::Never),
        "try things",
        &id,
        &ws,
    );
    assert_eq!(report.stop, Stop::Answered("gave up".into()));
    let events = env.store.read(&id, 1..=100).unwrap();
    let results: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::ToolResult {
                content,
                is_error: true,
                ..
            } => Some(format!("{content:?}")),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 5, "{results:#?}");
    assert!(results[0].contains("forbidden"));
    assert!(results[1].contains("approval policy is `never`"));
    assert!(results[2].contains("not JSON"));
    assert!(results[3].contains("unknown tool"));
    assert!(results[4].contains("outside the workspace"));
}

#[test]
fn a_limit_stops_the_run_and_resume_goes_on() {
    let (_dir, ws) = workspace();
    let env = env();
    let script = json!([
        call("fs__list_dir", json!({})),
        call("fs__read_file", json!({"path": "test.sh"})),
        {"content": "looked"}
    ]);
    let id = SessionId::new("limit").unwrap();
    let mut s = spec(Approval::Untrusted);
    s.limits.max_turns = Some(1);
    let (mut model, _) = Recording::new(script.clone());
    let report = start(&env, &mut model, s, "look around", &id, &ws);
    assert!(matches!(report.stop, Stop::Limit(_)), "{:?}", report.stop);
    let (mut model, _) = Recording::new(script);
    model.inner.skip(1);
    let report = resume(&env, &mut model, spec(Approval::Untrusted), &id, &ws);
    assert_eq!(report.stop, Stop::Answered("looked".into()));
    assert_eq!(report.totals.turns, 2);
}

#[test]
fn a_child_messages_its_parent_and_only_the_parent_sees_it() {
    let (_dir, ws) = workspace();
    let env = env();
    let script = json!([
        call("agent__spawn", json!({"goal": "look at calc.sh and tell your parent early"})),
        // The child: one message to its parent, one to an agent it does not know, then its answer.
        {"content": null, "tool_calls": [
            {"function": {"name": "agent__send_message", "arguments": {"to": "main", "content": "EARLY-NOTE: add subtracts", "priority": 0.9}}},
            {"function": {"name": "agent__send_message", "arguments": {"to": "stranger", "content": "hello"}}}
        ]},
        {"content": "calc.sh: add subtracts"},
        {"content": "noted"}
    ]);
    let (mut model, requests) = Recording::new(script);
    let id = SessionId::new("msg").unwrap();
    let report = start(
        &env,
        &mut model,
        spec(Approval::Untrusted),
        "PARENT: review calc.sh",
        &id,
        &ws,
    );
    assert_eq!(report.stop, Stop::Answered("noted".into()));
    // The message is an event of the parent's log, from the child, with its priority.
    let events = env.store.read(&id, 1..=100).unwrap();
    let message = events
        .iter()
        .find_map(|e| match &e.body {
            EventBody::DirectMessage {
                source,
                target,
                content,
                priority,
                ..
            } => Some((source.clone(), target.clone(), content.clone(), *priority)),
            _ => None,
        })
        .expect("a direct message in the parent's log");
    assert_eq!(
        message,
        (
            "main.1".into(),
            "main".into(),
            "EARLY-NOTE: add subtracts".into(),
            0.9
        )
    );
    let requests = requests.lock().unwrap();
    // The parent's next request (the 4th) carries it; the child's own requests do not.
    assert!(text_of(&requests[3]).contains("EARLY-NOTE"));
    assert!(!text_of(&requests[1]).contains("PARENT: review"));
    // The message to an unknown agent was refused as the call's result.
    let child_events = env
        .store
        .read(&SessionId::new("msg.1").unwrap(), 1..=100)
        .unwrap();
    assert!(child_events.iter().any(|e| matches!(&e.body,
        EventBody::ToolResult { is_error: true, content, .. } if format!("{content:?}").contains("no agent `stranger`"))));
}

/// `loom run` agents have the recall tool the proxy answers: the same name, arguments and answer
/// (the original of an event of the agent's own session, byte for byte).
#[test]
fn an_agent_recalls_an_earlier_result_with_loom_recall() {
    let (_dir, ws) = workspace();
    let env = env();
    let script = json!([
        call("fs__read_file", json!({"path": "calc.sh"})),
        call("loom_recall", json!({"ref": "seq:4"})),
        call("loom_recall", json!({"ref": "seq:99"})),
        {"content": "done"}
    ]);
    let (mut model, requests) = Recording::new(script);
    let id = SessionId::new("recall").unwrap();
    let report = start(
        &env,
        &mut model,
        spec(Approval::Untrusted),
        "read calc.sh",
        &id,
        &ws,
    );
    assert_eq!(report.stop, Stop::Answered("done".into()));
    let events = env.store.read(&id, 1..=100).unwrap();
    let result = |seq: usize| match &events[seq - 1].body {
        EventBody::ToolResult {
            content, is_error, ..
        } => (content.clone(), *is_error),
        other => panic!("seq {seq}: {other:?}"),
    };
    assert_eq!(result(6).0, result(4).0, "the original, byte for byte");
    assert!(!result(6).1);
    assert!(result(8).1, "a seq past the log is a tool error");
    let offered = requests.lock().unwrap()[0].to_string();
    assert!(offered.contains("\"loom_recall\""), "{offered}");
}
