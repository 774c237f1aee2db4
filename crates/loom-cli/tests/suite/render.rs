//! `loom render --tools FILE`: tool definitions sent and budgeted with the request in every
//! format, and a bad tools file refused with the entry and field named.

use super::Loom;

const TOOLS: &str = r#"[
  {"type": "function", "function": {"name": "bash", "description": "Run a shell command",
   "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
  {"name": "read_file", "description": "Read a file",
   "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
]"#;

#[test]
fn tools_are_sent_in_every_format_and_counted() {
    let loom = Loom::with_chat();
    let tools = loom.file("tools.json", TOOLS);
    let tools = tools.to_str().unwrap();
    let names = |list: &serde_json::Value, name: &dyn Fn(&serde_json::Value) -> &str| {
        list.as_array()
            .unwrap()
            .iter()
            .map(|t| name(t).to_owned())
            .collect::<Vec<_>>()
    };
    let chat = loom
        .run([
            "render",
            "chat",
            "--format",
            "openai-chat",
            "--tools",
            tools,
        ])
        .ok()
        .json();
    assert_eq!(
        names(&chat["tools"], &|t| t["function"]["name"].as_str().unwrap()),
        ["bash", "read_file"]
    );
    assert_eq!(
        chat["tools"][0]["function"]["parameters"]["required"][0],
        "command"
    );
    let responses = loom
        .run([
            "render",
            "chat",
            "--format",
            "openai-responses",
            "--tools",
            tools,
        ])
        .ok()
        .json();
    assert_eq!(
        names(&responses["tools"], &|t| t["name"].as_str().unwrap()),
        ["bash", "read_file"]
    );
    let anthropic = loom
        .run(["render", "chat", "--format", "anthropic", "--tools", tools])
        .ok()
        .json();
    assert_eq!(
        names(&anthropic["tools"], &|t| t["name"].as_str().unwrap()),
        ["bash", "read_file"]
    );
    assert!(anthropic["tools"][1]["input_schema"]["properties"]["path"].is_object());

    // The receipt counts them.
    let with = loom
        .run(["render", "chat", "--tools", tools, "--receipt"])
        .ok();
    let without = loom.run(["render", "chat", "--receipt"]).ok();
    let tier = |stderr: &str| -> u64 {
        let json = &stderr[stderr.find('{').unwrap()..];
        let receipt: serde_json::Value = serde_json::from_str(json).unwrap();
        receipt["tiers"]["tools"].as_u64().unwrap_or(0)
    };
    assert!(tier(&with.stderr) > 0, "{}", with.stderr);
    assert_eq!(tier(&without.stderr), 0, "{}", without.stderr);
}

#[test]
fn a_bad_tools_file_names_the_entry_and_field() {
    let loom = Loom::with_chat();
    let cases = [
        (
            r#"[{"name": "ok"}, {"type": "function", "function": {"description": "no name"}}]"#,
            "tools[1].function.name",
        ),
        (
            r#"[{"name": "a", "parameters": "object"}]"#,
            "tools[0].parameters",
        ),
        (r#"{"model": "x"}"#, "tools"),
        ("not json", "not JSON"),
    ];
    for (text, expected) in cases {
        let f = loom.file("bad-tools.json", text);
        let run = loom.run(["render", "chat", "--tools", f.to_str().unwrap()]);
        assert_eq!(run.code, 2, "{text}: {}", run.stderr);
        assert!(run.stderr.contains(expected), "{text}: {}", run.stderr);
        assert!(run.stderr.contains("bad-tools.json"), "{}", run.stderr);
    }
    let missing = loom.run(["render", "chat", "--tools", "nope.json"]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    assert!(missing.stderr.contains("nope.json"), "{}", missing.stderr);
}

#[test]
fn explain_says_how_to_get_the_original_back() {
    let loom = Loom::with_chat();
    let out = loom.run(["explain", "chat", "--event", "3"]).ok().stdout();
    assert!(
        out.ends_with("  original: loom log chat --from 3 --to 3\n"),
        "{out}"
    );
    // An offloaded output is recovered by its reference.
    let big: String = (0..400)
        .map(|i| format!("line {i} of the output\n"))
        .collect();
    let f = loom.file("big.json", super::chat_with_output(&big));
    loom.run(["import", "--session", "big", f.to_str().unwrap()])
        .ok();
    let out = loom.run(["explain", "big", "--event", "3"]).ok().stdout();
    let line = out.lines().last().unwrap();
    let alias = line
        .strip_prefix("  original output: loom recall ")
        .and_then(|rest| rest.strip_suffix(" --session big"))
        .unwrap_or_else(|| panic!("{out}"));
    let recalled = loom.run(["recall", alias, "--session", "big"]).ok();
    assert_eq!(recalled.stdout(), big);
}
