//! Timestamps as UTC milliseconds, whatever shape a source wrote them in.
//!
//! Seed 002's TTL filter crashed comparing a naive timestamp with an aware one. Here every
//! timestamp becomes UTC milliseconds at the boundary, so comparisons are between integers: text
//! with an offset (`Z`, `+02:00`, `-0500`) is converted, and naive text (no offset) is read as UTC,
//! the one time zone Loom uses everywhere.

use serde::{Deserialize, Deserializer};

/// Days from 1970-01-01 to the given civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

fn number(s: &str, what: &str) -> Result<i64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} `{s}` is not a number"));
    }
    s.parse()
        .map_err(|_| format!("{what} `{s}` is out of range"))
}

/// Parses `+HH:MM`, `+HHMM`, `+HH`, `Z` into seconds east of UTC.
fn offset_seconds(s: &str) -> Result<i64, String> {
    if s.eq_ignore_ascii_case("z") {
        return Ok(0);
    }
    let (sign, rest) = match s.as_bytes().first() {
        Some(b'+') => (1, &s[1..]),
        Some(b'-') => (-1, &s[1..]),
        _ => return Err(format!("offset `{s}` must start with +, - or be Z")),
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    let (h, m) = match digits.len() {
        2 => (number(&digits, "offset hours")?, 0),
        4 => (
            number(&digits[..2], "offset hours")?,
            number(&digits[2..], "offset minutes")?,
        ),
        _ => return Err(format!("offset `{s}` is not ±HH:MM")),
    };
    if h > 23 || m > 59 {
        return Err(format!("offset `{s}` is out of range"));
    }
    Ok(sign * (h * 3600 + m * 60))
}

/// Parses RFC 3339 / ISO 8601 text (`2026-01-28T10:00:00.250+02:00`, `2026-01-28 10:00:00`,
/// `2026-01-28`) into UTC milliseconds. Returns whether the text was naive (read as UTC).
pub fn parse_utc_ms(text: &str) -> Result<(i64, bool), String> {
    let text = text.trim();
    let date = text.get(..10).ok_or("expected at least YYYY-MM-DD")?;
    let parts: Vec<&str> = date.split('-').collect();
    let [y, mo, d] = parts.as_slice() else {
        return Err("expected YYYY-MM-DD".into());
    };
    let (y, mo, d) = (number(y, "year")?, number(mo, "month")?, number(d, "day")?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) {
        return Err(format!("{date} is not a calendar date"));
    }
    let mut rest = &text[10..];
    let mut ms_of_day = 0i64;
    if let Some(time) = rest.strip_prefix(['T', 't', ' ']) {
        let end = time.find(['Z', 'z', '+', '-']).unwrap_or(time.len());
        let (clock, after) = time.split_at(end);
        let (hms, frac) = clock.split_once('.').unwrap_or((clock, ""));
        let fields: Vec<&str> = hms.split(':').collect();
        let (h, mi, s) = match fields.as_slice() {
            [h, mi] => (number(h, "hour")?, number(mi, "minute")?, 0),
            [h, mi, s] => (
                number(h, "hour")?,
                number(mi, "minute")?,
                number(s, "second")?,
            ),
            _ => return Err(format!("time `{clock}` is not HH:MM[:SS[.fff]]")),
        };
        // A leap second (60) is accepted and folded into the next second.
        if h > 23 || mi > 59 || s > 60 {
            return Err(format!("time `{clock}` is out of range"));
        }
        let millis = if frac.is_empty() {
            0
        } else {
            let digits: String = frac.chars().chain("000".chars()).take(3).collect();
            number(&digits, "fraction")?
        };
        ms_of_day = ((h * 60 + mi) * 60 + s) * 1000 + millis;
        rest = after;
    }
    let (offset, naive) = if rest.is_empty() {
        (0, true)
    } else {
        (offset_seconds(rest)?, false)
    };
    let ms = days_from_civil(y, mo, d) * 86_400_000 + ms_of_day - offset * 1000;
    Ok((ms, naive))
}

/// [`parse_utc_ms`] for a named field, with a typed error naming the field and the text.
pub fn utc_ms(field: &str, text: &str) -> crate::Result<i64> {
    parse_utc_ms(text)
        .map(|(ms, _)| ms)
        .map_err(|reason| crate::RuntimeError::Timestamp {
            field: field.to_owned(),
            value: text.to_owned(),
            reason,
        })
}

/// Deserializes a timestamp given as integer UTC milliseconds or as text (see [`parse_utc_ms`]).
pub(crate) fn de_utc_ms<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Millis(i64),
        Text(String),
    }
    match Raw::deserialize(d)? {
        Raw::Millis(ms) => Ok(ms),
        Raw::Text(t) => parse_utc_ms(&t)
            .map(|(ms, _)| ms)
            .map_err(|e| serde::de::Error::custom(format!("timestamp `{t}`: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_and_offsets() {
        assert_eq!(parse_utc_ms("1970-01-01T00:00:00Z"), Ok((0, false)));
        assert_eq!(parse_utc_ms("1970-01-01"), Ok((0, true)));
        assert_eq!(
            parse_utc_ms("2026-01-28T12:00:00+02:00").map(|r| r.0),
            parse_utc_ms("2026-01-28T10:00:00Z").map(|r| r.0)
        );
        assert_eq!(
            parse_utc_ms("2026-01-28 10:00:00.5").map(|r| r.0),
            parse_utc_ms("2026-01-28T10:00:00.500Z").map(|r| r.0)
        );
        // 2000-03-01 is 11,017 days after the epoch (a leap-year February before it).
        assert_eq!(
            parse_utc_ms("2000-03-01T00:00:00-0100").map(|r| r.0),
            Ok(11_017 * 86_400_000 + 3_600_000)
        );
    }

    #[test]
    fn rejects_bad_dates() {
        assert!(parse_utc_ms("2025-02-29").is_err());
        assert!(parse_utc_ms("2026-13-01").is_err());
        assert!(parse_utc_ms("2026-01-01T25:00").is_err());
        assert!(parse_utc_ms("yesterday").is_err());
        let err = utc_ms("created_at", "yesterday").unwrap_err();
        assert!(err.is_bad_input());
        assert!(err.to_string().contains("`created_at`"), "{err}");
    }
}
