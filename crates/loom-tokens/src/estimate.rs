//! Calibrated estimates for models without a public tokenizer (Claude, Gemini).
//!
//! Dividing characters by four is off by 20–65% on tool-heavy JSON, so the estimate is made per
//! content class: text is cut into chunks, each chunk's non-CJK bytes are classed as prose,
//! code or JSON and divided by that class's bytes-per-token, and CJK characters are counted at
//! their own tokens-per-character rate. A safety margin taken from the measured error (the
//! 95th percentile of the under-estimates) is added on top, so the estimate errs towards
//! fitting.
//!
//! The initial ratios and margin were measured against `o200k_base` on every message of the
//! traces (`cargo run --release -p loom-tokens --example calibrate`, recorded in
//! `docs/performance.md`). Real usage corrects them: [`Estimator::observe`] takes the
//! provider-reported count for an estimate, moves the ratios towards it and re-computes the
//! margin from the recent errors. [`Estimator::anchor`] re-anchors on the provider's reported
//! usage of the previous call so only what was added since is estimated.
//!
//! Chunking makes the estimate additive (the estimate of a text is the sum over its chunks),
//! which is what lets [`Calibration::count_till_limit`] stop early and agree with the full count.

use std::collections::VecDeque;

/// Bytes per estimation chunk: small enough to class mixed text piecewise, large enough for the
/// class statistics to mean something.
const CHUNK: usize = 2048;
/// Observations kept for the error statistics.
const WINDOW: usize = 256;
/// Observations needed before the measured margin replaces the initial one.
const MIN_OBSERVATIONS: usize = 20;
/// How far one observation moves the ratios (in log space, scaled by the class's share).
const LEARNING_RATE: f64 = 0.2;

/// A content class with its own tokens-per-byte rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ContentClass {
    /// Natural-language text in Latin and similar scripts.
    Prose,
    /// Source code, shell output, logs.
    Code,
    /// JSON and similar structured data.
    Json,
    /// Chinese, Japanese and Korean characters (counted per character).
    Cjk,
}

impl ContentClass {
    /// Every class, in index order.
    pub const ALL: [ContentClass; 4] = [Self::Prose, Self::Code, Self::Json, Self::Cjk];

    fn index(self) -> usize {
        self as usize
    }

    /// The class's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Prose => "prose",
            Self::Code => "code",
            Self::Json => "json",
            Self::Cjk => "cjk",
        }
    }
}

/// The numbers an estimate is made with: tokens per unit (byte, or character for CJK) per
/// class, and the relative margin added on top.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// Tokens per unit, indexed like [`ContentClass::ALL`].
    pub tokens_per_unit: [f64; 4],
    /// Relative margin added to the raw estimate (0.1 = +10%).
    pub margin: f64,
}

impl Default for Calibration {
    /// Measured against `o200k_base` on the traces (see the module docs); CJK from a
    /// mixed Chinese/Japanese/Korean sample.
    fn default() -> Self {
        Self {
            tokens_per_unit: [1.0 / 4.68, 1.0 / 3.19, 1.0 / 2.76, 1.0 / 1.40],
            margin: 0.24,
        }
    }
}

/// Units per class in some text: the part of an estimate that does not depend on calibration.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClassUnits(pub [u64; 4]);

impl ClassUnits {
    /// Measures `text`.
    pub fn of(text: &str) -> Self {
        let mut units = Self::default();
        for chunk in chunks(text) {
            units.add_chunk(chunk);
        }
        units
    }

    fn add_chunk(&mut self, chunk: &str) {
        let mut cjk = 0u64;
        let mut stats = ByteStats::default();
        for c in chunk.chars() {
            if is_cjk(c) {
                cjk += 1;
            } else {
                stats.add(c);
            }
        }
        self.0[ContentClass::Cjk.index()] += cjk;
        self.0[stats.class().index()] += stats.bytes;
    }

