//! What the mock "model" answers, as a pure function of the request, so that multi-turn tool
//! conversations run the same way every time: a user turn with tools offered gets a tool call
//! (several in parallel when the user says `parallel`), anything else gets a short text that says
//! what the model saw. Also the usage figures, including a simulated prompt cache.

use base64::Engine as _;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::request::{Last, Prompt};

/// How many words of the last message the reply echoes.
const ECHO_WORDS: usize = 6;

/// How many tools a reply calls at once when the user asks for `parallel` calls (if that many
/// are offered).
const PARALLEL_CALLS: usize = 2;

/// The crude tokenizer's ratio, the same for input, output and cached counts so they compare.
const BYTES_PER_TOKEN: usize = 4;

/// One tool call the reply makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    /// The tool's name, as offered.
    pub(crate) name: String,
    /// The arguments, a JSON object serialised as the providers send it.
    pub(crate) arguments: String,
}

/// The reply in no provider's format: each renderer puts it into its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    /// The reasoning shown before the answer, when the request asked for it.
    pub(crate) thinking: Option<String>,
    /// The text answer; absent when the reply calls tools.
    pub(crate) text: Option<String>,
    /// The tool calls, in order.
    pub(crate) calls: Vec<Call>,
}

/// Token counts of one reply, in no provider's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Usage {
    /// All input tokens, cached or not.
    pub(crate) input: u64,
    /// Input tokens served from the simulated cache (never above `input`).
    pub(crate) cache_read: u64,
    /// Anthropic: input tokens written to the cache up to the last `cache_control` marker.
    pub(crate) cache_write: u64,
    /// All output tokens, reasoning included.
    pub(crate) output: u64,
    /// The part of `output` spent on reasoning.
    pub(crate) reasoning: u64,
}

impl Usage {
    /// Multiplies every input figure by `scale` (rounded up), keeping cache reads and writes
    /// within the input.
    pub(crate) fn scale_input(&mut self, scale: f64) {
        let scaled = |n: u64| (n as f64 * scale).ceil() as u64;
        self.input = scaled(self.input);
        self.cache_read = scaled(self.cache_read).min(self.input);
        self.cache_write = scaled(self.cache_write).min(self.input - self.cache_read);
    }

    /// Anthropic's `input_tokens`, which leaves out what was read from or written to the cache.
    pub(crate) fn uncached_input(&self) -> u64 {
        self.input
            .saturating_sub(self.cache_read)
            .saturating_sub(self.cache_write)
    }
}

/// The recall tool a context engine may offer: the mock calls it only when asked to.
const RECALL_TOOL: &str = "loom_recall";

/// A user turn that says `recall` while `loom_recall` is offered: the mock reads the last
/// reference the conversation gives (`loom_recall ref=X`) again, saying so first.
fn recall(prompt: &Prompt) -> Option<Reply> {
    if prompt.last != Last::User
        || !prompt.tools.iter().any(|t| t == RECALL_TOOL)
        || !prompt.last_text.to_lowercase().contains("recall")
    {
        return None;
    }
    let text = String::from_utf8_lossy(&prompt.cache_key);
    let marker = "loom_recall ref=";
    let at = text.rfind(marker)? + marker.len();
    let reference: String = text[at..]
        .chars()
        .take_while(|c| !c.is_whitespace() && !matches!(c, ')' | '"' | '\\' | ']'))
        .collect();
    Some(Reply {
        // A model thinking before its tool use does so here too (Anthropic then wants the
        // turn, sent back, to open with its thinking).
        thinking: prompt
            .thinking
            .then(|| format!("The conversation names {reference}; I should read it again.")),
        text: Some("Let me read that again. ".to_owned()),
        calls: vec![Call {
            name: RECALL_TOOL.to_owned(),
            arguments: json!({ "ref": reference }).to_string(),
        }],
    })
}

/// Decides the reply to `prompt`.
pub(crate) fn decide(prompt: &Prompt) -> Reply {
    if let Some(reply) = recall(prompt) {
        return reply;
    }
    let words = first_words(&prompt.last_text, ECHO_WORDS);
    let offered: Vec<&String> = prompt.tools.iter().filter(|t| *t != RECALL_TOOL).collect();
    let calls: Vec<Call> = if prompt.last == Last::User && !offered.is_empty() {
        let count = if says_parallel(&prompt.last_text) {
            PARALLEL_CALLS
        } else {
            1
        };
        offered
            .iter()
            .take(count)
            .map(|name| Call {
                name: (*name).clone(),
                arguments: json!({ "query": words }).to_string(),
            })
            .collect()
    } else {
        Vec::new()
    };
    let thinking = prompt.thinking.then(|| {
        if calls.is_empty() {
            format!(
                "There are {} messages and the last one says \"{words}\"; a short answer will do.",
                prompt.items
            )
        } else {
            let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
            format!(
                "The user asks \"{words}\"; I should call {}.",
                names.join(" and ")
            )
        }
    });
    let text = calls
        .is_empty()
        .then(|| format!("ok: {} messages, last: {words}", prompt.items));
    Reply {
        thinking,
        text,
        calls,
    }
}

