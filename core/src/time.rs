//! Time as plain values: the core never reads a clock, every function takes `now`.
//!
//! Timestamps are whole seconds since the Unix epoch and are written as RFC 3339 UTC
//! with a `Z` and no fraction, exactly as the preview carries them, so that a
//! timestamp has exactly one spelling and one hash.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use thiserror::Error;

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
        if b.len() != 20 || b[19] != b'Z' || b[10] != b'T' {
            return Err(err());
        }
        let dt = chrono::NaiveDateTime::parse_from_str(&s[..19], "%Y-%m-%dT%H:%M:%S")
            .map_err(|_| err())?;
        let t = Self(dt.and_utc().timestamp());
        // Round-trip: refuses leap seconds and anything chrono would normalise.
        if t.to_rfc3339() != s || t.0 < 0 || t.0 > MAX_UNIX {
            return Err(err());
        }
        Ok(t)
    }

    /// The RFC 3339 UTC form with whole seconds and `Z`.
    pub fn to_rfc3339(self) -> String {
        use chrono::{Datelike, Timelike};
        // Fields rather than a strftime pattern: this runs on every status answer.
        match chrono::DateTime::from_timestamp(self.0, 0) {
            Some(dt) => format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
                dt.year(),
                dt.month(),
                dt.day(),
                dt.hour(),
                dt.minute(),
                dt.second()
            ),
            None => "1970-01-01T00:00:00Z".to_owned(),
        }
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
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
