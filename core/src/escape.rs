//! How untrusted text is shown: one policy for every place that shows what the agent
//! wrote (summary, payload, kind, requester) or what a server said, so a character
//! escaped on one screen is escaped on all. `signer-cli` (terminal and `--json`), its
//! page (`signer-cli ui`) and every notification the server sends (mail, JSON webhook,
//! Slack) call these functions; nothing else decides what is shown raw. Pure: no I/O.
//!
//! Every character that could hide, reorder or fake what a human reads is replaced by
//! a visible escape `\u{..}`: control characters (ANSI sequences start with ESC, CR
//! and LF could start a mail header), bidi overrides and isolates, zero-width and
//! other format characters, line and paragraph separators, non-ASCII spaces, blank
//! graphics (U+2800 BRAILLE PATTERN BLANK), invisible fillers (U+3164 HANGUL FILLER)
//! and every other default-ignorable code point, private-use, unassigned and
//! noncharacter code points (see [`crate::unicode::is_hidden`]), and runs of
//! variation selectors (one after a visible character is kept, so emoji still look
//! like emoji; the rest can smuggle data). CR, LF and TAB are shown as `\r`, `\n`,
//! `\t`. A backslash is shown as `\\`, so every backslash shown starts an escape.
//! Letters of every script and emoji are kept as they are; a word that mixes scripts
//! (`аdmin` with a Cyrillic `а`) or only looks Latin is named in a warning line
//! ([`lookalike_warnings`]).

use serde_json::Value;
use std::fmt::Write as _;

fn is_variation_selector(c: char) -> bool {
    ('\u{FE00}'..='\u{FE0F}').contains(&c)
}

/// Whether a character must never reach the terminal raw (variation selectors aside,
/// see [`escape`]): everything that renders blank, as nothing, or as something other
/// than itself, classified from Unicode's data by [`crate::unicode::is_hidden`].
pub fn needs_escape(c: char) -> bool {
    crate::unicode::is_hidden(c)
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

/// Where a JSON value sits below `path`: `payload.user`, `payload.items[2]`,
/// `payload["odd key"]` (keys escaped).
fn child_path(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!("{path}.{key}")
    } else {
        format!("{path}[{}]", quote(key))
    }
}

fn warn_words(out: &mut Vec<String>, text: &str, place: &str) {
    for w in crate::unicode::lookalikes(text) {
        out.push(format!(
            "WARNING: {} in {place} {}",
            quote(&w.text),
            w.why.describe()
        ));
    }
}

fn warn_json(out: &mut Vec<String>, v: &Value, path: &str) {
    match v {
        Value::String(s) => warn_words(out, s, path),
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                warn_json(out, x, &format!("{path}[{i}]"));
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                warn_words(out, k, &format!("a key of {path}"));
                warn_json(out, x, &child_path(path, k));
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// One warning line for every word of the named text `fields` and of every key and
/// string value of `payload` that mixes scripts or only looks Latin, e.g.
/// `WARNING: "аdmin" in payload.user mixes Cyrillic and Latin letters` (the word and
/// the path escaped like everything else).
pub fn lookalike_warnings(fields: &[(&str, &str)], payload: &Value) -> Vec<String> {
    let mut out = vec![];
    for (name, text) in fields {
        warn_words(&mut out, text, name);
    }
    warn_json(&mut out, payload, "payload");
    out
}
