//! `approval_execute`: checks the hash, re-checks the rules the approvers signed
//! under, claims the proposal (with its attestation) in one compare-and-swap, runs
//! the executor once in its own task while renewing the claim's lease, and stores
//! the outcome.
//!
//! May import the store, the record, the executors, `disabled_kind` and core.

use super::error::transition_refusal;
use super::{Service, ServiceError};
use crate::audit::AuditKind;
use crate::config::Config;
use crate::executor;
use crate::record::{ExecResult, ProposalRecord};
use approval_core::ids::AgentName;
use approval_core::quorum::QuorumOutcome;
use approval_core::receipt::Receipt;
use approval_core::status::Outcome;
use approval_core::{Code, Kind, KindState, ProposalId, Sha256Hex};
use serde_json::json;
use std::sync::Arc;

/// Aborts a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The refusal of `approval_execute` for a proposal whose kind waits for its schema:
/// KIND_DISABLED, retry allowed, the proposal left as it is. `None` otherwise (see
/// [`crate::disabled_kind`]).
fn refusal_while_awaiting_schema(config: &Config, kind: &Kind) -> Option<ServiceError> {
    let KindState::Disabled(d) = config.policies.state(kind) else {
        return None;
    };
    if !crate::disabled_kind::awaits_schema(d) {
        return None;
    }
    tracing::warn!(kind = %kind, reason = %d.reason(), "execute refused: the kind waits for its downstream schema");
    Some(ServiceError {
        retry_allowed: true,
        ..ServiceError::new(
            Code::KindDisabled,
            format!(
                "{}. The proposal is kept as it is: try again once the operator has the downstream back and reloads",
                crate::disabled_kind::public_reason(d)
            ),
        )
    })
}

impl Service {
    /// `approval_execute`: checks the hash, re-checks policy and quorum, claims,
    /// runs the executor once and stores the outcome.
    pub async fn execute(
        self: &Arc<Self>,
        agent: &AgentName,
        id: &str,
        preview_sha256: &str,
    ) -> Result<ProposalRecord, ServiceError> {
        // As stored now: an approval made on another instance a moment ago counts.
        let rec = self.get_for_agent_latest(agent, id).await?;
        self.catch_up_for(&rec).await;
        let now = self.now();
        if Sha256Hex::parse(preview_sha256).ok() != Some(rec.preview_sha256) {
            return Err(ServiceError::new(
                Code::PreviewMismatch,
                format!("preview_sha256 does not match this proposal (its hash starts {}): execute exactly what was approved, using the hash from approval_prepare", rec.preview_sha256.prefix(8)),
            )
            .about(&rec, now)
            .retry(true));
        }
        // The rules must be the ones the approvers signed under (policy and keys); if
        // they changed, the proposal ends as POLICY_CHANGED and the claim below refuses.
        // Otherwise the claim starts from the record just read, not a second read: its
        // compare-and-swap refuses it if anything changed it since, and the retry starts
        // from what is stored. After a voiding it starts from what is stored, so that its
        // refusal names the status the proposal now has.
        if let Some(e) = refusal_while_awaiting_schema(&self.config(), &rec.preview.kind) {
            return Err(e.about(&rec, now));
        }
        let base = if self.rules_hold(&self.config(), &rec)? {
            rec
        } else {
            self.void_one(rec.id()).await?;
            self.get_now(rec.id()).await?
        };
        let claimed = self
            .transition_from(base, |cur, now| {
                let life = cur.lifecycle.claim(now).map_err(|e| transition_refusal(cur, now, e))?;
                let in_force = self.policy_in_force(&self.config(), cur);
                if in_force != Some(cur.preview.policy_sha256) {
                    return Err(ServiceError::new(
                        Code::PolicyChanged,
                        "the policy for this kind changed after it was proposed; prepare it again under the new policy",
                    )
                    .about(cur, now));
                }
                let (tally, _) = self.tally(cur)?;
                if tally.outcome != QuorumOutcome::Reached {
                    return Err(ServiceError::new(
                        Code::PolicyChanged,
                        "the approvals no longer reach quorum under the keyring in force (an approver's key was removed or replaced); prepare the action again",
                    )
                    .about(cur, now));
                }
                let approved_at = cur.lifecycle.approved_at.ok_or_else(|| {
                    ServiceError::new(Code::Internal, "an APPROVED proposal without approved_at: cannot attest its execution").about(cur, now)
                })?;
                let mut next = cur.with_lifecycle(life, now);
                // Signed and stored in the same compare-and-swap as the claim, before the
                // effect runs: the receipt the executor sees and the one read later agree.
                next.attestation = Some(self.identity.attest(cur.id(), &cur.preview_sha256, approved_at, now));
                Ok(Some((next.clone(), vec![Self::event(AuditKind::Executing, &next, now, json!({"agent": agent}))])))
            })
            .await?;
        // Run the effect in its own task: if the caller goes away, the outcome is still recorded.
        let svc = self.clone();
        let run = async move { svc.run_claimed(claimed).await };
        let handle = match &self.runtime {
            Some(rt) => rt.spawn(run),
            None => tokio::spawn(run),
        };
        match handle.await {
            Ok(r) => r,
            Err(e) => Err(ServiceError::new(
                Code::Internal,
                format!("executor task failed: {e}"),
            )),
        }
    }

