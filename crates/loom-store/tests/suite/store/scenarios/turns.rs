//! Scenarios on a server's two calls per turn: catching up with what changed, and writing a turn
//! at once, refused whole when the log moved on or the turn is bad.

use loom_core::{BlobRef, Ledger, NewEvent, Seq, SessionId};
use loom_store::{
    BlobAlias, CallStatus, Known, NewModelCall, NewSummary, StepRecord, Store, StoreError, Turn,
    Usage,
};
use serde_json::json;

use crate::suite::support::{call, result, sid, user, with_session, StoreHarness};

fn receipt(session: &SessionId, at_seq: Seq) -> NewModelCall {
    NewModelCall {
        session: session.clone(),
        at_seq,
        created_ms: 1_700_000_000_200,
        receipt: json!({"receipt": {"at": at_seq}}),
    }
}

/// The ledger a caller holds after `events` were appended from seq 1.
fn ledger_of(events: &[NewEvent]) -> Ledger {
    let mut ledger = Ledger::new();
    for (i, e) in events.iter().enumerate() {
        ledger.apply(i as Seq + 1, &e.body).unwrap();
    }
    ledger
}

fn turn<'a>(
    session: &'a SessionId,
    after: Seq,
    calls: &'a Ledger,
    events: &'a [NewEvent],
) -> Turn<'a> {
    Turn {
        session,
        after,
        calls,
        events,
        steps: &[],
        aliases: &[],
        receipt: None,
        usage: None,
    }
}

/// Everything of a session a turn could change.
fn snapshot(store: &impl Store, id: &SessionId) -> String {
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}",
        store.read(id, 1..=u64::MAX).unwrap(),
        store.tool_calls(id).unwrap(),
        store.model_calls(id).unwrap(),
        store.steps(id).unwrap(),
    )
}

pub(crate) fn a_turn_writes_its_events_steps_aliases_and_receipt<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "s");
    let opening = [user("run it"), call("c1", "bash")];
    store.append(&id, &opening).unwrap();
    let calls = ledger_of(&opening);
    let events = [result("c1", "bash", false), user("next")];
    let step = StepRecord {
        id: "step_001".into(),
        call_id: "c1".into(),
        result_seq: 3,
        body: json!({"id": "step_001", "observation": "ran"}),
    };
    let blob = BlobRef::from_hex(&"ab".repeat(32)).unwrap();
    let alias = BlobAlias::new("outputs/bash_001.txt").unwrap();
    let aliases = [(alias.clone(), blob.clone())];
    let call = receipt(&id, 4);
    let written = store
        .write_turn(&Turn {
            steps: std::slice::from_ref(&step),
            aliases: &aliases,
            receipt: Some(&call),
            ..turn(&id, 2, &calls, &events)
        })
        .unwrap();
    assert_eq!(written.seqs, 3..=4);
    assert_eq!(written.call, Some(1));
    let log = store.read(&id, 1..=10).unwrap();
    assert_eq!(log.len(), 4);
    assert_eq!(log[2].body, events[0].body);
    let calls_now = store.tool_calls(&id).unwrap();
    assert_eq!(calls_now[0].status, CallStatus::Resolved);
    assert_eq!(calls_now[0].result_seq, Some(3));
    assert_eq!(store.steps(&id).unwrap()[0].id, "step_001");
    assert_eq!(store.resolve_alias(&id, &alias).unwrap(), Some(blob));
    let recorded = store.model_calls(&id).unwrap();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].call, call);
    // A reply with the usage of the call it answers, and a turn with nothing but a receipt.
    let usage = Usage {
        input_tokens: 900,
        cached_input_tokens: Some(512),
        output_tokens: Some(40),
        reported_ms: 1_700_000_000_300,
    };
    let reply = [user("the reply")];
    let calls = ledger_of(&[opening.as_slice(), &events].concat());
    let written = store
        .write_turn(&Turn {
            usage: Some((1, &usage)),
            ..turn(&id, 4, &calls, &reply)
        })
        .unwrap();
    assert_eq!((written.seqs, written.call), (5..=5, None));
    assert_eq!(store.model_calls(&id).unwrap()[0].usage, Some(usage));
    let again = receipt(&id, 5);
    let written = store
        .write_turn(&Turn {
            receipt: Some(&again),
            ..turn(&id, 5, &calls, &[])
        })
        .unwrap();
    assert!(written.seqs.is_empty(), "{:?}", written.seqs);
    assert_eq!((*written.seqs.start(), written.call), (6, Some(2)));
}

pub(crate) fn a_turn_against_a_moved_log_writes_nothing<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "s");
    let opening = [user("run it"), call("c1", "bash")];
    store.append(&id, &opening).unwrap();
    let calls = ledger_of(&opening);
    // Another writer appended since the caller read the log.
    store.append(&id, &[user("theirs")]).unwrap();
    let before = snapshot(store, &id);
    let events = [result("c1", "bash", false)];
    let call = receipt(&id, 3);
    let stale = store.write_turn(&Turn {
        receipt: Some(&call),
        ..turn(&id, 2, &calls, &events)
    });
    assert!(matches!(stale, Err(StoreError::Moved { .. })), "{stale:?}");
    assert_eq!(
        snapshot(store, &id),
        before,
        "a refused turn wrote something"
    );
    // Another writer expired the call the turn answers: the caller's ledger is stale.
    store.expire_tool_call(&id, "c1").unwrap();
    let before = snapshot(store, &id);
    assert!(store.write_turn(&turn(&id, 3, &calls, &events)).is_err());
    assert_eq!(
        snapshot(store, &id),
        before,
        "a refused turn wrote something"
    );
    // An unknown session.
    assert!(matches!(
        store.write_turn(&turn(&sid("nobody"), 0, &calls, &events)),
        Err(StoreError::SessionNotFound(_))
    ));
}

