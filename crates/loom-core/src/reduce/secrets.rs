//! Masking of secrets in text that goes into observations and minimal arguments.
//!
//! Tool output routinely carries credentials (`cat .env`, `env`, `curl -H "Authorization: …"`).
//! The log and the blob store keep the original bytes; only what Loom writes into a prompt — the
//! observation and the minimal arguments — is masked. Detection is by the shapes credential
//! issuers document (fixed prefixes and lengths), plus `key = value` pairs whose key names a
//! secret; each keeps its recognisable prefix so the agent still knows what was there.

use std::borrow::Cow;

/// What a masked value is replaced by.
const MASK: &str = "***";

/// Token prefixes and the fewest characters that must follow them for the token to count.
///
/// The minimums keep ordinary words (`sk-learn`, `xox`) from being masked.
const PREFIXED: &[(&str, usize)] = &[
    ("sk-ant-", 16),
    ("sk-proj-", 16),
    ("sk-", 20),
    ("sk_live_", 16),
    ("sk_test_", 16),
    ("rk_live_", 16),
    ("ghp_", 20),
    ("gho_", 20),
    ("ghu_", 20),
    ("ghs_", 20),
    ("ghr_", 20),
    ("github_pat_", 20),
    ("glpat-", 16),
    ("xoxb-", 10),
    ("xoxp-", 10),
    ("xoxa-", 10),
    ("xoxr-", 10),
    ("xoxs-", 10),
    ("AIza", 30),
    ("hf_", 30),
    ("npm_", 30),
];

/// Key names whose value is a secret in `key=value`, `key: value` and `"key": "value"` forms.
const SECRET_KEYS: &[&str] = &[
    "password",
    "passwd",
    "pwd",
    "secret",
    "client_secret",
    "secret_key",
    "api_key",
    "apikey",
    "api-key",
    "access_key",
    "secret_access_key",
    "aws_secret_access_key",
    "access_token",
    "refresh_token",
    "auth_token",
    "token",
    "private_key",
];

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-')
}

/// Masks every secret found in `text`; borrows when there is none (the common case).
pub(crate) fn mask(text: &str) -> Cow<'_, str> {
    if text.len() < 8 || !might_hold_secret(text) {
        return Cow::Borrowed(text);
    }
    let masked = mask_private_keys(text);
    let masked = mask_tokens(&masked);
    let masked = mask_bearer(&masked);
    let masked = mask_key_values(&masked);
    if masked == text {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(masked)
    }
}

/// A cheap first pass: whether any detector could fire. Most text has no secret, and this keeps
/// it from being copied four times to find that out. Every detector starts at a word boundary,
/// so positions inside words are skipped at once; a key name must be followed by `=` or `:`.
fn might_hold_secret(text: &str) -> bool {
    let b = text.as_bytes();
    let at = |i: usize, needle: &[u8]| {
        b.len() - i >= needle.len()
            && b[i..i + needle.len()]
                .iter()
                .zip(needle)
                .all(|(x, y)| x.to_ascii_lowercase() == *y)
    };
    let assigned = |i: usize, key: &[u8]| {
        if !at(i, key) {
            return false;
        }
        let mut j = i + key.len();
        if b.get(j)
            .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_')
        {
            return false;
        }
        while b.get(j).is_some_and(|&c| matches!(c, b'"' | b'\'' | b' ')) {
            j += 1;
        }
        matches!(b.get(j), Some(b'=' | b':'))
    };
    (0..b.len()).any(|i| {
        if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
            return false;
        }
        let token = match b[i] {
            b's' => at(i, b"sk-") || at(i, b"sk_"),
            b'r' => at(i, b"rk_"),
            b'g' => {
                (at(i, b"gh") && b.get(i + 3) == Some(&b'_'))
                    || at(i, b"github_pat_")
                    || at(i, b"glpat-")
            }
            b'x' => at(i, b"xox"),
            b'A' => at(i, b"aiza") || at(i, b"akia") || at(i, b"asia"),
            b'h' => at(i, b"hf_"),
            b'n' => at(i, b"npm_"),
            b'B' | b'b' => at(i, b"bearer "),
            b'-' => at(i, b"-----begin"),
            _ => false,
        };
        token
            || SECRET_KEYS
                .iter()
                .any(|k| k.as_bytes()[0] == b[i].to_ascii_lowercase() && assigned(i, k.as_bytes()))
    })
}

fn mask_private_keys(text: &str) -> String {
    const BEGIN: &str = "-----BEGIN ";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(BEGIN) {
        let after = &rest[at + BEGIN.len()..];
        let header_end = after.find("-----");
        let is_private = header_end.is_some_and(|end| after[..end].ends_with("PRIVATE KEY"));
        if !is_private {
            out.push_str(&rest[..at + BEGIN.len()]);
            rest = after;
            continue;
        }
        out.push_str(&rest[..at]);
        out.push_str("[private key masked]");
        // Up to and including the END line's dashes, or to the end when it was cut off.
        match after.find("-----END ") {
            Some(end) => {
                let tail = &after[end + "-----END ".len()..];
                let close = tail.find("-----").map_or(tail.len(), |i| i + 5);
                rest = &tail[close..];
            }
            None => rest = "",
        }
    }
    out.push_str(rest);
    out
}

