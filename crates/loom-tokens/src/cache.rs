//! Counted once: token counts cached per (tokenizer, content), so rendering a request never
//! re-tokenizes history.
//!
//! Events are never edited (DESIGN.md, principle 1), so an event's count under one tokenizer
//! never changes: it is keyed by (tokenizer id, session, seq). Loose text (summaries, rendered
//! observations, injected content) is keyed by (tokenizer id, SHA-256 of the text); hashing
//! runs an order of magnitude faster than tokenizing.

use std::collections::HashMap;

use loom_core::{ContentPart, Event, EventBody, MessageContent, SessionId, ToolOutput};
use sha2::{Digest, Sha256};

use crate::tokenizer::CountTokens;

/// Token counts of one event's parts, before any provider format's per-message overhead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventTokens {
    /// Text content (message text, tool output, goal, result, pin, name).
    pub content: u64,
    /// Tool-call names and arguments.
    pub tool_calls: u64,
    /// Reasoning text, which most formats do not send back.
    pub reasoning: u64,
    /// Image parts, counted by the model's image rule at request level.
    pub images: u32,
}

impl EventTokens {
    /// Content plus tool calls: what a format that drops reasoning sends.
    pub fn sent(&self) -> u64 {
        self.content + self.tool_calls
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Text([u8; 32]),
    Event(SessionId, u64),
}

/// Hit and miss counts, to show that history is not re-tokenized.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that had to tokenize.
    pub misses: u64,
}

/// Cached counts. Not serialized (so its map order never shows).
#[derive(Debug, Default)]
pub struct TokenCache {
    texts: HashMap<(String, Key), u64>,
    events: HashMap<(String, Key), EventTokens>,
    stats: CacheStats,
}

impl TokenCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tokens in `text`, tokenized at most once per tokenizer.
    pub fn count_text(&mut self, counter: &dyn CountTokens, text: &str) -> u64 {
        let key = (
            counter.id(),
            Key::Text(Sha256::digest(text.as_bytes()).into()),
        );
        if let Some(&n) = self.texts.get(&key) {
            self.stats.hits += 1;
            return n;
        }
        self.stats.misses += 1;
        let n = counter.count(text);
        self.texts.insert(key, n);
        n
    }

    /// The counts of an event of `session`, tokenized at most once per tokenizer.
    pub fn count_event(
        &mut self,
        counter: &dyn CountTokens,
        session: &SessionId,
        event: &Event,
    ) -> EventTokens {
        let key = (counter.id(), Key::Event(session.clone(), event.seq));
        if let Some(&n) = self.events.get(&key) {
            self.stats.hits += 1;
            return n;
        }
        self.stats.misses += 1;
        let n = event_tokens(counter, &event.body);
        self.events.insert(key, n);
        n
    }

    /// Hits and misses so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.texts.len() + self.events.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Counts an event's parts. A tool result offloaded to the blob store counts as nothing here:
/// its bytes are not inline, and a render shows its observation, which is counted as text.
pub fn event_tokens(counter: &dyn CountTokens, body: &EventBody) -> EventTokens {
    let mut t = EventTokens::default();
    let text = |t: &mut EventTokens, s: &str| t.content += counter.count(s);
    match body {
        EventBody::System { content } => add_content(counter, &mut t, content),
        EventBody::User { content, name } => {
            add_content(counter, &mut t, content);
            if let Some(n) = name {
                text(&mut t, n);
            }
        }
        EventBody::Assistant {
            content,
            reasoning,
            tool_calls,
            name,
            // Provider-native items are sent only in their own format; the render meters them
            // from its wire values, so they are not part of an event's format-free count.
            native: _,
        } => {
            if let Some(c) = content {
                add_content(counter, &mut t, c);
            }
            if let Some(r) = reasoning {
                t.reasoning += counter.count(r);
            }
            for call in tool_calls {
                t.tool_calls += counter.count(&call.name) + counter.count(&call.arguments);
            }
            if let Some(n) = name {
                text(&mut t, n);
            }
        }
        EventBody::ToolResult { content, .. } => match content {
            ToolOutput::Text(s) => text(&mut t, s),
            ToolOutput::Parts(parts) => add_parts(counter, &mut t, parts),
            ToolOutput::Blob(_) => {}
        },
        EventBody::DirectMessage { content, .. } => text(&mut t, content),
        EventBody::Spawn { goal, extract, .. } => {
            text(&mut t, goal);
            if let Some(x) = extract {
                text(&mut t, x);
            }
        }
        EventBody::AgentResult { result, .. } => text(&mut t, result),
        EventBody::Pin { label, content } => {
            if let Some(l) = label {
                text(&mut t, l);
            }
            text(&mut t, content);
        }
        // A record of the client's rewrite: never rendered. A repeat's content is its origin's,
        // counted there.
        EventBody::Rewrite { .. } | EventBody::Repeat { .. } | EventBody::Hidden { .. } => {}
    }
    t
}

fn add_content(counter: &dyn CountTokens, t: &mut EventTokens, content: &MessageContent) {
    match content {
        MessageContent::Text(s) => t.content += counter.count(s),
        MessageContent::Parts(parts) => add_parts(counter, t, parts),
    }
}

fn add_parts(counter: &dyn CountTokens, t: &mut EventTokens, parts: &[ContentPart]) {
    for p in parts {
        match p {
            ContentPart::Text { text } => t.content += counter.count(text),
            ContentPart::Image { .. } => t.images += 1,
            // What Loom does not model is counted as the JSON it is sent as.
            ContentPart::Opaque { value, .. } => t.content += counter.count(&value.to_string()),
        }
    }
}
