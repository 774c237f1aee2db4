//! When to try again: the provider's own `retry-after-ms` / `retry-after` (seconds or an HTTP
//! date), else exponential back-off with jitter.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

use super::config::Backoff;

/// The wait the provider asked for, if it said: `retry-after-ms` first (both official SDKs read
/// it first, and it is the more precise), then `retry-after` in seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    // A date already past means "now".
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Whether the provider said not to retry (Anthropic's `x-should-retry: false`); `Some(true)`
/// when it said to retry a status that is not otherwise retried.
pub(crate) fn should_retry(headers: &HeaderMap) -> Option<bool> {
    match headers.get("x-should-retry")?.to_str().ok()?.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// The back-off before retry number `retry` (0 for the first retry).
pub(crate) fn backoff(b: &Backoff, retry: u32) -> Duration {
    let factor = 2u32.checked_pow(retry.min(30)).unwrap_or(u32::MAX);
    let full = b.base.saturating_mul(factor).min(b.cap);
    let jitter = b.jitter.clamp(0.0, 1.0) * random_unit();
    full.mul_f64(1.0 - jitter)
}

/// A number in `[0, 1)` that differs between calls and processes; only for jitter, so no
/// cryptographic source is needed (the standard library's randomly keyed hasher will do).
fn random_unit() -> f64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn retry_after_in_milliseconds_seconds_and_dates() {
        let now = httpdate::parse_http_date("Wed, 25 Nov 2026 12:00:00 GMT").unwrap();
        let ra = |pairs| retry_after(&headers(pairs), now);
        assert_eq!(
            ra(&[("retry-after-ms", "250")]),
            Some(Duration::from_millis(250))
        );
        assert_eq!(ra(&[("retry-after", "3")]), Some(Duration::from_secs(3)));
        assert_eq!(
            ra(&[("retry-after", "1.5"), ("retry-after-ms", "20")]),
            Some(Duration::from_millis(20))
        );
        assert_eq!(
            ra(&[("retry-after", "Wed, 25 Nov 2026 12:00:07 GMT")]),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            ra(&[("retry-after", "Wed, 25 Nov 2026 11:00:00 GMT")]),
            Some(Duration::ZERO)
        );
        assert_eq!(ra(&[("retry-after", "soon")]), None);
        assert_eq!(ra(&[("retry-after", "-1")]), None);
        assert_eq!(
            ra(&[("retry-after-ms", "x"), ("retry-after", "2")]),
            Some(Duration::from_secs(2))
        );
        assert_eq!(ra(&[]), None);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_jitter_only_shortens() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_millis(1000),
            jitter: 0.0,
        };
        let waits: Vec<u128> = (0..6).map(|n| backoff(&b, n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(backoff(&b, u32::MAX).as_millis(), 1000);
        let b = Backoff { jitter: 0.5, ..b };
        let waits: Vec<Duration> = (0..200).map(|_| backoff(&b, 1)).collect();
        assert!(waits
            .iter()
            .all(|w| *w <= Duration::from_millis(200) && *w >= Duration::from_millis(100)));
        assert!(waits.iter().any(|w| *w != waits[0]), "jitter varies");
    }

    #[test]
    fn should_retry_header() {
        assert_eq!(
            should_retry(&headers(&[("x-should-retry", "false")])),
            Some(false)
        );
        assert_eq!(
            should_retry(&headers(&[("x-should-retry", "true")])),
            Some(true)
        );
        assert_eq!(should_retry(&headers(&[])), None);
    }
}
