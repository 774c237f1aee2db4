//! Conformance: requests generated from the providers' own descriptions, sent through the proxy.
//!
//! `loom_testkit::generate` builds valid requests for each API — Chat Completions and Responses
//! from OpenAI's published description, Anthropic Messages from a description written from the
//! Anthropic SDK's request types — covering every branch the descriptions allow (content as
//! strings and parts, every role and item type, tool choices, parallel calls, reasoning and
//! thinking, images, audio, files, refusals, unknown extra fields). Each request goes through the
//! proxy in-process (`tower::ServiceExt::oneshot`) with the mock upstream behind it, twice:
//!
//! - in `observe`, Loom must not refuse it, must log it (no "forwarded unlogged"), and the
//!   upstream must receive the client's exact bytes;
//! - in `fit`, at a budget below the conversation's size (a compaction point), Loom must not
//!   refuse it (a budget under the irreducible floor is raised to the floor and tried again),
//!   must not fall back (no "failed Loom's check" warning, `fit_check_failed` stays 0 on
//!   `/metrics`), and every request the upstream receives must be valid by the same description
//!   and keep the provider's pairing rules (`loom_testkit::generate::pairing`).
//!
//! `LOOM_CONFORMANCE_CASES=N` sets the requests per API (default [`CASES`]),
//! `LOOM_CONFORMANCE_SEED=S` the first seed (default 0: the same requests every run), and
//! `LOOM_CONFORMANCE_REUSED_IDS=1` makes call ids repeat across turns (`call_0` every turn).
//! A failure names the API and seed; `cargo run -p loom-testkit --example generate -- API SEED`
//! prints the request. What the suite found is kept as fixed fixtures in
//! `tests/fixtures/conformance/`, checked by [`fixtures`] on every run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, Request};
use axum::Router;
use http_body_util::BodyExt;
use loom_mock_upstream::{Mock, MockHandle};
use loom_server::{AppState, AuthMode};
use loom_store::{ProxyMode, Workspace};
use loom_testkit::generate::{self, pairing, Generated, Options};
use loom_testkit::OpenApi;
use serde_json::Value;
use tower::ServiceExt;

/// Generated requests per API.
const CASES: u64 = 10_000;
/// Longest one request may take before the suite calls it hung.
const HANG: Duration = Duration::from_secs(30);

/// One API under test: its route, its description and its generator.
struct Target {
    name: &'static str,
    path: &'static str,
    schema: &'static str,
    spec: OpenApi,
    generate: fn(&OpenApi, u64, Options) -> Generated,
    pairs: fn(&Value) -> Result<(), String>,
    headers: &'static [(&'static str, &'static str)],
    /// The API, and the tokenizer and image rule of a model of it: every generated request must
    /// also be countable (`loom_tokens::count_request`, what `count_tokens` answers with).
    api: loom_core::Api,
    tokenizer: loom_tokens::Tokenizer,
    images: loom_tokens::ImageRule,
}

/// The tokenizer and image rule of `model`.
fn counter(model: &str) -> (loom_tokens::Tokenizer, loom_tokens::ImageRule) {
    let registry = loom_tokens::Registry::built_in().unwrap();
    let info = registry.lookup(model).unwrap();
    (loom_tokens::Tokenizer::for_model(info).unwrap(), info.image)
}

impl Target {
    fn chat() -> Option<Self> {
        let (tokenizer, images) = counter("gpt-4o");
        Some(Self {
            name: "chat",
            path: "/v1/chat/completions",
            schema: "CreateChatCompletionRequest",
            spec: super::support::openai_spec()?,
            generate: generate::chat,
            pairs: pairing::chat,
            headers: &[],
            api: loom_core::Api::OpenaiChat,
            tokenizer,
            images,
        })
    }

    fn responses() -> Option<Self> {
        let (tokenizer, images) = counter("gpt-4o");
        Some(Self {
            name: "responses",
            path: "/v1/responses",
            schema: "CreateResponse",
            spec: super::support::openai_spec()?,
            generate: generate::responses,
            pairs: pairing::responses,
            headers: &[],
            api: loom_core::Api::OpenaiResponses,
            tokenizer,
            images,
        })
    }

    fn messages() -> Self {
        let (tokenizer, images) = counter("claude-sonnet-4-5");
        Self {
            name: "messages",
            path: "/v1/messages",
            schema: "MessageCreateParams",
            spec: OpenApi::anthropic().unwrap(),
            generate: generate::messages,
            pairs: pairing::messages,
            headers: &[("anthropic-version", "2023-06-01")],
            api: loom_core::Api::Anthropic,
            tokenizer,
            images,
        }
    }
}

