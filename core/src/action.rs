//! What can be done to a proposal, and by whom: the names of the state machine's
//! edges.
//!
//! It exists so that the server, signer-cli and the error messages name an action by
//! a type rather than a string. It is a leaf under [`crate::status`], which holds the
//! table itself ([`Action::rule`]: from which states, to which, with which cooldown
//! condition); this file may import only [`crate::message`] (to map a signed
//! [`Decision`] onto its action), never `status`.

use crate::message::Decision;
use std::fmt;

/// Who takes an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Actor {
    /// The agent that proposed (MCP tools).
    Agent,
    /// A human approver, by a signed decision (quorum decides the approve and the
    /// reject that end a PENDING proposal; one signature revokes or resolves).
    Approver,
    /// The server itself: expiry sweeps, voiding after a policy edit, the executor's
    /// report and crash recovery.
    Server,
}

/// Every action on a proposal. Its [`fmt::Display`] is the word used in messages
/// ("cannot execute a proposal that is SUCCEEDED").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// `approval_prepare`: creates a PENDING proposal.
    Propose,
    /// Quorum reached: PENDING → APPROVED.
    Approve,
    /// A veto: PENDING → REJECTED, or APPROVED → REJECTED during the cooldown.
    Reject,
    /// A signed revoke: APPROVED → REVOKED.
    Revoke,
    /// `approval_withdraw`: PENDING → WITHDRAWN.
    Withdraw,
    /// The kind's policy (or the keys its approvals rest on) changed:
    /// PENDING/APPROVED → POLICY_CHANGED.
    Void,
    /// A deadline passed: PENDING/APPROVED → EXPIRED.
    Expire,
    /// `approval_execute`, the claim: APPROVED (past any cooldown) → EXECUTING.
    Execute,
    /// The executor's report, or crash recovery: EXECUTING → SUCCEEDED | FAILED |
    /// OUTCOME_UNKNOWN.
    Finish,
    /// A signed resolve: OUTCOME_UNKNOWN → SUCCEEDED | FAILED.
    Resolve,
}

impl Action {
    /// Every action.
    pub const ALL: [Action; 10] = [
        Action::Propose,
        Action::Approve,
        Action::Reject,
        Action::Revoke,
        Action::Withdraw,
        Action::Void,
        Action::Expire,
        Action::Execute,
        Action::Finish,
        Action::Resolve,
    ];

    /// The word for it in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Propose => "propose",
            Action::Approve => "approve",
            Action::Reject => "reject",
            Action::Revoke => "revoke",
            Action::Withdraw => "withdraw",
            Action::Void => "void",
            Action::Expire => "expire",
            Action::Execute => "execute",
            Action::Finish => "finish",
            Action::Resolve => "resolve",
        }
    }

    /// Who takes it.
    pub fn by(self) -> Actor {
        match self {
            Action::Propose | Action::Withdraw | Action::Execute => Actor::Agent,
            Action::Approve | Action::Reject | Action::Revoke | Action::Resolve => Actor::Approver,
            Action::Void | Action::Expire | Action::Finish => Actor::Server,
        }
    }

    /// The action a signed decision asks for (both resolves are [`Action::Resolve`]).
    pub fn of(decision: Decision) -> Action {
        match decision {
            Decision::Approve => Action::Approve,
            Decision::Reject => Action::Reject,
            Decision::Revoke => Action::Revoke,
            Decision::ResolveSucceeded | Decision::ResolveFailed => Action::Resolve,
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
