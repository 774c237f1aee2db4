//! What only the PostgreSQL backend has to show: several processes writing one agent's memory
//! at once, and the tables surviving a reopening beside a log.

use std::sync::Barrier;

use loom_memory::{Memory, PgMemory, Search, Written};

use super::support::turn;

#[test]
fn two_servers_writing_the_same_fact_at_once_make_one_item() {
    let Some(schema) = loom_testkit::pg::fresh_schema() else {
        return;
    };
    let (a, b) = (
        PgMemory::open(&schema.url).unwrap(),
        PgMemory::open(&schema.url).unwrap(),
    );
    let start = Barrier::new(2);
    let fact = "the release branch is cut from main every Thursday at noon";
    let run = |m: &PgMemory, sess: &'static str| {
        start.wait();
        m.write(&[turn("agent", sess, 1, fact)]).unwrap()[0]
    };
    let written: Vec<Written> = std::thread::scope(|s| {
        let one = s.spawn(|| run(&a, "s1"));
        let two = s.spawn(|| run(&b, "s2"));
        vec![one.join().unwrap(), two.join().unwrap()]
    });
    let created = written
        .iter()
        .filter(|w| matches!(w, Written::Created(_)))
        .count();
    assert_eq!(created, 1, "{written:?}");
    assert_eq!(written[0].item(), written[1].item());
    let hits = a
        .search(&Search::new("release branch thursday", 1000))
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].sources.len(), 2);
}

#[test]
fn memory_lives_beside_the_log_and_survives_reopening() {
    let Some(schema) = loom_testkit::pg::fresh_schema() else {
        return;
    };
    // The log's own tables first, as `loom serve` creates them; memory adds its own beside.
    let _log = loom_store::PgStore::open(&schema.url).unwrap();
    let db = loom_store::Database::Postgres(schema.url.clone());
    let id = {
        let m = loom_memory::open(&db).unwrap();
        m.write(&[turn("a", "s", 2, "the on-call rota lives in the wiki")])
            .unwrap()[0]
            .item()
    };
    let again = loom_memory::open(&db).unwrap();
    assert_eq!(
        again.item(id).unwrap().text,
        "the on-call rota lives in the wiki"
    );
    assert_eq!(PgMemory::schema_version(), 3);
}

#[test]
fn a_version_1_database_migrates_keeping_its_items_and_gains_vectors_kb_and_marks() {
    let Some(schema) = loom_testkit::pg::fresh_schema() else {
        return;
    };
    let id = PgMemory::open(&schema.url)
        .unwrap()
        .write(&[turn(
            "a",
            "s",
            1,
            "the staging database is restored nightly",
        )])
        .unwrap()[0]
        .item();
    // Back to what a build of version 1 left: its tables only.
    let mut client = schema.connect();
    client
        .batch_execute(
            "DROP TABLE memory_vectors, kb_chunks, kb_files, memory_extracted, memory_terms;
             DROP FUNCTION memory_dot;
             DELETE FROM memory_schema WHERE version > 1;",
        )
        .unwrap();
    let m = PgMemory::open(&schema.url).unwrap();
    let version: i64 = client
        .query_one("SELECT max(version) FROM memory_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, PgMemory::schema_version());
    assert_eq!(
        m.item(id).unwrap().text,
        "the staging database is restored nightly"
    );
    // The document frequencies are counted from the items the database already had.
    let df: i64 = client
        .query_one(
            "SELECT df FROM memory_terms WHERE agent = 'a' AND lexeme = 'stage'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(df, 1);
    m.kb_add("", "notes.md", "# Staging\n\nRestored nightly.\n", 1)
        .unwrap();
    assert_eq!(m.kb_search("", "staging", 100, 5).unwrap().len(), 1);
    let (agent, session) = (
        loom_core::AgentId::new("a").unwrap(),
        loom_core::SessionId::new("s").unwrap(),
    );
    assert_eq!(m.extracted_to(&agent, &session, "x").unwrap(), 0);
    // CI's PostgreSQL has no pgvector: the exact scan is what runs there.
    let available: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')",
            &[],
        )
        .unwrap()
        .get(0);
    if !available {
        assert!(!m.uses_pgvector());
    }
}

#[test]
fn two_extractions_racing_leave_the_further_mark() {
    let Some(schema) = loom_testkit::pg::fresh_schema() else {
        return;
    };
    let (a, b) = (
        PgMemory::open(&schema.url).unwrap(),
        PgMemory::open(&schema.url).unwrap(),
    );
    let mark = |to_seq| loom_memory::ExtractMark {
        agent: loom_core::AgentId::new("a").unwrap(),
        session: loom_core::SessionId::new("s").unwrap(),
        extractor: "scripted:test".into(),
        to_seq,
    };
    a.write_extracted(&[], &mark(9)).unwrap();
    // A slower run that read less commits after: the mark stays where the other left it.
    b.write_extracted(&[], &mark(4)).unwrap();
    let m = mark(0);
    assert_eq!(
        a.extracted_to(&m.agent, &m.session, &m.extractor).unwrap(),
        9
    );
}

#[test]
fn a_url_that_is_not_one_is_refused_with_the_reason() {
    let err = PgMemory::open("postgres://loom@127.0.0.1:1/x?pool_size=zero").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("pool_size"), "{text}");
}

#[test]
fn an_agents_ranking_does_not_move_with_what_other_agents_store() {
    let Some(schema) = loom_testkit::pg::fresh_schema() else {
        return;
    };
    let m = PgMemory::open(&schema.url).unwrap();
    let mine = [
        "the deploy key rotates every quarter",
        "the staging deploy waits for the nightly backup",
        "a quarter of the backup volume is reserved for logs",
        "the nightly job mails the on-call engineer",
    ];
    let items: Vec<_> = mine
        .iter()
        .enumerate()
        .map(|(i, t)| turn("ops", "s1", i as u64 + 1, t))
        .collect();
    m.write(&items).unwrap();
    let search = Search {
        filters: loom_memory::Filters {
            agent: Some(loom_core::AgentId::new("ops").unwrap()),
            ..Default::default()
        },
        ..Search::new("nightly deploy quarter", 1000)
    };
    let ranked = |m: &PgMemory| -> Vec<(i64, f64)> {
        m.search(&search)
            .unwrap()
            .iter()
            .map(|h| (h.id, h.score))
            .collect()
    };
    let before = ranked(&m);
    assert!(before.len() >= 3, "{before:?}");
    // Another agent (another tenant's, say) makes "deploy" common and "nightly" rare in its
    // own memory: under shared statistics the weights of this agent's terms would move.
    let theirs: Vec<_> = (0..40)
        .map(|i| {
            turn(
                "web",
                "s9",
                i + 1,
                &format!("deploy number {i} of the web tier"),
            )
        })
        .chain([turn("web", "s9", 99, "a quarter deploy")])
        .collect();
    m.write(&theirs).unwrap();
    assert_eq!(ranked(&m), before);
}
