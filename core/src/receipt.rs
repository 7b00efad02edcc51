//! Receipts: proof of approval that the system which acts can check offline.
//!
//! A receipt carries the preview, its hash, the canonical policy and the signed
//! decisions. [`verify_receipt`] trusts none of it: it recomputes the preview hash
//! from the preview, the policy hash from the policy, checks every signature
//! against the *verifier's* keyring, and recounts the quorum with
//! [`crate::quorum::evaluate`]. A [`VerifiedReceipt`] can only be made by it.
//!
//! Note that the policy travels inside the receipt, bound to the approvals by the
//! `policy_sha256` in the signed preview. A system that acts should also compare
//! [`VerifiedReceipt::policy_sha256`] (or the quorum it states) with the policy it
//! expects, so that a server cannot present approvals gathered under a weaker one.
//!
//! Quorum alone does not say that nothing stopped the approval: decisions stay
//! valid after a revoke or a veto. A receipt of an executed proposal also carries
//! the server's [`Attestation`] that it claimed the proposal while it was APPROVED
//! and executable; [`verify_receipt_attested`] requires it under the server key the
//! verifier trusts. [`verify_receipt`] checks the quorum only.

use crate::attestation::{Attestation, AttestationError};
use crate::ids::{ApproverName, ServerId, Sha256Hex};
use crate::json::{self, PayloadError};
use crate::keyring::{ApproverKey, Keyring, PublicKey};
use crate::message::{Decision, Proof, Signature, SignedDecision};
use crate::passkey::Assertion;
use crate::policy::{Policy, PolicyError};
use crate::preview::{Preview, PreviewError};
use crate::quorum::{evaluate, evaluate_with, Ignored, QuorumOutcome};
use crate::ssh::SshSignature;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

/// One signed decision as a receipt carries it.
///
/// On the wire: `{approver, public_key, decision, reason, signature}` for a key (as
/// receipts always were), `{approver, passkey_key, decision, reason, passkey}` for a
/// passkey, where `passkey_key` is the keyring line's fields after the name, and
/// `{approver, ssh_key, decision, reason, sshsig}` for an OpenSSH key (issue #35).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WireReceiptDecision", into = "WireReceiptDecision")]
pub struct ReceiptDecision {
    /// The approver's name.
    pub approver: ApproverName,
    /// Their credential, for the reader's convenience (the verifier's keyring decides).
    pub key: ApproverKey,
    /// The decision.
    pub decision: Decision,
    /// The signed reason.
    pub reason: String,
    /// The signature or the passkey assertion.
    pub proof: Proof,
}

/// The wire shape of [`ReceiptDecision`].
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireReceiptDecision {
    approver: ApproverName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    public_key: Option<PublicKey>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    passkey_key: Option<ApproverKey>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ssh_key: Option<ApproverKey>,
    decision: Decision,
    reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signature: Option<Signature>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    passkey: Option<Box<Assertion>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sshsig: Option<Box<SshSignature>>,
}

impl TryFrom<WireReceiptDecision> for ReceiptDecision {
    type Error = &'static str;
    fn try_from(w: WireReceiptDecision) -> Result<Self, Self::Error> {
        let key_sig = (w.public_key, w.signature);
        let passkey = (w.passkey_key, w.passkey);
        let ssh = (w.ssh_key, w.sshsig);
        let (key, proof) = match (key_sig, passkey, ssh) {
            ((Some(k), Some(s)), (None, None), (None, None)) => {
                (ApproverKey::Key(k), Proof::Signature(s))
            }
            ((None, None), (Some(k @ ApproverKey::Passkey(_)), Some(a)), (None, None)) => {
                (k, Proof::Passkey(a))
            }
            ((None, None), (None, None), (Some(k @ ApproverKey::Ssh(_)), Some(s))) => {
                (k, Proof::SshSig(s))
            }
            _ => return Err("a receipt decision has public_key and signature (a key), passkey_key and passkey (a passkey), or ssh_key and sshsig (an OpenSSH key)"),
        };
        Ok(Self {
            approver: w.approver,
            key,
            decision: w.decision,
            reason: w.reason,
            proof,
        })
    }
}

