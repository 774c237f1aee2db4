//! One run's world: the mock upstream and `loom serve` in this process, on loopback ports, over a
//! fresh SQLite database with durable commits, and the client pool that drives them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use loom_mock_upstream::{Mock, MockHandle};
use loom_server::{AuthMode, Engine, ServeArgs, ServeConfig, ServeError};
use loom_store::{BlobStore, ProxyMode, Store, Workspace};
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// What a run needs from the server's configuration.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ServerOptions {
    /// Overrides `limits.live_sessions`.
    pub(crate) live_sessions: Option<usize>,
    /// Overrides `limits.live_bytes`.
    pub(crate) live_bytes: Option<usize>,
}

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// Through Loom, in this mode, with this budget (fit only).
    Loom(ProxyMode, Option<u64>),
    /// Straight to the mock, as a client without Loom would.
    Direct,
}

/// A call's reply and how long it took, from the first byte sent to the last byte received.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) took: Duration,
    /// Until the first piece of the body arrived (for a stream, its first event).
    pub(crate) first_byte: Duration,
    /// `choices[0].message`, rebuilt from the events for a stream.
    pub(crate) message: Value,
}

/// The database every harness of this run uses instead of a fresh SQLite file: a PostgreSQL URL
/// (`--db`), set once before the scenarios start.
pub(crate) static DATABASE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Whether the server keeps agents' memory (`--memory on`; off unless set, as every figure in
/// docs/performance.md before issue 28 was measured, while `loom serve` keeps it by default):
/// indexed in the background as sessions grow, in the same database.
pub(crate) static MEMORY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Where the server exports its spans (`--otlp`): a collector's URL, or `on` for a sink
/// collector in this process (it reads and drops every batch). Off unless set.
pub(crate) static OTLP: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Where the fresh SQLite database is made (`--db-dir`); Cargo's target folder unless set.
pub(crate) static DB_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The in-process sink collector (`loom_testkit::otlp`: it decodes and counts every batch's
/// spans and drops them), started on first use on a thread of its own.
fn sink_collector() -> Result<&'static loom_testkit::otlp::Collector> {
    static SINK: std::sync::OnceLock<loom_testkit::otlp::Collector> = std::sync::OnceLock::new();
    if let Some(c) = SINK.get() {
        return Ok(c);
    }
    let c = loom_testkit::otlp::Collector::sink().map_err(anyhow::Error::msg)?;
    Ok(SINK.get_or_init(|| c))
}

