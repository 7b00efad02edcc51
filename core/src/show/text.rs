//! The small, pure formatting helpers a proposal is shown with: durations and
//! relative times (from a `now` the caller passes), the highlight, name lists, and
//! cutting text to a width. Untrusted text always goes through [`crate::escape`]
//! first; nothing here reads a clock or a terminal.

use crate::escape::escape;
use crate::preview::Preview;

/// A duration for humans: `45s`, `12m`, `2h05m`, `3d4h` (the sign is dropped).
pub fn duration(secs: i64) -> String {
    let s = secs.unsigned_abs();
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m", s / 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d{}h", s / 86_400, (s % 86_400) / 3600)
    }
}

/// `in 12m` or `12m ago`.
pub fn relative(secs_from_now: i64) -> String {
    if secs_from_now >= 0 {
        format!("in {}", duration(secs_from_now))
    } else {
        format!("{} ago", duration(secs_from_now))
    }
}

/// Bold reverse video (ANSI) when `on`, plain otherwise. The caller decides `on`
/// (a terminal that wants colour); a web page always passes `false`.
pub fn highlight(s: &str, on: bool) -> String {
    if on {
        format!("\x1b[1;7m{s}\x1b[0m")
    } else {
        s.to_owned()
    }
}

/// Names (approvers, groups) escaped and listed as `[alice, bob]`.
pub fn names(list: &[impl std::fmt::Display]) -> String {
    let v: Vec<String> = list.iter().map(|s| escape(&s.to_string())).collect();
    format!("[{}]", v.join(", "))
}

/// Untrusted text escaped and cut to at most `max` characters (with `…`).
pub fn truncate(s: &str, max: usize) -> String {
    cut(&escape(s), max)
}

/// Already safe text cut to at most `max` characters (with `…`).
pub fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// The preview's `expires_at` relative to `now`, for tables: `expired` or `12m`.
pub fn expires_in(p: &Preview, now: i64) -> String {
    let d = p.expires_at.unix() - now;
    if d <= 0 {
        "expired".to_owned()
    } else {
        duration(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_relative_times() {
        assert_eq!(duration(45), "45s");
        assert_eq!(duration(-720), "12m");
        assert_eq!(duration(7500), "2h05m");
        assert_eq!(duration(3 * 86_400 + 4 * 3600), "3d4h");
        assert_eq!(relative(60), "in 1m");
        assert_eq!(relative(-60), "1m ago");
    }

    #[test]
    fn cutting_counts_characters_and_escapes_first() {
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(truncate("a\u{202e}b", 20), "a\\u{202e}b");
        assert_eq!(highlight("x", false), "x");
        assert_eq!(highlight("x", true), "\x1b[1;7mx\x1b[0m");
    }
}
