//! PostgreSQL append throughput, every commit durable (the server's default
//! `synchronous_commit = on`): batches of 100 events of 1 KB from one writer, and single-event
//! appends from 8 concurrent writers (each to its own session, then all to one session), as the
//! issue's targets name them; with the round trips each append costs and the disk's own sync
//! rate beside them.
//!
//! Each part also says what it cost in CPU: the bench's own (the client) and the database's (every
//! process of the cluster that `pg_stat_activity` lists, read from `/proc` before and after), per
//! append; the scale-out model in docs/performance.md is computed from those.
//!
//! Run: `cargo bench -p loom-store --bench pg_append`. The database is `LOOM_TEST_PG` or a
//! throwaway cluster from `scripts/postgres.sh`; the sync rate is measured in `LOOM_PG_ROOT`
//! (where that script makes clusters), /tmp by default.

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

/// CPU seconds used so far by this process and by the database's processes (`None` when they
/// cannot be read: a cluster on another machine, or a user who may not list its processes).
fn cpu(db: &mut postgres::Client) -> (f64, Option<f64>) {
    let client = proc_cpu("self").unwrap_or(0.0);
    let server = db
        .query("SELECT pid FROM pg_stat_activity", &[])
        .ok()
        .and_then(|rows| {
            rows.iter()
                .map(|row| proc_cpu(&row.get::<_, i32>(0).to_string()))
                .sum::<Option<f64>>()
        });
    (client, server)
}

/// User + system CPU seconds of process `pid` (`/proc/PID/stat`, in the kernel's 100 Hz ticks).
fn proc_cpu(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's closing parenthesis, from the state (field 3): utime is 14th.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// CPU milliseconds per append, client and database, between two [`cpu`] readings.
fn cpu_per(before: (f64, Option<f64>), after: (f64, Option<f64>), appends: u64) -> String {
    let per = |secs: f64| format!("{:.3}", secs * 1000.0 / appends as f64);
    let server = match (before.1, after.1) {
        (Some(b), Some(a)) => per(a - b),
        _ => "n/a".into(),
    };
    format!(
        "cpu_ms/append client={} database={server}",
        per(after.0 - before.0)
    )
}

fn percentile(times: &mut [Duration], p: usize) -> Duration {
    times.sort_unstable();
    times
        .get((times.len() * p / 100).min(times.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

fn batches(store: &PgStore, db: &mut postgres::Client) {
    const COMMITS: usize = 300;
    let id = session(store, "batches");
    let events: Vec<NewEvent> = (0..100).map(event).collect();
    let mut times = Vec::with_capacity(COMMITS);
    let trips = store.round_trips();
    let cpu_before = cpu(db);
    let started = Instant::now();
    for _ in 0..COMMITS {
        let t = Instant::now();
        store.append(&id, &events).unwrap();
        times.push(t.elapsed());
    }
    let total = started.elapsed();
    let cpu_after = cpu(db);
    println!(
        "batch=100 commits={COMMITS} events/s={:.0} p50={:.2?} p99={:.2?} round_trips/append={:.1} \
         {}",
        (COMMITS * 100) as f64 / total.as_secs_f64(),
        percentile(&mut times, 50),
        percentile(&mut times, 99),
        (store.round_trips() - trips) as f64 / COMMITS as f64,
        cpu_per(cpu_before, cpu_after, COMMITS as u64),
    );
}

/// `WRITERS` threads append single events for `SPELL`; `shared` puts them all on one session.
fn concurrent(url: &str, db: &mut postgres::Client, shared: bool) {
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
    let cpu_before = cpu(db);
    let started = Instant::now();
    let mut times: Vec<Duration> = std::thread::scope(|scope| {
        let writers: Vec<_> = ids
            .iter()
            .map(|id| {
                let (store, stop, done) = (&store, &stop, &done);
                scope.spawn(move || {
                    let mut times = Vec::new();
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        store.append(id, &[event(n)]).unwrap();
                        times.push(t.elapsed());
                        done.fetch_add(1, Ordering::Relaxed);
                        n += 1;
                    }
                    times
                })
            })
            .collect();
        std::thread::sleep(SPELL);
        stop.store(true, Ordering::Relaxed);
        writers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let total = started.elapsed();
    // Read while the writers' connections are still open: a closed backend's CPU is gone.
    let cpu_after = cpu(db);
    let appends = done.load(Ordering::Relaxed);
    println!(
        "single appends, {WRITERS} writers, {label}: appends/s={:.0} p50={:.2?} p99={:.2?} \
         round_trips/append={:.1} {}",
        appends as f64 / total.as_secs_f64(),
        percentile(&mut times, 50),
        percentile(&mut times, 99),
        (store.round_trips() - trips) as f64 / appends as f64,
        cpu_per(cpu_before, cpu_after, appends),
    );
}

/// The disk's own bound where the cluster lives: 1 KB write + fdatasync rounds per second.
fn fsync_rate() {
    const ROUNDS: u32 = 500;
    let root = std::env::var("LOOM_PG_ROOT").unwrap_or_else(|_| "/tmp".into());
    let dir = tempfile::tempdir_in(&root).unwrap();
    let path = dir.path().join("fsync-probe");
    let mut file = std::fs::File::create(&path).unwrap();
    let block = [b'x'; 1024];
    let started = Instant::now();
    for _ in 0..ROUNDS {
        file.write_all(&block).unwrap();
        file.sync_data().unwrap();
    }
    println!(
        "disk ({root}): 1 KB write+fdatasync rounds/s={:.0}",
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
    let mut db = schema.connect();
    let store = PgStore::open(&schema.url).unwrap();
    batches(&store, &mut db);
    concurrent(&schema.url, &mut db, false);
    concurrent(&schema.url, &mut db, true);
}
