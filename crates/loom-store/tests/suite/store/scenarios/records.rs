//! Scenarios on the records derived from the log: summaries, receipts and their reported usage,
//! steps, aliases, listings, and persistence of all of it.

use loom_core::{AgentId, BlobRef, Seq, SessionId};
use loom_store::{
    BlobAlias, CallStatus, NewModelCall, NewSession, NewSummary, StepRecord, Store, StoreError,
    Usage,
};
use serde_json::json;

use crate::suite::support::{call, new_session, result, sid, user, with_session, StoreHarness};

fn summary(session: &SessionId, from_seq: Seq, to_seq: Seq, content: &str) -> NewSummary {
    NewSummary {
        session: session.clone(),
        from_seq,
        to_seq,
        content: content.into(),
        producer: "deterministic".into(),
        created_ms: 1_700_000_000_100,
    }
}

fn receipt(session: &SessionId, at_seq: Seq, n: u64) -> NewModelCall {
    NewModelCall {
        session: session.clone(),
        at_seq,
        created_ms: 1_700_000_000_200,
        receipt: json!({"n": n, "estimated": 1234.5, "verbatim": [1, 2, 3], "policy": {"k": "v"}}),
    }
}

fn usage(input: u64, cached: Option<u64>, output: Option<u64>, reported_ms: i64) -> Usage {
    Usage {
        input_tokens: input,
        cached_input_tokens: cached,
        output_tokens: output,
        reported_ms,
    }
}

/// A session `s` with two recorded receipts, ids 1 and 2.
fn with_two_calls(store: &impl Store) -> SessionId {
    let id = with_session(store, "s");
    store.append(&id, &[user("a")]).unwrap();
    store.record_model_call(&receipt(&id, 0, 1)).unwrap();
    store.record_model_call(&receipt(&id, 1, 2)).unwrap();
    id
}

fn step(id: &str, call_id: &str, result_seq: Seq) -> StepRecord {
    StepRecord {
        id: id.into(),
        call_id: call_id.into(),
        result_seq,
        body: json!({"id": id, "observation": format!("ran {call_id}"), "success": true}),
    }
}

fn blob(byte: u8) -> BlobRef {
    BlobRef::from_hex(&hex_of(byte)).unwrap()
}

fn hex_of(byte: u8) -> String {
    format!("{byte:02x}").repeat(32)
}

fn invalid_record(err: &StoreError, record: &str) -> bool {
    err.is_bad_input() && matches!(err, StoreError::InvalidRecord { record: r, .. } if r == record)
}

pub(crate) fn summaries_are_checked_and_versioned<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "s");
    store
        .append(&id, &[user("a"), user("b"), user("c")])
        .unwrap();
    for (from, to, why) in [
        (0, 2, "from_seq 0"),
        (3, 2, "from after to"),
        (1, 4, "past the log"),
    ] {
        let err = store.put_summary(&summary(&id, from, to, "x")).unwrap_err();
        assert!(invalid_record(&err, "summary"), "{why}: {err}");
    }
    assert!(
        store.summaries(&id).unwrap().is_empty(),
        "refused summaries are not stored"
    );
    let first = store.put_summary(&summary(&id, 1, 1, "one")).unwrap();
    let second = store.put_summary(&summary(&id, 1, 3, "all")).unwrap();
    assert_eq!((first.version, second.version), (1, 2));
    assert_eq!(second.summary, summary(&id, 1, 3, "all"));
    assert_eq!(store.summaries(&id).unwrap(), vec![first, second]);

    let other = with_session(store, "t");
    store.append(&other, &[user("a")]).unwrap();
    assert_eq!(
        store
            .put_summary(&summary(&other, 1, 1, "t"))
            .unwrap()
            .version,
        1,
        "versions are per session"
    );
    let err = store
        .put_summary(&summary(&sid("ghost"), 1, 1, "x"))
        .unwrap_err();
    assert!(matches!(err, StoreError::SessionNotFound(_)));
}

