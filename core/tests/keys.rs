//! Public keys, keyrings, secret key files and signed reads: every refusal, with
//! its exact error.

mod common;

use approval_core::keyring::{KeyError, SecretKey, SecretKeyError};
use approval_core::message::{sign_read, verify_read, ReadAuthError, Signature};
use approval_core::{Keyring, KeyringError, PublicKey};
use common::*;

fn key_line(name: &str, key: &[u8]) -> String {
    format!("{name} ed25519 {}\n", b64(key))
}

#[test]
fn regression_mixed_order_key_let_one_secret_sign_as_a_second_keyring_line() {
    // Before the fix, PublicKey accepted A + T (T of small order): a key no honest
    // generator makes, under which the holder of A's secret can produce signatures
    // that even `verify_strict` accepts. So one secret could stand behind two
    // byte-distinct keyring lines, and count as two approvers.
    let msg =
        b"approval-v1\napprove\n0000000000000000000000000000000000000000000000000000000000000000\n";
    let (alias, sig) = sign_for_mixed_order_key("alice", msg);
    let raw = ed25519_dalek::VerifyingKey::from_bytes(&alias).unwrap();
    assert!(
        !raw.is_weak(),
        "not small order: verify_strict's own check misses it"
    );
    assert!(
        raw.verify_strict(msg, &ed25519_dalek::Signature::from_bytes(&sig))
            .is_ok(),
        "the attack works against the bare library"
    );
    assert_ne!(alias, public_key("alice").to_bytes());
    // Ours refuses the key, alone and in a keyring.
    assert_eq!(PublicKey::from_bytes(&alias), Err(KeyError::Weak));
    assert_eq!(PublicKey::parse(&b64(&alias)), Err(KeyError::Weak));
    let text = keyring_text(&["alice"]) + &key_line("mallory", &alias);
    assert_eq!(
        Keyring::parse(&text),
        Err(KeyringError::Key {
            line: 2,
            source: KeyError::Weak
        })
    );
    // Every small-order component is caught, not only order 2.
    for t in [ORDER_2_POINT, ORDER_8_POINT, [0u8; 32]] {
        for name in NAMES {
            assert_eq!(
                PublicKey::from_bytes(&mixed_order_key(name, &t)),
                Err(KeyError::Weak),
                "{name}"
            );
        }
    }
}

#[test]
fn small_order_keys_are_weak() {
    // Identity (order 1), (0, -1) (order 2), y = 0 (order 4), an order-8 point.
    for k in [IDENTITY_POINT, ORDER_2_POINT, [0u8; 32], ORDER_8_POINT] {
        assert_eq!(PublicKey::from_bytes(&k), Err(KeyError::Weak), "{k:?}");
    }
    // And they matter: with the identity as key, R = identity and S = 0 pass the
    // plain (non-strict) check for every message.
    let mut sig = [0u8; 64];
    sig[..32].copy_from_slice(&IDENTITY_POINT);
    let raw = ed25519_dalek::VerifyingKey::from_bytes(&IDENTITY_POINT).unwrap();
    let sig = ed25519_dalek::Signature::from_bytes(&sig);
    assert!(ed25519_dalek::Verifier::verify(&raw, b"anything at all", &sig).is_ok());
    assert!(raw.verify_strict(b"anything at all", &sig).is_err());
}

/// The encoding of p + v, for a small v (a non-canonical encoding of y = v).
fn y_plus_p(v: u8) -> [u8; 32] {
    let mut b = [0xffu8; 32];
    b[0] = 0xed + v;
    b[31] = 0x7f;
    b
}

