//! `loom usage`: the provider's usage recorded against the call `loom render` names, retries,
//! conflicts and bad input, and `loom explain` showing it next to the estimate.

use super::Loom;

/// A small imported session `chat` with one model call recorded by `loom render`.
fn rendered() -> (Loom, serde_json::Value) {
    let loom = Loom::with_chat();
    let run = loom.run(["render", "chat"]).ok();
    assert_eq!(
        run.stderr.lines().collect::<Vec<_>>(),
        ["model call 1"],
        "render names the call it recorded, on stderr only"
    );
    let body = run.json();
    (loom, body)
}

#[test]
fn render_names_the_call_and_usage_is_recorded_against_it() {
    let (loom, body) = rendered();
    // Rendering the unchanged log again records nothing, so it names no call; the body is the same.
    let again = loom.run(["render", "chat"]).ok();
    assert_eq!(again.stderr, "", "no new call recorded");
    assert_eq!(again.json(), body);

    let report = [
        "usage",
        "chat",
        "--call",
        "1",
        "--input-tokens",
        "120",
        "--cached-input-tokens",
        "64",
        "--output-tokens",
        "7",
    ];
    let out = loom.run(report).ok().stdout();
    assert_eq!(
        out,
        "model call 1 of session chat: 120 input tokens (64 cached), 7 output tokens\n"
    );
    // A retry of the same report is accepted and changes nothing.
    assert_eq!(loom.run(report).ok().stdout(), out);

    let explained = loom
        .run(["explain", "chat", "--event", "1", "--json"])
        .ok()
        .json();
    let calls = explained.as_array().unwrap();
    assert_eq!(calls.len(), 1, "{explained}");
    assert_eq!(calls[0]["call"], "call 1");
    assert_eq!(calls[0]["usage"]["input_tokens"], 120);
    assert_eq!(calls[0]["usage"]["cached_input_tokens"], 64);
    assert_eq!(calls[0]["usage"]["output_tokens"], 7);
    let estimate = calls[0]["estimate"].as_u64().unwrap();
    assert!(estimate > 0, "{explained}");
    let text = loom.run(["explain", "chat", "--event", "1"]).ok().stdout();
    assert!(
        text.contains(&format!(
            "; estimated {estimate} input tokens, provider reported 120 (64 cached)"
        )),
        "{text}"
    );
}

#[test]
fn explain_without_usage_is_unchanged() {
    let (loom, _) = rendered();
    let explained = loom
        .run(["explain", "chat", "--event", "1", "--json"])
        .ok()
        .json();
    let call = &explained.as_array().unwrap()[0];
    assert_eq!(
        call.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["at_seq", "call", "fate"],
        "{call}"
    );
    let text = loom.run(["explain", "chat", "--event", "1"]).ok().stdout();
    assert!(!text.contains("provider reported"), "{text}");
}

#[test]
fn a_conflicting_report_is_refused_and_changes_nothing() {
    let (loom, _) = rendered();
    loom.run(["usage", "chat", "--call", "1", "--input-tokens", "120"])
        .ok();
    let run = loom.run(["usage", "chat", "--call", "1", "--input-tokens", "121"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("session `chat`: model call 1: already has a usage"),
        "{}",
        run.stderr
    );
    let explained = loom
        .run(["explain", "chat", "--event", "1", "--json"])
        .ok()
        .json();
    assert_eq!(explained[0]["usage"]["input_tokens"], 120);
}

#[test]
fn bad_usage_reports_exit_2_and_name_what_is_wrong() {
    let (loom, _) = rendered();
    let cases: [(&[&str], &str); 5] = [
        (
            &["chat", "--call", "2", "--input-tokens", "1"],
            "session `chat`, model call 2: not found: the session's only model call is 1",
        ),
        (
            &["chat", "--call", "0", "--input-tokens", "1"],
            "model call 0: not found",
        ),
        (
            &["nope", "--call", "1", "--input-tokens", "1"],
            "session `nope`, model call 1: not found: the session does not exist",
        ),
        (
            &[
                "chat",
                "--call",
                "1",
                "--input-tokens",
                "10",
                "--cached-input-tokens",
                "11",
            ],
            "usage of model call 1: cached_input_tokens 11 exceeds input_tokens 10",
        ),
        (&["chat", "--call", "1"], "--input-tokens"),
    ];
    for (args, expected) in cases {
        let run = loom.run(std::iter::once(&"usage").chain(args));
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(expected), "{args:?}: {}", run.stderr);
    }
    let explained = loom
        .run(["explain", "chat", "--event", "1", "--json"])
        .ok()
        .json();
    assert!(explained[0].get("usage").is_none(), "{explained}");
}
