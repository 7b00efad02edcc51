//! The one function that counts signatures: every rule and every reason a
//! decision is not counted.

mod common;

use approval_core::quorum::{GroupShortfall, Ignored};
use approval_core::{evaluate, Decision, QuorumOutcome, Sha256Hex, SignedDecision, Tally};
use common::*;

fn names(v: &[approval_core::ApproverName]) -> Vec<&str> {
    v.iter().map(|n| n.as_str()).collect()
}

/// Counts under the standard policy (2 of alice, bob, carol; carol required; one
/// veto) and the full keyring.
fn count(decisions: &[SignedDecision]) -> Tally {
    let p = standard_policy();
    evaluate(&p, &full_keyring(), &standard_preview().sha256(), decisions)
}

fn h() -> Sha256Hex {
    standard_preview().sha256()
}

#[test]
fn quorum_needs_the_count_and_every_group() {
    let t = count(&[]);
    assert_eq!(
        t.outcome,
        QuorumOutcome::Pending {
            have: 0,
            need: 2,
            missing_groups: vec![GroupShortfall {
                group: vec![approver("carol")],
                have: 0,
                need: 1
            }]
        }
    );
    // Two approvals, but not carol: still pending, and it says why.
    let t = count(&[approve("alice", &h()), approve("bob", &h())]);
    assert_eq!(
        t.outcome,
        QuorumOutcome::Pending {
            have: 2,
            need: 2,
            missing_groups: vec![GroupShortfall {
                group: vec![approver("carol")],
                have: 0,
                need: 1
            }]
        }
    );
    // Carol alone: the group is met, the count is not.
    let t = count(&[approve("carol", &h())]);
    assert_eq!(
        t.outcome,
        QuorumOutcome::Pending {
            have: 1,
            need: 2,
            missing_groups: vec![]
        }
    );
    let t = count(&[approve("alice", &h()), approve("carol", &h())]);
    assert_eq!(t.outcome, QuorumOutcome::Reached);
    assert_eq!(names(&t.approvals), ["alice", "carol"]);
    assert!(t.ignored.is_empty());
}

#[test]
fn several_groups_must_all_be_met() {
    let p = policy(
        2,
        &["alice", "bob", "carol", "dave", "erin"],
        2,
        &[(&["alice", "bob"], 1), (&["carol", "dave", "erin"], 2)],
    );
    let kr = full_keyring();
    let run = |who: &[&str]| {
        let ds: Vec<_> = who.iter().map(|w| approve(w, &h())).collect();
        evaluate(&p, &kr, &h(), &ds).outcome
    };
    assert_eq!(
        run(&["carol", "dave"]),
        QuorumOutcome::Pending {
            have: 2,
            need: 2,
            missing_groups: vec![GroupShortfall {
                group: vec![approver("alice"), approver("bob")],
                have: 0,
                need: 1
            }]
        }
    );
    assert_eq!(
        run(&["alice", "bob", "erin"]),
        QuorumOutcome::Pending {
            have: 3,
            need: 2,
            missing_groups: vec![GroupShortfall {
                group: vec![approver("carol"), approver("dave"), approver("erin")],
                have: 1,
                need: 2
            }]
        }
    );
    assert_eq!(run(&["bob", "dave", "erin"]), QuorumOutcome::Reached);
}

#[test]
fn vetoes_end_it_and_count_distinct_approvers() {
    let p2 = policy(2, &["alice", "bob", "carol"], 2, &[]);
    let kr = full_keyring();
    let reject = |w: &str| sign(w, Decision::Reject, &h(), "no");
    // vetoes = 1 (standard): one rejection is enough, even against a quorum.
    let t = count(&[
        approve("alice", &h()),
        approve("carol", &h()),
        reject("bob"),
    ]);
    assert_eq!(t.outcome, QuorumOutcome::Vetoed);
    assert_eq!(names(&t.rejections), ["bob"]);
    // vetoes = 2: one is not, the same one twice is not, two distinct are.
    let t = evaluate(&p2, &kr, &h(), &[reject("alice")]);
    assert!(matches!(t.outcome, QuorumOutcome::Pending { have: 0, .. }));
    let t = evaluate(&p2, &kr, &h(), &[reject("alice"), reject("alice")]);
    assert!(matches!(t.outcome, QuorumOutcome::Pending { .. }));
    assert_eq!(t.ignored, [(1, Ignored::DuplicateKey)]);
    let t = evaluate(
        &p2,
        &kr,
        &h(),
        &[
            reject("alice"),
            sign("alice", Decision::Reject, &h(), "other reason"),
        ],
    );
    assert!(matches!(t.outcome, QuorumOutcome::Pending { .. }));
    assert_eq!(t.ignored, [(1, Ignored::DuplicateKey)]);
    let t = evaluate(&p2, &kr, &h(), &[reject("alice"), reject("bob")]);
    assert_eq!(t.outcome, QuorumOutcome::Vetoed);
    // A rejection from outside the policy is no veto.
    let t = count(&[sign("dave", Decision::Reject, &h(), "")]);
    assert_eq!(t.ignored, [(0, Ignored::NotInPolicy)]);
    assert!(matches!(t.outcome, QuorumOutcome::Pending { .. }));
}

