//! What the CLI's output needs beyond core: whether stdout is a terminal that takes
//! colour, `--json` output, and tables.
//!
//! What counts as untrusted, which characters are escaped, how, and which words are
//! named as look-alikes is one policy for every place that shows the agent's text
//! (this CLI, its page, the gate's approver page, the server's mail, webhook and Slack
//! notifications): [`approval_core::escape`]; durations, relative times, the highlight
//! and cutting are [`approval_core::show::text`]'s. Both are re-exported here so the
//! CLI's callers keep their names.

pub use approval_core::escape::{
    escape, json_safe, lookalike_warnings, needs_escape, quote, render_json,
};
pub use approval_core::show::text::{cut, duration, highlight, relative, truncate};
use serde_json::Value;
use std::io::IsTerminal;

/// Pretty JSON for `--json` output, terminal-safe (see [`json_safe`]).
pub fn to_json(v: &Value) -> String {
    json_safe(&serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into()))
}

/// Whether stdout may receive colour: a terminal, and `NO_COLOR` unset.
pub fn color() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
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