pub(crate) fn a_bad_turn_changes_nothing<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "s");
    let opening = [user("run it"), call("c1", "bash")];
    store.append(&id, &opening).unwrap();
    store.record_model_call(&receipt(&id, 2)).unwrap();
    let calls = ledger_of(&opening);
    let before = snapshot(store, &id);
    // A result for a call the log never made.
    let orphan = [user("fine"), result("c9", "bash", false)];
    match store.write_turn(&turn(&id, 2, &calls, &orphan)) {
        Err(StoreError::InvalidEvent {
            index: 1, seq: 4, ..
        }) => {}
        other => panic!("expected the orphan result refused, got {other:?}"),
    }
    // A receipt past the end of the turn's events.
    let events = [result("c1", "bash", false)];
    let late = receipt(&id, 9);
    assert!(matches!(
        store.write_turn(&Turn {
            receipt: Some(&late),
            ..turn(&id, 2, &calls, &events)
        }),
        Err(StoreError::InvalidRecord { .. })
    ));
    // A step that contradicts the log.
    let wrong = StepRecord {
        id: "step_001".into(),
        call_id: "c1".into(),
        result_seq: 7,
        body: json!({}),
    };
    assert!(store
        .write_turn(&Turn {
            steps: std::slice::from_ref(&wrong),
            ..turn(&id, 2, &calls, &events)
        })
        .is_err());
    // Usage whose cached tokens exceed the input.
    let inverted = Usage {
        input_tokens: 10,
        cached_input_tokens: Some(20),
        output_tokens: None,
        reported_ms: 1,
    };
    assert!(store
        .write_turn(&Turn {
            usage: Some((1, &inverted)),
            ..turn(&id, 2, &calls, &events)
        })
        .is_err());
    assert_eq!(
        snapshot(store, &id),
        before,
        "a refused turn wrote something"
    );
    // An alias already pointing at another blob.
    let alias = BlobAlias::new("outputs/a.txt").unwrap();
    let first = BlobRef::from_hex(&"01".repeat(32)).unwrap();
    let other = BlobRef::from_hex(&"02".repeat(32)).unwrap();
    store.put_alias(&id, &alias, &first).unwrap();
    let before = snapshot(store, &id);
    let aliases = [(alias.clone(), other)];
    assert!(store
        .write_turn(&Turn {
            aliases: &aliases,
            ..turn(&id, 2, &calls, &[])
        })
        .is_err());
    assert_eq!(store.resolve_alias(&id, &alias).unwrap(), Some(first));
    assert_eq!(
        snapshot(store, &id),
        before,
        "a refused turn wrote something"
    );
}

pub(crate) fn catching_up_returns_only_what_changed<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "s");
    store.append(&id, &[user("a"), user("b")]).unwrap();
    let first = store.catch_up(&id, Known::default()).unwrap();
    assert_eq!(first.last_seq, 2);
    assert_eq!(first.events, store.read(&id, 1..=2).unwrap());
    assert_eq!(first.summaries, None, "no summary exists, none is newer");
    assert_eq!(first.last_call, None);
    let known = Known {
        seq: 2,
        summary_version: 0,
        call: 0,
    };
    let nothing = store.catch_up(&id, known).unwrap();
    assert_eq!((nothing.last_seq, nothing.events.len()), (2, 0));
    assert_eq!((nothing.summaries, nothing.last_call), (None, None));
    // Another writer adds an event, a summary and two receipts.
    store.append(&id, &[user("c")]).unwrap();
    store
        .put_summary(&NewSummary {
            session: id.clone(),
            from_seq: 1,
            to_seq: 2,
            content: "a then b".into(),
            producer: "deterministic".into(),
            created_ms: 5,
        })
        .unwrap();
    store.record_model_call(&receipt(&id, 2)).unwrap();
    store.record_model_call(&receipt(&id, 3)).unwrap();
    let moved = store.catch_up(&id, known).unwrap();
    assert_eq!(moved.last_seq, 3);
    assert_eq!(moved.events, store.read(&id, 3..=3).unwrap());
    assert_eq!(moved.summaries, Some(store.summaries(&id).unwrap()));
    assert_eq!(moved.last_call, store.last_model_call(&id).unwrap());
    let now = Known {
        seq: 3,
        summary_version: 1,
        call: 2,
    };
    let nothing = store.catch_up(&id, now).unwrap();
    assert_eq!(
        (nothing.events.len(), nothing.summaries, nothing.last_call),
        (0, None, None)
    );
    assert!(matches!(
        store.catch_up(&sid("nobody"), Known::default()),
        Err(StoreError::SessionNotFound(_))
    ));
}