pub(crate) fn model_calls_are_numbered<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "s");
    assert_eq!(store.last_model_call(&id).unwrap(), None);
    let first = store.record_model_call(&receipt(&id, 0, 1)).unwrap();
    assert_eq!(store.last_model_call(&id).unwrap().as_ref(), Some(&first));
    store.append(&id, &[user("a")]).unwrap();
    let err = store.record_model_call(&receipt(&id, 2, 9)).unwrap_err();
    assert!(invalid_record(&err, "model call"), "{err}");
    let second = store.record_model_call(&receipt(&id, 1, 2)).unwrap();
    assert_eq!((first.id, second.id), (1, 2));
    assert_eq!(second.call, receipt(&id, 1, 2));
    assert_eq!(store.last_model_call(&id).unwrap().as_ref(), Some(&second));
    assert_eq!(
        store.model_calls(&id).unwrap(),
        vec![first.clone(), second.clone()]
    );
    assert_eq!(
        store.model_calls_after(&id, 0).unwrap(),
        vec![first, second.clone()]
    );
    assert_eq!(store.model_calls_after(&id, 1).unwrap(), vec![second]);
    assert_eq!(store.model_calls_after(&id, 2).unwrap(), vec![]);
    assert_eq!(store.model_calls_after(&id, u64::MAX).unwrap(), vec![]);
    let other = with_session(store, "t");
    assert_eq!(
        store.record_model_call(&receipt(&other, 0, 3)).unwrap().id,
        1
    );
}

pub(crate) fn usage_is_reported_and_read_back<H: StoreHarness>(h: &mut H) {
    let id = with_two_calls(h.store());
    let full = usage(1_300, Some(1_024), Some(57), 1_700_000_000_300);
    let reported = h.store().report_usage(&id, 2, &full).unwrap();
    assert_eq!(reported.id, 2);
    assert_eq!(
        reported.call,
        receipt(&id, 1, 2),
        "the receipt is untouched"
    );
    assert_eq!(reported.usage, Some(full));
    let bare = usage(900, None, None, 1_700_000_000_400);
    h.store().report_usage(&id, 1, &bare).unwrap();
    let usages = |store: &H::Store| -> Vec<Option<Usage>> {
        store
            .model_calls(&id)
            .unwrap()
            .into_iter()
            .map(|c| c.usage)
            .collect()
    };
    assert_eq!(usages(h.store()), [Some(bare), Some(full)]);
    // A cached count equal to the input (everything from the cache) is allowed.
    let other = with_session(h.store(), "t");
    h.store().record_model_call(&receipt(&other, 0, 3)).unwrap();
    let all_cached = usage(500, Some(500), Some(0), 1);
    h.store().report_usage(&other, 1, &all_cached).unwrap();
    h.reopen();
    assert_eq!(usages(h.store()), [Some(bare), Some(full)]);
    assert_eq!(
        h.store().model_calls(&other).unwrap()[0].usage,
        Some(all_cached),
        "usage is per session"
    );
    // A call recorded after a reported one starts without usage.
    let third = h.store().record_model_call(&receipt(&id, 1, 3)).unwrap();
    assert_eq!((third.id, third.usage), (3, None));
}

pub(crate) fn usage_retry_is_idempotent<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_two_calls(store);
    let first = usage(1_300, Some(1_024), Some(57), 1_700_000_000_300);
    let stored = store.report_usage(&id, 1, &first).unwrap();
    let before = store.model_calls(&id).unwrap();
    // The same figures reported again, later: a retry after a lost reply, not a conflict.
    let retry = Usage {
        reported_ms: first.reported_ms + 5_000,
        ..first
    };
    assert_eq!(store.report_usage(&id, 1, &first).unwrap(), stored);
    assert_eq!(
        store.report_usage(&id, 1, &retry).unwrap(),
        stored,
        "a retry returns the call as first reported"
    );
    assert_eq!(
        store.model_calls(&id).unwrap(),
        before,
        "a retry changes nothing"
    );
}

pub(crate) fn conflicting_usage_is_refused<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_two_calls(store);
    let first = usage(1_300, Some(1_024), Some(57), 1_700_000_000_300);
    store.report_usage(&id, 2, &first).unwrap();
    let before = store.model_calls(&id).unwrap();
    let conflicts = [
        (usage(1_301, Some(1_024), Some(57), 1), "other input"),
        (usage(1_300, Some(1_000), Some(57), 1), "other cached"),
        (usage(1_300, None, Some(57), 1), "cached left out"),
        (usage(1_300, Some(1_024), None, 1), "output left out"),
        (usage(1_300, Some(1_024), Some(58), 1), "other output"),
    ];
    for (second, why) in conflicts {
        let err = store.report_usage(&id, 2, &second).unwrap_err();
        assert!(
            err.is_bad_input()
                && matches!(&err, StoreError::Conflict { record, .. } if record == "model call 2"),
            "{why}: {err}"
        );
        let text = err.to_string();
        assert!(
            text.contains("session `s`") && text.contains("already has a usage"),
            "{why}: {text}"
        );
        assert_eq!(store.model_calls(&id).unwrap(), before, "{why}: changed");
    }
}

