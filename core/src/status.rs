//! The proposal state machine, with transitions as functions of the current time.
//!
//! ```text
//! PENDING --quorum--> APPROVED --execute--> EXECUTING --> SUCCEEDED | FAILED
//! PENDING --vetoes--> REJECTED           PENDING/APPROVED --ttl / execute_within--> EXPIRED
//! APPROVED, still in its cooldown --signed reject--> REJECTED
//! APPROVED --signed revoke--> REVOKED    PENDING --approval_withdraw--> WITHDRAWN
//! PENDING/APPROVED --policy edited--> POLICY_CHANGED
//! EXECUTING --(process died, found at start)--> OUTCOME_UNKNOWN --signed resolve--> SUCCEEDED | FAILED
//! ```
//!
//! [`Lifecycle`] holds the status with the deadlines that govern it. Every
//! transition takes `now` and returns the new lifecycle or a [`TransitionError`]
//! that carries the code an agent branches on. Expiry is a pure function of
//! (lifecycle, now), so a read can apply it without a background task having run.
//! So is the end of a policy's cooldown (its rules are in `cooldown.rs`): an APPROVED
//! proposal is executable only from `executable_from` on.
//!
//! The diagram is [`Action::rule`], a table: every transition below asks it, and so do
//! the server's decision check and signer-cli's "may I decide now" ([`Action::allowed_in`]).
//! This file may import the leaves `code`, `time` and `action`.

use crate::action::Action;
use crate::code::Code;
use crate::time::{Seconds, Timestamp};
use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// Every state a proposal can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// Waiting for quorum.
    Pending,
    /// Quorum reached; executable once until the deadline.
    Approved,
    /// Claimed by one execute call; the effect is running.
    Executing,
    /// Ran and succeeded.
    Succeeded,
    /// Ran and failed.
    Failed,
    /// Vetoed.
    Rejected,
    /// Ran out of time.
    Expired,
    /// An approver revoked the approval.
    Revoked,
    /// The agent withdrew it.
    Withdrawn,
    /// The kind's policy changed under it.
    PolicyChanged,
    /// The process died while it ran; a human must settle it.
    OutcomeUnknown,
}

impl Status {
    /// Every status.
    pub const ALL: [Status; 11] = [
        Status::Pending,
        Status::Approved,
        Status::Executing,
        Status::Succeeded,
        Status::Failed,
        Status::Rejected,
        Status::Expired,
        Status::Revoked,
        Status::Withdrawn,
        Status::PolicyChanged,
        Status::OutcomeUnknown,
    ];

    /// The wire spelling, e.g. `OUTCOME_UNKNOWN`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "PENDING",
            Status::Approved => "APPROVED",
            Status::Executing => "EXECUTING",
            Status::Succeeded => "SUCCEEDED",
            Status::Failed => "FAILED",
            Status::Rejected => "REJECTED",
            Status::Expired => "EXPIRED",
            Status::Revoked => "REVOKED",
            Status::Withdrawn => "WITHDRAWN",
            Status::PolicyChanged => "POLICY_CHANGED",
            Status::OutcomeUnknown => "OUTCOME_UNKNOWN",
        }
    }

    /// Parses the wire spelling (case-insensitive).
    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(s))
    }

    /// No transition leads out of it (OUTCOME_UNKNOWN is not final: a human resolves it).
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            Status::Pending | Status::Approved | Status::Executing | Status::OutcomeUnknown
        )
    }

    /// The code an agent sees for a proposal in this state.
    pub fn code(self) -> Code {
        match self {
            Status::Pending => Code::PendingQuorum,
            Status::Approved => Code::QuorumReached,
            Status::Executing => Code::ExecutionInProgress,
            Status::Succeeded => Code::Succeeded,
            Status::Failed => Code::Failed,
            Status::Rejected => Code::Rejected,
            Status::Expired => Code::Expired,
            Status::Revoked => Code::Revoked,
            Status::Withdrawn => Code::Withdrawn,
            Status::PolicyChanged => Code::PolicyChanged,
            Status::OutcomeUnknown => Code::OutcomeUnknown,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an execution ended, as the executor reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    /// Did what it should.
    Succeeded,
    /// Refused or failed, known not to have had its effect (or to have failed).
    Failed,
    /// May or may not have had its effect (time-out after sending, crash).
    Unknown,
}

/// What an APPROVED proposal's cooldown means for an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DuringCooldown {
    /// Nothing: the action is allowed from APPROVED (if at all) cooling or not.
    Either,
    /// Allowed from APPROVED only while it cools down (a veto can still land).
    Only,
    /// Allowed from APPROVED only once the cooldown is over (the claim).
    Never,
}