    /// Adds another text's units (estimates are additive).
    pub fn add(&mut self, other: &ClassUnits) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }

    /// Units of one class.
    pub fn get(&self, class: ContentClass) -> u64 {
        self.0[class.index()]
    }
}

/// An estimate with what it was made of, so a later `observe` knows which classes to correct.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Units per class.
    pub units: ClassUnits,
    /// Raw token estimate, before the margin.
    pub raw: f64,
    /// Margin in force when it was made.
    pub margin: f64,
}

impl Estimate {
    /// Tokens with the margin: the number to budget with.
    pub fn tokens(&self) -> u64 {
        to_count(self.raw * (1.0 + self.margin))
    }
}

impl Calibration {
    /// Estimates `text`.
    pub fn estimate(&self, text: &str) -> Estimate {
        self.estimate_units(ClassUnits::of(text))
    }

    /// Estimates already-measured units.
    pub fn estimate_units(&self, units: ClassUnits) -> Estimate {
        let raw = units
            .0
            .iter()
            .zip(self.tokens_per_unit)
            .map(|(&u, t)| u as f64 * t)
            .sum();
        Estimate {
            units,
            raw,
            margin: self.margin,
        }
    }

    /// Tokens for `text`, margin included.
    pub fn count(&self, text: &str) -> u64 {
        self.estimate(text).tokens()
    }

    /// The count if it is at most `limit`, else `None`; stops at the first chunk that passes.
    pub fn count_till_limit(&self, text: &str, limit: u64) -> Option<u64> {
        let mut units = ClassUnits::default();
        for chunk in chunks(text) {
            units.add_chunk(chunk);
            if self.estimate_units(units).tokens() > limit {
                return None;
            }
        }
        Some(self.estimate_units(units).tokens())
    }
}

/// Where the calibration stands: what a caller shows to explain a margin.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationReport {
    /// Observations in the error window.
    pub observations: usize,
    /// 95th percentile of |estimate − actual| / actual over the window (raw estimates).
    pub p95_relative_error: Option<f64>,
    /// The margin in force.
    pub margin: f64,
    /// Bytes (characters for CJK) per token, per class.
    pub units_per_token: [(ContentClass, f64); 4],
}

/// A calibration that learns from provider-reported counts.
#[derive(Debug, Clone)]
pub struct Estimator {
    calibration: Calibration,
    initial_margin: f64,
    /// (raw estimate, actual) of recent observations, both as made at the time.
    errors: VecDeque<(f64, f64)>,
}

impl Default for Estimator {
    fn default() -> Self {
        Self::new(Calibration::default())
    }
}

impl Estimator {
    /// Starts from a calibration; its margin stays in force until enough observations arrive.
    pub fn new(calibration: Calibration) -> Self {
        Self {
            initial_margin: calibration.margin,
            calibration,
            errors: VecDeque::new(),
        }
    }

    /// The calibration in force.
    pub fn calibration(&self) -> &Calibration {
        &self.calibration
    }

    /// Estimates `text` with the calibration in force.
    pub fn estimate(&self, text: &str) -> Estimate {
        self.calibration.estimate(text)
    }

    /// Re-anchors: the previous call's provider-reported input tokens plus the estimate of what
    /// was added since. Observe `(added, new_reported - reported)` when the next usage arrives.
    pub fn anchor(&self, reported: u64, added: &str) -> Anchored {
        Anchored {
            reported,
            added: self.estimate(added),
        }
    }

