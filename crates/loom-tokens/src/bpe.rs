//! Exact counts for OpenAI's BPE encodings, identical to Python `tiktoken`'s `encode_ordinary`.
//!
//! Backed by `bpe-openai`, whose vocabularies are compiled into the binary (nothing is read or
//! downloaded at run time). It was picked over `tiktoken-rs` by measurement: both are exact on
//! every message of the traces, `bpe-openai` is faster and can stop counting at a limit
//! (`docs/performance.md`, Tokens). Its encoder is linear in the input even on pathological
//! pieces (one long word, a base64 blob), where tiktoken's own merge loop is quadratic.
//!
//! Special-token strings such as `<|endoftext|>` are ordinary text here: agent logs quote them,
//! and a request never carries them as control tokens.

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::LazyLock;

use bpe_openai::Tokenizer as BpeTokenizer;

/// An OpenAI BPE encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Encoding {
    /// GPT-4o, GPT-4.1, GPT-5, o-series.
    O200kBase,
    /// GPT-4, GPT-3.5-turbo, text-embedding-3.
    Cl100kBase,
}

impl Encoding {
    /// Every supported encoding.
    pub const ALL: [Encoding; 2] = [Encoding::O200kBase, Encoding::Cl100kBase];

    /// The name tiktoken uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::O200kBase => "o200k_base",
            Self::Cl100kBase => "cl100k_base",
        }
    }

    /// Looks an encoding up by its tiktoken name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.name() == name)
    }

    fn tokenizer(self) -> &'static BpeTokenizer {
        match self {
            Self::O200kBase => bpe_openai::o200k_base(),
            Self::Cl100kBase => bpe_openai::cl100k_base(),
        }
    }

    fn exact(self) -> &'static Exact {
        static O200K: LazyLock<Exact> = LazyLock::new(|| Exact::new(bpe_openai::o200k_base()));
        static CL100K: LazyLock<Exact> = LazyLock::new(|| Exact::new(bpe_openai::cl100k_base()));
        match self {
            Self::O200kBase => &O200K,
            Self::Cl100kBase => &CL100K,
        }
    }

    /// Number of tokens in `text`, as `tiktoken`'s `len(enc.encode_ordinary(text))`.
    pub fn count(self, text: &str) -> usize {
        let exact = self.exact();
        exact
            .tok
            .split(text)
            .map(|piece| exact.count_piece(piece))
            .sum()
    }

    /// Counts bytes that may not be UTF-8. Invalid sequences are replaced by U+FFFD first (as
    /// `String::from_utf8_lossy` does), so a binary file is counted instead of refused; valid
    /// UTF-8 is counted exactly.
    pub fn count_bytes(self, bytes: &[u8]) -> usize {
        match String::from_utf8_lossy(bytes) {
            Cow::Borrowed(s) => self.count(s),
            Cow::Owned(s) => self.count(&s),
        }
    }

    /// The count if it is at most `limit`, else `None`; stops as soon as the running count
    /// passes `limit`, so asking whether a huge text fits in a small budget is cheap.
    pub fn count_till_limit(self, text: &str, limit: usize) -> Option<usize> {
        // Every token covers at least one byte: a text no longer than the limit fits, whatever
        // its count, and that count is then all that is left to compute.
        let exact = self.exact();
        let mut total = 0usize;
        for piece in exact.tok.split(text) {
            let left = limit.checked_sub(total)?;
            let n = if piece.len() <= left {
                exact.count_piece(piece)
            } else {
                exact.tok.bpe.count_till_limit(piece.as_bytes(), left)?
            };
            total = total.saturating_add(n);
        }
        (total <= limit).then_some(total)
    }

    /// Whether `text` fits in `limit` tokens (see [`Encoding::count_till_limit`]).
    pub fn fits(self, text: &str, limit: usize) -> bool {
        text.len() <= limit || self.count_till_limit(text, limit).is_some()
    }

    /// The token ids, as `tiktoken`'s `encode_ordinary` (tests and debugging).
    pub fn encode(self, text: &str) -> Vec<u32> {
        self.tokenizer().encode(text)
    }
}

/// The tokenizer plus the set of every token's bytes.
///
/// Most pre-tokenizer pieces (words with their leading space, punctuation runs) are one whole
/// token, and tiktoken itself returns one token for a piece found in its vocabulary before it
/// runs any merge. Answering those with one hash lookup skips the encoder and its per-call
/// allocations, which is most of the time spent on real text.
struct Exact {
    tok: &'static BpeTokenizer,
    whole: HashSet<&'static [u8], BuildHasherDefault<FxHasher>>,
}

impl Exact {
    fn new(tok: &'static BpeTokenizer) -> Self {
        let ids = 0..u32::try_from(tok.bpe.num_tokens()).unwrap_or(u32::MAX);
        let whole = ids.map(|id| tok.bpe.token_bytes(id)).collect();
        Self { tok, whole }
    }

    fn count_piece(&self, piece: &str) -> usize {
        let bytes = piece.as_bytes();
        if bytes.len() <= 1 {
            bytes.len()
        } else if self.whole.contains(bytes) {
            1
        } else {
            self.tok.bpe.count(bytes)
        }
    }
}

/// The Fx hash (rustc's): a multiply and rotate per word, much cheaper than SipHash on the
/// short keys looked up here; the keys are a fixed vocabulary, so flooding is not a concern.
#[derive(Default)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(c);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }

    fn write_u8(&mut self, b: u8) {
        self.write(&[b]);
    }

    fn write_usize(&mut self, n: usize) {
        self.write(&n.to_le_bytes());
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_counts() {
        // Values from Python tiktoken 0.14 (`len(enc.encode_ordinary(s))`).
        assert_eq!(Encoding::O200kBase.count("hello world"), 2);
        assert_eq!(Encoding::Cl100kBase.count("hello world"), 2);
        assert_eq!(Encoding::O200kBase.count(""), 0);
        assert_eq!(
            Encoding::Cl100kBase.encode("hello world"),
            vec![15339, 1917]
        );
    }

    #[test]
    fn special_token_strings_are_text() {
        for enc in Encoding::ALL {
            let n = enc.count("<|endoftext|>");
            assert!(
                n > 1,
                "{}: `<|endoftext|>` must count as text, got {n}",
                enc.name()
            );
        }
    }

    #[test]
    fn till_limit_agrees_with_count() {
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(40);
        for enc in Encoding::ALL {
            let n = enc.count(&text);
            assert_eq!(enc.count_till_limit(&text, n), Some(n));
            assert_eq!(enc.count_till_limit(&text, n + 5), Some(n));
            assert_eq!(enc.count_till_limit(&text, n - 1), None);
            assert!(enc.fits(&text, n));
            assert!(!enc.fits(&text, n - 1));
            assert!(enc.fits("", 0));
            assert!(!enc.fits("a", 0));
        }
    }

    #[test]
    fn invalid_utf8_is_counted_lossily() {
        let bytes = b"ok \xff\xfe then text";
        let lossy = String::from_utf8_lossy(bytes).into_owned();
        for enc in Encoding::ALL {
            assert_eq!(enc.count_bytes(bytes), enc.count(&lossy));
            assert_eq!(enc.count_bytes(b"plain"), enc.count("plain"));
        }
    }

    #[test]
    fn names_round_trip() {
        for enc in Encoding::ALL {
            assert_eq!(Encoding::from_name(enc.name()), Some(enc));
        }
        assert_eq!(Encoding::from_name("p50k_base"), None);
    }
}
