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
    assert_eq!(PgMemory::schema_version(), 1);
}

#[test]
fn a_url_that_is_not_one_is_refused_with_the_reason() {
    let err = PgMemory::open("postgres://loom@127.0.0.1:1/x?pool_size=zero").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("pool_size"), "{text}");
}
