//! The wire corpus: every request body the real agent CLIs sent in the client suite
//! (`tests/clients/fixtures/CLIENT/SCENARIO/NNN.json`, written by `tests/clients/run.sh`),
//! replayed through the proxy in `observe` and `fit`. What a real client sends is the spec: none
//! of it is refused, `observe` forwards it byte for byte, and `fit` never falls back or sends a
//! request that fails the provider's rules, also at a budget that forces compaction points.

use std::path::{Path, PathBuf};

use loom_server::AuthMode;
use loom_store::ProxyMode;
use serde_json::Value;

use super::support::{start, text};

/// One recorded request.
struct Recorded {
    name: String,
    path: String,
    query: Option<String>,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Headers that belong to the recorded connection, not to the request.
const CONNECTION_HEADERS: [&str; 7] = [
    "host",
    "content-length",
    "connection",
    "accept-encoding",
    "x-api-key",
    "authorization",
    "transfer-encoding",
];

/// The opening words of the task every client of the suite is given.
const TASK: &[u8] = b"calc.py has bugs";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients/fixtures")
}

/// The conversations of the corpus: each client's scenarios, their requests in order.
fn conversations() -> Vec<(String, Vec<Recorded>)> {
    let mut out = Vec::new();
    let Ok(clients) = std::fs::read_dir(corpus_dir()) else {
        return out;
    };
    let mut clients: Vec<PathBuf> = clients.map(|e| e.unwrap().path()).collect();
    clients.sort();
    for client in clients.iter().filter(|p| p.is_dir()) {
        let mut scenarios: Vec<PathBuf> = std::fs::read_dir(client)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        scenarios.sort();
        for scenario in scenarios {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&scenario)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect();
            files.sort();
            let requests = files.iter().filter_map(|f| read(f)).collect();
            let name = format!(
                "{}/{}",
                client.file_name().unwrap().to_string_lossy(),
                scenario.file_name().unwrap().to_string_lossy()
            );
            out.push((name, requests));
        }
    }
    out
}

/// A fixture file as a request; `None` for what is not a proxied call (a model list).
fn read(file: &Path) -> Option<Recorded> {
    let v: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    let path = v["path"].as_str()?.to_owned();
    if !matches!(
        path.as_str(),
        "/v1/messages" | "/v1/chat/completions" | "/v1/responses"
    ) || v["method"] != "POST"
    {
        return None;
    }
    let body = match v.get("body_raw").and_then(Value::as_str) {
        Some(raw) => raw.as_bytes().to_vec(),
        None => serde_json::to_vec(&v["body"]).unwrap(),
    };
    let headers = v["headers"]
        .as_object()
        .map(|h| {
            h.iter()
                .filter(|(n, _)| !CONNECTION_HEADERS.contains(&n.to_lowercase().as_str()))
                .filter_map(|(n, v)| Some((n.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    Some(Recorded {
        name: file.display().to_string(),
        path,
        query: v["query"]
            .as_str()
            .filter(|q| !q.is_empty())
            .map(str::to_owned),
        headers,
        body,
    })
}

/// Whether the session's last receipt sent every event verbatim, with no compaction point.
fn whole_render(s: &super::support::Server, id: &str) -> bool {
    let id = loom_core::SessionId::new(id).unwrap();
    let Some(call) = s.store().last_model_call(&id).unwrap() else {
        return false;
    };
    let receipt = &call.call.receipt["receipt"];
    receipt["points"] == 0
        && [
            "stubbed",
            "elided",
            "thinned",
            "diffed",
            "grouped",
            "summarized",
            "dropped",
        ]
        .iter()
        .all(|k| receipt[k].as_array().is_none_or(Vec::is_empty))
}

/// A budget that forces compaction points on every client's longer conversations while staying
/// above most of its requests' floor: qwen-code's own system prompt, tools and harness context
/// are about 17.6k tokens, above the others' 12,000.
fn compacting_budget(conversation: &str) -> &'static str {
    if conversation.starts_with("qwen/") {
        "24000"
    } else {
        "12000"
    }
}

async fn replay(mode: ProxyMode, compacting: bool) {
    let conversations = conversations();
    assert!(
        !conversations.is_empty(),
        "no wire corpus under {}",
        corpus_dir().display()
    );
    let (mut fitted, mut floors) = (0usize, 0usize);
    for (name, requests) in conversations {
        let budget = compacting.then(|| compacting_budget(&name));
        let s = start(AuthMode::None, mode).await;
        for r in &requests {
            let url = match &r.query {
                Some(q) => format!("{}{}?{q}", s.url, r.path),
                None => format!("{}{}", s.url, r.path),
            };
            let mut req = s
                .http
                .post(url)
                .header("authorization", "Bearer sk-test")
                .header("x-api-key", "sk-ant-test")
                .body(r.body.clone());
            for (n, v) in &r.headers {
                req = req.header(n.as_str(), v.as_str());
            }
            if let Some(b) = budget {
                req = req.header("x-loom-budget", b);
            }
            let resp = req.send().await.unwrap();
            let status = resp.status();
            let session = resp
                .headers()
                .get("x-loom-session")
                .map(|v| v.to_str().unwrap_or_default().to_owned());
            let warning = resp
                .headers()
                .get("x-loom-warning")
                .map(|w| w.to_str().unwrap_or_default().to_owned());
            let answer = text(resp).await;
            // At a small budget a request whose floor (system prompt, tools, the task and the
            // latest turn) is above it gets Loom's typed 400 that says so: the contract.
            if budget.is_some() && status == 400 && answer.contains("irreducible floor") {
                floors += 1;
                continue;
            }
            fitted += 1;
            assert_eq!(
                status, 200,
                "{name} {mode:?} {budget:?}: {} was refused: {answer}",
                r.name
            );
            assert!(
                warning
                    .as_deref()
                    .is_none_or(|w| !w.contains("unfitted") && !w.contains("unlogged")),
                "{name} {mode:?} {budget:?}: {}: {warning:?}",
                r.name
            );
            let sent = s.mock.requests().last().unwrap().clone();
            assert_eq!(sent.query, r.query, "{}", r.name);
            // The suite's task is pinned: a fitted request keeps it, also behind the harness's
            // own messages (Codex's `<environment_context>`, Claude Code's reminders).
            if contains(&r.body, TASK) {
                assert!(
                    contains(&sent.raw, TASK),
                    "{name} {mode:?} {budget:?}: {} lost the task",
                    r.name
                );
            }
            // `fit` sends the client's own bytes while the render leaves nothing out.
            let whole = mode == ProxyMode::Observe
                || session.as_deref().is_some_and(|id| whole_render(&s, id));
            if whole {
                assert!(
                    sent.raw == r.body,
                    "{name} {mode:?}: {} was not forwarded byte for byte",
                    r.name
                );
            }
        }
    }
    assert!(
        fitted > floors,
        "{fitted} requests sent, {floors} below their floor"
    );
}

#[tokio::test]
async fn every_request_of_the_real_clients_passes_in_observe_byte_for_byte() {
    replay(ProxyMode::Observe, false).await;
}

#[tokio::test]
async fn every_request_of_the_real_clients_passes_in_fit() {
    replay(ProxyMode::Fit, false).await;
}

#[tokio::test]
async fn every_request_of_the_real_clients_passes_in_fit_at_a_budget_that_compacts() {
    replay(ProxyMode::Fit, true).await;
}
