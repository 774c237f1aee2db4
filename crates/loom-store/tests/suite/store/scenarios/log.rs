//! Scenarios on the log itself: sessions, appends, reads, atomicity and the tool-call ledger.

use std::collections::BTreeMap;

use loom_core::{
    AgentId, BlobRef, ContentPart, ContentStats, EventBody, LogError, MessageContent, NewEvent,
    Seq, ToolCall, ToolOutput,
};
use loom_store::{CallStatus, NewSession, Store, StoreError};

use crate::suite::support::{
    call, calls, new_session, result, sid, user, with_session, StoreHarness,
};

/// Everything a reader can see of a session, to compare before and after a refused write.
fn snapshot(store: &impl Store, id: &loom_core::SessionId) -> String {
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}",
        store.session(id).unwrap(),
        store.read(id, 1..=Seq::MAX).unwrap(),
        store.latest_seq(id).unwrap(),
        store.tool_calls(id).unwrap(),
    )
}

pub(crate) fn create_append_read<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let info = store
        .create_session(&new_session("s"), &[user("a"), user("b")])
        .unwrap();
    assert_eq!(info.event_count, 2);
    let id = sid("s");
    assert_eq!(store.latest_seq(&id).unwrap(), 2);
    assert_eq!(
        store
            .append(&id, &[user("c"), user("d"), user("e")])
            .unwrap(),
        3..=5
    );
    assert_eq!(store.latest_seq(&id).unwrap(), 5);

    let texts = |from: Seq, to: Seq| -> Vec<(Seq, String)> {
        store
            .read(&id, from..=to)
            .unwrap()
            .into_iter()
            .map(|e| match e.body {
                EventBody::User { content, .. } => (e.seq, content.text().into_owned()),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    };
    let all: Vec<(Seq, String)> = ["a", "b", "c", "d", "e"]
        .iter()
        .enumerate()
        .map(|(i, t)| (i as Seq + 1, (*t).to_owned()))
        .collect();
    assert_eq!(texts(1, 5), all);
    assert_eq!(texts(2, 3), all[1..3]);
    assert_eq!(texts(4, 100), all[3..], "a range past the end is clamped");
    assert_eq!(texts(0, Seq::MAX), all);
    assert!(texts(6, 9).is_empty());
    assert!(texts(4, 2).is_empty(), "a reversed range is empty");
    assert!(texts(0, 0).is_empty());
}

pub(crate) fn seqs_are_one_based_and_contiguous<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "s");
    assert_eq!(store.latest_seq(&id).unwrap(), 0);
    let empty = store.append(&id, &[]).unwrap();
    assert!(
        empty.is_empty(),
        "an empty append gets an empty range, not {empty:?}"
    );
    assert_eq!(store.latest_seq(&id).unwrap(), 0);
    let mut expected_first = 1;
    for size in [1, 3, 1, 7, 2] {
        let batch: Vec<NewEvent> = (0..size).map(|i| user(&format!("{i}"))).collect();
        let range = store.append(&id, &batch).unwrap();
        assert_eq!(range, expected_first..=expected_first + size - 1);
        expected_first += size;
    }
    let seqs: Vec<Seq> = store
        .read(&id, 1..=Seq::MAX)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, (1..expected_first).collect::<Vec<_>>());
    assert_eq!(
        store.session(&id).unwrap().unwrap().event_count,
        expected_first - 1
    );
}

pub(crate) fn unknown_session_is_an_error<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = sid("nobody");
    assert_eq!(store.session(&id).unwrap(), None);
    let not_found = |e: StoreError| {
        assert!(
            matches!(&e, StoreError::SessionNotFound(s) if *s == id),
            "{e}"
        );
        assert!(e.is_bad_input());
    };
    not_found(store.append(&id, &[user("x")]).unwrap_err());
    not_found(store.append(&id, &[]).unwrap_err());
    not_found(store.read(&id, 1..=10).unwrap_err());
    not_found(store.latest_seq(&id).unwrap_err());
    not_found(store.tool_calls(&id).unwrap_err());
    not_found(store.expire_tool_call(&id, "c").unwrap_err());
    not_found(store.summaries(&id).unwrap_err());
    not_found(store.model_calls(&id).unwrap_err());
    not_found(store.steps(&id).unwrap_err());
    assert!(
        store.sessions().unwrap().is_empty(),
        "a failed write must not create the session"
    );
}

