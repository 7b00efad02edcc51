//! OpenSSH keys as approvers (issue #35): `ssh-ed25519` and
//! `sk-ssh-ed25519@openssh.com` keyring lines, SSHSIG decisions over the same
//! decision line Ed25519 keys sign, the security key's flags and counter, the
//! policy's `require_touch` / `require_verify`, receipts, and a vector made by
//! OpenSSH's own `ssh-keygen -Y sign` (core/tests/vectors/sshsig/README.md).

mod common;

use approval_core::message::{decision_message, Decision, MessageError, Proof, SignedDecision};
use approval_core::quorum::{evaluate, Ignored, QuorumOutcome};
use approval_core::ssh::{self, SshSignature};
use approval_core::{Keyring, KeyringError, Policy, Sha256Hex};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use common::*;
use ed25519_dalek::{Signer, SigningKey};
use sha2::{Digest, Sha256};
use ssh_encoding::Encode;
use ssh_key::private::Ed25519Keypair;
use ssh_key::public::{Ed25519PublicKey, KeyData, SkEd25519};
use ssh_key::{Algorithm, HashAlg, PrivateKey, SshSig};

const UP: u8 = 0x01;
const UV: u8 = 0x04;

fn b64_blob(k: &KeyData) -> String {
    let mut v = Vec::new();
    k.encode(&mut v).unwrap();
    STANDARD.encode(v)
}

/// A plain OpenSSH Ed25519 key made from a seed, and its keyring line.
fn plain(seed: u8) -> (PrivateKey, String) {
    let kp = Ed25519Keypair::from_seed(&[seed; 32]);
    let line = format!("ssh-ed25519 {}", b64_blob(&KeyData::Ed25519(kp.public)));
    (PrivateKey::from(kp), line)
}

/// A security key's public key with `application`.
fn sk_key(seed: u8, application: &str) -> (SigningKey, KeyData) {
    let sk = SigningKey::from_bytes(&[seed; 32]);
    let pk = Ed25519PublicKey(sk.verifying_key().to_bytes());
    (sk, KeyData::SkEd25519(SkEd25519::new(pk, application)))
}

fn sk_line(k: &KeyData) -> String {
    format!("sk-ssh-ed25519@openssh.com {}", b64_blob(k))
}

/// What a FIDO token does (PROTOCOL.u2f): signs sha256(application) || flags ||
/// counter (u32 BE) || sha256(message), where the message is SSHSIG's signed data.
#[allow(clippy::too_many_arguments)]
fn sk_sshsig(
    sk: &SigningKey,
    key: &KeyData,
    sign_app: &str,
    namespace: &str,
    flags: u8,
    counter: u32,
    msg: &[u8],
) -> SshSignature {
    let inner = SshSig::signed_data(namespace, HashAlg::Sha512, msg).unwrap();
    let mut data = Sha256::digest(sign_app.as_bytes()).to_vec();
    data.push(flags);
    data.extend(counter.to_be_bytes());
    data.extend(Sha256::digest(&inner));
    let mut raw = sk.sign(&data).to_bytes().to_vec();
    raw.push(flags);
    raw.extend(counter.to_be_bytes());
    let sig = ssh_key::Signature::new(Algorithm::SkEd25519, raw).unwrap();
    let whole = SshSig::new(key.clone(), namespace, HashAlg::Sha512, sig).unwrap();
    let mut bytes = Vec::new();
    whole.encode(&mut bytes).unwrap();
    SshSignature::from_bytes(bytes).unwrap()
}

fn decision(name: &str, d: Decision, reason: &str, sig: SshSignature) -> SignedDecision {
    SignedDecision {
        approver: approver(name),
        decision: d,
        reason: reason.into(),
        proof: Proof::SshSig(Box::new(sig)),
    }
}

fn msg(d: Decision, h: &Sha256Hex, reason: &str) -> Vec<u8> {
    decision_message(d, h, reason).unwrap().into_bytes()
}

fn policy_with(extra: &str, approvers: &[&str], quorum: u32) -> Policy {
    let toml = policy_toml(quorum, approvers, 1, &[])
        .replace("[executor]", &format!("{extra}\n[executor]"));
    Policy::parse_toml("email.send.toml", &toml).unwrap()
}

