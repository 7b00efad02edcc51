//! The service's refusal: [`ServiceError`], the code a client branches on with the
//! words that tell it what to do, and how store failures and refused transitions
//! become one.
//!
//! May import the store's error, the record and core; nothing else of the service.

use crate::record::ProposalRecord;
use crate::store::StoreError;
use approval_core::status::{Status, TransitionError};
use approval_core::{Code, ProposalId, Timestamp};

/// A refusal with the code a client branches on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceError {
    /// Stable code.
    pub code: Code,
    /// What was wrong and what to do.
    pub message: String,
    /// The proposal's status, where there is one.
    pub status: Option<Status>,
    /// Whether trying again later may succeed.
    pub retry_allowed: bool,
    /// The proposal, where there is one.
    pub proposal_id: Option<ProposalId>,
    /// The store's own words, when the store failed (for callers that must tell
    /// the client more than the generic storage message).
    pub storage_failure: Option<String>,
}

impl ServiceError {
    /// A refusal without a proposal.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            status: None,
            retry_allowed: false,
            proposal_id: None,
            storage_failure: None,
        }
    }

    pub(super) fn about(mut self, rec: &ProposalRecord, now: Timestamp) -> Self {
        self.status = Some(rec.lifecycle.at(now).status);
        self.proposal_id = Some(rec.id().clone());
        self
    }

    pub(crate) fn retry(mut self, yes: bool) -> Self {
        self.retry_allowed = yes;
        self
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Full(m) => return ServiceError::new(Code::LimitExceeded, m).retry(true),
            StoreError::Stopped(m) => {
                let mut refusal = ServiceError::new(Code::Internal, m.clone()).retry(true);
                refusal.storage_failure = Some(m);
                return refusal;
            }
            StoreError::Unavailable(why) => {
                // A shared database that went away: this instance keeps running and
                // reconnects by itself, so "retry" is the answer, not "restart".
                tracing::warn!(error = %why, "store unreachable");
                let mut refusal = ServiceError::new(
                    Code::Internal,
                    format!(
                        "the store is unreachable: {why}; retry. Nothing was reported done that \
                         was not stored; if this request changed something, check with \
                         approval_status before trying again"
                    ),
                )
                .retry(true);
                refusal.storage_failure = Some(format!("the store is unreachable: {why}"));
                return refusal;
            }
            _ => {}
        }
        tracing::error!(error = %e, "storage failure");
        let mut refusal = ServiceError::new(
            Code::Internal,
            format!(
                "the server could not store this: {e}. It stops so that a restart recovers from \
                 its log, and keeps everything it acknowledged before. Whether this request took \
                 effect is not known: once the server is back, check with approval_status before \
                 trying again"
            ),
        )
        .retry(true);
        refusal.storage_failure = Some(e.to_string());
        refusal
    }
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

pub(super) fn transition_refusal(
    rec: &ProposalRecord,
    now: Timestamp,
    e: TransitionError,
) -> ServiceError {
    let message = match e.code {
        Code::AlreadyExecutedNoReplay => "this proposal was already executed; it is never run again. Do not retry: report the stored result".to_owned(),
        Code::ExecutionInProgress => "another call is executing this proposal right now; poll approval_status for the result, do not execute again".to_owned(),
        Code::PendingQuorum => "not enough approvals yet: ask your human approvers to sign it, then poll approval_status".to_owned(),
        Code::Expired => "the proposal ran out of time; prepare a new one if the action is still wanted".to_owned(),
        Code::Rejected => "approvers rejected this proposal; do not retry it".to_owned(),
        Code::Revoked => "an approver revoked the approval; do not retry it".to_owned(),
        Code::Withdrawn => "the proposal was withdrawn".to_owned(),
        Code::PolicyChanged => "the policy for this kind changed after it was proposed; prepare it again under the new policy".to_owned(),
        Code::OutcomeUnknown => "the outcome of this proposal is unknown and waits for a human to resolve it".to_owned(),
        Code::CoolingDown => format!(
            "quorum was reached but the policy's cooldown has not ended: the proposal becomes executable at {}, and until then any approver can still revoke or veto it. Nothing was consumed: call approval_status with wait_seconds (it answers when the cooldown ends), then approval_execute again",
            rec.lifecycle.executable_from.map_or_else(|| "the end of the cooldown".to_owned(), |t| t.to_string())
        ),
        _ => e.to_string(),
    };
    let retry = matches!(
        e.code,
        Code::PendingQuorum | Code::ExecutionInProgress | Code::CoolingDown
    );
    ServiceError::new(e.code, message)
        .about(rec, now)
        .retry(retry)
}
