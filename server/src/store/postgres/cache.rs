//! The read cache: records this instance read or wrote, kept exact by LISTEN/NOTIFY,
//! so that `approval_status` (a `get`) is answered from memory instead of a query.
//!
//! What "exact" means here, and why each rule is needed:
//! - **Never older than a write this instance acknowledged.** A write puts its new
//!   record (or, when it cannot tell whether something newer came in meanwhile, a
//!   tombstone) into the cache *before* its writer is answered.
//! - **Never older than another instance's write once its NOTIFY arrived.** Every
//!   write transaction sends `NOTIFY approval_events '<instance>:<id>'` and it is
//!   delivered after the commit; the listener replaces the id's entry with a
//!   tombstone, so the next read goes to the database.
//! - **A read that raced a change does not put back what it read.** Every change to
//!   the cache takes a stamp from one counter; a read notes the stamp before its
//!   query and may fill the cache only if no tombstone newer than that stamp names
//!   its id, and never over a record with a higher revision (revisions only grow).
//!   An entry evicted for room raises a floor: a read older than the floor does not
//!   fill an absent id, since what it would have found there is forgotten.
//! - **No events, no cache.** Until the listener runs `LISTEN`, and from the moment
//!   its connection is lost until it listens again, the cache is emptied and off:
//!   every read goes to the database. Missed notifications cannot leave a stale entry.
//!
//! Another instance's write is seen here when its NOTIFY arrives (milliseconds), as
//! it was before this cache by the long polls; no decision rests on a cached read,
//! since every write is a compare-and-swap on the stored revision inside the database.
//!
//! Bounded: at most [`MAX_ENTRIES`] entries and [`MAX_WEIGHT`] of memory, each record
//! counted as [`held_weight`](crate::store::shared::held_weight) of its body (what its
//! decoding can hold, not its JSON's length), the oldest evicted first, so an agent
//! that creates large or value-dense proposals grows it no further.

use crate::record::ProposalRecord;
use approval_core::ProposalId;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Most entries (records and tombstones) held.
pub const MAX_ENTRIES: usize = 50_000;
/// Most memory held: the sum of the records' sizes, each the
/// [`held_weight`](crate::store::shared::held_weight) of its body.
pub const MAX_WEIGHT: usize = 64 << 20;
/// The largest record cached (a 64th of [`MAX_WEIGHT`], by its size): larger ones are read each time.
pub const MAX_RECORD: usize = MAX_WEIGHT / 64;

/// The cache; see the module's documentation for its rules.
#[derive(Default)]
pub struct RecordCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Off until the listener listens, and whenever its connection is lost.
    live: bool,
    map: HashMap<ProposalId, Slot>,
    /// Insertion order for eviction: (id, the stamp it was inserted with).
    order: VecDeque<(ProposalId, u64)>,
    /// The stamp counter: every change to the cache takes the next one.
    stamp: u64,
    /// Reads that noted a stamp below this may not fill an absent id.
    floor: u64,
    weight: usize,
}

struct Slot {
    /// `None`: a tombstone (changed elsewhere; read the database).
    rec: Option<ProposalRecord>,
    stamp: u64,
    size: usize,
}

/// What a read notes before it queries ([`RecordCache::before_read`]).
#[derive(Debug, Clone, Copy)]
pub struct Ticket(u64);

