//! MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663) over on-quorum
//! proposals (issue #33).
//!
//! A task is a proposal the agent made by calling an exposed kind, and its id is the
//! proposal's id: nothing is kept beside the store, so tasks survive a restart and
//! are the same on every instance sharing a PostgreSQL store. A task is bound to the
//! agent that made it: any other id, another agent's included, is "unknown" (-32602),
//! so a task id tells nobody else anything.
//!
//! | proposal                      | task                                            |
//! |-------------------------------|-------------------------------------------------|
//! | PENDING, APPROVED, EXECUTING  | `working`, with a `statusMessage` a human can act on |
//! | SUCCEEDED                     | `completed`, the downstream tool's result inlined |
//! | REJECTED, EXPIRED, REVOKED, POLICY_CHANGED, FAILED, OUTCOME_UNKNOWN | `completed`, `isError: true`, with the code |
//! | WITHDRAWN                     | `cancelled`                                      |
//!
//! `failed` is left for protocol faults, as the extension says: no state of a
//! proposal is one.

use super::McpHandler;
use crate::record::ProposalRecord;
use crate::service::ServiceError;
use approval_core::ids::AgentName;
use approval_core::status::Status;
use rmcp::model::{
    CallToolResult, ContentBlock, DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use rmcp::ErrorData as McpError;
use serde_json::{json, Value};

/// How often a client is asked to poll a working task.
pub const POLL_INTERVAL_MS: u64 = 2000;

/// The key SEP-2848 (tool approval, draft) puts on every completed approval task.
pub const DISPOSITION_META: &str = "io.modelcontextprotocol/tool-approval-disposition";

/// The answer to an id that is not one of this agent's tasks.
fn unknown_task(id: &str) -> McpError {
    McpError::invalid_params(
        format!(
            "unknown task {id:?}: no task of yours has this id (a task is a call you made to a tool that needs approval; pass its taskId unchanged)"
        ),
        None,
    )
}

/// SEP-2848's word for how an approval task ended.
fn disposition(status: Status) -> &'static str {
    match status {
        Status::Succeeded => "approved-executed",
        Status::Failed => "execution-error",
        Status::OutcomeUnknown => "outcome-unknown",
        _ => "denied-not-executed",
    }
}

impl McpHandler {
    /// The agent's on-quorum proposal `id`, or "unknown task".
    pub(super) fn task_record(
        &self,
        agent: &AgentName,
        id: &str,
    ) -> Result<ProposalRecord, McpError> {
        self.svc
            .on_quorum_of(agent, id)
            .map_err(|_| unknown_task(id))
    }

    /// The task's state as `tasks/get` (and the call that made it) tells it.
    pub(super) fn task_of(&self, rec: &ProposalRecord) -> Result<DetailedTask, ServiceError> {
        let now = self.svc.now();
        let life = rec.lifecycle.at(now);
        // Unlimited would be as true (the store keeps the record), but the window is
        // what a client needs: the policy's ttl while waiting for quorum, then until
        // the end of the execution window.
        let until = life.executable_until.unwrap_or(rec.preview.expires_at);
        let ttl_ms = (until.unix() - rec.preview.created_at.unix()).max(0) as u64 * 1000;
        let task = Task::new(
            rec.id().as_str(),
            TaskStatus::Working,
            rec.preview.created_at.to_rfc3339(),
            rec.updated_at.to_rfc3339(),
        )
        .with_ttl_ms(ttl_ms)
        .with_poll_interval_ms(POLL_INTERVAL_MS);
        let payload = match life.status {
            Status::Pending | Status::Approved | Status::Executing => {
                let words = self.working_words(rec)?;
                return Ok(DetailedTask::new(
                    task.with_status_message(words),
                    TaskPayload::Working,
                ));
            }
            Status::Withdrawn => TaskPayload::Cancelled,
            status => TaskPayload::Completed {
                result: self.completed_result(rec, status)?,
            },
        };
        let words = self.describe(rec, None)?.message;
        Ok(DetailedTask::new(task.with_status_message(words), payload))
    }

