//! Time as plain values: the core never reads a clock, every function takes `now`.
//!
//! Timestamps are whole seconds since the Unix epoch and are written as RFC 3339 UTC
//! with a `Z` and no fraction, exactly as the preview carries them, so that a
//! timestamp has exactly one spelling and one hash.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use thiserror::Error;

/// How long the server keeps an HTTP connection with nothing in flight (or a new one
/// without its first request) before closing it: `docs/PROTOCOL.md`, "Connections".
pub const CONNECTION_IDLE_SECS: u64 = 10;

/// How long our own HTTP clients keep an idle pooled connection for reuse.
///
/// A request written on a connection at the moment its server closes it for idling is
/// lost: the client reads "connection closed before message completed" and cannot
/// tell whether anything was done. Dropping idle connections well before the server
/// does closes that race. 4 s is under [`CONNECTION_IDLE_SECS`] and under the 5 s
/// keep-alive of Node.js servers, which downstream MCP servers and webhooks often are.
pub const CLIENT_POOL_IDLE_SECS: u64 = 4;

const _: () = assert!(CLIENT_POOL_IDLE_SECS < CONNECTION_IDLE_SECS);

/// A point in time, in whole seconds since the Unix epoch (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

/// A length of time in whole seconds, as policies write it (`90s`, `30m`, `2h`, `7d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seconds(u64);

/// A timestamp or duration that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TimeError {
    /// Not `YYYY-MM-DDTHH:MM:SSZ`.
    #[error(
        "invalid timestamp {0:?}: use RFC 3339 UTC with whole seconds, like 2026-11-30T12:00:00Z"
    )]
    Timestamp(String),
    /// Not a number followed by `s`, `m`, `h` or `d`.
    #[error("invalid duration {0:?}: use a whole number followed by s, m, h or d, like \"90s\", \"30m\", \"2h\" or \"7d\"")]
    Duration(String),
}

/// Latest accepted timestamp (9999-12-31T23:59:59Z), so formatting never fails.
const MAX_UNIX: i64 = 253_402_300_799;

impl Timestamp {
    /// Wraps seconds since the epoch; values outside years 1970..=9999 are clamped.
    pub fn from_unix(secs: i64) -> Self {
        Self(secs.clamp(0, MAX_UNIX))
    }

    /// Seconds since the epoch.
    pub fn unix(self) -> i64 {
        self.0
    }

    /// This time plus a duration (saturating at the latest representable time).
    pub fn plus(self, d: Seconds) -> Self {
        Self::from_unix(
            self.0
                .saturating_add(i64::try_from(d.0).unwrap_or(i64::MAX)),
        )
    }

    /// Reads exactly `YYYY-MM-DDTHH:MM:SSZ`; any other spelling is refused.
    pub fn parse(s: &str) -> Result<Self, TimeError> {
        let err = || TimeError::Timestamp(s.chars().take(40).collect());
        let b = s.as_bytes();
        if b.len() != 20
            || b[4] != b'-'
            || b[7] != b'-'
            || b[10] != b'T'
            || b[13] != b':'
            || b[16] != b':'
            || b[19] != b'Z'
        {
            return Err(err());
        }
        let num = |from: usize, to: usize| -> Option<i64> {
            b[from..to].iter().try_fold(0i64, |acc, &c| {
                c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
            })
        };
        let field = |from, to| num(from, to).ok_or_else(err);
        let (year, month, day) = (field(0, 4)?, field(5, 7)?, field(8, 10)?);
        let (hour, minute, second) = (field(11, 13)?, field(14, 16)?, field(17, 19)?);
        // Seconds stop at 59: leap seconds have no Unix time of their own.
        if !(1..=12).contains(&month)
            || day < 1
            || day > days_in_month(year, month)
            || hour > 23
            || minute > 59
            || second > 59
        {
            return Err(err());
        }
        let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
        if !(0..=MAX_UNIX).contains(&secs) {
            return Err(err());
        }
        Ok(Self(secs))
    }