impl RecordCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached record of `id`, if the cache is on and holds one.
    pub fn get(&self, id: &ProposalId) -> Option<ProposalRecord> {
        let inner = self.lock();
        if !inner.live {
            return None;
        }
        inner.map.get(id).and_then(|s| s.rec.clone())
    }

    /// Notes where the cache stands before a read (or a write) goes to the database.
    pub fn before_read(&self) -> Ticket {
        Ticket(self.lock().stamp)
    }

    /// A read's answer, fetched after `ticket` was taken: kept unless the cache has
    /// heard of a change to `id` since, or holds something newer.
    pub fn filled(&self, rec: &ProposalRecord, size: usize, ticket: Ticket) {
        let mut inner = self.lock();
        if !inner.live || size > MAX_RECORD {
            return;
        }
        let keep = match inner.map.get(rec.id()) {
            Some(Slot {
                rec: Some(held), ..
            }) => held.revision < rec.revision,
            Some(Slot {
                rec: None, stamp, ..
            }) => *stamp <= ticket.0,
            None => inner.floor <= ticket.0,
        };
        if keep {
            inner.put(rec.id().clone(), Some(rec.clone()), size);
        }
    }

    /// This instance committed `rec` (its write started after `ticket`): the cache
    /// holds it, or a tombstone where a change from elsewhere may have come in since,
    /// before the writer is answered.
    pub fn written(&self, rec: &ProposalRecord, size: usize, ticket: Ticket) {
        let mut inner = self.lock();
        if !inner.live {
            return;
        }
        let mine = match inner.map.get(rec.id()) {
            Some(Slot {
                rec: Some(held), ..
            }) if held.revision >= rec.revision => return,
            Some(Slot { rec: Some(_), .. }) => true,
            Some(Slot {
                rec: None, stamp, ..
            }) => *stamp <= ticket.0,
            None => inner.floor <= ticket.0,
        };
        let keep = mine && size <= MAX_RECORD;
        inner.put(rec.id().clone(), keep.then(|| rec.clone()), size);
    }

    /// Another instance changed `id` (its NOTIFY arrived): the next read goes to the
    /// database.
    pub fn changed_elsewhere(&self, id: &ProposalId) {
        let mut inner = self.lock();
        if inner.live {
            inner.put(id.clone(), None, 0);
        }
    }

    /// Turns the cache on (the listener listens) or off (its connection is lost);
    /// either way it starts empty.
    pub fn set_live(&self, live: bool) {
        let mut inner = self.lock();
        inner.map.clear();
        inner.order.clear();
        inner.weight = 0;
        inner.stamp += 1;
        inner.floor = inner.stamp;
        inner.live = live;
    }

    /// How many entries are held.
    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.lock().map.len()
    }
}

