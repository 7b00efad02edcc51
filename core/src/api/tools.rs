//! The tools' structured output (`structuredContent` of every `approval_*` call, and
//! the output schema published in `tools/list`): what `server/src/mcp.rs` serialises
//! and an agent's client may deserialise.
//!
//! With the `schema` feature (the server's) the types derive `JsonSchema`; `code` is
//! published as a string, as it always was.

use crate::Code;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who decided and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DecisionOut {
    /// Approver name.
    pub approver: String,
    /// When the server accepted the decision (RFC 3339).
    pub at: String,
}

/// What quorum needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RequiredOut {
    /// Distinct approvals needed.
    pub quorum: u32,
    /// Valid approvals so far.
    pub have: u32,
    /// Who may approve.
    pub approvers: Vec<String>,
    /// Group requirements not yet met.
    pub missing_groups: Vec<GroupOut>,
}

/// A group requirement not yet met.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GroupOut {
    /// Members.
    pub group: Vec<String>,
    /// Approvals from the group so far.
    pub have: u32,
    /// Needed.
    pub need: u32,
}

/// The stored result of an execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ResultOut {
    /// SUCCEEDED, FAILED or UNKNOWN.
    pub outcome: String,
    /// Bounded excerpt of what happened.
    pub detail: String,
    /// Digest of what was read back, if any.
    pub readback_sha256: Option<String>,
    /// The structured result, where the executor has one: an `mcp` executor's tool
    /// result (`content`, `structuredContent`, `isError`), bounded in size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// When it finished.
    pub finished_at: String,
}

/// One proposal in a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ListItem {
    /// Id.
    pub proposal_id: String,
    /// Kind.
    pub kind: String,
    /// Status now.
    pub status: String,
    /// Summary.
    pub summary: String,
    /// Hash approvers sign.
    pub preview_sha256: String,
    /// Created.
    pub created_at: String,
    /// Expires (while pending).
    pub expires_at: String,
}

/// Every tool's structured result (and refusal). Fields not relevant to a tool are omitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ToolOutput {
    /// Stable machine-readable code: branch on this.
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub code: Code,
    /// What happened and what to do next.
    pub message: String,
    /// Whether calling again later may succeed. False after any terminal code: do not retry.
    pub retry_allowed: bool,
    /// The proposal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposal_id: Option<String>,
    /// Its status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The hash the approvers sign; pass it to approval_execute.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview_sha256: Option<String>,
    /// The full canonical preview.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview: Option<Value>,
    /// When a pending proposal expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Until when an approved proposal may be executed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executable_until: Option<String>,
    /// From when an approved proposal may be executed, under a policy with a
    /// cooldown: quorum time plus the cooldown. Before it, approval_execute is refused
    /// COOLING_DOWN and approvers can still revoke or veto.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executable_from: Option<String>,
    /// Whether approval_execute would run it now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executable: Option<bool>,
    /// Approvals so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvals: Option<Vec<DecisionOut>>,
    /// Rejections so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejections: Option<Vec<DecisionOut>>,
    /// What quorum needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required: Option<RequiredOut>,
    /// The execution result, once run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<ResultOut>,
    /// Listing: one page, newest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposals: Option<Vec<ListItem>>,
    /// Listing: pass this as cursor to get the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// After a call to an exposed kind without the tasks extension (issue #33): what
    /// to do next, in words (wait with approval_status; the gate runs it on quorum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

impl ToolOutput {
    /// An output with only the three fields every answer has.
    pub fn new(code: Code, message: impl Into<String>, retry_allowed: bool) -> Self {
        ToolOutput {
            code,
            message: message.into(),
            retry_allowed,
            proposal_id: None,
            status: None,
            preview_sha256: None,
            preview: None,
            expires_at: None,
            executable_until: None,
            executable_from: None,
            executable: None,
            approvals: None,
            rejections: None,
            required: None,
            result: None,
            proposals: None,
            next_cursor: None,
            next: None,
        }
    }
}