#[test]
fn plain_ssh_ed25519_signatures_from_ssh_key_verify_and_bind_everything() {
    let (key, line) = plain(1);
    let kr = Keyring::parse(&format!("fred {line}\n")).unwrap();
    let cred = kr.credentials(&approver("fred"))[0].clone();
    assert_eq!(cred.to_fields(), line);
    let h = Sha256Hex::digest(b"p");
    let made = key
        .sign(
            ssh::NAMESPACE,
            HashAlg::Sha512,
            &msg(Decision::Approve, &h, "ok"),
        )
        .unwrap();
    let mut bytes = Vec::new();
    made.encode(&mut bytes).unwrap();
    let sig = SshSignature::from_bytes(bytes).unwrap();
    let d = decision("fred", Decision::Approve, "ok", sig.clone());
    assert_eq!(d.verify(&cred, &h).unwrap().sign_count, None);
    // The wire form round-trips, exactly one proof.
    let wire = serde_json::to_value(&d).unwrap();
    assert_eq!(wire["sshsig"], sig.to_base64());
    assert!(wire.get("signature").is_none());
    let back: SignedDecision = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(back, d);
    let mut both = wire.clone();
    both["signature"] = STANDARD.encode([0u8; 64]).into();
    assert!(serde_json::from_value::<SignedDecision>(both).is_err());
    // Altered decision, hash, reason: refused.
    let mut o = d.clone();
    o.decision = Decision::Reject;
    assert!(o.verify(&cred, &h).is_err());
    assert!(d.verify(&cred, &Sha256Hex::digest(b"q")).is_err());
    let mut o = d.clone();
    o.reason = "ok ".into();
    assert!(o.verify(&cred, &h).is_err());
    // Another key's keyring line: refused.
    let (_, other) = plain(2);
    let kr2 = Keyring::parse(&format!("fred {other}\n")).unwrap();
    assert!(d
        .verify(&kr2.credentials(&approver("fred"))[0], &h)
        .is_err());
    // Counted by quorum under the default accept = ["key"].
    let t = evaluate(&policy_with("", &["fred"], 1), &kr, &h, &[d]);
    assert_eq!(t.outcome, QuorumOutcome::Reached);
}

#[test]
fn a_signature_made_by_openssh_verifies() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/sshsig/");
    let read = |f: &str| std::fs::read_to_string(format!("{dir}{f}")).unwrap();
    let pubkey = read("approver.pub");
    let fields: Vec<&str> = pubkey.split_whitespace().collect();
    let kr = Keyring::parse(&format!("olga {} {}\n", fields[0], fields[1])).unwrap();
    let cred = kr.credentials(&approver("olga"))[0].clone();
    assert_eq!(
        cred.fingerprint(),
        "SHA256:3lunANv3Odw5pxZg9fDhWq+HpzmgKVAJ3B7El0bgftU"
    );
    let text = read("decision.txt");
    let (dec, hash, reason) = approval_core::message::parse_decision_message(&text).unwrap();
    assert_eq!(hash, Sha256Hex::digest(b"vector"));
    let sig = SshSignature::from_armored(&read("decision.txt.sig")).unwrap();
    // The wire form is the base64 inside the armour.
    let body: String = read("decision.txt.sig")
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    assert_eq!(sig.to_base64(), body);
    let d = decision("olga", dec, &reason, sig);
    assert_eq!(d.verify(&cred, &hash).unwrap().sign_count, None);
    let mut o = d.clone();
    o.reason.push('!');
    assert!(o.verify(&cred, &hash).is_err());
}

