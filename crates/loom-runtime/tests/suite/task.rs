//! The TaskContextManager (seed 002): converter rules, direct messages, TTL in UTC, session
//! filter, recency truncation, exact budget shares — and the seed's known faults.

use std::sync::Arc;
use std::time::Duration;

use loom_core::render::{
    check_request, render, ApproxMeter, CompactionState, CostMemo, Format, Msg, RenderInput,
};
use loom_runtime::task::{
    action, parse_utc_ms, ContextConfig, DropReason, Dropped, EventBus, KnowledgeBase,
    KnowledgeHook, MemorySource, MessageConverter, MinItems, Shares, Snippet, TaskItem,
    ToolResults,
};
use loom_runtime::{
    render_turn, BoxError, Hooks, ParallelGroup, RuntimeError, TaskContextManager, TurnRender,
    TurnView,
};
use serde_json::json;

use super::support::{audience, policy, words, Log};

const T0: i64 = 1_769_594_400_000; // 2026-01-28T10:00:00Z

fn meter() -> Arc<ApproxMeter> {
    Arc::new(ApproxMeter)
}

fn manager(config: ContextConfig) -> TaskContextManager {
    TaskContextManager::new(config, meter()).unwrap()
}

fn task(text: &str) -> TaskItem {
    TaskItem::new("task-now", action::EXECUTE, T0 + 100_000).param("content", text)
}

fn dm(id: &str, to: &str, priority: f64, at: i64, text: &str) -> TaskItem {
    TaskItem::new(id, action::MESSAGE, at)
        .between("agent-a", to)
        .param("content", text)
        .param("priority", priority)
}

fn texts(msgs: &[Msg]) -> Vec<String> {
    msgs.iter()
        .map(|m| match m {
            Msg::System(c) => format!("system: {}", c.text()),
            Msg::User { content, .. } => format!("user: {}", content.text()),
            Msg::Assistant { content, calls, .. } => {
                let mut s = format!(
                    "assistant: {}",
                    content
                        .as_ref()
                        .map(|c| c.text().into_owned())
                        .unwrap_or_default()
                );
                for c in calls {
                    s.push_str(&format!(
                        " | {}({}) -> {}",
                        c.call.name,
                        c.call.arguments,
                        c.content.text()
                    ));
                }
                s
            }
        })
        .collect()
}

fn memory_items() -> Vec<TaskItem> {
    vec![
        TaskItem::new("u1", action::EXECUTE, T0).param("content", "Read file data.txt"),
        TaskItem::new("t1", action::THINKING, T0 + 1).param("content", "I need to read it."),
        TaskItem::new("c1", action::TOOL_CALL, T0 + 2)
            .param("tool_name", "read_file")
            .param("tool_call_id", "call-1")
            .param("arguments", json!({"path": "data.txt"})),
        TaskItem::new("c2", action::TOOL_CALL, T0 + 3)
            .param("tool_name", "grep")
            .param("arguments", json!({"pattern": "total"})),
        TaskItem::new("r2", action::TOOL_RESULT, T0 + 4)
            .param("tool_name", "grep")
            .param("content", "data.txt:3: total = 42"),
        TaskItem::new("r1", action::TOOL_RESULT, T0 + 5)
            .param("tool_name", "read_file")
            .param("tool_call_id", "call-1")
            .param("content", words(3_000, "data")),
        TaskItem::new("r9", action::TOOL_RESULT, T0 + 6)
            .param("tool_name", "web_search")
            .param("observation", "3 results for 'total'"),
        TaskItem::new("x1", "node.unknown", T0 + 7).param("content", "?"),
    ]
}

