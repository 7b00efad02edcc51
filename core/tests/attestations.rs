//! Execution attestations in receipts (#11 item 3): a receipt assembled from
//! approvals the server never let run is refused under the server's key, and an
//! attestation holds only for its own server, proposal, preview hash and window.

mod common;

use approval_core::attestation::{Attestation, AttestationError};
use approval_core::{
    verify_receipt, verify_receipt_attested, Decision, ProposalId, PublicKey, QuorumOutcome,
    Receipt, ReceiptError, ServerId, Sha256Hex, Timestamp,
};
use common::*;
use ed25519_dalek::SigningKey;
use proptest::prelude::*;

/// The server's identity key in these tests.
fn server_sk() -> SigningKey {
    SigningKey::from_bytes(&seed("the server"))
}

fn server_pk() -> PublicKey {
    PublicKey::from_signing_key(&server_sk())
}

fn sid() -> ServerId {
    ServerId::parse("srv-test-0001").unwrap()
}

/// Alice's and carol's approvals of the standard preview: a quorum.
fn quorum_receipt() -> Receipt {
    let p = standard_preview();
    let h = p.sha256();
    Receipt::build(
        &p,
        &standard_policy(),
        &full_keyring(),
        &[approve("alice", &h), approve("carol", &h)],
    )
}

/// The standard proposal claimed by the server: quorum at `approved`, claimed at `claimed`.
fn attested(approved: Timestamp, claimed: Timestamp) -> Receipt {
    let p = standard_preview();
    let a = Attestation::sign(
        &server_sk(),
        &sid(),
        &p.proposal_id,
        &p.sha256(),
        approved,
        claimed,
    );
    quorum_receipt().with_attestation(Some(a))
}

fn with_key(r: &Receipt, now: Option<Timestamp>) -> Result<(), ReceiptError> {
    verify_receipt_attested(r, &full_keyring(), &server_pk(), now).map(|_| ())
}

#[test]
fn an_attested_receipt_verifies_under_the_server_key_and_round_trips() {
    let r = attested(t(100), t(200));
    let v = verify_receipt_attested(&r, &full_keyring(), &server_pk(), Some(t(300))).unwrap();
    let a = v.attestation().unwrap();
    assert_eq!((a.approved_at, a.claimed_at), (t(100), t(200)));
    let text = serde_json::to_string_pretty(&r).unwrap();
    assert!(text.contains("\"attestation\""));
    let back = Receipt::from_json_text(&text).unwrap();
    assert_eq!(back, r);
    assert!(with_key(&back, None).is_ok());
    // Quorum-only verification still works and reports no attestation.
    assert!(verify_receipt(&r, &full_keyring(), None)
        .unwrap()
        .attestation()
        .is_none());
    // A receipt without the field (what earlier servers wrote) still parses and
    // verifies quorum-only; it is written without the field too.
    let plain = serde_json::to_string(&quorum_receipt()).unwrap();
    assert!(!plain.contains("attestation"));
    assert!(verify_receipt(
        &Receipt::from_json_text(&plain).unwrap(),
        &full_keyring(),
        None
    )
    .is_ok());
}

#[test]
fn a_receipt_reassembled_after_a_revoke_is_refused_with_the_server_key() {
    // What any approver can read of a proposal that was approved and then revoked:
    // the approvals, without the revoke. They are genuine, so quorum verifies ...
    let r = quorum_receipt();
    assert!(verify_receipt(&r, &full_keyring(), Some(t(100))).is_ok());
    // ... but the server never claimed it, so there is no attestation.
    assert_eq!(
        with_key(&r, None),
        Err(ReceiptError::Attestation(AttestationError::Missing))
    );
}

