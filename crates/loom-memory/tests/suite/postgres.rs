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
    assert_eq!(PgMemory::schema_version(), 5);
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
             ALTER TABLE memory_items DROP COLUMN terms CASCADE;
             ALTER TABLE memory_items ADD COLUMN tsv tsvector
                 GENERATED ALWAYS AS (to_tsvector('english', text)) STORED;
             CREATE INDEX memory_items_tsv ON memory_items USING GIN (tsv);
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
    // Its terms are Loom's stems, found by a search.
    let hits = m
        .search(&loom_memory::Search::new("what is restored at night?", 500))
        .unwrap();
    assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), [id]);
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
fn sqlite_and_postgres_holding_the_same_items_give_the_same_results() {
    let Some(schema) = loom_testkit::pg::fresh_schema() else {
        return;
    };
    let pg = PgMemory::open(&schema.url).unwrap();
    let lite = loom_memory::SqliteMemory::open_in_memory().unwrap();
    let said = [
        (
            "ann",
            "Ann: I went hiking in the Dolomites last weekend with my sister",
        ),
        (
            "ann",
            "Bob: The Dolomites! Did you take the cable car up to the ridge?",
        ),
        (
            "ann",
            "Ann: No, we hiked the whole way; my sister's new boots gave her blisters",
        ),
        (
            "ann",
            "Bob: I'm painting the kitchen blue this month, the landlord agreed",
        ),
        (
            "ann",
            "Ann: Blue kitchens are lovely. Which shade did you pick?",
        ),
        (
            "ann",
            "Bob: A pale cornflower blue, two coats, and the ceiling stays white",
        ),
        (
            "ann",
            "Ann: My daughter starts violin lessons on Tuesday evenings",
        ),
        (
            "ann",
            "Bob: Violin is hard at first; my son quit after three lessons",
        ),
        (
            "ann",
            "Ann: The deadline for the grant report moved to Friday the 14th",
        ),
        (
            "ann",
            "Bob: Friday again? Last time the grant report was due on a Monday",
        ),
        (
            "ann",
            "Ann: We adopted a rescue dog called Pepper, a collie mix",
        ),
        (
            "ann",
            "Bob: Collies need long walks; Pepper will love your hiking trips",
        ),
        (
            "ann",
            "Ann: Painting, hiking, violin, a dog: this year is busy",
        ),
        ("ann", "Bob: Busy years are the good ones"),
        (
            "cy",
            "Cy: the grant report template lives in the shared drive",
        ),
        (
            "cy",
            "Cy: hiking boots on sale at the outdoor shop near the station",
        ),
    ];
    let items: Vec<_> = said
        .iter()
        .enumerate()
        .map(|(i, (a, t))| turn(a, &format!("{a}-chat"), i as u64 + 1, t))
        .collect();
    pg.write(&items).unwrap();
    lite.write(&items).unwrap();
    let queries = [
        ("ann", "Where did Ann go hiking and with whom?"),
        ("ann", "What colour is Bob painting his kitchen?"),
        ("ann", "When are the violin lessons?"),
        ("ann", "When is the grant report due?"),
        ("ann", "What kind of dog is Pepper?"),
        ("ann", "boots blisters"),
        ("cy", "grant report"),
        ("", "hiking boots"),
    ];
    for (a, q) in queries {
        let mut search = Search::new(q, 300);
        if !a.is_empty() {
            search.filters.agent = Some(loom_core::AgentId::new(a).unwrap());
        }
        let found = |m: &dyn loom_memory::Memory| -> Vec<(String, f64)> {
            m.search(&search)
                .unwrap()
                .into_iter()
                .map(|h| (h.text, h.score))
                .collect()
        };
        let (p, l) = (found(&pg), found(&lite));
        assert!(!l.is_empty(), "{q}: nothing found");
        let texts = |v: &[(String, f64)]| v.iter().map(|h| h.0.clone()).collect::<Vec<_>>();
        assert_eq!(texts(&p), texts(&l), "{q}");
        for (x, y) in p.iter().zip(&l) {
            assert!((x.1 - y.1).abs() < 1e-9, "{q}: {x:?} against {y:?}");
        }
    }
}
