//! Two servers on one PostgreSQL database, as two `loom serve` processes behind a load balancer
//! would be: a conversation whose calls alternate between them is one session, logged once, with
//! no stale render state; appends to one session through both stay contiguous and keep the
//! ledger; a server whose pool is exhausted answers 503 in time.
//!
//! Each server has its own `PgStore` (its own pool of connections) and its own in-memory state,
//! as separate processes would; they share nothing but the database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::support::{config, engine};
use loom_core::{EventBody, SessionId};
use loom_mock_upstream::{Mock, MockHandle};
use loom_server::{AppState, AuthMode, ServeConfig};
use loom_store::{new_api_key, Opened, ProxyMode, TenantId};
use loom_testkit::pg::fresh_schema;
use serde_json::{json, Value};
use tokio::sync::oneshot;

/// One server over its own connection to the database.
struct PgServer {
    url: String,
    state: Arc<AppState>,
    http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// Opens the database off the async threads (the store's client blocks).
async fn open(db: &str) -> Opened {
    let db = db.to_owned();
    tokio::task::spawn_blocking(move || loom_store::open(&db))
        .await
        .unwrap()
        .unwrap()
}

async fn serve(db: &str, mock: &MockHandle, mode: ProxyMode) -> PgServer {
    serve_with(db, mock, mode, AuthMode::None).await
}

async fn serve_with(db: &str, mock: &MockHandle, mode: ProxyMode, auth: AuthMode) -> PgServer {
    let mut config = config(db, mock, auth);
    config.default_mode = mode;
    let opened = open(db).await;
    serve_on(config, opened.store, opened.blobs).await
}

/// A server over a store the caller already opened.
async fn serve_on(
    config: ServeConfig,
    store: Arc<dyn loom_store::Store>,
    blobs: Arc<dyn loom_store::BlobStore>,
) -> PgServer {
    let state = loom_server::state(config, store, blobs, engine()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = loom_server::serve(Arc::clone(&state), listener, async {
        let _ = stopped.await;
    });
    let task = tokio::spawn(async move {
        let _ = serving.await;
    });
    PgServer {
        url,
        state,
        http: reqwest::Client::new(),
        stop: Some(stop),
        task: Some(task),
    }
}

impl PgServer {
    async fn post(&self, path: &str, headers: &[(&str, &str)], body: &Value) -> reqwest::Response {
        let mut req = self.http.post(format!("{}{path}", self.url)).json(body);
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        req.send().await.unwrap()
    }

    /// The session's log, read off the async threads.
    async fn log(&self, id: &str) -> Vec<loom_core::Event> {
        let state = Arc::clone(&self.state);
        let id = SessionId::new(id).unwrap();
        tokio::task::spawn_blocking(move || state.store.read(&id, 1..=u64::MAX))
            .await
            .unwrap()
            .unwrap()
    }

    async fn model_calls(&self, id: &str) -> Vec<loom_store::ModelCall> {
        let state = Arc::clone(&self.state);
        let id = SessionId::new(id).unwrap();
        tokio::task::spawn_blocking(move || state.store.model_calls(&id))
            .await
            .unwrap()
            .unwrap()
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap();
        }
    }
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "bash", "description": "Run a command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}])
}

/// A Chat conversation of `turns` calls, call `n` sent to `servers[n % 2]`; returns the messages
/// sent and received.
async fn alternate(servers: [&PgServer; 2], id: &str, turns: usize) -> Vec<Value> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a careful agent."}),
        json!({"role": "user", "content": "please run the tests"}),
    ];
    for turn in 0..turns {
        let body = json!({"model": "gpt-4o", "messages": messages, "tools": tools()});
        let r = servers[turn % 2]
            .post("/v1/chat/completions", &[("x-loom-session", id)], &body)
            .await;
        if r.status() != 200 {
            panic!("turn {turn}: {} {}", r.status(), r.text().await.unwrap());
        }
        // The same session on either server: the other's appends were seen, nothing forked.
        assert_eq!(r.headers()["x-loom-session"], id, "turn {turn}");
        assert!(r.headers().get("x-loom-diverged").is_none(), "turn {turn}");
        let v: Value = r.json().await.unwrap();
        let message = v["choices"][0]["message"].clone();
        messages.push(message.clone());
        match message["tool_calls"].as_array() {
            Some(calls) if !calls.is_empty() => {
                for c in calls {
                    messages.push(json!({"role": "tool", "tool_call_id": c["id"],
                        "content": format!("output at turn {turn}")}));
                }
            }
            _ => messages.push(json!({"role": "user", "content": format!("step {turn}")})),
        }
    }
    // The client's next message is not sent; what was is what the log must hold.
    messages.pop();
    messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_spread_over_two_servers_is_one_session() {
    let Some(schema) = fresh_schema() else {
        return;
    };
    for mode in [ProxyMode::Observe, ProxyMode::Fit] {
        let mock = Mock::spawn().await.unwrap();
        let a = serve(&schema.url, &mock, mode).await;
        let b = serve(&schema.url, &mock, mode).await;
        let id = format!("spread-{mode:?}").to_lowercase();
        // Two conversations at once, each alternating between the servers.
        let other = format!("{id}-2");
        let (messages, others) =
            tokio::join!(alternate([&a, &b], &id, 6), alternate([&b, &a], &other, 6));
        for (id, messages) in [(&id, &messages), (&other, &others)] {
            let log = a.log(id).await;
            assert_eq!(log.len(), messages.len(), "{mode:?} {id}: {log:?}");
            let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
            assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>());
            let replies = log
                .iter()
                .filter(|e| matches!(e.body, EventBody::Assistant { .. }))
                .count();
            assert_eq!(replies, 6, "{mode:?} {id}");
            // One receipt per call, numbered across both servers, each with its usage.
            let calls = b.model_calls(id).await;
            assert_eq!(
                calls.iter().map(|c| c.id).collect::<Vec<_>>(),
                (1..=6).collect::<Vec<u64>>()
            );
            assert!(calls.iter().all(|c| c.usage.is_some()), "{calls:?}");
        }
        a.stop().await;
        b.stop().await;
    }
}

