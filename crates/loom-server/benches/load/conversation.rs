//! The conversation the load tool plays: a coding agent's Chat history, sent whole with every
//! call as real clients send it, that grows by one model call a turn.
//!
//! The mock upstream answers a user turn that offers tools with a tool call (two in parallel when
//! the user says `parallel`) and anything else with text, so the history alternates: a user turn
//! asks, the model calls tools, the client sends their outputs, the model answers, the client asks
//! again. Tool outputs are code listings and shell output of pseudo-random sizes within
//! [`OUTPUT_BYTES`], the same for the same seed, so two runs send the same bytes.

use std::fmt::Write as _;
use std::ops::RangeInclusive;

use serde::Serialize;
use serde_json::{json, Value};

/// The model every call names: an OpenAI model, so Loom counts its tokens exactly.
pub(crate) const MODEL: &str = "gpt-4o";

/// Sizes of one tool output, in bytes: a short listing up to a page of a file.
const OUTPUT_BYTES: RangeInclusive<usize> = 200..=3_000;

/// Every how many user turns one asks for parallel calls.
const PARALLEL_EVERY: usize = 3;

/// A deterministic source of sizes and words (xorshift64*): the load must be the same from one
/// run to the next, and a dependency for this would be more than the few lines it takes.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value, zero included).
    pub(crate) fn new(seed: u64) -> Self {
        // Xorshift never leaves zero, so zero is mapped elsewhere.
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `range`.
    fn within(&mut self, range: &RangeInclusive<usize>) -> usize {
        let span = (range.end() - range.start()) as u64 + 1;
        range.start() + (self.next() % span) as usize
    }

    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[(self.next() % words.len() as u64) as usize]
    }
}

/// The request body as the client sends it; only the history changes from call to call.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: &'a [Value],
    tools: &'a Value,
    temperature: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<Value>,
}

/// Where a call puts its one cache breakpoint (`cache_control` on a text part, as Anthropic-model
/// routes of Chat clients send it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Breakpoint {
    /// None.
    None,
    /// On the newest message, moved there on every call (Claude Code's way): the message that
    /// ended the previous call comes again without it.
    Last,
    /// On the second newest message: the message that ended the previous call comes again
    /// changed, so no history only appends to the one before.
    Second,
}

/// One agent conversation, as its client holds it.
#[derive(Debug)]
pub(crate) struct Conversation {
    messages: Vec<Value>,
    tools: Value,
    rng: Rng,
    asked: usize,
    outputs: usize,
    stream: bool,
    recall_every: usize,
    breakpoint: Breakpoint,
}

impl Conversation {
    /// A conversation opened with a system prompt and a first request; `stream` asks for
    /// replies as server-sent events, with usage, as agents most often do.
    pub(crate) fn new(seed: u64, stream: bool) -> Self {
        let mut c = Self {
            messages: vec![json!({"role": "system", "content": system_prompt()})],
            tools: tools(),
            rng: Rng::new(seed),
            asked: 0,
            outputs: 0,
            stream,
            recall_every: 0,
            breakpoint: Breakpoint::None,
        };
        c.ask();
        c
    }

    /// Every `every`th user turn asks to read an earlier output again (0: none does): the mock
    /// then calls `loom_recall` when the request offers it.
    pub(crate) fn recalling(mut self, every: usize) -> Self {
        self.recall_every = every;
        self
    }

    /// Where each call puts its cache breakpoint.
    pub(crate) fn marking(mut self, breakpoint: Breakpoint) -> Self {
        self.breakpoint = breakpoint;
        self
    }

    /// The next request's body, serialised.
    pub(crate) fn body(&self) -> serde_json::Result<Vec<u8>> {
        let back = match self.breakpoint {
            Breakpoint::None => None,
            Breakpoint::Last => Some(1),
            Breakpoint::Second => Some(2),
        };
        let marked;
        let messages = match back.and_then(|n| self.messages.len().checked_sub(n)) {
            Some(at) if self.messages[at]["content"].is_string() => {
                let mut all = self.messages.clone();
                let text = all[at]["content"].take();
                all[at]["content"] = json!([{"type": "text", "text": text,
                    "cache_control": {"type": "ephemeral"}}]);
                marked = all;
                &marked
            }
            _ => &self.messages,
        };
        serde_json::to_vec(&Body {
            model: MODEL,
            messages,
            tools: &self.tools,
            temperature: 0,
            stream: self.stream.then_some(true),
            stream_options: self.stream.then(|| json!({"include_usage": true})),
        })
    }

    /// Tool outputs sent so far.
    pub(crate) fn outputs(&self) -> usize {
        self.outputs
    }

