//! The storage rules that keep an effect to one run, as plain decisions: when a
//! record's compare-and-swap applies (the execute claim and every other change),
//! when a claim's lease is renewed, when a leadership lease is granted, renewed or
//! still current (the fence of a leader's write), and when a group commit's flush
//! covers a write, and how a batched write transaction decides its members in
//! order ([`Batch`]).
//!
//! Why they live here and not inside each store: two copies of a rule drift apart,
//! and a model that restates the rule in its own words checks its own story, not
//! the server. So the stores decide with these functions on what they read (sled's
//! `update`, PostgreSQL's `write_record` and `take_or_renew`, the server's
//! `GroupCommit::flush`), and `approval-model` (issue #37) calls the very same
//! functions on its abstract state: a change to a rule here changes what the model
//! checks. Where a rule is also spelled in SQL (the leadership statements in
//! `server/src/store/postgres/lease.rs`), a PostgreSQL test compares the SQL's
//! answers with these functions row by row.
//!
//! No I/O, no clock: "expired" is an argument, decided by whoever owns the clock
//! (for leases, the database's).

/// What a write to a record must find inside its atomic step, besides the revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Guard {
    /// Nothing more: an ordinary change (a claim, a finish, a decision).
    Revision,
    /// Ending an EXECUTING claim whose lease ran out (the lease sweep): the lease
    /// must still be expired, and the sweeper's leadership term still current,
    /// both read inside the same transaction.
    ExpiredClaim {
        /// The record's `lease_until` has passed, on the database's clock.
        lease_expired: bool,
        /// [`term_current`] for the sweeper's believed term.
        term_current: bool,
    },
}

/// Whether a compare-and-swap writing revision `new_revision` applies over the
/// stored revision `stored_revision`: only over the revision it was computed from,
/// so of any number of concurrent claims of one APPROVED record exactly one applies
/// (each computed `stored + 1` from the same read; the first to apply moves the
/// stored revision on). A refusal hands back what is stored (`Cas::Conflict`).
pub fn cas_applies(stored_revision: u64, new_revision: u64, guard: Guard) -> bool {
    stored_revision.checked_add(1) == Some(new_revision)
        && match guard {
            Guard::Revision => true,
            Guard::ExpiredClaim {
                lease_expired,
                term_current,
            } => lease_expired && term_current,
        }
}

/// Whether a claim's lease renewal extends the lease of a record stored with
/// `executing` (its status is EXECUTING): only then. A renewal never moves a status;
/// a record already ended (finished, or ended by the sweep) keeps no lease.
pub fn lease_renews(executing: bool) -> bool {
    executing
}

/// A leadership lease row (`leadership` table, migration 2): who holds the task,
/// the term, and whether `expires_at` has passed on the database's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaderRow<H> {
    /// The holding instance.
    pub holder: H,
    /// The term (fencing token): grows whenever the lease passes to another holder
    /// or a lapsed lease is taken again.
    pub epoch: u64,
    /// Whether the lease has expired.
    pub expired: bool,
}

/// `take_or_renew`: the term `me` holds after asking for the lease described by
/// `row` (`None`: no row yet), or `None` while another holder's lease is unexpired.
/// A holder renewing its own unexpired lease keeps its term; taking a lapsed or
/// another holder's expired lease starts a new term.
pub fn take_or_renew<H: PartialEq>(row: Option<&LeaderRow<H>>, me: &H) -> Option<u64> {
    match row {
        None => Some(1),
        Some(r) if r.holder == *me && !r.expired => Some(r.epoch),
        Some(r) if r.expired => Some(r.epoch + 1),
        Some(_) => None,
    }
}

/// `renew`: whether `me` may extend term `epoch` (only while it is still current
/// and unexpired; a lapsed lease is taken again as a new term, never extended).
pub fn renews_term<H: PartialEq>(row: Option<&LeaderRow<H>>, me: &H, epoch: u64) -> bool {
    term_current(row, me, Some(epoch))
}

/// `fenced`: whether term `epoch` of `me` is current and unexpired. A write made as
/// leader commits only if this holds inside its own transaction; no believed term
/// (`None`) is never current.
pub fn term_current<H: PartialEq>(row: Option<&LeaderRow<H>>, me: &H, epoch: Option<u64>) -> bool {
    match (row, epoch) {
        (Some(r), Some(e)) => r.holder == *me && r.epoch == e && !r.expired,
        _ => false,
    }
}

/// Whether a group commit's flushes, having completed up to ticket `completed`,
/// cover a writer holding `ticket`. The writer takes its ticket *after* its write,
/// and a flush covers the tickets handed out before it started, so a covered
/// writer's write is durable and may be acknowledged; before that it may not.
pub fn flush_covers(completed: u64, ticket: u64) -> bool {
    completed >= ticket
}

/// What one member of a batched write transaction asks for (PostgreSQL's group
/// commit: several requests' writes in one transaction under one audit head lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchWrite {
    /// A new record stored at `revision`: applies only where no record of that id
    /// exists.
    Create {
        /// The revision the new record carries.
        revision: u64,
    },
    /// A compare-and-swap to `new_revision` ([`cas_applies`], [`Guard::Revision`]).
    Update {
        /// The revision the writer computed (stored + 1 of what it read).
        new_revision: u64,
    },
}

/// How the batch decided one member. Only [`BatchDecision::Applied`] members are
/// written; every member is answered only after the batch's one commit returns, and
/// if that commit fails (or its answer is lost) no member is answered as applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchDecision {
    /// Written: later members see its revision.
    Applied,
    /// A create over an existing record (one stored, or created earlier in the batch).
    Exists,
    /// An update of a record that does not exist.
    Missing,
    /// An update whose compare-and-swap fails against the running revision.
    Conflict,
}