impl From<ReceiptDecision> for WireReceiptDecision {
    fn from(d: ReceiptDecision) -> Self {
        let (public_key, passkey_key, ssh_key) = match d.key {
            ApproverKey::Key(k) => (Some(k), None, None),
            k @ ApproverKey::Passkey(_) => (None, Some(k), None),
            k @ ApproverKey::Ssh(_) => (None, None, Some(k)),
        };
        let (signature, passkey, sshsig) = match d.proof {
            Proof::Signature(s) => (Some(s), None, None),
            Proof::Passkey(a) => (None, Some(a), None),
            Proof::SshSig(s) => (None, None, Some(s)),
        };
        Self {
            approver: d.approver,
            public_key,
            passkey_key,
            ssh_key,
            decision: d.decision,
            reason: d.reason,
            signature,
            passkey,
            sshsig,
        }
    }
}

impl ReceiptDecision {
    /// The decision as its approver sent it.
    pub fn signed(&self) -> SignedDecision {
        SignedDecision {
            approver: self.approver.clone(),
            decision: self.decision,
            reason: self.reason.clone(),
            proof: self.proof.clone(),
        }
    }
}

/// A receipt, as written to disk or sent over the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// The preview object.
    pub preview: Value,
    /// Its claimed hash.
    pub preview_sha256: Sha256Hex,
    /// The canonical policy.
    pub policy: Value,
    /// The decisions that counted.
    pub decisions: Vec<ReceiptDecision>,
    /// The server's execution attestation, once the proposal was claimed for
    /// execution (absent before, and on a receipt assembled from the decisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<Attestation>,
}

/// Why a receipt was refused.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum ReceiptError {
    /// The receipt is not valid JSON of the right shape.
    #[error("not a receipt: {0}")]
    Shape(String),
    /// The preview is malformed.
    #[error(transparent)]
    Preview(#[from] PreviewError),
    /// The preview does not hash to the claimed value.
    #[error("preview_sha256 mismatch: receipt claims {claimed}, preview hashes to {computed}")]
    HashMismatch {
        /// What the receipt says.
        claimed: Sha256Hex,
        /// What the preview hashes to.
        computed: Sha256Hex,
    },
    /// The policy is malformed.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The policy does not hash to the preview's `policy_sha256`.
    #[error(
        "policy does not match the preview's policy_sha256 {expected} (it hashes to {computed})"
    )]
    PolicyMismatch {
        /// From the preview.
        expected: Sha256Hex,
        /// Of the policy given.
        computed: Sha256Hex,
    },
    /// The policy is for another kind.
    #[error("policy governs kind {policy} but the preview is of kind {preview}")]
    KindMismatch {
        /// The policy's kind.
        policy: String,
        /// The preview's kind.
        preview: String,
    },
    /// The preview's cooldown is not its policy's: approvers signed one and the
    /// rules say another, so no execution window can be trusted.
    #[error("the preview's cooldown ({preview}) is not its policy's ({policy})")]
    CooldownMismatch {
        /// The preview's cooldown (`none` when absent).
        preview: String,
        /// The policy's cooldown (`none` when absent).
        policy: String,
    },
    /// The preview is from another server.
    #[error("preview is from server {found}, expected {expected}")]
    ServerMismatch {
        /// Expected.
        expected: String,
        /// Found.
        found: String,
    },
    /// A decision does not hold up.
    #[error("decision {index} by {approver:?} refused: {why}")]
    Decision {
        /// Position in `decisions`.
        index: usize,
        /// Who it claims to be from.
        approver: String,
        /// Why.
        why: &'static str,
    },
    /// The valid decisions do not reach the policy's quorum.
    #[error("quorum not reached: {0:?}")]
    NoQuorum(QuorumOutcome),
    /// Too late for this approval to be acted on.
    #[error("approval window closed at {0}")]
    Expired(Timestamp),
    /// The execution attestation is missing or does not hold up.
    #[error("execution attestation refused: {0}")]
    Attestation(#[from] AttestationError),
}

impl From<PayloadError> for ReceiptError {
    fn from(e: PayloadError) -> Self {
        ReceiptError::Shape(e.to_string())
    }
}

impl Receipt {
    /// Builds a receipt from a proposal's preview, policy and decisions, keeping
    /// the decisions that count (with the keyring's keys).
    pub fn build(
        preview: &Preview,
        policy: &Policy,
        keyring: &Keyring,
        decisions: &[SignedDecision],
    ) -> Self {
        Self::build_with(preview, policy, keyring, decisions, |k, d, h| {
            d.verify(k, h).is_ok()
        })
    }