/// Appends through the HTTP API of both servers to one session at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_through_two_servers_stay_contiguous_and_keep_the_ledger() {
    let Some(schema) = fresh_schema() else {
        return;
    };
    let mock = Mock::spawn().await.unwrap();
    let servers = [
        serve(&schema.url, &mock, ProxyMode::Observe).await,
        serve(&schema.url, &mock, ProxyMode::Observe).await,
    ];
    let r = servers[0]
        .post("/loom/v1/sessions", &[], &json!({"id": "s", "events": []}))
        .await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    const EACH: usize = 20;
    let appended = futures_join(&servers, |n, i| {
        json!({"events": [
            {"ts_ms": 1, "kind": "user", "content": format!("{n}/{i}")},
            // Both servers try to make the same call: the ledger takes it once.
            {"ts_ms": 2, "kind": "assistant", "content": null,
             "tool_calls": [{"id": format!("call-{i}"), "name": "bash", "arguments": "{}"}]}
        ]})
    })
    .await;
    // Of each pair of identical calls exactly one went in; the other was refused whole.
    let accepted = appended.iter().filter(|s| **s == 200).count();
    assert_eq!(accepted, EACH, "{appended:?}");
    assert!(
        appended.iter().all(|s| *s == 200 || *s == 400),
        "{appended:?}"
    );
    let log = servers[1].log("s").await;
    let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=(2 * EACH) as u64).collect::<Vec<_>>());
    for s in servers {
        s.stop().await;
    }

    /// Runs `EACH` appends on each server at once; returns their statuses.
    async fn futures_join(
        servers: &[PgServer; 2],
        body: impl Fn(usize, usize) -> Value,
    ) -> Vec<u16> {
        let mut tasks = Vec::new();
        for (n, s) in servers.iter().enumerate() {
            for i in 0..EACH {
                let req = s
                    .http
                    .post(format!("{}/loom/v1/sessions/s/events", s.url))
                    .json(&body(n, i));
                tasks.push(tokio::spawn(
                    async move { req.send().await.unwrap().status() },
                ));
            }
        }
        let mut statuses = Vec::new();
        for t in tasks {
            statuses.push(t.await.unwrap().as_u16());
        }
        statuses
    }
}

