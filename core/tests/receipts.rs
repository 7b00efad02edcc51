//! Receipts: built by the server, verified offline by whoever acts. Every refusal.

mod common;

use approval_core::preview::PreviewError;
use approval_core::receipt::{verify_receipt_for_server, ReceiptDecision};
use approval_core::{
    verify_receipt, Decision, QuorumOutcome, Receipt, ReceiptError, ServerId, Sha256Hex,
    SignedDecision, Timestamp,
};
use common::*;
use serde_json::json;

/// A receipt for the standard preview with alice's and carol's approvals.
fn good() -> Receipt {
    let p = standard_preview();
    let h = p.sha256();
    Receipt::build(
        &p,
        &standard_policy(),
        &full_keyring(),
        &[approve("alice", &h), approve("carol", &h)],
    )
}

fn verify(r: &Receipt) -> Result<approval_core::VerifiedReceipt, ReceiptError> {
    verify_receipt(r, &full_keyring(), None)
}

fn decision(who: &str, d: Decision, h: &Sha256Hex) -> ReceiptDecision {
    let s = sign(who, d, h, "");
    ReceiptDecision {
        approver: s.approver,
        key: public_key(who).into(),
        decision: s.decision,
        reason: s.reason,
        proof: s.proof,
    }
}

#[test]
fn a_good_receipt_verifies_and_says_what_was_approved() {
    let r = good();
    let v = verify(&r).unwrap();
    assert_eq!(v.preview(), &standard_preview());
    assert_eq!(v.preview_sha256(), standard_preview().sha256());
    assert_eq!(v.policy_sha256(), standard_policy().sha256());
    assert_eq!(v.policy().spec().quorum, 2);
    let who: Vec<&str> = v.approvers().iter().map(|a| a.as_str()).collect();
    assert_eq!(who, ["alice", "carol"]);
    // And through its JSON text, as a file on disk.
    let text = serde_json::to_string_pretty(&r).unwrap();
    let back = Receipt::from_json_text(&text).unwrap();
    assert_eq!(back, r);
    assert!(verify(&back).is_ok());
    // The right server, and within the window.
    let sid = ServerId::parse("srv-test-0001").unwrap();
    assert!(verify_receipt_for_server(&r, &full_keyring(), Some(t(100)), Some(&sid)).is_ok());
}

#[test]
fn build_keeps_only_decisions_that_count() {
    let p = standard_preview();
    let h = p.sha256();
    let r = Receipt::build(
        &p,
        &standard_policy(),
        &full_keyring(),
        &[
            approve("alice", &h),
            approve("alice", &h),
            approve("dave", &h),
            approve("bob", &Sha256Hex::digest(b"x")),
            approve("carol", &h),
        ],
    );
    let who: Vec<&str> = r.decisions.iter().map(|d| d.approver.as_str()).collect();
    assert_eq!(who, ["alice", "carol"]);
    assert!(verify(&r).is_ok());
}

#[test]
fn hash_mismatch() {
    let mut r = good();
    r.preview_sha256 = Sha256Hex::digest(b"something else");
    assert_eq!(
        verify(&r).unwrap_err(),
        ReceiptError::HashMismatch {
            claimed: Sha256Hex::digest(b"something else"),
            computed: standard_preview().sha256()
        }
    );
    // The preview edited after signing, the claim left alone.
    let mut r = good();
    r.preview["payload"]["to"] = json!("attacker@example.com");
    assert!(matches!(
        verify(&r).unwrap_err(),
        ReceiptError::HashMismatch { claimed, .. } if claimed == standard_preview().sha256()
    ));
    // Edited preview with a matching claim: the signatures no longer cover it.
    let mut r = good();
    r.preview["summary"] = json!("Send the Q3 report to everyone");
    r.preview_sha256 = approval_core::Preview::from_value(&r.preview)
        .unwrap()
        .sha256();
    assert_eq!(
        verify(&r).unwrap_err(),
        ReceiptError::Decision {
            index: 0,
            approver: "alice".into(),
            why: "signature does not verify"
        }
    );
}