/// One row of the state machine: an action, who takes it, the states it may start
/// from (after expiry is applied), the states it may lead to, and its cooldown condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The action.
    pub action: Action,
    /// Who takes it.
    pub by: crate::action::Actor,
    /// The states it is allowed from (none: it creates the proposal).
    pub from: &'static [Status],
    /// The states it leads to.
    pub to: &'static [Status],
    /// Its condition on an APPROVED proposal's cooldown.
    pub cooldown: DuringCooldown,
}

impl Action {
    /// The row of the state machine for this action: the one place the edges are written.
    pub fn rule(self) -> Rule {
        use DuringCooldown::{Either, Never, Only};
        use Status::*;
        let (from, to, cooldown): (&'static [Status], &'static [Status], _) = match self {
            Action::Propose => (&[], &[Pending], Either),
            Action::Approve => (&[Pending], &[Approved], Either),
            Action::Reject => (&[Pending, Approved], &[Rejected], Only),
            Action::Revoke => (&[Approved], &[Revoked], Either),
            Action::Withdraw => (&[Pending], &[Withdrawn], Either),
            Action::Void => (&[Pending, Approved], &[PolicyChanged], Either),
            Action::Expire => (&[Pending, Approved], &[Expired], Either),
            Action::Execute => (&[Approved], &[Executing], Never),
            Action::Finish => (&[Executing], &[Succeeded, Failed, OutcomeUnknown], Either),
            Action::Resolve => (&[OutcomeUnknown], &[Succeeded, Failed], Either),
        };
        Rule {
            action: self,
            by: self.by(),
            from,
            to,
            cooldown,
        }
    }

    /// Whether this action is allowed in `status` (expiry already applied), where
    /// `cooling` says whether an APPROVED proposal is still in its cooldown.
    pub fn allowed_in(self, status: Status, cooling: bool) -> bool {
        let rule = self.rule();
        rule.from.contains(&status)
            && match (status, rule.cooldown) {
                (Status::Approved, DuringCooldown::Only) => cooling,
                (Status::Approved, DuringCooldown::Never) => !cooling,
                _ => true,
            }
    }

    /// The code a refusal of this action in `status` carries: executing again is
    /// never a replay, a claim during the cooldown says so, otherwise the status's code.
    pub fn refusal_code(self, status: Status, cooling: bool) -> Code {
        match (self, status) {
            (Action::Execute, Status::Succeeded | Status::Failed | Status::OutcomeUnknown) => {
                Code::AlreadyExecutedNoReplay
            }
            (Action::Execute, Status::Executing) => Code::ExecutionInProgress,
            (Action::Execute, Status::Approved) if cooling => Code::CoolingDown,
            (_, s) => s.code(),
        }
    }
}

/// A transition that the current state does not allow.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("cannot {action} a proposal that is {from}")]
pub struct TransitionError {
    /// The state it was in (after expiry was applied).
    pub from: Status,
    /// What was attempted.
    pub action: Action,
    /// The code to report.
    pub code: Code,
}

/// A status with the deadlines that govern it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lifecycle {
    /// Current status.
    pub status: Status,
    /// When a PENDING proposal expires (the preview's `expires_at`).
    pub expires_at: Timestamp,
    /// When quorum was reached.
    pub approved_at: Option<Timestamp>,
    /// Until when an APPROVED proposal may be executed.
    pub executable_until: Option<Timestamp>,
    /// From when an APPROVED proposal may be executed: quorum time plus the policy's
    /// cooldown. Absent without a cooldown (and in records of earlier builds), when
    /// it is executable from quorum on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable_from: Option<Timestamp>,
}

impl Lifecycle {
    /// A new PENDING proposal.
    pub fn new(expires_at: Timestamp) -> Self {
        Self {
            status: Status::Pending,
            expires_at,
            approved_at: None,
            executable_until: None,
            executable_from: None,
        }
    }