/// A server whose one connection is held answers 503 within its checkout timeout, and serves
/// again once the connection is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_pool_is_a_timely_503() {
    let Some(schema) = fresh_schema() else {
        return;
    };
    let db = format!("{}&pool_size=1&checkout_timeout_ms=300", schema.url);
    let mock = Mock::spawn().await.unwrap();
    let s = serve(&db, &mock, ProxyMode::Observe).await;
    let started = Instant::now();
    // A blob upload whose input never ends holds the server's one connection.
    let state = Arc::clone(&s.state);
    let (release, held) = std::sync::mpsc::channel::<()>();
    let blocker =
        tokio::task::spawn_blocking(move || state.blobs.put_reader(&mut Held(held)).map(|_| ()));
    let mut status = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let t = Instant::now();
        let r = s
            .http
            .get(format!("{}/loom/v1/sessions", s.url))
            .send()
            .await
            .unwrap();
        status = r.status().as_u16();
        if status == 503 {
            let waited = t.elapsed();
            let body: Value = r.json().await.unwrap();
            assert_eq!(body["error"]["type"], "unavailable", "{body}");
            assert!(waited < Duration::from_secs(3), "waited {waited:?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        status,
        503,
        "never unavailable after {:?}",
        started.elapsed()
    );
    release.send(()).unwrap();
    blocker.await.unwrap().unwrap();
    let r = s
        .http
        .get(format!("{}/loom/v1/sessions", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    s.stop().await;
}

/// A reader that blocks until told to finish: it holds the connection of the blob being stored.
struct Held(std::sync::mpsc::Receiver<()>);

impl std::io::Read for Held {
    fn read(&mut self, _buf: &mut [u8]) -> std::io::Result<usize> {
        let _ = self.0.recv();
        Ok(0)
    }
}

/// Keys live in the database: one made once works on every server, and a tenant's sessions are
/// its own whichever server is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_tenants_hold_across_servers() {
    let Some(schema) = fresh_schema() else {
        return;
    };
    let mock = Mock::spawn().await.unwrap();
    let a = serve_with(&schema.url, &mock, ProxyMode::Observe, AuthMode::Keys).await;
    let b = serve_with(&schema.url, &mock, ProxyMode::Observe, AuthMode::Keys).await;
    let key = |tenant: &str| {
        let state = Arc::clone(&a.state);
        let tenant = TenantId::new(tenant).unwrap();
        tokio::task::spawn_blocking(move || {
            let (secret, key) = new_api_key(tenant, None, None, 1).unwrap();
            state.store.create_key(&key).unwrap();
            secret
        })
    };
    let acme = key("acme").await.unwrap();
    let globex = key("globex").await.unwrap();
    let get = |s: &PgServer, path: &str, key: &str| {
        s.http
            .get(format!("{}{path}", s.url))
            .bearer_auth(key)
            .send()
    };
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
    let r = a
        .http
        .post(format!("{}/v1/chat/completions", a.url))
        .bearer_auth(&acme)
        .header("x-loom-session", "t1")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The session is acme's on the other server too, and absent for globex on both.
    assert_eq!(
        get(&b, "/loom/v1/sessions/t1", &acme)
            .await
            .unwrap()
            .status(),
        200
    );
    for s in [&a, &b] {
        let r = get(s, "/loom/v1/sessions/t1", &globex).await.unwrap();
        assert_eq!(r.status(), 404);
        let listed: Value = get(s, "/loom/v1/sessions", &globex)
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(!listed.to_string().contains("t1"), "{listed}");
    }
    // A key revoked through one server is refused by the other.
    let state = Arc::clone(&b.state);
    tokio::task::spawn_blocking(move || {
        let keys = state.store.keys().unwrap();
        let acme_key = keys
            .iter()
            .find(|k| k.key.tenant.as_str() == "acme")
            .unwrap();
        state.store.revoke_key(&acme_key.key.id, 2).unwrap();
    })
    .await
    .unwrap();
    assert_eq!(
        get(&a, "/loom/v1/sessions/t1", &acme)
            .await
            .unwrap()
            .status(),
        401
    );
    a.stop().await;
    b.stop().await;
}

/// PostgreSQL restarted while two servers carry conversations: the servers reconnect and keep
/// serving, and every turn a client was answered for is in the log once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_ride_out_a_database_restart() {
    let Some(cluster) = tokio::task::spawn_blocking(loom_testkit::pg::Cluster::start)
        .await
        .unwrap()
    else {
        return;
    };
    let cluster = Arc::new(cluster);
    // Requests wait for the database to come back rather than fail.
    let db = format!("{}?checkout_timeout_ms=20000", cluster.url);
    let mock = Mock::spawn().await.unwrap();
    let a = serve(&db, &mock, ProxyMode::Fit).await;
    let b = serve(&db, &mock, ProxyMode::Fit).await;
    let restarts_done = std::sync::atomic::AtomicBool::new(false);
    let ((), conversations) = tokio::join!(
        async {
            for _ in 0..2 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let cluster = Arc::clone(&cluster);
                tokio::task::spawn_blocking(move || cluster.restart())
                    .await
                    .unwrap();
            }
            restarts_done.store(true, std::sync::atomic::Ordering::Relaxed);
        },
        async {
            // Conversations go on until both restarts are over, so that they overlap them.
            let mut all = Vec::new();
            let mut n = 0;
            while n < 3 || !restarts_done.load(std::sync::atomic::Ordering::Relaxed) {
                all.push((n, alternate([&a, &b], &format!("r{n}"), 4).await));
                n += 1;
            }
            all
        }
    );
    for (n, messages) in conversations {
        let log = a.log(&format!("r{n}")).await;
        assert_eq!(log.len(), messages.len(), "conversation {n}");
        let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>());
    }
    a.stop().await;
    b.stop().await;
    tokio::task::spawn_blocking(move || drop(cluster))
        .await
        .unwrap();
}