    /// What a person can act on while the task works: who must still approve, the
    /// hash prefix they check, the command to run; or that it runs.
    fn working_words(&self, rec: &ProposalRecord) -> Result<String, ServiceError> {
        let now = self.svc.now();
        Ok(match rec.lifecycle.at(now).status {
            Status::Pending => {
                let out = self.describe(rec, None)?;
                let need = out
                    .required
                    .as_ref()
                    .map_or(0, |r| r.quorum.saturating_sub(r.have));
                let approvers = out.required.map(|r| r.approvers.join(", ")).unwrap_or_default();
                format!(
                    "Waiting for {need} more approval(s) from {approvers}. Proposal {} ({}), preview hash starts {}: approvers run `signer-cli approve {}`. Nothing has run.",
                    rec.id(),
                    rec.preview.kind,
                    rec.preview_sha256.prefix(8),
                    rec.id()
                )
            }
            Status::Approved => match rec.lifecycle.cooling_down_until(now) {
                Some(from) => format!(
                    "Approved; the policy's cooldown runs until {from}, and any approver can still revoke or reject it. Then the gate runs it once."
                ),
                None => "Approved: the gate is starting it (once).".into(),
            },
            _ => "Running: the gate has claimed it and runs it once. Cancelling now changes nothing.".into(),
        })
    }

    /// The inlined result of a finished task: the downstream tool's own result when it
    /// succeeded and was kept whole, else the proposal's view as a tool result
    /// (`isError` unless it succeeded), with the disposition in `_meta`.
    fn completed_result(
        &self,
        rec: &ProposalRecord,
        status: Status,
    ) -> Result<JsonObject, ServiceError> {
        let whole = rec
            .result
            .as_ref()
            .and_then(|r| r.output.as_ref())
            .filter(|o| o.get("content").is_some() && o.get("truncated").is_none())
            .and_then(|o| serde_json::from_value::<CallToolResult>(o.clone()).ok());
        let mut result = match (status, whole) {
            (Status::Succeeded, Some(r)) => r,
            (Status::Succeeded, None) => {
                let out = self.describe(rec, None)?;
                CallToolResult::structured(serde_json::to_value(out).unwrap_or(Value::Null))
            }
            _ => {
                let out = self.describe(rec, None)?;
                let mut r = CallToolResult::structured_error(
                    serde_json::to_value(&out).unwrap_or(Value::Null),
                );
                r.content = vec![ContentBlock::text(format!("{}: {}", out.code, out.message))];
                r
            }
        };
        // A stored downstream result was read without its kind; the inlined one says it.
        result.result_type = Some(rmcp::model::ResultType::COMPLETE);
        let mut meta = result.meta.take().unwrap_or_default();
        meta.insert(DISPOSITION_META.into(), json!(disposition(status)));
        if disposition(status) == "denied-not-executed" {
            // SEP-2643: refused for good; nothing ran.
            meta.insert(
                "io.modelcontextprotocol/authorization".into(),
                json!({"reason": "insufficient_authorization", "remediation": "unavailable"}),
            );
        }
        result.meta = Some(meta);
        match serde_json::to_value(result) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(ServiceError::new(
                approval_core::Code::Internal,
                "cannot encode the task's result",
            )),
        }
    }

    /// `tasks/get`.
    pub(super) fn get_task_for(
        &self,
        agent: &AgentName,
        id: &str,
    ) -> Result<GetTaskResult, McpError> {
        let rec = self.task_record(agent, id)?;
        let task = self
            .task_of(&rec)
            .map_err(|e| McpError::internal_error(e.message, None))?;
        Ok(GetTaskResult::new(task))
    }

    /// `tasks/cancel`: withdraws the proposal while it is PENDING. Later (approved,
    /// claimed, finished) it changes nothing; the acknowledgement is the same, as the
    /// extension asks, and `tasks/get` says what happened.
    pub(super) async fn cancel_task_for(
        &self,
        agent: &AgentName,
        id: &str,
    ) -> Result<(), McpError> {
        let rec = self.task_record(agent, id)?;
        if rec.lifecycle.at(self.svc.now()).status != Status::Pending {
            tracing::info!(%id, status = %rec.status(), "tasks/cancel after quorum: nothing changes");
            return Ok(());
        }
        match self.svc.withdraw(agent, id).await {
            Ok(_) => {}
            // Raced with a decision (approved or rejected meanwhile): nothing changes.
            Err(e) if e.storage_failure.is_none() => {
                tracing::info!(%id, code = %e.code, "tasks/cancel refused: {}", e.message)
            }
            Err(e) => return Err(McpError::internal_error(e.message, None)),
        }
        self.svc
            .settle()
            .await
            .map_err(|e| McpError::internal_error(e.message, None))
    }
}
