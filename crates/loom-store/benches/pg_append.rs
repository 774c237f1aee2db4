//! PostgreSQL append throughput, every commit durable (the server's default
//! `synchronous_commit = on`): batches of 100 events of 1 KB from one writer, and single-event
//! appends from 8 concurrent writers (each to its own session, then all to one session), as the
//! issue's targets name them; with the round trips each append costs and the disk's own sync
//! rate beside them.
//!
//! Run: `cargo bench -p loom-store --bench pg_append`. The database is `LOOM_TEST_PG` or a
//! throwaway cluster from `scripts/postgres.sh` (under /tmp, so the sync rate is measured there).

// A benchmark that cannot set up has nothing to measure: it stops with the error.
#![expect(clippy::unwrap_used, reason = "benchmark setup fails loudly")]
#![expect(clippy::print_stdout, reason = "a benchmark reports on stdout")]

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use loom_core::{AgentId, EventBody, NewEvent, SessionId};
use loom_store::{NewSession, PgStore, Store};

/// Size of one event's stored JSON body, in bytes.
const EVENT_BYTES: usize = 1024;
/// Bytes of `{"kind":"user","content":""}` around the text.
const BODY_OVERHEAD: usize = 29;
const WRITERS: usize = 8;
const SPELL: Duration = Duration::from_secs(8);

fn event(n: u64) -> NewEvent {
    let tag = format!("event {n} ");
    let text = format!(
        "{tag}{}",
        "x".repeat(EVENT_BYTES - BODY_OVERHEAD - tag.len())
    );
    NewEvent::new(
        1_700_000_000_000 + n as i64,
        EventBody::User {
            content: text.into(),
            name: None,
        },
    )
}

fn session(store: &PgStore, name: &str) -> SessionId {
    let id = SessionId::new(name).unwrap();
    let session = NewSession {
        id: id.clone(),
        agent: AgentId::new("bench").unwrap(),
        parent: None,
        created_ms: 0,
    };
    store.create_session(&session, &[]).unwrap();
    id
}

fn batches(store: &PgStore) {
    const COMMITS: usize = 300;
    let id = session(store, "batches");
    let events: Vec<NewEvent> = (0..100).map(event).collect();
    let mut times = Vec::with_capacity(COMMITS);
    let trips = store.round_trips();
    let started = Instant::now();
    for _ in 0..COMMITS {
        let t = Instant::now();
        store.append(&id, &events).unwrap();
        times.push(t.elapsed());
    }
    let total = started.elapsed();
    times.sort_unstable();
    println!(
        "batch=100 commits={COMMITS} events/s={:.0} p50={:.2?} p99={:.2?} round_trips/append={:.1}",
        (COMMITS * 100) as f64 / total.as_secs_f64(),
        times[COMMITS / 2],
        times[COMMITS * 99 / 100],
        (store.round_trips() - trips) as f64 / COMMITS as f64,
    );
}

/// `WRITERS` threads append single events for `SPELL`; `shared` puts them all on one session.
fn concurrent(url: &str, shared: bool) {
    let store = PgStore::open(&format!("{url}&pool_size={WRITERS}")).unwrap();
    let label = if shared {
        "one session"
    } else {
        "own sessions"
    };
    let ids: Vec<SessionId> = if shared {
        vec![session(&store, "shared"); WRITERS]
    } else {
        (0..WRITERS)
            .map(|w| session(&store, &format!("own-{w}")))
            .collect()
    };
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let trips = store.round_trips();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for id in &ids {
            let (store, stop, done) = (&store, &stop, &done);
            scope.spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    store.append(id, &[event(n)]).unwrap();
                    done.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            });
        }
        std::thread::sleep(SPELL);
        stop.store(true, Ordering::Relaxed);
    });
    let total = started.elapsed();
    let appends = done.load(Ordering::Relaxed);
    println!(
        "single appends, {WRITERS} writers, {label}: appends/s={:.0} round_trips/append={:.1}",
        appends as f64 / total.as_secs_f64(),
        (store.round_trips() - trips) as f64 / appends as f64,
    );
}

/// The disk's own bound where the cluster lives: 1 KB write + fdatasync rounds per second.
fn fsync_rate() {
    const ROUNDS: u32 = 500;
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let path = dir.path().join("fsync-probe");
    let mut file = std::fs::File::create(&path).unwrap();
    let block = [b'x'; 1024];
    let started = Instant::now();
    for _ in 0..ROUNDS {
        file.write_all(&block).unwrap();
        file.sync_data().unwrap();
    }
    println!(
        "disk (/tmp): 1 KB write+fdatasync rounds/s={:.0}",
        f64::from(ROUNDS) / started.elapsed().as_secs_f64()
    );
}

fn main() {
    // `cargo test --benches` runs this with `--bench` absent: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let Some(schema) = loom_testkit::pg::fresh_schema() else {
        return;
    };
    fsync_rate();
    let store = PgStore::open(&schema.url).unwrap();
    batches(&store);
    concurrent(&schema.url, false);
    concurrent(&schema.url, true);
}