/// The mock, the server and the client.
#[derive(Debug)]
pub(crate) struct Harness {
    /// The PostgreSQL store, when the run uses one (for its round trips).
    pg: Option<Arc<loom_store::PgStore>>,
    /// Calls sent through Loom.
    proxied: std::sync::atomic::AtomicU64,
    loom: String,
    direct: String,
    mock: MockHandle,
    http: reqwest::Client,
    db: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::result::Result<(), ServeError>>>,
    /// With `--otlp on`: the sink and the spans it had received when this server started.
    sink: Option<(&'static loom_testkit::otlp::Collector, u64)>,
    _dir: tempfile::TempDir,
}

impl Harness {
    /// Starts both servers. The database sits under Cargo's target folder, on the project's disk,
    /// so commits cost what they cost in production (no tmpfs), unless `--db-dir` puts it
    /// elsewhere.
    pub(crate) async fn start(options: ServerOptions) -> Result<Self> {
        let mock = Mock::spawn().await.context("starting the mock upstream")?;
        let dir = tempfile::Builder::new()
            .prefix("loom-load-")
            .tempdir_in(
                DB_DIR
                    .get()
                    .map_or(Path::new(env!("CARGO_TARGET_TMPDIR")), PathBuf::as_path),
            )
            .context("creating the database folder")?;
        let db = dir.path().join("loom.db");
        let mut config = ServeConfig::resolve(
            ServeArgs {
                listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
                db: db.clone(),
                config: None,
                upstream_openai: Some(format!("{}/v1", mock.base_url())),
                upstream_anthropic: Some(mock.base_url()),
                upstream_gemini: Some(mock.base_url()),
                auth: Some(AuthMode::None),
            },
            &|_| None,
        )
        .context("resolving the server's configuration")?;
        if let Some(n) = options.live_bytes {
            config.limits.live_bytes = n;
        }
        if let Some(n) = options.live_sessions {
            config.limits.live_sessions = n;
        }
        let sink = match OTLP.get().map(String::as_str) {
            Some("on") => {
                let c = sink_collector()?;
                Some((c, c.count()))
            }
            _ => None,
        };
        config.telemetry.otlp_endpoint = match OTLP.get().map(String::as_str) {
            None | Some("off") => None,
            Some("on") => sink.map(|(c, _)| c.url().to_owned()),
            Some(url) => Some(url.to_owned()),
        };
        let (store, blobs, pg): (Arc<dyn Store>, Arc<dyn BlobStore>, _) = match DATABASE.get() {
            Some(url) => {
                // The driver blocks on a runtime of its own: opened off the async threads.
                let url = url.clone();
                let pg = tokio::task::spawn_blocking(move || loom_store::PgStore::open(&url))
                    .await
                    .context("opening the PostgreSQL database")?
                    .context("opening the PostgreSQL database")?;
                let pg = Arc::new(pg);
                (pg.clone(), Arc::new(pg.blobs()), Some(pg))
            }
            None => {
                let ws = Workspace::open(&db).context("opening the database")?;
                (Arc::new(ws.store), Arc::new(ws.blobs), None)
            }
        };
        let engine = Engine {
            registry: loom_tokens::Registry::built_in().context("loading the model registry")?,
            policy: loom_core::render::Policy::default(),
            reduce: loom_core::ReduceConfig::default(),
        };
        let memory: Option<Arc<dyn loom_memory::Memory>> = if MEMORY.get() != Some(&true) {
            None
        } else {
            let database = match DATABASE.get() {
                Some(url) => loom_store::Database::Postgres(url.clone()),
                None => loom_store::Database::Sqlite(db.clone()),
            };
            let memory = tokio::task::spawn_blocking(move || loom_memory::open(&database))
                .await
                .context("opening the memory")?
                .context("opening the memory")?;
            Some(Arc::from(memory))
        };
        let state = loom_server::state_with_memory(config, store, blobs, engine, memory)
            .context("building the server's state")?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the server's port")?;
        let loom = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(loom_server::serve(state, listener, async {
            let _ = stopped.await;
        }));
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(1024)
            .build()
            .context("building the client")?;
        Ok(Self {
            pg,
            proxied: std::sync::atomic::AtomicU64::new(0),
            direct: format!("{}/v1/chat/completions", mock.base_url()),
            loom,
            mock,
            http,
            db,
            stop: Some(stop),
            task: Some(task),
            sink,
            _dir: dir,
        })
    }

