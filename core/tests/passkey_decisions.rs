//! Passkeys as approvers (issue #34): keyring lines, decisions proven by an
//! assertion over the decision line, the policy's `accept`, one approver counting
//! once whichever credential signed, and receipts carrying assertions that verify
//! offline and fail when any field is altered.

mod common;
mod passkey_maker;

use approval_core::message::{passkey_challenge, Decision, Proof, SignedDecision};
use approval_core::passkey::{b64url, Assertion};
use approval_core::quorum::{evaluate, Ignored, QuorumOutcome};
use approval_core::receipt::{verify_receipt, Receipt};
use approval_core::{Keyring, KeyringError, Policy, Sha256Hex};
use common::*;
use passkey_maker::{Maker, CREDENTIAL_ID, ORIGIN, RP_ID, UP, UV};

/// dana's passkey line for the maker's key.
fn passkey_line(name: &str, m: &Maker) -> String {
    format!(
        "{name} {} {} rp={RP_ID} cred={}\n",
        m.key.algorithm().keyring_word(),
        m.key.to_base64(),
        b64url(CREDENTIAL_ID)
    )
}

/// A passkey decision by `name` with `flags`, its challenge the decision line's hash.
fn passkey_decision(name: &str, m: &Maker, d: Decision, h: &Sha256Hex, flags: u8) -> SignedDecision {
    let challenge = passkey_challenge(d, h, "").unwrap();
    let cdj = format!(
        r#"{{"type":"webauthn.get","challenge":"{}","origin":"{ORIGIN}","crossOrigin":false}}"#,
        b64url(&challenge)
    );
    let a: Assertion = m.assertion_with_client_data(cdj.as_bytes(), flags, &[]);
    SignedDecision {
        approver: approver(name),
        decision: d,
        reason: String::new(),
        proof: Proof::Passkey(Box::new(a)),
    }
}

fn policy_accepting(accept: &str) -> Policy {
    let toml = policy_toml(2, &["alice", "dana"], 1, &[]).replace(
        "[executor]",
        &format!("accept = {accept}\n[executor]"),
    );
    Policy::parse_toml("email.send.toml", &toml).unwrap()
}

#[test]
fn passkey_lines_parse_and_a_name_may_hold_a_key_and_passkeys() {
    for m in Maker::both() {
        let text = keyring_text(&["alice", "dana"]) + &passkey_line("dana", &m);
        let kr = Keyring::parse(&text).unwrap();
        assert_eq!(kr.credentials(&approver("dana")).len(), 2);
        assert_eq!(kr.key(&approver("dana")), Some(&public_key("dana")));
        assert_eq!(kr.passkeys(&approver("dana")).count(), 1);
        // The same credential id under another name is refused.
        let twice = text.clone() + &passkey_line("erin", &m);
        assert!(matches!(
            Keyring::parse(&twice),
            Err(KeyringError::DuplicateKey { line: 4, .. })
        ));
        // A second ed25519 key for a name is refused.
        let two_keys = format!("dana ed25519 {}\n", public_key("erin")) + &text;
        assert!(matches!(
            Keyring::parse(&two_keys),
            Err(KeyringError::DuplicateName { .. })
        ));
    }
    for (bad, why) in [
        ("dana webauthn-es256 AAAA rp=x cred=AA\n", "passkey public key"),
        (&passkey_line("dana", &Maker::es256()).replace(" rp=gate.example.org", "")[..], "rp="),
        (&passkey_line("dana", &Maker::es256()).replace(" cred=", " id=")[..], "unknown passkey attribute"),
        (&passkey_line("dana", &Maker::es256()).replace("webauthn-es256", "webauthn-eddsa")[..], "not webauthn-eddsa"),
        (&(passkey_line("dana", &Maker::es256()).trim_end().to_owned() + " origin=http://gate.example.org\n")[..], "https"),
        (&(passkey_line("dana", &Maker::es256()).trim_end().to_owned() + " origin=https://evil.example\n")[..], "relying party's domain"),
    ] {
        let e = Keyring::parse(bad).unwrap_err().to_string();
        assert!(e.contains(why), "{bad:?}: {e}");
    }
}

