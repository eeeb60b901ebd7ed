//! Wall-clock time in UTC as calendar fields, for klog's line header and the audit's RFC 3339
//! times (the standard library has no calendar; UTC needs no time-zone database).

use std::time::{SystemTime, UNIX_EPOCH};

/// A moment as calendar date and time of day in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utc {
    pub year: u64,
    pub month: u64,
    pub day: u64,
    pub hour: u64,
    pub minute: u64,
    pub second: u64,
    pub micros: u32,
}

impl Utc {
    /// `time` in UTC (times before 1970 read as 1970-01-01).
    pub fn of(time: SystemTime) -> Utc {
        let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = since.as_secs();
        let (days, rest) = (secs / 86_400, secs % 86_400);
        // Civil date from days since 1970-01-01 (the proleptic Gregorian calendar, in 400-year eras).
        let z = days + 719_468;
        let era = z / 146_097;
        let doe = z % 146_097;
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + u64::from(month <= 2);
        Utc {
            year,
            month,
            day,
            hour: rest / 3600,
            minute: rest % 3600 / 60,
            second: rest % 60,
            micros: since.subsec_micros(),
        }
    }

    /// RFC 3339 with microseconds: `2026-11-25T02:13:24.123456Z`.
    pub fn rfc3339(&self) -> String {
        let Utc { year, month, day, hour, minute, second, micros } = *self;
        format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{micros:06}Z")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times_are_rfc3339_utc() {
        let at = |d: Duration| Utc::of(UNIX_EPOCH + d).rfc3339();
        assert_eq!(at(Duration::ZERO), "1970-01-01T00:00:00.000000Z");
        // 2000-02-29 (a leap day of a century leap year), 2100-03-01 (after a skipped one).
        assert_eq!(at(Duration::from_secs(951_782_400)), "2000-02-29T00:00:00.000000Z");
        assert_eq!(at(Duration::from_secs(4_107_542_400)), "2100-03-01T00:00:00.000000Z");
        assert_eq!(at(Duration::from_micros(1_795_575_204_123_456)), "2026-11-25T02:53:24.123456Z");
    }
}