impl Inner {
    fn put(&mut self, id: ProposalId, rec: Option<ProposalRecord>, size: usize) {
        self.stamp += 1;
        let stamp = self.stamp;
        let size = if rec.is_some() { size } else { 0 };
        if let Some(old) = self.map.insert(id.clone(), Slot { rec, stamp, size }) {
            self.weight -= old.size;
        }
        self.weight += size;
        self.order.push_back((id, stamp));
        while self.map.len() > MAX_ENTRIES
            || self.weight > MAX_WEIGHT
            || self.order.len() > 2 * MAX_ENTRIES
        {
            let Some((old_id, old_stamp)) = self.order.pop_front() else {
                break;
            };
            // Skip order entries overtaken by a later put of the same id.
            if self.map.get(&old_id).is_some_and(|s| s.stamp == old_stamp) {
                if let Some(gone) = self.map.remove(&old_id) {
                    self.weight -= gone.size;
                }
                self.floor = self.floor.max(old_stamp);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The attacks on the cache, each as a race played out step by step: a read
    //! that would put back what it read before a change, a write answered while an
    //! older record is cached, a flood that would grow it without bound.
    use super::*;
    use crate::store::contract::record;

    fn rev(id: &str, revision: u64) -> ProposalRecord {
        let mut r = record(id, "agent1", 1_800_000_000);
        r.revision = revision;
        r
    }

    fn live() -> RecordCache {
        let c = RecordCache::default();
        c.set_live(true);
        c
    }

    fn id(s: &str) -> ProposalId {
        ProposalId::parse(s).unwrap()
    }

    #[test]
    fn off_until_the_listener_listens_and_emptied_when_it_stops() {
        let c = RecordCache::default();
        let t = c.before_read();
        c.filled(&rev("p-a", 1), 10, t);
        assert!(
            c.get(&id("p-a")).is_none(),
            "no listener yet: nothing served"
        );
        c.set_live(true);
        // A read that began before the listener listened may have missed a change.
        c.filled(&rev("p-a", 1), 10, t);
        assert!(c.get(&id("p-a")).is_none());
        let t = c.before_read();
        c.filled(&rev("p-a", 1), 10, t);
        assert_eq!(c.get(&id("p-a")).unwrap().revision, 1);
        c.set_live(false);
        assert!(c.get(&id("p-a")).is_none(), "listener lost: nothing served");
        c.set_live(true);
        assert!(c.get(&id("p-a")).is_none(), "back: starts empty");
    }

    #[test]
    fn a_read_that_raced_another_instances_change_does_not_put_back_what_it_read() {
        let c = live();
        // The read notes its ticket, the other instance commits revision 2 and its
        // NOTIFY arrives, then the read's answer (revision 1, read before) comes back.
        let t = c.before_read();
        c.changed_elsewhere(&id("p-a"));
        c.filled(&rev("p-a", 1), 10, t);
        assert!(c.get(&id("p-a")).is_none(), "the stale answer was kept");
        // A read begun after the NOTIFY fills it.
        let t = c.before_read();
        c.filled(&rev("p-a", 2), 10, t);
        assert_eq!(c.get(&id("p-a")).unwrap().revision, 2);
        // A cached record is dropped when another instance changes it.
        c.changed_elsewhere(&id("p-a"));
        assert!(c.get(&id("p-a")).is_none());
    }

    #[test]
    fn a_slow_read_never_replaces_a_newer_record_this_instance_wrote() {
        let c = live();
        let read = c.before_read();
        let write = c.before_read();
        c.written(&rev("p-a", 5), 10, write);
        assert_eq!(c.get(&id("p-a")).unwrap().revision, 5);
        // The read began before the write and answers revision 4.
        c.filled(&rev("p-a", 4), 10, read);
        assert_eq!(c.get(&id("p-a")).unwrap().revision, 5);
        // And a slow read of a record never cached, whose write evicted nothing:
        // the write leaves its record, so the read cannot fill an older one.
        let read = c.before_read();
        let write = c.before_read();
        c.written(&rev("p-b", 1), 10, write);
        c.filled(&rev("p-b", 0), 10, read);
        assert_eq!(c.get(&id("p-b")).unwrap().revision, 1);
    }

    #[test]
    fn a_write_that_may_have_been_overtaken_elsewhere_leaves_a_tombstone() {
        let c = live();
        // This instance's write of revision 3 commits; before it is put in the cache,
        // another instance commits revision 4 and its NOTIFY arrives.
        let write = c.before_read();
        c.changed_elsewhere(&id("p-a"));
        c.written(&rev("p-a", 3), 10, write);
        assert!(
            c.get(&id("p-a")).is_none(),
            "revision 3 would hide revision 4"
        );
        // And no read that began before can fill the older one in.
        c.filled(&rev("p-a", 3), 10, write);
        assert!(c.get(&id("p-a")).is_none());
    }

    #[test]
    fn a_flood_of_records_is_held_within_the_bounds_and_an_evicted_id_is_not_refilled_stale() {
        let c = live();
        let stale = c.before_read();
        let big = MAX_RECORD;
        for n in 0..(MAX_WEIGHT / big + 10) {
            let t = c.before_read();
            c.filled(&rev(&format!("p-{n}"), 1), big, t);
        }
        let inner = c.lock();
        assert!(inner.weight <= MAX_WEIGHT, "{} held", inner.weight);
        drop(inner);
        assert!(c.get(&id("p-0")).is_none(), "the oldest were evicted");
        // A record larger than a 64th of the budget is not cached at all.
        let t = c.before_read();
        c.filled(&rev("p-huge", 1), big + 1, t);
        assert!(c.get(&id("p-huge")).is_none());
        // A read begun before an eviction may not fill an id it knows nothing of:
        // an evicted tombstone newer than it would be forgotten.
        c.filled(&rev("p-new", 1), 10, stale);
        assert!(c.get(&id("p-new")).is_none());
        for n in 0..(MAX_ENTRIES + 100) {
            c.changed_elsewhere(&id(&format!("p-t{n}")));
        }
        assert!(c.entries() <= MAX_ENTRIES);
        assert!(c.lock().order.len() <= 2 * MAX_ENTRIES);
    }
}