/// Issue 14's hot-path target, measured: the round trips to the database that one proxied call
/// in `fit` mode costs before its request goes upstream (catch up with what is new, write the
/// turn), and in all (recording the reply and its usage is one more, after the upstream
/// answers). They are counted on the stores of both servers (`PgStore::round_trips`): when the
/// upstream receives the request, and once the call's background work has had time to finish.
/// First a conversation on one server (its cached state is current at every call), then one
/// alternating between two (each call's server missed the turn the other one served).
/// `--nocapture` shows the counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fit_calls_cost_two_round_trips_before_the_upstream() {
    const TURNS: usize = 20;
    let Some(schema) = fresh_schema() else {
        return;
    };
    let mut stores = Vec::new();
    for _ in 0..2 {
        let url = schema.url.clone();
        let store = tokio::task::spawn_blocking(move || loom_store::PgStore::open(&url))
            .await
            .unwrap()
            .unwrap();
        stores.push(Arc::new(store));
    }
    let counted: Vec<Arc<loom_store::PgStore>> = stores.clone();
    let trips = move || counted.iter().map(|s| s.round_trips()).sum::<u64>();
    // The mock, behind a layer that notes the count when a request reaches it.
    let at_upstream = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let noted = Arc::clone(&at_upstream);
    let count = trips.clone();
    let app = Mock::new().router().layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            noted.lock().unwrap().push(count());
            next.run(request)
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let placeholder = Mock::spawn().await.unwrap();
    let mut servers = Vec::new();
    for store in &stores {
        let blobs = Arc::new(store.blobs());
        let mut config = config(&schema.url, &placeholder, AuthMode::None);
        config.openai.base_url = format!("{upstream}/v1");
        config.anthropic.base_url = upstream.clone();
        config.default_mode = ProxyMode::Fit;
        servers.push(serve_on(config, Arc::clone(store) as _, blobs).await);
    }
    // The blocking client connects, asks and is dropped on a thread of its own, away from the
    // runtime's (where it would panic).
    let mut cluster = || {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    schema
                        .connect()
                        .query("SELECT pid FROM pg_stat_activity", &[])
                        .ok()
                        .map(|rows| rows.iter().map(|row| row.get(0)).collect::<Vec<i32>>())
                })
                .join()
                .unwrap()
        })
    };
    let mut report = Vec::new();
    for (label, on) in [("one server", [0, 0]), ("two servers", [0, 1])] {
        let id = label.replace(' ', "-");
        let mut messages = vec![
            json!({"role": "system", "content": "You are a careful agent."}),
            json!({"role": "user", "content": "please run the tests"}),
        ];
        let (mut before_upstream, mut total) = (Vec::new(), Vec::new());
        let cpu_before = database_cpu(&mut cluster);
        for turn in 0..TURNS {
            let before = trips();
            let body = json!({"model": "gpt-4o", "messages": messages, "tools": tools()});
            let r = servers[on[turn % 2]]
                .post("/v1/chat/completions", &[("x-loom-session", &id)], &body)
                .await;
            assert_eq!(r.status(), 200, "{label}, turn {turn}");
            let v: Value = r.json().await.unwrap();
            // Work a call leaves to run after its answer is part of its cost.
            tokio::time::sleep(Duration::from_millis(200)).await;
            total.push(trips() - before);
            let reached = at_upstream
                .lock()
                .unwrap()
                .pop()
                .expect("the upstream was called");
            before_upstream.push(reached - before);
            let message = v["choices"][0]["message"].clone();
            messages.push(message.clone());
            match message["tool_calls"].as_array() {
                Some(calls) if !calls.is_empty() => {
                    for c in calls {
                        messages.push(json!({"role": "tool", "tool_call_id": c["id"],
                            "content": format!("output at turn {turn}")}));
                    }
                }
                _ => messages.push(json!({"role": "user", "content": format!("step {turn}")})),
            }
        }
        let cpu = database_cpu(&mut cluster)
            .zip(cpu_before)
            .map(|(after, before)| format!("{:.2}", (after - before) * 1000.0 / TURNS as f64));
        report.push((label, before_upstream, total, cpu));
    }
    for (label, before_upstream, total, cpu) in &report {
        println!(
            "fit mode, {label}: round trips per call before the upstream {before_upstream:?}, \
             in all {total:?} (first call first); database CPU ms per call: {}",
            cpu.as_deref().unwrap_or("n/a")
        );
    }
    for server in servers {
        server.stop().await;
    }
    // The first call of a conversation creates its session (and the first call a server sees
    // of one loads it); the target is the calls after them.
    for (label, before_upstream, total, _) in &report {
        let steady = if *label == "one server" { 1 } else { 2 };
        assert!(
            before_upstream[steady..].iter().all(|&n| n <= 2),
            "{label}: round trips before the upstream {before_upstream:?}"
        );
        assert!(
            total[steady..].iter().all(|&n| n <= 3),
            "{label}: round trips per call {total:?}"
        );
    }
}

/// CPU seconds the cluster's processes (`pids` lists them) have used, from `/proc`; `None` when
/// a process cannot be read (a cluster on another machine).
fn database_cpu(pids: &mut impl FnMut() -> Option<Vec<i32>>) -> Option<f64> {
    pids()?
        .iter()
        .map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command's closing parenthesis: the state, then utime is the 12th field.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            let ticks =
                fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
            Some(ticks as f64 / 100.0)
        })
        .sum()
}