pub(crate) fn existing_session_is_not_recreated<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    store
        .create_session(&new_session("s"), &[user("first")])
        .unwrap();
    let before = snapshot(store, &sid("s"));
    let again = NewSession {
        agent: AgentId::new("other").unwrap(),
        ..new_session("s")
    };
    let err = store.create_session(&again, &[user("second")]).unwrap_err();
    assert!(
        matches!(&err, StoreError::SessionExists(s) if s.as_str() == "s"),
        "{err}"
    );
    assert!(err.is_bad_input());
    assert_eq!(snapshot(store, &sid("s")), before);
}

/// Each bad event, with a valid prefix before it in the same batch.
/// What a bad batch is, the batch, and whether an error is the one it must give.
type BadBatch = (&'static str, Vec<NewEvent>, fn(&LogError) -> bool);

fn bad_batches() -> Vec<BadBatch> {
    vec![
        (
            "unknown call",
            vec![user("x"), call("c9", "bash"), result("nope", "bash", false)],
            |e| matches!(e, LogError::UnknownCall { call_id } if call_id == "nope"),
        ),
        (
            "call id already used",
            vec![user("x"), call("c9", "bash"), call("c1", "bash")],
            |e| matches!(e, LogError::DuplicateCall { call_id, first_seq: 1 } if call_id == "c1"),
        ),
        (
            "call id used twice in the batch",
            vec![user("x"), call("c9", "bash"), call("c9", "bash")],
            |e| matches!(e, LogError::DuplicateCall { call_id, first_seq: 6 } if call_id == "c9"),
        ),
        (
            "stale result",
            vec![user("x"), call("c9", "bash"), result("c1", "bash", false)],
            |e| matches!(e, LogError::AlreadyResolved { call_id, resolved_seq: 3 } if call_id == "c1"),
        ),
        (
            "tool-name mismatch",
            vec![user("x"), call("c9", "bash"), result("c2", "python", false)],
            |e| {
                matches!(e, LogError::ToolNameMismatch { call_id, expected, got }
                if call_id == "c2" && expected == "bash" && got == "python")
            },
        ),
        (
            "invalid field",
            vec![user("x"), call("c9", "bash"), call("", "bash")],
            |e| matches!(e, LogError::InvalidField { field, .. } if field == "tool_calls[0].id"),
        ),
    ]
}

pub(crate) fn bad_batch_changes_nothing<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "s");
    // Seqs 1-4: c1 resolved at 3, c2 pending.
    store
        .append(
            &id,
            &[
                call("c1", "bash"),
                user("u"),
                result("c1", "bash", false),
                call("c2", "bash"),
            ],
        )
        .unwrap();
    for (what, batch, expected) in bad_batches() {
        let before = snapshot(store, &id);
        let err = store.append(&id, &batch).unwrap_err();
        match &err {
            StoreError::InvalidEvent {
                session,
                index,
                seq,
                source,
            } => {
                assert_eq!(session, &id, "{what}");
                assert_eq!(*index, 2, "{what}: the third event is the bad one");
                assert_eq!(*seq, 7, "{what}: it would have been seq 7");
                assert!(expected(source), "{what}: unexpected reason {source:?}");
            }
            other => panic!("{what}: expected InvalidEvent, got {other:?}"),
        }
        assert!(err.is_bad_input(), "{what}");
        let message = err.to_string();
        assert!(
            message.contains("event 2") && message.contains("seq 7"),
            "{what}: {message}"
        );
        assert_eq!(snapshot(store, &id), before, "{what}: the log changed");
    }
    // The log is still appendable where it was.
    assert_eq!(
        store.append(&id, &[result("c2", "bash", true)]).unwrap(),
        5..=5
    );
}

pub(crate) fn bad_create_creates_nothing<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    for (what, mut batch, expected) in bad_batches() {
        // Without the earlier log, the stale and duplicate cases need their own first call.
        batch.insert(0, call("c1", "bash"));
        batch.insert(1, result("c1", "bash", false));
        batch.insert(2, call("c2", "bash"));
        let err = store.create_session(&new_session("s"), &batch).unwrap_err();
        match &err {
            StoreError::InvalidEvent {
                index, seq, source, ..
            } => {
                assert_eq!((*index, *seq), (5, 6), "{what}");
                // The earlier log sits at other seqs here, so two cases name other seqs.
                let ok = match what {
                    "stale result" => matches!(
                        source,
                        LogError::AlreadyResolved {
                            resolved_seq: 2,
                            ..
                        }
                    ),
                    "call id used twice in the batch" => {
                        matches!(source, LogError::DuplicateCall { first_seq: 5, .. })
                    }
                    _ => expected(source),
                };
                assert!(ok, "{what}: {source:?}");
            }
            other => panic!("{what}: expected InvalidEvent, got {other:?}"),
        }
        assert_eq!(store.session(&sid("s")).unwrap(), None, "{what}");
        assert!(store.sessions().unwrap().is_empty(), "{what}");
        assert!(matches!(
            store.latest_seq(&sid("s")),
            Err(StoreError::SessionNotFound(_))
        ));
    }
    let info = store
        .create_session(&new_session("s"), &[user("ok")])
        .unwrap();
    assert_eq!(info.event_count, 1);
}

