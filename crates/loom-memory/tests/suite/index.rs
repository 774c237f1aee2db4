//! Items derived from a stored log: kinds, provenance, idempotence.

use loom_core::{AgentId, ContentStats, EventBody, MessageContent, NewEvent, ToolCall, ToolOutput};
use loom_memory::{index, ItemKind, Memory, MemoryError, Search, Tier};
use loom_store::{MemoryStore, NewSession, NewSummary, StepRecord, Store};

use super::support::{conformance, memory, session};

fn user(ts: i64, text: &str) -> NewEvent {
    NewEvent::new(
        ts,
        EventBody::User {
            content: MessageContent::Text(text.into()),
            name: None,
        },
    )
}

fn assistant(ts: i64, text: Option<&str>, calls: Vec<ToolCall>) -> NewEvent {
    NewEvent::new(
        ts,
        EventBody::Assistant {
            content: text.map(|t| MessageContent::Text(t.into())),
            reasoning: Some("private reasoning about zebras".into()),
            tool_calls: calls,
            name: None,
            native: None,
        },
    )
}

fn store_with_log() -> MemoryStore {
    let store = MemoryStore::new();
    let s = NewSession {
        id: session("s1"),
        agent: AgentId::new("ops").unwrap(),
        parent: None,
        created_ms: 0,
    };
    let call = ToolCall {
        id: "c1".into(),
        name: "bash".into(),
        arguments: r#"{"command":"df -h"}"#.into(),
    };
    let output = "Filesystem Size Used\n/dev/sda1 100G 91G";
    let stats = ContentStats::of(output.as_bytes());
    let events = vec![
        NewEvent::new(
            10,
            EventBody::System {
                content: "be terse about zebras".into(),
            },
        ),
        user(20, "The disk on the build host is nearly full"),
        assistant(30, None, vec![call]),
        NewEvent::new(
            40,
            EventBody::ToolResult {
                call_id: "c1".into(),
                tool_name: "bash".into(),
                content: ToolOutput::Text(output.into()),
                is_error: false,
                stats: stats.clone(),
            },
        ),
        assistant(
            50,
            Some("The build host disk is 91% used; clean the docker cache."),
            vec![],
        ),
    ];
    store.create_session(&s, &events).unwrap();
    let step = serde_json::json!({
        "id": "step_001", "call_id": "c1", "call_seq": 3, "result_seq": 4,
        "tool_name": "bash", "kind": "shell", "minimal_args": {"command": "df -h"},
        "observation": "Ran `df -h` on the build host: exit 0, 2 lines",
        "success": true, "timestamp_ms": 40, "stats": stats,
    });
    store
        .put_steps(
            &session("s1"),
            &[StepRecord {
                id: "step_001".into(),
                call_id: "c1".into(),
                result_seq: 4,
                body: step,
            }],
        )
        .unwrap();
    store
        .put_summary(&NewSummary {
            session: session("s1"),
            from_seq: 1,
            to_seq: 5,
            content: "Disk almost full on the build host; docker cache to clean.".into(),
            producer: "deterministic".into(),
            created_ms: 60,
        })
        .unwrap();
    store
}

fn turns_observations_and_summaries_become_items_with_provenance_and_time(m: &dyn Memory) {
    let store = store_with_log();
    let report = index(&store, m, &session("s1")).unwrap();
    assert_eq!((report.derived, report.created), (4, 4), "{report:?}");

    let hits = m.search(&Search::new("build host", 10_000)).unwrap();
    let mut got: Vec<(u64, Option<u64>, Tier)> = hits
        .iter()
        .map(|h| (h.sources[0].seq, h.sources[0].to_seq, h.tier))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            (1, Some(5), Tier::L3),
            (2, None, Tier::L4),
            (4, None, Tier::L4),
            (5, None, Tier::L4)
        ]
    );
    let kind_at = |seq| {
        let hit = hits.iter().find(|h| h.sources[0].seq == seq).unwrap();
        let item = m.item(hit.id).unwrap();
        (item.kind, item.valid_from)
    };
    assert_eq!(kind_at(2), (ItemKind::User, 20));
    assert_eq!(kind_at(4), (ItemKind::Observation, 40));
    assert_eq!(kind_at(5), (ItemKind::Assistant, 50));
    // Neither the system prompt nor reasoning nor tool calls nor raw outputs are remembered.
    assert!(m.search(&Search::new("zebras", 10_000)).unwrap().is_empty());
    assert!(m
        .search(&Search::new("sda1 filesystem", 10_000))
        .unwrap()
        .is_empty());
}

fn indexing_again_is_idempotent_and_picks_up_new_events(m: &dyn Memory) {
    let store = store_with_log();
    index(&store, m, &session("s1")).unwrap();
    let again = index(&store, m, &session("s1")).unwrap();
    assert_eq!(
        (again.created, again.known),
        (0, again.derived),
        "{again:?}"
    );
    store
        .append(
            &session("s1"),
            &[user(70, "Cleaned; the disk is at 40% now")],
        )
        .unwrap();
    let more = index(&store, m, &session("s1")).unwrap();
    assert_eq!(
        (more.created, more.known),
        (1, more.derived - 1),
        "{more:?}"
    );
}

#[test]
fn a_missing_session_is_named() {
    let err = index(&MemoryStore::new(), &memory(), &session("nope")).unwrap_err();
    assert!(
        matches!(&err, MemoryError::SessionNotFound(s) if s.as_str() == "nope"),
        "{err}"
    );
}

conformance!(
    turns_observations_and_summaries_become_items_with_provenance_and_time,
    indexing_again_is_idempotent_and_picks_up_new_events,
);
