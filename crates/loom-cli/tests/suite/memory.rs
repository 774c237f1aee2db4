//! `loom memory`: items indexed from an imported conversation, searched within a token budget
//! with their provenance, forgotten on request.

use super::Loom;

fn conversation(loom: &Loom) {
    let history = serde_json::json!({"messages": [
        {"role": "user", "content": "My sister Maya moved to Lisbon in March to work on solar panels."},
        {"role": "assistant", "content": "That sounds exciting. What does she like about Lisbon?"},
        {"role": "user", "content": "She loves the tiled buildings and the ocean light in Belem."},
        {"role": "assistant", "content": "The light there is famous among painters."},
        {"role": "user", "content": "I am planning to visit her in October with my dog Pixel."}
    ]});
    let f = loom.file("chat.json", serde_json::to_vec(&history).unwrap());
    let run = loom.run([
        "import".as_ref(),
        f.as_os_str(),
        "--session".as_ref(),
        "talk-1".as_ref(),
        "--agent".as_ref(),
        "friend".as_ref(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[test]
fn a_conversation_is_indexed_and_searched_within_a_budget_with_provenance() {
    let loom = Loom::new();
    conversation(&loom);
    loom.run(["memory", "index", "--agent", "friend"]).ok();
    let out = loom
        .run([
            "memory",
            "search",
            "where does Maya live",
            "--agent",
            "friend",
            "--budget",
            "60",
            "--json",
        ])
        .ok()
        .json();
    let hits = out["hits"].as_array().unwrap();
    assert!(!hits.is_empty(), "{out}");
    assert!(
        hits[0]["text"].as_str().unwrap().contains("Lisbon"),
        "{out}"
    );
    assert_eq!(hits[0]["sources"][0]["session"], "talk-1");
    assert_eq!(hits[0]["sources"][0]["seq"], 1);
    let spent: u64 = hits.iter().map(|h| h["tokens"].as_u64().unwrap()).sum();
    assert!(
        spent <= 60,
        "the hits' tokens sum to at most the budget: {spent}"
    );
    for h in hits {
        for key in ["text", "tokens", "score", "tier", "sources"] {
            assert!(h.get(key).is_some(), "a hit has `{key}`: {h}");
        }
    }
    // Another agent's memory is empty; a bad tier is bad input.
    let other = loom
        .run([
            "memory",
            "search",
            "Lisbon",
            "--agent",
            "someone-else",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(other["hits"].as_array().unwrap().len(), 0);
    assert_eq!(
        loom.run(["memory", "search", "Lisbon", "--agent", "friend", "--tier", "L9"])
            .code,
        2
    );
}

#[test]
fn facts_are_extracted_by_a_model_with_the_lines_they_cite_and_only_once() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let upstream = rt.block_on(loom_mock_upstream::Mock::spawn()).unwrap();
    let loom = Loom::new();
    conversation(&loom);
    let config = loom.file(
        "extract.toml",
        format!(
            "model = \"gpt-4o-mini\"\n[provider]\napi = \"chat_completions\"\nbase_url = \"{}\"\napi_key_env = \"LOOM_TEST_KEY\"\n",
            upstream.base_url()
        ),
    );
    let reply = serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
            "content": "{\"facts\": [{\"text\": \"Maya, the user's sister, lives in Lisbon.\", \"seqs\": [1, 3]}, {\"text\": \"A fact citing a line never shown.\", \"seqs\": [40]}]}"}}],
        "usage": {"prompt_tokens": 200, "completion_tokens": 30, "total_tokens": 230}
    });
    upstream.push_fault(loom_mock_upstream::Fault {
        body: Some(reply.to_string()),
        ..loom_mock_upstream::Fault::default()
    });
    let extract = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_loom"))
            .args([
                "memory", "extract", "--agent", "friend", "--json", "--config",
            ])
            .arg(&config)
            .arg("--db")
            .arg(loom.db())
            .env("LOOM_TEST_KEY", "sk-test")
            .env_remove("LOOM_DB")
            .output()
            .unwrap()
    };
    let out = extract();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &reports[0];
    assert_eq!(r["session"], "talk-1");
    assert_eq!(
        (r["facts"].as_u64(), r["created"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(r["to_mark"], 5);
    assert_eq!(r["rejected"][0]["field"], "facts[1].seqs", "{r}");
    assert_eq!(r["input_tokens"], 200);
    assert_eq!(upstream.requests().len(), 1);

    // The fact is found with its provenance: the first and last line it cites.
    let hits = loom
        .run([
            "memory",
            "search",
            "Maya sister Lisbon",
            "--agent",
            "friend",
            "--tier",
            "L4",
            "--json",
        ])
        .ok()
        .json();
    let fact = hits["hits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| {
            h["text"]
                .as_str()
                .unwrap()
                .starts_with("Maya, the user's sister")
        })
        .unwrap_or_else(|| panic!("the fact is found: {hits}"));
    assert_eq!(fact["sources"][0]["session"], "talk-1");
    assert_eq!(fact["sources"][0]["seq"], 1);

    // A second run has nothing new to read: no call is made.
    let again = extract();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let reports: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(reports[0]["windows"], 0);
    assert_eq!(upstream.requests().len(), 1);

    // Without a model named anywhere, the command says so and calls nothing.
    let bare = loom.run(["memory", "extract", "--agent", "friend"]);
    assert_eq!(bare.code, 2, "{}", bare.stderr);
    assert!(bare.stderr.contains("--model"), "{}", bare.stderr);
}

#[test]
fn a_search_keeps_the_items_of_a_time_range_and_refuses_a_bad_time() {
    let loom = Loom::new();
    conversation(&loom);
    loom.run(["memory", "index", "--agent", "friend"]).ok();
    let hits = |range: &[&str]| -> usize {
        let mut args = vec![
            "memory",
            "search",
            "Maya Lisbon",
            "--agent",
            "friend",
            "--json",
        ];
        args.extend_from_slice(range);
        loom.run(args).ok().json()["hits"].as_array().unwrap().len()
    };
    let all = hits(&[]);
    assert!(all > 0);
    assert_eq!(hits(&["--since", "1970-01-01"]), all);
    assert_eq!(
        hits(&["--since", "0", "--until", "9999-12-31T23:59:59Z"]),
        all
    );
    assert_eq!(hits(&["--until", "1970-01-01T00:00:00Z"]), 0);
    let bad = loom.run([
        "memory", "search", "Maya", "--agent", "friend", "--since", "May 8",
    ]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("--since `May 8`"), "{}", bad.stderr);
}