/// The usage of `reply` to `prompt`, given how many bytes of the prompt's cache key it shares
/// with the previous request on the same endpoint.
pub(crate) fn usage(prompt: &Prompt, common_prefix: usize, reply: &Reply) -> Usage {
    let input = tokens(prompt.cache_key.len());
    let cache_read = (common_prefix / BYTES_PER_TOKEN) as u64;
    let cache_read = cache_read.min(input);
    let cache_write = prompt
        .cache_breakpoint
        .map(|at| {
            ((at / BYTES_PER_TOKEN) as u64)
                .min(input)
                .saturating_sub(cache_read)
        })
        .unwrap_or(0);
    let reasoning = reply
        .thinking
        .as_deref()
        .map(|t| tokens(t.len()))
        .unwrap_or(0);
    let visible: usize = reply.text.as_deref().map(str::len).unwrap_or(0)
        + reply
            .calls
            .iter()
            .map(|c| c.name.len() + c.arguments.len())
            .sum::<usize>();
    Usage {
        input,
        cache_read,
        cache_write,
        output: tokens(visible) + reasoning,
        reasoning,
    }
}

/// A deterministic stand-in for a provider's opaque signature over `text` (base64 of its
/// SHA-256), so a client that sends thinking back can be checked byte for byte.
pub(crate) fn signature(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text.as_bytes()))
}

/// Unique ids for the objects of one reply: a per-reply serial and an index within the reply,
/// so ids never repeat within one mock's lifetime and are the same on every run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ids {
    serial: u64,
    /// Whether tool calls are numbered within the reply only (`call_0` in every reply).
    calls_per_reply: bool,
}

impl Ids {
    /// Ids for the reply numbered `serial`.
    pub(crate) fn new(serial: u64, calls_per_reply: bool) -> Self {
        Self {
            serial,
            calls_per_reply,
        }
    }

    /// The id of the `index`th object of kind `prefix` (`call_`, `toolu_`, `msg_`, ...).
    pub(crate) fn id(&self, prefix: &str, index: usize) -> String {
        format!("{prefix}{:020}{index:04}", self.serial)
    }

    /// The id of the reply's `index`th tool call (`call_`, `toolu_`).
    pub(crate) fn call_id(&self, prefix: &str, index: usize) -> String {
        if self.calls_per_reply {
            format!("{prefix}{index}")
        } else {
            self.id(prefix, index)
        }
    }
}

/// A crude token count, never zero (a provider bills at least one token).
fn tokens(bytes: usize) -> u64 {
    ((bytes / BYTES_PER_TOKEN) as u64).max(1)
}

/// The first `n` words of `text`, on one line.
fn first_words(text: &str, n: usize) -> String {
    text.split_whitespace()
        .take(n)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `text` contains the word `parallel` (any case), which asks for parallel tool calls.
fn says_parallel(text: &str) -> bool {
    text.split(|c: char| !c.is_alphanumeric())
        .any(|w| w.eq_ignore_ascii_case("parallel"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(last: Last, text: &str, tools: &[&str], thinking: bool) -> Prompt {
        Prompt {
            model: "m".into(),
            stream: false,
            include_usage: false,
            tools: tools.iter().map(|t| t.to_string()).collect(),
            items: 3,
            last,
            last_text: text.into(),
            thinking,
            cache_key: vec![b'x'; 400],
            cache_breakpoint: None,
        }
    }

    #[test]
    fn user_turn_with_tools_calls_the_first() {
        let reply = decide(&prompt(
            Last::User,
            "look up the weather in Paris today please",
            &["search", "fetch"],
            false,
        ));
        assert_eq!(reply.text, None);
        assert_eq!(reply.calls.len(), 1);
        assert_eq!(reply.calls[0].name, "search");
        assert_eq!(
            reply.calls[0].arguments,
            r#"{"query":"look up the weather in Paris"}"#
        );
    }

    #[test]
    fn parallel_calls_two_tools_only_when_two_are_offered() {
        let reply = decide(&prompt(
            Last::User,
            "do these in Parallel, please",
            &["a", "b", "c"],
            false,
        ));
        let names: Vec<&str> = reply.calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            decide(&prompt(Last::User, "parallel", &["a"], false))
                .calls
                .len(),
            1
        );
        assert_eq!(
            decide(&prompt(Last::User, "unparalleled", &["a", "b"], false))
                .calls
                .len(),
            1
        );
    }

    #[test]
    fn tool_result_gets_text() {
        let reply = decide(&prompt(
            Last::ToolResult,
            "12 files found",
            &["search"],
            true,
        ));
        assert!(reply.calls.is_empty());
        assert_eq!(
            reply.text.as_deref(),
            Some("ok: 3 messages, last: 12 files found")
        );
        assert!(reply.thinking.is_some());
    }

    /// With thinking on, the reply that calls `loom_recall` thinks first, as every other reply
    /// does: Anthropic wants a turn that called tools, sent back, to open with its thinking (the
    /// conformance suite found Loom's recall rounds refused for the mock's want of it).
    #[test]
    fn a_recall_call_thinks_when_thinking_is_on() {
        let mut p = prompt(Last::User, "please recall it", &["loom_recall"], true);
        p.cache_key = b"stub (loom_recall ref=seq:4) end".to_vec();
        let reply = decide(&p);
        assert_eq!(reply.calls[0].name, "loom_recall");
        assert!(reply.thinking.is_some());
        p.thinking = false;
        assert!(decide(&p).thinking.is_none());
    }

    #[test]
    fn usage_caps_cache_at_input() {
        let p = prompt(Last::User, "hi", &[], true);
        let reply = decide(&p);
        let u = usage(&p, 10_000, &reply);
        assert_eq!((u.input, u.cache_read, u.uncached_input()), (100, 100, 0));
        assert!(u.output > u.reasoning && u.reasoning > 0);
        assert_eq!(usage(&p, 41, &reply).cache_read, 10);
    }

    #[test]
    fn signatures_are_deterministic_and_differ() {
        assert_eq!(signature("a"), signature("a"));
        assert_ne!(signature("a"), signature("b"));
    }
}
