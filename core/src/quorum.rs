//! The one function that counts signatures.
//!
//! Threshold counting written twice drifts apart, and only one copy gets the next
//! security fix; so the server at every evaluation, at the execute claim, and the
//! receipt verifier all call [`evaluate`] and nothing else counts.
//!
//! Rules: a decision counts only if its approver is in the keyring in force *and*
//! named by the policy, and its signature verifies (`verify_strict`) for this
//! preview hash and this decision word. Each key counts once, whatever name it
//! comes under. An approver who both approved and rejected counts as a rejection:
//! a "no" is never outvoted by the same person's earlier "yes".

use crate::ids::{ApproverName, Sha256Hex};
use crate::keyring::{ApproverKey, Keyring};
use crate::message::{Decision, SignedDecision};
use crate::policy::Policy;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// A group requirement not yet met.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupShortfall {
    /// The group's members.
    pub group: Vec<ApproverName>,
    /// Approvals from the group so far.
    pub have: u32,
    /// Approvals from the group needed.
    pub need: u32,
}

/// Where a proposal stands, by its signatures alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum QuorumOutcome {
    /// Not enough approvals yet.
    Pending {
        /// Distinct valid approvals.
        have: u32,
        /// Approvals needed.
        need: u32,
        /// Group requirements not yet met.
        missing_groups: Vec<GroupShortfall>,
    },
    /// Quorum and every group requirement met.
    Reached,
    /// Enough distinct rejections to end it.
    Vetoed,
    /// An approver revoked.
    Revoked,
}

/// Why a decision was not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ignored {
    /// The approver is not in the keyring in force.
    UnknownApprover,
    /// The approver is not named by the policy.
    NotInPolicy,
    /// The signature does not verify for this preview and decision.
    BadSignature,
    /// This key already counted.
    DuplicateKey,
    /// The policy does not accept this kind of signature (`accept`).
    NotAccepted,
    /// The policy's `require_touch` / `require_verify` wants a touch (and user
    /// verification) that this signature does not show.
    NoTouch,
}

/// The full count: the outcome, who counted, and what was ignored and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    /// The outcome.
    pub outcome: QuorumOutcome,
    /// Approvers whose approval counts.
    pub approvals: Vec<ApproverName>,
    /// Approvers whose rejection counts.
    pub rejections: Vec<ApproverName>,
    /// Approvers whose revoke counts.
    pub revocations: Vec<ApproverName>,
    /// Valid resolve decisions, in order.
    pub resolutions: Vec<(ApproverName, Decision)>,
    /// Index into the input and the reason, for each decision that did not count.
    pub ignored: Vec<(usize, Ignored)>,
}

/// Counts `decisions` on the preview `preview_sha256` under `policy` and `keyring`.
pub fn evaluate(
    policy: &Policy,
    keyring: &Keyring,
    preview_sha256: &Sha256Hex,
    decisions: &[SignedDecision],
) -> Tally {
    evaluate_with(
        policy,
        keyring,
        preview_sha256,
        decisions,
        |key, d, hash| d.verify(key, hash).is_ok(),
    )
}

/// [`evaluate`], with the signature check supplied by the caller.
///
/// This is not a second way of counting: every rule above is applied here, and
/// [`evaluate`] is this function with `verify_strict`. It exists for a caller that
/// memoises verification results (the server re-counts the same signatures on every
/// status poll). `verify` must answer exactly what [`SignedDecision::verify`] would for
/// that key, decision and hash; a cache keyed by all three does.
pub fn evaluate_with(
    policy: &Policy,
    keyring: &Keyring,
    preview_sha256: &Sha256Hex,
    decisions: &[SignedDecision],
    verify: impl Fn(&ApproverKey, &SignedDecision, &Sha256Hex) -> bool,
) -> Tally {
    let mut seen: BTreeSet<([u8; 32], Decision)> = BTreeSet::new();
    let mut seen_names: BTreeSet<(&ApproverName, Decision)> = BTreeSet::new();
    let mut approvals: Vec<ApproverName> = Vec::new();
    let mut rejections: Vec<ApproverName> = Vec::new();
    let mut revocations: Vec<ApproverName> = Vec::new();
    let mut resolutions = Vec::new();
    let mut ignored = Vec::new();
    for (i, d) in decisions.iter().enumerate() {
        if !keyring.contains(&d.approver) {
            ignored.push((i, Ignored::UnknownApprover));
            continue;
        }
        if !policy.is_approver(&d.approver) {
            ignored.push((i, Ignored::NotInPolicy));
            continue;
        }
        if !policy.accepts(d.proof.kind()) {
            ignored.push((i, Ignored::NotAccepted));
            continue;
        }
        if policy.presence_refusal(&d.proof).is_some() {
            ignored.push((i, Ignored::NoTouch));
            continue;
        }
        // The credential the proof names: their key, or that passkey of theirs.
        let Some(key) = keyring.for_proof(&d.approver, &d.proof) else {
            ignored.push((i, Ignored::BadSignature));
            continue;
        };
        if !verify(key, d, preview_sha256) {
            ignored.push((i, Ignored::BadSignature));
            continue;
        }
        // One approver counts once per decision, whichever of their credentials
        // signed (a key and a passkey are the same human).
        if !seen.insert((key.identity(), d.decision))
            || !seen_names.insert((&d.approver, d.decision))
        {
            ignored.push((i, Ignored::DuplicateKey));
            continue;
        }
        match d.decision {
            Decision::Approve => approvals.push(d.approver.clone()),
            Decision::Reject => rejections.push(d.approver.clone()),
            Decision::Revoke => revocations.push(d.approver.clone()),
            Decision::ResolveSucceeded | Decision::ResolveFailed => {
                resolutions.push((d.approver.clone(), d.decision))
            }
        }
    }
    // A rejection by the same approver cancels their approval.
    approvals.retain(|a| !rejections.contains(a));
    let spec = policy.spec();
    let outcome = if !revocations.is_empty() {
        QuorumOutcome::Revoked
    } else if rejections.len() as u32 >= spec.vetoes {
        QuorumOutcome::Vetoed
    } else {
        let missing_groups: Vec<GroupShortfall> = spec
            .require
            .iter()
            .filter_map(|r| {
                let have = r.group.iter().filter(|m| approvals.contains(m)).count() as u32;
                (have < r.count).then(|| GroupShortfall {
                    group: r.group.clone(),
                    have,
                    need: r.count,
                })
            })
            .collect();
        let have = approvals.len() as u32;
        if have >= spec.quorum && missing_groups.is_empty() {
            QuorumOutcome::Reached
        } else {
            QuorumOutcome::Pending {
                have,
                need: spec.quorum,
                missing_groups,
            }
        }
    };
    Tally {
        outcome,
        approvals,
        rejections,
        revocations,
        resolutions,
        ignored,
    }
}