#[test]
fn converter_renders_results_as_observations_paired_with_their_calls() {
    let items = memory_items();
    let refs: Vec<&TaskItem> = items.iter().collect();
    let mut dropped = Vec::new();
    let out = MessageConverter::default().convert(&refs, &mut dropped);
    let t = texts(&out.iter().map(|c| c.msg.clone()).collect::<Vec<_>>());
    assert_eq!(t[0], "user: Read file data.txt");
    assert_eq!(t[1], "assistant: I need to read it.");
    // Paired by id although the result came later, and rendered as an observation with a
    // reference — never the 3,000-word content.
    assert!(
        t[2].starts_with(r#"assistant:  | read_file({"path":"data.txt"}) -> "#),
        "{}",
        t[2]
    );
    assert!(t[2].ends_with("(See task r1)"), "{}", t[2]);
    assert!(t[2].len() < 400);
    assert_eq!(out[2].items, vec!["c1".to_owned(), "r1".to_owned()]);
    // Paired by tool name when the result names no call.
    assert!(
        t[3].contains("grep(") && t[3].ends_with("(See task r2)"),
        "{}",
        t[3]
    );
    // A result without a call is kept as a note, not dropped.
    assert_eq!(
        t[4],
        "user: [result of web_search with no recorded call] 3 results for 'total' (See task r9)"
    );
    assert_eq!(out.len(), 5);
    assert_eq!(
        dropped,
        vec![Dropped {
            item: "x1".into(),
            reason: DropReason::UnknownAction
        }]
    );
}

#[test]
fn the_seeds_omit_rule_is_available() {
    let items = memory_items();
    let refs: Vec<&TaskItem> = items.iter().collect();
    let mut dropped = Vec::new();
    let conv = MessageConverter {
        tool_results: ToolResults::Omit,
        ..MessageConverter::default()
    };
    let t = texts(
        &conv
            .convert(&refs, &mut dropped)
            .into_iter()
            .map(|c| c.msg)
            .collect::<Vec<_>>(),
    );
    assert_eq!(t[2], r#"assistant: [Calling read_file(path="data.txt")]"#);
    assert_eq!(t[3], r#"assistant: [Calling grep(pattern="total")]"#);
    assert_eq!(t.len(), 4);
    let omitted: Vec<&str> = dropped
        .iter()
        .filter(|d| d.reason == DropReason::Omitted)
        .map(|d| d.item.as_str())
        .collect();
    assert_eq!(omitted, ["r2", "r1", "r9"]);
}

#[test]
fn direct_messages_priority_then_newest_with_the_limit_applied_after_sorting() {
    let bus = Arc::new(EventBus::new());
    // Published oldest first; the most important one comes last.
    bus.publish(dm("m1", "agent-b", 0.5, T0, "low, old"));
    bus.publish(dm("m2", "agent-b", 0.5, T0 + 10, "low, newer"));
    bus.publish(dm("m3", "agent-c", 0.9, T0 + 20, "for someone else"));
    bus.publish(dm("m4", "agent-b", 0.2, T0 + 30, "lowest"));
    bus.publish(dm(
        "m5",
        "agent-b",
        0.8,
        T0 + 40,
        "urgent: focus on the migration",
    ));
    let cfg = ContextConfig {
        max_direct_messages: 2,
        ..ContextConfig::new("agent-b", "You are agent B.", 4_000)
    };
    let ctx = manager(cfg)
        .source(bus.clone())
        .build_context(&task("go"), T0 + 100_000)
        .unwrap();
    let kept: Vec<&str> = ctx
        .injections
        .iter()
        .map(|i| i.content.lines().last().unwrap())
        .collect();
    assert_eq!(kept, ["urgent: focus on the migration", "low, newer"]);

    // The seed's fault: taking the first N before sorting loses the urgent message.
    let mut seed: Vec<TaskItem> = bus.query_by_target("agent-b", T0 + 100_000);
    seed.truncate(2);
    seed.sort_by(|a, b| {
        b.parameters["priority"]
            .as_f64()
            .unwrap()
            .total_cmp(&a.parameters["priority"].as_f64().unwrap())
    });
    assert!(seed.iter().all(|m| m.task_id != "m5"));

    let reasons: Vec<(&str, &DropReason)> = ctx
        .report
        .dropped
        .iter()
        .map(|d| (d.item.as_str(), &d.reason))
        .collect();
    assert!(reasons.contains(&("m3", &DropReason::OtherTarget)));
    assert!(reasons.contains(&("m1", &DropReason::OverLimit)));
    assert!(reasons.contains(&("m4", &DropReason::OverLimit)));
}

#[test]
fn ttl_expiry_compares_utc_whatever_the_timestamps_shape() {
    // Three spellings of 10:00:00 UTC: naive (read as UTC), with Z, with a +02:00 offset; and
    // integer milliseconds. The seed crashed comparing naive and aware times.
    let raw = [
        ("n", json!("2026-01-28T10:00:00")),
        ("z", json!("2026-01-28T10:00:00Z")),
        ("o", json!("2026-01-28T12:00:00+02:00")),
        ("i", json!(T0)),
    ];
    let bus = Arc::new(EventBus::new());
    for (id, at) in &raw {
        let item: TaskItem = serde_json::from_value(json!({
            "task_id": id,
            "action": "node.message",
            "source_agent": "agent-a",
            "target_agent": "agent-b",
            "created_at": at,
            "parameters": {"content": format!("message {id}"), "ttl_seconds": 600},
        }))
        .unwrap();
        assert_eq!(item.created_ms, T0, "{id}");
        bus.publish(item);
    }
    assert_eq!(parse_utc_ms("2026-01-28T10:00:00"), Ok((T0, true)));
    let cfg = ContextConfig {
        max_direct_messages: 10,
        ..ContextConfig::new("agent-b", "You are agent B.", 4_000)
    };
    let m = manager(cfg).source(bus);
    let live = m.build_context(&task("go"), T0 + 599_999).unwrap();
    assert_eq!(live.injections.len(), 4);
    let dead = m.build_context(&task("go"), T0 + 600_000).unwrap();
    assert!(dead.injections.is_empty());
    assert_eq!(
        dead.report
            .dropped
            .iter()
            .filter(|d| d.reason == DropReason::Expired)
            .count(),
        4
    );
    // A bad timestamp is a typed error naming the text, not a crash.
    let err = serde_json::from_value::<TaskItem>(json!({
        "task_id": "b", "action": "node.message", "created_at": "28/01/2026 10:00",
    }))
    .unwrap_err();
    assert!(err.to_string().contains("28/01/2026"), "{err}");
}

#[test]
fn at_least_one_direct_message_is_kept_even_past_its_share() {
    let bus = Arc::new(EventBus::new());
    bus.publish(dm("m1", "agent-b", 0.4, T0, &words(30, "long")));
    bus.publish(dm("m2", "agent-b", 0.9, T0, &words(30, "vital")));
    let shares = Shares {
        memory: 0.5,
        direct_messages: 0.0,
        knowledge: 0.0,
    };
    let cfg = ContextConfig {
        shares,
        ..ContextConfig::new("agent-b", "You are agent B.", 2_000)
    };
    let ctx = manager(cfg.clone())
        .source(bus.clone())
        .build_context(&task("go"), T0)
        .unwrap();
    assert_eq!(ctx.injections.len(), 1);
    assert!(ctx.injections[0].content.contains("vital0"));
    assert!(ctx.report.total_tokens <= 2_000);

    let none = ContextConfig {
        min_items: MinItems {
            direct_messages: 0,
            ..MinItems::default()
        },
        ..cfg
    };
    let ctx = manager(none)
        .source(bus)
        .build_context(&task("go"), T0)
        .unwrap();
    assert!(ctx.injections.is_empty());
}

#[test]
fn only_the_current_sessions_records_are_used() {
    let mem = Arc::new(MemorySource::new(vec![
        TaskItem::new("a", action::EXECUTE, T0)
            .param("content", "in session one")
            .session("s-1"),
        TaskItem::new("b", action::EXECUTE, T0 + 1)
            .param("content", "in session two")
            .session("s-2"),
    ]));
    let bus = Arc::new(EventBus::new());
    bus.publish(dm("m1", "agent-b", 0.5, T0, "for s-1").session("s-1"));
    bus.publish(dm("m2", "agent-b", 0.5, T0, "for s-2").session("s-2"));
    let ctx = manager(ContextConfig::new("agent-b", "You are agent B.", 4_000))
        .source(mem)
        .source(bus)
        .build_context(&task("go").session("s-1"), T0)
        .unwrap();
    let t = texts(&ctx.messages);
    assert!(t.contains(&"user: in session one".to_owned()));
    assert!(!t.iter().any(|m| m.contains("session two")));
    assert_eq!(ctx.injections.len(), 1);
    assert!(ctx.injections[0].content.ends_with("for s-1"));
    let other: Vec<&str> = ctx
        .report
        .dropped
        .iter()
        .filter(|d| d.reason == DropReason::OtherSession)
        .map(|d| d.item.as_str())
        .collect();
    assert_eq!(other, ["b", "m2"]);
}

fn chat(n: usize) -> Vec<TaskItem> {
    (0..n)
        .map(|i| {
            TaskItem::new(format!("m{i}"), action::EXECUTE, T0 + i as i64)
                .param("content", format!("message {i}: {}", words(20, "w")))
        })
        .collect()
}

#[test]
fn recency_truncation_keeps_the_system_message_and_the_newest_messages() {
    let cfg = ContextConfig {
        shares: Shares {
            memory: 0.5,
            direct_messages: 0.0,
            knowledge: 0.0,
        },
        system_reserve: 50,
        ..ContextConfig::new("agent-b", "You are agent B.", 800)
    };
    let m = manager(cfg).source(Arc::new(MemorySource::new(chat(30))));
    let ctx = m.build_context(&task("next"), T0 + 1_000).unwrap();
    let t = texts(&ctx.messages);
    assert_eq!(t[0], "system: You are agent B.");
    assert_eq!(t.last().unwrap(), "user: next");
    let kept: Vec<usize> = t[1..t.len() - 1]
        .iter()
        .map(|s| {
            s.trim_start_matches("user: message ")
                .split(':')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(!kept.is_empty() && kept.len() < 30);
    // The newest, contiguous, in order.
    let expected: Vec<usize> = (30 - kept.len()..30).collect();
    assert_eq!(kept, expected);
    assert!(ctx.report.used.memory <= ctx.report.allocation.memory);
    let truncated = ctx
        .report
        .dropped
        .iter()
        .filter(|d| d.reason == DropReason::Truncated)
        .count();
    assert_eq!(truncated, 30 - kept.len());
}

#[test]
fn shares_are_exact_and_the_system_reserve_is_applied() {
    let cfg = ContextConfig {
        max_tokens: 10_000,
        system_reserve: 1_000,
        shares: Shares {
            memory: 0.5,
            direct_messages: 0.15,
            knowledge: 0.25,
        },
        ..ContextConfig::new("agent-b", "Hi.", 0)
    };
    let m = manager(cfg);
    let ctx = m.build_context(&task("go"), T0).unwrap();
    let a = ctx.report.allocation;
    // The whole reserve is set aside even though the system prompt uses a few tokens of it
    // (the seed never applied its reserve).
    assert!(a.system_tokens < 10);
    assert_eq!(a.base, 10_000 - 1_000 - a.overhead - a.task_tokens);
    assert_eq!(a.memory, (a.base as f64 * 0.5).floor() as u64);
    assert_eq!(a.direct_messages, (a.base as f64 * 0.15).floor() as u64);
    assert_eq!(a.knowledge, (a.base as f64 * 0.25).floor() as u64);
    // What is not shared out is not handed to anyone: 10% stays free.
    assert!(a.memory + a.direct_messages + a.knowledge < a.base * 91 / 100);
}

#[test]
fn incoherent_budgets_are_errors_naming_the_field() {
    let base = ContextConfig::new("agent-b", "You are agent B.", 2_000);
    let cases = [
        (
            ContextConfig {
                // The seed silently renormalised 0.6 + 0.3 + 0.3 to 0.5 / 0.25 / 0.25.
                shares: Shares {
                    memory: 0.6,
                    direct_messages: 0.3,
                    knowledge: 0.3,
                },
                ..base.clone()
            },
            "shares.knowledge",
        ),
        (
            ContextConfig {
                shares: Shares {
                    memory: -0.1,
                    ..Shares::default()
                },
                ..base.clone()
            },
            "shares.memory",
        ),
        (
            ContextConfig {
                system_reserve: 2_000,
                ..base.clone()
            },
            "system_reserve",
        ),
        (
            ContextConfig {
                system_reserve: 3,
                ..base.clone()
            },
            "system_reserve",
        ),
        (
            ContextConfig {
                max_direct_messages: 2,
                min_items: MinItems {
                    direct_messages: 3,
                    ..MinItems::default()
                },
                ..base.clone()
            },
            "min_items.direct_messages",
        ),
        (
            ContextConfig {
                knowledge_limit: 0,
                min_items: MinItems {
                    knowledge: 1,
                    ..MinItems::default()
                },
                ..base
            },
            "min_items.knowledge",
        ),
    ];
    for (cfg, field) in cases {
        let err = TaskContextManager::new(cfg, meter()).unwrap_err();
        assert!(
            matches!(&err, RuntimeError::Config { field: f, .. } if f == field),
            "expected {field}: {err}"
        );
    }
    let err = TaskContextManager::new(
        ContextConfig {
            shares: Shares {
                memory: 0.6,
                direct_messages: 0.3,
                knowledge: 0.3,
            },
            ..ContextConfig::new("a", "s", 2_000)
        },
        meter(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("never renormalised"), "{err}");
    // A task that cannot fit is an error that says by how much.
    let m = manager(ContextConfig::new("agent-b", "You are agent B.", 600));
    let err = m.build_context(&task(&words(400, "big")), T0).unwrap_err();
    assert!(matches!(err, RuntimeError::DoesNotFit { .. }), "{err}");
}

struct Kb;
impl KnowledgeBase for Kb {
    fn name(&self) -> &str {
        "kb"
    }
    fn query(&self, query: &str, limit: usize) -> Result<Vec<Snippet>, BoxError> {
        let mut out = vec![
            Snippet {
                source: "docs/low.md".into(),
                text: format!("barely related to {query}"),
                score: 0.1,
            },
            Snippet {
                source: "docs/runbook.md".into(),
                text: format!("how to {query}: step one"),
                score: 0.9,
            },
            Snippet {
                source: "docs/mid.md".into(),
                text: words(400, "filler"),
                score: 0.5,
            },
        ];
        out.truncate(limit);
        Ok(out)
    }
}

#[test]
fn the_whole_context_fits_is_valid_and_is_counted_exactly() {
    let bus = Arc::new(EventBus::new());
    for i in 0..6 {
        bus.publish(dm(
            &format!("d{i}"),
            "agent-b",
            0.1 * i as f64,
            T0 + i,
            &words(15, "dm"),
        ));
    }
    let mut items = memory_items();
    items.extend(chat(40));
    for max in [700u64, 1_000, 2_000, 8_000] {
        for format in [
            Format::OPENAI_CHAT,
            Format::ANTHROPIC,
            Format::OPENAI_RESPONSES,
        ] {
            let cfg = ContextConfig {
                format,
                system_reserve: 40,
                ..ContextConfig::new("agent-b", "You are agent B.", max)
            };
            let m = manager(cfg)
                .source(Arc::new(MemorySource::new(items.clone())))
                .source(bus.clone())
                .knowledge_base(Arc::new(Kb));
            let ctx = m.build_context(&task("deploy"), T0 + 100).unwrap();
            let r = &ctx.report;
            assert!(
                r.total_tokens <= max,
                "{format:?} {max}: {} tokens",
                r.total_tokens
            );
            // The report's total is what the request costs, counted the way the render pipeline
            // counts it.
            let req = m.request(&ctx, "model", 256);
            let tools = format.tools(&req);
            let recount = format.overhead_tokens(&tools, &ApproxMeter)
                + req
                    .messages
                    .iter()
                    .map(|msg| format.msg_tokens(msg, &ApproxMeter))
                    .sum::<u64>();
            assert_eq!(recount, r.total_tokens);
            check_request(format, &m.body(&ctx, "model", 256)).unwrap();
            // Knowledge is ranked by score; injections come after the task.
            if let Some(k) = ctx.injections.iter().find(|i| i.hook == "knowledge") {
                assert!(k.content.starts_with("[knowledge: docs/runbook.md]"));
            }
            assert!(matches!(ctx.messages.last(), Some(Msg::User { .. })));
        }
    }
}

#[test]
fn a_knowledge_base_as_a_parallel_hook_injects_at_the_tail_under_the_reserve() {
    let mut log = Log::new();
    log.system("sys");
    log.user("restart the payment service");
    let events = log.log();
    let steps = log.step_index();
    let policy = loom_core::render::Policy {
        injection_reserve: 200,
        ..policy(4_000)
    };
    let audience = audience(0);
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
    let hooks = Hooks::new().parallel(
        ParallelGroup::new().hook(KnowledgeHook::new(Arc::new(Kb), 2), Duration::from_secs(5)),
    );
    let out = render_turn(
        &hooks,
        &input,
        &TurnView::of(&events, None, &audience),
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap();
    let TurnRender::Ready { rendered, .. } = out else {
        panic!("expected a render")
    };
    let body = rendered.body();
    let msgs = body["messages"].as_array().unwrap();
    // Best first: the query returned [low, runbook]; they are injected ranked by score.
    assert_eq!(
        msgs[msgs.len() - 2]["content"],
        "[knowledge: docs/runbook.md]\nhow to restart the payment service: step one"
    );
    assert!(msgs[msgs.len() - 1]["content"]
        .as_str()
        .unwrap()
        .starts_with("[knowledge: docs/low.md]"));
    let plain = render(&input, &CompactionState::default(), &mut CostMemo::new()).unwrap();
    assert_eq!(
        msgs.len(),
        plain.body()["messages"].as_array().unwrap().len() + 2
    );
    // With a limit of 3 the 400-word snippet blows the reserve: a loud error naming the hook.
    let hooks = Hooks::new().parallel(
        ParallelGroup::new().hook(KnowledgeHook::new(Arc::new(Kb), 3), Duration::from_secs(5)),
    );
    let err = render_turn(
        &hooks,
        &input,
        &TurnView::of(&events, None, &audience),
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap_err();
    assert!(
        matches!(err, RuntimeError::InjectionOverflow { ref hook, reserve: 200, .. } if hook == "kb"),
        "{err}"
    );
}
