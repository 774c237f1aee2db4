//! UTC milliseconds as calendar text: the one conversion every surface that prints a time needs.

/// The proleptic Gregorian `(year, month, day)` of a count of days since 1970-01-01 (Howard
/// Hinnant's civil-from-days).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    // Both are in range by construction: day 1..=31, month 1..=12.
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `YYYY-MM-DD` of UTC milliseconds.
pub fn utc_date(ms: i64) -> String {
    let (y, m, d) = civil_from_days(ms.div_euclid(86_400_000));
    format!("{y:04}-{m:02}-{d:02}")
}

/// `YYYY-MM-DD HH:MM:SS` of UTC milliseconds.
pub fn utc_datetime(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let rem = secs.rem_euclid(86_400);
    format!(
        "{} {:02}:{:02}:{:02}",
        utc_date(ms),
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(1_683_504_000_000), "2023-05-08");
        assert_eq!(utc_date(951_782_400_000), "2000-02-29");
        assert_eq!(utc_date(-86_400_000), "1969-12-31");
        assert_eq!(utc_date(-1), "1969-12-31");
        assert_eq!(utc_datetime(1_700_000_000_123), "2023-11-14 22:13:20");
        assert_eq!(utc_datetime(-1), "1969-12-31 23:59:59");
        assert_eq!(civil_from_days(-719_468), (0, 3, 1));
    }
}
