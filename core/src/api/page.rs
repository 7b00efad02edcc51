//! The gate's approver page and enrolment page (issue #34, PROTOCOL §11): what
//! `server/src/approver_page/` serialises and the pages' scripts read.

use crate::approver_key::SignatureKind;
use crate::message::Decision;
use crate::{ApproverName, ProposalId, Sha256Hex, Status, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `GET /approve/<id>/state`: everything the approver page shows and acts on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageState {
    /// The proposal.
    pub proposal_id: ProposalId,
    /// Its status now.
    pub status: Status,
    /// Changes whenever the proposal does (its stored revision and status): the page
    /// re-renders, and clears what the human typed, when it changes.
    pub version: String,
    /// The preview object, exactly: the page recomputes its hash (RFC 8785, SHA-256)
    /// and refuses to sign when it differs from `preview_sha256`.
    pub preview: Value,
    /// The hash the server holds for it.
    pub preview_sha256: Sha256Hex,
    /// The proposal exactly as `signer-cli show` prints it (escaped, with look-alike
    /// warnings), without colour.
    pub rendered: String,
    /// Which signatures the kind's policy counts.
    pub accept: Vec<SignatureKind>,
    /// The policy's approvers who hold a passkey, and where it is used.
    pub passkeys: Vec<PagePasskey>,
    /// The decisions the proposal's state allows now (`approve`, `reject`, `revoke`).
    pub actions: Vec<Decision>,
    /// The decisions recorded so far.
    pub decisions: Vec<PageDecision>,
    /// Approvals that count, and how many are needed.
    pub quorum: PageQuorum,
}

/// A passkey approver of the proposal's policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PagePasskey {
    /// Their name.
    pub approver: ApproverName,
    /// The credential id, base64url without padding (`allowCredentials`).
    pub credential_id: String,
    /// The relying party id (`rpId`).
    pub rp_id: String,
}

/// A recorded decision, as the page lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageDecision {
    /// Who.
    pub approver: ApproverName,
    /// What.
    pub decision: Decision,
    /// When the server accepted it.
    pub at: Timestamp,
}

/// Approvals that count, and how many are needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageQuorum {
    /// Valid approvals so far.
    pub have: u32,
    /// Approvals needed.
    pub need: u32,
}

/// `GET /enroll/<token>/options`: what the enrolment page passes to
/// `navigator.credentials.create`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrolmentOptions {
    /// The approver name the keyring line will carry.
    pub name: ApproverName,
    /// The relying party id.
    pub rp_id: String,
    /// The relying party's display name.
    pub rp_name: String,
    /// The origin the page must be on.
    pub origin: String,
    /// The WebAuthn user handle, base64url.
    pub user_id: String,
    /// The WebAuthn challenge, base64url: bound to this one link.
    pub challenge: String,
    /// When the link stops working.
    pub expires_at: Timestamp,
}

/// `POST /enroll/<token>`: the new credential, every field base64url without padding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrolmentRequest {
    /// The credential's raw id.
    pub credential_id: String,
    /// `response.attestationObject`.
    pub attestation_object: String,
    /// `response.clientDataJSON`.
    pub client_data_json: String,
}

/// The answer to a successful enrolment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Enrolled {
    /// The line to add to the keyring file (the server added nothing).
    pub keyring_line: String,
}