#[test]
fn a_passkey_decision_counts_only_where_accepted_and_an_approver_counts_once() {
    let m = Maker::es256();
    let kr = Keyring::parse(&(keyring_text(&["alice", "dana"]) + &passkey_line("dana", &m))).unwrap();
    let both = policy_accepting(r#"["key", "passkey"]"#);
    let keys_only = policy_accepting(r#"["key"]"#);
    let h = Sha256Hex::digest(b"preview");
    let dana = passkey_decision("dana", &m, Decision::Approve, &h, UP | UV);
    let alice = approve("alice", &h);
    assert_eq!(
        evaluate(&both, &kr, &h, &[alice.clone(), dana.clone()]).outcome,
        QuorumOutcome::Reached
    );
    let t = evaluate(&keys_only, &kr, &h, &[alice.clone(), dana.clone()]);
    assert_eq!(t.ignored, vec![(1, Ignored::NotAccepted)]);
    // dana by key and by passkey is still one approver.
    let t = evaluate(&both, &kr, &h, &[dana.clone(), approve("dana", &h)]);
    assert_eq!(t.approvals, vec![approver("dana")]);
    assert_eq!(t.ignored, vec![(1, Ignored::DuplicateKey)]);
    // Another preview, decision or user verification off: the assertion fails.
    for bad in [
        passkey_decision("dana", &m, Decision::Approve, &Sha256Hex::digest(b"other"), UP | UV),
        passkey_decision("dana", &m, Decision::Reject, &h, UP | UV),
        passkey_decision("dana", &m, Decision::Approve, &h, UP),
        passkey_decision("dana", &m, Decision::Approve, &h, UV),
    ] {
        let mut moved = bad.clone();
        moved.decision = Decision::Approve;
        let t = evaluate(&both, &kr, &h, &[alice.clone(), moved]);
        assert_eq!(t.ignored, vec![(1, Ignored::BadSignature)], "{bad:?}");
    }
    // A policy naming dana accepts only keys: her key is enough to load it; a
    // keyring where she has only a passkey is refused for that policy.
    let only_passkey = Keyring::parse(&(keyring_text(&["alice"]) + &passkey_line("dana", &m))).unwrap();
    let e = keys_only.check_keyring(&only_passkey, "email.send.toml", None).unwrap_err();
    assert!(e.to_string().contains("does not accept"), "{e}");
    assert!(keys_only.check_keyring(&kr, "email.send.toml", None).is_ok());
    // The default accept is keys only, and leaves the policy hash as it was.
    let plain = policy(2, &["alice", "dana"], 1, &[]);
    assert_eq!(plain.sha256(), keys_only.sha256());
    assert_ne!(plain.sha256(), both.sha256());
}

#[test]
fn a_receipt_with_a_passkey_decision_verifies_offline_and_not_altered() {
    let m = Maker::eddsa();
    let kr = Keyring::parse(&(keyring_text(&["alice"]) + &passkey_line("dana", &m))).unwrap();
    let pol = policy_accepting(r#"["key", "passkey"]"#);
    let p = preview(&pol, serde_json::json!({"to": "x@example.com"}));
    let h = p.sha256();
    let ds = [approve("alice", &h), passkey_decision("dana", &m, Decision::Approve, &h, UP | UV)];
    let r = Receipt::build(&p, &pol, &kr, &ds);
    assert_eq!(r.decisions.len(), 2);
    let text = serde_json::to_string(&r).unwrap();
    let back = Receipt::from_json_text(&text).unwrap();
    assert!(verify_receipt(&back, &kr, None).is_ok());
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for field in ["credential_id", "authenticator_data", "client_data_json", "signature"] {
        let mut w = v.clone();
        let s = w["decisions"][1]["passkey"][field].as_str().unwrap().to_owned();
        let mut bytes = approval_core::passkey::from_b64url(&s).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        w["decisions"][1]["passkey"][field] = serde_json::Value::String(b64url(&bytes));
        let altered = Receipt::from_json_text(&w.to_string());
        let refused = altered.map(|r| verify_receipt(&r, &kr, None).is_err()).unwrap_or(true);
        assert!(refused, "{field} altered was accepted");
    }
}