#[test]
fn a_receipt_from_a_vetoed_proposal_does_not_verify_with_the_server_key() {
    let p = standard_preview();
    let h = p.sha256();
    let policy = policy(2, &["alice", "bob", "carol"], 1, &[]);
    let vp = preview(&policy, serde_json::json!({"to": "cfo@example.com"}));
    let vh = vp.sha256();
    // The vetoed proposal: alice and carol approved, bob's veto stopped it.
    let all = [
        approve("alice", &vh),
        approve("carol", &vh),
        sign("bob", Decision::Reject, &vh, "no"),
    ];
    let honest = Receipt::build(&vp, &policy, &full_keyring(), &all);
    assert!(matches!(
        verify_receipt(&honest, &full_keyring(), None),
        Err(ReceiptError::NoQuorum(QuorumOutcome::Vetoed))
    ));
    // The attacker leaves the veto out: quorum alone verifies.
    let forged = Receipt::build(&vp, &policy, &full_keyring(), &all[..2]);
    assert!(verify_receipt(&forged, &full_keyring(), None).is_ok());
    assert_eq!(
        verify_receipt_attested(&forged, &full_keyring(), &server_pk(), None).map(|_| ()),
        Err(ReceiptError::Attestation(AttestationError::Missing))
    );
    // Nor does an attestation lifted from another, executed proposal help.
    let lifted = Attestation::sign(&server_sk(), &sid(), &p.proposal_id, &h, t(100), t(200));
    let forged = forged.with_attestation(Some(lifted));
    assert_eq!(
        verify_receipt_attested(&forged, &full_keyring(), &server_pk(), None).map(|_| ()),
        Err(ReceiptError::Attestation(AttestationError::BadSignature))
    );
}

#[test]
fn an_attestation_claimed_after_execute_within_is_refused() {
    // The standard policy's execute_within is 10 minutes: [approved_at, approved_at + 600).
    assert!(with_key(&attested(t(100), t(699)), None).is_ok());
    assert!(matches!(
        with_key(&attested(t(100), t(700)), None),
        Err(ReceiptError::Attestation(
            AttestationError::ClaimedOutsideWindow { .. }
        ))
    ));
    // Claimed before quorum, or quorum "reached" after the proposal expired: refused.
    assert!(matches!(
        with_key(&attested(t(100), t(99)), None),
        Err(ReceiptError::Attestation(
            AttestationError::ClaimedOutsideWindow { .. }
        ))
    ));
    assert!(matches!(
        with_key(&attested(t(1800), t(1801)), None),
        Err(ReceiptError::Attestation(
            AttestationError::ApprovedOutsideLife { .. }
        ))
    ));
}

#[test]
fn check_expiry_with_the_server_key_uses_the_servers_window() {
    let r = attested(t(100), t(200));
    // Quorum-only must assume the widest window: expires_at + execute_within.
    assert!(verify_receipt(&r, &full_keyring(), Some(t(2000))).is_ok());
    // The attested window is approved_at + execute_within.
    assert!(with_key(&r, Some(t(699))).is_ok());
    assert_eq!(
        with_key(&r, Some(t(700))),
        Err(ReceiptError::Expired(t(700)))
    );
}

