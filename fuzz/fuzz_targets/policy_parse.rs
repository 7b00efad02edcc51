//! `Policy::parse_toml`. Invariants: no panic; an accepted policy's canonical JSON
//! reads back (`from_canonical_json`) to a policy with the same hash; checking a
//! few payloads against it never panics; loading it into a `PolicySet` with the
//! fixed keyring never panics.
#![no_main]

use approval_core::policy::PolicySet;
use approval_core::Policy;
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for file in ["<fuzz>", "note.write.toml"] {
        let Ok(p) = Policy::parse_toml(file, text) else {
            continue;
        };
        let back = Policy::from_canonical_json(p.canonical_json())
            .unwrap_or_else(|e| panic!("canonical policy refused on read-back: {e}"));
        assert_eq!(back.sha256(), p.sha256(), "canonical policy hash differs");
        assert_eq!(back.canonical_json(), p.canonical_json());
        for payload in [
            json!(null),
            json!({"text": "hello"}),
            json!({"to": "a@example.com", "subject": "s", "body": "b"}),
            json!([1, 2.5, "x", {"a": [true, false]}]),
        ] {
            let _ = p.check_payload(&payload);
        }
        let _ = PolicySet::load(
            &[(file.to_owned(), text.to_owned())],
            &approval_fuzz::keyring(),
        );
    }
});
