//! Injection hooks: order, transform, halt, parallel append-only with timeouts and crash
//! isolation, the reserve check per hook, one render after hooks, post-hooks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use loom_core::render::{
    render, ApproxMeter, CompactionState, CostMemo, Format, Injection, RenderInput,
};
use loom_core::EventBody;
use loom_runtime::{
    render_turn, AppendHook, BoxError, Decision, Draft, Flow, Halt, HookStage, HookStatus, Hooks,
    InjectionBudget, ParallelGroup, PostHook, PostTurn, PreHook, RuntimeError, SideRecord,
    TurnRender, TurnView,
};

use super::support::{audience, policy, session, tools, words, Log};

/// An ordered hook from a closure.
struct Pre<F>(&'static str, F);

impl<F> PreHook for Pre<F>
where
    F: Fn(&TurnView, &mut Draft) -> Result<Flow, BoxError> + Send + Sync,
{
    fn name(&self) -> &str {
        self.0
    }
    fn run(&self, turn: &TurnView, draft: &mut Draft) -> Result<Flow, BoxError> {
        (self.1)(turn, draft)
    }
}

/// A parallel hook from a closure.
struct Par<F>(&'static str, F);

impl<F> AppendHook for Par<F>
where
    F: Fn(&TurnView, &[Injection]) -> Result<Vec<String>, BoxError> + Send + Sync,
{
    fn name(&self) -> &str {
        self.0
    }
    fn run(&self, turn: &TurnView, so_far: &[Injection]) -> Result<Vec<String>, BoxError> {
        (self.1)(turn, so_far)
    }
}

fn turn() -> TurnView {
    TurnView {
        session: Some(session()),
        agent: None,
        at_seq: 3,
        now_ms: 0,
        user_message: Some("where is the config?".into()),
    }
}

fn budget(reserve: u64) -> InjectionBudget<'static> {
    InjectionBudget {
        format: Format::OPENAI_CHAT,
        meter: &ApproxMeter,
        reserve,
    }
}

#[test]
fn ordered_hooks_run_in_order_and_transform() {
    let hooks = Hooks::new()
        .pre(Pre("retrieve", |t: &TurnView, d: &mut Draft| {
            d.push(format!("notes for: {}", t.user_message.as_deref().unwrap()));
            Ok(Flow::Continue)
        }))
        .pre(Pre("shout", |_: &TurnView, d: &mut Draft| {
            d.rewrite(|s| *s = s.to_uppercase());
            d.push("second");
            Ok(Flow::Continue)
        }))
        .pre(Pre("drop-second", |_: &TurnView, d: &mut Draft| {
            d.retain(|i| i.content != "second");
            Ok(Flow::Continue)
        }));
    let run = hooks.run_pre(&turn(), &[], &budget(1_000)).unwrap();
    let Decision::Proceed(injections) = run.decision else {
        panic!("expected proceed")
    };
    assert_eq!(
        injections,
        vec![Injection {
            hook: "retrieve".into(),
            content: "NOTES FOR: WHERE IS THE CONFIG?".into(),
        }]
    );
    let names: Vec<&str> = run.outcomes.iter().map(|o| o.hook.as_str()).collect();
    assert_eq!(names, ["retrieve", "shout", "drop-second"]);
    // Each outcome records the injected size after that hook, as the render will count it.
    let b = budget(1_000);
    let tokens: Vec<u64> = run
        .outcomes
        .iter()
        .map(|o| match o.status {
            HookStatus::Ran { tokens } => tokens,
            ref other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(tokens[0], b.tokens("notes for: where is the config?"));
    assert_eq!(
        tokens[1],
        b.tokens("NOTES FOR: WHERE IS THE CONFIG?") + b.tokens("second")
    );
    assert_eq!(tokens[2], b.total(&injections));
}

#[test]
fn a_halt_stops_the_turn_and_later_hooks() {
    let later = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&later);
    let hooks = Hooks::new()
        .pre(Pre("guard", |t: &TurnView, _: &mut Draft| {
            Ok(if t.user_message.as_deref().unwrap().contains("config") {
                Flow::Halt("config questions go to the ops agent".into())
            } else {
                Flow::Continue
            })
        }))
        .pre(Pre("after", move |_: &TurnView, _: &mut Draft| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(Flow::Continue)
        }));
    let run = hooks.run_pre(&turn(), &[], &budget(1_000)).unwrap();
    assert_eq!(
        run.decision,
        Decision::Halt(Halt {
            hook: "guard".into(),
            reason: "config questions go to the ops agent".into(),
        })
    );
    assert_eq!(later.load(Ordering::SeqCst), 0);
    assert_eq!(run.outcomes.len(), 1);
}

#[test]
fn a_failing_or_panicking_ordered_hook_halts_without_partial_changes() {
    for (name, panics) in [("fails", false), ("panics", true)] {
        let hooks = Hooks::new().pre(Pre(name, move |_: &TurnView, d: &mut Draft| {
            d.push("half-written");
            if panics {
                panic!("index out of bounds");
            }
            Err("backend unavailable".into())
        }));
        let initial = [Injection {
            hook: "earlier".into(),
            content: "kept".into(),
        }];
        let run = hooks.run_pre(&turn(), &initial, &budget(1_000)).unwrap();
        let Decision::Halt(halt) = run.decision else {
            panic!("expected a halt")
        };
        assert_eq!(halt.hook, name);
        let expected = if panics {
            "index out of bounds"
        } else {
            "backend unavailable"
        };
        assert!(halt.reason.contains(expected), "{}", halt.reason);
        assert!(matches!(
            run.outcomes[0].status,
            HookStatus::Failed { .. } | HookStatus::Panicked { .. }
        ));
    }
}

#[test]
fn parallel_hooks_append_in_declaration_order_and_skip_crashes_and_timeouts() {
    let group = ParallelGroup::new()
        .hook(
            Par("slow", |_: &TurnView, _: &[Injection]| {
                thread::sleep(Duration::from_millis(150));
                Ok(vec!["from slow".into()])
            }),
            Duration::from_secs(5),
        )
        .hook(
            Par("fast", |_: &TurnView, so_far: &[Injection]| {
                Ok(vec![format!("from fast (saw {})", so_far.len())])
            }),
            Duration::from_secs(5),
        )
        .hook(
            Par(
                "crash",
                |_: &TurnView, _: &[Injection]| -> Result<Vec<String>, BoxError> {
                    panic!("hook bug")
                },
            ),
            Duration::from_secs(5),
        )
        .hook(
            Par("hang", |_: &TurnView, _: &[Injection]| {
                thread::sleep(Duration::from_secs(3));
                Ok(vec!["too late".into()])
            }),
            Duration::from_millis(200),
        )
        .hook(
            Par("error", |_: &TurnView, _: &[Injection]| {
                Err("kb offline".into())
            }),
            Duration::from_secs(5),
        );
    let hooks = Hooks::new()
        .pre(Pre("first", |_: &TurnView, d: &mut Draft| {
            d.push("ordered");
            Ok(Flow::Continue)
        }))
        .parallel(group);
    let start = Instant::now();
    let run = hooks.run_pre(&turn(), &[], &budget(1_000)).unwrap();
    let took = start.elapsed();
    assert!(
        took < Duration::from_millis(2_500),
        "waited for the hanging hook: {took:?}"
    );
    let Decision::Proceed(injections) = run.decision else {
        panic!("expected proceed")
    };
    let texts: Vec<(&str, &str)> = injections
        .iter()
        .map(|i| (i.hook.as_str(), i.content.as_str()))
        .collect();
    // The slow hook finished last but comes first: declaration order, not finishing order.
    assert_eq!(
        texts,
        [
            ("first", "ordered"),
            ("slow", "from slow"),
            ("fast", "from fast (saw 1)")
        ]
    );
    let statuses: Vec<(&str, HookStage, &HookStatus)> = run
        .outcomes
        .iter()
        .map(|o| (o.hook.as_str(), o.stage, &o.status))
        .collect();
    assert_eq!(statuses.len(), 6);
    assert!(
        matches!(statuses[3], ("crash", HookStage::Parallel, HookStatus::Panicked { message }) if message == "hook bug")
    );
    assert!(matches!(
        statuses[4],
        ("hang", _, HookStatus::TimedOut { after_ms: 200 })
    ));
    assert!(
        matches!(statuses[5], ("error", _, HookStatus::Failed { error }) if error == "kb offline")
    );
}

#[test]
fn an_overflow_names_the_hook_its_size_and_the_reserve() {
    let big = words(200, "w");
    let b = budget(120);
    let small_tokens = b.tokens("small");
    let big_tokens = b.tokens(&big);
    assert!(small_tokens < 120 && big_tokens > 120);

    let big_clone = big.clone();
    let hooks = Hooks::new()
        .pre(Pre("small", |_: &TurnView, d: &mut Draft| {
            d.push("small");
            Ok(Flow::Continue)
        }))
        .pre(Pre("big", move |_: &TurnView, d: &mut Draft| {
            d.push(big_clone.clone());
            Ok(Flow::Continue)
        }));
    let err = hooks.run_pre(&turn(), &[], &b).unwrap_err();
    match &err {
        RuntimeError::InjectionOverflow {
            hook,
            hook_tokens,
            tokens,
            reserve,
        } => {
            assert_eq!(hook, "big");
            assert_eq!(*hook_tokens, big_tokens);
            assert_eq!(*tokens, big_tokens + small_tokens);
            assert_eq!(*reserve, 120);
        }
        other => panic!("unexpected {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("`big`") && msg.contains("120"), "{msg}");

    // In a parallel group the first hook, in declaration order, to cross the reserve is named.
    let group = ParallelGroup::new()
        .hook(
            Par("fits", |_: &TurnView, _: &[Injection]| {
                Ok(vec!["small".into()])
            }),
            Duration::from_secs(5),
        )
        .hook(
            Par("overflows", move |_: &TurnView, _: &[Injection]| {
                Ok(vec![big.clone()])
            }),
            Duration::from_secs(5),
        );
    let err = Hooks::new()
        .parallel(group)
        .run_pre(&turn(), &[], &b)
        .unwrap_err();
    assert!(matches!(err, RuntimeError::InjectionOverflow { ref hook, .. } if hook == "overflows"));
}

fn conversation() -> Log {
    let mut log = Log::new();
    log.system("You are a careful agent.");
    log.user("Fix the bug in parser.py");
    for i in 0..12 {
        log.step(
            &format!("c{i}"),
            "bash",
            &format!("{{\"command\":\"cat part_{i}.txt\"}}"),
            &words(120, &format!("o{i}_")),
        );
    }
    log.user("where is the config?");
    log
}

#[test]
fn render_turn_renders_once_after_hooks_with_injections_at_the_end() {
    let log = conversation();
    let events = log.log();
    let steps = log.step_index();
    let policy = loom_core::render::Policy {
        injection_reserve: 300,
        ..policy(3_000)
    };
    let audience = audience(0);
    let tools = tools();
    let input = RenderInput {
        events: &events,
        steps: &steps,
        summaries: &[],
        policy: &policy,
        format: Format::OPENAI_CHAT,
        model: "m",
        tools: &tools,
        injections: &[],
        audience: &audience,
        meter: &ApproxMeter,
    };
    let hooks = Hooks::new()
        .pre(Pre("memory", |_: &TurnView, d: &mut Draft| {
            d.push("The config lives in conf/app_v2.toml");
            Ok(Flow::Continue)
        }))
        .parallel(ParallelGroup::new().hook(
            Par("kb", |t: &TurnView, _: &[Injection]| {
                Ok(vec![format!(
                    "kb hit for {}",
                    t.user_message.as_deref().unwrap()
                )])
            }),
            Duration::from_secs(5),
        ));
    let view = TurnView::of(&events, Some(session()), &audience);
    assert_eq!(view.user_message.as_deref(), Some("where is the config?"));
    let TurnRender::Ready { rendered, outcomes } = render_turn(
        &hooks,
        &input,
        &view,
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap() else {
        panic!("expected a render")
    };
    assert_eq!(outcomes.len(), 2);

    // Compaction is decided as if there were no hooks: same state and same messages before the
    // injections as a render without them.
    let plain = render(&input, &CompactionState::default(), &mut CostMemo::new()).unwrap();
    assert!(plain.state.points > 0, "the fixture should compact");
    assert_eq!(rendered.state, plain.state);
    let (with_body, plain_body) = (rendered.body(), plain.body());
    let with = with_body["messages"].as_array().unwrap();
    let without = plain_body["messages"].as_array().unwrap();
    assert_eq!(with.len(), without.len() + 2);
    assert_eq!(&with[..without.len()], without.as_slice());
    assert_eq!(
        with[with.len() - 2]["content"],
        "The config lives in conf/app_v2.toml"
    );
    assert_eq!(
        with[with.len() - 1]["content"],
        "kb hit for where is the config?"
    );

    // The receipt accounts for each injection with the size the hooks were checked with.
    let b = InjectionBudget {
        format: Format::OPENAI_CHAT,
        meter: &ApproxMeter,
        reserve: 300,
    };
    let injected: Vec<(&str, u64)> = rendered
        .receipt
        .injected
        .iter()
        .map(|i| (i.hook.as_str(), i.tokens))
        .collect();
    assert_eq!(
        injected,
        [
            ("memory", b.tokens("The config lives in conf/app_v2.toml")),
            ("kb", b.tokens("kb hit for where is the config?"))
        ]
    );
    // Nothing injected is in the log.
    assert!(events
        .iter()
        .all(|e| !format!("{:?}", e.body).contains("app_v2")));
}

#[test]
fn a_halted_turn_renders_nothing() {
    let log = conversation();
    let events = log.log();
    let steps = log.step_index();
    let policy = policy(100_000);
    let audience = audience(0);
    let input = RenderInput {
        events: &events,
        steps: &steps,
        summaries: &[],
        policy: &policy,
        format: Format::ANTHROPIC,
        model: "m",
        tools: &[],
        injections: &[],
        audience: &audience,
        meter: &ApproxMeter,
    };
    let hooks = Hooks::new().pre(Pre("stop", |_: &TurnView, _: &mut Draft| {
        Ok(Flow::Halt("budget exhausted for today".into()))
    }));
    let out = render_turn(
        &hooks,
        &input,
        &TurnView::of(&events, None, &audience),
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap();
    assert!(
        matches!(out, TurnRender::Halted { ref halt, .. } if halt.reason == "budget exhausted for today")
    );
}

struct Recorder;
impl PostHook for Recorder {
    fn name(&self) -> &str {
        "memory-writer"
    }
    fn run(&self, turn: &PostTurn<'_>) -> Result<Vec<SideRecord>, BoxError> {
        let EventBody::Assistant { content, .. } = &turn.assistant.body else {
            return Err("not an assistant message".into());
        };
        let mut record = SideRecord::new(
            "memory",
            serde_json::json!({"said": content.as_ref().map(|c| c.text().into_owned())}),
        );
        // A hook cannot pass its record off as another hook's.
        record.hook = "someone-else".into();
        Ok(vec![record])
    }
}

struct Broken;
impl PostHook for Broken {
    fn name(&self) -> &str {
        "broken"
    }
    fn run(&self, _: &PostTurn<'_>) -> Result<Vec<SideRecord>, BoxError> {
        panic!("post-hook bug")
    }
}

#[test]
fn post_hooks_return_side_records_and_a_crash_does_not_stop_the_others() {
    let mut log = conversation();
    log.assistant("The config is in conf/app.toml");
    let events = log.log();
    let before = events.clone();
    let hooks = Hooks::new().post(Broken).post(Recorder);
    let post = hooks.run_post(&PostTurn {
        session: None,
        events: &events,
        assistant: events.last().unwrap(),
        receipt: None,
    });
    assert_eq!(events, before);
    assert_eq!(post.records.len(), 1);
    assert_eq!(post.records[0].hook, "memory-writer");
    assert_eq!(
        post.records[0].body["said"],
        "The config is in conf/app.toml"
    );
    assert!(matches!(
        post.outcomes[0].status,
        HookStatus::Panicked { .. }
    ));
    assert_eq!(post.outcomes[1].stage, HookStage::Post);
    assert!(matches!(post.outcomes[1].status, HookStatus::Ran { .. }));
}
