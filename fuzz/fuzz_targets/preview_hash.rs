//! Arbitrary bytes → `json::parse_exact` → (if accepted) a preview's payload.
//! Invariants: hashing is deterministic; the canonical bytes are a fixed point
//! (and the exact parser refuses nothing in them but the documented large-integer
//! spelling); the wire (serde_json) spelling re-parses exactly to a value with the
//! same canonical bytes and the same preview hash; a value the exact parser
//! accepted passes `check_value` and `Preview::from_value`.
#![no_main]

use approval_core::json;
use approval_core::{Preview, Sha256Hex};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // parse_collecting must never panic, whatever it returns.
    let collected = json::parse_collecting(text);
    let Ok(value) = json::parse_exact(text) else {
        return;
    };
    if let Ok(c) = &collected {
        assert!(
            c.problems.is_empty(),
            "parse_exact accepted text with problems"
        );
        assert_eq!(c.value, value);
    }
    json::check_value(&value).expect("an exactly parsed value passes check_value");
    let canon = json::canonical_bytes(&value);
    assert_eq!(
        canon,
        json::canonical_bytes(&value),
        "canonical bytes not deterministic"
    );
    let canon_text = std::str::from_utf8(&canon).expect("canonical bytes are UTF-8");
    // Canonical bytes are for hashing: JCS spells an integral double below 1e21
    // without an exponent (1e20 as 100000000000000000000), which the exact parser
    // refuses as an integer beyond 2^53 (documented in core/tests/own_vectors.rs,
    // canonical_form_may_spell_large_doubles_as_integers). That is the only
    // refusal allowed; a lax re-parse must reach the same canonical bytes.
    match json::parse_collecting(canon_text) {
        Ok(c) => {
            for p in &c.problems {
                assert_eq!(
                    p.problem,
                    json::Problem::IntegerTooLarge,
                    "canonical form {canon_text:?} refused on re-parse: {p}"
                );
            }
        }
        Err(e) => panic!("canonical form {canon_text:?} is not JSON to the exact parser: {e}"),
    }
    let lax: serde_json::Value =
        serde_json::from_str(canon_text).expect("canonical form is JSON to serde_json");
    assert_eq!(
        json::canonical_bytes(&lax),
        canon,
        "canonical form is not a fixed point"
    );
    // The wire spelling (serde_json text, as previews and receipts travel) reads
    // back exactly, to the same canonical bytes.
    let wire = serde_json::to_string(&value).expect("a value serialises");
    let again = json::parse_exact(&wire)
        .unwrap_or_else(|e| panic!("wire form {wire:?} refused on re-parse: {e}"));
    assert_eq!(
        json::canonical_bytes(&again),
        canon,
        "wire form hashes differently"
    );

    let p = approval_fuzz::preview(value);
    let h1 = p.sha256();
    assert_eq!(h1, p.sha256(), "preview hash not deterministic");
    let p2 = approval_fuzz::preview(again);
    assert_eq!(
        h1,
        p2.sha256(),
        "re-parsed canonical payload hashes differently"
    );
    let back = Preview::from_value(&p.to_value()).expect("a preview we built reads back");
    assert_eq!(back.sha256(), h1);
    let wire_preview = serde_json::to_string(&p.to_value()).expect("a preview serialises");
    let from_text =
        Preview::from_json_text(&wire_preview).expect("a preview's wire text reads back");
    assert_eq!(from_text.sha256(), h1);
    assert_eq!(Sha256Hex::digest(&p.canonical_bytes()), h1);
});
