//! The PostgreSQL cluster tests run against, and a fresh schema on it for each test.
//!
//! The cluster is the one `LOOM_TEST_PG` names (CI starts one with `scripts/postgres.sh` and
//! sets it), or else one this test binary starts once with that script, watching its own pid so
//! that the cluster is stopped and removed when the binary exits. Only when neither works do the
//! PostgreSQL tests skip, each saying so loudly on stderr; with `LOOM_TEST_PG` set, a cluster
//! that cannot be reached fails them instead.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use postgres::{Client, NoTls};

/// Where the tests' cluster is: `Err` says why there is none.
fn cluster() -> &'static Result<String, String> {
    static URL: OnceLock<Result<String, String>> = OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("LOOM_TEST_PG") {
            return Ok(url);
        }
        let script = SCRIPT;
        // The script's `--watch` stops the cluster once this process (the test binary) exits.
        let out = Command::new("bash")
            .args([script, "start", "--watch", &std::process::id().to_string()])
            .output()
            .map_err(|e| format!("cannot run {script}: {e}"))?;
        let url = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.status.success() || url.is_empty() {
            return Err(format!(
                "{script} start failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(url)
    })
}

/// The test cluster's URL, or `None` after saying loudly why the test is skipped.
#[expect(
    clippy::print_stderr,
    reason = "a skipped test must say so where a tester looks"
)]
pub(crate) fn pg_url() -> Option<&'static str> {
    match cluster() {
        Ok(url) => Some(url),
        Err(why) => {
            eprintln!(
                "\n!!! SKIPPED: no PostgreSQL to test against; set LOOM_TEST_PG=postgres://... \
                 or make scripts/postgres.sh work. {why}\n"
            );
            None
        }
    }
}

/// A schema of its own on the test cluster, dropped with everything in it when this is dropped.
#[derive(Debug)]
pub struct PgSchema {
    /// The schema's name.
    pub name: String,
    /// The cluster's URL with `schema=` set, as Loom's `--db` and `PgStore::open` take it.
    pub url: String,
    /// The cluster's URL as given.
    pub base: String,
}

impl PgSchema {
    /// A plain connection with the schema on its search path, to reach behind the store (from
    /// a thread that drives no async runtime).
    ///
    /// # Panics
    /// When the cluster cannot be reached: in a test, that is the failure to report.
    #[expect(clippy::expect_used, reason = "test support fails loudly")]
    pub fn connect(&self) -> Client {
        let mut client =
            Client::connect(&self.base, NoTls).expect("connecting to the test cluster");
        client
            .batch_execute(&format!("SET search_path TO {}", self.name))
            .expect("setting the search path");
        client
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        // Best effort: a throwaway cluster goes away anyway, a shared one should not fill up.
        let (base, name) = (&self.base, &self.name);
        off_runtime(|| {
            if let Ok(mut client) = Client::connect(base, NoTls) {
                let _ = client.batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"));
            }
        });
    }
}

/// Runs `f` on a thread of its own: the blocking client refuses to run on a thread that drives
/// an async runtime, and these helpers are called from async tests too.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| match scope.spawn(f).join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

/// A new, empty schema on the test cluster; `None` when there is no cluster (see [`pg_url`]).
///
/// # Panics
/// When `LOOM_TEST_PG` names a cluster that cannot be reached, or the schema cannot be made.
#[expect(clippy::expect_used, reason = "test support fails loudly")]
pub fn fresh_schema() -> Option<PgSchema> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = pg_url()?.to_owned();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let name = format!(
        "loom_test_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    off_runtime(|| {
        let mut client = Client::connect(&base, NoTls).expect("connecting to the test cluster");
        client
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .expect("creating a schema on the test cluster");
    });
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}schema={name}");
    Some(PgSchema { name, url, base })
}

/// The project's cluster script.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/postgres.sh");

/// A cluster of one test's own, for faults that would disturb the shared one (a restart); it is
/// stopped and removed when dropped, or when the test binary exits.
#[derive(Debug)]
pub struct Cluster {
    /// Its URL.
    pub url: String,
}

impl Cluster {
    /// Starts one with `scripts/postgres.sh`; `None` (after saying why on stderr) when the script
    /// cannot run here.
    #[expect(
        clippy::print_stderr,
        reason = "a skipped test must say so where a tester looks"
    )]
    pub fn start() -> Option<Self> {
        let out = Command::new("bash")
            .args([SCRIPT, "start", "--watch", &std::process::id().to_string()])
            .output();
        match out {
            Ok(out) if out.status.success() => {
                let url = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                Some(Self { url })
            }
            Ok(out) => {
                eprintln!(
                    "\n!!! SKIPPED: {SCRIPT} start failed ({}): {}\n",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("\n!!! SKIPPED: cannot run {SCRIPT}: {e}\n");
                None
            }
        }
    }

    /// Restarts the server (fast shutdown: open connections are cut, transactions in flight
    /// rolled back), and returns once it accepts connections again.
    ///
    /// # Panics
    /// When the restart fails.
    pub fn restart(&self) {
        let out = Command::new("bash")
            .args([SCRIPT, "restart", &self.url])
            .output();
        match out {
            Ok(out) if out.status.success() => {}
            other => panic!("restarting the test cluster: {other:?}"),
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .args([SCRIPT, "stop", &self.url])
            .output();
    }
}
