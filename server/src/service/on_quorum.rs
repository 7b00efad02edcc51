//! Proposals the gate runs itself (issue #33): an agent that calls an exposed kind as
//! a tool of its own gets a proposal whose signed preview says `"execution":
//! "on_quorum"`. Nobody calls `approval_execute` for it: once quorum is reached (and
//! any cooldown has passed) the gate claims and runs it, through the same
//! [`Service::execute`] as an agent's call, so the same one compare-and-swap claim,
//! attestation, receipt and OUTCOME_UNKNOWN rules hold.
//!
//! Three things wake it, so that no approval is left waiting:
//! - a decision that reaches quorum here ([`Service::decide`] queues the proposal);
//! - the end of a cooldown (the runner sleeps until the proposal is executable);
//! - the sweep ([`Service::sweep_on_quorum`], by the instance leading it): after a
//!   restart, a change made by another instance, or a full queue.
//!
//! Two wakings of one proposal (two instances, or a sweep and a decision) both try
//! the claim; the compare-and-swap lets one through and refuses the other, which is
//! logged and changes nothing.
//!
//! May import the store, the record and core, as the use cases do.

use super::{Service, ServiceError};
use crate::record::ProposalRecord;
use approval_core::ids::AgentName;
use approval_core::status::Status;
use approval_core::ProposalId;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Proposals queued for the runner at most; beyond that the next sweep finds them.
const QUEUE: usize = 1024;

/// Most APPROVED records one sweep reads.
const SWEEP_BATCH: usize = 1000;

/// The queue from the use cases to the runner ([`run_forever`]).
pub(super) struct OnQuorumQueue {
    tx: mpsc::Sender<ProposalId>,
    rx: Mutex<Option<mpsc::Receiver<ProposalId>>>,
}

impl Default for OnQuorumQueue {
    fn default() -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        Self {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }
}

impl OnQuorumQueue {
    /// Queues `id`; when the queue is full the sweep finds it instead.
    pub(super) fn push(&self, id: ProposalId) {
        if self.tx.try_send(id).is_err() {
            tracing::warn!("on-quorum queue full: the next sweep runs what is due");
        }
    }
}

impl Service {
    /// Queues an on-quorum proposal that may have become executable.
    pub(super) fn wake_on_quorum(&self, id: ProposalId) {
        self.on_quorum.push(id);
    }

    /// The agent's on-quorum proposal `id`: what an MCP task is (issue #33). Another
    /// agent's, or one proposed with `approval_prepare`, is as unknown as a made-up id.
    pub fn on_quorum_of(
        &self,
        agent: &AgentName,
        id: &str,
    ) -> Result<ProposalRecord, ServiceError> {
        self.get_for_agent(agent, id)
            .ok()
            .filter(|r| r.preview.on_quorum())
            .ok_or_else(|| {
                ServiceError::new(
                    approval_core::Code::UnknownProposal,
                    format!("no task {id:?} of yours"),
                )
            })
    }

    /// Queues every on-quorum proposal that is APPROVED (executable now, or once its
    /// cooldown ends). Run by the instance leading the sweep. Returns how many.
    pub async fn sweep_on_quorum(&self) -> Result<usize, ServiceError> {
        let store = self.store.clone();
        let approved =
            tokio::task::spawn_blocking(move || store.list_status(Status::Approved, SWEEP_BATCH))
                .await
                .map_err(|e| ServiceError::new(approval_core::Code::Internal, e.to_string()))??;
        let mut n = 0;
        for rec in approved.into_iter().filter(|r| r.preview.on_quorum()) {
            self.wake_on_quorum(rec.id().clone());
            n += 1;
        }
        Ok(n)
    }

    /// Runs one on-quorum proposal if it is executable now; if it is cooling down,
    /// waits for the end of the cooldown first. Anything else leaves it alone.
    pub async fn run_on_quorum(self: &Arc<Self>, id: &ProposalId) {
        loop {
            let rec = match self.get_now(id).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(%id, error = %e, "on-quorum run: cannot read the proposal");
                    return;
                }
            };
            if !rec.preview.on_quorum() {
                return;
            }
            let now = self.now();
            if rec.lifecycle.at(now).status != Status::Approved {
                return;
            }
            if let Some(from) = rec.lifecycle.cooling_down_until(now) {
                // Looks again at least every second: the service's clock, not the
                // timer, says when the cooldown is over (and a revoke may end it).
                let wait = (from.unix() - now.unix()).clamp(0, 1) as u64;
                tokio::time::sleep(std::time::Duration::from_millis(wait * 1000 + 20)).await;
                continue;
            }
            let agent = rec.preview.requested_by.clone();
            let hash = rec.preview_sha256.to_string();
            match self.execute(&agent, id.as_str(), &hash).await {
                Ok(done) => {
                    tracing::info!(%id, status = %done.status(), "ran on quorum")
                }
                Err(e) => {
                    tracing::info!(%id, code = %e.code, error = %e.message, "on-quorum run refused")
                }
            }
            return;
        }
    }
}

/// The runner: takes the queue (once per service) and runs each proposal on it in a
/// task of its own, one task per proposal at a time. Ends when the service does.
pub async fn run_forever(svc: Arc<Service>) {
    let Some(mut rx) = svc
        .on_quorum
        .rx
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    else {
        return;
    };
    let running: Arc<Mutex<HashSet<ProposalId>>> = Default::default();
    while let Some(id) = rx.recv().await {
        if !running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.clone())
        {
            continue;
        }
        let (svc, running) = (svc.clone(), running.clone());
        tokio::spawn(async move {
            svc.run_on_quorum(&id).await;
            running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
        });
    }
}
