//! Provider-native reasoning: sent back unchanged, first, in its own format only, metered like
//! everything sent, and only while its turn is rendered in place.

use serde_json::{json, Value};

use super::*;
use crate::api::Api;
use crate::event::NativeReasoning;

fn thinking(id: &str) -> Value {
    json!({"type": "thinking", "thinking": format!("plan for {id}"), "signature": format!("sig_{id}")})
}

fn reasoning_item(id: &str) -> Value {
    json!({
        "type": "reasoning",
        "id": format!("rs_{id}"),
        "summary": [{"type": "summary_text", "text": format!("plan for {id}")}],
        "encrypted_content": format!("enc_{id}"),
    })
}

/// A Gemini turn's parts as Gemini sent them: its thought, its text, its call signed.
fn gemini_parts(id: &str) -> Vec<Value> {
    vec![
        json!({"text": format!("plan for {id}"), "thought": true}),
        json!({"text": format!("looking at {id}")}),
        json!({"functionCall": {"id": id, "name": "bash", "args": {"command": format!("cat {id}")}},
            "thoughtSignature": format!("gsig_{id}")}),
    ]
}

/// A step whose assistant turn carries native items of `api`.
fn native_step(log: &mut Log, id: &str, api: Api, output: &str) {
    let items = match api {
        Api::Anthropic => vec![thinking(id)],
        Api::OpenaiResponses | Api::OpenaiChat => vec![reasoning_item(id)],
        Api::Gemini => gemini_parts(id),
    };
    log.push(EventBody::Assistant {
        content: Some(format!("looking at {id}").into()),
        reasoning: Some(format!("plan for {id}")),
        tool_calls: vec![ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: format!("{{\"command\":\"cat {id}\"}}"),
        }],
        name: None,
        native: Some(NativeReasoning { api, items }),
    });
    log.push(EventBody::ToolResult {
        call_id: id.into(),
        tool_name: "bash".into(),
        content: ToolOutput::Text(output.into()),
        is_error: false,
        stats: ContentStats::of(output.as_bytes()),
    });
}

fn native_log(api: Api, steps: usize, output_words: usize) -> Log {
    let mut log = Log::new();
    log.system("You are a careful agent.");
    log.user("Fix the bug in parser.py");
    for i in 0..steps {
        native_step(&mut log, &format!("c{i}"), api, &words(output_words, "w"));
    }
    log
}

fn render_all(fx: &Fixture, log: &Log, format: Format) -> Rendered {
    render(
        &fx.input(&log.events, format),
        &CompactionState::default(),
        &mut CostMemo::new(),
    )
    .unwrap()
}

#[test]
fn anthropic_thinking_blocks_come_first_and_unchanged() {
    let fx = Fixture::new(100_000);
    let log = native_log(Api::Anthropic, 2, 5);
    let body = render_all(&fx, &log, Format::ANTHROPIC).body();
    let turn = &body["messages"][1];
    assert_eq!(turn["role"], "assistant");
    assert_eq!(turn["content"][0], thinking("c0"));
    assert_eq!(turn["content"][1]["type"], "text");
    assert_eq!(turn["content"][2]["type"], "tool_use");
    insta::assert_snapshot!(
        "anthropic_native",
        serde_json::to_string_pretty(&body).unwrap()
    );
}

#[test]
fn responses_reasoning_items_precede_the_turns_message_and_calls() {
    let fx = Fixture::new(100_000);
    let log = native_log(Api::OpenaiResponses, 2, 5);
    let body = render_all(&fx, &log, Format::OPENAI_RESPONSES).body();
    let input = body["input"].as_array().unwrap();
    let kinds: Vec<&str> = input
        .iter()
        .map(|i| i["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        [
            "message",
            "message",
            "reasoning",
            "message",
            "function_call",
            "function_call_output",
            "reasoning",
            "message",
            "function_call",
            "function_call_output",
        ]
    );
    assert_eq!(input[2], reasoning_item("c0"));
    assert_eq!(input[6], reasoning_item("c1"));
    insta::assert_snapshot!(
        "responses_native",
        serde_json::to_string_pretty(&body).unwrap()
    );
}

#[test]
fn native_items_are_sent_only_to_their_own_api() {
    let fx = Fixture::new(100_000);
    for (api, marker) in [
        (Api::Anthropic, "sig_c0"),
        (Api::OpenaiResponses, "enc_c0"),
        (Api::Gemini, "gsig_c0"),
    ] {
        let log = native_log(api, 1, 5);
        for format in Format::ALL {
            let text = render_all(&fx, &log, format).body().to_string();
            let own = matches!(
                (api, format),
                (Api::Anthropic, Format::ANTHROPIC)
                    | (Api::OpenaiResponses, Format::OPENAI_RESPONSES)
                    | (Api::Gemini, Format::GEMINI)
            );
            assert_eq!(text.contains(marker), own, "{api:?} in {format:?}");
        }
    }
}

