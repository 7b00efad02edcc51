//! Making untrusted text safe to show, and the small formatting helpers of the CLI.
//!
//! Everything the agent wrote (payload, summary) and everything a server says in an
//! error is untrusted. Before it reaches the terminal, every character that could
//! hide, reorder or fake what the approver reads is replaced by a visible escape
//! `\u{..}`: control characters (ANSI sequences start with ESC), bidi overrides and
//! isolates, zero-width and other format characters, line and paragraph separators,
//! non-ASCII spaces, invisible fillers, private-use characters and noncharacters, and
//! runs of variation selectors (one after a visible character is kept, so emoji
//! still look like emoji; the rest can smuggle data). A backslash is shown as `\\`,
//! so every backslash on screen starts an escape. Letters of every script and emoji
//! are kept as they are.

use serde_json::Value;
use std::fmt::Write as _;
use std::io::IsTerminal;

/// Unicode general category Cf (format characters), as of Unicode 16.
const FORMAT: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// Characters that render as nothing although they are not in Cf: the combining
/// grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian variation
/// selectors, the supplementary variation selectors.
const INVISIBLE: &[(u32, u32)] = &[
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180D),
    (0x180F, 0x180F),
    (0x3164, 0x3164),
    (0xFFA0, 0xFFA0),
    (0xE0100, 0xE01EF),
];

fn in_table(c: char, table: &[(u32, u32)]) -> bool {
    let c = c as u32;
    table.iter().any(|&(lo, hi)| lo <= c && c <= hi)
}

fn is_variation_selector(c: char) -> bool {
    ('\u{FE00}'..='\u{FE0F}').contains(&c)
}

fn is_private_or_nonchar(c: char) -> bool {
    let u = c as u32;
    (0xE000..=0xF8FF).contains(&u)
        || u >= 0xF0000
        || (0xFDD0..=0xFDEF).contains(&u)
        || (u & 0xFFFE) == 0xFFFE
}

/// Whether a character must never reach the terminal raw (variation selectors aside,
/// see [`escape`]).
pub fn needs_escape(c: char) -> bool {
    c.is_control()                                 // Cc, including ESC, NUL, DEL, C1
        || (c.is_whitespace() && !c.is_ascii())    // Zl, Zp, NBSP, U+2000.., U+3000
        || in_table(c, FORMAT)                     // Cf: bidi, zero-width, BOM, tags
        || in_table(c, INVISIBLE)
        || is_private_or_nonchar(c)
}

fn push_escape(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        _ => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

fn escape_into(out: &mut String, s: &str, quote: bool) {
    // Whether the last character pushed was a visible base a variation selector may follow.
    let mut after_base = false;
    for c in s.chars() {
        if c == '\\' {
            out.push_str("\\\\");
            after_base = false;
        } else if quote && c == '"' {
            out.push_str("\\\"");
            after_base = false;
        } else if is_variation_selector(c) {
            if after_base {
                out.push(c);
            } else {
                push_escape(out, c);
            }
            after_base = false;
        } else if needs_escape(c) {
            push_escape(out, c);
            after_base = false;
        } else {
            out.push(c);
            after_base = true;
        }
    }
}

/// Untrusted text made safe for one line of a terminal: invisible and control
/// characters become `\u{..}` (newline `\n`, tab `\t`), a backslash `\\`.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    escape_into(&mut out, s, false);
    out
}

/// A JSON string literal with the same escaping, plus `\"`.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    escape_into(&mut out, s, true);
    out.push('"');
    out
}

/// Pretty-prints a JSON value for a human (two-space indent), every string and key
/// escaped with [`quote`]. Not JSON when an escape like `\u{202e}` appears: use `--json`
/// for machines.
pub fn render_json(v: &Value) -> String {
    let mut out = String::new();
    render_into(&mut out, v, 0);
    out
}

fn indent(out: &mut String, level: usize) {
    for _ in 0..level {
        out.push_str("  ");
    }
}

fn render_into(out: &mut String, v: &Value, level: usize) {
    match v {
        Value::Null | Value::Bool(_) | Value::Number(_) => out.push_str(&v.to_string()),
        Value::String(s) => out.push_str(&quote(s)),
        Value::Array(a) if a.is_empty() => out.push_str("[]"),
        Value::Object(o) if o.is_empty() => out.push_str("{}"),
        Value::Array(a) => {
            out.push_str("[\n");
            for (i, x) in a.iter().enumerate() {
                indent(out, level + 1);
                render_into(out, x, level + 1);
                out.push_str(if i + 1 < a.len() { ",\n" } else { "\n" });
            }
            indent(out, level);
            out.push(']');
        }
        Value::Object(o) => {
            out.push_str("{\n");
            for (i, (k, x)) in o.iter().enumerate() {
                indent(out, level + 1);
                out.push_str(&quote(k));
                out.push_str(": ");
                render_into(out, x, level + 1);
                out.push_str(if i + 1 < o.len() { ",\n" } else { "\n" });
            }
            indent(out, level);
            out.push('}');
        }
    }
}

/// JSON text for machines that is still safe on a terminal: every character that
/// [`needs_escape`] (and every variation selector) is written as a JSON `\uXXXX`
/// escape, which JSON readers decode to the same string. Structure is unchanged.
pub fn json_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c != '\n' && (needs_escape(c) || is_variation_selector(c)) {
            let mut buf = [0u16; 2];
            for unit in c.encode_utf16(&mut buf) {
                let _ = write!(out, "\\u{:04x}", unit);
            }
        } else {
            out.push(c);
        }
    }
    out
}

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
