//! Unit tests of the escaping that stands between untrusted text and the terminal.

use serde_json::json;
use signer_cli::display::{escape, json_safe, needs_escape, quote, render_json, truncate};

#[test]
fn ansi_escape_sequences_are_escaped() {
    assert_eq!(escape("a\u{1b}[2Jb"), r"a\u{1b}[2Jb");
    assert_eq!(escape("\u{9b}31m"), r"\u{9b}31m"); // C1 CSI
    assert_eq!(escape("\u{7f}"), r"\u{7f}");
}

#[test]
fn bidi_overrides_and_isolates_are_escaped() {
    assert_eq!(escape("abc\u{202e}fed"), r"abc\u{202e}fed");
    for c in [
        '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{2066}', '\u{2067}', '\u{2068}',
        '\u{2069}', '\u{200e}', '\u{200f}', '\u{61c}',
    ] {
        assert!(needs_escape(c), "{c:?}");
        assert_eq!(escape(&c.to_string()), format!("\\u{{{:x}}}", c as u32));
    }
}

#[test]
fn zero_width_and_format_characters_are_escaped() {
    assert_eq!(escape("pay\u{200d}pal"), r"pay\u{200d}pal");
    for c in [
        '\u{200b}',
        '\u{200c}',
        '\u{200d}',
        '\u{2060}',
        '\u{feff}',
        '\u{ad}',
        '\u{e0041}',
        '\u{3164}',
        '\u{fff9}',
    ] {
        assert!(needs_escape(c), "{c:?}");
    }
}

#[test]
fn nul_and_controls_are_escaped() {
    assert_eq!(escape("a\u{0}b"), r"a\u{0}b");
    assert_eq!(escape("a\nb\tc\rd"), r"a\nb\tc\rd");
    assert_eq!(escape("\u{7}\u{8}\u{b}\u{c}"), r"\u{7}\u{8}\u{b}\u{c}");
}

#[test]
fn line_and_paragraph_separators_and_odd_spaces_are_escaped() {
    assert_eq!(escape("a\u{2028}b\u{2029}c"), r"a\u{2028}b\u{2029}c");
    assert_eq!(
        escape("a\u{a0}b\u{3000}c\u{85}"),
        r"a\u{a0}b\u{3000}c\u{85}"
    );
}

#[test]
fn letters_and_emoji_are_kept() {
    for s in [
        "café",
        "naïve",
        "Ελληνικά",
        "日本語",
        "مرحبا",
        "😀",
        "👍🏽",
        "❤\u{fe0f}",
        "a b",
    ] {
        assert_eq!(escape(s), s, "{s}");
    }
    // Joined emoji lose their joiner to an escape: the parts stay visible.
    assert_eq!(escape("👩\u{200d}💻"), r"👩\u{200d}💻");
}

#[test]
fn variation_selector_runs_and_private_use_are_escaped() {
    // One selector after a visible character is kept; a run can smuggle data.
    assert_eq!(escape("a\u{fe0f}\u{fe01}"), "a\u{fe0f}\\u{fe01}");
    assert_eq!(escape("\u{fe0f}"), r"\u{fe0f}");
    assert_eq!(escape("x\u{e0100}"), r"x\u{e0100}");
    assert_eq!(escape("\u{e000}"), r"\u{e000}");
    assert_eq!(escape("\u{ffff}"), r"\u{ffff}");
}

#[test]
fn backslashes_and_quotes_cannot_fake_an_escape() {
    assert_eq!(escape(r"\u{202e}"), r"\\u{202e}");
    assert_eq!(quote("say \"hi\"\\"), r#""say \"hi\"\\""#);
}

#[test]
fn rendered_json_escapes_keys_and_values() {
    let v = json!({"k\u{202e}": ["\u{1b}[2J", 1, null, true], "é": {}});
    let r = render_json(&v);
    assert_eq!(
        r,
        "{\n  \"k\\u{202e}\": [\n    \"\\u{1b}[2J\",\n    1,\n    null,\n    true\n  ],\n  \"é\": {}\n}"
    );
}

#[test]
fn json_output_stays_json_and_terminal_safe() {
    let v = json!({"a": "x\u{202e}y\u{1b}z\u{2028}😀\u{e0041}"});
    let text = json_safe(&serde_json::to_string_pretty(&v).expect("json"));
    assert!(!text.contains('\u{202e}') && !text.contains('\u{1b}') && !text.contains('\u{2028}'));
    assert!(text.contains(r"\u202e") && text.contains(r"\udb40\udc41") && text.contains('😀'));
    let back: serde_json::Value = serde_json::from_str(&text).expect("still JSON");
    assert_eq!(back, v);
}

#[test]
fn truncation_counts_characters_after_escaping() {
    assert_eq!(truncate("héllo wörld", 5), "héll…");
    assert_eq!(truncate("ab", 5), "ab");
    assert_eq!(truncate("\u{202e}abc", 8), r"\u{202e…");
}

/// Characters that fonts draw as blank space or as nothing (issue #11, item 8):
/// U+2800 BRAILLE PATTERN BLANK made `show` print what looked like an empty value.
#[test]
fn blank_rendering_characters_are_escaped() {
    assert_eq!(escape("pay\u{2800}to"), r"pay\u{2800}to");
    assert_eq!(quote("\u{2800}"), r#""\u{2800}""#);
    for c in [
        '\u{2800}',  // BRAILLE PATTERN BLANK
        '\u{1d159}', // MUSICAL SYMBOL NULL NOTEHEAD
        '\u{3164}',  // HANGUL FILLER
        '\u{115f}',  // HANGUL CHOSEONG FILLER
        '\u{1160}',  // HANGUL JUNGSEONG FILLER
        '\u{ffa0}',  // HALFWIDTH HANGUL FILLER
        '\u{2000}',  // EN QUAD
        '\u{200a}',  // HAIR SPACE
        '\u{205f}',  // MEDIUM MATHEMATICAL SPACE
        '\u{3000}',  // IDEOGRAPHIC SPACE
        '\u{a0}',    // NO-BREAK SPACE
        '\u{180e}',  // MONGOLIAN VOWEL SEPARATOR
        '\u{2065}',  // default-ignorable, unassigned
        '\u{e0000}', // default-ignorable, unassigned
        '\u{1bca0}', // SHORTHAND FORMAT LETTER OVERLAP
        '\u{378}',   // unassigned
    ] {
        assert!(needs_escape(c), "U+{:04X} not escaped", c as u32);
        assert_eq!(escape(&c.to_string()), format!("\\u{{{:x}}}", c as u32));
    }
    // In JSON output they are JSON escapes.
    assert_eq!(json_safe("\"\u{2800}\""), r#""\u2800""#);
}