#[test]
fn security_key_signatures_need_presence_the_namespace_and_the_application() {
    let (sk, key) = sk_key(3, "ssh:");
    let kr = Keyring::parse(&format!("gina {}\n", sk_line(&key))).unwrap();
    let cred = kr.credentials(&approver("gina"))[0].clone();
    let h = Sha256Hex::digest(b"p");
    let m = msg(Decision::Approve, &h, "go");
    let ok = decision(
        "gina",
        Decision::Approve,
        "go",
        sk_sshsig(&sk, &key, "ssh:", "approval-v1", UP, 7, &m),
    );
    assert_eq!(ok.verify(&cred, &h).unwrap().sign_count, Some(7));
    // UP cleared: refused by us (ssh-key checks only the signature).
    let no_up = decision(
        "gina",
        Decision::Approve,
        "go",
        sk_sshsig(&sk, &key, "ssh:", "approval-v1", UV, 8, &m),
    );
    let e = no_up.verify(&cred, &h).unwrap_err();
    assert!(
        matches!(&e, MessageError::Ssh(m) if m.contains("user presence")),
        "{e}"
    );
    // Wrong namespace.
    let ns = decision(
        "gina",
        Decision::Approve,
        "go",
        sk_sshsig(&sk, &key, "ssh:", "git", UP, 9, &m),
    );
    let e = ns.verify(&cred, &h).unwrap_err();
    assert!(e.to_string().contains("namespace"), "{e}");
    // Signed for another application than the key's: does not verify.
    let app = decision(
        "gina",
        Decision::Approve,
        "go",
        sk_sshsig(&sk, &key, "ssh:other", "approval-v1", UP, 9, &m),
    );
    assert!(app.verify(&cred, &h).is_err());
    // A key bound to another application: refused in the keyring.
    let (_, web) = sk_key(4, "ssh:web");
    let e = Keyring::parse(&format!("gina {}\n", sk_line(&web))).unwrap_err();
    assert!(e.to_string().contains("application"), "{e}");
    // Altered decision, hash, reason.
    let mut o = ok.clone();
    o.decision = Decision::Reject;
    assert!(o.verify(&cred, &h).is_err());
    assert!(ok.verify(&cred, &Sha256Hex::digest(b"q")).is_err());
    let mut o = ok.clone();
    o.reason = "no".into();
    assert!(o.verify(&cred, &h).is_err());
}

#[test]
fn require_touch_and_require_verify() {
    let (plain_key, plain_line) = plain(5);
    let (sk, key) = sk_key(6, "ssh:");
    let kr = Keyring::parse(&format!("fred {plain_line}\ngina {}\n", sk_line(&key))).unwrap();
    let h = Sha256Hex::digest(b"p");
    let m = msg(Decision::Approve, &h, "");
    let made = plain_key.sign(ssh::NAMESPACE, HashAlg::Sha512, &m).unwrap();
    let mut bytes = Vec::new();
    made.encode(&mut bytes).unwrap();
    let fred = decision(
        "fred",
        Decision::Approve,
        "",
        SshSignature::from_bytes(bytes).unwrap(),
    );
    let gina_up = decision(
        "gina",
        Decision::Approve,
        "",
        sk_sshsig(&sk, &key, "ssh:", "approval-v1", UP, 1, &m),
    );
    let gina_uv = decision(
        "gina",
        Decision::Approve,
        "",
        sk_sshsig(&sk, &key, "ssh:", "approval-v1", UP | UV, 2, &m),
    );

    let plain_policy = policy_with("", &["fred", "gina"], 2);
    assert_eq!(
        evaluate(&plain_policy, &kr, &h, &[fred.clone(), gina_up.clone()]).outcome,
        QuorumOutcome::Reached
    );
    // The flags are left out of the canonical form (and the hash) when false.
    let touch = policy_with("require_touch = true", &["fred", "gina"], 1);
    assert_ne!(touch.sha256(), plain_policy.sha256());
    assert!(!plain_policy
        .canonical_json()
        .to_string()
        .contains("require_"));
    let t = evaluate(&touch, &kr, &h, &[fred.clone(), gina_up.clone()]);
    assert_eq!(t.ignored, vec![(0, Ignored::NoTouch)]);
    assert_eq!(t.outcome, QuorumOutcome::Reached);
    // A plain Ed25519 key (signer-cli's) is refused too.
    let alice_kr =
        Keyring::parse(&(keyring_text(&["alice"]) + &format!("gina {}\n", sk_line(&key)))).unwrap();
    let alice = SignedDecision::sign(
        &signing_key("alice"),
        approver("alice"),
        Decision::Approve,
        &h,
        "",
    )
    .unwrap();
    let t = evaluate(
        &policy_with("require_touch = true", &["alice"], 1),
        &alice_kr,
        &h,
        &[alice],
    );
    assert_eq!(t.ignored, vec![(0, Ignored::NoTouch)]);

    // An approver who could never count under it disables the kind (§5.3).
    let e = touch
        .check_keyring(&kr, "email.send.toml", None)
        .unwrap_err();
    assert!(
        e.message.contains("fred") && e.message.contains("require_touch"),
        "{e:?}"
    );
    let only_gina = policy_with("require_verify = true", &["gina"], 1);
    assert!(only_gina
        .check_keyring(&kr, "email.send.toml", None)
        .is_ok());

    let verify = policy_with("require_verify = true", &["fred", "gina"], 1);
    let t = evaluate(&verify, &kr, &h, std::slice::from_ref(&gina_up));
    assert_eq!(t.ignored, vec![(0, Ignored::NoTouch)]);
    let t = evaluate(&verify, &kr, &h, std::slice::from_ref(&gina_uv));
    assert_eq!(t.outcome, QuorumOutcome::Reached);
    assert!(verify
        .presence_refusal(&gina_up.proof)
        .unwrap()
        .contains("require_verify"));
    assert!(touch
        .presence_refusal(&fred.proof)
        .unwrap()
        .contains("require_touch"));
}

