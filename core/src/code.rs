//! Stable, machine-readable result codes.
//!
//! Agents branch on these strings and other programs depend on them, so they are an
//! interface: a variant may be added, never renamed.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Every code the service reports to an agent or an approver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum Code {
    /// The proposal waits for more approvals.
    PendingQuorum,
    /// Quorum reached: the proposal may be executed once.
    QuorumReached,
    /// Quorum reached, but the policy's cooldown has not ended: the proposal becomes
    /// executable at `executable_from`, and approvers can still revoke or veto it
    /// until then. Nothing was consumed; execute again from that time.
    CoolingDown,
    /// The action ran and succeeded.
    Succeeded,
    /// The action ran and failed.
    Failed,
    /// The action already ran (or was claimed); it is never run again.
    AlreadyExecutedNoReplay,
    /// Another call is running the action right now.
    ExecutionInProgress,
    /// The preview hash given does not match the proposal.
    PreviewMismatch,
    /// The proposal's time ran out.
    Expired,
    /// Approvers vetoed the proposal.
    Rejected,
    /// An approver revoked the approval before it ran.
    Revoked,
    /// The agent withdrew the proposal.
    Withdrawn,
    /// The policy for the proposal's kind changed after it was made.
    PolicyChanged,
    /// The process died while the action ran; a human must say what happened.
    OutcomeUnknown,
    /// No proposal with that id (for this caller).
    UnknownProposal,
    /// No policy for that action kind: the service fails closed.
    UnknownKind,
    /// The kind has a policy, but it names an approver whose key is not in the keyring
    /// (removed, perhaps as compromised): nothing of this kind can be proposed until
    /// the policy or the keyring is fixed. The service fails closed.
    KindDisabled,
    /// The payload cannot be carried exactly, is too large, or breaks the policy's schema.
    InvalidPayload,
    /// A tool's arguments are missing, of the wrong type, or unknown.
    InvalidArguments,
    /// A decision or read was refused: bad signature, unknown key, key outside the policy.
    InvalidSignature,
    /// The decision's kind of signature (a key, a passkey) is not one the policy of
    /// the proposal's kind accepts (`accept`): decide the other way.
    SignatureNotAccepted,
    /// A request was malformed (approver API).
    BadRequest,
    /// Authentication is missing or wrong.
    Unauthorized,
    /// The decision is not allowed in the proposal's current state.
    InvalidTransition,
    /// The same signed decision was already recorded.
    AlreadyRecorded,
    /// A limit was hit (pending proposals, watchers, body size).
    LimitExceeded,
    /// The server failed to do its part (storage, I/O).
    Internal,
    /// A call that reports no state of a proposal went through (`approval_list`).
    Ok,
}

impl Code {
    /// The wire spelling, e.g. `PENDING_QUORUM`.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::PendingQuorum => "PENDING_QUORUM",
            Code::QuorumReached => "QUORUM_REACHED",
            Code::CoolingDown => "COOLING_DOWN",
            Code::Succeeded => "SUCCEEDED",
            Code::Failed => "FAILED",
            Code::AlreadyExecutedNoReplay => "ALREADY_EXECUTED_NO_REPLAY",
            Code::ExecutionInProgress => "EXECUTION_IN_PROGRESS",
            Code::PreviewMismatch => "PREVIEW_MISMATCH",
            Code::Expired => "EXPIRED",
            Code::Rejected => "REJECTED",
            Code::Revoked => "REVOKED",
            Code::Withdrawn => "WITHDRAWN",
            Code::PolicyChanged => "POLICY_CHANGED",
            Code::OutcomeUnknown => "OUTCOME_UNKNOWN",
            Code::UnknownProposal => "UNKNOWN_PROPOSAL",
            Code::UnknownKind => "UNKNOWN_KIND",
            Code::KindDisabled => "KIND_DISABLED",
            Code::InvalidPayload => "INVALID_PAYLOAD",
            Code::InvalidArguments => "INVALID_ARGUMENTS",
            Code::InvalidSignature => "INVALID_SIGNATURE",
            Code::SignatureNotAccepted => "SIGNATURE_NOT_ACCEPTED",
            Code::BadRequest => "BAD_REQUEST",
            Code::Unauthorized => "UNAUTHORIZED",
            Code::InvalidTransition => "INVALID_TRANSITION",
            Code::AlreadyRecorded => "ALREADY_RECORDED",
            Code::LimitExceeded => "LIMIT_EXCEEDED",
            Code::Internal => "INTERNAL",
            Code::Ok => "OK",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