#[test]
fn non_canonical_and_off_curve_keys_are_refused() {
    // y = p + v for v in 0..=18 are second spellings of y = v. Each one that
    // decodes at all is refused, weak or not.
    let mut refused_as_non_canonical = 0;
    for v in 0..=18u8 {
        match PublicKey::from_bytes(&y_plus_p(v)) {
            Err(KeyError::NotCanonical) => refused_as_non_canonical += 1,
            Err(KeyError::Weak) => {}
            other => panic!("y = p + {v}: {other:?}"),
        }
    }
    assert!(refused_as_non_canonical > 0);
    // The sign bit set on x = 0 is a second spelling of (0, 1).
    let mut neg_zero = IDENTITY_POINT;
    neg_zero[31] |= 0x80;
    assert!(PublicKey::from_bytes(&neg_zero).is_err());
    // A y with no x on the curve.
    let off = (2u8..)
        .map(|y| {
            let mut b = [0u8; 32];
            b[0] = y;
            b
        })
        .find(|b| ed25519_dalek::VerifyingKey::from_bytes(b).is_err())
        .unwrap();
    assert_eq!(PublicKey::from_bytes(&off), Err(KeyError::NotCanonical));
}

#[test]
fn key_encodings_have_one_spelling() {
    let pk = public_key("alice");
    let s = pk.to_base64();
    assert_eq!(PublicKey::parse(&s), Ok(pk));
    assert_eq!(
        PublicKey::parse(s.trim_end_matches('=')),
        Err(KeyError::Encoding)
    );
    assert_eq!(PublicKey::parse(&format!(" {s}")), Err(KeyError::Encoding));
    assert_eq!(PublicKey::parse(""), Err(KeyError::Encoding));
    assert_eq!(PublicKey::parse(&b64(&[7u8; 31])), Err(KeyError::Encoding));
    assert_eq!(PublicKey::parse(&b64(&[7u8; 33])), Err(KeyError::Encoding));
    let url_safe = s.replace('+', "-").replace('/', "_");
    if url_safe != s {
        assert_eq!(PublicKey::parse(&url_safe), Err(KeyError::Encoding));
    }
    // The last base64 character carries 4 unused bits for 32 bytes; setting one
    // gives another spelling of the same bytes, which must be refused.
    let mut alt = s.clone().into_bytes();
    let i = alt.len() - 2;
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let pos = alphabet.iter().position(|&c| c == alt[i]).unwrap();
    alt[i] = alphabet[pos ^ 1];
    assert_eq!(
        PublicKey::parse(&String::from_utf8(alt).unwrap()),
        Err(KeyError::Encoding)
    );
    // Serde goes through the same checks.
    assert!(serde_json::from_str::<PublicKey>(&format!("{:?}", s.trim_end_matches('='))).is_err());
    assert_eq!(
        serde_json::from_str::<PublicKey>(&format!("{s:?}")).unwrap(),
        pk
    );
}

