//! `loom serve` as it is deployed: the real binary, two processes on one PostgreSQL database
//! behind a client that spreads its calls over both, and one of them killed with SIGKILL in the
//! middle of a write storm. The upstream is the mock provider, in this process.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loom_core::{EventBody, SessionId};
use loom_mock_upstream::{Mock, MockHandle};
use loom_store::{PgStore, Store};
use loom_testkit::pg::fresh_schema;
use serde_json::{json, Value};

/// A `loom serve` process; killed when dropped.
pub(crate) struct Server {
    child: Child,
    pub(crate) url: String,
}

impl Server {
    fn start(db: &str, upstream: &str) -> Self {
        Self::spawn(&[
            "--db",
            db,
            "--upstream-openai",
            &format!("{upstream}/v1"),
            "--upstream-anthropic",
            upstream,
        ])
    }

    /// `loom serve --listen 127.0.0.1:0 ARGS`, once it says where it listens.
    pub(crate) fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_loom"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "warn")
            .env_remove("LOOM_DB")
            .env_remove("LOOM_EMBEDDER")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_owned();
        Self { child, url }
    }

    /// SIGKILL: no shutdown, no flush, nothing but what the database already holds.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The mock upstream on a runtime of its own.
fn mock() -> (tokio::runtime::Runtime, MockHandle) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let handle = rt
        .block_on(Mock::new().serve("127.0.0.1:0".parse().unwrap()))
        .unwrap();
    (rt, handle)
}

/// One chat call; the reply's message, or why there is none.
fn chat(server: &str, session: &str, messages: &[Value]) -> Result<Value, String> {
    let body = json!({"model": "gpt-4o", "messages": messages});
    let response = ureq::post(&format!("{server}/v1/chat/completions"))
        .set("authorization", "Bearer sk-client")
        .set("content-type", "application/json")
        .set("x-loom-session", session)
        .set("x-loom-mode", "fit")
        .set("x-loom-budget", "4000")
        .timeout(Duration::from_secs(30))
        .send_string(&body.to_string())
        .map_err(|e| e.to_string())?;
    let text = response.into_string().map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    Ok(v["choices"][0]["message"].clone())
}

fn user(text: String) -> Value {
    json!({"role": "user", "content": text})
}

/// The session `id` and its forks, each with its events, read straight from the database.
fn logs(store: &PgStore, id: &str) -> BTreeMap<String, Vec<loom_core::Event>> {
    store
        .sessions()
        .unwrap()
        .into_iter()
        .filter(|s| s.id.as_str() == id || s.id.as_str().starts_with(&format!("{id}~")))
        .map(|s| {
            let events = store.read(&s.id, 1..=s.event_count.max(1)).unwrap();
            (s.id.to_string(), events)
        })
        .collect()
}

fn assistant_texts(events: &[loom_core::Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::Assistant {
                content: Some(c), ..
            } => Some(c.text().into_owned()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_conversation_spread_over_two_servers_is_one_log() {
    let Some(schema) = fresh_schema() else {
        return;
    };
    let (_rt, upstream) = mock();
    let servers = [
        Server::start(&schema.url, &upstream.base_url()),
        Server::start(&schema.url, &upstream.base_url()),
    ];
    let mut messages = Vec::new();
    for turn in 0..12 {
        messages.push(user(format!("turn {turn}: {}", "more context ".repeat(60))));
        let server = &servers[turn % 2].url;
        let reply = chat(server, "spread", &messages).unwrap();
        messages.push(reply);
    }
    let store = PgStore::open(&schema.url).unwrap();
    let logs = logs(&store, "spread");
    assert_eq!(logs.len(), 1, "no fork: {:?}", logs.keys());
    let events = &logs["spread"];
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=24).collect::<Vec<u64>>(),
        "contiguous and unique"
    );
    let calls = store
        .model_calls(&SessionId::new("spread").unwrap())
        .unwrap();
    assert_eq!(calls.len(), 12, "one receipt per call, from both servers");
    assert!(
        calls.iter().all(|c| c.usage.is_some()),
        "every call's usage"
    );
}

#[test]
fn a_server_killed_mid_storm_loses_nothing_it_acknowledged() {
    let Some(schema) = fresh_schema() else {
        return;
    };
    let (_rt, upstream) = mock();
    let mut victim = Server::start(&schema.url, &upstream.base_url());
    let survivor = Server::start(&schema.url, &upstream.base_url());
    let urls = [victim.url.clone(), survivor.url.clone()];
    let killed = Arc::new(AtomicBool::new(false));
    // Per session: every reply a client received, in order, and how many came after the kill.
    let acknowledged: Arc<Mutex<BTreeMap<String, Vec<String>>>> = Arc::default();
    let after_kill: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let clients: Vec<_> = (0..6)
        .map(|c| {
            let (urls, killed, acknowledged, after_kill) = (
                urls.clone(),
                Arc::clone(&killed),
                Arc::clone(&acknowledged),
                Arc::clone(&after_kill),
            );
            std::thread::spawn(move || {
                let session = format!("storm-{c}");
                let mut messages = Vec::new();
                let started = Instant::now();
                let mut turn = 0;
                while started.elapsed() < Duration::from_secs(4) && turn < 200 {
                    if messages
                        .last()
                        .is_none_or(|m: &Value| m["role"] == "assistant")
                    {
                        messages.push(user(format!("client {c} turn {turn}")));
                    }
                    // Both servers while both live; the survivor once one is gone.
                    let dead = killed.load(Ordering::SeqCst);
                    let server = if dead { &urls[1] } else { &urls[turn % 2] };
                    match chat(server, &session, &messages) {
                        Ok(reply) => {
                            let text = reply["content"].as_str().unwrap_or_default().to_owned();
                            acknowledged
                                .lock()
                                .unwrap()
                                .entry(session.clone())
                                .or_default()
                                .push(text);
                            if dead {
                                *after_kill
                                    .lock()
                                    .unwrap()
                                    .entry(session.clone())
                                    .or_default() += 1;
                            }
                            messages.push(reply);
                            turn += 1;
                        }
                        // The call died with its server: the client retries the same history.
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    victim.kill();
    killed.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().unwrap();
    }
    let store = PgStore::open(&schema.url).unwrap();
    let acknowledged = acknowledged.lock().unwrap();
    assert_eq!(acknowledged.len(), 6, "every client was answered");
    let after_kill = after_kill.lock().unwrap();
    assert_eq!(
        after_kill.len(),
        6,
        "every client went on with the surviving server: {after_kill:?}"
    );
    for (session, replies) in acknowledged.iter() {
        assert!(replies.len() > 5, "{session}: {} replies", replies.len());
        let logs = logs(&store, session);
        for (id, events) in &logs {
            let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
            let expected: Vec<u64> = (1..=events.len() as u64).collect();
            assert_eq!(seqs, expected, "{id}: contiguous and unique");
        }
        // Every reply the client received is in the log: in the session, or in the fork its
        // retry started (a reply logged but lost with the server is not the client's).
        let logged: Vec<String> = logs.values().flat_map(|e| assistant_texts(e)).collect();
        for reply in replies {
            assert!(
                logged.contains(reply),
                "{session}: acknowledged reply {reply:?} is not in the log"
            );
        }
    }
}