/// A server (router and state over a SQLite store) and the mock upstream behind it.
struct Fixture {
    rt: tokio::runtime::Runtime,
    app: Router,
    mock: MockHandle,
    _state: Arc<AppState>,
    _dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mock = rt.block_on(Mock::spawn()).unwrap();
    // In memory where there is a tmpfs: the suite measures Loom's conformance, not the disk's
    // commits, and runs tens of thousands of them.
    let shm = std::path::Path::new("/dev/shm");
    let dir = match shm.is_dir() {
        true => tempfile::tempdir_in(shm),
        false => tempfile::tempdir(),
    }
    .unwrap();
    let db = dir.path().join("loom.db");
    let mut config = super::support::config(db.to_str().unwrap(), &mock, AuthMode::None);
    config.default_mode = ProxyMode::Observe;
    config.limits.request_timeout = HANG;
    let ws = Workspace::open(&db).unwrap();
    let engine = super::support::engine();
    let state = loom_server::state(config, Arc::new(ws.store), Arc::new(ws.blobs), engine).unwrap();
    Fixture {
        rt,
        app: loom_server::app(Arc::clone(&state)),
        mock,
        _state: state,
        _dir: dir,
    }
}

/// A reply: status, headers, body.
struct Reply {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn text(&self) -> String {
        shorten(&String::from_utf8_lossy(&self.body), 400)
    }
}

/// The header that tags each request with its case and mode, so that the mock's records of
/// cases run side by side can be told apart (Loom forwards a client's headers).
const TAG: &str = "x-conformance-case";

/// Sends one request to the router.
async fn send(
    app: Router,
    path: &str,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
) -> Reply {
    let mut builder = Request::builder()
        .method(if body.is_empty() { "GET" } else { "POST" })
        .uri(path)
        .header("content-type", "application/json");
    for (n, v) in headers {
        builder = builder.header(n, v);
    }
    let request = builder.body(Body::from(body)).unwrap();
    let answer = async {
        let response = app.oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        // Read the whole body: a stream's relay logs the reply as it ends.
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            headers,
            body: body.to_vec(),
        }
    };
    tokio::time::timeout(HANG, answer)
        .await
        .unwrap_or_else(|_| panic!("{path}: no answer within {HANG:?}"))
}