#[test]
fn keyring_refusals_name_the_line() {
    let good = keyring_text(&["alice", "bob"]);
    let cases: Vec<(String, KeyringError)> = vec![
        (
            format!("{good}carol ed25519\n"),
            KeyringError::Malformed {
                line: 3,
                why: "wrong number of fields".into(),
            },
        ),
        (
            format!("{good}carol ed25519 {} laptop\n", public_key("carol")),
            KeyringError::Malformed {
                line: 3,
                why: "wrong number of fields".into(),
            },
        ),
        (
            format!(
                "# team\n\n{good}carol rsa {}\n",
                public_key("carol")
            ),
            KeyringError::Malformed {
                line: 5,
                why: "the key type must be ed25519, ssh-ed25519, sk-ssh-ed25519@openssh.com, webauthn-es256 or webauthn-eddsa".into(),
            },
        ),
        (
            // A raw Ed25519 key is not an OpenSSH blob (issue #35).
            format!(
                "# team\n\n{good}carol ssh-ed25519 {}\n",
                public_key("carol")
            ),
            KeyringError::Malformed {
                line: 5,
                why: "the ssh-ed25519 key is not an OpenSSH key blob: copy the base64 after the type from the .pub file or `ssh-add -L` (it starts with AAAAC3NzaC1lZDI1NTE5)".into(),
            },
        ),
        (
            format!("carol ED25519 {}\n", public_key("carol")),
            KeyringError::Malformed {
                line: 1,
                why: "the key type must be ed25519, ssh-ed25519, sk-ssh-ed25519@openssh.com, webauthn-es256 or webauthn-eddsa".into(),
            },
        ),
        (
            key_line("carol", &[9u8; 31]),
            KeyringError::Key {
                line: 1,
                source: KeyError::Encoding,
            },
        ),
        (
            format!("{good}{}", key_line("mallory", &IDENTITY_POINT)),
            KeyringError::Key {
                line: 3,
                source: KeyError::Weak,
            },
        ),
        (
            format!("{good}alice ed25519 {}\n", public_key("carol")),
            KeyringError::DuplicateName {
                line: 3,
                first: 1,
                name: "alice".into(),
            },
        ),
        (
            format!(
                "{good}# a second name for bob's key\nbobby ed25519 {}\n",
                public_key("bob")
            ),
            KeyringError::DuplicateKey {
                line: 4,
                first: 2,
                other: "bob".into(),
            },
        ),
        (
            good.replace('\n', "\r\n") + "x\r\n",
            KeyringError::Malformed {
                line: 3,
                why: "wrong number of fields".into(),
            },
        ),
    ];
    for (text, want) in cases {
        assert_eq!(Keyring::parse(&text), Err(want.clone()), "{text}");
        assert_eq!(Keyring::parse(&text).unwrap_err().line(), line_of(&want));
    }
    // A bad name is Malformed on its line, whatever the name's problem.
    for bad in ["ålice", "-alice", "a/b", &"a".repeat(65)] {
        let text = format!("{good}{bad} ed25519 {}\n", public_key("carol"));
        assert!(
            matches!(
                Keyring::parse(&text),
                Err(KeyringError::Malformed { line: 3, .. })
            ),
            "{bad}"
        );
    }
}

