//! What the store keeps for each proposal.
//!
//! A record is the preview (the signed truth), its lifecycle, the decisions received
//! and the execution result. The canonical policy it was made under is stored once per
//! policy hash beside the records (see `Store::put_policy`), not copied into each one:
//! a million proposals of one kind share one policy. Records carry a schema version so
//! a future format can be read next to this one, and a revision that every update
//! bumps: the store's compare-and-swap is on the revision.

use approval_core::attestation::Attestation;
use approval_core::message::SignedDecision;
use approval_core::status::{Lifecycle, Outcome, Status};
use approval_core::{Preview, ProposalId, Sha256Hex, Timestamp};
use serde::{Deserialize, Serialize};

/// The record format written by this build.
pub const SCHEMA_VERSION: u32 = 1;

/// One proposal, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProposalRecord {
    /// Record format version.
    pub schema: u32,
    /// Bumped by every update; the compare-and-swap key.
    pub revision: u64,
    /// The canonical preview approvers sign.
    pub preview: Preview,
    /// Its hash (kept so reads need not re-hash).
    pub preview_sha256: Sha256Hex,
    /// Status and deadlines.
    pub lifecycle: Lifecycle,
    /// Every decision accepted, in arrival order.
    pub decisions: Vec<StoredDecision>,
    /// The executor's report, once it ran.
    pub result: Option<ExecResult>,
    /// The server's execution attestation, signed and written in the same
    /// compare-and-swap as the APPROVED to EXECUTING claim (absent before it, and in
    /// records written by earlier builds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<Attestation>,
    /// When the record last changed.
    pub updated_at: Timestamp,
}

/// A decision with the time the server accepted it (the time is not signed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredDecision {
    /// The signed decision as received.
    #[serde(flatten)]
    pub signed: SignedDecision,
    /// When it was accepted.
    pub at: Timestamp,
}

/// What an executor reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecResult {
    /// How it ended.
    pub outcome: Outcome,
    /// A bounded excerpt of what happened (output, response, error).
    pub detail: String,
    /// SHA-256 of what was read back, for executors that read back.
    pub readback_sha256: Option<Sha256Hex>,
    /// The structured result, where the executor has one (an `mcp` tool's result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
    /// When it finished.
    pub finished_at: Timestamp,
}

impl ProposalRecord {
    /// The proposal id.
    pub fn id(&self) -> &ProposalId {
        &self.preview.proposal_id
    }

    /// The stored status (expiry not applied).
    pub fn status(&self) -> Status {
        self.lifecycle.status
    }

    /// The signed decisions, without arrival times.
    pub fn signed_decisions(&self) -> Vec<SignedDecision> {
        self.decisions.iter().map(|d| d.signed.clone()).collect()
    }

    /// The next revision of this record with a new lifecycle.
    pub fn with_lifecycle(&self, lifecycle: Lifecycle, now: Timestamp) -> Self {
        Self {
            revision: self.revision + 1,
            lifecycle,
            updated_at: now,
            ..self.clone()
        }
    }
}
