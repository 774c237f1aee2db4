//! The tiers: L2 notes with provenance and TTL, tier filters, L1 from the recent log, the
//! default view of a session, and agent isolation.

use loom_core::{AgentId, EventBody, MessageContent, NewEvent};
use loom_memory::{recall, Memory, MemoryError, NewNote, Recall, Search, Tier, L1_WINDOW};
use loom_store::{MemoryStore, NewSession, Store};

use super::support::{agent, conformance, session, turn};

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn note(a: &str, sess: &str, seq: u64, text: &str, ttl_ms: Option<i64>) -> NewNote {
    NewNote {
        agent: agent(a),
        text: text.into(),
        session: session(sess),
        seq,
        saved_ms: now(),
        ttl_ms,
    }
}

fn ask(a: &str, sess: Option<&str>, tier: Option<Tier>, query: &str) -> Recall {
    Recall {
        query: query.into(),
        agent: agent(a),
        session: sess.map(session),
        tier,
        budget: 1_000,
        limit: 20,
        history: false,
        from_ms: None,
        to_ms: None,
    }
}

fn a_note_is_l2_with_its_provenance_and_saving_it_again_adds_a_source(m: &dyn Memory) {
    let first = m
        .save(&note(
            "ops",
            "s1",
            4,
            "The staging password rotates on Fridays",
            None,
        ))
        .unwrap();
    assert!(first.created);
    let again = m
        .save(&note(
            "ops",
            "s1",
            9,
            "the staging  password rotates on fridays",
            None,
        ))
        .unwrap();
    assert_eq!(again.id, first.id);
    assert!(!again.created);
    let item = m.item(first.id).unwrap();
    assert_eq!(item.tier, Tier::L2);
    let seqs: Vec<u64> = item.sources.iter().map(|s| s.from_seq).collect();
    assert_eq!(seqs, [4, 9]);
    assert!(item.sources.iter().all(|s| s.session.as_str() == "s1"));
    // Bad notes are refused with the field.
    for (bad, field) in [
        (note("ops", "s1", 1, "  ", None), "text"),
        (note("ops", "s1", 0, "x", None), "seq"),
        (note("ops", "s1", 1, "x", Some(0)), "ttl"),
        (note("ops", "s1", 1, &"x".repeat(20_000), None), "text"),
    ] {
        match m.save(&bad) {
            Err(MemoryError::InvalidInput { field: f, .. }) => assert_eq!(f, field),
            other => panic!("expected invalid {field}: {other:?}"),
        }
    }
}

fn an_expired_note_is_never_returned_and_is_purged_at_the_next_save(m: &dyn Memory) {
    let mut old = note(
        "ops",
        "s1",
        2,
        "the canary deploy uses port 9443",
        Some(1_000),
    );
    old.saved_ms = now() - 60_000; // expired a minute ago
    let old = m.save(&old).unwrap();
    let live = m
        .save(&note(
            "ops",
            "s1",
            3,
            "the canary deploy owner is Ana",
            Some(3_600_000),
        ))
        .unwrap();
    assert!(live.expires_ms.unwrap() > now());
    // The save purged the expired note: it is gone, not only hidden (its id may be reused).
    assert!(m
        .item(old.id)
        .map_or(true, |i| i.text != "the canary deploy uses port 9443"));
    let hits = recall(
        m,
        None,
        &ask("ops", Some("s1"), Some(Tier::L2), "canary deploy"),
    )
    .unwrap();
    let texts: Vec<&str> = hits.iter().map(|h| h.text.as_str()).collect();
    assert_eq!(texts, ["the canary deploy owner is Ana"]);
}

fn expiry_is_judged_at_read_time_too_before_any_purge(m: &dyn Memory) {
    let mut stale = note("ops", "s1", 2, "the canary deploy uses port 9443", Some(1));
    stale.saved_ms = now() - 10_000;
    // A save purges before it writes, so the stale note is stored; search already skips it.
    let saved = m.save(&stale).unwrap();
    assert_eq!(m.item(saved.id).unwrap().tier, Tier::L2);
    assert!(m.search(&Search::new("canary", 100)).unwrap().is_empty());
    assert_eq!(m.purge_expired(now()).unwrap(), [saved.id]);
    assert!(matches!(
        m.item(saved.id),
        Err(MemoryError::ItemNotFound(_))
    ));
}

fn each_tier_is_searched_on_its_own_and_l2_needs_a_session(m: &dyn Memory) {
    m.write(&[turn("ops", "s1", 1, "the release train leaves on Tuesday")])
        .unwrap();
    m.save(&note(
        "ops",
        "s1",
        1,
        "release notes are drafted by Kim",
        None,
    ))
    .unwrap();
    m.save(&note(
        "ops",
        "s2",
        1,
        "release freeze starts in December",
        None,
    ))
    .unwrap();
    let tiers = |tier, sess| -> Vec<(Tier, String)> {
        recall(m, None, &ask("ops", sess, tier, "release"))
            .unwrap()
            .into_iter()
            .map(|h| (h.tier, h.text))
            .collect()
    };
    assert_eq!(
        tiers(Some(Tier::L4), None),
        [(Tier::L4, "the release train leaves on Tuesday".to_owned())]
    );
    assert_eq!(
        tiers(Some(Tier::L2), Some("s1")),
        [(Tier::L2, "release notes are drafted by Kim".to_owned())]
    );
    // The default view of s1: its notes and L4 across sessions, never s2's notes.
    let view = tiers(None, Some("s1"));
    assert_eq!(view.len(), 2, "{view:?}");
    assert!(view.iter().all(|(_, t)| !t.contains("freeze")));
    assert!(matches!(
        recall(m, None, &ask("ops", None, Some(Tier::L2), "release")),
        Err(MemoryError::InvalidInput {
            field: "session",
            ..
        })
    ));
}