impl Fixture {
    /// `loom_upstream_errors_total{kind="fit_check_failed"}`, summed over providers.
    fn fit_check_failures(&self) -> u64 {
        let reply = self
            .rt
            .block_on(send(self.app.clone(), "/metrics", Vec::new(), Vec::new()));
        String::from_utf8_lossy(&reply.body)
            .lines()
            .filter(|l| {
                l.starts_with("loom_upstream_errors_total") && l.contains("fit_check_failed")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Runs `cases` side by side (each its `observe` call, then its `fit` calls) and checks
    /// each.
    fn exchange_all(
        &self,
        target: &Target,
        cases: Vec<(String, Vec<u8>)>,
        findings: &mut Findings,
        figures: &mut Figures,
    ) -> Vec<bool> {
        self.mock.clear();
        let tasks: Vec<_> = cases
            .iter()
            .map(|(case, raw)| {
                let app = self.app.clone();
                let (path, extra) = (target.path, target.headers);
                let (name, case, raw) = (target.name, case.clone(), raw.clone());
                self.rt.spawn(exchange(app, path, extra, name, case, raw))
            })
            .collect();
        let exchanges: Vec<Exchange> = self
            .rt
            .block_on(async { futures_util::future::join_all(tasks).await })
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        let records = self.mock.requests();
        let tagged = |tag: &str| -> Vec<&loom_mock_upstream::Recorded> {
            records
                .iter()
                .filter(|r| r.header(TAG) == Some(tag))
                .collect()
        };
        cases
            .iter()
            .zip(exchanges)
            .map(|((case, raw), ex)| {
                figures.raised += ex.raised;
                check_observe(case, raw, &ex.observe, &tagged(&ex.observe_tag), findings);
                check_fit(
                    target,
                    case,
                    raw,
                    &ex.fit,
                    &tagged(&ex.fit_tag),
                    findings,
                    figures,
                )
            })
            .collect()
    }
}

/// One case's replies: its `observe` call, its last `fit` call, and the tags their upstream
/// requests carry.
struct Exchange {
    observe: Reply,
    observe_tag: String,
    fit: Reply,
    fit_tag: String,
    /// How many times the budget was raised to the floor Loom named.
    raised: u64,
}

/// One case through the proxy: `observe`, then `fit` at half the conversation's size, raised to
/// the floor Loom names when that is under it.
async fn exchange(
    app: Router,
    path: &'static str,
    extra: &'static [(&'static str, &'static str)],
    name: &'static str,
    case: String,
    raw: Vec<u8>,
) -> Exchange {
    let headers = |mode: &str, tag: &str, attempt: u64| {
        let mut h: Vec<(&'static str, String)> = vec![
            (
                "x-loom-session",
                format!("{mode}-{name}-{}-{attempt}", session(&case)),
            ),
            ("x-loom-mode", mode.to_owned()),
            (TAG, tag.to_owned()),
        ];
        h.extend(extra.iter().map(|(n, v)| (*n, (*v).to_owned())));
        h
    };
    let observe_tag = format!("{case} observe");
    let observe = send(
        app.clone(),
        path,
        headers("observe", &observe_tag, 0),
        raw.clone(),
    )
    .await;
    let mut budget = rough_tokens(&raw) / 2;
    let mut raised = 0;
    loop {
        let fit_tag = format!("{case} fit {raised}");
        let mut h = headers("fit", &fit_tag, raised);
        h.push(("x-loom-budget", budget.to_string()));
        let fit = send(app.clone(), path, h, raw.clone()).await;
        // Under the floor: the floor it names, with room, is the next budget.
        match (fit.status, needed(&fit)) {
            (400, Some(n)) if raised < 2 => {
                raised += 1;
                budget = n + n / 20 + 16;
            }
            _ => {
                return Exchange {
                    observe,
                    observe_tag,
                    fit,
                    fit_tag,
                    raised,
                }
            }
        }
    }
}

/// What one run found, by kind.
#[derive(Default)]
struct Findings {
    /// Kind => (count, the first few cases and what happened).
    kinds: BTreeMap<String, (usize, Vec<String>)>,
}

impl Findings {
    fn add(&mut self, kind: &str, case: &str, detail: String) {
        let entry = self.kinds.entry(kind.to_owned()).or_default();
        entry.0 += 1;
        if entry.1.len() < 3 {
            entry.1.push(format!("{case}: {detail}"));
        }
    }

    fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    fn report(&self) -> String {
        self.kinds
            .iter()
            .map(|(kind, (n, examples))| format!("{kind}: {n}\n  {}", examples.join("\n  ")))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Figures of one run.
#[derive(Default, Debug)]
struct Figures {
    cases: u64,
    /// `fit` calls whose upstream got Loom's render (not the client's own bytes).
    rendered: u64,
    /// `fit` budgets raised to the floor Loom named.
    raised: u64,
    /// `fit` calls that could not go below the conversation's size (nothing to compact).
    whole: u64,
    /// Upstream requests checked in `fit` (recall rounds included).
    upstream_checked: u64,
    /// `fit` calls that took hidden `loom_recall` rounds (more than one upstream request).
    recall_rounds: u64,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// `request needs N tokens ...` of an over-budget refusal.
fn needed(reply: &Reply) -> Option<u64> {
    let text = String::from_utf8_lossy(&reply.body);
    let at = text.find("request needs ")? + "request needs ".len();
    text[at..].split(' ').next()?.parse().ok()
}

/// The conversation's size in tokens, roughly (a quarter of its bytes).
fn rough_tokens(body: &[u8]) -> u64 {
    (body.len() as u64 / 4).max(64)
}

/// Cases run side by side.
const SIDE_BY_SIDE: usize = 16;

/// Runs the generated requests of `target` through the proxy; panics with what it found.
#[expect(clippy::print_stderr, reason = "the run prints its figures")]
fn run(target: &Target) {
    let cases = env_u64("LOOM_CONFORMANCE_CASES").unwrap_or(CASES);
    let first = env_u64("LOOM_CONFORMANCE_SEED").unwrap_or(0);
    let options = Options {
        reuse_ids: std::env::var("LOOM_CONFORMANCE_REUSED_IDS").is_ok_and(|v| v == "1"),
    };
    let fx = fixture();
    let started = Instant::now();
    let mut findings = Findings::default();
    let mut figures = Figures::default();
    let mut covered = BTreeSet::new();
    let seeds: Vec<u64> = (first..first + cases).collect();
    for chunk in seeds.chunks(SIDE_BY_SIDE) {
        let mut batch = Vec::with_capacity(chunk.len());
        for &seed in chunk {
            let generated = (target.generate)(&target.spec, seed, options);
            covered.extend(generated.covered.iter().cloned());
            let case = format!("seed {seed}");
            if let Err(errors) = target.spec.validate(target.schema, &generated.body) {
                findings.add("generator: invalid request", &case, format!("{errors:?}"));
                continue;
            }
            counted(target, &case, &generated.body, &mut findings);
            batch.push((case, serde_json::to_vec(&generated.body).unwrap()));
        }
        figures.cases += batch.len() as u64;
        fx.exchange_all(target, batch, &mut findings, &mut figures);
    }
    let failures = fx.fit_check_failures();
    if failures > 0 {
        findings.add(
            "fit_check_failed on /metrics",
            "the run",
            format!("{failures} fallbacks counted"),
        );
    }
    let all = generate::alternatives(target.spec.root(), target.schema);
    let reached = covered.iter().filter(|c| all.contains(*c)).count();
    eprintln!(
        "conformance {}: {} requests in {:.1?}; {figures:?}; {reached} of {} alternatives of `{}` reached, {} shapes",
        target.name,
        figures.cases,
        started.elapsed(),
        all.len(),
        target.schema,
        covered.len() - reached,
    );
    assert!(
        findings.is_empty(),
        "conformance {} found:\n{}",
        target.name,
        findings.report()
    );
}

/// The request's tokens can be counted (the framing of `loom-tokens` takes every valid shape).
fn counted(target: &Target, case: &str, body: &Value, findings: &mut Findings) {
    if let Err(e) = loom_tokens::count_request(target.api, body, &target.tokenizer, &target.images)
    {
        findings.add("count_request refused", case, e.to_string());
    }
}

/// `observe`: not refused, logged, and the upstream got the client's bytes.
fn check_observe(
    case: &str,
    raw: &[u8],
    reply: &Reply,
    forwarded: &[&loom_mock_upstream::Recorded],
    findings: &mut Findings,
) {
    if reply.status >= 400 {
        let kind = match forwarded.is_empty() {
            true => "observe: refused by Loom",
            false => "observe: refused by the upstream (the mock's rules)",
        };
        findings.add(kind, case, format!("{} {}", reply.status, reply.text()));
        return;
    }
    match forwarded {
        [one] if one.raw == raw => {}
        [] => findings.add("observe: nothing forwarded", case, String::new()),
        _ => findings.add("observe: the upstream got other bytes", case, String::new()),
    }
    // A model the registry counts as its family's is said, and is no finding.
    if let Some(w) = reply
        .header("x-loom-warning")
        .filter(|w| !w.contains("is not in Loom's registry"))
    {
        findings.add("observe: warning", case, shorten(w, 300));
    }
    if reply.header("x-loom-mode") != Some("observe") {
        findings.add(
            "observe: x-loom-mode",
            case,
            format!("{:?}", reply.header("x-loom-mode")),
        );
    }
}

/// `fit`: not refused, no fallback, and every upstream request valid and paired. Returns
/// whether the upstream got Loom's render (not the client's own bytes).
fn check_fit(
    target: &Target,
    case: &str,
    raw: &[u8],
    reply: &Reply,
    forwarded: &[&loom_mock_upstream::Recorded],
    findings: &mut Findings,
    figures: &mut Figures,
) -> bool {
    if reply.status >= 400 {
        let kind = match (forwarded.is_empty(), needed(reply).is_some()) {
            (true, true) => "fit: over budget after raising it to the floor",
            (true, false) => "fit: refused by Loom",
            (false, _) => "fit: refused by the upstream (the mock's rules)",
        };
        let last = forwarded
            .last()
            .map(|r| format!("\n    last sent: {}", outline(&r.body)))
            .unwrap_or_default();
        findings.add(
            kind,
            case,
            format!("{} {}{last}", reply.status, reply.text()),
        );
        return false;
    }
    let warning = reply.header("x-loom-warning").unwrap_or_default();
    if warning.contains("failed Loom's check") {
        findings.add("fit: fell back", case, shorten(warning, 400));
        return false;
    }
    let server_side = warning.contains("server-side state");
    let mode = reply.header("x-loom-mode");
    if mode != Some("fit") && !(server_side && mode == Some("observe")) {
        findings.add("fit: x-loom-mode", case, format!("{mode:?} {warning}"));
    }
    if forwarded.is_empty() {
        findings.add("fit: nothing forwarded", case, String::new());
    }
    if forwarded.len() > 1 {
        figures.recall_rounds += 1;
    }

    let mut rendered = false;
    for r in forwarded {
        figures.upstream_checked += 1;
        rendered |= r.raw != raw;
        if let Err(errors) = target.spec.validate(target.schema, &r.body) {
            findings.add(
                "fit: the upstream request is invalid by the description",
                case,
                shorten(&format!("{errors:?}"), 600),
            );
        }
        if let Err(why) = (target.pairs)(&r.body) {
            findings.add(
                "fit: the upstream request breaks pairing",
                case,
                format!(
                    "{why}\n    sent:     {}\n    received: {}",
                    outline(&r.body),
                    outline(&serde_json::from_slice(raw).unwrap_or_default())
                ),
            );
        }
    }
    if rendered {
        figures.rendered += 1;
    } else {
        figures.whole += 1;
    }
    rendered
}

/// A conversation in one line: each message or item's role or type, and the call ids it makes
/// or answers.
fn outline(body: &Value) -> String {
    let items = ["messages", "input"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_array));
    let ids = |v: &Value| -> Vec<String> {
        let mut out = Vec::new();
        for key in ["call_id", "tool_call_id", "tool_use_id"] {
            if let Some(id) = v.get(key).and_then(Value::as_str) {
                out.push(id.to_owned());
            }
        }
        for list in ["tool_calls", "content"] {
            for c in v.get(list).and_then(Value::as_array).into_iter().flatten() {
                if let Some(id) = c.get("id").or(c.get("tool_use_id")).and_then(Value::as_str) {
                    out.push(id.to_owned());
                }
            }
        }
        out
    };
    items
        .into_iter()
        .flatten()
        .map(|m| {
            let kind = m
                .get("role")
                .or(m.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("?");
            match ids(m).as_slice() {
                [] => kind.to_owned(),
                ids => format!("{kind}({})", ids.join(",")),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A case's name as a session id.
fn session(case: &str) -> String {
    case.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The directory of fixed fixtures: what the generated requests found, shrunk.
fn fixtures_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/conformance")
}

/// Log lines standing for an old tool output, where a fixture says `"<bulk>"`: enough for a
/// budget below the conversation to stub it.
fn expand(v: &mut Value) {
    match v {
        Value::String(s) if s == "<bulk>" => {
            *s = (1..=120)
                .map(|i| {
                    format!("{i:>4}: compiling module_{i} ok, 3 warnings, see target/log_{i}.txt\n")
                })
                .collect();
        }
        Value::Array(items) => items.iter_mut().for_each(expand),
        Value::Object(obj) => obj.values_mut().for_each(expand),
        _ => {}
    }
}

/// Every fixture through `observe` and `fit` as the generated requests go, and its `fit` call
/// rendered by Loom (a fixture exists to reach Loom's own writing of the conversation) unless it
/// says `"may_send_whole": true`. A fixture is `{"api": "chat" | "responses" | "messages",
/// "broke": "...", "body": {...}}`.
#[test]
fn fixtures() {
    let mut targets: Vec<Target> = [Target::chat(), Target::responses()]
        .into_iter()
        .flatten()
        .collect();
    targets.push(Target::messages());
    let fx = fixture();
    let mut findings = Findings::default();
    let mut figures = Figures::default();
    let mut files: Vec<_> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no fixtures in {}",
        fixtures_dir().display()
    );
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let fixture: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        let api = fixture["api"].as_str().unwrap();
        let Some(target) = targets.iter().find(|t| t.name == api) else {
            // Its description is absent (said by `openai_spec`).
            continue;
        };
        let mut body = fixture["body"].clone();
        expand(&mut body);
        if let Err(errors) = target.spec.validate(target.schema, &body) {
            findings.add("fixture: invalid request", &name, format!("{errors:?}"));
            continue;
        }
        counted(target, &name, &body, &mut findings);
        let raw = serde_json::to_vec(&body).unwrap();
        let rendered = fx.exchange_all(
            target,
            vec![(name.clone(), raw)],
            &mut findings,
            &mut figures,
        );
        // A fixture whose conversation is all floor may go whole once Loom keeps it right.
        let whole_ok = fixture["may_send_whole"] == Value::Bool(true);
        if rendered != [true] && !whole_ok {
            findings.add(
                "fixture: fit sent the client's own bytes",
                &name,
                String::new(),
            );
        }
    }
    assert_eq!(fx.fit_check_failures(), 0, "fit_check_failed counted");
    assert!(findings.is_empty(), "fixtures:\n{}", findings.report());
}

#[test]
fn chat_completions() {
    let Some(target) = Target::chat() else { return };
    run(&target);
}

#[test]
fn responses() {
    let Some(target) = Target::responses() else {
        return;
    };
    run(&target);
}

#[test]
fn messages() {
    run(&Target::messages());
}