#[test]
fn native_items_are_metered() {
    let fx = Fixture::new(100_000);
    for (api, format) in [
        (Api::Anthropic, Format::ANTHROPIC),
        (Api::OpenaiResponses, Format::OPENAI_RESPONSES),
        (Api::Gemini, Format::GEMINI),
    ] {
        let with = native_log(api, 3, 5);
        let mut without = Log::new();
        for e in &with.events {
            let mut body = e.body.clone();
            if let EventBody::Assistant { native, .. } = &mut body {
                *native = None;
            }
            without.push(body);
        }
        let (a, b) = (
            render_all(&fx, &with, format),
            render_all(&fx, &without, format),
        );
        assert!(a.receipt.estimate > b.receipt.estimate, "{format:?}");
        assert_eq!(a.tokens(), a.receipt.estimate);
        for (piece, msg) in a.pieces.iter().zip(&a.request.messages) {
            assert_eq!(piece.tokens, format.msg_tokens(msg, &ApproxMeter));
        }
    }
}

/// Folded and thinned turns lose their native items; turns rendered in place keep them. Every
/// turn here has text, so a turn whose thinking block is sent must still have its text.
#[test]
fn only_turns_rendered_in_place_keep_their_native_items() {
    let fx = Fixture::new(2_000);
    let log = native_log(Api::Anthropic, 80, 40);
    let renders = replay(&fx, &log, Format::ANTHROPIC);
    let folded = |r: &&crate::render::Rendered| {
        !r.receipt.grouped.is_empty() || !r.receipt.dropped.is_empty()
    };
    // The latest render that both folds and thins (a later point may fold every thinned turn).
    let last = renders
        .iter()
        .rev()
        .find(|r| folded(r) && !r.receipt.thinned.is_empty())
        .expect("the fixture must fold and thin turns");
    let body = last.body();
    let mut sent = 0;
    for msg in body["messages"].as_array().unwrap() {
        let blocks = msg["content"].as_array().cloned().unwrap_or_default();
        let Some(first) = blocks.iter().position(|b| b["type"] == "thinking") else {
            continue;
        };
        sent += 1;
        assert_eq!(first, 0, "thinking must come first: {msg}");
        let call = blocks
            .iter()
            .find(|b| b["type"] == "tool_use")
            .and_then(|b| b["id"].as_str())
            .unwrap();
        assert_eq!(blocks[0], thinking(call), "a turn got another turn's block");
        assert!(
            blocks.iter().any(|b| b["type"] == "text"),
            "a thinned turn kept its thinking: {msg}"
        );
    }
    assert!(sent > 0, "the recent turns keep their thinking");
    assert!(
        sent < 79,
        "folded or thinned turns must drop their thinking ({sent} sent)"
    );
}

/// Gemini refuses the current tool loop's calls without their signatures, and an agent's run
/// is one tool loop: every call a render sends, thinned turns' included, goes with the signature
/// Gemini gave it, while folded turns (no calls left) and thinned ones drop their thoughts.
#[test]
fn every_gemini_call_sent_keeps_its_signature() {
    let fx = Fixture::new(2_000);
    let log = native_log(Api::Gemini, 80, 40);
    let renders = replay(&fx, &log, Format::GEMINI);
    assert!(
        renders.iter().any(|r| !r.receipt.thinned.is_empty()),
        "the fixture must thin turns"
    );
    let mut calls = 0;
    for r in &renders {
        let body = r.body();
        crate::render::check_gemini(&body).unwrap();
        for content in body["contents"].as_array().unwrap() {
            for part in content["parts"].as_array().unwrap() {
                if let Some(call) = part.get("functionCall") {
                    calls += 1;
                    let id = call["id"].as_str().unwrap();
                    assert_eq!(
                        part["thoughtSignature"],
                        json!(format!("gsig_{id}")),
                        "{part}"
                    );
                }
            }
        }
    }
    assert!(calls > 100, "{calls} calls sent");
}

/// A turn that holds only thinking (no text, no calls) is the last message: the tail's cache
/// breakpoint must not land on a signed block.
#[test]
fn cache_breakpoints_never_land_on_thinking_blocks() {
    let fx = Fixture::new(100_000);
    let mut log = Log::new();
    log.system("sys");
    log.user("think about it");
    log.push(EventBody::Assistant {
        content: None,
        reasoning: Some("hm".into()),
        tool_calls: Vec::new(),
        name: None,
        native: Some(NativeReasoning {
            api: Api::Anthropic,
            items: vec![thinking("only")],
        }),
    });
    let body = render_all(&fx, &log, Format::ANTHROPIC).body();
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["content"][0], thinking("only"), "{last}");
    for block in last["content"].as_array().unwrap() {
        if block["type"] == "thinking" {
            assert!(block.get("cache_control").is_none(), "{block}");
        }
    }
    check_request(Format::ANTHROPIC, &body).unwrap();
}
