//! How a proposal is described to the agent: the one `ToolOutput` every tool that
//! names a proposal answers with, and the words that say what to do next.

use super::McpHandler;
use crate::record::ProposalRecord;
use crate::service::ServiceError;
use approval_core::api::tools::{DecisionOut, GroupOut, RequiredOut, ResultOut, ToolOutput};
use approval_core::quorum::{GroupShortfall, QuorumOutcome};
use approval_core::status::Status;

impl McpHandler {
    /// The full picture of one proposal for the agent.
    pub(super) fn describe(
        &self,
        rec: &ProposalRecord,
        message: Option<String>,
    ) -> Result<ToolOutput, ServiceError> {
        let now = self.svc.now();
        let life = rec.lifecycle.at(now);
        let (tally, policy) = self.svc.tally(rec)?;
        let spec = policy.spec();
        let at_of = |name: &approval_core::ApproverName, d: approval_core::Decision| {
            rec.decisions
                .iter()
                .find(|x| &x.signed.approver == name && x.signed.decision == d)
                .map(|x| x.at.to_string())
                .unwrap_or_default()
        };
        let approvals: Vec<DecisionOut> = tally
            .approvals
            .iter()
            .map(|a| DecisionOut {
                approver: a.to_string(),
                at: at_of(a, approval_core::Decision::Approve),
            })
            .collect();
        let rejections: Vec<DecisionOut> = tally
            .rejections
            .iter()
            .map(|a| DecisionOut {
                approver: a.to_string(),
                at: at_of(a, approval_core::Decision::Reject),
            })
            .collect();
        let missing: Vec<GroupShortfall> = match &tally.outcome {
            QuorumOutcome::Pending { missing_groups, .. } => missing_groups.clone(),
            _ => vec![],
        };
        let code = rec.lifecycle.code_at(now);
        let default_message = match life.status {
            Status::Pending => {
                let need = spec.quorum.saturating_sub(approvals.len() as u32);
                let groups = missing
                    .iter()
                    .map(|g| format!(" (including {} of {})", g.need - g.have, g.group.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")))
                    .collect::<String>();
                format!(
                    "Waiting for {need} more approval(s){groups} from {}. Tell your human: proposal {} ({}) waits for approval; \
                     the preview hash starts {}. Approvers run `signer-cli approve {}`. Poll approval_status with wait_seconds.",
                    spec.approvers.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", "),
                    rec.id(),
                    rec.preview.kind,
                    rec.preview_sha256.prefix(8),
                    rec.id()
                )
            }
            Status::Approved if rec.preview.on_quorum() => match rec.lifecycle.cooling_down_until(now) {
                Some(from) => format!(
                    "Quorum reached; the policy's cooldown runs until {from}, and approvers can still revoke or veto it until then. \
                     The gate then runs it itself (it was proposed to run on quorum): do not call approval_execute. Poll approval_status for the result."
                ),
                None => "Quorum reached: the gate runs it itself (it was proposed to run on quorum). Do not call approval_execute; poll approval_status for the result.".into(),
            },
            Status::Approved => match rec.lifecycle.cooling_down_until(now) {
                Some(from) => format!(
                    "Quorum reached, but the policy's cooldown runs until {from}: approval_execute is refused (COOLING_DOWN) until then, \
                     and approvers can still revoke or veto it. Poll approval_status with wait_seconds: it answers when the cooldown ends."
                ),
                None => "Quorum reached. Call approval_execute once with this proposal_id and preview_sha256.".into(),
            },
            Status::Executing => "The action is running; poll approval_status. Do not execute again.".into(),
            Status::Succeeded => "The action ran and succeeded. It will never run again.".into(),
            Status::Failed => "The action ran and failed; it will not be retried. Tell your human; prepare a new proposal if wanted.".into(),
            Status::OutcomeUnknown => "The outcome is unknown (interrupted or timed out); a human must check and resolve it. Do not retry.".into(),
            Status::Rejected => "Approvers rejected this proposal. Do not retry it; tell your human.".into(),
            Status::Expired => "The proposal expired. Prepare a new one if the action is still wanted.".into(),
            Status::Revoked => "An approver revoked the approval. Do not retry it; tell your human.".into(),
            Status::Withdrawn => "The proposal was withdrawn.".into(),
            Status::PolicyChanged => "The policy for this kind changed; prepare the action again under the new policy.".into(),
        };
        Ok(ToolOutput {
            code,
            message: message.unwrap_or(default_message),
            retry_allowed: matches!(
                life.status,
                Status::Pending | Status::Approved | Status::Executing
            ),
            proposal_id: Some(rec.id().to_string()),
            status: Some(life.status.to_string()),
            preview_sha256: Some(rec.preview_sha256.to_string()),
            preview: None,
            expires_at: Some(rec.preview.expires_at.to_string()),
            executable_until: life.executable_until.map(|t| t.to_string()),
            executable_from: life.executable_from.map(|t| t.to_string()),
            executable: Some(rec.lifecycle.executable(now)),
            approvals: Some(approvals),
            rejections: Some(rejections),
            required: Some(RequiredOut {
                quorum: spec.quorum,
                have: tally.approvals.len() as u32,
                approvers: spec.approvers.iter().map(|a| a.to_string()).collect(),
                missing_groups: missing
                    .into_iter()
                    .map(|g| GroupOut {
                        group: g.group.iter().map(|n| n.to_string()).collect(),
                        have: g.have,
                        need: g.need,
                    })
                    .collect(),
            }),
            result: rec.result.as_ref().map(|r| ResultOut {
                outcome: serde_json::to_value(r.outcome)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                detail: r.detail.clone(),
                readback_sha256: r.readback_sha256.map(|h| h.to_string()),
                output: r.output.clone(),
                finished_at: r.finished_at.to_string(),
            }),
            proposals: None,
            next_cursor: None,
            next: None,
        })
    }
}
