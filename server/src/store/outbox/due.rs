//! Which outbox entries the deliverer looks at next: those due, fairly across kinds.
//!
//! Why it exists: the deliverer once read the 64 oldest entries and skipped those
//! waiting for a retry, so 64 entries for a channel that kept failing (an agent
//! makes them in two seconds) hid every later notification for as long as they
//! kept failing (issue #31, item 3). Here an entry waiting for its retry takes no
//! place, due entries come by next attempt, and no kind takes more than its share:
//! each kind's first entry, then each kind's second, and so on, at most `per_kind`
//! of one kind. The embedded store feeds its entries through [`Pick`]; a shared
//! store computes the same selection in SQL, and the store contract checks both.
//!
//! Memory is bounded by `per_kind` entries per kind, whatever the outbox holds.

use super::OutboxItem;
use std::collections::{BTreeMap, BinaryHeap};

/// A selection being made, one offered entry at a time.
pub struct Pick {
    now_ms: u64,
    per_kind: usize,
    /// Per kind, its `per_kind` earliest due entries so far (a max-heap by
    /// `(next_try_ms, seq)`, so the latest is dropped when a better one comes).
    kinds: BTreeMap<String, BinaryHeap<Entry>>,
}

struct Entry {
    key: (u64, u64),
    item: OutboxItem,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}

impl Pick {
    /// An empty selection of entries due at `now_ms`, at most `per_kind` per kind.
    pub fn new(now_ms: u64, per_kind: usize) -> Self {
        Self {
            now_ms,
            per_kind,
            kinds: BTreeMap::new(),
        }
    }

    /// Considers one entry (any order).
    pub fn offer(&mut self, seq: u64, item: OutboxItem) {
        if item.next_try_ms > self.now_ms || self.per_kind == 0 {
            return;
        }
        let heap = self.kinds.entry(item.kind.clone()).or_default();
        let e = Entry {
            key: (item.next_try_ms, seq),
            item,
        };
        if heap.len() < self.per_kind {
            heap.push(e);
        } else if heap.peek().is_some_and(|latest| e.key < latest.key) {
            heap.pop();
            heap.push(e);
        }
    }

    /// The selection: by rank within its kind, then next attempt, then number; at
    /// most `limit` entries.
    pub fn finish(self, limit: usize) -> Vec<(u64, OutboxItem)> {
        let mut ranked: Vec<(usize, (u64, u64), OutboxItem)> = Vec::new();
        for heap in self.kinds.into_values() {
            for (rank, e) in heap.into_sorted_vec().into_iter().enumerate() {
                ranked.push((rank, e.key, e.item));
            }
        }
        ranked.sort_by_key(|(rank, key, _)| (*rank, *key));
        ranked
            .into_iter()
            .take(limit)
            .map(|(_, (_, seq), item)| (seq, item))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approval_core::notify::NotifyEvent;
    use approval_core::{ProposalId, Timestamp};

    fn item(kind: &str, next_try_ms: u64) -> OutboxItem {
        OutboxItem {
            event: NotifyEvent::Waiting,
            proposal_id: ProposalId::parse("p-x").unwrap(),
            approvals: vec![],
            decided: vec![],
            outcome: None,
            at: Timestamp::from_unix(0),
            attempts: 0,
            next_try_ms,
            done: vec![],
            kind: kind.into(),
            by: None,
        }
    }

    #[test]
    fn a_thousand_due_entries_of_one_kind_leave_room_for_another_kind() {
        let mut p = Pick::new(1_000, 8);
        for seq in 0..1_000 {
            p.offer(seq, item("flood", 0));
        }
        p.offer(5_000, item("deploy.prod", 0));
        // Waiting for a retry: never picked, even when older.
        p.offer(u64::MAX, item("deploy.prod", 2_000));
        let got = p.finish(4);
        let seqs: Vec<u64> = got.iter().map(|(s, _)| *s).collect();
        // Each kind's first comes before any kind's second (among firsts, by next
        // attempt then number, as the SQL of shared stores orders them).
        assert_eq!(seqs, vec![0, 5_000, 1, 2]);
    }

    #[test]
    fn each_kind_comes_by_next_attempt_then_number() {
        let mut p = Pick::new(100, 3);
        p.offer(1, item("a", 50));
        p.offer(2, item("a", 10));
        p.offer(3, item("a", 10));
        p.offer(4, item("a", 0));
        let seqs: Vec<u64> = p.finish(10).iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, vec![4, 2, 3]);
    }
}