#[test]
fn keyring_lines_refuse_comments_duplicates_and_mismatched_types() {
    let (_, line) = plain(7);
    // A trailing comment is refused with a clear error.
    let e = Keyring::parse(&format!("fred {line} fred@laptop\n")).unwrap_err();
    assert!(e.to_string().contains("remove the comment"), "{e}");
    // The type word must match the blob.
    let blob = line.split(' ').nth(1).unwrap();
    let e = Keyring::parse(&format!("fred sk-ssh-ed25519@openssh.com {blob}\n")).unwrap_err();
    assert!(matches!(e, KeyringError::Malformed { .. }), "{e}");
    // Several OpenSSH keys for one name, beside an ed25519 key.
    let (_, line2) = plain(8);
    let (_, sk) = sk_key(9, "ssh:");
    let text =
        keyring_text(&["fred"]) + &format!("fred {line}\nfred {line2}\nfred {}\n", sk_line(&sk));
    assert_eq!(
        Keyring::parse(&text)
            .unwrap()
            .credentials(&approver("fred"))
            .len(),
        4
    );
    // One key under two names: refused.
    let e = Keyring::parse(&format!("fred {line}\ngina {line}\n")).unwrap_err();
    assert!(
        matches!(e, KeyringError::DuplicateKey { line: 2, .. }),
        "{e}"
    );
    // The same secret as an ed25519 line and as an OpenSSH line: one signer.
    let kp = Ed25519Keypair::from_seed(&seed("alice"));
    let same = format!(
        "gina ssh-ed25519 {}\n",
        b64_blob(&KeyData::Ed25519(kp.public))
    );
    let e = Keyring::parse(&(keyring_text(&["alice"]) + &same)).unwrap_err();
    assert!(matches!(e, KeyringError::DuplicateKey { .. }), "{e}");
}

#[test]
fn receipts_carry_ssh_key_and_sshsig() {
    use approval_core::receipt::ReceiptDecision;
    let (sk, key) = sk_key(10, "ssh:");
    let kr = Keyring::parse(&format!("gina {}\n", sk_line(&key))).unwrap();
    let cred = kr.credentials(&approver("gina"))[0].clone();
    let h = Sha256Hex::digest(b"p");
    let sig = sk_sshsig(
        &sk,
        &key,
        "ssh:",
        "approval-v1",
        UP,
        3,
        &msg(Decision::Approve, &h, ""),
    );
    let rd = ReceiptDecision {
        approver: approver("gina"),
        key: cred,
        decision: Decision::Approve,
        reason: String::new(),
        proof: Proof::SshSig(Box::new(sig.clone())),
    };
    let v = serde_json::to_value(&rd).unwrap();
    assert_eq!(v["ssh_key"], sk_line(&key));
    assert_eq!(v["sshsig"], sig.to_base64());
    assert!(v.get("public_key").is_none() && v.get("passkey_key").is_none());
    assert_eq!(
        serde_json::from_value::<ReceiptDecision>(v.clone()).unwrap(),
        rd
    );
    let mut wrong = v.clone();
    wrong["signature"] = STANDARD.encode([0u8; 64]).into();
    assert!(serde_json::from_value::<ReceiptDecision>(wrong).is_err());
}