fn mask_tokens(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        // A token starts at a boundary: never inside another word.
        if i > 0 && is_token_byte(bytes[i - 1]) {
            i += 1;
            continue;
        }
        let mut matched = None;
        for &(prefix, min) in PREFIXED {
            if bytes[i..].starts_with(prefix.as_bytes()) {
                let body = bytes[i + prefix.len()..]
                    .iter()
                    .take_while(|&&b| is_token_byte(b))
                    .count();
                if body >= min {
                    matched = Some((prefix, prefix.len() + body));
                }
                break;
            }
        }
        if matched.is_none() {
            matched = aws_key_id(&bytes[i..]).map(|len| (&text[i..i + 4], len));
        }
        match matched {
            Some((prefix, len)) => {
                out.push_str(&text[copied..i]);
                out.push_str(prefix);
                out.push_str(MASK);
                i += len;
                copied = i;
            }
            None => i += 1,
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// `AKIA`/`ASIA` followed by 16 upper-case letters or digits, and nothing more.
fn aws_key_id(bytes: &[u8]) -> Option<usize> {
    if !(bytes.starts_with(b"AKIA") || bytes.starts_with(b"ASIA")) || bytes.len() < 20 {
        return None;
    }
    let body = &bytes[4..20];
    let ok = body
        .iter()
        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit());
    let ends = bytes.get(20).is_none_or(|&b| !is_token_byte(b));
    (ok && ends).then_some(20)
}

fn mask_bearer(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let lower = rest.to_ascii_lowercase();
        let Some(at) = lower.find("bearer ") else {
            break;
        };
        let start = at + "bearer ".len();
        let token_len = rest[start..]
            .bytes()
            .take_while(|&b| b.is_ascii_alphanumeric() || b"._~+/=-".contains(&b))
            .count();
        if token_len >= 16 {
            out.push_str(&rest[..start]);
            out.push_str(MASK);
            rest = &rest[start + token_len..];
        } else {
            out.push_str(&rest[..start]);
            rest = &rest[start..];
        }
    }
    out.push_str(rest);
    out
}

/// Masks the value in `key=value`, `key: value`, `"key": "value"` when the key names a secret.
fn mask_key_values(text: &str) -> String {
    let bytes = text.as_bytes();
    let lower = text.to_ascii_lowercase();
    let lower = lower.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') {
            i += 1;
            continue;
        }
        let Some(key) = SECRET_KEYS
            .iter()
            .filter(|k| lower[i..].starts_with(k.as_bytes()))
            .max_by_key(|k| k.len())
        else {
            i += 1;
            continue;
        };
        let mut j = i + key.len();
        // The key must end here (`password_hint` is not a password).
        if bytes
            .get(j)
            .is_some_and(|&b| b.is_ascii_alphanumeric() || b == b'_')
        {
            i += 1;
            continue;
        }
        if bytes.get(j).is_some_and(|&b| b == b'"' || b == b'\'') {
            j += 1;
        }
        while bytes.get(j) == Some(&b' ') {
            j += 1;
        }
        if !matches!(bytes.get(j), Some(b'=' | b':')) {
            i += 1;
            continue;
        }
        j += 1;
        while bytes.get(j) == Some(&b' ') {
            j += 1;
        }
        let quote = match bytes.get(j) {
            Some(&q @ (b'"' | b'\'')) => {
                j += 1;
                Some(q)
            }
            _ => None,
        };
        let value_len = bytes[j..]
            .iter()
            .take_while(|&&b| match quote {
                Some(q) => b != q,
                None => !b.is_ascii_whitespace() && !matches!(b, b',' | b';' | b'&' | b'}'),
            })
            .count();
        // Empty values and obvious placeholders carry nothing to hide.
        let value = &text[j..j + value_len];
        if value_len == 0 || value == MASK || value.eq_ignore_ascii_case("null") {
            i = j + value_len.max(1);
            continue;
        }
        out.push_str(&text[copied..j]);
        out.push_str(MASK);
        i = j + value_len;
        copied = i;
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_known_token_shapes_and_keeps_their_prefix() {
        let cases = [
            (
                "key sk-abcdefghijklmnopqrstuvwxyz012345 end",
                "key sk-*** end",
            ),
            (
                "OPENAI=sk-proj-AbCdEfGhIjKlMnOpQrStUv",
                "OPENAI=sk-proj-***",
            ),
            ("id AKIAIOSFODNN7EXAMPLE here", "id AKIA*** here"),
            (
                "token ghp_1234567890abcdefghijABCDEFGHIJ done",
                "token ghp_*** done",
            ),
            ("slack xoxb-123456789012-abcdef", "slack xoxb-***"),
            (
                "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc.def",
                "Authorization: Bearer ***",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(mask(input), want, "input {input:?}");
        }
    }

    #[test]
    fn masks_password_values_in_every_form() {
        assert_eq!(mask("db password=hunter2 ok"), "db password=*** ok");
        assert_eq!(
            mask(r#"{"password": "hunter2", "user": "a"}"#),
            r#"{"password": "***", "user": "a"}"#
        );
        assert_eq!(mask("API_KEY: abc123xyz"), "API_KEY: ***");
        assert_eq!(mask("password_hint=blue"), "password_hint=blue");
        assert_eq!(mask(r#"{"password": null}"#), r#"{"password": null}"#);
    }

    #[test]
    fn masks_private_keys_even_when_cut_off() {
        let pem =
            "before -----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY----- after";
        assert_eq!(mask(pem), "before [private key masked] after");
        let cut = "x -----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1r";
        assert_eq!(mask(cut), "x [private key masked]");
        let public = "-----BEGIN PUBLIC KEY----- abc";
        assert_eq!(mask(public), public);
    }

    #[test]
    fn leaves_ordinary_text_alone() {
        for text in [
            "pip install scikit-learn sk-learn",
            "task-1234 ask-me",
            "the bearer of bad news",
            "AKIA is a prefix",
            "tokenizer: fine",
        ] {
            assert!(
                matches!(mask(text), Cow::Borrowed(_)),
                "{text:?} was changed"
            );
        }
    }
}
