//! PostgreSQL faults, each on a cluster of the test's own: a restart under a write storm, and
//! restarts between calls.
//!
//! What must hold: the store reconnects and keeps serving, an append that got an `Ok` is in the
//! log at the seqs it was given, and one that got an error is not there. A commit whose answer
//! was lost with the connection is resolved by asking the server, so none is left in doubt.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use loom_core::{EventBody, Seq};
use loom_store::{BlobStore, PgStore, Store};
use loom_testkit::pg::Cluster;

use crate::suite::support::{sid, user, with_session};

/// What one append returned: its seqs, or its error's text.
type Outcome = Result<Seq, String>;

#[test]
fn a_restart_under_a_write_storm_loses_nothing_acknowledged() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    // Long enough for the database to come back: requests wait for it rather than fail.
    let store = PgStore::open(&format!("{}?checkout_timeout_ms=20000", cluster.url)).unwrap();
    const WRITERS: usize = 4;
    let shared = with_session(&store, "shared");
    for t in 0..WRITERS {
        with_session(&store, &format!("own-{t}"));
    }
    let stop = AtomicBool::new(false);
    let acked = AtomicUsize::new(0);
    let restarts = 2;
    let outcomes: Vec<BTreeMap<String, (String, Outcome)>> = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let (store, shared, stop, acked) = (&store, &shared, &stop, &acked);
                scope.spawn(move || {
                    let own = sid(&format!("own-{t}"));
                    let mut outcomes = BTreeMap::new();
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        for session in [shared, &own] {
                            let text = format!("{t}/{i}");
                            let got = store
                                .append(session, &[user(&text)])
                                .map(|seqs| *seqs.start())
                                .map_err(|e| e.to_string());
                            if got.is_ok() {
                                acked.fetch_add(1, Ordering::Relaxed);
                            }
                            outcomes.insert(
                                format!("{}:{text}", session.as_str()),
                                (session.as_str().to_owned(), got),
                            );
                            i += 1;
                        }
                    }
                    outcomes
                })
            })
            .collect();
        for _ in 0..restarts {
            std::thread::sleep(Duration::from_millis(400));
            cluster.restart();
        }
        // The storm must go on after the last restart: the store reconnected.
        let after = acked.load(Ordering::Relaxed);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while acked.load(Ordering::Relaxed) < after + 50 {
            assert!(
                std::time::Instant::now() < deadline,
                "no appends were acknowledged after the restart"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    });

    // What the log holds, by content, per session; seqs contiguous from 1.
    let mut stored: BTreeMap<String, Seq> = BTreeMap::new();
    for session in
        std::iter::once(shared.clone()).chain((0..WRITERS).map(|t| sid(&format!("own-{t}"))))
    {
        let events = store.read(&session, 1..=Seq::MAX).unwrap();
        let seqs: Vec<Seq> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=events.len() as Seq).collect::<Vec<_>>());
        for e in events {
            let EventBody::User { content, .. } = e.body else {
                panic!("unexpected event {e:?}");
            };
            let key = format!("{}:{}", session.as_str(), content.text());
            assert!(stored.insert(key, e.seq).is_none(), "stored twice");
        }
    }
    let mut ok = 0;
    for (key, (_, outcome)) in outcomes.iter().flatten() {
        match outcome {
            Ok(seq) => {
                ok += 1;
                assert_eq!(stored.get(key), Some(seq), "{key} was acknowledged");
            }
            // Not even a commit whose answer was lost may be left in doubt: the store asks the
            // server what became of it.
            Err(e) => assert!(
                !stored.contains_key(key),
                "{key} failed ({e}) but is stored"
            ),
        }
    }
    assert!(ok > 100, "only {ok} appends went through");
    // Nothing appeared that was not acknowledged.
    assert_eq!(stored.len(), ok);
}

/// After a restart, the connections a store kept are all broken: the next reads and writes of
/// the log and of blobs find that out and go on with new ones.
#[test]
fn a_store_carries_on_after_a_restart() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let store = PgStore::open(&format!("{}?checkout_timeout_ms=20000", cluster.url)).unwrap();
    let blobs = store.blobs();
    let id = with_session(&store, "s");
    store.append(&id, &[user("before")]).unwrap();
    let kept = blobs.put(b"kept across the restart").unwrap().blob;
    // Several idle connections, so that more than one is stale after the restart.
    std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| store.latest_seq(&id).unwrap());
        }
    });
    cluster.restart();
    assert_eq!(blobs.get(&kept).unwrap(), b"kept across the restart");
    cluster.restart();
    assert!(blobs.contains(&kept).unwrap());
    cluster.restart();
    let fresh = blobs.put(b"stored after it").unwrap().blob;
    assert_eq!(blobs.get(&fresh).unwrap(), b"stored after it");
    cluster.restart();
    assert_eq!(store.append(&id, &[user("after")]).unwrap(), 2..=2);
    cluster.restart();
    assert_eq!(store.read(&id, 1..=Seq::MAX).unwrap().len(), 2);
}