#[test]
fn policy_mismatch_refuses_a_weaker_policy() {
    // The server swaps in a 1-of-3 policy: its hash differs from the signed one.
    let mut r = good();
    let weaker = policy(1, &["alice", "bob", "carol"], 1, &[]);
    r.policy = weaker.canonical_json().clone();
    assert_eq!(
        verify(&r).unwrap_err(),
        ReceiptError::PolicyMismatch {
            expected: standard_policy().sha256(),
            computed: weaker.sha256()
        }
    );
    // A malformed policy is a policy error, not a mismatch.
    let mut r = good();
    r.policy["quorum"] = json!(0);
    assert!(matches!(verify(&r).unwrap_err(), ReceiptError::Policy(_)));
    // A policy with a default left out is read but hashes differently from
    // what the preview names.
    let mut r = good();
    r.policy.as_object_mut().unwrap().remove("vetoes");
    assert!(matches!(
        verify(&r).unwrap_err(),
        ReceiptError::PolicyMismatch { .. }
    ));
}

#[test]
fn kind_mismatch() {
    // A preview of kind email.send that names a deploy.prod policy's hash.
    let deploy = approval_core::Policy::parse_toml(
        "deploy.prod.toml",
        &policy_toml(1, &["alice"], 1, &[]).replace("email.send", "deploy.prod"),
    )
    .unwrap();
    let mut v = standard_preview().to_value();
    v["policy_sha256"] = json!(deploy.sha256().to_hex());
    let p = approval_core::Preview::from_value(&v).unwrap();
    let h = p.sha256();
    let r = Receipt::build(&p, &deploy, &full_keyring(), &[approve("alice", &h)]);
    assert_eq!(
        verify(&r).unwrap_err(),
        ReceiptError::KindMismatch {
            policy: "deploy.prod".into(),
            preview: "email.send".into()
        }
    );
}

#[test]
fn server_mismatch() {
    let other = ServerId::parse("srv-other").unwrap();
    assert_eq!(
        verify_receipt_for_server(&good(), &full_keyring(), None, Some(&other)).unwrap_err(),
        ReceiptError::ServerMismatch {
            expected: "srv-other".into(),
            found: "srv-test-0001".into()
        }
    );
}

#[test]
fn expired_window() {
    // Closes at expires_at (t(1800)) + execute_within (10m) = t(2400).
    let r = good();
    let closes = t(2400);
    assert!(verify_receipt(
        &r,
        &full_keyring(),
        Some(Timestamp::from_unix(closes.unix() - 1))
    )
    .is_ok());
    for now in [closes, t(1_000_000)] {
        assert_eq!(
            verify_receipt(&r, &full_keyring(), Some(now)).unwrap_err(),
            ReceiptError::Expired(closes)
        );
    }
}

#[test]
fn decision_refused_for_each_reason() {
    let h = standard_preview().sha256();
    let case = |decisions: Vec<ReceiptDecision>, keyring: approval_core::Keyring| {
        let mut r = good();
        r.decisions = decisions;
        verify_receipt(&r, &keyring, None).unwrap_err()
    };
    let refused = |index: usize, approver: &str, why: &'static str| ReceiptError::Decision {
        index,
        approver: approver.into(),
        why,
    };
    // The verifier does not know carol.
    assert_eq!(
        case(
            vec![
                decision("alice", Decision::Approve, &h),
                decision("carol", Decision::Approve, &h)
            ],
            keyring(&["alice", "bob"])
        ),
        refused(1, "carol", "approver is not in the verifier's keyring")
    );
    // Dave is known but not in the policy.
    assert_eq!(
        case(
            vec![
                decision("alice", Decision::Approve, &h),
                decision("dave", Decision::Approve, &h),
                decision("carol", Decision::Approve, &h)
            ],
            full_keyring()
        ),
        refused(1, "dave", "approver is not named by the policy")
    );
    // A signature over another hash.
    let other = Sha256Hex::digest(b"other");
    assert_eq!(
        case(
            vec![
                decision("alice", Decision::Approve, &other),
                decision("carol", Decision::Approve, &h)
            ],
            full_keyring()
        ),
        refused(0, "alice", "signature does not verify")
    );
    // The same approval twice.
    assert_eq!(
        case(
            vec![
                decision("alice", Decision::Approve, &h),
                decision("carol", Decision::Approve, &h),
                decision("alice", Decision::Approve, &h)
            ],
            full_keyring()
        ),
        refused(2, "alice", "the same key appears twice")
    );
    // The receipt states a key that is not the verifier's key for that name.
    let mut swapped = decision("carol", Decision::Approve, &h);
    swapped.key = public_key("erin").into();
    assert_eq!(
        case(
            vec![decision("alice", Decision::Approve, &h), swapped],
            full_keyring()
        ),
        refused(1, "carol", "public key differs from the verifier's keyring")
    );
}

