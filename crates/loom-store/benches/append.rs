//! SQLite append throughput and commit latency, with durable commits (`synchronous=FULL`).
//!
//! Two shapes, as the targets name them: batches of 100 events of 1 KB, and single-event
//! appends. Criterion measures throughput; criterion reports means, so a second, plain timed loop
//! records every commit and prints p50 and p99 latency and the events/s it sustained.
//!
//! Run: `cargo bench -p loom-store --bench append`. The database lives under Cargo's target tmp
//! folder, on the same disk as the project, because the disk's fsync rate bounds every figure.

// A benchmark that cannot set up has nothing to measure: it stops with the error.
#![expect(clippy::unwrap_used, reason = "benchmark setup fails loudly")]

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use loom_core::{AgentId, EventBody, NewEvent, SessionId};
use loom_store::{NewSession, SqliteStore, Store};

/// Size of one event's stored JSON body, in bytes.
const EVENT_BYTES: usize = 1024;
/// Bytes of `{"kind":"user","content":""}` around the text.
const BODY_OVERHEAD: usize = 29;

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

fn open(dir: &Path, name: &str) -> (SqliteStore, SessionId) {
    let store = SqliteStore::open(dir.join(format!("{name}.db"))).unwrap();
    let id = SessionId::new(name).unwrap();
    let session = NewSession {
        id: id.clone(),
        agent: AgentId::new("bench").unwrap(),
        parent: None,
        created_ms: 0,
    };
    store.create_session(&session, &[]).unwrap();
    (store, id)
}

fn append(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut group = c.benchmark_group("sqlite_append");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(8));
    for batch in [100_usize, 1] {
        let (store, id) = open(dir.path(), &format!("criterion_{batch}"));
        // Built once: the figure is the store's cost, not the builder's.
        let events: Vec<NewEvent> = (0..batch as u64).map(event).collect();
        group.throughput(Throughput::Elements(batch as u64));
        group.bench_function(format!("batch_{batch}_1KB_durable"), |b| {
            b.iter(|| store.append(&id, &events).unwrap());
        });
    }
    group.finish();
}

/// Commits timed one by one; criterion's mean hides the tail that fsync produces.
fn latency_report(dir: &Path, label: &str) {
    let mut out = std::io::stdout().lock();
    for (batch, commits) in [(100_usize, 600), (1, 3000)] {
        let (store, id) = open(dir, &format!("latency_{batch}"));
        let events: Vec<NewEvent> = (0..batch as u64).map(event).collect();
        let mut times = Vec::with_capacity(commits);
        let started = Instant::now();
        for _ in 0..commits {
            let t = Instant::now();
            store.append(&id, &events).unwrap();
            times.push(t.elapsed());
        }
        let total = started.elapsed();
        times.sort_unstable();
        let pct = |p: usize| times[(times.len() * p / 100).min(times.len() - 1)];
        let _ = writeln!(
            out,
            "{label}: batch={batch:<3} commits={commits} events/s={:.0} commits/s={:.0} \
             p50={:.2?} p99={:.2?} max={:.2?}",
            (commits * batch) as f64 / total.as_secs_f64(),
            commits as f64 / total.as_secs_f64(),
            pct(50),
            pct(99),
            times[times.len() - 1],
        );
    }
}

/// The disk's own bound: how many 1 KB write + fdatasync rounds it completes per second. No
/// durable commit can be faster than one of these.
fn fsync_rate(dir: &Path) {
    const ROUNDS: u32 = 500;
    let path = dir.join("fsync-probe");
    let mut file = std::fs::File::create(&path).unwrap();
    let block = [b'x'; 1024];
    let started = Instant::now();
    for _ in 0..ROUNDS {
        file.write_all(&block).unwrap();
        file.sync_data().unwrap();
    }
    let rate = f64::from(ROUNDS) / started.elapsed().as_secs_f64();
    let _ = writeln!(
        std::io::stdout().lock(),
        "disk: 1 KB write+fdatasync rounds/s={rate:.0}"
    );
    let _ = std::fs::remove_file(path);
}

fn reports(_: &mut Criterion) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    fsync_rate(dir.path());
    latency_report(dir.path(), "disk");
    // On tmpfs an fsync costs nothing, so this is the store's own (CPU) ceiling.
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        let dir = tempfile::tempdir_in(shm).unwrap();
        latency_report(dir.path(), "tmpfs");
    }
}

criterion_group!(benches, append, reports);
criterion_main!(benches);