    /// Whether, at `now`, the proposal has run out of time (PENDING past `expires_at`,
    /// or APPROVED past `executable_until`). A deadline is exclusive: at the exact
    /// second it is already over.
    pub fn is_expired_at(&self, now: Timestamp) -> bool {
        match self.status {
            Status::Pending => now >= self.expires_at,
            Status::Approved => self.executable_until.is_none_or(|t| now >= t),
            _ => false,
        }
    }

    /// The first moment at which [`Lifecycle::is_expired_at`] holds, if it ever will:
    /// what a store indexes so that finding expired proposals costs the number of
    /// them, not the number of live ones. An APPROVED lifecycle without an execution
    /// window is already over (the epoch).
    pub fn deadline(&self) -> Option<Timestamp> {
        match self.status {
            Status::Pending => Some(self.expires_at),
            Status::Approved => Some(self.executable_until.unwrap_or(Timestamp::from_unix(0))),
            _ => None,
        }
    }

    /// The lifecycle with expiry applied at `now`.
    pub fn at(self, now: Timestamp) -> Self {
        if self.is_expired_at(now) {
            Self {
                status: Status::Expired,
                ..self
            }
        } else {
            self
        }
    }

    fn refuse(from: Status, action: Action, cooling: bool) -> TransitionError {
        TransitionError {
            from,
            action,
            code: action.refusal_code(from, cooling),
        }
    }

    /// The lifecycle at `now` if the table allows `action` in it, else the refusal.
    fn require(self, now: Timestamp, action: Action) -> Result<Self, TransitionError> {
        let cur = self.at(now);
        let cooling = cur.cooling_down_until(now).is_some();
        if action.allowed_in(cur.status, cooling) {
            Ok(cur)
        } else {
            Err(Self::refuse(cur.status, action, cooling))
        }
    }

    /// [`Lifecycle::require`] for the actions that do not take the time (their
    /// states, EXECUTING and OUTCOME_UNKNOWN, neither expire nor cool down).
    fn require_stored(self, action: Action) -> Result<Self, TransitionError> {
        if action.allowed_in(self.status, false) {
            Ok(self)
        } else {
            Err(Self::refuse(self.status, action, false))
        }
    }

    /// Whether the table allows `action` at `now` (expiry and cooldown applied).
    pub fn permits(&self, action: Action, now: Timestamp) -> bool {
        self.require(now, action).is_ok()
    }

    /// PENDING → APPROVED when quorum is reached; executable for `execute_within`.
    pub fn approve(self, now: Timestamp, execute_within: Seconds) -> Result<Self, TransitionError> {
        self.approve_with_cooldown(now, None, execute_within)
    }

    /// PENDING → APPROVED when quorum is reached under a policy with a `cooldown`: the
    /// window [`crate::time::execution_window`] gives, i.e. executable from
    /// `now + cooldown` until `now + execute_within`.
    pub fn approve_with_cooldown(
        self,
        now: Timestamp,
        cooldown: Option<Seconds>,
        execute_within: Seconds,
    ) -> Result<Self, TransitionError> {
        let cur = self.require(now, Action::Approve)?;
        let (from, until) = crate::time::execution_window(now, cooldown, execute_within);
        Ok(Self {
            status: Status::Approved,
            approved_at: Some(now),
            executable_until: Some(until),
            executable_from: cooldown.map(|_| from),
            ..cur
        })
    }

    /// PENDING → REJECTED when vetoed, or APPROVED → REJECTED by a signed reject
    /// during the cooldown (the cooldown exists so that a veto can still land).
    pub fn reject(self, now: Timestamp) -> Result<Self, TransitionError> {
        let cur = self.require(now, Action::Reject)?;
        Ok(Self {
            status: Status::Rejected,
            ..cur
        })
    }

    /// APPROVED → REVOKED on a signed revoke.
    pub fn revoke(self, now: Timestamp) -> Result<Self, TransitionError> {
        let cur = self.require(now, Action::Revoke)?;
        Ok(Self {
            status: Status::Revoked,
            ..cur
        })
    }

    /// PENDING → WITHDRAWN by the agent.
    pub fn withdraw(self, now: Timestamp) -> Result<Self, TransitionError> {
        let cur = self.require(now, Action::Withdraw)?;
        Ok(Self {
            status: Status::Withdrawn,
            ..cur
        })
    }

    /// PENDING/APPROVED → POLICY_CHANGED when the kind's policy is edited.
    pub fn policy_changed(self, now: Timestamp) -> Result<Self, TransitionError> {
        let cur = self.require(now, Action::Void)?;
        Ok(Self {
            status: Status::PolicyChanged,
            ..cur
        })
    }