    /// [`Receipt::build`] with the signature check supplied by the caller (see
    /// [`crate::quorum::evaluate_with`]): a server that memoises `verify_strict` need not
    /// redo it for every receipt.
    pub fn build_with(
        preview: &Preview,
        policy: &Policy,
        keyring: &Keyring,
        decisions: &[SignedDecision],
        verify: impl Fn(&ApproverKey, &SignedDecision, &Sha256Hex) -> bool,
    ) -> Self {
        let hash = preview.sha256();
        let tally = evaluate_with(policy, keyring, &hash, decisions, verify);
        let ignored: Vec<usize> = tally.ignored.iter().map(|(i, _)| *i).collect();
        let decisions = decisions
            .iter()
            .enumerate()
            .filter(|(i, _)| !ignored.contains(i))
            .filter_map(|(_, d)| {
                keyring
                    .for_proof(&d.approver, &d.proof)
                    .map(|k| ReceiptDecision {
                        approver: d.approver.clone(),
                        key: k.clone(),
                        decision: d.decision,
                        reason: d.reason.clone(),
                        proof: d.proof.clone(),
                    })
            })
            .collect();
        Self {
            preview: preview.to_value(),
            preview_sha256: hash,
            policy: policy.canonical_json().clone(),
            decisions,
            attestation: None,
        }
    }

    /// The receipt with the server's execution attestation.
    pub fn with_attestation(mut self, attestation: Option<Attestation>) -> Self {
        self.attestation = attestation;
        self
    }

    /// Reads a receipt from JSON text with the exact parser.
    pub fn from_json_text(text: &str) -> Result<Self, ReceiptError> {
        let v = json::parse_exact(text)?;
        serde_json::from_value(v).map_err(|e| ReceiptError::Shape(e.to_string()))
    }
}

/// A receipt that [`verify_receipt`] accepted. Only that function makes one.
#[derive(Debug, Clone)]
pub struct VerifiedReceipt {
    preview: Preview,
    preview_sha256: Sha256Hex,
    policy: Policy,
    approvers: Vec<ApproverName>,
    attested: Option<Attestation>,
}

impl VerifiedReceipt {
    /// The verified preview.
    pub fn preview(&self) -> &Preview {
        &self.preview
    }
    /// Its hash.
    pub fn preview_sha256(&self) -> Sha256Hex {
        self.preview_sha256
    }
    /// The policy it was approved under.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }
    /// `policy_sha256`, to compare with the policy the acting system expects.
    pub fn policy_sha256(&self) -> Sha256Hex {
        self.policy.sha256()
    }
    /// Who approved (each counted once).
    pub fn approvers(&self) -> &[ApproverName] {
        &self.approvers
    }
    /// The execution attestation, when it was verified under the server's key
    /// ([`verify_receipt_attested`]); `None` after a quorum-only verification.
    pub fn attestation(&self) -> Option<&Attestation> {
        self.attested.as_ref()
    }
}

/// Verifies a receipt from scratch against the verifier's keyring.
///
/// With `now`, also refuses a receipt whose approval window has certainly closed:
/// after the preview's `expires_at` plus the policy's `execute_within` (the latest
/// moment any approval of it could still have been executable).
pub fn verify_receipt(
    receipt: &Receipt,
    keyring: &Keyring,
    now: Option<Timestamp>,
) -> Result<VerifiedReceipt, ReceiptError> {
    verify_receipt_for_server(receipt, keyring, now, None)
}