pub(crate) fn usage_for_an_unknown_call_is_refused<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_two_calls(store);
    let empty = with_session(store, "empty");
    let any = usage(10, None, None, 1);
    let cases = [
        (&id, 0, "the session's model calls are 1 to 2"),
        (&id, 3, "the session's model calls are 1 to 2"),
        (&id, u64::MAX, "the session's model calls are 1 to 2"),
        (&empty, 1, "the session has no model calls"),
        (&sid("ghost"), 1, "the session does not exist"),
    ];
    for (session, call, reason) in cases {
        let err = store.report_usage(session, call, &any).unwrap_err();
        assert!(err.is_bad_input(), "{err}");
        match &err {
            StoreError::ModelCallNotFound {
                session: s,
                call: c,
                reason: r,
            } => assert_eq!((s, *c, r.as_str()), (session, call, reason)),
            other => panic!("call {call} of {session}: expected ModelCallNotFound, got {other:?}"),
        }
        assert_eq!(
            err.to_string(),
            format!("session `{session}`, model call {call}: not found: {reason}")
        );
    }
    assert!(
        store
            .model_calls(&id)
            .unwrap()
            .iter()
            .all(|c| c.usage.is_none()),
        "nothing was reported"
    );
    assert!(store.session(&sid("ghost")).unwrap().is_none());
}

pub(crate) fn cached_over_input_is_refused<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_two_calls(store);
    let err = store
        .report_usage(&id, 1, &usage(800, Some(801), Some(5), 1))
        .unwrap_err();
    assert!(invalid_record(&err, "usage of model call 1"), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("cached_input_tokens 801 exceeds input_tokens 800"),
        "{text}"
    );
    assert_eq!(store.model_calls(&id).unwrap()[0].usage, None);
    // Refused on a call that already has a usage too, before any conflict is considered.
    store
        .report_usage(&id, 2, &usage(800, Some(800), None, 1))
        .unwrap();
    let err = store
        .report_usage(&id, 2, &usage(800, Some(900), None, 1))
        .unwrap_err();
    assert!(invalid_record(&err, "usage of model call 2"), "{err}");
}

pub(crate) fn steps_are_keyed_and_checked<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "s");
    // c1 resolved at 2, c2 resolved (error) at 4, c3 pending, c4 expired.
    store
        .append(
            &id,
            &[
                call("c1", "bash"),
                result("c1", "bash", false),
                call("c2", "bash"),
                result("c2", "bash", true),
                call("c3", "bash"),
                call("c4", "bash"),
            ],
        )
        .unwrap();
    store.expire_tool_call(&id, "c4").unwrap();
    let refused = [
        (step("step_009", "ghost", 2), "not in the log"),
        (step("step_009", "c3", 5), "pending"),
        (step("step_009", "c4", 6), "expired"),
        (step("step_009", "c1", 3), "wrong result seq"),
        (step("", "c1", 2), "empty id"),
    ];
    for (bad, why) in refused {
        let record = format!("step {}", bad.id);
        // A good step in the same batch is not stored either.
        let err = store
            .put_steps(&id, &[step("step_001", "c1", 2), bad])
            .unwrap_err();
        assert!(invalid_record(&err, &record), "{why}: {err}");
        assert!(
            store.steps(&id).unwrap().is_empty(),
            "{why}: a refused batch stored something"
        );
    }
    store
        .put_steps(&id, &[step("step_002", "c2", 4), step("step_001", "c1", 2)])
        .unwrap();
    let mut replaced = step("step_001", "c1", 2);
    replaced.body = json!({"id": "step_001", "observation": "rewritten"});
    store.put_steps(&id, &[replaced.clone()]).unwrap();
    assert_eq!(
        store.steps(&id).unwrap(),
        vec![replaced, step("step_002", "c2", 4)],
        "keyed by id, ordered by the seq of the result"
    );
    store.put_steps(&id, &[]).unwrap();
    assert_eq!(store.steps(&id).unwrap().len(), 2);
    // What came after a seq: the range a reader that has seen the log up to it still needs.
    let ids = |after: Seq| -> Vec<String> {
        store
            .steps_after(&id, after)
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect()
    };
    assert_eq!(ids(0), ["step_001", "step_002"]);
    assert_eq!(ids(2), ["step_002"]);
    assert_eq!(ids(3), ["step_002"]);
    assert!(ids(4).is_empty());
    assert!(ids(Seq::MAX).is_empty());
    let ghost = sid("nobody");
    assert!(matches!(
        store.steps_after(&ghost, 0),
        Err(StoreError::SessionNotFound(_))
    ));
}