    /// PENDING/APPROVED → EXPIRED, when the deadline has passed.
    pub fn expire(self, now: Timestamp) -> Result<Self, TransitionError> {
        // Allowed from the stored state, and only once the deadline made it EXPIRED.
        let cur = self.at(now);
        if Action::Expire.rule().from.contains(&self.status) && cur.status == Status::Expired {
            Ok(cur)
        } else {
            Err(Self::refuse(cur.status, Action::Expire, false))
        }
    }

    /// APPROVED → EXECUTING: the claim. Only one caller may win it; the store makes
    /// that atomic, this function says whether it is allowed at all.
    pub fn claim(self, now: Timestamp) -> Result<Self, TransitionError> {
        let cur = self.require(now, Action::Execute)?;
        Ok(Self {
            status: Status::Executing,
            ..cur
        })
    }

    /// EXECUTING → SUCCEEDED | FAILED | OUTCOME_UNKNOWN, as the executor reports.
    pub fn finish(self, outcome: Outcome) -> Result<Self, TransitionError> {
        let _ = self.require_stored(Action::Finish)?;
        let status = match outcome {
            Outcome::Succeeded => Status::Succeeded,
            Outcome::Failed => Status::Failed,
            Outcome::Unknown => Status::OutcomeUnknown,
        };
        Ok(Self { status, ..self })
    }

    /// EXECUTING → OUTCOME_UNKNOWN, for records found EXECUTING at start-up.
    pub fn crash_recovered(self) -> Result<Self, TransitionError> {
        self.finish(Outcome::Unknown)
    }

    /// OUTCOME_UNKNOWN → SUCCEEDED | FAILED on a signed resolve.
    pub fn resolve(self, succeeded: bool) -> Result<Self, TransitionError> {
        let _ = self.require_stored(Action::Resolve)?;
        let status = if succeeded {
            Status::Succeeded
        } else {
            Status::Failed
        };
        Ok(Self { status, ..self })
    }

    /// Whether `approval_execute` would be allowed at `now`: APPROVED, inside its
    /// window and past any cooldown. The one place this is decided.
    pub fn executable(&self, now: Timestamp) -> bool {
        self.permits(Action::Execute, now)
    }

