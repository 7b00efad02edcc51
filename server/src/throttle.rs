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
//! within its budget is verified at once. A connection over it is still verified, never
//! refused, but at most [`SUSPECT_RATE`] times a second: its requests wait for their
//! turn, and a waiter that gives up (a cancelled stream, a closed socket) takes no turn
//! with it, so nothing queues up for later.
//!
//! Why the connection and not the address: on the machine the gate guards, the agent and
//! the approvers share `127.0.0.1` (and approvers behind a proxy share its address).
//! Charging the address put a genuine veto in the same queue as the forgeries: a forger
//! who kept thousands of forgeries waiting (HTTP/2 streams, cancelled requests) could
//! delay carol's `reject` past her client's time-out, which is the very attack this
//! module exists to stop. Connection ids are numbered by the listener and never reused,
//! so a genuine approver's new connection (signer-cli opens one per run) is verified at
//! once whatever the forger did before on its own connections.
//!
//! What a forger still gets: [`BUDGET`] immediate verifications per connection it opens,
//! then [`SUSPECT_RATE`] a second on each. Connections are bounded by the listener
//! (1,024 per listener, a deadline to the first request, at most 32 concurrent HTTP/2
//! streams each), so the Ed25519 work it can cause is bounded by how fast it can open
//! connections: a CPU cost, shared by everyone, never a refusal of anyone's signature.
//!
//! Memory is bounded: at most [`MAX_TRACKED`] connections are tracked, more than both
//! listeners can hold open at once; when full, the entries whose windows are over are
//! dropped first, then the one with the oldest window. Requests whose connection is
//! unknown (no [`ConnectionId`], as in in-process embeddings without the listener)
//! share one account.

use approval_core::Timestamp;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Failed checks allowed per connection per window before its verifications are paced.
pub const BUDGET: u32 = 3;
/// Length of a window, in seconds.
pub const WINDOW_SECS: i64 = 60;
/// Verifications a second on a connection over its budget.
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

    /// Waits, when `conn` is over its budget, for its next turn; returns at once
    /// otherwise. Never refuses: the caller verifies afterwards either way. A turn is
    /// taken only when it has come, so a waiter that is dropped takes none.
    pub async fn admit(&self, conn: Option<ConnectionId>, now: Timestamp) {
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

    /// Charges a failed verification to `conn`.
    pub fn failed(&self, conn: Option<ConnectionId>, now: Timestamp) {
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
        };
        let a = accounts.entry(conn).or_insert(fresh);
        if t >= a.start + WINDOW_SECS {
            *a = fresh;
        }
        a.failures = a.failures.saturating_add(1);
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
    async fn an_over_budget_connection_is_paced_and_never_refused() {
        let f = Forgeries::new(100);
        let t = Timestamp::from_unix(1_800_000_000);
        for _ in 0..BUDGET {
            f.failed(conn(1), t);
        }
        let start = tokio::time::Instant::now();
        for _ in 0..5 {
            f.admit(conn(1), t).await;
        }
        // Five turns of 10 ms, the first one free: at least 40 ms (generous above).
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(40), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        // Another connection is not paced at all.
        let start = tokio::time::Instant::now();
        for _ in 0..100 {
            f.admit(conn(2), t).await;
        }
        assert!(start.elapsed() < Duration::from_millis(500));
    }

    /// The attack on the earlier design: waiters that are dropped (cancelled HTTP/2
    /// streams, closed sockets) must not push later turns back.
    #[tokio::test]
    async fn cancelled_forgeries_do_not_push_the_next_turn_back() {
        let f = Forgeries::new(10);
        let t = Timestamp::from_unix(1_800_000_000);
        for _ in 0..BUDGET {
            f.failed(conn(1), t);
        }
        f.admit(conn(1), t).await; // takes the first turn
        for _ in 0..10_000 {
            let waiter = f.admit(conn(1), t);
            // Polled once (it registers its wait), then dropped.
            let _ = tokio::time::timeout(Duration::from_millis(0), waiter).await;
        }
        let start = tokio::time::Instant::now();
        f.admit(conn(1), t).await;
        let took = start.elapsed();
        // One turn (100 ms) at most, not 10,000 of them.
        assert!(took < Duration::from_millis(600), "{took:?}");
    }
}
