//! Live sessions over a store in memory: a body written as bytes is the value serialised, the
//! cache stays within its bounds, another writer's events are seen, and a turn against a log
//! that moved on is refused whole.

use loom_core::render::Format;
use loom_core::{AgentId, EventBody, MessageContent, NewEvent, SessionId};
use loom_session::engine::RenderSpec;
use loom_session::{lock_live, Backend, LiveSessions, MemoryBackend};
use loom_store::{NewSession, Store, StoreError};

fn user(text: &str) -> NewEvent {
    NewEvent::new(
        5,
        EventBody::User {
            content: MessageContent::from(text),
            name: None,
        },
    )
}

#[test]
fn a_body_written_as_bytes_is_the_value_serialised_turn_after_turn() {
    let t = MemoryBackend::new(8);
    let b = t.backend();
    let engine = loom_session::Engine::built_in().unwrap();
    for format in [
        Format::OPENAI_CHAT,
        Format::OPENAI_RESPONSES,
        Format::ANTHROPIC,
    ] {
        // The same log twice: one rendered as values, one as bytes (which copies the
        // messages a call shares with the last one's body).
        let ids = ["values", "bytes"]
            .map(|n| SessionId::new(format!("{n}-{}", format.as_str())).unwrap());
        for id in &ids {
            t.store
                .create_session(
                    &NewSession {
                        id: id.clone(),
                        agent: AgentId::new("x").unwrap(),
                        parent: None,
                        created_ms: 1,
                    },
                    &[user("the task")],
                )
                .unwrap();
        }
        let spec = RenderSpec {
            model: "gpt-4o".into(),
            budget: Some(1_500),
            format,
            tools: Vec::new(),
            always_record: true,
            injections: Vec::new(),
            limits: Default::default(),
            recall: None,
        };
        let mut points = 0;
        for i in 0..60 {
            for id in &ids {
                let text = format!("message {i}: {}", "words \"quoted\"\n".repeat(30));
                t.store.append(id, &[user(&text)]).unwrap();
            }
            let value = engine.render_session(b, &ids[0], &spec).unwrap().unwrap();
            let bytes = engine
                .render_session_bytes(b, &ids[1], &spec)
                .unwrap()
                .unwrap();
            assert_eq!(
                String::from_utf8(bytes.body).unwrap(),
                value.body.to_string(),
                "{format:?}, render {i}"
            );
            points = bytes.receipt.points;
        }
        assert!(points > 0, "{format:?}: the sessions compacted");
    }
}

#[test]
fn the_cache_is_bounded_by_bytes_too() {
    let t = MemoryBackend::new(100);
    let big = "x".repeat(10_000);
    let create = |i: usize| {
        let id = SessionId::new(format!("s{i}")).unwrap();
        t.store
            .create_session(
                &NewSession {
                    id: id.clone(),
                    agent: AgentId::new("x").unwrap(),
                    parent: None,
                    created_ms: 1,
                },
                &[user(&big)],
            )
            .unwrap();
        id
    };
    // What one such session weighs, then a bound that holds two and a half of them.
    let probe = LiveSessions::new(100);
    let first = create(0);
    probe
        .get(
            Backend {
                live: &probe,
                ..t.backend()
            },
            &first,
        )
        .unwrap();
    let one = probe.bytes();
    let limit = one * 5 / 2;
    let live = LiveSessions::new(100).with_byte_limit(limit);
    let b = Backend {
        live: &live,
        ..t.backend()
    };
    for i in 1..10 {
        live.get(b, &create(i)).unwrap().unwrap();
        assert!(live.bytes() <= limit, "{} bytes after {i}", live.bytes());
    }
    assert_eq!(live.len(), 2);
    // The one in use stays, even alone over the bound, and grows as it is appended to.
    let last = SessionId::new("s9").unwrap();
    let l = live.get(b, &last).unwrap().unwrap();
    lock_live(&l)
        .append(b, &[user(&"y".repeat(limit))])
        .unwrap();
    live.get(b, &last).unwrap().unwrap();
    assert_eq!(live.len(), 1);
    assert!(live.bytes() > limit);
}

#[test]
fn a_live_session_sees_other_writers_and_the_cache_is_bounded() {
    let t = MemoryBackend::new(2);
    let (store, live, b) = (&t.store, &t.live, t.backend());
    for name in ["a", "b", "c"] {
        store
            .create_session(
                &NewSession {
                    id: SessionId::new(name).unwrap(),
                    agent: AgentId::new("x").unwrap(),
                    parent: None,
                    created_ms: 1,
                },
                &[user("hi")],
            )
            .unwrap();
    }
    let a = SessionId::new("a").unwrap();
    let la = live.get(b, &a).unwrap().unwrap();
    lock_live(&la).append(b, &[user("mine")]).unwrap();
    // Another process appends behind the cache's back.
    store.append(&a, &[user("theirs")]).unwrap();
    let la = live.get(b, &a).unwrap().unwrap();
    let texts: Vec<u64> = lock_live(&la).events().iter().map(|e| e.seq).collect();
    assert_eq!(texts, [1, 2, 3]);
    for name in ["b", "c"] {
        live.get(b, &SessionId::new(name).unwrap()).unwrap();
    }
    assert_eq!(live.len(), 2, "the least recently used was dropped");
    assert!(live
        .get(b, &SessionId::new("nope").unwrap())
        .unwrap()
        .is_none());
}

#[test]
fn a_turn_against_a_moved_log_is_refused_and_the_state_read_again() {
    let t = MemoryBackend::new(4);
    let (store, live, b) = (&t.store, &t.live, t.backend());
    let a = SessionId::new("a").unwrap();
    store
        .create_session(
            &NewSession {
                id: a.clone(),
                agent: AgentId::new("x").unwrap(),
                parent: None,
                created_ms: 1,
            },
            &[user("hi")],
        )
        .unwrap();
    let la = live.get(b, &a).unwrap().unwrap();
    let mut state = lock_live(&la);
    state.stage(b, &[user("mine")]).unwrap();
    assert_eq!(state.last_seq(), 2, "a staged event is held");
    assert_eq!(store.latest_seq(&a).unwrap(), 1, "and not written yet");
    // Another process appends between the call's read and its write.
    store.append(&a, &[user("theirs")]).unwrap();
    assert!(matches!(
        state.commit(b, None, None),
        Err(StoreError::Moved { .. })
    ));
    drop(state);
    assert_eq!(
        store.latest_seq(&a).unwrap(),
        2,
        "nothing of the turn was written"
    );
    // The next use reads the session again: the log as stored, without the refused event.
    let la = live.get(b, &a).unwrap().unwrap();
    let mut state = lock_live(&la);
    let seqs: Vec<u64> = state.events().iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2]);
    state.stage(b, &[user("mine")]).unwrap();
    state.commit(b, None, None).unwrap();
    assert_eq!(store.latest_seq(&a).unwrap(), 3);
    // A batch that breaks the ledger is refused whole and held by nothing.
    let orphan = NewEvent::new(
        6,
        EventBody::ToolResult {
            call_id: "nope".into(),
            tool_name: "f".into(),
            stats: loom_core::ContentStats::of(b"x"),
            content: loom_core::ToolOutput::Text("x".into()),
            is_error: false,
        },
    );
    assert!(state.stage(b, &[user("ok"), orphan]).is_err());
    assert_eq!(state.last_seq(), 3);
    assert_eq!(state.commit(b, None, None).unwrap(), None);
}
