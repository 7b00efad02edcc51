//! Forged signatures cost the forger, never the approver whose name they use.
//!
//! Every decision and signed read costs the server an Ed25519 verification before it
//! knows whether the signature is genuine. An earlier design counted failures per
//! *claimed name* and, past a budget, refused every request in that name without
//! verifying: the agent the gate guards could then silence a veto by sending a few
//! junk reads a minute as `carol` (issue #11, item 1). The rule now is: **no volume of
//! failed checks, in any name, makes the server refuse a signature that verifies.**
//!
//! Failures are charged to where they come from, the client's source address
//! ([`BUDGET`] failures per [`WINDOW_SECS`] window). A source within its budget is
//! verified at once. A source over it is still verified, never refused, but its
//! verifications queue for a slot in one global *suspect lane* that admits at most
//! [`SUSPECT_RATE`] verifications a second (a reservation, like a token bucket with
//! no burst). So a flood of forgeries spends at most a small, fixed share of a core
//! on Ed25519, honest sources elsewhere never wait, and a genuine approver who shares
//! the forger's address (same host, same proxy) waits only behind what is already
//! queued: with the listener's connection limit the queue is at most
//! `MAX_CONNECTIONS / SUSPECT_RATE` ≈ 0.5 s long, and a keep-alive forger on a few
//! connections queues only a few requests at a time. The forger pays with latency;
//! the victim is verified and heard.
//!
//! Memory is bounded: at most [`MAX_SOURCES`] addresses are tracked; when full, the
//! entries whose windows are over are dropped first, then the one with the oldest
//! window. Losing an entry only forgets a forger's debt (it starts over within budget),
//! which costs verifications, never a refusal.
//!
//! A source is an IPv4 address or an IPv6 /64 (one host usually holds a whole /64,
//! so counting single IPv6 addresses would hand a forger billions of fresh budgets).
//! Requests whose source is unknown (no `ConnectInfo`, as in some in-process
//! embeddings) share one budget.

use approval_core::Timestamp;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

/// Failed checks allowed per source address per window before its verifications
/// go through the suspect lane.
pub const BUDGET: u32 = 30;
/// Length of a window, in seconds.
pub const WINDOW_SECS: i64 = 60;
/// Verifications a second admitted, all over-budget sources together.
pub const SUSPECT_RATE: u32 = 2_000;
/// Source addresses tracked at most.
pub const MAX_SOURCES: usize = 4_096;

/// One source's fixed window: its start and the failures in it.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: i64,
    failures: u32,
}

/// The account a client address is charged to: IPv4 as is (IPv4-mapped IPv6 too),
/// IPv6 by its /64 prefix.
fn account(source: Option<IpAddr>) -> Option<IpAddr> {
    match source? {
        IpAddr::V4(v4) => Some(IpAddr::V4(v4)),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => Some(IpAddr::V4(v4)),
            None => {
                let mut s = v6.segments();
                s[4..].fill(0);
                Some(IpAddr::V6(s.into()))
            }
        },
    }
}

/// Failed-signature accounting per source address, and the suspect lane.
pub struct Forgeries {
    sources: Mutex<HashMap<Option<IpAddr>, Window>>,
    /// The next free slot of the suspect lane.
    lane: Mutex<tokio::time::Instant>,
    slot: Duration,
}

impl Default for Forgeries {
    fn default() -> Self {
        Self::new(SUSPECT_RATE)
    }
}

impl Forgeries {
    /// An empty account whose suspect lane admits `rate` verifications a second.
    pub fn new(rate: u32) -> Self {
        Self {
            sources: Mutex::default(),
            lane: Mutex::new(tokio::time::Instant::now()),
            slot: Duration::from_secs(1) / rate.max(1),
        }
    }

    /// Whether `source` has used up its budget of failures in the window at `now`.
    pub fn over_budget(&self, source: Option<IpAddr>, now: Timestamp) -> bool {
        let sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        matches!(
            sources.get(&account(source)),
            Some(w) if w.failures >= BUDGET && now.unix() < w.start + WINDOW_SECS
        )
    }

