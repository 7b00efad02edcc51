//! Where in a policy's TOML text a key or a table is, so that a refusal names its
//! line. Text search only (the parsed value has no positions); imports nothing.

/// The 1-based line of the first `key = ...` in TOML text, for error messages.
pub(super) fn line_of_key(src: &str, key: &str) -> Option<usize> {
    src.lines()
        .position(|l| {
            let l = l.trim_start();
            l.strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
}

/// The 1-based line of `key = ...` inside the table `[table]` (or `[[table]]`).
///
/// [`line_of_key`] finds the first `key =` anywhere, which for a key that is not
/// top-level (`type`, `timeout`) may be the same key inside another table, such as
/// `type = "object"` in `[payload_schema]`.
pub(super) fn line_in_table(src: &str, table: &str, key: &str) -> Option<usize> {
    let mut current = String::new();
    for (i, l) in src.lines().enumerate() {
        let t = l.trim();
        if t.starts_with('[') {
            current = t
                .trim_start_matches('[')
                .split(']')
                .next()
                .unwrap_or("")
                .trim()
                .to_owned();
            continue;
        }
        if current == table
            && t.strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        {
            return Some(i + 1);
        }
    }
    None
}

/// The 1-based line of the `[table]` header.
pub(super) fn line_of_table(src: &str, table: &str) -> Option<usize> {
    src.lines()
        .position(|l| {
            l.trim()
                .strip_prefix('[')
                .and_then(|r| r.strip_suffix(']'))
                .is_some_and(|name| name.trim() == table)
        })
        .map(|i| i + 1)
}

/// The 1-based line of the `n`th `[[require]]` header.
pub(super) fn line_of_require(src: &str, n: usize) -> Option<usize> {
    src.lines()
        .enumerate()
        .filter(|(_, l)| l.trim() == "[[require]]")
        .nth(n)
        .map(|(i, _)| i + 1)
}

pub(super) fn byte_to_line(src: &str, offset: usize) -> usize {
    src.as_bytes()[..offset.min(src.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}