    /// Whether an agent may usefully try again later (the state can still change
    /// toward execution, or a new proposal is the way forward).
    pub fn retry_allowed(&self, now: Timestamp) -> bool {
        matches!(self.at(now).status, Status::Pending | Status::Approved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_unix(1_000_000 + s)
    }

    fn pending() -> Lifecycle {
        Lifecycle::new(t(100))
    }

    /// The store's deadline index is only right if `deadline` says exactly when
    /// `is_expired_at` turns true, for every status and every moment around it.
    #[test]
    fn deadline_is_the_first_expired_moment() {
        let statuses = [
            Status::Pending,
            Status::Approved,
            Status::Rejected,
            Status::Expired,
            Status::Executing,
            Status::Succeeded,
            Status::Failed,
            Status::OutcomeUnknown,
            Status::Withdrawn,
            Status::Revoked,
            Status::PolicyChanged,
        ];
        for status in statuses {
            for until in [None, Some(t(50)), Some(t(150))] {
                let l = Lifecycle {
                    status,
                    expires_at: t(100),
                    approved_at: Some(t(10)),
                    executable_until: until,
                    executable_from: None,
                };
                for now in (-10..200).map(t) {
                    let by_deadline = l.deadline().is_some_and(|d| now >= d);
                    assert_eq!(
                        by_deadline,
                        l.is_expired_at(now),
                        "{status:?} {until:?} {now:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn happy_path() {
        let l = pending().approve(t(10), Seconds::new(60)).unwrap();
        assert_eq!(
            (l.status, l.approved_at, l.executable_until),
            (Status::Approved, Some(t(10)), Some(t(70)))
        );
        assert!(l.executable(t(69)));
        let l = l.claim(t(20)).unwrap();
        assert_eq!(l.status, Status::Executing);
        assert_eq!(
            l.finish(Outcome::Succeeded).unwrap().status,
            Status::Succeeded
        );
        assert_eq!(l.finish(Outcome::Failed).unwrap().status, Status::Failed);
        assert_eq!(
            l.finish(Outcome::Unknown).unwrap().status,
            Status::OutcomeUnknown
        );
    }

    #[test]
    fn execute_refusals_carry_the_agent_code() {
        let approved = pending().approve(t(10), Seconds::new(60)).unwrap();
        let executing = approved.claim(t(11)).unwrap();
        let e = executing.claim(t(12)).unwrap_err();
        assert_eq!(
            (e.from, e.code),
            (Status::Executing, Code::ExecutionInProgress)
        );
        for outcome in [Outcome::Succeeded, Outcome::Failed, Outcome::Unknown] {
            let done = executing.finish(outcome).unwrap();
            assert_eq!(
                done.claim(t(13)).unwrap_err().code,
                Code::AlreadyExecutedNoReplay
            );
        }
        assert_eq!(pending().claim(t(1)).unwrap_err().code, Code::PendingQuorum);
        assert_eq!(
            approved.claim(t(70)).unwrap_err(),
            TransitionError {
                from: Status::Expired,
                action: Action::Execute,
                code: Code::Expired
            }
        );
        assert_eq!(
            pending()
                .reject(t(1))
                .unwrap()
                .claim(t(2))
                .unwrap_err()
                .code,
            Code::Rejected
        );
        assert_eq!(
            approved
                .revoke(t(12))
                .unwrap()
                .claim(t(13))
                .unwrap_err()
                .code,
            Code::Revoked
        );
        assert_eq!(
            pending()
                .withdraw(t(1))
                .unwrap()
                .claim(t(2))
                .unwrap_err()
                .code,
            Code::Withdrawn
        );
        assert_eq!(
            pending()
                .policy_changed(t(1))
                .unwrap()
                .claim(t(2))
                .unwrap_err()
                .code,
            Code::PolicyChanged
        );
    }

    #[test]
    fn expiry_is_a_pure_function_of_now() {
        assert_eq!(pending().at(t(99)).status, Status::Pending);
        assert_eq!(pending().at(t(100)).status, Status::Expired);
        assert_eq!(pending().expire(t(100)).unwrap().status, Status::Expired);
        assert_eq!(
            pending().expire(t(99)).unwrap_err().code,
            Code::PendingQuorum
        );
        assert_eq!(
            pending()
                .approve(t(100), Seconds::new(60))
                .unwrap_err()
                .code,
            Code::Expired
        );
        assert_eq!(pending().withdraw(t(100)).unwrap_err().code, Code::Expired);
        // Approval deadline is measured from approval, not from creation.
        let a = pending().approve(t(99), Seconds::new(60)).unwrap();
        assert_eq!(a.at(t(158)).status, Status::Approved);
        assert_eq!(a.at(t(159)).status, Status::Expired);
        // Final states never expire.
        let done = a.claim(t(100)).unwrap().finish(Outcome::Succeeded).unwrap();
        assert_eq!(done.at(t(100_000)).status, Status::Succeeded);
    }

    #[test]
    fn only_allowed_edges_exist() {
        let approved = pending().approve(t(1), Seconds::new(60)).unwrap();
        assert_eq!(pending().revoke(t(1)).unwrap_err().from, Status::Pending);
        assert_eq!(approved.withdraw(t(2)).unwrap_err().from, Status::Approved);
        assert_eq!(approved.reject(t(2)).unwrap_err().from, Status::Approved);
        assert_eq!(approved.reject(t(2)).unwrap_err().code, Code::QuorumReached);
        assert!(approved.policy_changed(t(2)).is_ok());
        assert!(pending().finish(Outcome::Succeeded).is_err());
        assert!(pending().resolve(true).is_err());
        let unknown = approved.claim(t(2)).unwrap().crash_recovered().unwrap();
        assert_eq!(unknown.status, Status::OutcomeUnknown);
        assert_eq!(unknown.resolve(true).unwrap().status, Status::Succeeded);
        assert_eq!(unknown.resolve(false).unwrap().status, Status::Failed);
        assert!(unknown.resolve(true).unwrap().resolve(false).is_err());
        assert!(!unknown.retry_allowed(t(3)));
        assert!(pending().retry_allowed(t(3)));
    }

    #[test]
    fn status_strings_round_trip() {
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::json!(s.as_str())
            );
        }
        assert_eq!(Status::parse("pending"), Some(Status::Pending));
        assert_eq!(Status::parse("DONE"), None);
    }
}
