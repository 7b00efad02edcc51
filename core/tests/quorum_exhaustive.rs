//! `quorum::evaluate`, exhaustively within a bound (issue #37; kani is not installed
//! here, so every case is enumerated instead of proven symbolically).
//!
//! The bound: three approvers in the policy: alice and bob with one Ed25519 key
//! each, dana with two credentials (her Ed25519 key and an ES256 passkey). The
//! decisions ("atoms"): alice approve, alice approve again (a second signature by
//! the same key, another reason), alice reject, bob approve, bob reject, and dana
//! approve and reject with each of her two credentials: 9 atoms. Every sequence of
//! 0 to 5 atoms, repeats and every order included: 1 + 9 + 81 + 729 + 6,561 +
//! 59,049 = 66,430 sequences, each counted under two policies (quorum 2 with 2
//! vetoes, quorum 1 with 3 vetoes, so a single reject never vetoes by itself and
//! the "reject cancels the same approver's approve" rule is what decides): 132,860
//! cases, against an oracle written from the rules in `quorum.rs`'s doc.
//!
//! What it shows, for every case: one key counts once (repeats and a second
//! signature by the same key are `DuplicateKey`); a name counts once whichever of
//! its credentials signed; a reject by an approver always wins over their approve,
//! whichever came first; the outcome is the oracle's.
//!
//! Every atom's signature is checked with the real verifier first; the sequences
//! of up to 3 atoms (820 per policy) run through [`evaluate`] itself (real
//! `verify_strict` and P-256 verification for each decision), the rest through
//! [`evaluate_with`] with those verification results remembered, which is what the
//! server does (its verify cache) and is the same function.

mod common;
mod passkey_maker;

use approval_core::message::{passkey_challenge, Decision, Proof, SignedDecision};
use approval_core::passkey::{b64url, Assertion};
use approval_core::quorum::{evaluate, evaluate_with, Ignored, QuorumOutcome, Tally};
use approval_core::{ApproverName, Keyring, Policy, Sha256Hex};
use common::*;
use passkey_maker::{Maker, CREDENTIAL_ID, ORIGIN, RP_ID, UP, UV};
use std::collections::BTreeSet;

const LONGEST: usize = 5;
const FULLY_VERIFIED: usize = 3;

fn dana_passkey(m: &Maker, d: Decision, h: &Sha256Hex) -> SignedDecision {
    let challenge = passkey_challenge(d, h, "").unwrap();
    let cdj = format!(
        r#"{{"type":"webauthn.get","challenge":"{}","origin":"{ORIGIN}","crossOrigin":false}}"#,
        b64url(&challenge)
    );
    let a: Assertion = m.assertion_with_client_data(cdj.as_bytes(), UP | UV, &[]);
    SignedDecision {
        approver: approver("dana"),
        decision: d,
        reason: String::new(),
        proof: Proof::Passkey(Box::new(a)),
    }
}

fn policy_of(quorum: u32, vetoes: u32) -> Policy {
    let toml = policy_toml(quorum, &["alice", "bob", "dana"], vetoes, &[])
        .replace("[executor]", "accept = [\"key\", \"passkey\"]\n[executor]");
    Policy::parse_toml("email.send.toml", &toml).unwrap()
}

/// What the rules say, computed apart from `evaluate`: the names that approved and
/// the names that rejected (each once), a rejection cancelling the same name's
/// approval, then revoke (none here), veto, quorum.
fn oracle(
    p: &Policy,
    atoms: &[&SignedDecision],
) -> (QuorumOutcome, BTreeSet<String>, BTreeSet<String>) {
    let names = |d: Decision| -> BTreeSet<String> {
        atoms
            .iter()
            .filter(|a| a.decision == d)
            .map(|a| a.approver.as_str().to_owned())
            .collect()
    };
    let rejected = names(Decision::Reject);
    let approved: BTreeSet<String> = names(Decision::Approve)
        .difference(&rejected)
        .cloned()
        .collect();
    let spec = p.spec();
    let outcome = if rejected.len() as u32 >= spec.vetoes {
        QuorumOutcome::Vetoed
    } else if approved.len() as u32 >= spec.quorum {
        QuorumOutcome::Reached
    } else {
        QuorumOutcome::Pending {
            have: approved.len() as u32,
            need: spec.quorum,
            missing_groups: vec![],
        }
    };
    (outcome, approved, rejected)
}

fn as_set(v: &[ApproverName], what: &str) -> BTreeSet<String> {
    let set: BTreeSet<String> = v.iter().map(|n| n.as_str().to_owned()).collect();
    assert_eq!(
        set.len(),
        v.len(),
        "a name counted twice among the {what}: {v:?}"
    );
    set
}

