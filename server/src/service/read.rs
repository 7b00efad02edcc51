//! Reads: the agent's `approval_status` (with its long poll) and `approval_list`,
//! the approver's view of a proposal, its listing and its receipt. Nothing here
//! changes a record.
//!
//! May import the store, the record, `long_poll` and core.

use super::long_poll;
use super::{Service, ServiceError, MAX_LIST, MAX_WAIT_SECONDS};
use crate::record::ProposalRecord;
use crate::store::{Cursor, HeadPage, ListIndex};
use approval_core::ids::AgentName;
use approval_core::receipt::Receipt;
use approval_core::status::Status;
use approval_core::{ApproverName, Code, ProposalId};
use std::time::Duration;

impl Service {
    /// `approval_status`, long-polling up to `wait_seconds` for a change.
    pub async fn status(
        &self,
        agent: &AgentName,
        id: &str,
        wait_seconds: u64,
    ) -> Result<ProposalRecord, ServiceError> {
        Ok(self.status_waiting(agent, id, wait_seconds).await?.0)
    }

    /// [`Service::status`], also saying what became of the wait. A wait answers at
    /// once when the agent can act or nothing will change, otherwise at the first
    /// change, the deadline or the cooldown's end ([`long_poll::until`]); an agent
    /// already holding [`long_poll::MAX_LONG_POLLS_PER_AGENT`] waits is answered at once.
    pub async fn status_waiting(
        &self,
        agent: &AgentName,
        id: &str,
        wait_seconds: u64,
    ) -> Result<(ProposalRecord, long_poll::Waited), ServiceError> {
        let wait = wait_seconds.min(MAX_WAIT_SECONDS);
        if wait == 0 {
            // No wait: no subscription to make and drop (two locks on the hot path).
            return Ok((self.get_for_agent(agent, id)?, long_poll::Waited::NotAsked));
        }
        // Subscribed before the read, so a change right after it still wakes us.
        let mut rx = self.subscribe();
        let rec = self.get_for_agent(agent, id)?;
        let now = self.now();
        let most = Duration::from_secs(wait);
        let limit = match long_poll::until(&rec.lifecycle, now) {
            long_poll::Until::Now => return Ok((rec, long_poll::Waited::NotNeeded)),
            long_poll::Until::Change => most,
            long_poll::Until::ChangeOr(at) => most.min(long_poll::time_to(at, now)),
        };
        let Some(_slot) = self.long_polls.try_hold(agent) else {
            return Ok((rec, long_poll::Waited::Busy));
        };
        long_poll::first_change(&mut rx, rec.id(), limit).await;
        Ok((self.get_for_agent(agent, id)?, long_poll::Waited::Waited))
    }

    /// One more wait for `agent` (a task listen holds one as a long poll does), unless
    /// it holds the most already; dropping the slot gives it back.
    pub fn hold_wait(&self, agent: &AgentName) -> Option<long_poll::Slot> {
        self.long_polls.try_hold(agent)
    }

    /// How many `approval_status` waits `agent` holds now.
    pub fn long_polls_held(&self, agent: &AgentName) -> usize {
        self.long_polls.held(agent)
    }

    /// `approval_list`: one page of the caller's proposals, newest first, after
    /// `cursor`. Reads the agent's index and decodes only each record's head (never a
    /// payload), so its cost is bounded by the page, not by the store.
    pub fn list_for_agent(
        &self,
        agent: &AgentName,
        status: Option<Status>,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<HeadPage, ServiceError> {
        let now = self.now();
        Ok(self.store.page(
            &ListIndex::Agent(agent.clone()),
            cursor,
            limit.clamp(1, MAX_LIST),
            &mut |h| status.is_none_or(|s| h.lifecycle.at(now).status == s),
        )?)
    }

    /// Whether an approver may see (and sign) a record.
    pub(super) fn visible(&self, approver: &ApproverName, rec: &ProposalRecord) -> bool {
        self.policy_of(rec).is_ok_and(|p| p.is_approver(approver))
    }

    /// A proposal for an approver.
    pub fn get_for_approver(
        &self,
        approver: &ApproverName,
        id: &str,
    ) -> Result<ProposalRecord, ServiceError> {
        let unknown = || {
            ServiceError::new(
                Code::UnknownProposal,
                format!("no proposal {id:?} that you may decide on"),
            )
        };
        let id = ProposalId::parse(id).map_err(|_| unknown())?;
        match self.store.get(&id)? {
            Some(rec) if self.visible(approver, &rec) => Ok(rec),
            _ => Err(unknown()),
        }
    }

    /// One page of the proposals an approver may decide on, newest first, after
    /// `cursor`, by status (expiry applied). Walks the status indexes reading each
    /// record once ([`Store::page_records`]): a second lookup per record would cost
    /// more the larger the store grows.
    pub fn list_for_approver(
        &self,
        approver: &ApproverName,
        status: Option<Status>,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<(Vec<ProposalRecord>, Option<Cursor>), ServiceError> {
        let now = self.now();
        // An effectively expired record is still stored as PENDING/APPROVED until swept.
        let stored = match status {
            Some(Status::Expired) => vec![Status::Expired, Status::Pending, Status::Approved],
            Some(s) => vec![s],
            None => Status::ALL.to_vec(),
        };
        let page = self.store.page_records(
            &ListIndex::Statuses(stored),
            cursor,
            limit.clamp(1, MAX_LIST),
            &mut |h| {
                status.is_none_or(|s| h.lifecycle.at(now).status == s)
                    && self
                        .policy_by(
                            &h.preview.kind,
                            h.preview.policy_sha256,
                            &h.preview.proposal_id,
                        )
                        .is_ok_and(|p| p.is_approver(approver))
            },
        )?;
        Ok((page.records, page.next))
    }

    /// A receipt, once quorum was reached.
    pub fn receipt(&self, approver: &ApproverName, id: &str) -> Result<Receipt, ServiceError> {
        let rec = self.get_for_approver(approver, id)?;
        let now = self.now();
        let st = rec.lifecycle.at(now).status;
        let reached = matches!(
            st,
            Status::Approved
                | Status::Executing
                | Status::Succeeded
                | Status::Failed
                | Status::OutcomeUnknown
        ) || rec.lifecycle.approved_at.is_some();
        if !reached {
            return Err(ServiceError::new(
                Code::InvalidTransition,
                format!("no receipt: the proposal is {st} and never reached quorum"),
            )
            .about(&rec, now));
        }
        let policy = self.policy_of(&rec)?;
        Ok(Receipt::build_with(
            &rec.preview,
            &policy,
            &self.config().keyring,
            &rec.signed_decisions(),
            |k, d, h| self.verified.verify(k, d, h),
        )
        .with_attestation(rec.attestation.clone()))
    }
}
