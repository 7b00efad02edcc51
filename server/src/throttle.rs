//! Forged signatures cost the forger, never the approver whose name they use.
//!
//! Every decision and signed read costs the server an Ed25519 verification before it
//! knows whether the signature is genuine. An earlier design counted failures per
//! *claimed name* and, past a budget, refused every request in that name without
//! verifying: the agent the gate guards could then silence a veto by sending a few
//! junk reads a minute as `carol` (issue #11, item 1). The rule now is: **no volume of
//! failed checks, in any name, makes the server refuse a signature that verifies.**
//!
//! Failures are charged to the **connection** they came on ([`BUDGET`] failures per
//! [`WINDOW_SECS`] window), never to the name or to the source address. A connection
//! is verified at once, always. Once it has used its budget the listener closes it
//! after that answer ([`crate::capacity`]), so whatever it pipelined behind is never
//! read. An earlier version paced an over-budget connection to [`SUSPECT_RATE`]
//! verifications a second instead, forever: 1,024 connections pipelining paced
//! forgeries then held every slot of the approver listener for 37 s (issue #31,
//! item 1). Requests with no connection (in-process embeddings without the listener)
//! share one account, and that one is still paced, as there is nothing to close.
//!
//! Why the connection and not the address: on the machine the gate guards, the agent and
//! the approvers share `127.0.0.1` (and approvers behind a proxy share its address).
//! Charging the address put a genuine veto in the same queue as the forgeries. Connection
//! ids are numbered by the listener and never reused, so a genuine approver's new
//! connection (signer-cli opens one per run) is verified at once whatever the forger did
//! before on its own connections.
//!
//! An account also records that a signature on the connection *verified*
//! ([`Forgeries::passed`]): a connection in the listener's approver reserve is served
//! only once it has (see [`crate::capacity`]).
//!
//! What a forger gets: [`BUDGET`] verifications per connection it opens. Connections
//! are bounded by the listener, so the Ed25519 work it can cause is bounded by how fast
//! it can open connections: a CPU cost, shared by everyone, never a refusal of anyone's
//! signature.
//!
//! Memory is bounded: at most [`MAX_TRACKED`] connections are tracked, more than both
//! listeners can hold open at once, and the listener forgets a connection's account when
//! it ends; when full, the entries whose windows are over are dropped first, then the
//! one with the oldest window.

use approval_core::Timestamp;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Failed checks allowed per connection per window: the answer to the last one closes
/// the connection (the shared account of requests without one is paced instead).
pub const BUDGET: u32 = 3;
/// Length of a window, in seconds.
pub const WINDOW_SECS: i64 = 60;
/// Verifications a second for requests without a connection, once over the budget.
pub const SUSPECT_RATE: u32 = 4;
/// Connections tracked at most (both listeners together hold at most 2,048 open).
pub const MAX_TRACKED: usize = 8_192;

/// The connection a request came on, numbered by the listener at accept and never
/// reused within a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectionId(pub u64);

impl ConnectionId {
    /// The next connection's id.
    pub fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ConnectionId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// One connection's fixed window (its start and the failures in it) and when a paced
/// verification may next start.
#[derive(Debug, Clone, Copy)]
struct Account {
    start: i64,
    failures: u32,
    next_turn: tokio::time::Instant,
    /// A signature on this connection has verified.
    verified: bool,
}

/// Failed-signature accounting per connection, and the pacing of connections over it.
pub struct Forgeries {
    accounts: Mutex<HashMap<Option<ConnectionId>, Account>>,
    turn: Duration,
}

impl Default for Forgeries {
    fn default() -> Self {
        Self::new(SUSPECT_RATE)
    }
}

impl Forgeries {
    /// An empty account that paces connections over budget to `rate` verifications a second.
    pub fn new(rate: u32) -> Self {
        Self {
            accounts: Mutex::default(),
            turn: Duration::from_secs(1) / rate.max(1),
        }
    }

    /// Whether `conn` has used up its budget of failures in the window at `now`.
    pub fn over_budget(&self, conn: Option<ConnectionId>, now: Timestamp) -> bool {
        let accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
        matches!(
            accounts.get(&conn),
            Some(a) if a.failures >= BUDGET && now.unix() < a.start + WINDOW_SECS
        )
    }

