//! One interface over the three ways of counting: exact BPE, a local tokenizer file, the
//! calibrated estimate.

use crate::bpe::Encoding;
use crate::error::Result;
use crate::estimate::Calibration;
use crate::hf::TokenizerFile;
use crate::registry::{ModelInfo, TokenizerSpec};

/// Something that counts tokens. Request-level counting and the cache take it as a trait object
/// so tests can instrument it (count how often text is really tokenized).
pub trait CountTokens {
    /// Identifies the tokenizer (and, for estimates, the calibration) for caching: two
    /// counters with the same id give the same count for the same text.
    fn id(&self) -> String;
    /// Whether counts are the model's own, not estimates.
    fn exact(&self) -> bool;
    /// Tokens in `text`.
    fn count(&self, text: &str) -> u64;
    /// The count if it is at most `limit`, else `None`; implementations stop early when they
    /// can.
    fn count_till_limit(&self, text: &str, limit: u64) -> Option<u64> {
        let n = self.count(text);
        (n <= limit).then_some(n)
    }
    /// Whether `text` fits in `limit` tokens.
    fn fits(&self, text: &str, limit: u64) -> bool {
        self.count_till_limit(text, limit).is_some()
    }
}

/// A concrete tokenizer, as a model's registry entry selects it.
#[derive(Debug, Clone)]
pub enum Tokenizer {
    /// Exact OpenAI BPE.
    Bpe(Encoding),
    /// A local `tokenizer.json`.
    File(TokenizerFile),
    /// The calibrated estimate.
    Estimate(Calibration),
    /// The calibrated estimate, never below an exact open tokenizer's count: what a model
    /// without a public tokenizer (Claude) is counted with. The estimate alone undercounts text
    /// it classes wrongly (a 60 KB log estimated at two thirds of what `o200k_base` and
    /// `cl100k_base` both count), and an undercount breaks "every request fits"; the open
    /// tokenizers agree with each other to a fraction of a percent on such text, so their count
    /// is a floor the estimate must not go under. The provider's reported usage re-anchors it
    /// per session.
    Bounded(Calibration, Encoding),
}

impl Tokenizer {
    /// The tokenizer a model's registry entry asks for. A `tokenizer.json` model without a
    /// configured file falls back to the estimate (and says so through [`CountTokens::exact`]).
    pub fn for_model(info: &ModelInfo) -> Result<Self> {
        Ok(match &info.tokenizer {
            TokenizerSpec::Bpe(e) => Self::Bpe(*e),
            TokenizerSpec::File(Some(path)) => Self::File(TokenizerFile::open(path)?),
            TokenizerSpec::File(None) => Self::Estimate(Calibration::default()),
            TokenizerSpec::Estimate => Self::Bounded(Calibration::default(), Encoding::O200kBase),
        })
    }

    /// Short name for reports: the encoding, `tokenizer.json` or `estimate`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Bpe(e) => e.name(),
            Self::File(_) => "tokenizer.json",
            Self::Estimate(_) | Self::Bounded(..) => "estimate",
        }
    }
}

impl CountTokens for Tokenizer {
    fn id(&self) -> String {
        match self {
            Self::Bpe(e) => e.name().to_owned(),
            Self::File(f) => format!("tokenizer.json:{}", f.path().display()),
            Self::Estimate(c) => format!("estimate:{:016x}", calibration_bits(c)),
            Self::Bounded(c, e) => {
                format!("estimate:{:016x}>={}", calibration_bits(c), e.name())
            }
        }
    }

    fn exact(&self) -> bool {
        !matches!(self, Self::Estimate(_) | Self::Bounded(..))
    }

    fn count(&self, text: &str) -> u64 {
        match self {
            Self::Bpe(e) => e.count(text) as u64,
            // A tokenizer file that fails on some text (rare: a broken normalizer) counts it as
            // its byte length, an upper bound for byte-level BPE: over-counting keeps requests
            // within budget.
            Self::File(f) => f.count(text).map_or(text.len() as u64, |n| n as u64),
            Self::Estimate(c) => c.count(text),
            Self::Bounded(c, e) => c.count(text).max(e.count(text) as u64),
        }
    }

    fn count_till_limit(&self, text: &str, limit: u64) -> Option<u64> {
        match self {
            Self::Bpe(e) => {
                let limit = usize::try_from(limit).unwrap_or(usize::MAX);
                e.count_till_limit(text, limit).map(|n| n as u64)
            }
            Self::Estimate(c) => c.count_till_limit(text, limit),
            Self::Bounded(c, e) => {
                let exact = e
                    .count_till_limit(text, usize::try_from(limit).unwrap_or(usize::MAX))
                    .map(|n| n as u64)?;
                c.count_till_limit(text, limit).map(|n| n.max(exact))
            }
            Self::File(_) => chunked_till_limit(self, text, limit),
        }
    }
}

/// A calibration's numbers folded into one, for the counter's id.
fn calibration_bits(c: &Calibration) -> u64 {
    let mut bits = c.margin.to_bits();
    for t in c.tokens_per_unit {
        bits = bits.rotate_left(13) ^ t.to_bits();
    }
    bits
}

impl loom_core::render::TokenMeter for Tokenizer {
    fn count(&self, text: &str) -> u64 {
        CountTokens::count(self, text)
    }

    fn name(&self) -> &str {
        Tokenizer::name(self)
    }
}

/// Early stop for tokenizers without a native one: count whitespace-aligned chunks and stop once
/// their sum passes the limit by more than chunk boundaries can explain; otherwise count the
/// whole text, so an answer of "fits" is always exact.
fn chunked_till_limit(t: &Tokenizer, text: &str, limit: u64) -> Option<u64> {
    const CHUNK: usize = 16 * 1024;
    // Cutting text at a space can change a few tokens on either side of the cut.
    const SLACK_PER_CUT: u64 = 4;
    if text.len() as u64 <= limit {
        // Fewer bytes than the limit: every tokenizer here has at least a byte per token on
        // real text, but a sentencepiece model may add a prefix token; count exactly.
        let n = t.count(text);
        return (n <= limit).then_some(n);
    }
    let mut sum = 0u64;
    let mut cuts = 0u64;
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(CHUNK);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        if end < rest.len() {
            if let Some(space) = rest[..end].rfind(char::is_whitespace) {
                if space > 0 {
                    end = space;
                }
            }
        }
        let (head, tail) = rest.split_at(end);
        sum += t.count(head);
        rest = tail;
        if !rest.is_empty() {
            cuts += 1;
        }
        if sum > limit.saturating_add(cuts * SLACK_PER_CUT) {
            return None;
        }
    }
    let n = t.count(text);
    (n <= limit).then_some(n)
}