    /// Records the provider's count for an estimate: the ratios move towards it (each class in
    /// proportion to its share of the estimate) and the margin is re-derived from the window of
    /// recent errors. Returns the state after the update.
    pub fn observe(&mut self, estimate: &Estimate, actual: u64) -> CalibrationReport {
        let actual = actual as f64;
        if estimate.raw > 0.0 && actual > 0.0 {
            if self.errors.len() == WINDOW {
                self.errors.pop_front();
            }
            self.errors.push_back((estimate.raw, actual));
            let ratio = (actual / estimate.raw).ln();
            for class in ContentClass::ALL {
                let i = class.index();
                let share =
                    estimate.units.0[i] as f64 * self.calibration.tokens_per_unit[i] / estimate.raw;
                self.calibration.tokens_per_unit[i] *= (LEARNING_RATE * share * ratio).exp();
            }
            if self.errors.len() >= MIN_OBSERVATIONS {
                // The margin covers 95% of recent under-estimates; over-estimates need none.
                let mut under: Vec<f64> = self
                    .errors
                    .iter()
                    .map(|(e, a)| (a / e - 1.0).max(0.0))
                    .collect();
                self.calibration.margin = percentile95(&mut under);
            }
        }
        self.report()
    }

    /// The current state.
    pub fn report(&self) -> CalibrationReport {
        let mut rel: Vec<f64> = self.errors.iter().map(|(e, a)| (e - a).abs() / a).collect();
        let p95 = (!rel.is_empty()).then(|| percentile95(&mut rel));
        let units_per_token =
            ContentClass::ALL.map(|c| (c, 1.0 / self.calibration.tokens_per_unit[c.index()]));
        CalibrationReport {
            observations: self.errors.len(),
            p95_relative_error: p95,
            margin: if self.errors.len() >= MIN_OBSERVATIONS {
                self.calibration.margin
            } else {
                self.initial_margin
            },
            units_per_token,
        }
    }
}

/// A re-anchored estimate: what the provider reported for the previous request plus the
/// estimate of what was added since.
#[derive(Debug, Clone, PartialEq)]
pub struct Anchored {
    /// Input tokens the provider reported for the previous request.
    pub reported: u64,
    /// Estimate of the content added since.
    pub added: Estimate,
}

impl Anchored {
    /// Total tokens to budget with: reported plus the added estimate with its margin.
    pub fn tokens(&self) -> u64 {
        self.reported.saturating_add(self.added.tokens())
    }
}

fn percentile95(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let idx = ((values.len() as f64) * 0.95).ceil() as usize;
    values.get(idx.saturating_sub(1)).copied().unwrap_or(0.0)
}

fn to_count(x: f64) -> u64 {
    if x.is_finite() && x > 0.0 {
        x.ceil().min(u64::MAX as f64) as u64
    } else {
        0
    }
}

/// Splits `text` into chunks of at most `CHUNK` bytes on char boundaries.
fn chunks(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len().min(CHUNK);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (head, tail) = rest.split_at(end);
        rest = tail;
        Some(head)
    })
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x11FF      // Hangul Jamo
        | 0x2E80..=0x2FDF    // CJK radicals
        | 0x3000..=0x30FF    // CJK punctuation, Hiragana, Katakana
        | 0x3130..=0x318F    // Hangul compatibility Jamo
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0xFF00..=0xFFEF    // full-width forms
        | 0x20000..=0x2FA1F) // CJK extensions B–F
}

/// Byte statistics of a chunk's non-CJK text, enough to class it.
#[derive(Debug, Default)]
struct ByteStats {
    bytes: u64,
    in_space: bool,
    non_space: u64,
    letters: u64,
    json: u64,
    code: u64,
}

impl ByteStats {
    fn add(&mut self, c: char) {
        if c.is_whitespace() {
            // A run of whitespace (indentation, blank lines) merges into one or two tokens
            // whatever its length: it counts as one unit.
            self.bytes += u64::from(!self.in_space);
            self.in_space = true;
            return;
        }
        self.in_space = false;
        self.bytes += c.len_utf8() as u64;
        self.non_space += 1;
        match c {
            '"' | ':' | ',' | '{' | '}' | '[' | ']' => self.json += 1,
            ';' | '(' | ')' | '=' | '<' | '>' | '/' | '\\' | '|' | '&' | '*' | '+' | '#' | '$'
            | '_' | '.' | '-' | '\'' | '`' | '%' | '!' | '@' | '^' | '~' => self.code += 1,
            _ if c.is_alphabetic() => self.letters += 1,
            _ => {}
        }
    }

