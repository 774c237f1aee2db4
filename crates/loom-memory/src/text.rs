//! Text rules shared by writing and searching: normalization and its hash (exact duplicates),
//! word sets (near duplicates), query terms, the stemmed terms full-text search indexes and
//! ranks on, and the subject key that supersession compares.
//!
//! All of it is deterministic and language-light: words are runs of Unicode letters and digits,
//! lowercased; English stop words are dropped where they would only add noise.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

/// Lowercased, whitespace collapsed, trimmed: two texts that differ only in case or spacing are
/// the same memory.
pub(crate) fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.extend(word.chars().flat_map(char::to_lowercase));
    }
    out
}

/// SHA-256 (hex) of the normalized text.
pub(crate) fn hash(normalized: &str) -> String {
    hex::encode(Sha256::digest(normalized.as_bytes()))
}

/// The words of `text`, lowercased, in order.
pub(crate) fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| w.chars().flat_map(char::to_lowercase).collect())
}

/// Common English function words: they match almost every item, so they rank nothing and cost
/// the full-text index its longest posting lists.
const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "after",
    "again",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "been",
    "before",
    "being",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "during",
    "each",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "s",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "t",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// Whether `word` (lowercased) is a stop word.
pub(crate) fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.binary_search(&word).is_ok()
}

/// The set of content words of `text`: what near-duplicate detection compares.
pub(crate) fn word_set(text: &str) -> BTreeSet<String> {
    words(text).filter(|w| !is_stop_word(w)).collect()
}

/// Jaccard similarity of two word sets (1.0 for two empty sets: nothing tells them apart).
pub(crate) fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        return 1.0;
    }
    a.intersection(b).count() as f64 / union as f64
}

/// The terms full-text search indexes `text` under, in order, repeated as often as they occur
/// (a term's frequency in the item): its content words, each stemmed by Snowball's English
/// stemmer, so that "hiking" and "hikes" are both `hike`. Both backends rank on these, so one
/// text has the same terms in SQLite and PostgreSQL.
pub(crate) fn stems(text: &str) -> Vec<String> {
    words(text)
        .filter(|w| !is_stop_word(w))
        .map(|w| stem(&w))
        .collect()
}

/// One word's stem (the word itself when the stemmer has nothing to take off).
pub(crate) fn stem(word: &str) -> String {
    use rust_stemmers::{Algorithm, Stemmer};
    use std::sync::OnceLock;
    static ENGLISH: OnceLock<Stemmer> = OnceLock::new();
    ENGLISH
        .get_or_init(|| Stemmer::create(Algorithm::English))
        .stem(word)
        .into_owned()
}

/// The query's search terms: its content words, each once, in order of first appearance. A
/// query made only of stop words keeps them, so that it still finds something.
pub(crate) fn query_terms(query: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let all: Vec<String> = words(query).filter(|w| seen.insert(w.clone())).collect();
    let content: Vec<String> = all.iter().filter(|w| !is_stop_word(w)).cloned().collect();
    if content.is_empty() {
        all
    } else {
        content
    }
}

/// Words that cannot name a subject on their own ("it is", "that was"): a statement about them
/// says nothing that a later one could contradict.
const VAGUE_SUBJECTS: &[&str] = &[
    "he", "here", "i", "it", "she", "that", "there", "these", "they", "this", "those", "we",
    "what", "which", "who", "you",
];

/// Words that start a subject phrase whose value a later statement can replace ("my email",
/// "the deadline", "our budget").
const SUBJECT_HEADS: &[&str] = &["her", "his", "my", "our", "the", "their", "your"];

/// The verbs that join a subject to its value.
const COPULAS: &[&str] = &["is", "are", "was", "were"];

/// The longest subject phrase, in words, a statement may have to get a key: longer ones are
/// clauses ("I think the thing we saw"), not subjects.
const MAX_SUBJECT_WORDS: usize = 4;

/// The longest statement, in words, that gets a key: longer texts state several things.
const MAX_STATEMENT_WORDS: usize = 24;

