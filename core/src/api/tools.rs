//! The tools' structured output (`structuredContent` of every `approval_*` call, and
//! the output schema published in `tools/list`): what `server/src/mcp.rs` serialises
//! and an agent's client may deserialise.
//!
//! With the `schema` feature (the server's) the types derive `JsonSchema`; `code` is
//! published as a string, as it always was.
//!
//! Every struct's fields are in the order of their names. A `serde_json::Value`
//! prints its keys in that order, so an output prints the same bytes from its struct
//! as from a `Value` of it: the server's direct paths print the struct once, and
//! rmcp's path prints a `Value`, and the two answers stay byte for byte the same
//! (`tests::a_struct_prints_as_its_value_does` holds that).

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
    /// Who may approve.
    pub approvers: Vec<String>,
    /// Valid approvals so far.
    pub have: u32,
    /// Group requirements not yet met.
    pub missing_groups: Vec<GroupOut>,
    /// Distinct approvals needed.
    pub quorum: u32,
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
    /// Bounded excerpt of what happened.
    pub detail: String,
    /// When it finished.
    pub finished_at: String,
    /// SUCCEEDED, FAILED or UNKNOWN.
    pub outcome: String,
    /// The structured result, where the executor has one: an `mcp` executor's tool
    /// result (`content`, `structuredContent`, `isError`), bounded in size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Digest of what was read back, if any.
    pub readback_sha256: Option<String>,
}

/// One proposal in a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ListItem {
    /// Created.
    pub created_at: String,
    /// Expires (while pending).
    pub expires_at: String,
    /// Kind.
    pub kind: String,
    /// Hash approvers sign.
    pub preview_sha256: String,
    /// Id.
    pub proposal_id: String,
    /// Status now.
    pub status: String,
    /// Summary.
    pub summary: String,
}

/// Every tool's structured result (and refusal). Fields not relevant to a tool are omitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ToolOutput {
    /// Approvals so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvals: Option<Vec<DecisionOut>>,
    /// Stable machine-readable code: branch on this.
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub code: Code,
    /// Whether approval_execute would run it now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executable: Option<bool>,
    /// From when an approved proposal may be executed, under a policy with a
    /// cooldown: quorum time plus the cooldown. Before it, approval_execute is refused
    /// COOLING_DOWN and approvers can still revoke or veto.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executable_from: Option<String>,
    /// Until when an approved proposal may be executed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executable_until: Option<String>,
    /// When a pending proposal expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// What happened and what to do next.
    pub message: String,
    /// After a call to an exposed kind without the tasks extension (issue #33): what
    /// to do next, in words (wait with approval_status; the gate runs it on quorum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// Listing: pass this as cursor to get the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// The full canonical preview.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview: Option<Value>,
    /// The hash the approvers sign; pass it to approval_execute.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview_sha256: Option<String>,
    /// The proposal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposal_id: Option<String>,
    /// Listing: one page, newest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposals: Option<Vec<ListItem>>,
    /// Rejections so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejections: Option<Vec<DecisionOut>>,
    /// What quorum needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required: Option<RequiredOut>,
    /// The execution result, once run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<ResultOut>,
    /// Whether calling again later may succeed. False after any terminal code: do not retry.
    pub retry_allowed: bool,
    /// Its status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field of every struct present (and lists of two).
    fn full() -> ToolOutput {
        let d = |a: &str| DecisionOut {
            approver: a.into(),
            at: "2026-12-07T23:00:00Z".into(),
        };
        let item = |id: &str| ListItem {
            proposal_id: id.into(),
            kind: "shell.exec".into(),
            status: "PENDING".into(),
            summary: "s \"q\"".into(),
            preview_sha256: "ab".repeat(32),
            created_at: "c".into(),
            expires_at: "e".into(),
        };
        ToolOutput {
            code: Code::QuorumReached,
            message: "m\n".into(),
            retry_allowed: true,
            proposal_id: Some("p".into()),
            status: Some("APPROVED".into()),
            preview_sha256: Some("cd".repeat(32)),
            preview: Some(serde_json::json!({"kind": "k", "payload": {"b": 1, "a": [2.5, null]}})),
            expires_at: Some("x".into()),
            executable_until: Some("u".into()),
            executable_from: Some("f".into()),
            executable: Some(true),
            approvals: Some(vec![d("alice"), d("bob")]),
            rejections: Some(vec![d("carol")]),
            required: Some(RequiredOut {
                quorum: 2,
                have: 1,
                approvers: vec!["alice".into(), "bob".into()],
                missing_groups: vec![GroupOut {
                    group: vec!["ops".into()],
                    have: 0,
                    need: 1,
                }],
            }),
            result: Some(ResultOut {
                outcome: "SUCCEEDED".into(),
                detail: "d".into(),
                readback_sha256: Some("ef".repeat(32)),
                output: Some(serde_json::json!({"isError": false, "content": []})),
                finished_at: "t".into(),
            }),
            proposals: Some(vec![item("p1"), item("p2")]),
            next_cursor: Some("n".into()),
            next: Some("wait".into()),
        }
    }

    /// What the field order rests on: a `Value` prints its keys in byte order. A
    /// dependency that turned on serde_json's `preserve_order` would end that (and
    /// the order PROTOCOL.md promises for the text mirror) on both paths at once, so
    /// the side-by-side tests would not see it: this one does.
    #[test]
    fn a_value_prints_its_keys_in_byte_order() {
        let v = serde_json::json!({"b": 1, "a_": {"z": 2, "_": 3}, "a": 4});
        assert_eq!(v.to_string(), r#"{"a":4,"a_":{"_":3,"z":2},"b":1}"#);
    }

    #[test]
    fn a_struct_prints_as_its_value_does() {
        let full = full();
        let as_value = serde_json::to_value(&full).expect("value").to_string();
        assert_eq!(serde_json::to_string(&full).expect("struct"), as_value);
        let bare = ToolOutput::new(Code::PendingQuorum, "m", false);
        let as_value = serde_json::to_value(&bare).expect("value").to_string();
        assert_eq!(serde_json::to_string(&bare).expect("struct"), as_value);
    }
}