#[test]
fn sshsig_encodings_are_canonical() {
    let (key, _) = plain(11);
    let made = key.sign(ssh::NAMESPACE, HashAlg::Sha512, b"x").unwrap();
    let mut bytes = Vec::new();
    made.encode(&mut bytes).unwrap();
    let b64 = STANDARD.encode(&bytes);
    assert!(SshSignature::parse(&b64).is_ok());
    assert!(SshSignature::parse(b64.trim_end_matches('=')).is_err());
    let mut trailing = bytes.clone();
    trailing.push(0);
    assert!(SshSignature::from_bytes(trailing).is_err());
    assert!(SshSignature::parse("AAAA").is_err());
    assert!(SshSignature::parse("").is_err());
}

#[test]
fn a_receipt_with_a_touched_security_key_verifies_offline_and_a_plain_key_does_not_count() {
    use approval_core::receipt::{verify_receipt, Receipt};
    let (sk, key) = sk_key(12, "ssh:");
    let (plain_key, plain_line) = plain(13);
    let kr = Keyring::parse(&format!("fred {plain_line}\ngina {}\n", sk_line(&key))).unwrap();
    let pol = policy_with("require_touch = true", &["gina"], 1);
    let p = preview(&pol, serde_json::json!({"to": "x@example.com"}));
    let h = p.sha256();
    let m = msg(Decision::Approve, &h, "");
    let gina = decision(
        "gina",
        Decision::Approve,
        "",
        sk_sshsig(&sk, &key, "ssh:", "approval-v1", UP, 4, &m),
    );
    let r = Receipt::build(&p, &pol, &kr, std::slice::from_ref(&gina));
    let text = serde_json::to_string(&r).unwrap();
    let back = Receipt::from_json_text(&text).unwrap();
    assert!(verify_receipt(&back, &kr, None).is_ok());
    // Any byte of the SSHSIG altered: refused (or unreadable).
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let bytes = STANDARD
        .decode(v["decisions"][0]["sshsig"].as_str().unwrap())
        .unwrap();
    for i in (0..bytes.len()).step_by(7) {
        let mut b = bytes.clone();
        b[i] ^= 0x01;
        let mut w = v.clone();
        w["decisions"][0]["sshsig"] = STANDARD.encode(&b).into();
        let refused = Receipt::from_json_text(&w.to_string())
            .map(|r| verify_receipt(&r, &kr, None).is_err())
            .unwrap_or(true);
        assert!(refused, "byte {i} altered was accepted");
    }
    // A plain ssh-ed25519 approval put into the receipt does not count.
    let pol2 = policy_with("require_touch = true", &["fred", "gina"], 1);
    let p2 = preview(&pol2, serde_json::json!({"to": "x@example.com"}));
    let h2 = p2.sha256();
    let made = plain_key
        .sign(
            ssh::NAMESPACE,
            HashAlg::Sha512,
            &msg(Decision::Approve, &h2, ""),
        )
        .unwrap();
    let mut raw = Vec::new();
    made.encode(&mut raw).unwrap();
    let fred = decision(
        "fred",
        Decision::Approve,
        "",
        SshSignature::from_bytes(raw).unwrap(),
    );
    let mut r2 = Receipt::build(&p2, &pol2, &kr, &[]);
    r2.decisions.push(approval_core::receipt::ReceiptDecision {
        approver: approver("fred"),
        key: kr.credentials(&approver("fred"))[0].clone(),
        decision: Decision::Approve,
        reason: String::new(),
        proof: fred.proof,
    });
    let e = verify_receipt(&r2, &kr, None).unwrap_err();
    assert!(e.to_string().contains("require_touch"), "{e}");
}
