//! Passkey checks one by one, on ceremonies signed here over exactly the bytes
//! under test (`passkey_maker`), so each refusal comes from the check it names and
//! not from a broken signature. Both algorithms, assertions and registrations.

mod passkey_maker;

use approval_core::passkey::{verify_registration, Algorithm, PasskeyError};
use ciborium::value::Value as Cbor;
use passkey_maker::{encode, int, relying, Maker, AT, BE, CHALLENGE, CREDENTIAL_ID, ED, UP, UV};

#[test]
fn extension_data_is_tolerated_only_as_one_cbor_map() {
    for m in Maker::both() {
        let map = encode(&Cbor::Map(vec![(Cbor::Text("credProtect".into()), int(2))]));
        assert!(m
            .verify(&m.assertion("webauthn.get", UP | UV | ED, &map))
            .is_ok());
        let refused = |tail: &[u8], flags: u8| {
            let got = m.verify(&m.assertion("webauthn.get", flags, tail));
            assert!(
                matches!(got, Err(PasskeyError::AuthenticatorData(_))),
                "{tail:?} {flags:#x}: {got:?}"
            );
        };
        refused(&map, UP | UV);
        refused(&[0x00], UP | UV);
        refused(&[], UP | UV | ED);
        refused(&encode(&Cbor::Array(vec![])), UP | UV | ED);
        refused(&[map.as_slice(), &[0]].concat(), UP | UV | ED);
        refused(&map[..map.len() - 1], UP | UV | ED);
        let got = m.verify(&m.assertion("webauthn.get", UP | UV | AT, &[]));
        assert_eq!(got, Err(PasskeyError::AttestedDataInAssertion));
    }
}