pub(crate) fn aliases_point_at_one_blob<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "s");
    let other = with_session(store, "t");
    let alias = BlobAlias::new("outputs/search_001.json").unwrap();
    assert_eq!(store.resolve_alias(&id, &alias).unwrap(), None);
    store.put_alias(&id, &alias, &blob(1)).unwrap();
    store.put_alias(&id, &alias, &blob(1)).unwrap();
    let err = store.put_alias(&id, &alias, &blob(2)).unwrap_err();
    assert!(
        invalid_record(&err, "alias outputs/search_001.json"),
        "{err}"
    );
    assert_eq!(store.resolve_alias(&id, &alias).unwrap(), Some(blob(1)));
    assert_eq!(
        store.resolve_alias(&other, &alias).unwrap(),
        None,
        "aliases are per session"
    );
    store.put_alias(&other, &alias, &blob(2)).unwrap();
    assert_eq!(store.resolve_alias(&other, &alias).unwrap(), Some(blob(2)));
    for unsafe_alias in ["../etc/passwd", "/abs", "outputs/../../x", "a//b", "sp ace"] {
        let err = BlobAlias::new(unsafe_alias).unwrap_err();
        assert!(
            matches!(err, StoreError::UnsafeReference { .. }),
            "{unsafe_alias}: {err}"
        );
    }
    let err = store
        .put_alias(&sid("ghost"), &alias, &blob(1))
        .unwrap_err();
    assert!(matches!(err, StoreError::SessionNotFound(_)));
}

pub(crate) fn sessions_are_listed_with_counts<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    assert!(store.sessions().unwrap().is_empty());
    let child = NewSession {
        id: sid("b/child"),
        agent: AgentId::new("worker").unwrap(),
        parent: Some(sid("b")),
        created_ms: -3,
    };
    store
        .create_session(&new_session("b"), &[user("1"), user("2")])
        .unwrap();
    store.create_session(&child, &[user("1")]).unwrap();
    store.create_session(&new_session("a"), &[]).unwrap();
    store
        .create_session(&new_session("B"), &[user("1")])
        .unwrap();
    store.append(&sid("b"), &[user("3")]).unwrap();
    let listed: Vec<(String, u64)> = store
        .sessions()
        .unwrap()
        .into_iter()
        .map(|s| (s.id.as_str().to_owned(), s.event_count))
        .collect();
    let expected = [("B", 1), ("a", 0), ("b", 3), ("b/child", 1)];
    assert_eq!(
        listed,
        expected.map(|(id, n)| (id.to_owned(), n)).to_vec(),
        "ordered by id, bytewise"
    );
    let info = store.session(&sid("b/child")).unwrap().unwrap();
    assert_eq!(info.agent.as_str(), "worker");
    assert_eq!(info.parent, Some(sid("b")));
    assert_eq!(info.created_ms, -3);
}

pub(crate) fn everything_survives_reopen<H: StoreHarness>(h: &mut H) {
    let alias = BlobAlias::new("outputs/a.txt").unwrap();
    let dump = |store: &H::Store| -> String {
        let mut out = format!("{:?}\n", store.sessions().unwrap());
        for info in store.sessions().unwrap() {
            let id = &info.id;
            out += &format!(
                "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n",
                store.read(id, 1..=Seq::MAX).unwrap(),
                store.latest_seq(id).unwrap(),
                store.tool_calls(id).unwrap(),
                store.summaries(id).unwrap(),
                store.model_calls(id).unwrap(),
                store.steps(id).unwrap(),
                store.resolve_alias(id, &alias).unwrap(),
            );
        }
        out
    };
    {
        let store = h.store();
        let id = with_session(store, "s");
        store
            .append(
                &id,
                &[
                    user("hi"),
                    call("c1", "bash"),
                    result("c1", "bash", false),
                    call("c2", "x"),
                ],
            )
            .unwrap();
        store.expire_tool_call(&id, "c2").unwrap();
        store.put_summary(&summary(&id, 1, 3, "sum")).unwrap();
        store.record_model_call(&receipt(&id, 4, 1)).unwrap();
        store
            .report_usage(&id, 1, &usage(1_000, Some(600), Some(40), 9))
            .unwrap();
        store.put_steps(&id, &[step("step_001", "c1", 3)]).unwrap();
        store.put_alias(&id, &alias, &blob(7)).unwrap();
        with_session(store, "empty");
    }
    let before = dump(h.store());
    h.reopen();
    assert_eq!(dump(h.store()), before);
    // The reopened store carries on where the old one stopped.
    let store = h.store();
    let id = sid("s");
    let expired = store.append(&id, &[result("c2", "x", false)]).unwrap_err();
    assert!(
        expired.is_bad_input(),
        "the expired call stays expired: {expired}"
    );
    assert_eq!(store.append(&id, &[call("c3", "bash")]).unwrap(), 5..=5);
    assert_eq!(
        store
            .put_summary(&summary(&id, 1, 5, "more"))
            .unwrap()
            .version,
        2
    );
    assert_eq!(store.record_model_call(&receipt(&id, 5, 2)).unwrap().id, 2);
    assert_eq!(
        store
            .tool_calls(&id)
            .unwrap()
            .iter()
            .map(|c| c.status)
            .collect::<Vec<_>>(),
        [
            CallStatus::Resolved,
            CallStatus::Expired,
            CallStatus::Pending
        ]
    );
}

