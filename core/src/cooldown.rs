//! A policy's cooldown: after quorum, a time during which the proposal is APPROVED
//! but not yet executable, so that any approver can still revoke or veto it.
//!
//! Defence in depth, after Safe's delay modules: a revoke must win even against an
//! agent that executes the moment quorum lands (or that delays the revoke by holding
//! the server busy). A policy sets `cooldown = "60s"`; the preview carries it, so
//! approvers sign it; the execution window is `[approved_at + cooldown, approved_at +
//! execute_within)`. Every rule about it lives here and in [`Lifecycle`], once: the
//! server's execute, its status answers and long polls, and a receipt verifier's
//! attestation check all ask these functions.

use crate::action::Action;
use crate::code::Code;
use crate::message::Decision;
use crate::status::{Lifecycle, Status};
use crate::time::Timestamp;

pub use crate::time::execution_window;

impl Lifecycle {
    /// When the proposal is APPROVED at `now` but still in its cooldown, the moment
    /// it becomes executable; otherwise `None`.
    pub fn cooling_down_until(&self, now: Timestamp) -> Option<Timestamp> {
        let cur = self.at(now);
        match (cur.status, cur.executable_from) {
            (Status::Approved, Some(from)) if now < from => Some(from),
            _ => None,
        }
    }

    /// Whether a signed `decision` may be recorded at `now`: approvals and
    /// rejections while PENDING, a rejection also during the cooldown (a veto then
    /// ends it), a revoke while APPROVED, a resolve while OUTCOME_UNKNOWN.
    pub fn accepts(&self, decision: Decision, now: Timestamp) -> bool {
        self.permits(Action::of(decision), now)
    }

    /// The code an agent sees for the proposal at `now`: `COOLING_DOWN` while an
    /// approval waits out its cooldown, otherwise the status's own code.
    pub fn code_at(&self, now: Timestamp) -> Code {
        if self.cooling_down_until(now).is_some() {
            Code::CoolingDown
        } else {
            self.at(now).status.code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::Outcome;
    use crate::time::Seconds;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_unix(1_000_000 + s)
    }

    fn cooling() -> Lifecycle {
        Lifecycle::new(t(100))
            .approve_with_cooldown(t(10), Some(Seconds::new(30)), Seconds::new(60))
            .unwrap()
    }

    #[test]
    fn the_window_opens_after_the_cooldown_and_closes_as_without_one() {
        let l = cooling();
        assert_eq!(
            (l.approved_at, l.executable_from, l.executable_until),
            (Some(t(10)), Some(t(40)), Some(t(70)))
        );
        assert_eq!(
            execution_window(t(10), None, Seconds::new(60)),
            (t(10), t(70))
        );
        for now in 10..40 {
            assert!(!l.executable(t(now)), "{now}");
            assert_eq!(l.cooling_down_until(t(now)), Some(t(40)));
            assert_eq!(l.code_at(t(now)), Code::CoolingDown);
        }
        for now in 40..70 {
            assert!(l.executable(t(now)), "{now}");
            assert_eq!(l.code_at(t(now)), Code::QuorumReached);
        }
        assert!(!l.executable(t(70)));
        assert_eq!(l.code_at(t(70)), Code::Expired);
    }

    #[test]
    fn an_execute_during_the_cooldown_is_refused_and_consumes_nothing() {
        let l = cooling();
        let e = l.claim(t(39)).unwrap_err();
        assert_eq!((e.from, e.code), (Status::Approved, Code::CoolingDown));
        // The refusal changed nothing: the same lifecycle claims once the cooldown ends.
        assert_eq!(l.claim(t(40)).unwrap().status, Status::Executing);
    }

    #[test]
    fn a_revoke_or_a_veto_during_the_cooldown_ends_it() {
        let l = cooling();
        assert!(l.accepts(Decision::Revoke, t(20)));
        assert!(l.accepts(Decision::Reject, t(20)));
        assert!(!l.accepts(Decision::Approve, t(20)));
        assert_eq!(l.revoke(t(20)).unwrap().status, Status::Revoked);
        let rejected = l.reject(t(20)).unwrap();
        assert_eq!(rejected.status, Status::Rejected);
        assert_eq!(rejected.claim(t(45)).unwrap_err().code, Code::Rejected);
        // After the cooldown a veto no longer applies (a revoke still does).
        assert!(!l.accepts(Decision::Reject, t(40)));
        assert_eq!(l.reject(t(40)).unwrap_err().from, Status::Approved);
        assert!(l.accepts(Decision::Revoke, t(40)));
    }

    #[test]
    fn without_a_cooldown_nothing_changes() {
        let l = Lifecycle::new(t(100))
            .approve(t(10), Seconds::new(60))
            .unwrap();
        assert_eq!(l.executable_from, None);
        assert!(l.executable(t(10)));
        assert!(!l.accepts(Decision::Reject, t(10)));
        assert_eq!(l.code_at(t(10)), Code::QuorumReached);
        let json = serde_json::to_value(l).unwrap();
        assert!(json.get("executable_from").is_none(), "{json}");
        let done = l.claim(t(10)).unwrap().finish(Outcome::Succeeded).unwrap();
        assert_eq!(done.cooling_down_until(t(10)), None);
    }
}