    /// Keeps the model's reply (the `choices[0].message` of a Chat reply) and adds what the
    /// client sends next: the output of each call it made, or a new request when it made none.
    pub(crate) fn answer(&mut self, reply: Value) -> Result<(), String> {
        if reply.get("role").and_then(Value::as_str) != Some("assistant") {
            return Err(format!("the reply is not an assistant message: {reply}"));
        }
        let calls: Vec<(String, String)> = reply
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .map(|c| {
                        let id = c["id"].as_str().unwrap_or_default().to_owned();
                        let name = c["function"]["name"].as_str().unwrap_or_default();
                        (id, name.to_owned())
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.messages.push(reply);
        if calls.is_empty() {
            self.ask();
            return Ok(());
        }
        for (id, name) in calls {
            if id.is_empty() {
                return Err("a tool call in the reply has no id".into());
            }
            let size = self.rng.within(&OUTPUT_BYTES);
            let content = if name == "bash" {
                shell_output(&mut self.rng, size)
            } else {
                listing(&mut self.rng, size)
            };
            self.outputs += 1;
            self.messages
                .push(json!({"role": "tool", "tool_call_id": id, "content": content}));
        }
        Ok(())
    }

    fn ask(&mut self) {
        self.asked += 1;
        let n = self.asked;
        let text = if self.recall_every > 0 && n % self.recall_every == 0 {
            format!("step {n}: recall the earlier output of that module before going on")
        } else if n % PARALLEL_EVERY == 0 {
            format!("step {n}: read the next module and run its tests, in parallel")
        } else {
            format!("step {n}: open the next file that the failing test touches")
        };
        self.messages.push(json!({"role": "user", "content": text}));
    }
}

fn system_prompt() -> String {
    let mut s = String::from(
        "You are a careful software engineering agent working in a Rust repository. Read files \
         before changing them, run the tests after every change, and explain what you did in \
         one short paragraph at the end.\n\nRules:\n",
    );
    for (i, rule) in [
        "Never edit files outside the repository.",
        "Prefer small, reviewable changes; one idea per commit.",
        "When a command fails, read its output before trying again.",
        "Keep the public API stable unless the task says otherwise.",
        "Tests must be able to fail; never hard-code results.",
        "Cite file paths and line numbers when you explain a change.",
    ]
    .iter()
    .enumerate()
    {
        let _ = writeln!(s, "{}. {rule}", i + 1);
    }
    s
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "read_file", "description": "Read a file of the repository",
         "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "start_line": {"type": "integer"}}, "required": ["path"]}}},
        {"type": "function", "function": {"name": "bash", "description": "Run a shell command in the repository",
         "parameters": {"type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}}, "required": ["command"]}}}
    ])
}

const CODE_WORDS: &[&str] = &[
    "let",
    "fn",
    "self",
    "match",
    "Ok",
    "Err",
    "return",
    "impl",
    "pub",
    "struct",
    "session",
    "budget",
    "render",
    "store",
    "append",
    "events",
    "config",
    "request",
    "reply",
    "?;",
    "=>",
    "&mut",
    "Vec::new()",
    "iter()",
    "map(|e|",
    "collect()",
    "String",
    "u64",
    "Option",
    "None",
];

const LOG_WORDS: &[&str] = &[
    "Compiling",
    "test",
    "ok",
    "running",
    "passed",
    "warning:",
    "unused",
    "variable",
    "finished",
    "target/debug",
    "src/lib.rs",
    "error[E0308]:",
    "mismatched",
    "types",
    "expected",
    "found",
];

/// A numbered source listing of `size` bytes, as a read-file tool prints it.
fn listing(rng: &mut Rng, size: usize) -> String {
    text(rng, size, CODE_WORDS, |s, line| {
        let _ = write!(s, "{line:>5}  ");
    })
}

/// Build and test output of `size` bytes, as a shell tool prints it.
fn shell_output(rng: &mut Rng, size: usize) -> String {
    text(rng, size, LOG_WORDS, |s, line| {
        let _ = write!(s, "[{:>3}] ", line % 1000);
    })
}

fn text(rng: &mut Rng, size: usize, words: &[&str], prefix: impl Fn(&mut String, usize)) -> String {
    let mut s = String::with_capacity(size + 64);
    let mut line = 1;
    while s.len() < size {
        prefix(&mut s, line);
        let count = 4 + rng.next() % 8;
        for _ in 0..count {
            s.push_str(rng.pick(words));
            if rng.next() % 4 == 0 {
                let _ = write!(s, "_{}", rng.next() % 10_000);
            }
            s.push(' ');
        }
        s.push('\n');
        line += 1;
    }
    // Every word is ASCII, so any cut is a character boundary.
    s.truncate(size);
    s
}
