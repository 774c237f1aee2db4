//! Memory surfaces on the command line: import indexes what it wrote, L2 notes by tier and
//! session, the knowledge base, and `loom run` with the knowledge hook and memory tools.

use super::Loom;

fn import_as(loom: &Loom, name: &str, session: &str, agent: &str, turns: &[&str], extra: &[&str]) {
    let messages: Vec<serde_json::Value> = turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            serde_json::json!({"role": role, "content": t})
        })
        .collect();
    let f = loom.file(
        name,
        serde_json::to_vec(&serde_json::json!({"messages": messages})).unwrap(),
    );
    let mut args = vec![
        "import",
        f.to_str().unwrap(),
        "--session",
        session,
        "--agent",
        agent,
    ];
    args.extend(extra);
    loom.run(args).ok();
}

fn search(loom: &Loom, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["memory", "search"];
    all.extend(args);
    all.push("--json");
    loom.run(all).ok().json()["hits"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn import_indexes_what_it_wrote_unless_told_not_to() {
    let loom = Loom::new();
    import_as(
        &loom,
        "a.json",
        "trip",
        "friend",
        &["We booked the cabin at Lake Tahoe", "Nice!"],
        &[],
    );
    let hits = search(&loom, &["cabin", "--agent", "friend"]);
    assert!(!hits.is_empty(), "indexed at import");
    assert_eq!(hits[0]["text"], "We booked the cabin at Lake Tahoe");
    assert_eq!(hits[0]["sources"][0]["session"], "trip");
    import_as(
        &loom,
        "b.json",
        "later",
        "friend",
        &["The canoe rental closes at noon"],
        &["--no-index"],
    );
    assert!(search(&loom, &["canoe", "--agent", "friend"]).is_empty());
    loom.run(["memory", "index", "--agent", "friend"]).ok();
    let hits = search(&loom, &["canoe", "--agent", "friend"]);
    assert_eq!(hits[0]["text"], "The canoe rental closes at noon");
}

#[test]
fn notes_are_saved_to_l2_and_each_tier_is_searched_on_its_own() {
    let loom = Loom::new();
    import_as(
        &loom,
        "a.json",
        "s1",
        "ops",
        &["the release train leaves on Tuesday", "ok"],
        &[],
    );
    import_as(&loom, "b.json", "s2", "ops", &["unrelated", "ok"], &[]);
    let saved = loom
        .run([
            "memory",
            "save",
            "release notes are drafted by Kim",
            "--agent",
            "ops",
            "--session",
            "s1",
            "--ttl",
            "3600",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(saved["created"], true);
    assert!(saved["expires_ms"].as_i64().unwrap() > 0);
    let l2 = search(
        &loom,
        &[
            "release",
            "--agent",
            "ops",
            "--tier",
            "L2",
            "--session",
            "s1",
        ],
    );
    assert_eq!(l2.len(), 1);
    assert_eq!(l2[0]["tier"], "L2");
    assert_eq!(l2[0]["sources"][0]["seq"], 2, "the session's last event");
    assert!(search(
        &loom,
        &[
            "release",
            "--agent",
            "ops",
            "--tier",
            "L2",
            "--session",
            "s2"
        ]
    )
    .is_empty());
    let l4 = search(&loom, &["release", "--agent", "ops", "--tier", "L4"]);
    assert!(l4.iter().all(|h| h["tier"] == "L4"), "{l4:?}");
    assert_eq!(l4[0]["text"], "the release train leaves on Tuesday");
    let l1 = search(
        &loom,
        &[
            "release",
            "--agent",
            "ops",
            "--tier",
            "L1",
            "--session",
            "s1",
        ],
    );
    assert_eq!(l1.len(), 1);
    assert_eq!(l1[0]["tier"], "L1");
    // L1 and L2 are a session's: without one, or with another agent's, it is bad input.
    let no_session = loom.run([
        "memory", "search", "release", "--agent", "ops", "--tier", "L2",
    ]);
    assert_eq!(no_session.code, 2);
    assert!(
        no_session.stderr.contains("session"),
        "{}",
        no_session.stderr
    );
    let wrong = loom.run(["memory", "save", "x", "--agent", "bob", "--session", "s1"]);
    assert_eq!(wrong.code, 2);
    assert!(
        wrong.stderr.contains("belongs to agent `ops`"),
        "{}",
        wrong.stderr
    );
}

#[test]
fn the_knowledge_base_adds_searches_lists_and_removes_files() {
    let loom = Loom::new();
    let doc = loom.file(
        "guide.md",
        "# Deploying\n\nRun make deploy.\n\n## Rollback\n\nRun make rollback VERSION=prev.\n",
    );
    let added = loom
        .run(["kb", "add", doc.to_str().unwrap(), "--json"])
        .ok()
        .json();
    assert_eq!(added[0]["chunks"], 2);
    let hits = loom
        .run([
            "kb",
            "search",
            "how to rollback",
            "--budget",
            "200",
            "--json",
        ])
        .ok()
        .json()["hits"]
        .as_array()
        .unwrap()
        .clone();
    assert!(hits[0]["path"].as_str().unwrap().ends_with("guide.md"));
    assert_eq!(
        (hits[0]["from_line"].as_u64(), hits[0]["to_line"].as_u64()),
        (Some(5), Some(7))
    );
    // A changed file replaces its chunks.
    std::fs::write(&doc, "# Deploying\n\nDeploys are automatic.\n").unwrap();
    let again = loom
        .run(["kb", "add", doc.to_str().unwrap(), "--json"])
        .ok()
        .json();
    assert_eq!(
        (again[0]["chunks"].as_u64(), again[0]["replaced"].as_u64()),
        (Some(1), Some(2))
    );
    let list = loom.run(["kb", "list", "--json"]).ok().json();
    assert_eq!(list.as_array().unwrap().len(), 1);
    let bad = loom.file("bad.json", "{\"a\": ");
    let refused = loom.run(["kb", "add", bad.to_str().unwrap()]);
    assert_eq!(refused.code, 2);
    assert!(
        refused.stderr.contains("not valid JSON"),
        "{}",
        refused.stderr
    );
    loom.run(["kb", "remove", doc.to_str().unwrap()]).ok();
    assert_eq!(
        loom.run(["kb", "list", "--json"]).ok().json(),
        serde_json::json!([])
    );
    assert_eq!(loom.run(["kb", "remove", doc.to_str().unwrap()]).code, 2);
}

#[test]
fn a_run_gets_knowledge_under_the_reserve_in_its_receipt_and_becomes_memory() {
    let loom = Loom::new();
    import_as(
        &loom,
        "old.json",
        "old",
        "main",
        &["The staging database password is in vault/staging", "noted"],
        &[],
    );
    import_as(
        &loom,
        "theirs.json",
        "theirs",
        "other",
        &["OTHER-AGENT staging database secret", "ok"],
        &[],
    );
    let doc = loom.file(
        "ops.md",
        "# Staging\n\nThe staging database runs on port 6543.\n",
    );
    loom.run(["kb", "add", doc.to_str().unwrap()]).ok();
    let ws = loom.dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let script = loom.file(
        "script.json",
        serde_json::to_vec(&serde_json::json!([
            {"content": null, "tool_calls": [{"function": {"name": "memory__save",
                "arguments": {"text": "asked about the staging database"}}}]},
            {"content": "Port 6543; the password is in vault/staging."}
        ]))
        .unwrap(),
    );
    let config = loom.file(
        "run.toml",
        "injection_reserve = 300\n[knowledge]\nlimit = 4\n",
    );
    let run = loom.run([
        "run",
        "Where does the staging database run?",
        "--provider",
        "scripted",
        "--script",
        script.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--model",
        "gpt-4o",
        "--workspace",
        ws.to_str().unwrap(),
        "--session",
        "now",
        "--agent",
        "main",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let store = loom_store::Database::parse(loom.db().to_str().unwrap())
        .unwrap()
        .open()
        .unwrap()
        .store;
    let now = loom_core::SessionId::new("now").unwrap();
    let calls = store.model_calls(&now).unwrap();
    let injected = calls[0].call.receipt["receipt"]["injected"]
        .as_array()
        .unwrap()
        .clone();
    let hooks: Vec<&str> = injected
        .iter()
        .map(|i| i["hook"].as_str().unwrap())
        .collect();
    assert!(hooks.contains(&"knowledge:memory:old#1"), "{hooks:?}");
    assert!(
        hooks
            .iter()
            .any(|h| h.starts_with("knowledge:kb:") && h.ends_with("ops.md:1-3")),
        "{hooks:?}"
    );
    assert!(hooks.iter().all(|h| !h.contains("theirs")), "{hooks:?}");
    let total: u64 = injected.iter().map(|i| i["tokens"].as_u64().unwrap()).sum();
    assert!(total <= 300, "{total}");
    // The run's own turns are memory now, and its note is in its L2.
    let hits = search(
        &loom,
        &[
            "staging database run",
            "--agent",
            "main",
            "--tier",
            "L4",
            "--session",
            "now",
        ],
    );
    assert!(!hits.is_empty());
    let notes = search(
        &loom,
        &[
            "staging",
            "--agent",
            "main",
            "--tier",
            "L2",
            "--session",
            "now",
        ],
    );
    assert_eq!(notes.len(), 1, "{notes:?}");
}

/// The local test model (`scripts/fetch-test-model.sh`, which CI runs; `LOOM_TEST_MODEL` names
/// it), when it is on this machine.
fn test_model() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("LOOM_TEST_MODEL")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/models/all-MiniLM-L6-v2")
        });
    dir.join("model.safetensors").exists().then_some(dir)
}

#[test]
fn serve_with_an_embedder_finds_the_turn_that_shares_no_word_with_the_question() {
    let Some(model) = test_model() else {
        eprintln!("skipped: no local test model (run scripts/fetch-test-model.sh)");
        return;
    };
    let loom = Loom::new();
    // Imported and indexed without vectors; the server embeds them once it has started.
    import_as(
        &loom,
        "a.json",
        "s1",
        "ann",
        &[
            "I see the physician on Monday",
            "Good luck, I hope it goes well.",
            "The garden needs water again",
            "Rain is expected tomorrow anyway.",
        ],
        &[],
    );
    let spec = format!("local:{}", model.display());
    let db = loom.db().display().to_string();
    let server = super::serve::Server::spawn(&["--db", &db, "--embedder", &spec]);
    let search = |query: &str| -> serde_json::Value {
        let body = serde_json::json!({"query": query, "agent": "ann", "budget": 12});
        let text = ureq::post(&format!("{}/loom/v1/memory/search", server.url))
            .set("content-type", "application/json")
            .send_string(&body.to_string())
            .unwrap()
            .into_string()
            .unwrap();
        serde_json::from_str(&text).unwrap()
    };
    // No item holds `doctor` or `appointment`: only the vectors can find it, once the server
    // has embedded the items imported before it started (in the background, after it listens).
    let started = std::time::Instant::now();
    let hits = loop {
        let hits = search("When is my doctor appointment?");
        if hits["hits"][0]["text"] == "I see the physician on Monday"
            || started.elapsed() > std::time::Duration::from_secs(60)
        {
            break hits;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let again = search("When is my doctor appointment?");
    assert_eq!(
        hits["hits"][0]["text"], "I see the physician on Monday",
        "{hits}"
    );
    assert_eq!(hits, again);
}
