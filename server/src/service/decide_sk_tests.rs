//! Security keys (`sk-ssh-ed25519@openssh.com`) at the server (issue #35): the
//! token's counter must go up across decisions (`sk/<hash>` mark), a signature
//! without user presence is refused, and `require_touch` refuses a plain key with
//! SIGNATURE_NOT_ACCEPTED naming it. The token is simulated per PROTOCOL.u2f.

use crate::config::ConfigSource;
use crate::run::{self, ServeOptions};
use approval_core::ids::{AgentName, ApproverName};
use approval_core::keyring::PublicKey;
use approval_core::message::{decision_message, Decision, Proof, SignedDecision};
use approval_core::ssh::SshSignature;
use approval_core::{Code, Sha256Hex};
use ed25519_dalek::{Signer, SigningKey};
use serde_json::json;
use sha2::{Digest, Sha256};
use ssh_key::public::{Ed25519PublicKey, KeyData, SkEd25519};
use ssh_key::{Algorithm, HashAlg, SshSig};
use std::path::Path;

struct Token {
    sk: SigningKey,
    key: KeyData,
}

impl Token {
    fn new(seed: u8) -> Self {
        let sk = SigningKey::from_bytes(&[seed; 32]);
        let pk = Ed25519PublicKey(sk.verifying_key().to_bytes());
        Self {
            sk,
            key: KeyData::SkEd25519(SkEd25519::new(pk, "ssh:")),
        }
    }

    fn line(&self) -> String {
        let text = ssh_key::PublicKey::new(self.key.clone(), "")
            .to_openssh()
            .unwrap();
        text.split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn decide(
        &self,
        name: &str,
        d: Decision,
        h: &Sha256Hex,
        flags: u8,
        counter: u32,
    ) -> SignedDecision {
        let msg = decision_message(d, h, "").unwrap();
        let inner = SshSig::signed_data("approval-v1", HashAlg::Sha512, msg.as_bytes()).unwrap();
        let mut data = Sha256::digest(b"ssh:").to_vec();
        data.push(flags);
        data.extend(counter.to_be_bytes());
        data.extend(Sha256::digest(&inner));
        let mut raw = self.sk.sign(&data).to_bytes().to_vec();
        raw.push(flags);
        raw.extend(counter.to_be_bytes());
        let sig = ssh_key::Signature::new(Algorithm::SkEd25519, raw).unwrap();
        let whole = SshSig::new(self.key.clone(), "approval-v1", HashAlg::Sha512, sig).unwrap();
        let armored = whole.to_pem(ssh_key::LineEnding::LF).unwrap();
        SignedDecision {
            approver: ApproverName::parse(name).unwrap(),
            decision: d,
            reason: String::new(),
            proof: Proof::SshSig(Box::new(SshSignature::from_armored(&armored).unwrap())),
        }
    }
}

/// A service with the repository's note.write policy (plus `extra` on top) and `keys`.
async fn service(extra: &str, keys: &str) -> (std::sync::Arc<super::Service>, tempfile::TempDir) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    let note = std::fs::read_to_string(root.join("policies/note.write.toml")).unwrap();
    std::fs::write(policies.join("note.write.toml"), format!("{extra}\n{note}")).unwrap();
    std::fs::write(dir.path().join("keys"), keys).unwrap();
    let source = ConfigSource {
        policies,
        keys: dir.path().join("keys"),
        agents: None,
        root: None,
        embedded_policies: None,
    };
    let opts = ServeOptions::local(
        dir.path().join("data"),
        source,
        "127.0.0.1:0".parse().unwrap(),
    );
    (run::start(&opts).await.unwrap(), dir)
}

const UP: u8 = 0x01;

#[tokio::test]
async fn a_security_key_counter_must_go_up_and_a_touch_is_required() {
    let (bob, carol) = (Token::new(2), Token::new(3));
    let alice = SigningKey::from_bytes(&[1; 32]);
    let keys = format!(
        "alice ed25519 {}\nbob {}\ncarol {}\n",
        PublicKey::from_signing_key(&alice),
        bob.line(),
        carol.line()
    );
    let (svc, _dir) = service("", &keys).await;
    let agent = AgentName::parse("local").unwrap();
    let mut ids = Vec::new();
    for text in ["a", "b"] {
        let (rec, _) = svc
            .prepare(&agent, "note.write", json!({ "text": text }), None)
            .await
            .unwrap();
        ids.push((rec.id().to_string(), rec.preview_sha256));
    }
    let (id, h) = &ids[0];
    // No user presence: refused.
    let e = svc
        .decide(id, bob.decide("bob", Decision::Approve, h, 0, 1), None)
        .await
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidSignature);
    assert!(e.message.contains("user presence"), "{}", e.message);
    svc.decide(id, bob.decide("bob", Decision::Approve, h, UP, 5), None)
        .await
        .unwrap();
    // The same decision again is acknowledged, not a counter replay.
    let again = svc
        .decide(id, bob.decide("bob", Decision::Approve, h, UP, 5), None)
        .await
        .unwrap();
    assert!(again.already_recorded);
    // Another proposal with a counter that did not go up: refused, naming it.
    let (id2, h2) = &ids[1];
    for stale in [5, 4] {
        let e = svc
            .decide(
                id2,
                bob.decide("bob", Decision::Approve, h2, UP, stale),
                None,
            )
            .await
            .unwrap_err();
        assert_eq!(e.code, Code::InvalidSignature);
        assert!(
            e.message.contains("counter") && e.message.contains("SHA256:"),
            "{}",
            e.message
        );
    }
    svc.decide(id2, bob.decide("bob", Decision::Approve, h2, UP, 6), None)
        .await
        .unwrap();
    // carol's token has its own counter.
    svc.decide(
        id2,
        carol.decide("carol", Decision::Approve, h2, UP, 1),
        None,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn require_touch_refuses_a_plain_key_naming_it() {
    let (alice_t, bob, carol) = (Token::new(11), Token::new(12), Token::new(13));
    let alice = SigningKey::from_bytes(&[1; 32]);
    let keys = format!(
        "alice ed25519 {}\nalice {}\nbob {}\ncarol {}\n",
        PublicKey::from_signing_key(&alice),
        alice_t.line(),
        bob.line(),
        carol.line()
    );
    let (svc, _dir) = service("require_touch = true", &keys).await;
    let agent = AgentName::parse("local").unwrap();
    let (rec, _) = svc
        .prepare(&agent, "note.write", json!({"text": "t"}), None)
        .await
        .unwrap();
    let id = rec.id().to_string();
    let h = rec.preview_sha256;
    let plain = SignedDecision::sign(
        &alice,
        ApproverName::parse("alice").unwrap(),
        Decision::Approve,
        &h,
        "",
    )
    .unwrap();
    let e = svc.decide(&id, plain, None).await.unwrap_err();
    assert_eq!(e.code, Code::SignatureNotAccepted);
    assert!(e.message.contains("require_touch"), "{}", e.message);
    svc.decide(
        &id,
        alice_t.decide("alice", Decision::Approve, &h, UP, 1),
        None,
    )
    .await
    .unwrap();
}
