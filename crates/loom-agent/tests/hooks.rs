//! The loop with pre-hooks (injections at the tail, recorded in the receipt; a halt stops the
//! run) and the summary worker between turns.

// A panic is a test's failure report.
#![expect(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use loom_agent::{Approval, Limits, Quiet, RunSpec, Runner, Stop};
use loom_core::{AgentId, SessionId};
use loom_runtime::{BoxError, DeterministicSummarizer, Draft, Flow, Hooks, PreHook, TurnView};
use serde_json::json;
use support::*;

struct Reminder;

impl PreHook for Reminder {
    fn name(&self) -> &str {
        "reminder"
    }
    fn run(&self, _turn: &TurnView, draft: &mut Draft) -> Result<Flow, BoxError> {
        draft.push("REMINDER: keep the tests green");
        Ok(Flow::Continue)
    }
}

struct Stopper;

impl PreHook for Stopper {
    fn name(&self) -> &str {
        "stopper"
    }
    fn run(&self, turn: &TurnView, _draft: &mut Draft) -> Result<Flow, BoxError> {
        Ok(if turn.at_seq > 3 {
            Flow::Halt("enough".into())
        } else {
            Flow::Continue
        })
    }
}

fn spec() -> RunSpec {
    RunSpec {
        model: "gpt-4o".into(),
        budget: Some(1_500),
        approval: Approval::Untrusted,
        limits: Limits::default(),
        prices: None,
        system: loom_agent::DEFAULT_SYSTEM.into(),
        agent: AgentId::new("main").unwrap(),
        max_depth: 0,
    }
}

#[test]
fn pre_hooks_inject_at_the_tail_and_can_halt() {
    let (_dir, ws) = workspace();
    let mut env = env();
    env.engine.policy.injection_reserve = 200;
    let script =
        json!([call("fs__list_dir", json!({})), call("fs__list_dir", json!({})), {"content": "x"}]);
    let (mut model, requests) = Recording::new(script);
    let hooks = Hooks::new().pre(Reminder).pre(Stopper);
    let mut quiet = Quiet;
    let mut make_child = child_actions;
    let id = SessionId::new("hooked").unwrap();
    let report = Runner::new(&env, &mut model, &mut quiet, spec(), &mut make_child)
        .with_hooks(&hooks)
        .start("list things", Some(id.clone()), actions(&ws))
        .unwrap();
    assert_eq!(report.stop, Stop::Halted("stopper: enough".into()));
    let requests = requests.lock().unwrap();
    assert_eq!(
        requests.len(),
        1,
        "the second turn was halted before its render"
    );
    let messages = requests[0]["messages"].as_array().unwrap();
    assert!(
        messages.last().unwrap().to_string().contains("REMINDER"),
        "at the tail"
    );
    let calls = env.store.model_calls(&id).unwrap();
    let receipt = &calls[0].call.receipt["receipt"];
    assert_eq!(receipt["injected"][0]["hook"], "reminder", "{receipt}");
}

#[test]
fn the_summary_worker_runs_between_turns() {
    let (_dir, ws) = workspace();
    std::fs::write(
        ws.join("big.txt"),
        "a line of a long file with words in it\n".repeat(120),
    )
    .unwrap();
    let env = env();
    let mut turns: Vec<serde_json::Value> = (0..8)
        .map(|i| {
            json!({"content": format!("reading the file again, pass {i}, to be sure of every line"),
                "tool_calls": [{"function": {"name": "fs__read_file", "arguments": {"path": "big.txt"}}}]})
        })
        .collect();
    turns.push(json!({"content": "read"}));
    let (mut model, _) = Recording::new(serde_json::Value::Array(turns));
    let registry = loom_tokens::Registry::built_in().unwrap();
    let info = registry.lookup("gpt-4o").unwrap();
    let meter = std::sync::Arc::new(loom_tokens::Tokenizer::for_model(info).unwrap());
    let mut policy = loom_core::render::Policy::default();
    policy.context_window = 1_500 + policy.response_reserve;
    let config = loom_runtime::WorkerConfig::new(
        policy,
        loom_runtime::RenderSetup {
            format: loom_core::render::Format::OPENAI_CHAT,
            model: "gpt-4o".into(),
            tools: Vec::new(),
            meter,
        },
    );
    let summarizer = DeterministicSummarizer::default();
    let mut quiet = Quiet;
    let mut make_child = child_actions;
    let id = SessionId::new("summed").unwrap();
    let report = Runner::new(&env, &mut model, &mut quiet, spec(), &mut make_child)
        .with_summarizer(&summarizer, &config)
        .start("read the file", Some(id.clone()), actions(&ws))
        .unwrap();
    assert_eq!(report.stop, Stop::Answered("read".into()));
    let summaries = env.store.summaries(&id).unwrap();
    assert!(
        !summaries.is_empty(),
        "the worker wrote a summary between turns"
    );
}
