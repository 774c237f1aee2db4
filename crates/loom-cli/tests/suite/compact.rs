//! `loom compact`: the cache-stable history by default, the seed's exact layout with
//! `--seed-format`, presets and overrides, JSON, and bad input.

use super::Loom;

/// A mini-swe-agent style session of 12 bash calls; call 4 fails.
fn session() -> Loom {
    let loom = Loom::new();
    let mut messages =
        vec![serde_json::json!({"role": "user", "content": "Fix the failing parser test"})];
    for i in 1..=12 {
        let (command, output) = match i {
            4 => ("pytest tests/test_parser.py".to_owned(), "<returncode>127</returncode>\n<output>\nbash: line 1: pytest: command not found\n</output>".to_owned()),
            _ => (format!("cat src/module_{i}.py"), format!("<returncode>0</returncode>\n<output>\n{}</output>", "x = 1\n".repeat(40 * i))),
        };
        let id = format!("call_{i}");
        messages.push(serde_json::json!({"role": "assistant", "content": format!("THOUGHT: step {i}"), "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "bash", "arguments": serde_json::json!({"command": command}).to_string()}}]}));
        messages.push(serde_json::json!({"role": "tool", "tool_call_id": id, "content": output}));
    }
    let f = loom.file("swe.json", serde_json::Value::Array(messages).to_string());
    loom.import(&[&f]);
    loom
}

#[test]
fn default_is_the_cache_stable_history() {
    let loom = session();
    let out = loom.run(["compact", "swe"]).ok().stdout();
    assert!(out.starts_with("Previous actions (summarized):\n"), "{out}");
    assert!(out.contains("\nRecent actions:\n"), "{out}");
    assert!(
        out.contains("[step_004] ✗ bash failed: "),
        "the failure must stay visible:\n{out}"
    );
    assert!(out.contains("  [step_012] ✓ "), "{out}");
    let json = loom.run(["compact", "swe", "--json"]).ok().json();
    assert_eq!(json["mode"], "stable");
    assert_eq!(json["steps"], 12);
    assert_eq!(json["text"].as_str(), Some(out.as_str()));
    assert!(json["points"].as_u64().unwrap_or_default() >= 1, "{json}");
}

#[test]
fn seed_format_is_the_seed_layout_with_overrides() {
    let loom = session();
    let out = loom
        .run([
            "compact",
            "swe",
            "--seed-format",
            "--recent",
            "3",
            "--max-compact",
            "4",
        ])
        .ok()
        .stdout();
    // 12 steps: 3 recent, 4 compact, 5 dropped of which one failure is kept: 4 omitted.
    assert!(
        out.contains("  ... (4 earlier steps omitted)\n\nRecent actions:\n"),
        "{out}"
    );
    assert!(out.contains("  [step_004] ✗ bash failed: "), "{out}");
    assert_eq!(out.matches("\n  [step_01").count(), 3, "{out}");
    let json = loom
        .run([
            "compact",
            "swe",
            "--seed-format",
            "--recent",
            "3",
            "--max-compact",
            "4",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(json["mode"], "seed");
    assert_eq!(json["omitted"], 4);
    assert_eq!(
        json["recent"],
        serde_json::json!(["step_010", "step_011", "step_012"])
    );
    let ungrouped = loom
        .run(["compact", "swe", "--seed-format", "--no-group"])
        .ok()
        .stdout();
    assert!(!ungrouped.contains(".."), "{ungrouped}");
}

#[test]
fn presets_and_auto_tune() {
    let loom = session();
    let debugging = loom
        .run([
            "compact",
            "swe",
            "--seed-format",
            "--preset",
            "debugging",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(debugging["config"]["recent_window"], 7);
    assert_eq!(debugging["config"]["group_similar"], false);
    // The task says "Fix the failing parser test": no debug/research words, so the defaults.
    let auto = loom
        .run(["compact", "swe", "--preset", "auto", "--json"])
        .ok()
        .json();
    assert_eq!(auto["config"]["recent_window"], 5);
}

#[test]
fn bad_input_exits_2() {
    let loom = session();
    let run = loom.run(["compact", "swe", "--preset", "turbo"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("unknown preset `turbo`"),
        "{}",
        run.stderr
    );
    let run = loom.run(["compact", "nope"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
}