    /// Waits, when `source` is over its budget, for a slot in the suspect lane; returns
    /// at once otherwise. Never refuses: the caller verifies afterwards either way.
    pub async fn admit(&self, source: Option<IpAddr>, now: Timestamp) {
        if !self.over_budget(source, now) {
            return;
        }
        let at = {
            let mut next = self.lane.lock().unwrap_or_else(|e| e.into_inner());
            let at = (*next).max(tokio::time::Instant::now());
            *next = at + self.slot;
            at
        };
        tokio::time::sleep_until(at).await;
    }

    /// Charges a failed verification to `source`.
    pub fn failed(&self, source: Option<IpAddr>, now: Timestamp) {
        let source = account(source);
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        let t = now.unix();
        if !sources.contains_key(&source) && sources.len() >= MAX_SOURCES {
            sources.retain(|_, w| t < w.start + WINDOW_SECS);
            if sources.len() >= MAX_SOURCES {
                if let Some(oldest) = sources.iter().min_by_key(|(_, w)| w.start).map(|(k, _)| *k) {
                    sources.remove(&oldest);
                }
            }
        }
        let w = sources.entry(source).or_insert(Window {
            start: t,
            failures: 0,
        });
        if t >= w.start + WINDOW_SECS {
            *w = Window {
                start: t,
                failures: 0,
            };
        }
        w.failures = w.failures.saturating_add(1);
    }

    /// Source addresses tracked now (for tests of the memory bound).
    pub fn tracked(&self) -> usize {
        self.sources.lock().map(|s| s.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(n: u32) -> Option<IpAddr> {
        Some(IpAddr::V4(Ipv4Addr::from(n)))
    }

    #[test]
    fn the_budget_is_per_source_and_per_window() {
        let f = Forgeries::default();
        let t = |s: i64| Timestamp::from_unix(1_800_000_000 + s);
        for i in 0..BUDGET {
            assert!(!f.over_budget(ip(1), t(i.into())));
            f.failed(ip(1), t(i.into()));
        }
        assert!(f.over_budget(ip(1), t(59)));
        assert!(
            !f.over_budget(ip(2), t(59)),
            "another source is not charged"
        );
        // A new window starts once the old one is over.
        assert!(!f.over_budget(ip(1), t(60)));
        f.failed(ip(1), t(60));
        assert!(!f.over_budget(ip(1), t(61)));
    }

    #[test]
    fn an_ipv6_slash_64_is_one_source() {
        let f = Forgeries::default();
        let t = Timestamp::from_unix(1_800_000_000);
        let v6 = |last: u16| Some(IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, last]));
        for i in 0..BUDGET {
            f.failed(v6(i as u16), t);
        }
        assert!(f.over_budget(v6(9999), t));
        assert!(!f.over_budget(Some(IpAddr::from([0x2001, 0xdb8, 0, 2, 0, 0, 0, 1])), t));
        // IPv4-mapped IPv6 is the IPv4 address.
        for _ in 0..BUDGET {
            f.failed(ip(7), t);
        }
        let mapped = Some(IpAddr::V6(std::net::Ipv4Addr::from(7u32).to_ipv6_mapped()));
        assert!(f.over_budget(mapped, t));
    }

    #[test]
    fn memory_is_bounded_and_the_oldest_source_goes_first() {
        let f = Forgeries::default();
        let t = Timestamp::from_unix(1_800_000_000);
        for _ in 0..BUDGET {
            f.failed(ip(0), t);
        }
        for n in 1..(MAX_SOURCES as u32 + 100) {
            f.failed(ip(n), Timestamp::from_unix(t.unix() + 1));
        }
        assert_eq!(f.tracked(), MAX_SOURCES);
        assert!(!f.over_budget(ip(0), t), "the oldest entry was evicted");
    }

    #[tokio::test]
    async fn an_over_budget_source_waits_for_the_lane_and_is_never_refused() {
        let f = Forgeries::new(100);
        let t = Timestamp::from_unix(1_800_000_000);
        for _ in 0..BUDGET {
            f.failed(ip(1), t);
        }
        let start = tokio::time::Instant::now();
        for _ in 0..5 {
            f.admit(ip(1), t).await;
        }
        // Five slots of 10 ms, the first one free: at least 40 ms (generous above).
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(40), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        // Another source does not queue in the lane at all.
        for _ in 0..100 {
            f.admit(ip(2), t).await;
        }
    }
}
