//! `docs/formats.md` is checked: its event examples are the serialised form, and its import
//! examples import into exactly the events shown.

use loom_core::Api;
use loom_core::Event;
use loom_store::MemoryBlobStore;

use super::parse_as;

const DOC: &str = include_str!("../../../../docs/formats.md");

/// The fenced blocks of the page as (info string, body).
fn blocks() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in DOC.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) => current = Some((info.trim().to_owned(), String::new())),
            (Some(_), Some(_)) => out.extend(current.take()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(current.is_none(), "unclosed code block in docs/formats.md");
    out
}

#[test]
fn every_documented_event_round_trips() {
    let events: Vec<String> = blocks()
        .into_iter()
        .filter(|(info, _)| info == "json event")
        .map(|(_, body)| body)
        .collect();
    assert!(events.len() >= 8, "expected an example of every kind");
    let mut kinds = std::collections::BTreeSet::new();
    for text in events {
        let event: Event = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e} in\n{text}"));
        event.body.validate().unwrap();
        kinds.insert(event.body.kind());
        let documented: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            documented,
            "not canonical:\n{text}"
        );
    }
    assert_eq!(
        kinds.len(),
        11,
        "every event kind needs an example: {kinds:?}"
    );
}

#[test]
fn every_documented_import_gives_the_documented_events() {
    let blocks = blocks();
    let mut checked = Vec::new();
    for pair in blocks.windows(2) {
        let [(info_in, input), (info_out, expected)] = pair else {
            continue;
        };
        if info_in != "json input" || info_out != "json events" {
            continue;
        }
        let blobs = MemoryBlobStore::new();
        let sessions = parse_as(input, None, &blobs).unwrap_or_else(|e| panic!("{e} in\n{input}"));
        assert_eq!(sessions.len(), 1);
        let events: Vec<Event> = sessions[0]
            .events
            .iter()
            .enumerate()
            .map(|(i, e)| Event {
                seq: i as u64 + 1,
                ts_ms: e.ts_ms,
                body: e.body.clone(),
            })
            .collect();
        let expected: serde_json::Value = serde_json::from_str(expected).unwrap();
        assert_eq!(
            serde_json::to_value(&events).unwrap(),
            expected,
            "for\n{input}"
        );
        checked.push(sessions[0].format);
    }
    assert_eq!(
        checked,
        [
            Api::OpenaiChat,
            Api::Anthropic,
            Api::OpenaiResponses,
            Api::Gemini
        ]
    );
}