pub(crate) fn tool_call_states<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "s");
    store
        .append(
            &id,
            &[
                calls(&[("b", "bash"), ("a", "read_file")]),
                result("b", "bash", false),
                result("a", "read_file", true),
                calls(&[("d", "bash"), ("c", "grep")]),
            ],
        )
        .unwrap();
    store.expire_tool_call(&id, "d").unwrap();
    let got: Vec<(String, String, Seq, CallStatus, Option<Seq>)> = store
        .tool_calls(&id)
        .unwrap()
        .into_iter()
        .map(|r| (r.call_id, r.tool_name, r.call_seq, r.status, r.result_seq))
        .collect();
    let row =
        |id: &str, tool: &str, at: Seq, status, res| (id.into(), tool.into(), at, status, res);
    assert_eq!(
        got,
        vec![
            row("a", "read_file", 1, CallStatus::Errored, Some(3)),
            row("b", "bash", 1, CallStatus::Resolved, Some(2)),
            row("c", "grep", 4, CallStatus::Pending, None),
            row("d", "bash", 4, CallStatus::Expired, None),
        ],
        "ordered by the seq that made the call, then by id"
    );
}

pub(crate) fn resolve_only_if_pending<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "s");
    store
        .append(
            &id,
            &[
                calls(&[("done", "bash"), ("late", "bash")]),
                result("done", "bash", false),
            ],
        )
        .unwrap();
    store.expire_tool_call(&id, "late").unwrap();
    let before = snapshot(store, &id);

    let err = store
        .append(&id, &[result("done", "bash", false)])
        .unwrap_err();
    assert!(
        matches!(
            &err,
            StoreError::InvalidEvent {
                source: LogError::AlreadyResolved {
                    resolved_seq: 2,
                    ..
                },
                ..
            }
        ),
        "a second result is stale: {err}"
    );
    let err = store
        .append(&id, &[result("late", "bash", false)])
        .unwrap_err();
    assert!(
        matches!(
            &err,
            StoreError::InvalidEvent {
                source: LogError::Expired { .. },
                seq: 3,
                ..
            }
        ),
        "a result for an expired call is refused: {err}"
    );
    for call_id in ["done", "late", "ghost"] {
        let err = store.expire_tool_call(&id, call_id).unwrap_err();
        assert!(
            matches!(&err, StoreError::CallState { .. }),
            "{call_id}: {err}"
        );
        assert!(err.is_bad_input());
    }
    assert_eq!(snapshot(store, &id), before);
}