pub(crate) fn a_reply_and_its_usage_are_written_together<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "s");
    let call = store.record_model_call(&receipt(&id, 0, 1)).unwrap();
    let full = usage(1_300, Some(1_024), Some(57), 1_700_000_000_300);
    let seqs = store
        .append_reply(&id, &[user("the reply")], Some((call.id, &full)))
        .unwrap();
    assert_eq!(seqs, 1..=1);
    assert_eq!(store.model_calls(&id).unwrap()[0].usage, Some(full));
    // A report the store refuses appends nothing: other figures, an unknown call, cached > input.
    let other = usage(1, None, None, 1_700_000_000_400);
    for bad in [
        store.append_reply(&id, &[user("x")], Some((call.id, &other))),
        store.append_reply(&id, &[user("x")], Some((9, &full))),
    ] {
        assert!(bad.is_err());
    }
    let second = store.record_model_call(&receipt(&id, 1, 2)).unwrap();
    let inverted = usage(10, Some(20), None, 1_700_000_000_500);
    assert!(store
        .append_reply(&id, &[user("x")], Some((second.id, &inverted)))
        .is_err());
    assert_eq!(
        store.latest_seq(&id).unwrap(),
        1,
        "nothing of a refused reply was written"
    );
    // Without usage it is an append.
    assert_eq!(store.append_reply(&id, &[user("y")], None).unwrap(), 2..=2);
}

pub(crate) fn a_deleted_session_leaves_nothing_and_others_untouched<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let id = with_session(store, "gone");
    let kept = with_session(store, "kept");
    for s in [&id, &kept] {
        store
            .append(s, &[call("c1", "bash"), result("c1", "bash", false)])
            .unwrap();
        store.put_summary(&summary(s, 1, 2, "earlier")).unwrap();
        store.record_model_call(&receipt(s, 2, 1)).unwrap();
        let alias = BlobAlias::new("outputs/bash_001.txt").unwrap();
        store.put_alias(s, &alias, &blob(1)).unwrap();
    }
    let before = (
        store.session(&kept).unwrap(),
        store.read(&kept, 1..=Seq::MAX).unwrap(),
        store.tool_calls(&kept).unwrap(),
        store.summaries(&kept).unwrap(),
        store.model_calls(&kept).unwrap(),
    );
    assert!(store.delete_session(&id).unwrap());
    assert_eq!(store.session(&id).unwrap(), None);
    assert!(!store.delete_session(&id).unwrap(), "deleted once");
    assert!(matches!(
        store.read(&id, 1..=Seq::MAX),
        Err(StoreError::SessionNotFound(_))
    ));
    let ids: Vec<SessionId> = store
        .sessions()
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, std::slice::from_ref(&kept));
    assert_eq!(
        before,
        (
            store.session(&kept).unwrap(),
            store.read(&kept, 1..=Seq::MAX).unwrap(),
            store.tool_calls(&kept).unwrap(),
            store.summaries(&kept).unwrap(),
            store.model_calls(&kept).unwrap(),
        ),
        "another session is untouched"
    );
    // The id can be used again, from nothing.
    store
        .create_session(&new_session("gone"), &[user("again")])
        .unwrap();
    assert_eq!(store.latest_seq(&id).unwrap(), 1);
    assert!(store.model_calls(&id).unwrap().is_empty());
    assert!(store.summaries(&id).unwrap().is_empty());
    let alias = BlobAlias::new("outputs/bash_001.txt").unwrap();
    assert_eq!(store.resolve_alias(&id, &alias).unwrap(), None);
    assert!(!store.delete_session(&sid("ghost")).unwrap());
}
