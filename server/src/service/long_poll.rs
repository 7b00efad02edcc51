//! Long polls of `approval_status` (`wait_seconds`): when a wait must end, and how
//! many waits one agent may hold at once.
//!
//! Two faults of issue #31 are answered here. A wait used to run its whole length on
//! a proposal that was already executable (item 10), so the agent sat idle after
//! quorum. Now a wait answers at once when the agent can act or nothing more will
//! happen, and otherwise on the first change, at the proposal's deadline, or when its
//! cooldown ends (the moment it becomes executable), whichever comes first: [`until`].
//!
//! And each wait held server capacity for up to 30 s with no limit per agent (item 1):
//! an agent could pile up thousands of them in front of an approver's revoke. Now one
//! agent holds at most [`MAX_LONG_POLLS_PER_AGENT`] waits; beyond that a poll answers
//! at once with the current status ([`Waited::Busy`], which the answer says). The
//! count is per agent, so one agent's waits never make another's answer early, and a
//! slot is a guard released on drop, so a wait whose client went away (its future
//! dropped) gives its slot back.

use super::events::Event;
use approval_core::ids::AgentName;
use approval_core::status::{Lifecycle, Status};
use approval_core::{ProposalId, Timestamp};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;

/// The most `approval_status` waits one agent may hold at once. An agent that follows
/// its proposals needs one per proposal it waits on; a few dozen is plenty, and small
/// next to what one agent could otherwise pin.
pub const MAX_LONG_POLLS_PER_AGENT: usize = 32;

/// When a wait on a proposal must answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// Now: the agent can act (the proposal is executable) or nothing will change
    /// without a human (final, or OUTCOME_UNKNOWN waiting for a resolve).
    Now,
    /// At the first change, or at this moment, whichever comes first: a PENDING
    /// proposal's expiry, or the end of an approval's cooldown.
    ChangeOr(Timestamp),
    /// At the first change (EXECUTING: the outcome is a change).
    Change,
}

/// When a wait on a proposal in `life` at `now` must answer. The executable rule is
/// core's ([`Lifecycle::executable`]), so a wait ends exactly when execute would run.
pub fn until(life: &Lifecycle, now: Timestamp) -> Until {
    let cur = life.at(now);
    if life.executable(now) || cur.status.is_final() || cur.status == Status::OutcomeUnknown {
        return Until::Now;
    }
    if let Some(from) = life.cooling_down_until(now) {
        return Until::ChangeOr(from);
    }
    match cur.status {
        Status::Pending => Until::ChangeOr(cur.expires_at),
        _ => Until::Change,
    }
}

/// How long to sleep from `now` to be past `at` by the server's clock. The clock
/// counts whole seconds and `now` is the current second's start, so `at - now`
/// seconds always reach it; the small margin absorbs timer granularity.
pub fn time_to(at: Timestamp, now: Timestamp) -> Duration {
    let secs = (at.unix() - now.unix()).max(0) as u64;
    Duration::from_secs(secs) + Duration::from_millis(50)
}

/// What happened to a status request's wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// No wait was asked (`wait_seconds` absent or 0).
    NotAsked,
    /// No wait was needed: the agent can act now, or nothing will change.
    NotNeeded,
    /// It waited, until a change, a deadline, the cooldown's end or `wait_seconds`.
    Waited,
    /// The agent already holds [`MAX_LONG_POLLS_PER_AGENT`] waits: answered at once.
    Busy,
}

/// Waits held, per agent.
#[derive(Default)]
pub struct LongPolls {
    held: Arc<Mutex<HashMap<AgentName, usize>>>,
}

/// One wait's slot; dropping it (the wait ended, or its future was dropped because
/// the client went away) gives it back.
pub struct Slot {
    held: Arc<Mutex<HashMap<AgentName, usize>>>,
    agent: AgentName,
}

impl LongPolls {
    /// A slot for one more wait by `agent`, unless it holds the most already.
    pub fn try_hold(&self, agent: &AgentName) -> Option<Slot> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(agent.clone()).or_insert(0);
        if *n >= MAX_LONG_POLLS_PER_AGENT {
            return None;
        }
        *n += 1;
        Some(Slot {
            held: self.held.clone(),
            agent: agent.clone(),
        })
    }

    /// How many waits `agent` holds now.
    pub fn held(&self, agent: &AgentName) -> usize {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.get(agent).copied().unwrap_or(0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.agent) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                // No entry per agent that ever waited: the map holds only waiters.
                held.remove(&self.agent);
            }
        }
    }
}

/// Waits until `rx` announces a change to `id` (or lags, or closes: then the caller
/// reads again anyway) or `limit` passes.
pub async fn first_change(rx: &mut broadcast::Receiver<Event>, id: &ProposalId, limit: Duration) {
    let sleep = tokio::time::sleep(limit);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) if &ev.id == id => return,
                Ok(_) => continue,
                Err(_) => return,
            },
            _ = &mut sleep => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approval_core::Seconds;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_unix(1_000_000 + s)
    }

    #[test]
    fn a_wait_ends_when_the_agent_can_act() {
        let pending = Lifecycle::new(t(100));
        assert_eq!(until(&pending, t(0)), Until::ChangeOr(t(100)));
        let approved = pending.approve(t(10), Seconds::new(60)).unwrap();
        assert_eq!(until(&approved, t(10)), Until::Now);
        let cooling = pending
            .approve_with_cooldown(t(10), Some(Seconds::new(30)), Seconds::new(60))
            .unwrap();
        assert_eq!(until(&cooling, t(10)), Until::ChangeOr(t(40)));
        assert_eq!(until(&cooling, t(40)), Until::Now);
        let executing = approved.claim(t(11)).unwrap();
        assert_eq!(until(&executing, t(11)), Until::Change);
        assert_eq!(until(&approved.revoke(t(11)).unwrap(), t(11)), Until::Now);
        assert_eq!(until(&pending, t(100)), Until::Now);
        assert_eq!(time_to(t(40), t(10)), Duration::from_millis(30_050));
        assert_eq!(time_to(t(5), t(10)), Duration::from_millis(50));
    }

    #[test]
    fn slots_are_counted_per_agent_and_given_back_on_drop() {
        let polls = LongPolls::default();
        let (a, b) = (
            AgentName::parse("agent-a").unwrap(),
            AgentName::parse("agent-b").unwrap(),
        );
        let held: Vec<Slot> = (0..MAX_LONG_POLLS_PER_AGENT)
            .map(|_| polls.try_hold(&a).unwrap())
            .collect();
        assert!(polls.try_hold(&a).is_none());
        assert!(polls.try_hold(&b).is_some());
        assert_eq!(polls.held(&a), MAX_LONG_POLLS_PER_AGENT);
        drop(held);
        assert_eq!(polls.held(&a), 0);
        assert!(polls.held.lock().unwrap().is_empty());
        assert!(polls.try_hold(&a).is_some());
    }
}