fn line_of(e: &KeyringError) -> usize {
    match e {
        KeyringError::Malformed { line, .. }
        | KeyringError::Key { line, .. }
        | KeyringError::DuplicateName { line, .. }
        | KeyringError::DuplicateKey { line, .. } => *line,
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn keyring_accepts_comments_blank_lines_and_crlf() {
    let text = format!(
        "# approvers\r\n\r\n   \r\n{}  # trailing comment lines are whole lines\r\n",
        keyring_text(&["alice", "bob"]).replace('\n', "\r\n")
    )
    .replace("  # trailing comment lines are whole lines", "");
    let kr = Keyring::parse(&text).unwrap();
    assert_eq!(kr.len(), 2);
    assert_eq!(kr.key(&approver("bob")), Some(&public_key("bob")));
    assert!(!kr.contains(&approver("carol")));
    assert!(Keyring::parse("").unwrap().is_empty());
    let names: Vec<_> = full_keyring().iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(names, ["alice", "bob", "carol", "dave", "erin"]);
}

#[test]
fn secret_key_file_refusals() {
    let sk = secret_key("alice");
    let text = sk.to_file_text();
    assert_eq!(
        text,
        format!(
            "approval-signer-key v1\nname: alice\nseed: {}\n",
            b64(&seed("alice"))
        )
    );
    let back = SecretKey::parse(&text).unwrap();
    assert_eq!(back.public_key(), public_key("alice"));
    assert_eq!(back.name, approver("alice"));
    assert_eq!(
        back.keyring_line(),
        format!("alice ed25519 {}", public_key("alice"))
    );
    let cases = [
        ("", "first line is not `approval-signer-key v1`"),
        (
            "approval-signer-key v2\nname: alice\nseed: x\n",
            "first line is not `approval-signer-key v1`",
        ),
        ("approval-signer-key v1\n", "missing `name:` line"),
        (
            "approval-signer-key v1\nname: al ice\nseed: x\n",
            "invalid name",
        ),
        (
            "approval-signer-key v1\nname: alice\n",
            "missing `seed:` line",
        ),
        (
            "approval-signer-key v1\nname: alice\nseed: AAAA\n",
            "seed is not base64 of 32 bytes",
        ),
    ];
    for (t, why) in cases {
        assert_eq!(
            SecretKey::parse(t).err(),
            Some(SecretKeyError(why)),
            "{t:?}"
        );
    }
    assert_eq!(
        SecretKey::parse(&(text.clone() + "extra: 1\n")).err(),
        Some(SecretKeyError("unexpected extra lines"))
    );
    // Comments and blank lines are allowed around the three lines.
    assert!(SecretKey::parse(&format!("# mine\n\n{text}\n")).is_ok());
}

fn srv() -> approval_core::ServerId {
    approval_core::ServerId::parse("srv-1").unwrap()
}

#[test]
fn signed_read_refusals() {
    let kr = keyring(&["alice", "bob"]);
    let now = t(0);
    let path = "/v1/proposals?status=pending";
    let good = sign_read(
        &signing_key("alice"),
        &approver("alice"),
        &srv(),
        now.unix(),
        "GET",
        path,
    );
    assert_eq!(
        verify_read(&kr, &srv(), &good, "GET", path, now),
        Ok(approver("alice"))
    );
    // Within the window on both sides, refused just outside it.
    for skew in [-300, 300] {
        let h = sign_read(
            &signing_key("alice"),
            &approver("alice"),
            &srv(),
            now.unix() + skew,
            "GET",
            path,
        );
        assert!(
            verify_read(&kr, &srv(), &h, "GET", path, now).is_ok(),
            "{skew}"
        );
    }
    for skew in [-301, 301] {
        let h = sign_read(
            &signing_key("alice"),
            &approver("alice"),
            &srv(),
            now.unix() + skew,
            "GET",
            path,
        );
        assert_eq!(
            verify_read(&kr, &srv(), &h, "GET", path, now),
            Err(ReadAuthError::Stale(skew))
        );
    }
    // Signed by bob's key under alice's name.
    let h = sign_read(
        &signing_key("bob"),
        &approver("alice"),
        &srv(),
        now.unix(),
        "GET",
        path,
    );
    assert_eq!(
        verify_read(&kr, &srv(), &h, "GET", path, now),
        Err(ReadAuthError::BadSignature)
    );
    // Another query string, method or path.
    for (m, p) in [
        ("GET", "/v1/proposals?status=all"),
        ("get", path),
        ("DELETE", path),
    ] {
        assert_eq!(
            verify_read(&kr, &srv(), &good, m, p, now),
            Err(ReadAuthError::BadSignature),
            "{m} {p}"
        );
    }
    let h = sign_read(
        &signing_key("carol"),
        &approver("carol"),
        &srv(),
        now.unix(),
        "GET",
        path,
    );
    assert_eq!(
        verify_read(&kr, &srv(), &h, "GET", path, now),
        Err(ReadAuthError::UnknownApprover("carol".into()))
    );
    // A decision signature is not a read signature (different prefix).
    let sig = sign(
        "alice",
        approval_core::Decision::Approve,
        &standard_preview().sha256(),
        "",
    );
    let h = format!(
        "Approval alice {} {}",
        now.unix(),
        sig.signature().unwrap().to_base64()
    );
    assert_eq!(
        verify_read(&kr, &srv(), &h, "GET", path, now),
        Err(ReadAuthError::BadSignature)
    );
    let sig_b64 = good.rsplit(' ').next().unwrap().to_owned();
    let ts = now.unix();
    for bad in [
        String::new(),
        format!("approval alice {ts} {sig_b64}"),
        format!("Approval  alice {ts} {sig_b64}"),
        format!("Approval alice {ts} {sig_b64} extra"),
        format!("Approval alice +{ts} {sig_b64}"),
        format!("Approval alice {ts}0000000 {sig_b64}"),
        format!("Approval alice {ts} {}", sig_b64.trim_end_matches('=')),
        format!("Approval al/ice {ts} {sig_b64}"),
        format!(
            "Approval alice {ts} {}",
            Signature([0; 64]).to_base64() + "AAAA"
        ),
    ] {
        assert_eq!(
            verify_read(&kr, &srv(), &bad, "GET", path, now),
            Err(ReadAuthError::Malformed),
            "{bad:?}"
        );
    }
}
