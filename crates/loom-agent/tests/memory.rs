//! Memory in runs: `memory:search` and `memory:save` on the calling agent's own memory, and the
//! knowledge hook injecting earlier sessions' memories under the reserve, with a receipt entry.

// A panic is a test's failure report.
#![expect(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use std::sync::Arc;

use loom_agent::MemoryKnowledge;
use loom_agent::{Approval, Limits, Quiet, RunSpec, Runner, Stop};
use loom_core::{AgentId, EventBody, SessionId};
use loom_memory::{Memory, SqliteMemory, Tier};
use loom_runtime::{Hooks, KnowledgeInjector};
use serde_json::json;
use support::*;

fn spec() -> RunSpec {
    RunSpec {
        model: "gpt-4o".into(),
        budget: Some(16_000),
        approval: Approval::Untrusted,
        limits: Limits::default(),
        prices: None,
        system: loom_agent::DEFAULT_SYSTEM.into(),
        agent: AgentId::new("main").unwrap(),
        max_depth: 0,
    }
}

fn memory() -> Arc<SqliteMemory> {
    let m = SqliteMemory::open_in_memory().unwrap();
    m.write(&[
        remembered_item(
            "main",
            "earlier",
            2,
            "The deploy key lives in vault path ops/deploy",
        ),
        remembered_item(
            "other",
            "theirs",
            2,
            "OTHER-SECRET the deploy key is hunter2",
        ),
    ])
    .unwrap();
    Arc::new(m)
}

fn results(env: &loom_agent::Env, id: &SessionId) -> Vec<String> {
    env.store
        .read(id, 1..=100)
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e.body, EventBody::ToolResult { .. }))
        .map(|e| serde_json::to_string(&e.body).unwrap())
        .collect()
}

#[test]
fn agents_save_and_search_their_own_memory_through_the_tools() {
    let (_dir, ws) = workspace();
    let mut env = env();
    let memory = memory();
    env.memory = Some(Arc::clone(&memory) as Arc<dyn loom_memory::Memory>);
    let script = json!([
        call("memory__save", json!({"text": "The flaky test is test_parse_dates", "ttl_seconds": 3600})),
        call("memory__search", json!({"query": "where is the deploy key"})),
        call("memory__search", json!({"query": "flaky test", "tier": "L2"})),
        call("memory__save", json!({"text": 5})),
        call("memory__search", json!({"query": "x", "tier": "L7"})),
        {"content": "done"}
    ]);
    let (mut model, requests) = Recording::new(script);
    let id = SessionId::new("mem").unwrap();
    let report = start(&env, &mut model, spec(), "remember things", &id, &ws);
    assert_eq!(report.stop, Stop::Answered("done".into()));
    // Both tools are offered, under their wire names, with the other Level-1 tools.
    let first = &requests.lock().unwrap()[0];
    let names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"memory__search") && names.contains(&"memory__save"),
        "{names:?}"
    );
    assert!(names.contains(&"fs__read_file"));

    let out = results(&env, &id);
    assert!(out[0].contains("saved note"), "{}", out[0]);
    assert!(out[1].contains("ops/deploy"), "{}", out[1]);
    assert!(
        out[1].contains("\\\"earlier\\\""),
        "the hit names its session: {}",
        out[1]
    );
    assert!(
        !out[1].contains("OTHER-SECRET"),
        "another agent's memory: {}",
        out[1]
    );
    assert!(
        out[2].contains("test_parse_dates") && out[2].contains("L2"),
        "{}",
        out[2]
    );
    assert!(
        out[3].contains("bad arguments for memory:save: text: expected"),
        "{}",
        out[3]
    );
    assert!(
        out[4].contains("bad arguments for memory:search: tier"),
        "{}",
        out[4]
    );

    // The note points back to the turn that saved it.
    let hits = memory
        .search(&loom_memory::Search::new("flaky", 100))
        .unwrap();
    let note = memory.item(hits[0].id).unwrap();
    assert_eq!(note.tier, Tier::L2);
    let events = env.store.read(&id, 1..=100).unwrap();
    let saving = events
        .iter()
        .find(|e| {
            matches!(&e.body, EventBody::Assistant { tool_calls, .. }
            if tool_calls.iter().any(|c| c.name == "memory__save"))
        })
        .unwrap();
    assert_eq!(note.sources[0].session, id);
    assert_eq!(note.sources[0].from_seq, saving.seq);
    assert!(memory.note_expiry(note.id).unwrap().is_some());
}

#[test]
fn without_memory_the_tools_are_not_offered() {
    let (_dir, ws) = workspace();
    let env = env();
    let (mut model, requests) = Recording::new(json!([{"content": "ok"}]));
    start(
        &env,
        &mut model,
        spec(),
        "hi",
        &SessionId::new("plain").unwrap(),
        &ws,
    );
    let body = requests.lock().unwrap()[0].to_string();
    assert!(!body.contains("memory__search"));
}

#[test]
fn the_knowledge_hook_injects_earlier_memories_under_the_reserve_with_a_receipt_entry() {
    let (_dir, ws) = workspace();
    let mut env = env();
    env.engine.policy.injection_reserve = 120;
    let kb = MemoryKnowledge::new(memory(), AgentId::new("main").unwrap(), "", 120);
    let registry = loom_tokens::Registry::built_in().unwrap();
    let meter =
        Arc::new(loom_tokens::Tokenizer::for_model(registry.lookup("gpt-4o").unwrap()).unwrap());
    let hooks = Hooks::new().pre(KnowledgeInjector::new(
        Arc::new(kb),
        5,
        loom_core::render::Format::OPENAI_CHAT,
        meter,
        120,
    ));
    let (mut model, requests) = Recording::new(json!([{"content": "it is in the vault"}]));
    let mut quiet = Quiet;
    let mut make_child = child_actions;
    let id = SessionId::new("asks").unwrap();
    Runner::new(&env, &mut model, &mut quiet, spec(), &mut make_child)
        .with_hooks(&hooks)
        .start("Where is the deploy key?", Some(id.clone()), actions(&ws))
        .unwrap();
    let body = requests.lock().unwrap()[0].to_string();
    assert!(body.contains("ops/deploy"), "injected: {body}");
    assert!(
        !body.contains("OTHER-SECRET"),
        "another agent's memory: {body}"
    );
    let calls = env.store.model_calls(&id).unwrap();
    let injected = calls[0].call.receipt["receipt"]["injected"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(injected.len(), 1, "{injected:?}");
    assert_eq!(injected[0]["hook"], "knowledge:memory:earlier#2");
    let tokens = injected[0]["tokens"].as_u64().unwrap();
    assert!(tokens > 0 && tokens <= 120, "{tokens}");
}