    fn class(&self) -> ContentClass {
        if self.non_space == 0 {
            return ContentClass::Prose;
        }
        let n = self.non_space as f64;
        let (json, code) = (self.json as f64 / n, self.code as f64 / n);
        if json >= 0.12 && json >= code {
            ContentClass::Json
        } else if json + code >= 0.10 {
            ContentClass::Code
        } else {
            ContentClass::Prose
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_told_apart() {
        let class = |s: &str| {
            let u = ClassUnits::of(s);
            ContentClass::ALL
                .into_iter()
                .max_by_key(|c| u.get(*c))
                .unwrap_or(ContentClass::Prose)
        };
        assert_eq!(
            class("The committee met on Tuesday and agreed to postpone the vote until spring."),
            ContentClass::Prose
        );
        assert_eq!(
            class(r#"{"id": 12, "name": "alpha", "tags": ["a", "b"], "ok": true}"#),
            ContentClass::Json
        );
        assert_eq!(
            class("fn main() {\n    let x = a.b(c) + 1; // y\n    if x > 2 { run(&x); }\n}"),
            ContentClass::Code
        );
        assert_eq!(
            class("東京都は日本の首都であり、人口は約千四百万人です。"),
            ContentClass::Cjk
        );
    }

    #[test]
    fn estimate_is_additive_and_till_limit_agrees() {
        let c = Calibration::default();
        let text = "word ".repeat(3000) + &"{\"k\": [1, 2]} ".repeat(500);
        let n = c.count(&text);
        assert!(n > 0);
        assert_eq!(c.count_till_limit(&text, n), Some(n));
        assert_eq!(c.count_till_limit(&text, n - 1), None);
        let mut u = ClassUnits::of("abc ");
        u.add(&ClassUnits::of("def"));
        assert_eq!(u.get(ContentClass::Prose), 7);
    }

    #[test]
    fn margin_is_included() {
        let c = Calibration {
            tokens_per_unit: [0.25; 4],
            margin: 0.5,
        };
        let e = c.estimate("abcdefgh");
        assert!((e.raw - 2.0).abs() < 1e-9);
        assert_eq!(e.tokens(), 3);
    }

    #[test]
    fn observe_learns_a_systematic_bias_and_sets_the_margin() {
        let mut est = Estimator::default();
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        // The provider counts 30% more than the initial calibration says, with some noise.
        for i in 0..200u32 {
            let e = est.estimate(&text);
            let truth = (e.units.get(ContentClass::Prose) as f64 / 4.45
                * 1.3
                * (1.0 + f64::from(i % 5) * 0.01))
                .round() as u64;
            est.observe(&e, truth);
        }
        let report = est.report();
        let e = est.estimate(&text);
        let truth = e.units.get(ContentClass::Prose) as f64 / 4.45 * 1.3;
        assert!(
            (e.raw / truth - 1.0).abs() < 0.05,
            "raw {} vs {truth}",
            e.raw
        );
        assert!(
            report.p95_relative_error.is_some_and(|p| p < 0.1),
            "{report:?}"
        );
        assert!(report.margin < 0.1, "{report:?}");
        assert!(
            e.tokens() as f64 >= truth,
            "with its margin the estimate covers the truth"
        );
    }

    #[test]
    fn initial_margin_holds_until_enough_observations() {
        let mut est = Estimator::default();
        let e = est.estimate("some text here");
        let r = est.observe(&e, 100);
        assert_eq!(r.observations, 1);
        assert_eq!(r.margin, Calibration::default().margin);
    }

    #[test]
    fn anchoring_adds_only_the_delta() {
        let est = Estimator::default();
        let a = est.anchor(10_000, "one more user message");
        assert_eq!(
            a.tokens(),
            10_000 + est.estimate("one more user message").tokens()
        );
    }
}
