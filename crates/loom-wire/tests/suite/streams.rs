//! Streamed replies: each fixture, fed whole, split at every byte and one byte at a time, gives
//! the same turn as the same reply sent whole; cut streams, error events and bad events fail.

use loom_wire::{parse_reply, ProviderError, SseEvent, StreamAssembler};

use loom_core::Api;
use serde_json::{json, Value};

use super::{assemble, assemble_events, assemble_every_split, fixture, sse_events};

const PAIRS: [(Api, &str, &str); 4] = [
    (Api::OpenaiChat, "chat_tools.sse", "chat_tools.json"),
    (Api::OpenaiChat, "chat_refusal.sse", "chat_refusal.json"),
    (
        Api::OpenaiResponses,
        "responses_tools.sse",
        "responses_tools.json",
    ),
    (Api::Anthropic, "messages_tools.sse", "messages_tools.json"),
];

#[test]
fn every_stream_at_every_split_gives_the_reply_of_its_body() {
    for (api, stream, body) in PAIRS {
        let streamed = assemble_every_split(api, &fixture(stream)).unwrap();
        let whole = parse_reply(api, &fixture(body)).unwrap();
        assert_eq!(streamed, whole, "{stream} vs {body}");
        // The fixtures exercise what they claim to.
        assert!(!streamed.tool_calls.is_empty() || stream == "chat_refusal.sse");
        assert!(streamed.usage.is_some(), "{stream}");
    }
}

/// The stream as (event name, payload) pairs, to rewrite it.
fn events(bytes: &[u8]) -> Vec<(Option<String>, String)> {
    let mut parser = loom_wire::SseParser::new();
    let mut out: Vec<_> = parser.push(bytes);
    out.extend(parser.finish());
    out.into_iter().map(|e| (e.event, e.data)).collect()
}

fn to_sse(events: &[(Option<String>, String)]) -> Vec<u8> {
    let mut out = String::new();
    for (name, data) in events {
        if let Some(name) = name {
            out.push_str(&format!("event: {name}\n"));
        }
        out.push_str(&format!("data: {data}\n\n"));
    }
    out.into_bytes()
}

#[test]
fn responses_with_an_empty_terminal_output_fall_back_to_the_items_streamed() {
    let mut evs = events(&fixture("responses_tools.sse"));
    let last = evs.last_mut().unwrap();
    let mut completed: Value = serde_json::from_str(&last.1).unwrap();
    completed["response"]["output"] = json!([]);
    last.1 = completed.to_string();
    let whole = parse_reply(Api::OpenaiResponses, &fixture("responses_tools.json")).unwrap();
    assert_eq!(
        assemble(Api::OpenaiResponses, &[&to_sse(&evs)]).unwrap(),
        whole
    );

    // Without the `output_item.done` events, the items are rebuilt from the deltas: the same turn,
    // though the native item is the rebuilt one (no `encrypted_content` was ever streamed).
    evs.retain(|(name, _)| name.as_deref() != Some("response.output_item.done"));
    let rebuilt = assemble_every_split(Api::OpenaiResponses, &to_sse(&evs)).unwrap();
    assert_eq!(rebuilt.content, whole.content);
    assert_eq!(rebuilt.reasoning, whole.reasoning);
    assert_eq!(rebuilt.tool_calls, whole.tool_calls);
    assert_eq!(rebuilt.native[0]["id"], "rs_1");
    assert_eq!(rebuilt.native[0]["summary"], whole.native[0]["summary"]);
}

#[test]
fn responses_incomplete_and_failed_complete_with_their_reason() {
    let r =
        assemble_every_split(Api::OpenaiResponses, &fixture("responses_incomplete.sse")).unwrap();
    assert_eq!(r.finish_reason.as_deref(), Some("max_output_tokens"));
    assert_eq!(r.content.as_deref(), Some("The answer is"));
    assert_eq!(r.usage.unwrap().output_tokens, Some(16));

    let failed = json!({"type": "response.failed", "response": {"id": "resp_3", "status": "failed",
        "output": [], "error": {"code": "server_error", "message": "boom"}}});
    let mut a = StreamAssembler::new(Api::OpenaiResponses);
    assert!(!a.is_complete());
    a.push(&data(&failed)).unwrap();
    assert!(a.is_complete());
    let r = a.finish().unwrap();
    assert_eq!(r.finish_reason.as_deref(), Some("failed"));
    assert_eq!(r.content, None);
}