fn check_case(p: &Policy, atoms: &[&SignedDecision], t: &Tally) {
    let (outcome, approved, rejected) = oracle(p, atoms);
    let case = || {
        atoms
            .iter()
            .map(|a| {
                format!(
                    "{} {:?} by {}",
                    a.approver.as_str(),
                    a.decision,
                    a.proof.kind()
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(t.outcome, outcome, "{:?}", case());
    // One name once, one key once: the counted sets are the oracle's, without repeats.
    assert_eq!(as_set(&t.approvals, "approvals"), approved, "{:?}", case());
    assert_eq!(
        as_set(&t.rejections, "rejections"),
        rejected,
        "{:?}",
        case()
    );
    // A reject always wins over the same approver's approve, in either order.
    for r in &t.rejections {
        assert!(
            !t.approvals.contains(r),
            "{r} both approved and rejected counts as an approval: {:?}",
            case()
        );
    }
    // Everything not counted is a duplicate: of a key, or of a name under another credential.
    let distinct: BTreeSet<(String, Decision)> = atoms
        .iter()
        .map(|a| (a.approver.as_str().to_owned(), a.decision))
        .collect();
    assert_eq!(
        t.ignored.len(),
        atoms.len() - distinct.len(),
        "{:?}",
        case()
    );
    assert!(
        t.ignored
            .iter()
            .all(|(_, why)| *why == Ignored::DuplicateKey),
        "{:?}",
        case()
    );
}

#[test]
fn every_sequence_of_up_to_five_decisions_counts_each_key_and_name_once_and_a_reject_wins() {
    let m = Maker::es256();
    let keyring_text = keyring_text(&["alice", "bob", "dana"])
        + &format!(
            "dana {} {} rp={RP_ID} cred={}\n",
            m.key.algorithm().keyring_word(),
            m.key.to_base64(),
            b64url(CREDENTIAL_ID)
        );
    let kr = Keyring::parse(&keyring_text).unwrap();
    assert_eq!(kr.credentials(&approver("dana")).len(), 2);
    let h = standard_preview().sha256();
    let atoms: Vec<SignedDecision> = vec![
        approve("alice", &h),
        sign("alice", Decision::Approve, &h, "again"),
        sign("alice", Decision::Reject, &h, "no"),
        approve("bob", &h),
        sign("bob", Decision::Reject, &h, "no"),
        approve("dana", &h),
        dana_passkey(&m, Decision::Approve, &h),
        sign("dana", Decision::Reject, &h, "no"),
        dana_passkey(&m, Decision::Reject, &h),
    ];
    // Every atom is a valid decision on its own, by the real verifier.
    let policies = [policy_of(2, 2), policy_of(1, 3)];
    for a in &atoms {
        let t = evaluate(&policies[0], &kr, &h, std::slice::from_ref(a));
        assert!(
            t.ignored.is_empty(),
            "{a:?} does not count alone: {:?}",
            t.ignored
        );
    }
    // The verification results, remembered per atom (by its signature bytes'
    // position in `atoms`: every atom is distinct).
    let verified =
        |_: &approval_core::keyring::ApproverKey, d: &SignedDecision, hash: &Sha256Hex| {
            *hash == h && atoms.iter().any(|a| a == d)
        };

    let mut cases = 0usize;
    let mut seq: Vec<usize> = Vec::new();
    // Every sequence of length 0..=LONGEST, as numbers in base 9.
    for len in 0..=LONGEST {
        let total = atoms.len().pow(len as u32);
        for mut n in 0..total {
            seq.clear();
            for _ in 0..len {
                seq.push(n % atoms.len());
                n /= atoms.len();
            }
            let chosen: Vec<&SignedDecision> = seq.iter().map(|&i| &atoms[i]).collect();
            let owned: Vec<SignedDecision> = chosen.iter().map(|d| (*d).clone()).collect();
            for p in &policies {
                let t = if len <= FULLY_VERIFIED {
                    evaluate(p, &kr, &h, &owned)
                } else {
                    evaluate_with(p, &kr, &h, &owned, verified)
                };
                check_case(p, &chosen, &t);
                cases += 1;
            }
        }
    }
    println!(
        "quorum_exhaustive: {cases} cases (sequences of 0..={LONGEST} of 9 decisions, 2 policies)"
    );
    assert_eq!(cases, 2 * (1 + 9 + 81 + 729 + 6_561 + 59_049));
}
