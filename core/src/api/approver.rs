//! The approver API's answers (`docs/approver-api.md`, PROTOCOL §9): what
//! `server/src/approver_api.rs` serialises and signer-cli reads.

use crate::message::SignedDecision;
use crate::quorum::GroupShortfall;
use crate::Timestamp;
use crate::{ApproverName, Code, Kind, ProposalId, PublicKey, ServerId, Sha256Hex, Status};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An error answer: `{code, message}`, with the proposal's `status` where there is one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable code.
    pub code: Code,
    /// What was wrong and what to do.
    pub message: String,
    /// The proposal's status, where the error concerns one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
}

/// The server's count of a proposal's quorum (a client shows it, never decides by it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuorumView {
    /// Valid approvals so far.
    pub have: u32,
    /// Approvals needed.
    pub need: u32,
    /// Group requirements not yet met.
    #[serde(default)]
    pub missing_groups: Vec<GroupShortfall>,
    /// Who approved (approvals that count).
    #[serde(default)]
    pub approvers: Vec<ApproverName>,
    /// Who rejected (rejections that count).
    #[serde(default)]
    pub rejections: Vec<ApproverName>,
}

/// A decision as recorded: the signed decision as received, and when it was accepted
/// (the time is not signed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionView {
    /// The signed decision.
    #[serde(flatten)]
    pub signed: SignedDecision,
    /// When the server accepted it.
    pub at: Timestamp,
}

/// `ProposalView`: a proposal as an approver reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProposalView {
    /// The proposal.
    pub proposal_id: ProposalId,
    /// Its status now.
    pub status: Status,
    /// The preview, as signed over (`preview_sha256` is its hash).
    pub preview: Value,
    /// SHA-256 of the preview's canonical JSON.
    pub preview_sha256: Sha256Hex,
    /// The canonical policy JSON (its hash is the preview's `policy_sha256`).
    pub policy: Value,
    /// The server's count.
    pub quorum: QuorumView,
    /// The decisions so far.
    pub decisions: Vec<DecisionView>,
    /// Until when an approved proposal may run (`null` before approval).
    pub executable_until: Option<Timestamp>,
    /// From when it may run (quorum plus the policy's cooldown); only under a cooldown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable_from: Option<Timestamp>,
    /// What the executor reported (`null` until it ran).
    pub result: Option<Value>,
}

/// `GET /v1/proposals`: one page of views, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProposalPage {
    /// The views.
    pub proposals: Vec<ProposalView>,
    /// Pass back unchanged for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// `POST /v1/proposals/{id}/decisions`, a decision recorded now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decided {
    /// `true`.
    pub recorded: bool,
    /// `false`.
    pub already_recorded: bool,
    /// The proposal after the decision.
    pub proposal: ProposalView,
}

/// The same decision sent again: it only learns that it was recorded (a decision body
/// verifies forever, so a replay must not read the proposal).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlreadyRecorded {
    /// `false`.
    pub recorded: bool,
    /// `true`.
    pub already_recorded: bool,
    /// The proposal.
    pub proposal_id: ProposalId,
    /// Its status now.
    pub status: Status,
}

/// A kind the server serves no proposals of, and why (never the operator's specifics).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DisabledKindView {
    /// The kind.
    pub kind: Kind,
    /// Approvers its policy names that the keyring lacks.
    pub missing_approvers: Vec<ApproverName>,
    /// A stable word for the cause.
    pub cause: String,
    /// A sentence for people.
    pub reason: String,
}

/// Whether the store accepts writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// Serving (200).
    Ok,
    /// The store failed and the server stopped writing (503); `why` says what.
    Failed,
}

/// `GET /healthz[?challenge=C]`: what the server is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// The store's id.
    pub server_id: ServerId,
    /// The identity key (standard base64 of 32 bytes).
    pub server_key: PublicKey,
    /// Kinds nothing can be proposed of.
    pub disabled_kinds: Vec<DisabledKindView>,
    /// Notification counters (`queued`, `delivered`, `failed`, `dropped`).
    pub notifications: Value,
    /// With a challenge: the identity key's signature over the hello line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// `ok` or `failed`.
    pub status: HealthStatus,
    /// Why the store failed, with `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// The data of the `reauth` event that ends a signed event stream on purpose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReauthEvent {
    /// `UNAUTHORIZED`.
    pub code: Code,
    /// A stable word: why the stream ended.
    pub reason: String,
    /// A sentence for people.
    pub message: String,
}

/// `POST /v1/config/proposals` (issue #35): the whole new configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposeConfig {
    /// The files of the next configuration version.
    pub bundle: crate::governance::Bundle,
}

/// The answer to `POST /v1/config/proposals`: the `gate.config` proposal made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigProposed {
    /// The proposal the administrators approve (`signer-cli approve ID`).
    pub proposal_id: ProposalId,
    /// Its preview hash.
    pub preview_sha256: Sha256Hex,
    /// The version it replaces.
    pub from_version: u64,
    /// The version it becomes.
    pub to_version: u64,
    /// Set when it only removes this administrator: one approval fewer, never theirs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emergency_removal: Option<ApproverName>,
    /// What changes, as lines to read.
    pub diff: Vec<String>,
    /// Approvals needed.
    pub need: u32,
    /// Who may approve.
    pub approvers: Vec<ApproverName>,
}