    /// Sends one Chat request and reads the whole reply.
    pub(crate) async fn chat(&self, via: Via, session: &str, body: Bytes) -> Result<Answer> {
        let req = match via {
            Via::Direct => self.http.post(&self.direct),
            Via::Loom(mode, budget) => {
                self.proxied
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mut req = self
                    .http
                    .post(format!("{}/v1/chat/completions", self.loom))
                    .header("x-loom-session", session)
                    .header("x-loom-mode", mode.as_str());
                if let (ProxyMode::Fit, Some(b)) = (mode, budget) {
                    req = req.header("x-loom-budget", b.to_string());
                }
                req
            }
        };
        let started = Instant::now();
        let response = req
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .with_context(|| format!("session {session}: sending ({via:?})"))?;
        let status = response.status();
        let streamed = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let mut response = response;
        let mut bytes = Vec::new();
        let mut first_byte = None;
        while let Some(piece) = response
            .chunk()
            .await
            .with_context(|| format!("session {session}: reading the reply ({via:?})"))?
        {
            first_byte.get_or_insert_with(|| started.elapsed());
            bytes.extend_from_slice(&piece);
        }
        let took = started.elapsed();
        if !status.is_success() {
            bail!(
                "session {session}: {via:?} answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            );
        }
        let message = if streamed {
            assemble(&String::from_utf8_lossy(&bytes))
                .with_context(|| format!("session {session}: the stream ({via:?})"))?
        } else {
            let reply: Value = serde_json::from_slice(&bytes)
                .with_context(|| format!("session {session}: the reply is not JSON ({via:?})"))?;
            reply["choices"][0]["message"].clone()
        };
        Ok(Answer {
            took,
            first_byte: first_byte.unwrap_or(took),
            message,
        })
    }

    /// The body the mock received last (what Loom sent upstream), serialised again.
    pub(crate) fn last_upstream_body(&self) -> Result<Bytes> {
        let last = self
            .mock
            .requests()
            .pop()
            .context("the mock received no request")?;
        Ok(Bytes::from(serde_json::to_vec(&last.body)?))
    }

    /// Forgets what the mock recorded: it keeps every request, which would otherwise be most of
    /// the process's memory.
    pub(crate) fn forget(&self) {
        self.mock.clear();
    }

    /// The mock, for a task that forgets its requests while clients run.
    pub(crate) fn mock(&self) -> Mock {
        self.mock.mock().clone()
    }

    /// `GET /metrics`.
    pub(crate) async fn metrics(&self) -> Result<super::metrics::Snapshot> {
        let text = self
            .http
            .get(format!("{}/metrics", self.loom))
            .send()
            .await
            .context("reading /metrics")?
            .text()
            .await
            .context("reading /metrics")?;
        Ok(super::metrics::Snapshot::parse(&text))
    }

    /// The database's size on disk, its WAL included.
    pub(crate) fn db_bytes(&self) -> u64 {
        let wal = self.db.with_extension("db-wal");
        [&self.db, &wal]
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum()
    }

    /// Stops the server, letting in-flight requests finish.
    pub(crate) async fn stop(mut self) -> Result<()> {
        if let Some(pg) = &self.pg {
            let calls = self.proxied.load(std::sync::atomic::Ordering::Relaxed);
            let trips = pg.round_trips();
            super::progress(format_args!(
                "PostgreSQL: {trips} round trips for {calls} proxied calls ({:.2} a call, \
                 loading and creating sessions included)",
                trips as f64 / calls.max(1) as f64
            ));
        }
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.context("the server task failed")??;
        }
        // The server's state is gone, so its exporter has sent what it held.
        if let Some((c, before)) = self.sink {
            let calls = self.proxied.load(std::sync::atomic::Ordering::Relaxed);
            let (_, malformed) = c.batches();
            super::progress(format_args!(
                "OTLP: the collector received {} spans for {calls} proxied calls ({malformed} \
                 malformed batches)",
                c.count().saturating_sub(before)
            ));
        }
        Ok(())
    }
}

/// The assistant message a Chat stream carries, rebuilt as an SDK rebuilds it: text and tool
/// calls by index, arguments concatenated.
fn assemble(sse: &str) -> Result<Value> {
    let mut content = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut done = false;
    for data in sse.lines().filter_map(|l| l.strip_prefix("data:")) {
        let data = data.trim_start();
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let chunk: Value = serde_json::from_str(data).context("an event is not JSON")?;
        let delta = &chunk["choices"][0]["delta"];
        if let Some(t) = delta["content"].as_str() {
            content.push_str(t);
        }
        for tc in delta["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"]
                .as_u64()
                .context("a tool call delta has no index")? as usize;
            if calls.len() <= i {
                calls.resize_with(i + 1, Default::default);
            }
            let call = &mut calls[i];
            if let Some(id) = tc["id"].as_str() {
                call.0 = id.to_owned();
            }
            if let Some(n) = tc["function"]["name"].as_str() {
                call.1 = n.to_owned();
            }
            if let Some(a) = tc["function"]["arguments"].as_str() {
                call.2.push_str(a);
            }
        }
    }
    if !done {
        bail!("the stream ended without [DONE]");
    }
    let mut message = json!({
        "role": "assistant",
        "content": if content.is_empty() { Value::Null } else { Value::String(content) },
    });
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .into_iter()
            .map(|(id, name, arguments)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
            })
            .collect();
    }
    Ok(message)
}

/// This process's resident memory and its peak, in KiB, from `/proc/self/status`.
pub(crate) fn rss_kib() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Ticks per second of `/proc`'s CPU times: `USER_HZ`, fixed by the kernel's ABI whatever the
/// kernel's own tick rate.
const USER_HZ: f64 = 100.0;

/// Where utime (then stime) sits among the fields of `/proc/self/stat` that follow the command
/// name: field 14 of the whole line, counting from 1, when the text after `)` starts at field 3.
const UTIME_AFTER_NAME: usize = 14 - 3;

/// CPU time this process has used (user and system, all threads), in seconds.
pub(crate) fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name may hold spaces and parentheses; the fields after its last `)` do not.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    let used = ticks(UTIME_AFTER_NAME)? + ticks(UTIME_AFTER_NAME + 1)?;
    Some(used as f64 / USER_HZ)
}
