//! The small formatting helpers of the CLI, and the escaping it shows untrusted text
//! with.
//!
//! What counts as untrusted, which characters are escaped, how, and which words are
//! named as look-alikes is one policy for every place that shows the agent's text
//! (this CLI, its page, the server's mail, webhook and Slack notifications):
//! [`approval_core::escape`], re-exported here so the CLI's callers keep their names.

pub use approval_core::escape::{
    escape, json_safe, lookalike_warnings, needs_escape, quote, render_json,
};
use serde_json::Value;
use std::io::IsTerminal;

/// Pretty JSON for `--json` output, terminal-safe (see [`json_safe`]).
pub fn to_json(v: &Value) -> String {
    json_safe(&serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into()))
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

/// A duration for humans: `45s`, `12m`, `2h05m`, `3d4h`.
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

/// "in 12m" or "12m ago".
pub fn relative(secs_from_now: i64) -> String {
    if secs_from_now >= 0 {
        format!("in {}", duration(secs_from_now))
    } else {
        format!("{} ago", duration(secs_from_now))
    }
}

/// Whether stdout may receive colour: a terminal, and `NO_COLOR` unset.
pub fn color() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// Bold reverse video when `on`, plain otherwise.
pub fn highlight(s: &str, on: bool) -> String {
    if on {
        format!("\x1b[1;7m{s}\x1b[0m")
    } else {
        s.to_owned()
    }
}

/// Left-aligned table with a header row; cells are already escaped.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (i, c) in cells.enumerate() {
            let w = widths.get(i).copied().unwrap_or(0);
            let pad = w.saturating_sub(c.chars().count());
            l.push_str(c);
            l.push_str(&" ".repeat(pad + 2));
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut out, &mut header.iter().copied());
    for r in rows {
        line(&mut out, &mut r.iter().map(String::as_str));
    }
    out
}