    /// The RFC 3339 UTC form with whole seconds and `Z`.
    pub fn to_rfc3339(self) -> String {
        // The bytes are ASCII digits and separators, so this cannot fail.
        String::from_utf8_lossy(&self.rfc3339_bytes()).into_owned()
    }

    /// The RFC 3339 form in a fixed buffer: it is written into every answer and
    /// stored record, so it is built without allocating or formatting machinery.
    fn rfc3339_bytes(self) -> [u8; 20] {
        let days = self.0.div_euclid(86_400);
        let rem = self.0.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        let mut out = *b"0000-00-00T00:00:00Z";
        let mut put = |at: usize, width: usize, mut v: i64| {
            for i in (at..at + width).rev() {
                out[i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
        };
        put(0, 4, year);
        put(5, 2, month);
        put(8, 2, day);
        put(11, 2, rem / 3600);
        put(14, 2, rem / 60 % 60);
        put(17, 2, rem % 60);
        out
    }
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`, for years 0..=9999 as used here).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01 (the inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.rfc3339_bytes();
        f.write_str(std::str::from_utf8(&b).map_err(|_| fmt::Error)?)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let b = self.rfc3339_bytes();
        s.serialize_str(std::str::from_utf8(&b).map_err(serde::ser::Error::custom)?)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Timestamp;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 UTC timestamp like 2026-11-30T12:00:00Z")
            }
            // Borrowed or not, the text is read in place: no String per timestamp.
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Timestamp, E> {
                Timestamp::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_str(Visit)
    }
}

impl Seconds {
    /// Wraps a number of seconds.
    pub const fn new(secs: u64) -> Self {
        Self(secs)
    }

    /// The number of seconds.
    pub fn get(self) -> u64 {
        self.0
    }

    /// Reads `90s`, `30m`, `2h` or `7d`. Zero and values beyond ten years are refused:
    /// neither is a sensible approval window.
    pub fn parse(s: &str) -> Result<Self, TimeError> {
        let err = || TimeError::Duration(s.chars().take(40).collect());
        // Only ASCII can be valid, and checking first keeps the split below on a
        // character boundary (a non-ASCII last character used to panic here).
        if !s.is_ascii() {
            return Err(err());
        }
        let (num, unit) = s.split_at(s.len().saturating_sub(1));
        if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) || num.len() > 12 {
            return Err(err());
        }
        let n: u64 = num.parse().map_err(|_| err())?;
        let mult = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => return Err(err()),
        };
        let secs = n.checked_mul(mult).ok_or_else(err)?;
        if secs == 0 || secs > 10 * 366 * 86_400 {
            return Err(err());
        }
        Ok(Self(secs))
    }

    /// The shortest spelling: the largest unit that divides the value evenly.
    pub fn to_spec(self) -> String {
        let s = self.0;
        if s != 0 && s.is_multiple_of(86_400) {
            format!("{}d", s / 86_400)
        } else if s != 0 && s.is_multiple_of(3600) {
            format!("{}h", s / 3600)
        } else if s != 0 && s.is_multiple_of(60) {
            format!("{}m", s / 60)
        } else {
            format!("{s}s")
        }
    }
}

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_spec())
    }
}

impl Serialize for Seconds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_spec())
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The execution window of an approval reached at `approved_at`: executable from
/// the first timestamp (inclusive) until the second (exclusive). Without a cooldown
/// it opens at quorum. The cooldown is the first part of `execute_within` (a policy
/// refuses a cooldown that is not shorter), so the window never grows with it.
pub fn execution_window(
    approved_at: Timestamp,
    cooldown: Option<Seconds>,
    execute_within: Seconds,
) -> (Timestamp, Timestamp) {
    let opens = cooldown.map_or(approved_at, |c| approved_at.plus(c));
    (opens, approved_at.plus(execute_within))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_have_one_spelling() {
        let t = Timestamp::parse("2026-11-30T00:30:00Z").unwrap();
        assert_eq!(t.unix(), 1_795_998_600);
        assert_eq!(t.to_rfc3339(), "2026-11-30T00:30:00Z");
        for bad in [
            "2026-11-30T00:30:00+00:00",
            "2026-11-30T00:30:00.0Z",
            "2026-11-30 00:30:00Z",
            "2026-11-30T00:30:60Z",
            "2026-02-30T00:00:00Z",
            "2026-11-30t00:30:00z",
            "",
        ] {
            assert_eq!(
                Timestamp::parse(bad),
                Err(TimeError::Timestamp(bad.into())),
                "{bad}"
            );
        }
    }

    /// chrono is the oracle for our calendar arithmetic: days from 1970 to 9999
    /// (each with a random second of the day) format and parse as chrono does.
    #[test]
    fn calendar_agrees_with_chrono_over_the_whole_range() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut day = 0i64;
        while day * 86_400 <= MAX_UNIX {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let secs = day * 86_400 + (x % 86_400) as i64;
            let t = Timestamp::from_unix(secs);
            let expected = chrono::DateTime::from_timestamp(t.unix(), 0)
                .expect("in range")
                .format("%Y-%m-%dT%H:%M:%SZ")
                .to_string();
            assert_eq!(t.to_rfc3339(), expected, "{secs}");
            assert_eq!(t.to_string(), expected);
            assert_eq!(Timestamp::parse(&expected), Ok(t), "{expected}");
            // Every day until 2200, then every 13th (all weekdays, months, leap days).
            day += if day < 84_000 { 1 } else { 13 };
        }
        assert_eq!(
            Timestamp::from_unix(MAX_UNIX).to_rfc3339(),
            "9999-12-31T23:59:59Z"
        );
        assert_eq!(Timestamp::from_unix(0).to_rfc3339(), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn impossible_dates_and_bad_digits_are_refused() {
        for bad in [
            "2026-04-31T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2026-00-10T00:00:00Z",
            "2026-13-10T00:00:00Z",
            "2026-01-00T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:60:00Z",
            "1969-12-31T23:59:59Z",
            "2026-1a-01T00:00:00Z",
            "+026-01-01T00:00:00Z",
            "2026-01-01T00:00:0\u{661}",
        ] {
            assert!(Timestamp::parse(bad).is_err(), "{bad}");
        }
        assert!(Timestamp::parse("2024-02-29T00:00:00Z").is_ok());
        assert!(Timestamp::parse("2000-02-29T23:59:59Z").is_ok());
    }

    #[test]
    fn serde_reads_borrowed_and_escaped_text() {
        let t: Timestamp = serde_json::from_str("\"2026-11-30T00:30:00Z\"").unwrap();
        assert_eq!(t.unix(), 1_795_998_600);
        // An escaped character makes serde_json hand over an owned string.
        let t: Timestamp = serde_json::from_str("\"2026-11-30T00:30:00\\u005a\"").unwrap();
        assert_eq!(t.unix(), 1_795_998_600);
        assert!(serde_json::from_str::<Timestamp>("12").is_err());
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            "\"2026-11-30T00:30:00Z\""
        );
    }

    #[test]
    fn durations_parse_and_print_shortest() {
        assert_eq!(Seconds::parse("90s").unwrap().get(), 90);
        assert_eq!(Seconds::parse("30m").unwrap().get(), 1800);
        assert_eq!(Seconds::parse("2h").unwrap().get(), 7200);
        assert_eq!(Seconds::parse("7d").unwrap().get(), 604_800);
        assert_eq!(Seconds::parse("120s").unwrap().to_spec(), "2m");
        assert_eq!(Seconds::parse("90s").unwrap().to_spec(), "90s");
        for bad in [
            "",
            "s",
            "0s",
            "-5m",
            "5",
            "5 m",
            "5w",
            "1.5h",
            "99999999999999d",
            "+5s",
        ] {
            assert_eq!(
                Seconds::parse(bad),
                Err(TimeError::Duration(bad.into())),
                "{bad}"
            );
        }
    }
}
