//! COSE key parsing: each refusal [`CoseKey::from_cose`] promises, on keys built
//! here label by label, and the keyring words.

use super::*;
use ciborium::value::{Integer, Value};

fn int(i: i64) -> Value {
    Value::Integer(Integer::from(i))
}

fn encode(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(v, &mut out).expect("encodes");
    out
}

/// A P-256 public key's coordinates, from a fixed secret.
fn p256_xy() -> ([u8; 32], [u8; 32]) {
    let sk = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).expect("valid scalar");
    let point = sk.verifying_key().to_encoded_point(false);
    let x: [u8; 32] = point.x().expect("x").as_slice().try_into().expect("32");
    let y: [u8; 32] = point.y().expect("y").as_slice().try_into().expect("32");
    (x, y)
}

fn ed25519_x() -> [u8; 32] {
    ed25519_dalek::SigningKey::from_bytes(&[9u8; 32])
        .verifying_key()
        .to_bytes()
}

fn ec2(kty: i64, alg: i64, crv: i64, x: &[u8], y: &[u8]) -> Vec<u8> {
    encode(&Value::Map(vec![
        (int(1), int(kty)),
        (int(3), int(alg)),
        (int(-1), int(crv)),
        (int(-2), Value::Bytes(x.to_vec())),
        (int(-3), Value::Bytes(y.to_vec())),
    ]))
}

fn okp(kty: i64, alg: i64, crv: i64, x: &[u8]) -> Vec<u8> {
    encode(&Value::Map(vec![
        (int(1), int(kty)),
        (int(3), int(alg)),
        (int(-1), int(crv)),
        (int(-2), Value::Bytes(x.to_vec())),
    ]))
}

fn refused_with(bytes: &[u8], needle: &str) {
    match CoseKey::from_cose(bytes) {
        Err(PasskeyError::Cose(msg)) => assert!(msg.contains(needle), "{msg:?} lacks {needle:?}"),
        other => panic!("expected a Cose refusal naming {needle:?}, got {other:?}"),
    }
}

#[test]
fn valid_keys_parse_and_round_trip() {
    let (x, y) = p256_xy();
    let es = CoseKey::from_cose(&ec2(2, -7, 1, &x, &y)).expect("ES256 key");
    assert_eq!(es.algorithm(), Algorithm::Es256);
    let ed = CoseKey::from_cose(&okp(1, -8, 6, &ed25519_x())).expect("Ed25519 key");
    assert_eq!(ed.algorithm(), Algorithm::EdDsa);
    for key in [es, ed] {
        assert_eq!(CoseKey::parse(&key.to_base64()), Ok(key.clone()));
        assert_eq!(CoseKey::from_cose(key.cose_bytes()), Ok(key));
    }
}

#[test]
fn wrong_kty_crv_or_alg_is_refused() {
    let (x, y) = p256_xy();
    refused_with(&ec2(1, -7, 1, &x, &y), "kty 2");
    refused_with(&ec2(3, -7, 1, &x, &y), "kty 2");
    refused_with(&ec2(2, -7, 2, &x, &y), "crv 1");
    refused_with(&okp(2, -8, 6, &ed25519_x()), "kty 1");
    refused_with(&okp(1, -8, 7, &ed25519_x()), "crv 6");
    // Other algorithms are refused by number, whatever their parameters.
    for alg in [-35, -36, -257, -53, 0, 1] {
        assert_eq!(
            CoseKey::from_cose(&ec2(2, alg, 1, &x, &y)),
            Err(PasskeyError::UnsupportedAlgorithm(alg))
        );
    }
    let no_alg = encode(&Value::Map(vec![
        (int(1), int(2)),
        (int(-1), int(1)),
        (int(-2), Value::Bytes(x.to_vec())),
        (int(-3), Value::Bytes(y.to_vec())),
    ]));
    refused_with(&no_alg, "no alg");
}

#[test]
fn coordinates_of_the_wrong_length_or_missing_are_refused() {
    let (x, y) = p256_xy();
    refused_with(&ec2(2, -7, 1, &x[..31], &y), "x (label -2) is 31 bytes");
    refused_with(
        &ec2(2, -7, 1, &x, &[y.as_slice(), &[0]].concat()),
        "33 bytes",
    );
    refused_with(&ec2(2, -7, 1, &[], &y), "0 bytes");
    refused_with(&okp(1, -8, 6, &ed25519_x()[..31]), "31 bytes");
    let no_y = okp(2, -7, 1, &x);
    refused_with(&no_y, "y (label -3) missing");
    let ed_with_y = encode(&Value::Map(vec![
        (int(1), int(1)),
        (int(3), int(-8)),
        (int(-1), int(6)),
        (int(-2), Value::Bytes(ed25519_x().to_vec())),
        (int(-3), Value::Bytes(vec![0; 32])),
    ]));
    refused_with(&ed_with_y, "no y");
    let x_as_text = encode(&Value::Map(vec![
        (int(1), int(1)),
        (int(3), int(-8)),
        (int(-1), int(6)),
        (int(-2), Value::Text("x".into())),
    ]));
    refused_with(&x_as_text, "not a byte string");
}

#[test]
fn a_point_off_the_curve_is_refused() {
    let (x, mut y) = p256_xy();
    y[31] ^= 1;
    refused_with(&ec2(2, -7, 1, &x, &y), "not a point on P-256");
    // Coordinates at or above the field prime are not field elements.
    refused_with(&ec2(2, -7, 1, &[0xff; 32], &y), "not a point on P-256");
    refused_with(&ec2(2, -7, 1, &[0; 32], &[0; 32]), "not a point on P-256");
}