/// A statement's subject and value, when the text is one short statement "SUBJECT is VALUE".
///
/// The rule, deterministic and without a model: an optional speaker label (`Name: `) is kept
/// as part of the key, so two speakers never supersede each other; the rest must be one
/// sentence (no question, no second sentence) of few words; its subject is the words before
/// the first copula — one word that is not a pronoun, or a phrase of a few words starting with
/// a possessive or `the`. Returns `(key, value)`, both normalized.
pub(crate) fn subject_key(text: &str) -> Option<(String, String)> {
    let text = text.trim();
    let (label, body) = match text.split_once(": ") {
        Some((l, b)) if is_label(l) => (normalize(l), b.trim()),
        _ => (String::new(), text),
    };
    let body = body.trim_end_matches(['.', '!']);
    if body.contains('?') || body.contains(". ") || body.contains("! ") || body.contains('\n') {
        return None;
    }
    let ws: Vec<String> = words(body).collect();
    if ws.len() > MAX_STATEMENT_WORDS {
        return None;
    }
    let at = ws.iter().position(|w| COPULAS.contains(&w.as_str()))?;
    let (subject, rest) = (&ws[..at], &ws[at + 1..]);
    if rest.is_empty() || subject.is_empty() || subject.len() > MAX_SUBJECT_WORDS {
        return None;
    }
    let specific = match subject {
        [one] => !VAGUE_SUBJECTS.contains(&one.as_str()) && !is_stop_word(one),
        [head, ..] => SUBJECT_HEADS.contains(&head.as_str()),
        [] => false,
    };
    if !specific {
        return None;
    }
    let key = format!("{label}|{}", subject.join(" "));
    Some((key, rest.join(" ")))
}

/// Whether `s` reads as a speaker label: a short name, not a sentence or a URL.
fn is_label(s: &str) -> bool {
    let s = s.trim();
    !s.is_empty()
        && s.split_whitespace().count() <= 3
        && s.chars()
            .all(|c| c.is_alphanumeric() || matches!(c, ' ' | '_' | '-' | '.' | '\''))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_words_are_sorted_for_binary_search() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(is_stop_word("the") && !is_stop_word("email"));
    }

    #[test]
    fn normalization_ignores_case_and_spacing_only() {
        assert_eq!(normalize("  My  Email\tis X "), "my email is x");
        assert_ne!(normalize("a b"), normalize("a, b"));
        assert_eq!(hash(&normalize("A  b")), hash(&normalize("a b")));
    }

    #[test]
    fn query_terms_drop_stop_words_unless_nothing_is_left() {
        assert_eq!(
            query_terms("What is the DOG's name, the dog?"),
            ["dog", "name"]
        );
        assert_eq!(query_terms("what is it"), ["what", "is", "it"]);
        assert!(query_terms("?!").is_empty());
    }

    #[test]
    fn jaccard_of_word_sets() {
        let a = word_set("the quick brown fox jumps");
        let b = word_set("a quick brown fox jumped");
        assert!((jaccard(&a, &b) - 3.0 / 5.0).abs() < 1e-9);
        assert_eq!(jaccard(&a, &a), 1.0);
    }

    #[test]
    fn subjects_of_short_statements() {
        let key = |t| subject_key(t).map(|(k, _)| k);
        assert_eq!(key("My email is a@b.c"), Some("|my email".into()));
        assert_eq!(
            subject_key("Ann: my email is x@y.z."),
            Some(("ann|my email".into(), "x y z".into()))
        );
        assert_eq!(key("The deadline is Friday"), Some("|the deadline".into()));
        assert_eq!(key("Postgres is the store"), Some("|postgres".into()));
        // Vague, questions, several sentences, long clauses: no key.
        assert_eq!(key("It is raining"), None);
        assert_eq!(key("Is my email right?"), None);
        assert_eq!(key("My email is x. My phone is y"), None);
        assert_eq!(key("I think that the thing we saw is odd"), None);
        assert_eq!(key("Nothing to see"), None);
    }
}
