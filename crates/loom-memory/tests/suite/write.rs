//! Deduplication, supersession and forgetting.

use loom_memory::{Memory, MemoryError, Search, Written};

use super::support::{agent, conformance, session, turn};

fn search_all(m: &dyn Memory, q: &str, history: bool) -> Vec<(i64, String)> {
    let mut s = Search::new(q, 10_000);
    s.history = history;
    m.search(&s)
        .unwrap()
        .into_iter()
        .map(|h| (h.id, h.text))
        .collect()
}

fn an_exact_duplicate_is_one_item_with_two_provenances(m: &dyn Memory) {
    let w = m
        .write(&[
            turn("a", "s1", 3, "The staging server runs on port 8443"),
            turn("a", "s2", 7, "the  STAGING server runs on port 8443"),
        ])
        .unwrap();
    let Written::Created(id) = w[0] else {
        panic!("{w:?}")
    };
    assert_eq!(w[1], Written::Duplicate(id));
    let item = m.item(id).unwrap();
    let at: Vec<_> = item
        .sources
        .iter()
        .map(|p| (p.session.as_str(), p.from_seq))
        .collect();
    assert_eq!(at, [("s1", 3), ("s2", 7)]);
    let hits = m.search(&Search::new("staging port", 1000)).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].sources.len(), 2);
}

fn duplicates_are_per_agent(m: &dyn Memory) {
    let w = m
        .write(&[
            turn("a", "s1", 1, "the staging server runs on port 8443"),
            turn("b", "s2", 1, "the staging server runs on port 8443"),
        ])
        .unwrap();
    assert!(matches!(w[0], Written::Created(_)) && matches!(w[1], Written::Created(_)));
    assert_ne!(w[0].item(), w[1].item());
}

fn a_near_duplicate_joins_the_item_and_a_different_text_does_not(m: &dyn Memory) {
    let base = "we moved the nightly backup job from cron to the systemd timer on the build \
                host because cron kept missing runs after reboots";
    let near = "we moved the nightly backup job from cron to the systemd timer on the build \
                host because cron kept missing runs after reboots, again";
    let far = "we moved the weekly report job from cron to the systemd timer on the mail host";
    let w = m
        .write(&[
            turn("a", "s", 1, base),
            turn("a", "s", 2, near),
            turn("a", "s", 3, far),
        ])
        .unwrap();
    assert_eq!(w[1], Written::NearDuplicate(w[0].item()));
    assert!(matches!(w[2], Written::Created(id) if id != w[0].item()));
    assert_eq!(m.item(w[0].item()).unwrap().sources.len(), 2);
}

fn short_texts_are_never_near_duplicates(m: &dyn Memory) {
    let w = m
        .write(&[
            turn("a", "s", 1, "deploy to staging now"),
            turn("a", "s", 2, "deploy to staging now!"),
        ])
        .unwrap();
    assert!(matches!(w[1], Written::Created(_)), "{w:?}");
}

fn reindexing_the_same_source_changes_nothing(m: &dyn Memory) {
    let items = [
        turn("a", "s", 1, "my favourite editor is helix"),
        turn("a", "s", 2, "ok"),
    ];
    let first = m.write(&items).unwrap();
    let again = m.write(&items).unwrap();
    assert_eq!(
        again,
        first
            .iter()
            .map(|w| Written::Known(w.item()))
            .collect::<Vec<_>>()
    );
    assert_eq!(m.item(first[0].item()).unwrap().sources.len(), 1);
}

fn a_newer_value_supersedes_the_older_which_only_history_returns(m: &dyn Memory) {
    let w = m
        .write(&[
            turn("a", "s1", 1, "My email is ann@old.example"),
            turn("a", "s1", 2, "unrelated chatter about email filters"),
            turn("a", "s2", 5, "my email is ann@new.example."),
        ])
        .unwrap();
    let (old, new) = (w[0].item(), w[2].item());
    let old_item = m.item(old).unwrap();
    assert_eq!(old_item.superseded_by, Some(new));
    assert_eq!(old_item.valid_to, Some(5000));
    assert_eq!(m.item(new).unwrap().superseded_by, None);

    let current: Vec<_> = search_all(m, "email", false)
        .into_iter()
        .map(|h| h.0)
        .collect();
    assert!(
        current.contains(&new) && !current.contains(&old),
        "{current:?}"
    );
    let history: Vec<_> = search_all(m, "email", true)
        .into_iter()
        .map(|h| h.0)
        .collect();
    assert!(
        history.contains(&new) && history.contains(&old),
        "{history:?}"
    );
}

fn an_older_value_indexed_late_does_not_override_the_newer(m: &dyn Memory) {
    let w = m
        .write(&[
            turn("a", "s2", 9, "the deploy target is prod-eu"),
            turn("a", "s1", 2, "the deploy target is prod-us"),
        ])
        .unwrap();
    let late = m.item(w[1].item()).unwrap();
    assert_eq!(late.superseded_by, Some(w[0].item()));
    assert_eq!(late.valid_to, Some(9000));
    assert_eq!(m.item(w[0].item()).unwrap().superseded_by, None);
}