#[test]
fn reject_cancels_the_same_approvers_approve_in_either_order() {
    let p = policy(2, &["alice", "bob", "carol"], 2, &[]);
    let kr = full_keyring();
    let yes = approve("alice", &h());
    let no = sign("alice", Decision::Reject, &h(), "changed my mind");
    for ds in [
        vec![yes.clone(), no.clone(), approve("bob", &h())],
        vec![no.clone(), yes.clone(), approve("bob", &h())],
    ] {
        let t = evaluate(&p, &kr, &h(), &ds);
        assert_eq!(names(&t.approvals), ["bob"]);
        assert_eq!(names(&t.rejections), ["alice"]);
        assert_eq!(
            t.outcome,
            QuorumOutcome::Pending {
                have: 1,
                need: 2,
                missing_groups: vec![]
            }
        );
        assert!(t.ignored.is_empty());
    }
}

#[test]
fn a_revoke_ends_it_whatever_else_was_said() {
    let rv = sign("bob", Decision::Revoke, &h(), "stop");
    let t = count(&[approve("alice", &h()), approve("carol", &h()), rv.clone()]);
    assert_eq!(t.outcome, QuorumOutcome::Revoked);
    assert_eq!(names(&t.revocations), ["bob"]);
    // Revoked wins over Vetoed: it is the more specific "stop".
    let t = count(&[sign("alice", Decision::Reject, &h(), ""), rv]);
    assert_eq!(t.outcome, QuorumOutcome::Revoked);
    // A revoke signed for another proposal does not count.
    let t = count(&[
        approve("alice", &h()),
        approve("carol", &h()),
        sign(
            "bob",
            Decision::Revoke,
            &Sha256Hex::digest(b"other"),
            "stop",
        ),
    ]);
    assert_eq!(t.outcome, QuorumOutcome::Reached);
    assert_eq!(t.ignored, [(2, Ignored::BadSignature)]);
}

#[test]
fn every_ignored_reason_with_its_index() {
    let kr = keyring(&["alice", "bob", "carol", "dave"]);
    let p = standard_policy();
    let mut forged = approve("bob", &h());
    forged.proof = approve("alice", &h()).proof;
    let mut tampered = sign("carol", Decision::Approve, &h(), "ok");
    tampered.reason = "ok!".into();
    let mut turned = approve("carol", &h());
    turned.decision = Decision::Reject;
    let ds = vec![
        approve("erin", &h()),                               // 0: not in the keyring
        approve("dave", &h()),                               // 1: in the keyring, not in the policy
        forged,   // 2: alice's signature under bob's name
        tampered, // 3: reason changed after signing
        turned,   // 4: approval presented as rejection
        approve("alice", &Sha256Hex::digest(b"another")), // 5: signed for another preview
        approve("alice", &h()), // 6: counts
        approve("alice", &h()), // 7: the same again
        sign("alice", Decision::Approve, &h(), "once more"), // 8: same key, same decision
    ];
    let t = evaluate(&p, &kr, &h(), &ds);
    assert_eq!(
        t.ignored,
        [
            (0, Ignored::UnknownApprover),
            (1, Ignored::NotInPolicy),
            (2, Ignored::BadSignature),
            (3, Ignored::BadSignature),
            (4, Ignored::BadSignature),
            (5, Ignored::BadSignature),
            (7, Ignored::DuplicateKey),
            (8, Ignored::DuplicateKey),
        ]
    );
    assert_eq!(names(&t.approvals), ["alice"]);
    assert!(t.rejections.is_empty());
}

#[test]
fn signatures_are_rechecked_against_the_keyring_in_force() {
    // Alice's line now carries a new key: her old signatures stop counting.
    let rotated = approval_core::Keyring::parse(&format!(
        "alice ed25519 {}\ncarol ed25519 {}\n",
        public_key("erin"),
        public_key("carol")
    ))
    .unwrap();
    let ds = [approve("alice", &h()), approve("carol", &h())];
    let p = standard_policy();
    assert_eq!(
        evaluate(&p, &full_keyring(), &h(), &ds).outcome,
        QuorumOutcome::Reached
    );
    let t = evaluate(&p, &rotated, &h(), &ds);
    assert_eq!(t.ignored, [(0, Ignored::BadSignature)]);
    assert!(matches!(t.outcome, QuorumOutcome::Pending { have: 1, .. }));
    // Alice removed from the keyring altogether.
    let t = evaluate(&p, &keyring(&["carol", "bob"]), &h(), &ds);
    assert_eq!(t.ignored, [(0, Ignored::UnknownApprover)]);
}

#[test]
fn resolutions_are_listed_and_do_not_count_toward_quorum() {
    let t = count(&[
        sign("alice", Decision::ResolveSucceeded, &h(), "it went out"),
        sign("bob", Decision::ResolveFailed, &h(), "bounced"),
        sign("bob", Decision::ResolveFailed, &h(), "bounced"),
    ]);
    assert_eq!(
        t.resolutions,
        [
            (approver("alice"), Decision::ResolveSucceeded),
            (approver("bob"), Decision::ResolveFailed)
        ]
    );
    assert_eq!(t.ignored, [(2, Ignored::DuplicateKey)]);
    assert!(matches!(t.outcome, QuorumOutcome::Pending { have: 0, .. }));
}

#[test]
fn outcome_serialises_with_a_tag() {
    let t = count(&[approve("alice", &h())]);
    assert_eq!(
        serde_json::to_value(&t.outcome).unwrap(),
        serde_json::json!({"outcome": "pending", "have": 1, "need": 2,
            "missing_groups": [{"group": ["carol"], "have": 0, "need": 1}]})
    );
    assert_eq!(
        serde_json::to_value(QuorumOutcome::Reached).unwrap(),
        serde_json::json!({"outcome": "reached"})
    );
    assert_eq!(
        serde_json::to_value(Ignored::DuplicateKey).unwrap(),
        serde_json::json!("duplicate_key")
    );
}
