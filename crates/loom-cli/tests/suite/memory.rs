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