/// A batch's running view of the rows its members touch: what the locked read found
/// ([`Batch::found`]), moved on by each applied member in order, so that two
/// members of one batch decide exactly as two transactions one after the other
/// would (of two claims of one record from the same read, the first applies, the
/// second conflicts).
#[derive(Debug, Clone)]
pub struct Batch<K> {
    rows: std::collections::HashMap<K, Option<u64>>,
}

impl<K: std::hash::Hash + Eq + Clone> Default for Batch<K> {
    fn default() -> Self {
        Self {
            rows: std::collections::HashMap::new(),
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone> Batch<K> {
    /// Records what the locked read found for `id`: its stored revision, or `None`.
    pub fn found(&mut self, id: K, revision: Option<u64>) {
        self.rows.insert(id, revision);
    }

    /// The running revision of `id` (`None`: no such record yet).
    pub fn revision(&self, id: &K) -> Option<u64> {
        self.rows.get(id).copied().flatten()
    }

    /// How the next member would be decided, without moving the view (a member the
    /// store then refuses for another reason, such as a pending limit, is not applied).
    pub fn check(&self, id: &K, write: BatchWrite) -> BatchDecision {
        self.outcome(id, write).0
    }

    /// Decides the next member, in the batch's order, and moves the running view on
    /// if it applies. A row the read did not report counts as absent.
    pub fn decide(&mut self, id: &K, write: BatchWrite) -> BatchDecision {
        let (decision, after) = self.outcome(id, write);
        self.rows.insert(id.clone(), after);
        decision
    }

    fn outcome(&self, id: &K, write: BatchWrite) -> (BatchDecision, Option<u64>) {
        let now = self.revision(id);
        match (write, now) {
            (BatchWrite::Create { .. }, Some(_)) => (BatchDecision::Exists, now),
            (BatchWrite::Create { revision }, None) => (BatchDecision::Applied, Some(revision)),
            (BatchWrite::Update { .. }, None) => (BatchDecision::Missing, None),
            (BatchWrite::Update { new_revision }, Some(stored)) => {
                if cas_applies(stored, new_revision, Guard::Revision) {
                    (BatchDecision::Applied, Some(new_revision))
                } else {
                    (BatchDecision::Conflict, now)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_of_two_claims_from_the_same_read_applies() {
        // Both computed revision 4 from a read of revision 3.
        assert!(cas_applies(3, 4, Guard::Revision));
        // The first moved the stored revision to 4: the second is refused.
        assert!(!cas_applies(4, 4, Guard::Revision));
        assert!(!cas_applies(u64::MAX, 0, Guard::Revision));
    }

    #[test]
    fn an_expired_claim_ends_only_while_expired_and_under_the_current_term() {
        for (lease_expired, term_current) in [(false, false), (false, true), (true, false)] {
            let g = Guard::ExpiredClaim {
                lease_expired,
                term_current,
            };
            assert!(!cas_applies(3, 4, g));
        }
        let g = Guard::ExpiredClaim {
            lease_expired: true,
            term_current: true,
        };
        assert!(cas_applies(3, 4, g));
        assert!(!cas_applies(4, 4, g));
    }

    #[test]
    fn leadership_terms() {
        let live = |holder, epoch| LeaderRow {
            holder,
            epoch,
            expired: false,
        };
        let lapsed = |holder, epoch| LeaderRow {
            holder,
            epoch,
            expired: true,
        };
        assert_eq!(take_or_renew(None, &1), Some(1));
        assert_eq!(take_or_renew(Some(&live(1, 5)), &1), Some(5));
        assert_eq!(take_or_renew(Some(&live(2, 5)), &1), None);
        assert_eq!(take_or_renew(Some(&lapsed(2, 5)), &1), Some(6));
        assert_eq!(take_or_renew(Some(&lapsed(1, 5)), &1), Some(6));
        assert!(term_current(Some(&live(1, 5)), &1, Some(5)));
        assert!(!term_current(Some(&live(1, 5)), &1, Some(4)));
        assert!(!term_current(Some(&lapsed(1, 5)), &1, Some(5)));
        assert!(!term_current(Some(&live(2, 5)), &1, Some(5)));
        assert!(!term_current(Some(&live(1, 5)), &1, None));
        assert!(!renews_term(None, &1, 1));
        assert!(flush_covers(3, 3) && !flush_covers(2, 3));
        assert!(lease_renews(true) && !lease_renews(false));
    }

    #[test]
    fn a_batch_decides_its_members_as_transactions_in_order() {
        let mut b = Batch::default();
        b.found("a", Some(3));
        b.found("new", None);
        // Two claims of "a" computed from the same read of revision 3.
        let claim = BatchWrite::Update { new_revision: 4 };
        assert_eq!(b.decide(&"a", claim), BatchDecision::Applied);
        assert_eq!(b.decide(&"a", claim), BatchDecision::Conflict);
        assert_eq!(b.revision(&"a"), Some(4));
        // A later member computed from the first one's result applies.
        let next = BatchWrite::Update { new_revision: 5 };
        assert_eq!(b.decide(&"a", next), BatchDecision::Applied);
        // Create, then a second create of the same id, then an update of it.
        let create = BatchWrite::Create { revision: 0 };
        assert_eq!(b.decide(&"new", create), BatchDecision::Applied);
        assert_eq!(b.decide(&"new", create), BatchDecision::Exists);
        let first = BatchWrite::Update { new_revision: 1 };
        assert_eq!(b.decide(&"new", first), BatchDecision::Applied);
        // Unknown ids are absent.
        assert_eq!(b.decide(&"gone", first), BatchDecision::Missing);
    }
}
