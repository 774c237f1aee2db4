//! The knowledge hook over Loom's memory (`MemoryKnowledge`): the best L4 items and
//! knowledge-base chunks for the task, injected under the reserve, listed in the receipt with
//! their source and tokens, and never another agent's memory.

// A panic is a test's failure report.
#![expect(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use std::collections::HashMap;
use std::sync::Arc;

use loom_agent::MemoryKnowledge;
use loom_core::render::{
    ApproxMeter, Audience, CompactionState, CostMemo, Format, Policy, RenderInput,
};
use loom_core::{AgentId, Event, EventBody, MessageContent, SessionId};
use loom_memory::{Memory, SqliteMemory};
use loom_runtime::task::{KnowledgeBase, KnowledgeQuery};
use loom_runtime::{render_turn, Hooks, InjectionBudget, KnowledgeInjector, TurnRender, TurnView};
use support::remembered_item;

fn memory() -> Arc<SqliteMemory> {
    let m = SqliteMemory::open_in_memory().unwrap();
    m.write(&[
        remembered_item(
            "agent-a",
            "old",
            3,
            "The config of the parser lives in conf/parser.toml",
        ),
        remembered_item("agent-a", "old", 5, "Staging config is rebuilt nightly"),
        remembered_item(
            "agent-b",
            "theirs",
            2,
            "The config secret of agent b is zebra-42",
        ),
    ])
    .unwrap();
    m.kb_add(
        "",
        "guide.md",
        "# Config\n\nThe config file format is TOML; see conf/.\n\n# Other\n\nUnrelated.\n",
        1,
    )
    .unwrap();
    Arc::new(m)
}

/// The task: a system prompt and the user's question.
fn conversation() -> Vec<Event> {
    [
        EventBody::System {
            content: MessageContent::Text("You are a careful agent.".into()),
        },
        EventBody::User {
            content: MessageContent::Text("Where is the config of the parser?".into()),
            name: None,
        },
    ]
    .into_iter()
    .zip(1..)
    .map(|(body, seq)| Event {
        seq,
        ts_ms: 1_000_000 + 1_000 * seq as i64,
        body,
    })
    .collect()
}

/// Renders one turn of the conversation with the knowledge hook under `reserve`.
fn turn_with(reserve: u64) -> (Vec<(String, u64)>, Vec<String>) {
    let events = conversation();
    let steps = HashMap::new();
    let policy = Policy {
        context_window: 100_000,
        response_reserve: 100,
        injection_reserve: reserve,
        ..Policy::default()
    };
    let audience = Audience {
        agent: Some(AgentId::new("agent-a").unwrap()),
        now_ms: 0,
    };
    let input = RenderInput {
        events: &events,
        steps: &steps,
        summaries: &[],
        policy: &policy,
        format: Format::OPENAI_CHAT,
        model: "m",
        tools: &[],
        injections: &[],
        audience: &audience,
        meter: &ApproxMeter,
    };
    let kb = MemoryKnowledge::new(memory(), AgentId::new("nobody").unwrap(), "", 1_000);
    let hooks = Hooks::new().pre(KnowledgeInjector::new(
        Arc::new(kb),
        8,
        Format::OPENAI_CHAT,
        Arc::new(ApproxMeter),
        reserve,
    ));
    let view = TurnView::of(&events, Some(SessionId::new("s1").unwrap()), &audience);
    let TurnRender::Ready { rendered, .. } = render_turn(
        &hooks,
        &input,
        &view,
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap() else {
        panic!("expected a render")
    };
    let injected = rendered
        .receipt
        .injected
        .iter()
        .map(|i| (i.hook.clone(), i.tokens))
        .collect();
    let body = rendered.body();
    let tail: Vec<String> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .filter(|c| c.starts_with("[knowledge:"))
        .map(str::to_owned)
        .collect();
    (injected, tail)
}
#[test]
fn the_best_memory_and_kb_chunks_are_injected_under_the_reserve_and_in_the_receipt() {
    let (injected, tail) = turn_with(400);
    let hooks: Vec<&str> = injected.iter().map(|(h, _)| h.as_str()).collect();
    assert!(hooks.contains(&"knowledge:memory:old#3"), "{hooks:?}");
    assert!(hooks.contains(&"knowledge:kb:guide.md:1-4"), "{hooks:?}");
    assert!(injected.iter().map(|(_, t)| t).sum::<u64>() <= 400);
    // Each receipt entry is the size of what was sent.
    let b = InjectionBudget {
        format: Format::OPENAI_CHAT,
        meter: &ApproxMeter,
        reserve: 400,
    };
    let sizes: Vec<u64> = tail.iter().map(|t| b.tokens(t)).collect();
    assert_eq!(sizes, injected.iter().map(|(_, t)| *t).collect::<Vec<_>>());
    // The turn is agent-a's: agent b's memory is never injected.
    assert!(tail.iter().all(|t| !t.contains("zebra")), "{tail:?}");

    // A tight reserve takes fewer snippets and never overflows.
    let best = injected[0].1;
    let (tight, _) = turn_with(best);
    assert!(!tight.is_empty());
    assert!(tight.iter().map(|(_, t)| t).sum::<u64>() <= best);
    let (none, _) = turn_with(3);
    assert!(none.is_empty());
}

#[test]
fn memory_is_answered_for_the_agent_of_the_turn_and_skips_its_own_session() {
    let kb = MemoryKnowledge::new(memory(), AgentId::new("agent-a").unwrap(), "", 1_000)
        .sources(true, false);
    let b = AgentId::new("agent-b").unwrap();
    let q = |agent: Option<&AgentId>, session: Option<&SessionId>| {
        kb.query_for(&KnowledgeQuery {
            text: "config secret",
            agent,
            session,
            limit: 10,
        })
        .unwrap()
    };
    let own = q(None, None);
    assert!(own.iter().all(|s| !s.text.contains("zebra")));
    assert!(!own.is_empty());
    let theirs = q(Some(&b), None);
    assert!(
        theirs.iter().all(|s| s.text.contains("zebra")),
        "{theirs:?}"
    );
    // Items from the current session are in the request already.
    let old = SessionId::new("old").unwrap();
    assert!(q(None, Some(&old)).is_empty());
}