pub(crate) fn every_event_kind_round_trips<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "s");
    let child = sid("s/child");
    let agent = AgentId::new("worker").unwrap();
    let blob = BlobRef::from_hex(&"0f".repeat(32)).unwrap();
    let mut metadata = BTreeMap::new();
    metadata.insert(
        "z".into(),
        serde_json::json!({"n": 1.000_000_000_000_2, "list": [1, "x", null]}),
    );
    metadata.insert("a".into(), serde_json::json!("ü — 漢字 \u{1F600}"));
    let bodies = vec![
        EventBody::System {
            content: "be terse".into(),
        },
        EventBody::User {
            content: MessageContent::Parts(vec![
                ContentPart::Text {
                    text: "look".into(),
                },
                ContentPart::Image {
                    url: "data:image/png;base64,AA==".into(),
                    detail: Some("low".into()),
                },
            ]),
            name: Some("ana".into()),
        },
        EventBody::Assistant {
            content: Some("checking".into()),
            reasoning: Some("think\n\tindented".into()),
            tool_calls: vec![
                ToolCall {
                    id: "k1".into(),
                    name: "bash".into(),
                    arguments: "{\"cmd\": \"ls\"".into(),
                },
                ToolCall {
                    id: "k2".into(),
                    name: "fetch".into(),
                    arguments: "{}".into(),
                },
            ],
            name: Some("bot".into()),
            native: Some(loom_core::NativeReasoning {
                api: loom_core::Api::Anthropic,
                items: vec![serde_json::json!(
                    {"type": "thinking", "thinking": "think", "signature": "c2ln\u{0}"}
                )],
            }),
        },
        EventBody::ToolResult {
            call_id: "k1".into(),
            tool_name: "bash".into(),
            content: ToolOutput::Parts(vec![ContentPart::Text {
                text: "a\0b".into(),
            }]),
            is_error: true,
            stats: ContentStats::of(b"a\0b"),
        },
        EventBody::ToolResult {
            call_id: "k2".into(),
            tool_name: "fetch".into(),
            content: ToolOutput::Blob(blob),
            is_error: false,
            stats: ContentStats::of(&[0xff; 300]),
        },
        EventBody::DirectMessage {
            source: "planner".into(),
            target: "worker".into(),
            content: "go".into(),
            priority: 0.1 + 0.2,
            ttl_seconds: Some(60),
            parent_task_id: Some("t1".into()),
            metadata,
        },
        EventBody::Spawn {
            child: child.clone(),
            agent: agent.clone(),
            goal: "count".into(),
            extract: Some("steps".into()),
        },
        EventBody::AgentResult {
            child,
            agent,
            result: "42".into(),
            success: true,
        },
        EventBody::Pin {
            label: Some("rule".into()),
            content: "never push".into(),
        },
        EventBody::Pin {
            label: None,
            content: String::new(),
        },
    ];
    let events: Vec<NewEvent> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| NewEvent::new(-5 + i as i64, b.clone()))
        .collect();
    store.append(&id, &events).unwrap();
    h.reopen();
    let stored = h.store().read(&id, 1..=Seq::MAX).unwrap();
    assert_eq!(stored.len(), events.len());
    for (i, (got, sent)) in stored.iter().zip(&events).enumerate() {
        assert_eq!(got.seq, i as Seq + 1);
        assert_eq!(got.ts_ms, sent.ts_ms, "event {i}");
        assert_eq!(got.body, sent.body, "event {i}");
    }
}

pub(crate) fn threads_share_one_store<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "s");
    const THREADS: usize = 4;
    const BATCHES: usize = 15;
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let id = &id;
            scope.spawn(move || {
                for b in 0..BATCHES {
                    let call_id = format!("t{t}b{b}");
                    let range = store
                        .append(
                            id,
                            &[call(&call_id, "bash"), result(&call_id, "bash", false)],
                        )
                        .unwrap();
                    assert_eq!(range.end() - range.start(), 1);
                }
            });
        }
    });
    let events = store.read(&id, 1..=Seq::MAX).unwrap();
    assert_eq!(events.len(), THREADS * BATCHES * 2);
    for (i, pair) in events.chunks(2).enumerate() {
        assert_eq!(pair[0].seq, 2 * i as Seq + 1);
        // Batches never interleave: each call is followed by its own result.
        let (EventBody::Assistant { tool_calls, .. }, EventBody::ToolResult { call_id, .. }) =
            (&pair[0].body, &pair[1].body)
        else {
            panic!("batch {i} interleaved: {pair:?}");
        };
        assert_eq!(&tool_calls[0].id, call_id);
    }
    assert!(store
        .tool_calls(&id)
        .unwrap()
        .iter()
        .all(|c| c.status == CallStatus::Resolved));
}

pub(crate) fn create_sessions_in_one_call<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let batch = vec![
        (
            new_session("b1"),
            vec![user("a"), call("c1", "bash"), result("c1", "bash", false)],
        ),
        (new_session("b2"), vec![user("b")]),
    ];
    let infos = store.create_sessions(&batch).unwrap();
    let counts: Vec<u64> = infos.iter().map(|i| i.event_count).collect();
    assert_eq!(counts, [3, 1]);
    assert_eq!(store.read(&sid("b1"), 1..=Seq::MAX).unwrap().len(), 3);
    assert_eq!(store.session(&sid("b2")).unwrap().unwrap().event_count, 1);
    // The session that fails is never created, whatever a backend does with the rest.
    let bad = vec![
        (new_session("b3"), vec![user("c")]),
        (new_session("b4"), vec![result("nope", "bash", false)]),
    ];
    let err = store.create_sessions(&bad).unwrap_err();
    assert!(matches!(err, StoreError::InvalidEvent { .. }), "{err:?}");
    assert!(store.session(&sid("b4")).unwrap().is_none());
    let before = snapshot(store, &sid("b1"));
    let err = store
        .create_sessions(&[(new_session("b1"), vec![user("x")])])
        .unwrap_err();
    assert!(matches!(err, StoreError::SessionExists(_)), "{err:?}");
    assert_eq!(snapshot(store, &sid("b1")), before);
}