fn data(v: &Value) -> SseEvent {
    SseEvent {
        event: v.get("type").and_then(Value::as_str).map(str::to_owned),
        data: v.to_string(),
    }
}

#[test]
fn a_stream_cut_anywhere_before_its_end_is_incomplete() {
    for (api, stream, _) in PAIRS {
        let bytes = fixture(stream);
        // Where the terminal event starts: everything before it is a cut stream.
        let terminal = match api {
            Api::OpenaiChat => "data: [DONE]",
            Api::OpenaiResponses => "event: response.completed",
            Api::Anthropic => "event: message_stop",
            // Each event a whole response; the last one gives the candidate's finish reason.
            Api::Gemini => "\"finishReason\"",
        };
        let end = String::from_utf8_lossy(&bytes).rfind(terminal).unwrap();
        let mut checked = None;
        for cut in 0..end {
            let events = sse_events(&[&bytes[..cut]]);
            // Cuts inside one line give the same events; assemble each distinct prefix once.
            if checked == Some(events.len()) {
                continue;
            }
            checked = Some(events.len());
            match assemble_events(api, &events) {
                Err(ProviderError::Incomplete { api: got, .. }) => assert_eq!(got, api),
                other => panic!("{stream} cut at {cut}: expected Incomplete, got {other:?}"),
            }
        }
        assert!(
            checked.unwrap_or(0) > 3,
            "{stream}: the cuts covered the stream"
        );
    }
}

#[test]
fn unknown_event_types_are_ignored() {
    for (api, stream, body) in PAIRS {
        let mut evs = events(&fixture(stream));
        let future = json!({"type": "some.future_event", "payload": [1, 2, 3]}).to_string();
        evs.insert(1, (Some("some.future_event".into()), future.clone()));
        evs.insert(evs.len() - 1, (None, future));
        let r = assemble(api, &[&to_sse(&evs)]).unwrap();
        assert_eq!(r, parse_reply(api, &fixture(body)).unwrap(), "{stream}");
    }
}