/// [`verify_receipt`], also requiring the preview to come from `server_id`.
pub fn verify_receipt_for_server(
    receipt: &Receipt,
    keyring: &Keyring,
    now: Option<Timestamp>,
    server_id: Option<&ServerId>,
) -> Result<VerifiedReceipt, ReceiptError> {
    let preview = Preview::from_value(&receipt.preview)?;
    let computed = Sha256Hex::digest(&json::canonical_bytes(&receipt.preview));
    if computed != receipt.preview_sha256 {
        return Err(ReceiptError::HashMismatch {
            claimed: receipt.preview_sha256,
            computed,
        });
    }
    if let Some(expected) = server_id {
        if &preview.server_id != expected {
            return Err(ReceiptError::ServerMismatch {
                expected: expected.to_string(),
                found: preview.server_id.to_string(),
            });
        }
    }
    let policy = Policy::from_canonical_json(&receipt.policy)?;
    let policy_hash = Sha256Hex::digest(&json::canonical_bytes(&receipt.policy));
    if policy_hash != preview.policy_sha256 || policy.sha256() != preview.policy_sha256 {
        return Err(ReceiptError::PolicyMismatch {
            expected: preview.policy_sha256,
            computed: policy_hash,
        });
    }
    if policy.kind() != &preview.kind {
        return Err(ReceiptError::KindMismatch {
            policy: policy.kind().to_string(),
            preview: preview.kind.to_string(),
        });
    }
    if preview.cooldown != policy.spec().cooldown {
        let spell = |c: Option<crate::time::Seconds>| c.map_or("none".to_owned(), |c| c.to_spec());
        return Err(ReceiptError::CooldownMismatch {
            preview: spell(preview.cooldown),
            policy: spell(policy.spec().cooldown),
        });
    }
    if let Some(now) = now {
        let closes = preview.expires_at.plus(policy.spec().execute_within);
        if now >= closes {
            return Err(ReceiptError::Expired(closes));
        }
    }
    let signed: Vec<SignedDecision> = receipt.decisions.iter().map(|d| d.signed()).collect();
    for (i, d) in receipt.decisions.iter().enumerate() {
        if keyring.contains(&d.approver) && keyring.for_proof(&d.approver, &d.proof) != Some(&d.key)
        {
            return Err(ReceiptError::Decision {
                index: i,
                approver: d.approver.to_string(),
                why: "public key differs from the verifier's keyring",
            });
        }
    }
    let tally = evaluate(&policy, keyring, &receipt.preview_sha256, &signed);
    if let Some((i, why)) = tally.ignored.first() {
        return Err(ReceiptError::Decision {
            index: *i,
            approver: receipt.decisions[*i].approver.to_string(),
            why: match why {
                Ignored::UnknownApprover => "approver is not in the verifier's keyring",
                Ignored::NotInPolicy => "approver is not named by the policy",
                Ignored::BadSignature => "signature does not verify",
                Ignored::DuplicateKey => "the same key appears twice",
                Ignored::NotAccepted => {
                    "the policy does not accept this kind of signature (accept)"
                }
                Ignored::NoTouch => {
                    "the policy's require_touch / require_verify wants a security key's touch (and PIN) this signature does not show"
                }
            },
        });
    }
    if tally.outcome != QuorumOutcome::Reached {
        return Err(ReceiptError::NoQuorum(tally.outcome));
    }
    Ok(VerifiedReceipt {
        preview,
        preview_sha256: computed,
        policy,
        approvers: tally.approvals,
        attested: None,
    })
}

/// Verifies a receipt of an execution: the quorum against the verifier's keyring
/// (as [`verify_receipt`]), and the server's execution attestation under
/// `server_key`, the key the verifier trusts for the server (as `/healthz`
/// publishes it). The attestation must be for this exact server, proposal and
/// preview hash, with quorum reached during the proposal's life and the claim
/// inside `approved_at + execute_within`. A receipt without one is refused.
///
/// With `now`, the window that closes is the server's own:
/// `approved_at + execute_within` from the attestation, not the wider
/// `expires_at + execute_within` a quorum-only check must assume.
pub fn verify_receipt_attested(
    receipt: &Receipt,
    keyring: &Keyring,
    server_key: &PublicKey,
    now: Option<Timestamp>,
) -> Result<VerifiedReceipt, ReceiptError> {
    let mut v = verify_receipt_for_server(receipt, keyring, None, None)?;
    let a = receipt
        .attestation
        .as_ref()
        .ok_or(AttestationError::Missing)?;
    let p = &v.preview;
    let within = v.policy.spec().execute_within;
    a.verify(
        server_key,
        &p.server_id,
        &p.proposal_id,
        &v.preview_sha256,
        p.created_at,
        p.expires_at,
        within,
        p.cooldown,
    )?;
    if let Some(now) = now {
        let closes = a.approved_at.plus(within);
        if now >= closes {
            return Err(ReceiptError::Expired(closes));
        }
    }
    v.attested = Some(a.clone());
    Ok(v)
}