fn memory_of_one_agent_is_never_returned_for_another(m: &dyn Memory) {
    m.write(&[turn("alice", "a1", 1, "my locker code is 4471")])
        .unwrap();
    m.save(&note("alice", "a1", 1, "locker is on floor three", None))
        .unwrap();
    for tier in [None, Some(Tier::L2), Some(Tier::L4)] {
        let hits = recall(m, None, &ask("bob", Some("a1"), tier, "locker code floor")).unwrap();
        assert!(hits.is_empty(), "{tier:?}: {hits:?}");
        let own = recall(
            m,
            None,
            &ask("alice", Some("a1"), tier, "locker code floor"),
        )
        .unwrap();
        assert!(!own.is_empty(), "{tier:?}");
    }
}

fn a_time_range_keeps_the_items_valid_within_it(m: &dyn Memory) {
    // `turn` dates an item at its seq in seconds.
    m.write(&[
        turn("ops", "s1", 1, "the standup moved to the blue room"),
        turn("ops", "s1", 5, "the standup moved to the green room"),
        turn("ops", "s1", 9, "the standup moved to the red room"),
    ])
    .unwrap();
    let within = |from_ms, to_ms| -> Vec<String> {
        let mut r = ask("ops", None, Some(Tier::L4), "standup room");
        (r.from_ms, r.to_ms) = (from_ms, to_ms);
        let mut texts: Vec<String> = recall(m, None, &r)
            .unwrap()
            .into_iter()
            .map(|h| h.text)
            .collect();
        texts.sort();
        texts
    };
    assert_eq!(within(None, None).len(), 3);
    assert_eq!(
        within(Some(5_000), None),
        [
            "the standup moved to the green room",
            "the standup moved to the red room"
        ]
    );
    assert_eq!(
        within(Some(2_000), Some(5_000)),
        ["the standup moved to the green room"]
    );
    assert!(within(Some(10_000), None).is_empty());
}

fn user(ts: i64, text: &str) -> NewEvent {
    NewEvent::new(
        ts,
        EventBody::User {
            content: MessageContent::Text(text.into()),
            name: None,
        },
    )
}

fn l1_is_the_sessions_recent_log_ranked_by_the_query_and_only_the_owners(m: &dyn Memory) {
    let store = MemoryStore::new();
    let n = L1_WINDOW + 5;
    let events: Vec<NewEvent> = (1..=n)
        .map(|i| {
            let text = if i == 1 {
                "the oldest turn mentions kubernetes".to_owned()
            } else if i == n - 1 {
                "we migrated the kubernetes cluster today".to_owned()
            } else {
                format!("filler turn number {i}")
            };
            user(i as i64, &text)
        })
        .collect();
    store
        .create_session(
            &NewSession {
                id: session("live"),
                agent: AgentId::new("ops").unwrap(),
                parent: None,
                created_ms: 0,
            },
            &events,
        )
        .unwrap();
    let hits = recall(
        m,
        Some(&store),
        &ask("ops", Some("live"), Some(Tier::L1), "kubernetes"),
    )
    .unwrap();
    // The window holds the latest events only: the first turn has left it.
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].tier, Tier::L1);
    assert_eq!(hits[0].sources[0].seq, n - 1);
    // An empty query gives the latest events first, within the budget.
    let mut latest = ask("ops", Some("live"), Some(Tier::L1), "");
    latest.budget = 12;
    let hits = recall(m, Some(&store), &latest).unwrap();
    assert!(!hits.is_empty());
    assert_eq!(hits[0].sources[0].seq, n);
    assert!(hits.iter().map(|h| h.tokens).sum::<u64>() <= 12);
    // Another agent sees nothing of this session.
    let other = recall(
        m,
        Some(&store),
        &ask("bob", Some("live"), Some(Tier::L1), "kubernetes"),
    )
    .unwrap();
    assert!(other.is_empty());
}

conformance!(
    a_note_is_l2_with_its_provenance_and_saving_it_again_adds_a_source,
    an_expired_note_is_never_returned_and_is_purged_at_the_next_save,
    expiry_is_judged_at_read_time_too_before_any_purge,
    each_tier_is_searched_on_its_own_and_l2_needs_a_session,
    memory_of_one_agent_is_never_returned_for_another,
    a_time_range_keeps_the_items_valid_within_it,
    l1_is_the_sessions_recent_log_ranked_by_the_query_and_only_the_owners,
);
