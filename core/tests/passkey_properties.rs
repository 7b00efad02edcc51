//! Passkey parsing never panics, whatever the bytes: COSE keys, assertions and
//! registrations, arbitrary and mutated from valid ones (so the deep checks, past
//! the first parse, see hostile input too).

mod common;
mod passkey_maker;

use approval_core::passkey::{verify_assertion, verify_registration, Assertion, CoseKey};
use passkey_maker::{relying, Maker, AT, CHALLENGE, UP, UV};
use proptest::prelude::*;

fn mutate(mut bytes: Vec<u8>, edits: &[(usize, u8)], cut: Option<usize>) -> Vec<u8> {
    if !bytes.is_empty() {
        for &(i, x) in edits {
            let n = bytes.len();
            bytes[i % n] ^= x;
        }
    }
    if let Some(c) = cut {
        bytes.truncate(c % (bytes.len() + 1));
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(256)))]

    #[test]
    fn from_cose_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = CoseKey::from_cose(&bytes);
    }

    #[test]
    fn from_cose_never_panics_on_mutated_keys(
        es in any::<bool>(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let m = if es { Maker::es256() } else { Maker::eddsa() };
        let _ = CoseKey::from_cose(&mutate(m.cose.clone(), &edits, cut));
    }

    #[test]
    fn verify_assertion_never_panics(
        ad in proptest::collection::vec(any::<u8>(), 0..120),
        cdj in proptest::collection::vec(any::<u8>(), 0..120),
        sig in proptest::collection::vec(any::<u8>(), 0..80),
    ) {
        for m in Maker::both() {
            let a = Assertion {
                credential_id: vec![1],
                authenticator_data: ad.clone(),
                client_data_json: cdj.clone(),
                signature: sig.clone(),
            };
            let _ = verify_assertion(&m.key, &relying(), CHALLENGE, &a);
        }
    }

    #[test]
    fn verify_assertion_never_panics_on_mutated_assertions(
        es in any::<bool>(),
        field in 0..3usize,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let m = if es { Maker::es256() } else { Maker::eddsa() };
        let mut a = m.assertion("webauthn.get", UP | UV, &[]);
        match field {
            0 => a.authenticator_data = mutate(a.authenticator_data, &edits, cut),
            1 => a.client_data_json = mutate(a.client_data_json, &edits, cut),
            _ => a.signature = mutate(a.signature, &edits, cut),
        }
        let _ = m.verify(&a);
    }

    #[test]
    fn verify_registration_never_panics(
        ao in proptest::collection::vec(any::<u8>(), 0..300),
        cdj in proptest::collection::vec(any::<u8>(), 0..120),
    ) {
        let _ = verify_registration(&relying(), CHALLENGE, &ao, &cdj);
    }

    #[test]
    fn verify_registration_never_panics_on_mutated_registrations(
        es in any::<bool>(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let m = if es { Maker::es256() } else { Maker::eddsa() };
        let (ao, cdj) = m.registration(UP | UV | AT);
        let _ = verify_registration(&relying(), CHALLENGE, &mutate(ao, &edits, cut), &cdj);
    }
}