    async fn run_claimed(&self, claimed: ProposalRecord) -> Result<ProposalRecord, ServiceError> {
        let policy = self.policy_of(&claimed)?;
        let receipt = Receipt::build_with(
            &claimed.preview,
            &policy,
            &self.config().keyring,
            &claimed.signed_decisions(),
            |k, d, h| self.verified.verify(k, d, h),
        )
        .with_attestation(claimed.attestation.clone());
        let cfg = policy.spec().executor.clone();
        let executor = executor_label(&cfg);
        let started = std::time::Instant::now();
        let exec = self.exec.clone();
        let _renewing = self.keep_lease(claimed.id());
        let (id, payload) = (claimed.id().clone(), claimed.preview.payload.clone());
        let report = if cfg == approval_core::policy::ExecutorConfig::Gate {
            self.apply_config(&claimed).await
        } else {
            match tokio::spawn(
                async move { executor::run(&cfg, &exec, &id, &payload, &receipt).await },
            )
            .await
            {
                Ok(r) => r,
                Err(e) => executor::ExecReport {
                    outcome: Outcome::Unknown,
                    detail: format!("executor crashed: {e}"),
                    readback_sha256: None,
                    output: None,
                },
            }
        };
        self.metrics.execution(
            executor,
            match report.outcome {
                Outcome::Succeeded => "succeeded",
                Outcome::Failed => "failed",
                Outcome::Unknown => "unknown",
            },
            started.elapsed(),
        );
        tracing::info!(id = %claimed.id(), outcome = ?report.outcome, "executed");
        let (outcome, detail) = (report.outcome, executor::excerpt(&report.detail));
        // From the claimed record as stored by the claim, not a fresh read: a change made
        // since (a sweep on a shared store) fails the compare-and-swap, and the retry
        // starts from what is stored, whose lifecycle then refuses or allows the finish.
        self.transition_from(claimed.clone(), |cur, now| {
            let life = cur
                .lifecycle
                .finish(report.outcome)
                .map_err(|e| transition_refusal(cur, now, e))?;
            let mut next = cur.with_lifecycle(life, now);
            next.result = Some(ExecResult {
                outcome: report.outcome,
                detail: report.detail.clone(),
                readback_sha256: report.readback_sha256,
                output: report.output.clone(),
                finished_at: now,
            });
            let ev = Self::event(
                AuditKind::Finished,
                &next,
                now,
                json!({"outcome": report.outcome, "readback_sha256": report.readback_sha256}),
            );
            Ok(Some((next, vec![ev])))
        })
        .await
        .map_err(|e| {
            let Some(cause) = &e.storage_failure else {
                return e;
            };
            // The effect happened; only its record is missing. Saying "try again" here
            // would invite a second run, which the claim refuses anyway.
            // On a shared store the instance keeps running: the claim's lease, no
            // longer renewed, runs out and a sweep ends it OUTCOME_UNKNOWN.
            let (recovers, back) = match self.store.leases() {
                None => (
                    "it stops so that a restart recovers",
                    "once the server is back",
                ),
                Some(_) => (
                    "its claim is no longer renewed",
                    "once the store is reachable and the claim's lease has run out",
                ),
            };
            ServiceError::new(
                Code::OutcomeUnknown,
                format!(
                    "the action ran (the executor reported {outcome:?}: {detail}) but the server \
                     could not record the outcome ({cause}); {recovers}. \
                     Do not execute it again: {back} the proposal shows \
                     OUTCOME_UNKNOWN for a human to resolve"
                ),
            )
            .about(&claimed, self.now())
        })
    }

    /// While a claimed record's executor runs on a store shared by several instances,
    /// renews its lease every third of the lease time, so that other instances know
    /// this one is alive. Stops when the returned guard drops.
    fn keep_lease(&self, id: &ProposalId) -> Option<AbortOnDrop> {
        let lease = self.store.leases()?;
        let (store, id) = (self.store.clone(), id.clone());
        Some(AbortOnDrop(tokio::spawn(async move {
            let mut tick = tokio::time::interval(lease / 3);
            tick.tick().await;
            loop {
                tick.tick().await;
                let (store, id) = (store.clone(), id.clone());
                match tokio::task::spawn_blocking(move || store.renew_lease(&id)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!(error = %e, "cannot renew an execution lease"),
                    Err(e) => tracing::warn!(error = %e, "lease renewal task failed"),
                }
            }
        })))
    }
}

/// The executor's type, the `executor` label of the execution metrics.
fn executor_label(cfg: &approval_core::policy::ExecutorConfig) -> &'static str {
    use approval_core::policy::ExecutorConfig;
    match cfg {
        ExecutorConfig::Note { .. } => "note",
        ExecutorConfig::Webhook { .. } => "webhook",
        ExecutorConfig::Command { .. } => "command",
        ExecutorConfig::Mcp { .. } => "mcp",
        ExecutorConfig::Gate => "gate",
    }
}