#[test]
fn weak_or_non_canonical_ed25519_keys_are_refused() {
    // The identity point (small order): every signature "verifies" under it.
    let mut identity = [0u8; 32];
    identity[0] = 1;
    refused_with(&okp(1, -8, 6, &identity), "weak");
    // A point of order 8 (from the Ed25519 small-order list).
    let order8 = hex::decode("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")
        .expect("hex");
    refused_with(&okp(1, -8, 6, &order8), "weak");
    // y = p (non-canonical encoding of y = 0).
    let non_canonical =
        hex::decode("edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f")
            .expect("hex");
    refused_with(&okp(1, -8, 6, &non_canonical), "Ed25519 key");
}

#[test]
fn trailing_bytes_and_non_shortest_cbor_are_refused() {
    let (x, y) = p256_xy();
    let mut key = ec2(2, -7, 1, &x, &y);
    key.push(0);
    refused_with(&key, "bytes follow");
    // kty written as 0x18 0x02 (a one-byte argument for a value that fits the head).
    let good = ec2(2, -7, 1, &x, &y);
    assert_eq!(&good[..3], &[0xa5, 0x01, 0x02]);
    let long = [&[0xa5, 0x01, 0x18, 0x02][..], &good[3..]].concat();
    refused_with(&long, "shortest");
    // The same map with an indefinite length.
    let indefinite = [&[0xbf][..], &good[1..], &[0xff]].concat();
    refused_with(&indefinite, "shortest");
    assert!(CoseKey::from_cose(&[]).is_err());
    assert!(CoseKey::from_cose(&good[..good.len() - 1]).is_err());
}

#[test]
fn repeated_unknown_and_private_labels_are_refused() {
    let (x, y) = p256_xy();
    let twice = encode(&Value::Map(vec![
        (int(1), int(2)),
        (int(3), int(-7)),
        (int(-1), int(1)),
        (int(-2), Value::Bytes(x.to_vec())),
        (int(-3), Value::Bytes(y.to_vec())),
        (int(3), int(-7)),
    ]));
    refused_with(&twice, "appears twice");
    let with_kid = encode(&Value::Map(vec![
        (int(1), int(2)),
        (int(2), Value::Bytes(vec![1])),
        (int(3), int(-7)),
        (int(-1), int(1)),
        (int(-2), Value::Bytes(x.to_vec())),
        (int(-3), Value::Bytes(y.to_vec())),
    ]));
    refused_with(&with_kid, "unexpected label 2");
    let with_d = encode(&Value::Map(vec![
        (int(1), int(2)),
        (int(3), int(-7)),
        (int(-1), int(1)),
        (int(-2), Value::Bytes(x.to_vec())),
        (int(-3), Value::Bytes(y.to_vec())),
        (int(-4), Value::Bytes(vec![7; 32])),
    ]));
    refused_with(&with_d, "private key");
    refused_with(&encode(&Value::Array(vec![])), "CBOR map");
    let text_label = encode(&Value::Map(vec![(Value::Text("kty".into()), int(2))]));
    refused_with(&text_label, "label must be an integer");
}

#[test]
fn non_canonical_base64_is_refused() {
    let (x, y) = p256_xy();
    let key = CoseKey::from_cose(&ec2(2, -7, 1, &x, &y)).expect("key");
    let b64 = key.to_base64();
    assert!(b64.ends_with('='), "77 bytes need padding: {b64}");
    let unpadded = b64.trim_end_matches('=');
    assert!(matches!(
        CoseKey::parse(unpadded),
        Err(PasskeyError::Encoding(_))
    ));
    let url = b64url(key.cose_bytes());
    assert!(CoseKey::parse(&url).is_err());
    // A stray bit in the last character before the padding (its two low bits carry
    // no data): lenient decoders give the same bytes, so it must be refused here.
    const ALPHABET: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut chars: Vec<char> = b64.chars().collect();
    let last = chars.len() - 2;
    let index = ALPHABET.find(chars[last]).expect("alphabet");
    chars[last] = ALPHABET.as_bytes()[index ^ 1] as char;
    let stray: String = chars.into_iter().collect();
    assert!(matches!(
        CoseKey::parse(&stray),
        Err(PasskeyError::Encoding(_))
    ));
    assert!(CoseKey::parse(&format!(" {b64}")).is_err());
    assert!(matches!(
        CoseKey::parse(&"A".repeat(2000)),
        Err(PasskeyError::TooLarge { .. })
    ));
}

#[test]
fn keyring_words_round_trip() {
    for alg in [Algorithm::Es256, Algorithm::EdDsa] {
        assert_eq!(Algorithm::from_keyring_word(alg.keyring_word()), Some(alg));
    }
    assert_eq!(Algorithm::Es256.keyring_word(), "webauthn-es256");
    assert_eq!(Algorithm::EdDsa.keyring_word(), "webauthn-eddsa");
    assert_eq!(Algorithm::from_keyring_word("WEBAUTHN-ES256"), None);
    assert_eq!(Algorithm::from_keyring_word("ed25519"), None);
}

#[test]
fn b64url_is_strict() {
    assert_eq!(from_b64url("AQ"), Ok(vec![1]));
    assert!(from_b64url("AQ==").is_err());
    assert!(from_b64url("AR").is_err(), "stray bits");
    assert!(from_b64url("+/").is_err(), "standard alphabet");
    assert_eq!(b64url(&[0xfb, 0xff]), "-_8");
}
