//! What untrusted text can hide from a human, classified from Unicode's own data
//! (pure: no I/O). [`crate::escape`] shows what this module finds; `signer-cli` and the
//! server's notifications both go through it.
//!
//! Two questions, both answered with the tables of maintained crates (Unicode 18),
//! never with tables of our own:
//! - [`is_hidden`]: does a character render as nothing, as blank space, or as
//!   something other than itself? General categories Cc, Cf, Zl, Zp, Co, Cs and Cn
//!   (unassigned and noncharacters) and every space but the ASCII one (Zs), from
//!   `unicode-properties`; every `Default_Ignorable_Code_Point` (Hangul fillers,
//!   Khmer inherent vowels, variation selectors, ...), from the UTS #39 identifier
//!   types of `unicode-security`. Unicode has no property for the two graphic
//!   characters that are drawn blank: U+2800 BRAILLE PATTERN BLANK and U+1D159
//!   MUSICAL SYMBOL NULL NOTEHEAD are named in [`BLANK_GRAPHICS`].
//! - [`lookalikes`]: which words of a text mix scripts (UTS #39 mixed-script
//!   detection: `аdmin` with a Cyrillic `а` is neither Latin nor Cyrillic; Latin
//!   with Han, Japanese or Korean, "highly restrictive" in UTS #39, is not flagged), or are
//!   written wholly in another script with letters confusable with Latin ones
//!   (`рау`, all Cyrillic, has the UTS #39 skeleton `pay`).

use unicode_properties::{GeneralCategory, GeneralCategoryGroup, UnicodeGeneralCategory};
use unicode_script::{Script, UnicodeScript};
use unicode_security::general_security_profile::IdentifierType;
use unicode_security::{
    GeneralSecurityProfile, MixedScript, RestrictionLevel, RestrictionLevelDetection,
};

/// Graphic characters (So) that fonts draw as blank space although no Unicode
/// property says so.
pub const BLANK_GRAPHICS: &[char] = &['\u{2800}', '\u{1D159}'];

/// Whether `c` renders as nothing, as blank space, or as something other than
/// itself (controls, format and bidi characters, separators, non-ASCII spaces,
/// default-ignorable code points, private-use, surrogate and unassigned code points,
/// [`BLANK_GRAPHICS`]). Such a character must never reach the terminal raw.
pub fn is_hidden(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    use GeneralCategory::*;
    matches!(
        c.general_category(),
        Control
            | Format
            | SpaceSeparator
            | LineSeparator
            | ParagraphSeparator
            | PrivateUse
            | Surrogate
            | Unassigned
    ) || c.identifier_type() == Some(IdentifierType::Default_Ignorable)
        || BLANK_GRAPHICS.contains(&c)
}

/// Why a word may not be what it looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookalike {
    /// Letters of several scripts in one word, named in order of appearance
    /// (full Unicode names, e.g. `["Cyrillic", "Latin"]`).
    MixedScripts(Vec<&'static str>),
    /// Every letter in one script other than Latin, and the word reads as this
    /// Latin text (its UTS #39 confusable skeleton).
    LooksLatin(&'static str, String),
}

impl Lookalike {
    /// The end of a warning sentence: "mixes Cyrillic and Latin letters".
    pub fn describe(&self) -> String {
        match self {
            Lookalike::MixedScripts(s) => {
                let names = match s.split_last() {
                    Some((last, rest)) if !rest.is_empty() => {
                        format!("{} and {last}", rest.join(", "))
                    }
                    _ => s.join(""),
                };
                format!("mixes {names} letters")
            }
            Lookalike::LooksLatin(script, latin) => {
                format!("is written in {script} letters that look like Latin \"{latin}\"")
            }
        }
    }
}

/// One suspicious word of a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// The word as written (untrusted: escape before showing).
    pub text: String,
    /// What is wrong with it.
    pub why: Lookalike,
}

/// Letters, digits and combining marks make up words; everything else separates them.
fn in_word(c: char) -> bool {
    c.is_alphanumeric() || c.general_category_group() == GeneralCategoryGroup::Mark
}

/// The words of `s` that mix scripts or only look Latin, in order.
pub fn lookalikes(s: &str) -> Vec<Word> {
    s.split(|c: char| !in_word(c))
        .filter(|w| !w.is_empty() && !w.is_ascii())
        .filter_map(|w| {
            classify(w).map(|why| Word {
                text: w.to_owned(),
                why,
            })
        })
        .collect()
}