#[test]
fn no_quorum_for_each_outcome() {
    let h = standard_preview().sha256();
    let with = |ds: Vec<ReceiptDecision>| {
        let mut r = good();
        r.decisions = ds;
        verify(&r).unwrap_err()
    };
    assert_eq!(
        with(vec![decision("carol", Decision::Approve, &h)]),
        ReceiptError::NoQuorum(QuorumOutcome::Pending {
            have: 1,
            need: 2,
            missing_groups: vec![]
        })
    );
    assert_eq!(
        with(vec![]),
        ReceiptError::NoQuorum(QuorumOutcome::Pending {
            have: 0,
            need: 2,
            missing_groups: vec![approval_core::quorum::GroupShortfall {
                group: vec![approver("carol")],
                have: 0,
                need: 1
            }]
        })
    );
    let mut ds = good().decisions;
    ds.push(decision("bob", Decision::Reject, &h));
    assert_eq!(with(ds), ReceiptError::NoQuorum(QuorumOutcome::Vetoed));
    let mut ds = good().decisions;
    ds.push(decision("bob", Decision::Revoke, &h));
    assert_eq!(with(ds), ReceiptError::NoQuorum(QuorumOutcome::Revoked));
}

#[test]
fn malformed_receipts_are_shape_or_preview_errors() {
    let text = serde_json::to_string(&good()).unwrap();
    for bad in [
        text.replacen("{", "{\"extra\":1,", 1),
        text.replacen("\"preview_sha256\"", "\"preview_sha\"", 1),
        text.replacen("\"decisions\":[", "\"decisions\":[{}", 1),
        text.replacen("\"approve\"", "\"approved\"", 1),
        text.replacen("{", "{\"policy\":{},", 1),
        "[]".to_owned(),
        String::new(),
    ] {
        assert!(
            matches!(Receipt::from_json_text(&bad), Err(ReceiptError::Shape(_))),
            "{bad}"
        );
    }
    let mut r = good();
    r.preview["v"] = json!(2);
    assert_eq!(
        verify(&r).unwrap_err(),
        ReceiptError::Preview(PreviewError::Version(2))
    );
    let mut r = good();
    r.preview["created_at"] = json!("yesterday");
    assert!(matches!(
        verify(&r).unwrap_err(),
        ReceiptError::Preview(PreviewError::Shape(_))
    ));
    let mut r = good();
    r.preview["payload"] = json!({"n": 9007199254740993u64});
    assert!(matches!(
        verify(&r).unwrap_err(),
        ReceiptError::Preview(PreviewError::Payload(_))
    ));
}

#[test]
fn decisions_in_a_receipt_are_plain_signed_decisions() {
    // A receipt decision, minus its public key, is what the approver sent.
    let r = good();
    let d = &r.decisions[0];
    let sent = SignedDecision {
        approver: d.approver.clone(),
        decision: d.decision,
        reason: d.reason.clone(),
        proof: d.proof.clone(),
    };
    assert_eq!(sent.verify(&d.key, &r.preview_sha256).map(|_| ()), Ok(()));
    assert_eq!(
        sorted_keys(&serde_json::to_value(d).unwrap()),
        ["approver", "decision", "public_key", "reason", "signature"]
    );
}
