//! Requests generated from the providers' own descriptions, for conformance tests.
//!
//! [`chat`] and [`responses`] build OpenAI Chat Completions and Responses requests from OpenAI's
//! published description (`CreateChatCompletionRequest`, `CreateResponse`); [`messages`] builds
//! Anthropic Messages requests from [`OpenApi::anthropic`], a description written for these
//! tests from the Anthropic SDK's request types (Anthropic publishes none).
//!
//! A description says what each message, item, block and part may hold, but not how a
//! conversation pairs them: that an assistant's calls are answered by the results right after
//! it, one each. So each generator builds the conversation's skeleton itself, by the provider's
//! rules (which roles follow which, calls and their results, parallel calls, where a task or a
//! system prompt goes), and fills every message, item and part from the description's own schema
//! for that role or type ([`Walker`]): content as a string or as parts, every part type, `name`
//! fields, refusals, audio, images, files, reasoning, unknown extra fields. The top-level fields
//! (sampling, tool choices, stream options, metadata) come from the description too, with the
//! ones that change what a proxy does (`previous_response_id`, say) kept rare.
//!
//! Where the provider is stricter than its description, the generators follow the provider (and
//! say so where they do): an assistant's `tool_calls` is never an empty list, function names
//! follow OpenAI's pattern, every call has an id its result names.
//!
//! Generation is a pure function of the seed: a failing case is reproduced from its seed alone.

mod chat;
mod instance;
mod messages;
pub mod pairing;
mod responses;

pub use instance::{alternatives, Walker};

use std::collections::BTreeSet;

use serde_json::Value;

use crate::OpenApi;

/// A small seeded random number generator (SplitMix64): deterministic, dependency-free, good
/// enough to pick branches.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next_u64() % n as u64) as usize
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0
    }

    /// One of `items` (which must not be empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// `items` in a random order.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

/// What a generator may produce beyond what every provider accepts today.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Call ids reused in later turns (`call_0` in every turn), as some OpenAI-compatible servers
    /// number them. The providers accept it; whether Loom does is another engineer's work in
    /// progress, so the suite asks for it explicitly.
    pub reuse_ids: bool,
}

/// One generated request.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The request body.
    pub body: Value,
    /// The alternatives of the description it took, and the conversation shapes it has
    /// (`chat: parallel calls`, ...).
    pub covered: BTreeSet<String>,
}

/// An OpenAI Chat Completions request (`CreateChatCompletionRequest`) for `seed`.
pub fn chat(api: &OpenApi, seed: u64, options: Options) -> Generated {
    chat::generate(api, seed, options)
}

/// An OpenAI Responses request (`CreateResponse`) for `seed`.
pub fn responses(api: &OpenApi, seed: u64, options: Options) -> Generated {
    responses::generate(api, seed, options)
}

/// An Anthropic Messages request (`MessageCreateParams` of [`OpenApi::anthropic`]) for `seed`.
/// `options.reuse_ids` does not apply: Anthropic refuses a repeated tool use id itself.
pub fn messages(api: &OpenApi, seed: u64, _options: Options) -> Generated {
    messages::generate(api, seed)
}

/// Long text for the older turns, so that a budget below the conversation's size has something
/// to compact: `min..=max` words of log-like lines.
fn bulk(w: &mut Walker<'_>, min: usize, max: usize) -> String {
    let n = w.rng.range(min, max);
    let mut out = String::with_capacity(n * 7);
    let mut line = 0;
    while out.len() < n * 6 {
        line += 1;
        out.push_str(&format!("{line:>4}: {}\n", w.words(4, 12)));
    }
    out
}

#[cfg(test)]
mod tests;