#[test]
fn error_events_fail_naming_the_event_and_the_provider_error() {
    let cases = [
        (
            Api::OpenaiChat,
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n\
             data: {\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n",
            "server_error",
            "event 2",
        ),
        (
            Api::OpenaiResponses,
            "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"Slow down\",\"param\":null,\"sequence_number\":1}\n\n",
            "rate_limit_exceeded",
            "event 1 (error)",
        ),
        (
            Api::Anthropic,
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":3}}}\n\n\
             event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
            "overloaded_error",
            "event 2 (error)",
        ),
    ];
    for (api, stream, kind, record) in cases {
        match assemble_every_split(api, stream.as_bytes()) {
            Err(ProviderError::Upstream {
                kind: k, record: r, ..
            }) => {
                assert_eq!((k.as_str(), r.as_str()), (kind, record), "{api}");
            }
            other => panic!("{api}: expected an upstream error, got {other:?}"),
        }
    }
}

#[test]
fn a_malformed_payload_is_an_error_naming_the_event() {
    let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n\
                  event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\n\n";
    let e = assemble(Api::Anthropic, &[stream.as_bytes()]).unwrap_err();
    assert!(matches!(e, ProviderError::Json { .. }), "{e}");
    assert!(
        e.to_string().contains("event 2 (content_block_delta)"),
        "{e}"
    );

    let e = assemble(Api::OpenaiChat, &[b"data: {\"choices\": 7}\n\n"]).unwrap_err();
    match e {
        ProviderError::Shape { field, record, .. } => {
            assert_eq!((field.as_str(), record.as_str()), ("choices", "event 1"));
        }
        other => panic!("expected a shape error, got {other}"),
    }
}

#[test]
fn bad_streams_name_what_is_missing() {
    // A call whose id never arrived cannot be logged: its result could never be paired.
    let chat = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\ndata: [DONE]\n\n";
    match assemble(Api::OpenaiChat, &[chat.as_bytes()]) {
        Err(ProviderError::Shape { field, .. }) => {
            assert_eq!(field, "choices[0].delta.tool_calls[0].id");
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    // A delta for a block that was never started.
    let messages = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n";
    match assemble(Api::Anthropic, &[messages.as_bytes()]) {
        Err(ProviderError::Shape { field, record, .. }) => {
            assert_eq!(
                (field.as_str(), record.as_str()),
                ("index", "event 1 (content_block_delta)")
            );
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    // A text delta aimed at a tool-use block.
    let mismatch = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}}\n\n\
                    event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n";
    match assemble(Api::Anthropic, &[mismatch.as_bytes()]) {
        Err(ProviderError::Shape { field, .. }) => assert_eq!(field, "delta.type"),
        other => panic!("expected a shape error, got {other:?}"),
    }
}

#[test]
fn chat_reasoning_from_compatible_servers_and_n_greater_than_one() {
    let stream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"think \"}},{\"index\":1,\"delta\":{\"content\":\"other\"}}]}\n\n\
                  data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"more\"}}]}\n\n\
                  data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"answer\"},\"finish_reason\":\"stop\"}]}\n\n\
                  data: [DONE]\n\n";
    let r = assemble_every_split(Api::OpenaiChat, stream.as_bytes()).unwrap();
    assert_eq!(r.reasoning.as_deref(), Some("think more"));
    assert_eq!(r.content.as_deref(), Some("answer"));
    assert_eq!(r.usage, None);
    assert_eq!(r.finish_reason.as_deref(), Some("stop"));
}

#[test]
fn anthropic_usage_in_message_delta_overrides_message_start() {
    let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n\
                  event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"input_tokens\":7,\"cache_read_input_tokens\":10,\"output_tokens\":42}}\n\n\
                  event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let r = assemble_every_split(Api::Anthropic, stream.as_bytes()).unwrap();
    let u = r.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.cached_input_tokens, u.output_tokens),
        (17, Some(10), Some(42))
    );
    assert_eq!(r.finish_reason.as_deref(), Some("end_turn"));
    assert_eq!(r.content, None);
}

#[test]
fn anthropic_server_tool_blocks_are_not_client_calls() {
    let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":5}}}\n\n\
                  event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"srvtoolu_1\",\"name\":\"web_search\",\"input\":{}}}\n\n\
                  event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"query\\\": \\\"rust\\\"}\"}}\n\n\
                  event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"web_search_tool_result\",\"tool_use_id\":\"srvtoolu_1\",\"content\":[]}}\n\n\
                  event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
                  event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"citations_delta\",\"citation\":{\"type\":\"web_search_result_location\"}}}\n\n\
                  event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"text_delta\",\"text\":\"Found it.\"}}\n\n\
                  event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let r = assemble_every_split(Api::Anthropic, stream.as_bytes()).unwrap();
    assert!(r.tool_calls.is_empty());
    assert_eq!(r.content.as_deref(), Some("Found it."));
    assert_eq!(r.usage.unwrap().input_tokens, 5);
}

/// A small deterministic generator, so a failure replays exactly.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 16) as usize
    }
}

#[test]
fn corrupted_streams_and_bodies_never_panic() {
    let mut rng = XorShift(0x5eed_1234_abcd_0001);
    let noise = [
        b'{', b'}', b'"', b'\n', b'\r', b':', b'[', b'0', b'\\', 0xff, b' ',
    ];
    for (api, stream, body) in PAIRS {
        for source in [fixture(stream), fixture(body)] {
            for _ in 0..300 {
                let mut bytes = source.clone();
                for _ in 0..1 + rng.next() % 4 {
                    let at = rng.next() % bytes.len();
                    bytes[at] = noise[rng.next() % noise.len()];
                }
                bytes.truncate(bytes.len() - rng.next() % 8);
                // Any outcome but a panic is fine; a changed stream is usually refused.
                let _ = assemble(api, &[&bytes]);
                let _ = parse_reply(api, &bytes);
            }
        }
    }
}