/// The scripts of a word's characters that belong to one script (not Common,
/// Inherited or Unknown), in order of first appearance.
fn scripts(word: &str) -> Vec<Script> {
    let mut out: Vec<Script> = vec![];
    for c in word.chars() {
        let s = c.script();
        if !matches!(s, Script::Common | Script::Inherited | Script::Unknown) && !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

fn classify(word: &str) -> Option<Lookalike> {
    let scripts = scripts(word);
    // Latin with Han and Japanese or Korean scripts is ordinary writing (UTS #39
    // "highly restrictive"); every other mix is flagged.
    if !word.is_single_script()
        && word.detect_restriction_level() != RestrictionLevel::HighlyRestrictive
    {
        return Some(Lookalike::MixedScripts(
            scripts.iter().map(|s| s.full_name()).collect(),
        ));
    }
    // A whole word in one non-Latin script whose letters are all confusable with
    // Latin ones, reading as a Latin word.
    let [script] = scripts.as_slice() else {
        return None;
    };
    if *script == Script::Latin || !word.chars().any(char::is_alphabetic) {
        return None;
    }
    let skeleton: String = unicode_security::skeleton(word).collect();
    let latin = skeleton.chars().all(|c| c.is_ascii_alphanumeric());
    (latin && skeleton != word).then(|| Lookalike::LooksLatin(script.full_name(), skeleton))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_rendering_characters_are_escaped() {
        for c in [
            '\u{2800}',  // BRAILLE PATTERN BLANK
            '\u{1D159}', // MUSICAL SYMBOL NULL NOTEHEAD
            '\u{3164}',  // HANGUL FILLER
            '\u{115F}',  // HANGUL CHOSEONG FILLER
            '\u{1160}',  // HANGUL JUNGSEONG FILLER
            '\u{FFA0}',  // HALFWIDTH HANGUL FILLER
            '\u{00A0}',  // NO-BREAK SPACE
            '\u{2000}',  // EN QUAD
            '\u{2007}',  // FIGURE SPACE
            '\u{200A}',  // HAIR SPACE
            '\u{202F}',  // NARROW NO-BREAK SPACE
            '\u{205F}',  // MEDIUM MATHEMATICAL SPACE
            '\u{3000}',  // IDEOGRAPHIC SPACE
            '\u{1680}',  // OGHAM SPACE MARK
            '\u{180E}',  // MONGOLIAN VOWEL SEPARATOR
            '\u{00AD}',  // SOFT HYPHEN
            '\u{034F}',  // COMBINING GRAPHEME JOINER
            '\u{17B4}',  // KHMER VOWEL INHERENT AQ
            '\u{17B5}',  // KHMER VOWEL INHERENT AA
            '\u{200B}',  // ZERO WIDTH SPACE
            '\u{2060}',  // WORD JOINER
            '\u{2065}',  // unassigned, default-ignorable
            '\u{FEFF}',  // BOM
            '\u{1BCA0}', // SHORTHAND FORMAT LETTER OVERLAP
            '\u{E0041}', // TAG LATIN CAPITAL LETTER A
            '\u{E0100}', // VARIATION SELECTOR-17
            '\u{202E}',  // RIGHT-TO-LEFT OVERRIDE
            '\u{2028}',  // LINE SEPARATOR
            '\u{1B}',    // ESC
            '\u{85}',    // NEXT LINE
            '\u{E000}',  // private use
            '\u{FFFF}',  // noncharacter
            '\u{0378}',  // unassigned
        ] {
            assert!(is_hidden(c), "U+{:04X} is not treated as hidden", c as u32);
        }
    }

    #[test]
    fn visible_text_is_not_hidden() {
        for s in [
            "plain ASCII text, with 42 numbers and symbols!",
            "café naïve Straße",
            "Привет мир",
            "日本語のテキスト",
            "한국어",
            "مرحبا",
            "😀 👍",
            "\u{2801}", // BRAILLE PATTERN DOTS-1: drawn
        ] {
            for c in s.chars() {
                assert!(!is_hidden(c), "U+{:04X} in {s:?}", c as u32);
            }
        }
    }

    #[test]
    fn mixed_script_words_are_flagged() {
        // U+0430 CYRILLIC SMALL LETTER A in a Latin word.
        let w = lookalikes("user \u{430}dmin logged in");
        assert_eq!(
            w,
            vec![Word {
                text: "\u{430}dmin".into(),
                why: Lookalike::MixedScripts(vec!["Cyrillic", "Latin"]),
            }]
        );
        assert_eq!(w[0].why.describe(), "mixes Cyrillic and Latin letters");
        // Greek omicron in "paypal.com": the word, not the whole text, is named.
        let w = lookalikes("https://p\u{3bf}ypal.com/login");
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].text, "p\u{3bf}ypal");
        assert_eq!(w[0].why, Lookalike::MixedScripts(vec!["Latin", "Greek"]));
        // Three scripts.
        let w = lookalikes("\u{430}b\u{3b3}");
        assert_eq!(
            w[0].why.describe(),
            "mixes Cyrillic, Latin and Greek letters"
        );
    }

    #[test]
    fn whole_script_lookalikes_of_latin_words_are_flagged() {
        // р, а, у: all Cyrillic, reads as "pay".
        let w = lookalikes("\u{440}\u{430}\u{443} now");
        assert_eq!(
            w,
            vec![Word {
                text: "\u{440}\u{430}\u{443}".into(),
                why: Lookalike::LooksLatin("Cyrillic", "pay".into()),
            }]
        );
        assert_eq!(
            w[0].why.describe(),
            "is written in Cyrillic letters that look like Latin \"pay\""
        );
    }

    #[test]
    fn single_script_words_are_not_flagged() {
        for s in [
            "admin",
            "Привет мир",
            "Straße café",
            "東京タワーへ行く",    // Han + Katakana + Hiragana: one writing system
            "한국어 漢字",         // Hangul and Han: Korean
            "user_42 admin-1 x.y", // separators split words
            "café\u{301}",         // a combining mark is Inherited
            "مرحبا بالعالم",
            "\u{440}\u{443}\u{431}\u{43b}\u{44c}", // рубль: no Latin reading
        ] {
            assert_eq!(lookalikes(s), vec![], "{s:?}");
        }
    }
}
