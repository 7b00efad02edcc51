//! A budget of failed signature checks per approver.
//!
//! Every decision and signed read costs the server an Ed25519 verification before it
//! knows whether the signature is genuine, so anyone who can reach the approver API
//! could keep a core busy with forgeries. Names outside the keyring are refused
//! before any verification; for names in it, after [`BUDGET`] failures within a
//! [`WINDOW_SECS`] window, further decisions and reads in that name are refused
//! without verifying until the window ends. The cost of that is a lock-out of the
//! named approver while someone forges in their name, which the refusal says
//! plainly; the alternative, verifying everything, lets the forger slow the whole
//! service. Memory is bounded by the keyring: only its names get a counter.

use approval_core::{ApproverName, Code, Timestamp};
use std::collections::HashMap;
use std::sync::Mutex;

use crate::service::ServiceError;

/// Failed checks allowed per approver per window.
pub const BUDGET: u32 = 30;
/// Length of a window, in seconds.
pub const WINDOW_SECS: i64 = 60;

/// Failed-signature counters, one fixed window per approver.
#[derive(Default)]
pub struct BadSignatures {
    windows: Mutex<HashMap<ApproverName, (i64, u32)>>,
}

impl BadSignatures {
    /// Refuses (LIMIT_EXCEEDED) when `who` has used up the budget of this window.
    pub fn check(&self, who: &ApproverName, now: Timestamp) -> Result<(), ServiceError> {
        let windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        match windows.get(who) {
            Some(&(start, n)) if n >= BUDGET && now.unix() < start + WINDOW_SECS => {
                let until = Timestamp::from_unix(start + WINDOW_SECS);
                Err(ServiceError::new(
                    Code::LimitExceeded,
                    format!(
                        "{n} signatures in the name of {who} failed to verify since {}: decisions \
                         and reads as {who} are refused until {until}. If that was not {who}, \
                         someone is forging in their name; if it was, check the key signer-cli uses",
                        Timestamp::from_unix(start)
                    ),
                )
                .retry(true))
            }
            _ => Ok(()),
        }
    }

    /// Counts a failed verification for `who` (a name from the keyring).
    pub fn failed(&self, who: &ApproverName, now: Timestamp) {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let w = windows.entry(who.clone()).or_insert((now.unix(), 0));
        if now.unix() >= w.0 + WINDOW_SECS {
            *w = (now.unix(), 0);
        }
        w.1 = w.1.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_per_approver_and_per_window() {
        let b = BadSignatures::default();
        let (alice, bob) = (
            ApproverName::parse("alice").unwrap(),
            ApproverName::parse("bob").unwrap(),
        );
        let t = |s: i64| Timestamp::from_unix(1_800_000_000 + s);
        for i in 0..BUDGET {
            assert!(b.check(&alice, t(i.into())).is_ok());
            b.failed(&alice, t(i.into()));
        }
        let e = b.check(&alice, t(59)).unwrap_err();
        assert_eq!(e.code, Code::LimitExceeded);
        assert!(e.message.contains("alice"), "{}", e.message);
        assert!(b.check(&bob, t(59)).is_ok());
        // A new window starts once the old one is over.
        assert!(b.check(&alice, t(60)).is_ok());
        b.failed(&alice, t(60));
        assert!(b.check(&alice, t(61)).is_ok());
    }
}