    /// Waits, when the shared account of requests without a connection is over its
    /// budget, for its next turn; returns at once otherwise, and always for a request
    /// on a connection (the listener closes an over-budget connection instead). Never
    /// refuses: the caller verifies afterwards either way. A turn is taken only when
    /// it has come, so a waiter that is dropped takes none.
    pub async fn admit(&self, conn: Option<ConnectionId>, now: Timestamp) {
        if conn.is_some() {
            return;
        }
        loop {
            let wait = {
                let mut accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
                let Some(a) = accounts.get_mut(&conn) else {
                    return;
                };
                if a.failures < BUDGET || now.unix() >= a.start + WINDOW_SECS {
                    return;
                }
                let here = tokio::time::Instant::now();
                if here >= a.next_turn {
                    a.next_turn = here + self.turn;
                    return;
                }
                a.next_turn - here
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Records that a signature on `conn` verified.
    pub fn passed(&self, conn: Option<ConnectionId>, now: Timestamp) {
        if conn.is_none() {
            return;
        }
        self.account(conn, now, |a| a.verified = true);
    }

    /// Whether a signature on `conn` has verified.
    pub fn verified(&self, conn: Option<ConnectionId>) -> bool {
        let accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
        accounts.get(&conn).is_some_and(|a| a.verified)
    }

    /// Drops `conn`'s account (the connection has ended; its id is never reused).
    pub fn forget(&self, conn: Option<ConnectionId>) {
        if conn.is_some() {
            let mut accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
            accounts.remove(&conn);
        }
    }

    /// Charges a failed verification to `conn`.
    pub fn failed(&self, conn: Option<ConnectionId>, now: Timestamp) {
        self.account(conn, now, |a| a.failures = a.failures.saturating_add(1));
    }

    /// Applies `f` to `conn`'s account in the window at `now`, making room first.
    fn account(&self, conn: Option<ConnectionId>, now: Timestamp, f: impl FnOnce(&mut Account)) {
        let mut accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
        let t = now.unix();
        if !accounts.contains_key(&conn) && accounts.len() >= MAX_TRACKED {
            accounts.retain(|_, a| t < a.start + WINDOW_SECS);
            if accounts.len() >= MAX_TRACKED {
                if let Some(oldest) = accounts
                    .iter()
                    .min_by_key(|(_, a)| a.start)
                    .map(|(k, _)| *k)
                {
                    accounts.remove(&oldest);
                }
            }
        }
        let fresh = Account {
            start: t,
            failures: 0,
            next_turn: tokio::time::Instant::now(),
            verified: false,
        };
        let a = accounts.entry(conn).or_insert(fresh);
        if t >= a.start + WINDOW_SECS {
            // A new window: the failures start again, a verified signature stays.
            *a = Account {
                verified: a.verified,
                ..fresh
            };
        }
        f(a);
    }

    /// Connections tracked now (for tests of the memory bound).
    pub fn tracked(&self) -> usize {
        self.accounts.lock().map(|s| s.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(n: u64) -> Option<ConnectionId> {
        Some(ConnectionId(n))
    }

    #[test]
    fn the_budget_is_per_connection_and_per_window() {
        let f = Forgeries::default();
        let t = |s: i64| Timestamp::from_unix(1_800_000_000 + s);
        for i in 0..BUDGET {
            assert!(!f.over_budget(conn(1), t(i.into())));
            f.failed(conn(1), t(i.into()));
        }
        assert!(f.over_budget(conn(1), t(59)));
        assert!(
            !f.over_budget(conn(2), t(59)),
            "another connection (a genuine approver's, from the same address) is not charged"
        );
        // A new window starts once the old one is over.
        assert!(!f.over_budget(conn(1), t(60)));
        f.failed(conn(1), t(60));
        assert!(!f.over_budget(conn(1), t(61)));
    }

    #[test]
    fn connection_ids_are_never_reused() {
        let a = ConnectionId::next();
        let b = ConnectionId::next();
        assert_ne!(a, b);
    }

    #[test]
    fn memory_is_bounded_and_the_oldest_connection_goes_first() {
        let f = Forgeries::default();
        let t = Timestamp::from_unix(1_800_000_000);
        for _ in 0..BUDGET {
            f.failed(conn(0), t);
        }
        for n in 1..(MAX_TRACKED as u64 + 100) {
            f.failed(conn(n), Timestamp::from_unix(t.unix() + 1));
        }
        assert_eq!(f.tracked(), MAX_TRACKED);
        assert!(!f.over_budget(conn(0), t), "the oldest entry was evicted");
    }

    #[tokio::test]
    async fn requests_without_a_connection_are_paced_over_budget_and_never_refused() {
        let f = Forgeries::new(100);
        let t = Timestamp::from_unix(1_800_000_000);
        for _ in 0..BUDGET {
            f.failed(None, t);
        }
        let start = tokio::time::Instant::now();
        for _ in 0..5 {
            f.admit(None, t).await;
        }
        // Five turns of 10 ms, the first one free: at least 40 ms (generous above).
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(40), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        // A connection is never paced, even over its budget: the listener closes it.
        for _ in 0..BUDGET {
            f.failed(conn(2), t);
        }
        assert!(f.over_budget(conn(2), t));
        let start = tokio::time::Instant::now();
        for _ in 0..100 {
            f.admit(conn(2), t).await;
        }
        assert!(start.elapsed() < Duration::from_millis(500));
    }

    #[test]
    fn a_verified_signature_is_remembered_per_connection_until_it_ends() {
        let f = Forgeries::default();
        let t = Timestamp::from_unix(1_800_000_000);
        assert!(!f.verified(conn(1)));
        f.failed(conn(1), t);
        f.passed(conn(1), t);
        assert!(f.verified(conn(1)));
        assert!(!f.verified(conn(2)), "another connection has not verified");
        // A new window keeps it; the end of the connection drops it.
        f.failed(conn(1), Timestamp::from_unix(t.unix() + WINDOW_SECS));
        assert!(f.verified(conn(1)));
        f.forget(conn(1));
        assert!(!f.verified(conn(1)));
        assert_eq!(f.tracked(), 0);
    }

    /// The attack on the earlier design: waiters that are dropped (cancelled HTTP/2
    /// streams, closed sockets) must not push later turns back.
    #[tokio::test]
    async fn cancelled_forgeries_do_not_push_the_next_turn_back() {
        let f = Forgeries::new(10);
        let t = Timestamp::from_unix(1_800_000_000);
        for _ in 0..BUDGET {
            f.failed(None, t);
        }
        f.admit(None, t).await; // takes the first turn
        for _ in 0..10_000 {
            let waiter = f.admit(None, t);
            // Polled once (it registers its wait), then dropped.
            let _ = tokio::time::timeout(Duration::from_millis(0), waiter).await;
        }
        let start = tokio::time::Instant::now();
        f.admit(None, t).await;
        let took = start.elapsed();
        // One turn (100 ms) at most, not 10,000 of them.
        assert!(took < Duration::from_millis(600), "{took:?}");
    }
}
