//! Keyring and secret-key-file parsing. Invariants: no panic; an accepted keyring
//! written back line by line parses to the same keyring; no key appears twice.
#![no_main]

use approval_core::keyring::{PublicKey, SecretKey};
use approval_core::Keyring;
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeSet;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(kr) = Keyring::parse(text) {
        let mut keys = BTreeSet::new();
        let mut out = String::new();
        for (name, key) in kr.iter() {
            assert!(keys.insert(key.identity()), "one key under two names");
            if let Some(k) = key.as_key() {
                assert_eq!(PublicKey::parse(&k.to_base64()).as_ref(), Ok(k));
            }
            out.push_str(&Keyring::entry_line(name, key));
            out.push('\n');
        }
        let back = Keyring::parse(&out).expect("a written-back keyring parses");
        assert_eq!(back, kr, "keyring does not round-trip");
    } else if let Err(e) = Keyring::parse(text) {
        assert!(e.line() >= 1 && e.line() <= text.lines().count().max(1));
    }
    if let Ok(sk) = SecretKey::parse(text) {
        let back = SecretKey::parse(&sk.to_file_text()).expect("written key file parses");
        assert_eq!(back.public_key(), sk.public_key());
    }
    let _ = PublicKey::parse(text.trim());
});