#[test]
fn an_attestation_by_another_key_or_for_another_proposal_is_refused() {
    let r = attested(t(100), t(200));
    let other = PublicKey::from_signing_key(&SigningKey::from_bytes(&seed("impostor")));
    assert!(matches!(
        verify_receipt_attested(&r, &full_keyring(), &other, None),
        Err(ReceiptError::Attestation(
            AttestationError::KeyMismatch { .. }
        ))
    ));
    // Signed by an impostor who also wrote its key into the attestation.
    let p = standard_preview();
    let impostor = Attestation::sign(
        &SigningKey::from_bytes(&seed("impostor")),
        &sid(),
        &p.proposal_id,
        &p.sha256(),
        t(100),
        t(200),
    );
    let r2 = quorum_receipt().with_attestation(Some(impostor));
    assert!(matches!(
        with_key(&r2, None),
        Err(ReceiptError::Attestation(
            AttestationError::KeyMismatch { .. }
        ))
    ));
    // Another proposal id or preview hash under the right key: refused.
    for (id, hash) in [
        (ProposalId::parse("p-0002").unwrap(), p.sha256()),
        (p.proposal_id.clone(), Sha256Hex::digest(b"other")),
    ] {
        let a = Attestation::sign(&server_sk(), &sid(), &id, &hash, t(100), t(200));
        assert_eq!(
            with_key(&quorum_receipt().with_attestation(Some(a)), None),
            Err(ReceiptError::Attestation(AttestationError::BadSignature))
        );
    }
    // Another server id: refused before the signature is checked.
    let other_srv = ServerId::parse("srv-test-0002").unwrap();
    let a = Attestation::sign(
        &server_sk(),
        &other_srv,
        &p.proposal_id,
        &p.sha256(),
        t(100),
        t(200),
    );
    assert!(matches!(
        with_key(&quorum_receipt().with_attestation(Some(a)), None),
        Err(ReceiptError::Attestation(
            AttestationError::ServerMismatch { .. }
        ))
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    /// Accepted exactly when quorum came during the proposal's life and the claim
    /// inside [approved_at, approved_at + execute_within).
    #[test]
    fn accepted_iff_inside_the_window(approved in -100i64..2000, delay in -100i64..1000) {
        let r = attested(t(approved), t(approved + delay));
        let ok = (0..1800).contains(&approved) && (0..600).contains(&delay);
        prop_assert_eq!(with_key(&r, None).is_ok(), ok);
    }

    /// Any one flipped bit of the signature, or a shifted time, is refused.
    #[test]
    fn any_change_to_the_attestation_is_refused(bit in 0usize..512, shift in 1i64..100) {
        let good = attested(t(100), t(200));
        let mut flipped = good.clone();
        if let Some(a) = flipped.attestation.as_mut() {
            a.signature.0[bit / 8] ^= 1 << (bit % 8);
        }
        prop_assert!(with_key(&flipped, None).is_err());
        let mut moved = good.clone();
        if let Some(a) = moved.attestation.as_mut() {
            a.claimed_at = Timestamp::from_unix(a.claimed_at.unix() + shift);
        }
        prop_assert_eq!(
            with_key(&moved, None),
            Err(ReceiptError::Attestation(AttestationError::BadSignature))
        );
    }
}

/// The standard policy with `cooldown = "2m"`, its preview, and alice's and carol's
/// approvals claimed at `claimed` after quorum at `t(100)`.
fn cooled_receipt(claimed: Timestamp) -> Receipt {
    let toml = policy_toml(2, &["alice", "bob", "carol"], 1, &[(&["carol"], 1)]).replace(
        "execute_within = \"10m\"\n",
        "execute_within = \"10m\"\ncooldown = \"2m\"\n",
    );
    let policy = approval_core::Policy::parse_toml("email.send.toml", &toml).unwrap();
    let mut v = preview(&policy, serde_json::json!({"to": "cfo@example.com"})).to_value();
    v["cooldown"] = serde_json::json!("2m");
    let p = approval_core::Preview::from_value(&v).unwrap();
    let h = p.sha256();
    let a = Attestation::sign(&server_sk(), &sid(), &p.proposal_id, &h, t(100), claimed);
    Receipt::build(
        &p,
        &policy,
        &full_keyring(),
        &[approve("alice", &h), approve("carol", &h)],
    )
    .with_attestation(Some(a))
}

/// A server that let a proposal run inside the cooldown its preview names (while
/// approvers could still revoke it) is caught by any verifier of the receipt.
#[test]
fn an_attestation_claimed_during_the_cooldown_is_refused() {
    assert_eq!(
        with_key(&cooled_receipt(t(219)), None),
        Err(ReceiptError::Attestation(
            AttestationError::ClaimedDuringCooldown {
                claimed_at: t(219),
                opens: t(220)
            }
        ))
    );
    assert_eq!(with_key(&cooled_receipt(t(220)), None), Ok(()));
    // The window still closes at approved_at + execute_within.
    assert!(matches!(
        with_key(&cooled_receipt(t(700)), None),
        Err(ReceiptError::Attestation(
            AttestationError::ClaimedOutsideWindow { .. }
        ))
    ));
    // A preview whose cooldown is not its policy's: the window cannot be trusted.
    let mut r = cooled_receipt(t(220));
    r.preview
        .as_object_mut()
        .unwrap()
        .remove("cooldown")
        .unwrap();
    r.preview_sha256 = Sha256Hex::digest(&approval_core::json::canonical_bytes(&r.preview));
    assert_eq!(
        verify_receipt(&r, &full_keyring(), None).map(|_| ()),
        Err(ReceiptError::CooldownMismatch {
            preview: "none".into(),
            policy: "2m".into()
        })
    );
}