#[test]
fn client_data_must_be_one_exact_json_object() {
    for m in Maker::both() {
        let check = |cdj: &[u8]| m.verify(&m.assertion_with_client_data(cdj, UP | UV, &[]));
        assert!(
            check(&m.client_data("webauthn.get", "")).is_ok(),
            "crossOrigin may be absent"
        );
        assert!(check(&m.client_data(
            "webauthn.get",
            r#","extraData":"x","tokenBinding":{"status":"present"}"#
        ))
        .is_ok());
        assert_eq!(
            check(&m.client_data("webauthn.get", r#","topOrigin":"https://evil.example""#)),
            Err(PasskeyError::CrossOrigin)
        );
        assert!(matches!(
            check(&m.client_data("webauthn.get", r#","crossOrigin":"false""#)),
            Err(PasskeyError::ClientData(_))
        ));
        // A second origin: JSON parsers differ on which one wins, so neither does.
        assert!(matches!(
            check(&m.client_data("webauthn.get", r#","origin":"https://evil.example""#)),
            Err(PasskeyError::ClientData(_))
        ));
        assert!(matches!(check(b"[]"), Err(PasskeyError::ClientData(_))));
        assert!(matches!(
            check(b"{\"type\":\"webauthn.get\""),
            Err(PasskeyError::ClientData(_))
        ));
        assert!(matches!(
            check(b"{\"type\":\"webauthn.get\"}"),
            Err(PasskeyError::ClientData(_))
        ));
        assert!(matches!(check(b"\xff{}"), Err(PasskeyError::Encoding(_))));
        assert!(matches!(
            check(&vec![b' '; 4097]),
            Err(PasskeyError::TooLarge { max: 4096, .. })
        ));
    }
}

#[test]
fn signatures_must_be_the_keys_own_in_the_right_form() {
    let [es, ed] = Maker::both();
    let a = es.assertion("webauthn.get", UP | UV, &[]);
    assert_eq!(ed.verify(&a), Err(PasskeyError::BadSignature));
    let b = ed.assertion("webauthn.get", UP | UV, &[]);
    assert_eq!(es.verify(&b), Err(PasskeyError::BadSignature));
    // ES256 as raw r||s (64 bytes) instead of DER.
    let mut raw = a.clone();
    let sig = p256::ecdsa::Signature::from_der(&a.signature).expect("DER");
    raw.signature = sig.to_bytes().to_vec();
    assert_eq!(es.verify(&raw), Err(PasskeyError::BadSignature));
    // DER with trailing garbage.
    let mut trailing = a.clone();
    trailing.signature.push(0);
    assert_eq!(es.verify(&trailing), Err(PasskeyError::BadSignature));
    // Ed25519: short, long, and S + L (non-canonical, refused by verify_strict).
    for len in [0, 63, 65] {
        let mut s = b.clone();
        s.signature.resize(len, 0);
        assert_eq!(ed.verify(&s), Err(PasskeyError::BadSignature));
    }
    let mut s_plus_l = b.clone();
    let l: [u8; 32] =
        hex::decode("edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010")
            .expect("hex")
            .try_into()
            .expect("32");
    let mut carry = 0u16;
    for (i, li) in l.iter().enumerate() {
        let v = u16::from(s_plus_l.signature[32 + i]) + u16::from(*li) + carry;
        s_plus_l.signature[32 + i] = v as u8;
        carry = v >> 8;
    }
    assert_eq!(ed.verify(&s_plus_l), Err(PasskeyError::BadSignature));
    let mut short = a;
    short.authenticator_data.truncate(36);
    assert!(matches!(
        es.verify(&short),
        Err(PasskeyError::AuthenticatorData(_))
    ));
    let mut big = b;
    big.authenticator_data = vec![0; 4097];
    assert!(matches!(
        ed.verify(&big),
        Err(PasskeyError::TooLarge { .. })
    ));
}

#[test]
fn registrations_of_both_algorithms_verify() {
    for m in Maker::both() {
        let (ao, cdj) = m.registration(UP | UV | AT | BE);
        let r = verify_registration(&relying(), CHALLENGE, &ao, &cdj).expect("registration");
        assert_eq!(r.credential_id, CREDENTIAL_ID);
        assert_eq!(r.key, m.key);
        assert_eq!(r.key.cose_bytes(), m.cose.as_slice());
        assert_eq!(r.sign_count, 7);
        // The key it yields verifies the same authenticator's assertions.
        let a = m.assertion("webauthn.get", UP | UV, &[]);
        assert!(
            approval_core::passkey::verify_assertion(&r.key, &relying(), CHALLENGE, &a).is_ok()
        );
    }
    assert_eq!(Maker::es256().key.algorithm(), Algorithm::Es256);
    assert_eq!(Maker::eddsa().key.algorithm(), Algorithm::EdDsa);
}

#[test]
fn registration_refusals_name_their_check() {
    let m = Maker::es256();
    let reg = |ao: &[u8], cdj: &[u8]| verify_registration(&relying(), CHALLENGE, ao, cdj);
    let cdj = m.client_data("webauthn.create", "");
    let attested = Maker::attested(CREDENTIAL_ID, &m.cose);
    let none = |flags: u8, tail: &[u8]| {
        Maker::attestation_object("none", Cbor::Map(vec![]), &Maker::auth_data(flags, tail))
    };
    let ok = none(UP | UV | AT, &attested);
    assert!(reg(&ok, &cdj).is_ok());

    assert!(matches!(
        reg(&ok, &m.client_data("webauthn.get", "")),
        Err(PasskeyError::ClientDataType { .. })
    ));
    assert_eq!(
        reg(&none(UV | AT, &attested), &cdj),
        Err(PasskeyError::UserNotPresent)
    );
    assert_eq!(
        reg(&none(UP | AT, &attested), &cdj),
        Err(PasskeyError::UserNotVerified)
    );
    assert_eq!(
        reg(&none(UP | UV, &[]), &cdj),
        Err(PasskeyError::NoAttestedData)
    );
    // Packed: read, not verified (the statement here is junk on purpose).
    let packed_stmt = Cbor::Map(vec![
        (Cbor::Text("alg".into()), int(-7)),
        (Cbor::Text("sig".into()), Cbor::Bytes(vec![0; 8])),
    ]);
    let auth = Maker::auth_data(UP | UV | AT, &attested);
    assert!(reg(
        &Maker::attestation_object("packed", packed_stmt.clone(), &auth),
        &cdj
    )
    .is_ok());
    assert_eq!(
        reg(
            &Maker::attestation_object("tpm", packed_stmt.clone(), &auth),
            &cdj
        ),
        Err(PasskeyError::AttestationFormat("tpm".into()))
    );
    assert!(matches!(
        reg(&Maker::attestation_object("none", packed_stmt, &auth), &cdj),
        Err(PasskeyError::Attestation(_))
    ));
    let mut trailing = ok.clone();
    trailing.push(0);
    assert!(matches!(
        reg(&trailing, &cdj),
        Err(PasskeyError::Attestation(_))
    ));
    let extra = encode(&Cbor::Map(vec![
        (Cbor::Text("fmt".into()), Cbor::Text("none".into())),
        (Cbor::Text("attStmt".into()), Cbor::Map(vec![])),
        (Cbor::Text("authData".into()), Cbor::Bytes(auth.clone())),
        (Cbor::Text("epAtt".into()), Cbor::Bool(true)),
    ]));
    assert!(matches!(
        reg(&extra, &cdj),
        Err(PasskeyError::Attestation(_))
    ));
    let twice = encode(&Cbor::Map(vec![
        (Cbor::Text("fmt".into()), Cbor::Text("none".into())),
        (Cbor::Text("fmt".into()), Cbor::Text("none".into())),
        (Cbor::Text("attStmt".into()), Cbor::Map(vec![])),
        (Cbor::Text("authData".into()), Cbor::Bytes(auth)),
    ]));
    assert!(matches!(
        reg(&twice, &cdj),
        Err(PasskeyError::Attestation(_))
    ));

    // Attested credential data: lengths, cut short, what follows the key.
    let long_id = vec![1; 1024];
    let got = reg(
        &none(UP | UV | AT, &Maker::attested(&long_id, &m.cose)),
        &cdj,
    );
    assert!(
        matches!(got, Err(PasskeyError::AuthenticatorData(_))),
        "{got:?}"
    );
    let max_id = vec![1; 1023];
    let r = reg(
        &none(UP | UV | AT, &Maker::attested(&max_id, &m.cose)),
        &cdj,
    )
    .expect("1023");
    assert_eq!(r.credential_id, max_id);
    assert!(matches!(
        reg(&none(UP | UV | AT, &Maker::attested(&[], &m.cose)), &cdj),
        Err(PasskeyError::AuthenticatorData(_))
    ));
    for cut in [1, 17, 20, attested.len() - m.cose.len()] {
        assert!(
            reg(&none(UP | UV | AT, &attested[..cut]), &cdj).is_err(),
            "cut at {cut}"
        );
    }
    let map = encode(&Cbor::Map(vec![(Cbor::Text("credProtect".into()), int(1))]));
    let with_ext = [attested.as_slice(), &map].concat();
    assert!(matches!(
        reg(&none(UP | UV | AT, &with_ext), &cdj),
        Err(PasskeyError::AuthenticatorData(_))
    ));
    assert!(reg(&none(UP | UV | AT | ED, &with_ext), &cdj).is_ok());
    assert!(matches!(
        reg(&none(UP | UV | AT | ED, &attested), &cdj),
        Err(PasskeyError::AuthenticatorData(_))
    ));
    // An RS256 key, and a key whose point is off the curve.
    let rsa = encode(&Cbor::Map(vec![
        (int(1), int(3)),
        (int(3), int(-257)),
        (int(-1), Cbor::Bytes(vec![0xc5; 256])),
        (int(-2), Cbor::Bytes(vec![1, 0, 1])),
    ]));
    assert_eq!(
        reg(
            &none(UP | UV | AT, &Maker::attested(CREDENTIAL_ID, &rsa)),
            &cdj
        ),
        Err(PasskeyError::UnsupportedAlgorithm(-257))
    );
    let mut off_curve = m.cose.clone();
    let last = off_curve.len() - 1;
    off_curve[last] ^= 1;
    assert!(matches!(
        reg(
            &none(UP | UV | AT, &Maker::attested(CREDENTIAL_ID, &off_curve)),
            &cdj
        ),
        Err(PasskeyError::Cose(_))
    ));
    assert!(matches!(
        verify_registration(&relying(), CHALLENGE, &vec![0; 16385], &cdj),
        Err(PasskeyError::TooLarge { .. })
    ));
    // Backup state without eligibility.
    let bs = none(UP | UV | AT | 0x10, &attested);
    assert_eq!(reg(&bs, &cdj), Err(PasskeyError::BackupState));
    assert!(reg(&none(UP | UV | AT | BE | 0x10, &attested), &cdj).is_ok());
}