fn speakers_and_agents_do_not_supersede_each_other(m: &dyn Memory) {
    let w = m
        .write(&[
            turn("a", "s", 1, "Ann: my email is ann@example.org"),
            turn("a", "s", 2, "Bob: my email is bob@example.org"),
            turn("b", "s9", 3, "Ann: my email is other@example.org"),
        ])
        .unwrap();
    for x in &w {
        assert_eq!(m.item(x.item()).unwrap().superseded_by, None);
    }
}

fn a_superseded_fact_stated_again_is_current_again(m: &dyn Memory) {
    let w = m
        .write(&[
            turn("a", "s", 1, "the build cache is on disk"),
            turn("a", "s", 2, "the build cache is in s3"),
            turn("a", "s", 3, "the build cache is on disk"),
        ])
        .unwrap();
    assert!(matches!(w[2], Written::Created(_)), "{w:?}");
    assert_eq!(
        m.item(w[1].item()).unwrap().superseded_by,
        Some(w[2].item())
    );
    assert_eq!(
        m.item(w[0].item()).unwrap().superseded_by,
        Some(w[1].item())
    );
}

fn forget_removes_the_item_says_what_and_restores_what_it_superseded(m: &dyn Memory) {
    let w = m
        .write(&[
            turn("a", "s", 1, "the on-call engineer is dana"),
            turn("a", "s", 2, "the on-call engineer is eli"),
        ])
        .unwrap();
    let gone = m.forget(w[1].item()).unwrap();
    assert_eq!(gone.item.text, "the on-call engineer is eli");
    assert_eq!(gone.item.sources[0].from_seq, 2);
    assert_eq!(gone.restored, [w[0].item()]);
    assert!(matches!(
        m.item(w[1].item()),
        Err(MemoryError::ItemNotFound(_))
    ));
    let back = m.item(w[0].item()).unwrap();
    assert_eq!((back.superseded_by, back.valid_to), (None, None));
    let texts: Vec<_> = search_all(m, "on-call engineer", true)
        .into_iter()
        .map(|h| h.1)
        .collect();
    assert_eq!(texts, ["the on-call engineer is dana"]);
    let err = m.forget(w[1].item()).unwrap_err();
    assert!(err.is_bad_input(), "{err}");
}

fn forgetting_a_session_removes_what_only_it_gave(m: &dyn Memory) {
    let w = m
        .write(&[
            turn(
                "a",
                "gone",
                1,
                "the deploy key lives in the vault under ops",
            ),
            turn("a", "gone", 2, "the staging database is called kestrel"),
            turn("a", "kept", 1, "the staging database is called kestrel"),
            turn("b", "gone", 1, "agent b keeps its own notes about falcon"),
        ])
        .unwrap();
    let (only_gone, shared, other_agent) = (w[0].item(), w[1].item(), w[3].item());
    assert_eq!(
        shared,
        w[2].item(),
        "an exact duplicate: one item, two sources"
    );
    let forgotten = m.forget_session(&agent("a"), &session("gone")).unwrap();
    assert_eq!(forgotten, [only_gone]);
    assert!(matches!(
        m.item(only_gone),
        Err(MemoryError::ItemNotFound(_))
    ));
    let kept = m.item(shared).unwrap();
    let sessions: Vec<&str> = kept.sources.iter().map(|s| s.session.as_str()).collect();
    assert_eq!(
        sessions,
        ["kept"],
        "the shared item keeps its other source only"
    );
    assert!(
        m.item(other_agent).is_ok(),
        "another agent's item from a session of the same id stays"
    );
    assert!(search_all(m, "deploy key vault", true).is_empty());
    assert_eq!(search_all(m, "staging database kestrel", true).len(), 1);
    assert!(m
        .forget_session(&agent("a"), &session("gone"))
        .unwrap()
        .is_empty());
}

#[test]
fn memory_tables_live_beside_the_log_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("loom.db");
    let store = loom_store::SqliteStore::open(&db).unwrap();
    let m = loom_memory::SqliteMemory::open(&db).unwrap();
    let id = m
        .write(&[turn("a", "s", 1, "the api lives at /v2")])
        .unwrap()[0]
        .item();
    drop(m);
    let m = loom_memory::SqliteMemory::open(&db).unwrap();
    assert_eq!(m.item(id).unwrap().sources[0].session, session("s"));
    // The log's own schema is untouched and still opens.
    drop(store);
    loom_store::SqliteStore::open(&db).unwrap();
}

conformance!(
    an_exact_duplicate_is_one_item_with_two_provenances,
    duplicates_are_per_agent,
    a_near_duplicate_joins_the_item_and_a_different_text_does_not,
    short_texts_are_never_near_duplicates,
    reindexing_the_same_source_changes_nothing,
    a_newer_value_supersedes_the_older_which_only_history_returns,
    an_older_value_indexed_late_does_not_override_the_newer,
    speakers_and_agents_do_not_supersede_each_other,
    a_superseded_fact_stated_again_is_current_again,
    forget_removes_the_item_says_what_and_restores_what_it_superseded,
    forgetting_a_session_removes_what_only_it_gave,
);
