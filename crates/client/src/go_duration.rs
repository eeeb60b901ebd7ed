//! Durations written as Go writes them (`time.ParseDuration`), the syntax upstream's flags take:
//! one or more `<number><unit>` terms, each number with an optional fraction, units `ns`, `us`
//! (`µs`), `ms`, `s`, `m`, `h`: `250ms`, `90s`, `1m30s`, `1.5h`; a bare `0` too. The daemon's
//! duration flags and csi-proxyctl's `-timeout` both read them here. No sign: nothing here takes
//! a negative duration.

use std::time::Duration;

/// Why a text is not a Go duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("empty")]
    Empty,
    #[error("a number is missing or malformed")]
    Malformed,
    #[error("a unit is missing")]
    MissingUnit,
    #[error("unknown unit")]
    UnknownUnit,
    /// Go's durations end at 2^63-1 ns (about 292 years).
    #[error("too large")]
    TooLarge,
}

/// Parses `text` as Go's `time.ParseDuration` does, less the sign.
pub fn parse(text: &str) -> Result<Duration, Error> {
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(Error::Empty);
    }
    let mut rest = text;
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(Error::Malformed);
        }
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let per: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(Error::MissingUnit),
            _ => return Err(Error::UnknownUnit),
        };
        let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| Error::TooLarge)? };
        nanos = whole.checked_mul(per).and_then(|n| nanos.checked_add(n)).ok_or(Error::TooLarge)?;
        // The fraction, digit by digit; what falls below a nanosecond is dropped, as Go does.
        let mut scale = per;
        for d in fraction.bytes() {
            scale /= 10;
            nanos = nanos.checked_add(u128::from(d - b'0') * scale).ok_or(Error::TooLarge)?;
        }
        rest = next;
    }
    if nanos > i64::MAX as u128 {
        return Err(Error::TooLarge);
    }
    Ok(Duration::from_nanos(nanos as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_forms() {
        for (text, want) in [
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("1h", Duration::from_secs(3600)),
            ("90s", Duration::from_secs(90)),
            ("1m30s", Duration::from_secs(90)),
            ("5m0s", Duration::from_secs(300)),
            ("500ms", Duration::from_millis(500)),
            ("1.5h", Duration::from_secs(5400)),
            ("2h45m", Duration::from_secs(9900)),
            (".5m", Duration::from_secs(30)),
            ("1.s", Duration::from_secs(1)),
            ("10us", Duration::from_micros(10)),
            ("10µs", Duration::from_micros(10)),
            ("7ns", Duration::from_nanos(7)),
            ("0.000000001s", Duration::from_nanos(1)),
            ("0.0000000019s", Duration::from_nanos(1)),
            ("2562047h", Duration::from_secs(2_562_047 * 3600)),
        ] {
            assert_eq!(parse(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn mistakes_say_which() {
        for (bad, why) in [
            ("", Error::Empty),
            ("60", Error::MissingUnit),
            ("1h30", Error::MissingUnit),
            ("5x", Error::UnknownUnit),
            ("1d", Error::UnknownUnit),
            ("5 s", Error::UnknownUnit),
            ("-1h", Error::Malformed),
            ("+1h", Error::Malformed),
            ("s", Error::Malformed),
            (".s", Error::Malformed),
            ("1.2.3s", Error::Malformed),
            ("2562048h", Error::TooLarge),
            ("99999999999999999999999999999999999999999h", Error::TooLarge),
        ] {
            assert_eq!(parse(bad), Err(why), "{bad:?}");
        }
    }
}
