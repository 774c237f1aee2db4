//! Counted once: a second count of the same event or text does not tokenize again.

use std::cell::Cell;

use loom_core::{Event, EventBody, MessageContent, SessionId, ToolCall};
use loom_tokens::{CountTokens, Encoding, TokenCache, Tokenizer};

/// A tokenizer that counts how often it is asked to tokenize.
struct Spy {
    inner: Tokenizer,
    calls: Cell<u64>,
}

impl CountTokens for Spy {
    fn id(&self) -> String {
        self.inner.id()
    }
    fn exact(&self) -> bool {
        true
    }
    fn count(&self, text: &str) -> u64 {
        self.calls.set(self.calls.get() + 1);
        self.inner.count(text)
    }
}

fn spy(enc: Encoding) -> Spy {
    Spy {
        inner: Tokenizer::Bpe(enc),
        calls: Cell::new(0),
    }
}

fn assistant(seq: u64) -> Event {
    Event {
        seq,
        ts_ms: 0,
        body: EventBody::Assistant {
            content: Some(MessageContent::Text("Listing the folder.".into())),
            reasoning: Some("The user wants files.".into()),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "bash".into(),
                arguments: "{\"cmd\":\"ls\"}".into(),
            }],
            name: None,
            native: None,
        },
    }
}

#[test]
fn an_event_is_tokenized_once_per_tokenizer() -> anyhow::Result<()> {
    let session = SessionId::new("s1")?;
    let event = assistant(7);
    let mut cache = TokenCache::new();
    let o200k = spy(Encoding::O200kBase);
    let first = cache.count_event(&o200k, &session, &event);
    let calls_after_first = o200k.calls.get();
    assert!(calls_after_first > 0);
    let enc = Encoding::O200kBase;
    assert_eq!(first.content, enc.count("Listing the folder.") as u64);
    assert_eq!(first.reasoning, enc.count("The user wants files.") as u64);
    assert_eq!(
        first.tool_calls,
        (enc.count("bash") + enc.count("{\"cmd\":\"ls\"}")) as u64
    );

    let second = cache.count_event(&o200k, &session, &event);
    assert_eq!(second, first);
    assert_eq!(
        o200k.calls.get(),
        calls_after_first,
        "second count must not tokenize"
    );
    assert_eq!(cache.stats().hits, 1);

    // Another tokenizer, another session or another seq is a different entry.
    let cl100k = spy(Encoding::Cl100kBase);
    cache.count_event(&cl100k, &session, &event);
    assert!(cl100k.calls.get() > 0);
    cache.count_event(&o200k, &SessionId::new("s2")?, &event);
    cache.count_event(&o200k, &session, &assistant(8));
    assert_eq!(cache.stats().misses, 4);
    Ok(())
}

#[test]
fn text_is_keyed_by_content() {
    let mut cache = TokenCache::new();
    let t = spy(Encoding::O200kBase);
    let a = cache.count_text(&t, "a summary of steps 1 to 40");
    let b = cache.count_text(&t, &String::from("a summary of steps 1 to 40"));
    assert_eq!(a, b);
    assert_eq!(t.calls.get(), 1);
    cache.count_text(&t, "a different summary");
    assert_eq!(t.calls.get(), 2);
    assert_eq!(cache.len(), 2);
}

#[test]
fn estimates_with_a_new_calibration_are_not_served_stale() {
    let mut cache = TokenCache::new();
    let old = Tokenizer::Estimate(loom_tokens::Calibration::default());
    let mut cal = loom_tokens::Calibration::default();
    cal.margin += 0.5;
    let new = Tokenizer::Estimate(cal);
    let text = "some words to estimate ".repeat(50);
    let a = cache.count_text(&old, &text);
    let b = cache.count_text(&new, &text);
    assert!(
        b > a,
        "a changed calibration must give a fresh count ({a} vs {b})"
    );
}
