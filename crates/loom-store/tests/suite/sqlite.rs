//! Checks that only make sense for SQLite: schema versions, several connections on one file,
//! what a damaged database gives back, and the workspace layout.

use loom_core::Seq;
use loom_store::{SqliteStore, Store, StoreError, Workspace};
use rusqlite::Connection;

use crate::suite::support::{call, result, sid, user, with_session, SqliteHarness, StoreHarness};

#[test]
fn newer_schema_is_refused() {
    let h = SqliteHarness::open();
    let path = h.path().to_owned();
    let newer = SqliteStore::schema_version() + 1;
    Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", newer)
        .unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    match err {
        StoreError::SchemaTooNew { found, supported } => {
            assert_eq!(found, newer);
            assert_eq!(supported, SqliteStore::schema_version());
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
}

#[test]
fn a_fresh_file_gets_the_current_schema() {
    let h = SqliteHarness::open();
    let version: i64 = Connection::open(h.path())
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SqliteStore::schema_version());
}

#[test]
fn two_connections_never_share_a_seq() {
    let h = SqliteHarness::open();
    let id = with_session(h.store(), "s");
    // Each store is its own connection, as two processes would have.
    let stores = [
        SqliteStore::open(h.path()).unwrap(),
        SqliteStore::open(h.path()).unwrap(),
    ];
    std::thread::scope(|scope| {
        for (n, store) in stores.iter().enumerate() {
            let id = &id;
            scope.spawn(move || {
                for i in 0..25 {
                    let c = format!("w{n}-{i}");
                    store
                        .append(id, &[call(&c, "bash"), result(&c, "bash", false)])
                        .unwrap();
                }
            });
        }
    });
    let events = h.store().read(&id, 1..=Seq::MAX).unwrap();
    let seqs: Vec<Seq> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=100).collect::<Vec<_>>());
    assert_eq!(h.store().latest_seq(&id).unwrap(), 100);
    assert_eq!(h.store().tool_calls(&id).unwrap().len(), 50);
}

#[test]
fn a_damaged_row_is_reported_not_panicked_on() {
    let h = SqliteHarness::open();
    let id = with_session(h.store(), "s");
    h.store().append(&id, &[user("fine")]).unwrap();
    Connection::open(h.path())
        .unwrap()
        .execute("UPDATE events SET body = '{\"kind\":\"nonsense\"}'", [])
        .unwrap();
    let err = h.store().read(&id, 1..=1).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Corrupt {
                table: "events",
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.is_bad_input());
}

#[test]
fn a_file_that_is_not_a_database_is_a_backend_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-a-db");
    std::fs::write(&path, vec![b'x'; 4096]).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Backend { .. }), "{err}");
    assert!(
        err.to_string().starts_with("database error while "),
        "{err}"
    );
}

#[test]
fn workspace_holds_the_log_and_the_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("loom.db");
    let blob = {
        let ws = Workspace::open(&db).unwrap();
        let blob = loom_store::BlobStore::put(&ws.blobs, b"kept").unwrap().blob;
        with_session(&ws.store, "s");
        blob
    };
    let ws = Workspace::open(&db).unwrap();
    assert_eq!(
        ws.blobs.root(),
        dir.path().join("loom.workspace").canonicalize().unwrap()
    );
    assert_eq!(
        loom_store::BlobStore::get(&ws.blobs, &blob).unwrap(),
        b"kept"
    );
    assert!(ws.store.session(&sid("s")).unwrap().is_some());
}

#[test]
fn concurrent_writers_share_commits_and_a_failing_one_fails_alone() {
    let h = SqliteHarness::open();
    let store = std::sync::Arc::new(SqliteStore::open(h.path()).unwrap());
    let shared = with_session(&*store, "shared");
    for t in 0..8 {
        with_session(&*store, &format!("own-{t}"));
    }
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = std::sync::Arc::clone(&store);
            let shared = shared.clone();
            std::thread::spawn(move || {
                let own = sid(&format!("own-{t}"));
                let mut refused = 0;
                for i in 0..40 {
                    store.append(&own, &[user(&format!("{t}/{i}"))]).unwrap();
                    store.append(&shared, &[user(&format!("{t}/{i}"))]).unwrap();
                    // A result that answers no call: refused, and nothing of it written, while
                    // the writes it may have shared a commit with go through.
                    if store
                        .append(&own, &[result("ghost", "bash", false)])
                        .is_err()
                    {
                        refused += 1;
                    }
                }
                refused
            })
        })
        .collect();
    let refused: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(refused, 8 * 40);
    // Everything acknowledged is there, with contiguous seqs, after reopening the file.
    drop(store);
    let store = SqliteStore::open(h.path()).unwrap();
    let seqs: Vec<Seq> = store
        .read(&shared, 1..=Seq::MAX)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, (1..=8 * 40).collect::<Vec<Seq>>());
    for t in 0..8 {
        assert_eq!(store.latest_seq(&sid(&format!("own-{t}"))).unwrap(), 40);
    }
}
