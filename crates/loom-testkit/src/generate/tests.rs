//! The generators against their own descriptions: every request valid, the same seed the same
//! request, and the shapes the suite relies on reached.

use std::collections::BTreeSet;

use serde_json::Value;

use super::*;

/// Requests checked per API here (the conformance suite sends many more through Loom).
const CASES: u64 = 300;

fn check_all(
    api: &OpenApi,
    schema: &str,
    generate: fn(&OpenApi, u64, Options) -> Generated,
    pairs: fn(&Value) -> Result<(), String>,
    options: Options,
) -> BTreeSet<String> {
    let mut covered = BTreeSet::new();
    for seed in 0..CASES {
        let g = generate(api, seed, options);
        if let Err(errors) = api.validate(schema, &g.body) {
            panic!(
                "seed {seed}: a generated {schema} is invalid: {errors:#?}\n{}",
                serde_json::to_string_pretty(&g.body).unwrap_or_default()
            );
        }
        if let Err(why) = pairs(&g.body) {
            panic!("seed {seed}: a generated {schema} breaks pairing: {why}");
        }
        covered.extend(g.covered);
    }
    covered
}

fn openai() -> Option<OpenApi> {
    match OpenApi::load() {
        Ok(api) => Some(api),
        Err(e) => {
            // The one case a test may skip: the shared folder is absent.
            eprintln!("SKIPPED: {e}");
            None
        }
    }
}

#[test]
fn chat_requests_are_valid() {
    let Some(api) = openai() else { return };
    for reuse_ids in [false, true] {
        let covered = check_all(
            &api,
            "CreateChatCompletionRequest",
            chat,
            pairing::chat,
            Options { reuse_ids },
        );
        for shape in [
            "chat: parallel calls",
            "chat: tool content as parts",
            "chat: refusal",
            "chat: audio reference",
            "chat: function message",
        ] {
            assert!(covered.contains(shape), "{shape} never generated");
        }
    }
}

#[test]
fn responses_requests_are_valid() {
    let Some(api) = openai() else { return };
    let covered = check_all(
        &api,
        "CreateResponse",
        responses,
        pairing::responses,
        Options::default(),
    );
    for shape in [
        "responses: parallel calls",
        "responses: reasoning",
        "responses: custom tool call",
        "responses: output as parts",
    ] {
        assert!(covered.contains(shape), "{shape} never generated");
    }
}

#[test]
fn messages_requests_are_valid() {
    let api = OpenApi::anthropic().unwrap();
    let covered = check_all(
        &api,
        "MessageCreateParams",
        messages,
        pairing::messages,
        Options::default(),
    );
    for shape in [
        "messages: parallel tool use",
        "messages: thinking enabled",
        "messages: redacted thinking",
        "messages: server tool use",
        "messages: tool result as blocks",
    ] {
        assert!(covered.contains(shape), "{shape} never generated");
    }
}

#[test]
fn a_seed_is_a_request() {
    let api = OpenApi::anthropic().unwrap();
    let a = messages(&api, 7, Options::default()).body;
    let b = messages(&api, 7, Options::default()).body;
    assert_eq!(a, b);
    assert_ne!(a, messages(&api, 8, Options::default()).body);
}

#[test]
fn alternatives_are_listed_as_the_walk_labels_them() {
    let api = OpenApi::anthropic().unwrap();
    let all = alternatives(api.root(), "MessageCreateParams");
    assert!(
        all.contains("ContentBlockParam => ToolUseBlockParam"),
        "{all:#?}"
    );
    let mut w = api.walker(1);
    for _ in 0..50 {
        w.component("ContentBlockParam");
    }
    let unknown: Vec<&String> = w
        .covered()
        .iter()
        .filter(|c| !c.contains(" => unknown field") && !all.contains(*c))
        .collect();
    assert!(unknown.is_empty(), "labels not listed: {unknown:?}");
}
