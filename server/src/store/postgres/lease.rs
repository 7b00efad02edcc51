//! Leadership of the background tasks (expiry and lease sweeps, notification
//! delivery) among the instances sharing one PostgreSQL database: one lease row per
//! task on the database's clock, renewed by its holder, taken over once it has
//! expired, and checked (fenced) before every act of a leader.
//!
//! Why a lease and not the session advisory lock used before (issue #31, item 5): an
//! advisory lock lives as long as its connection, and a frozen instance (SIGSTOP, a
//! paused VM, a stalled host) keeps its TCP connection open; no other instance ever
//! took over, so a dead instance's claim stayed EXECUTING and no notification went
//! out. A lease is kept only by acting: a leader that stops renewing loses it.
//!
//! - **Term.** Table `leadership (task, holder, epoch, expires_at)` (migration 2).
//!   [`take_or_renew`] is one statement: it renews the row when this instance holds
//!   it, takes it when its `expires_at` has passed, and otherwise leaves it alone.
//!   Expiry is decided by the database's clock (`clock_timestamp()`) alone, so the
//!   instances' clocks never matter. `epoch` grows whenever the row passes to another
//!   holder or a lapsed lease is taken again: it is the fencing token of a term.
//! - **Stepping down early.** The holder counts its lease from when it *sent* the
//!   renewal (a monotonic instant, which keeps running while the process is stopped)
//!   and believes it only until [`Leadership::margin`] before the end. After a freeze
//!   of any length it knows at once, without a round trip, that it may have been
//!   replaced. This only ever makes it stop sooner than the database would: the term
//!   itself is the database's.
//! - **Fence.** Before each act a leader calls [`PgStore::lead`] with `take = false`
//!   (`Store::still_leads`), which also renews on the database when a renewal is due
//!   (refused once another instance took over). A write made as leader (ending an
//!   expired claim) checks its term inside its own transaction ([`fenced`]): a
//!   `FOR SHARE` lock of the lease row with this holder and epoch, so it commits only
//!   while that term is current, and a takeover waits until it has committed.
//!
//! Timings, derived from the claim lease (`serve --claim-lease`, default 30 s): the
//! leader lease is the claim lease within [1 s, 10 s], so 10 s by default; a frozen
//! leader is replaced within one leader lease plus one sweep tick, which is well within
//! the time its own claims take to expire. It is renewed every 3/10 of the lease (3 s):
//! two renewals in a row may be lost (a slow round trip, a busy host) before the leader
//! steps down. The leader stops acting 1/5 of the lease (2 s) before the end as it
//! counts it, which leaves room for a renewal under way and for clock rate drift.
//! Shorter leases would fail over sooner but turn every stall of a loaded host into a
//! change of leader; longer ones would leave sweeps and notifications stopped longer.
//!
//! What a fence cannot cover: a notification is an HTTP request to someone else, sent
//! after the check. A leader frozen between its check and the send (microseconds:
//! nothing but the send follows the check) may still send once after waking. Every
//! delivery carries the same `delivery` id from whichever instance sends it
//! (`<server_id>-<outbox seq>`, PROTOCOL §14.2), so a receiver can drop the repeat.

use super::{pg_err, pool_err, PgStore, StoreError, Tx};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The task whose leader sweeps (`run.rs` leads it under this name): its writes
/// (ending expired claims) are fenced by its term.
pub const SWEEP: &str = "sweep";

/// The longest leader lease (the default, with the default claim lease).
pub const MAX_LEADER_LEASE: Duration = Duration::from_secs(10);
/// The shortest leader lease (a claim lease of 1 s in tests).
const MIN_LEADER_LEASE: Duration = Duration::from_secs(1);
/// A non-leader asks to take a lease at most this often (each ask is a round trip).
const TAKEOVER_RETRY: Duration = Duration::from_millis(300);

/// This instance's view of its leases, by task.
pub struct Leadership {
    /// This instance's id in `leadership.holder` (random per process).
    holder: String,
    lease: Duration,
    tasks: Mutex<HashMap<String, TaskState>>,
}

#[derive(Default)]
struct TaskState {
    held: Option<Held>,
    /// When this instance last asked to take the lease (throttles [`TAKEOVER_RETRY`]).
    asked: Option<Instant>,
}

/// A lease this instance was granted: its term, and when the request that granted
/// (or last renewed) it was sent.
#[derive(Clone, Copy, Debug)]
struct Held {
    epoch: i64,
    sent_at: Instant,
}

/// What [`PgStore::lead`] does next for a task.
enum Next {
    /// Lead, believed, no renewal due: act.
    Act,
    /// Not leading, and not asking now.
    No,
    /// Ask the database: renew term `Some(epoch)`, or take the lease (`None`).
    Ask(Option<i64>),
}

impl Leadership {
    pub(super) fn new(holder: String, claim_lease: Duration) -> Self {
        Self {
            holder,
            lease: Self::lease_for(claim_lease),
            tasks: Mutex::new(HashMap::new()),
        }
    }

    /// The leader lease for a claim lease: see the module's doc.
    pub fn lease_for(claim_lease: Duration) -> Duration {
        claim_lease.clamp(MIN_LEADER_LEASE, MAX_LEADER_LEASE)
    }

    /// How often a leader renews its leases for claim lease `claim_lease` (a leader's
    /// loop must tick at least this often to keep its lead).
    pub fn renewal_for(claim_lease: Duration) -> Duration {
        Self::lease_for(claim_lease) * 3 / 10
    }

    pub(super) fn set_claim_lease(&mut self, claim_lease: Duration) {
        self.lease = Self::lease_for(claim_lease);
    }

    /// How often the holder renews.
    fn renew_every(&self) -> Duration {
        self.lease * 3 / 10
    }

    /// How long before the end of its lease (as it counts it) the holder stops acting.
    fn margin(&self) -> Duration {
        self.lease / 5
    }

    fn believed(&self, h: &Held, now: Instant) -> bool {
        now.saturating_duration_since(h.sent_at) < self.lease - self.margin()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, HashMap<String, TaskState>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn next(&self, task: &str, take: bool, now: Instant) -> Next {
        let mut tasks = self.state();
        let st = tasks.entry(task.to_owned()).or_default();
        if let Some(h) = st.held {
            if !self.believed(&h, now) {
                tracing::warn!(
                    task,
                    term = h.epoch,
                    "leadership lease not renewed in time (was this process stopped?): no longer acting as leader"
                );
                st.held = None;
            } else if now.saturating_duration_since(h.sent_at) < self.renew_every() {
                return Next::Act;
            } else {
                return Next::Ask(Some(h.epoch));
            }
        }
        if !take
            || st
                .asked
                .is_some_and(|a| now.saturating_duration_since(a) < TAKEOVER_RETRY)
        {
            return Next::No;
        }
        st.asked = Some(now);
        Next::Ask(None)
    }

    /// Records the database's answer to a request sent at `sent_at`: the term granted,
    /// or `None` (another instance holds the lease). Returns whether this instance leads.
    fn answer(&self, task: &str, granted: Option<i64>, sent_at: Instant) -> bool {
        let mut tasks = self.state();
        let st = tasks.entry(task.to_owned()).or_default();
        match granted {
            Some(epoch) => {
                if st.held.map(|h| h.epoch) != Some(epoch) {
                    tracing::info!(task, term = epoch, "this instance now leads the task");
                }
                st.held = Some(Held { epoch, sent_at });
                true
            }
            None => {
                if let Some(h) = st.held.take() {
                    tracing::warn!(
                        task,
                        term = h.epoch,
                        "another instance took over this task's leadership: no longer acting as leader"
                    );
                }
                false
            }
        }
    }

    /// Without a round trip: whether this instance believes it still leads `task`.
    fn believed_now(&self, task: &str) -> bool {
        let now = Instant::now();
        self.state()
            .get(task)
            .and_then(|st| st.held)
            .is_some_and(|h| self.believed(&h, now))
    }

    /// The term this instance believes it holds for `task` now, if any (for [`fenced`]).
    pub(super) fn term(&self, task: &str) -> Option<i64> {
        let now = Instant::now();
        self.state()
            .get(task)
            .and_then(|st| st.held)
            .filter(|h| self.believed(h, now))
            .map(|h| h.epoch)
    }

    pub(super) fn holder(&self) -> &str {
        &self.holder
    }
}

/// Renews `holder`'s lease on `task`, or takes it if it has expired (or was never
/// taken); one statement, decided on the database's clock. Returns the term granted,
/// `None` while another instance holds an unexpired lease.
pub(super) async fn take_or_renew(
    c: &tokio_postgres::Client,
    task: &str,
    holder: &str,
    lease: Duration,
) -> Result<Option<i64>, StoreError> {
    let ms = lease.as_secs_f64() * 1000.0;
    let row = c
        .query_opt(
            "INSERT INTO leadership AS l (task, holder, epoch, expires_at) \
             VALUES ($1, $2, 1, clock_timestamp() + $3::float8 * interval '1 millisecond') \
             ON CONFLICT (task) DO UPDATE SET \
                 holder = excluded.holder, \
                 epoch = CASE WHEN l.holder = excluded.holder AND l.expires_at > clock_timestamp() \
                              THEN l.epoch ELSE l.epoch + 1 END, \
                 expires_at = excluded.expires_at \
             WHERE l.holder = excluded.holder OR l.expires_at <= clock_timestamp() \
             RETURNING epoch",
            &[&task, &holder, &ms],
        )
        .await
        .map_err(pg_err)?;
    Ok(row.map(|r| r.get(0)))
}

/// Renews term `epoch` of `holder`'s lease on `task` only if it is still current and
/// unexpired: a lease that lapsed is never silently extended (the caller takes it
/// again, as a new term, through [`take_or_renew`]).
async fn renew(
    c: &tokio_postgres::Client,
    task: &str,
    holder: &str,
    epoch: i64,
    lease: Duration,
) -> Result<Option<i64>, StoreError> {
    let ms = lease.as_secs_f64() * 1000.0;
    let row = c
        .query_opt(
            "UPDATE leadership SET expires_at = clock_timestamp() + $4::float8 * interval '1 millisecond' \
             WHERE task = $1 AND holder = $2 AND epoch = $3 AND expires_at > clock_timestamp() \
             RETURNING epoch",
            &[&task, &holder, &epoch, &ms],
        )
        .await
        .map_err(pg_err)?;
    Ok(row.map(|r| r.get(0)))
}

/// Inside a write transaction made as leader: whether term `epoch` of `holder` on
/// `task` is current and unexpired, holding the lease row `FOR SHARE` until the
/// transaction ends (a takeover, an `UPDATE` of the row, waits for it; one that
/// committed first is seen). `None` (no term believed) is never current.
pub(super) async fn fenced(
    tx: &Tx<'_>,
    task: &str,
    holder: &str,
    epoch: Option<i64>,
) -> Result<bool, StoreError> {
    let Some(epoch) = epoch else {
        return Ok(false);
    };
    let row = super::query_opt(
        tx,
        "SELECT 1 FROM leadership WHERE task = $1 AND holder = $2 AND epoch = $3 \
         AND expires_at > clock_timestamp() FOR SHARE",
        &[&task, &holder, &epoch],
    )
    .await?;
    Ok(row.is_some())
}

impl PgStore {
    /// `Store::try_lead` (`take`) and `Store::still_leads` (`!take`): whether this
    /// instance leads `task` now, renewing its lease when a renewal is due, and with
    /// `take` taking an expired one. An unreachable database leaves the answer to the
    /// lease already believed (which runs out by itself).
    pub(super) fn lead(&self, task: &str, take: bool) -> bool {
        let ask = match self.leadership.next(task, take, Instant::now()) {
            Next::Act => return true,
            Next::No => return false,
            Next::Ask(term) => term,
        };
        let (pool, task_owned, holder, lease) = (
            self.pool.clone(),
            task.to_owned(),
            self.leadership.holder().to_owned(),
            self.leadership.lease,
        );
        let sent_at = Instant::now();
        let answer = self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            match (take, ask) {
                (false, Some(epoch)) => renew(&c, &task_owned, &holder, epoch, lease).await,
                (false, None) => Ok(None),
                (true, _) => take_or_renew(&c, &task_owned, &holder, lease).await,
            }
        });
        match answer {
            Ok(granted) => self.leadership.answer(task, granted, sent_at),
            Err(e) => {
                tracing::warn!(task, error = %e, "cannot renew or take the leadership lease");
                self.leadership.believed_now(task)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testdb::Fresh;
    use super::super::*;
    use crate::store::contract;
    use approval_core::status::Lifecycle;
    use std::time::Instant;

    /// The term recorded in the database for `task`: (holder, epoch).
    fn row(url: &str, task: &str) -> Option<(String, i64)> {
        let (url, task) = (url.to_owned(), task.to_owned());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let (cfg, tls) = parse_url(&url).unwrap();
                let c = connect(&cfg, &tls).await.unwrap();
                c.query_opt(
                    "SELECT holder, epoch FROM leadership WHERE task = $1",
                    &[&task],
                )
                .await
                .unwrap()
                .map(|r| (r.get(0), r.get(1)))
            })
        })
        .join()
        .unwrap()
    }

    /// An EXECUTING record whose claim lease (300 ms) has run out, in `store`.
    fn expired_claim(store: &PgStore, id: &str) -> (ProposalRecord, ProposalRecord) {
        let t0 = Timestamp::from_unix(1_800_000_000);
        let rec = contract::record(id, "agent1", 1_800_000_000);
        store
            .create(&rec, vec![], PendingLimits::default())
            .unwrap();
        let step = |rec: &ProposalRecord, life: Lifecycle| {
            let mut next = rec.with_lifecycle(life, t0);
            next.revision = rec.revision + 1;
            next
        };
        let approved = rec
            .lifecycle
            .approve(t0, approval_core::time::Seconds::new(3600))
            .unwrap();
        let rec = step(&rec, approved);
        assert!(matches!(store.update(&rec, vec![]).unwrap(), Cas::Applied));
        let rec = step(&rec, rec.lifecycle.claim(t0).unwrap());
        assert!(matches!(store.update(&rec, vec![]).unwrap(), Cas::Applied));
        std::thread::sleep(Duration::from_millis(400));
        let ended = step(&rec, rec.lifecycle.crash_recovered().unwrap());
        (rec, ended)
    }

    /// The lease of a leader: taken by one instance, renewed while it acts (well past
    /// one lease), taken over on the database's clock once it stops renewing (a frozen
    /// leader), and the stale leader fenced: it believes nothing after waking, its
    /// renewal is refused, and a write made with its old term is refused inside the
    /// transaction, while the new leader's write commits.
    #[test]
    fn a_frozen_leaders_lease_is_taken_over_and_the_stale_leader_is_fenced() {
        let Some(db) = Fresh::new() else { return };
        PgStore::migrate(&db.url).unwrap();
        let lease = Duration::from_millis(300); // claim lease; the leader lease is 1 s
        let a = PgStore::open(&db.url).unwrap().with_lease(lease);
        let b = PgStore::open(&db.url).unwrap().with_lease(lease);
        assert_eq!(a.leadership.lease, Duration::from_secs(1));

        // Take: one holder per task; each task has its own lease.
        assert!(a.try_lead("sweep"));
        assert!(a.try_lead("sweep"), "the leader keeps its lead");
        assert!(!b.try_lead("sweep"));
        assert!(b.try_lead("outbox"), "each task has its own lease");
        assert!(!a.try_lead("outbox"));
        let (holder_a, term_a) = row(&db.url, "sweep").unwrap();
        assert_eq!(holder_a, a.leadership.holder());

        // Renew: a leader that keeps acting keeps its lease for three leases.
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            assert!(a.try_lead("sweep"), "the leader lost a lease it renewed");
            assert!(a.still_leads("sweep"));
            assert!(!b.try_lead("sweep"), "taken over from a leader that renews");
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(row(&db.url, "sweep").unwrap(), (holder_a.clone(), term_a));

        // A claim whose lease ran out, and A's term believed: A, leading, may end it;
        // here it is left for the new leader.
        let (_, ended) = expired_claim(&a, "p-fenced");
        assert!(a.try_lead("sweep"));
        let stale_term = a.leadership.term("sweep");
        assert_eq!(stale_term, Some(term_a));

        // Freeze A (it stops renewing). B takes over once the lease has expired on the
        // database's clock, and not before.
        let frozen = Instant::now();
        while !b.try_lead("sweep") {
            assert!(
                frozen.elapsed() < Duration::from_secs(5),
                "no takeover of a frozen leader's lease"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let took = frozen.elapsed();
        assert!(
            took >= Duration::from_millis(500),
            "taken over before the lease expired: {took:?}"
        );
        let (holder_b, term_b) = row(&db.url, "sweep").unwrap();
        assert_eq!(holder_b, b.leadership.holder());
        assert!(term_b > term_a, "a takeover starts a new term");

        // A wakes: it believes nothing (its own count ran out), and asking again is
        // refused while B renews.
        assert!(!a.still_leads("sweep"), "a stale leader acts");
        assert!(!a.try_lead("sweep"), "a stale leader took the lease back");
        assert!(matches!(
            a.end_expired_claim(&ended, vec![]).unwrap(),
            Cas::Conflict(_)
        ));
        // Even acting on its old belief (its term read before the freeze), A's write is
        // refused inside its transaction: the term is not current.
        assert!(matches!(
            a.write_fenced(&ended, vec![], stale_term).unwrap(),
            Cas::Conflict(_)
        ));
        assert_eq!(
            a.get(ended.id()).unwrap().unwrap().status(),
            Status::Executing,
            "a fenced leader's write was applied"
        );
        // The new leader's write commits.
        assert!(b.still_leads("sweep"));
        assert!(matches!(
            b.end_expired_claim(&ended, vec![]).unwrap(),
            Cas::Applied
        ));
        assert_eq!(
            b.get(ended.id()).unwrap().unwrap().status(),
            Status::OutcomeUnknown
        );
    }

    /// A lease taken by nobody is taken by the first asker, and the term of a lapsed
    /// lease that its own holder takes again is a new one (anything it was doing under
    /// the old term is fenced).
    #[test]
    fn a_lapsed_lease_taken_again_is_a_new_term() {
        let Some(db) = Fresh::new() else { return };
        PgStore::migrate(&db.url).unwrap();
        let a = PgStore::open(&db.url)
            .unwrap()
            .with_lease(Duration::from_secs(1));
        assert!(a.try_lead("sweep"));
        let (_, first) = row(&db.url, "sweep").unwrap();
        std::thread::sleep(Duration::from_millis(1200));
        assert!(!a.still_leads("sweep"), "a lapsed lease is still believed");
        assert!(a.try_lead("sweep"));
        let (_, second) = row(&db.url, "sweep").unwrap();
        assert_eq!(second, first + 1);
    }

    /// The leadership SQL decides as core's rules (`approval_core::claim`), which
    /// the model of issue #37 (`approval-model`) steps with: for every kind of row
    /// (none; this holder's, live or lapsed; another's, live or lapsed), the term
    /// `take_or_renew` grants, whether `renew` extends a term and whether `fenced`
    /// holds are the pure functions' answers. If one side changes alone, this fails.
    #[test]
    fn the_leadership_sql_decides_as_the_rules_the_model_checks() {
        use super::{fenced, renew, take_or_renew, SWEEP};
        use approval_core::claim::{self, LeaderRow};
        let Some(db) = Fresh::new() else { return };
        PgStore::migrate(&db.url).unwrap();
        let store = PgStore::open(&db.url).unwrap();
        let lease = Duration::from_secs(10);
        let (me, other) = ("me".to_owned(), "other".to_owned());
        let rows = [
            None,
            Some((me.clone(), 5i64, false)),
            Some((me.clone(), 5, true)),
            Some((other.clone(), 5, false)),
            Some((other.clone(), 5, true)),
        ];
        for row in rows {
            let model = row.clone().map(|(holder, epoch, expired)| LeaderRow {
                holder,
                epoch: epoch as u64,
                expired,
            });
            // Lays the row out again (each question below may change it).
            let lay = |pool: deadpool_postgres::Pool, row: Option<(String, i64, bool)>| async move {
                let c = pool.get().await.map_err(pool_err)?;
                c.execute("DELETE FROM leadership", &[])
                    .await
                    .map_err(pg_err)?;
                if let Some((holder, epoch, expired)) = row {
                    let offset = if expired { -3600.0f64 } else { 3600.0 };
                    c.execute(
                        "INSERT INTO leadership (task, holder, epoch, expires_at) \
                         VALUES ('sweep', $1, $2, clock_timestamp() + $3::float8 * interval '1 second')",
                        &[&holder, &epoch, &offset],
                    )
                    .await
                    .map_err(pg_err)?;
                }
                Ok::<_, StoreError>(c)
            };
            let pool = store.pool.clone();
            let (granted, renewed, fences) = store
                .block({
                    let (me, row) = (me.clone(), row.clone());
                    async move {
                        let c = lay(pool.clone(), row.clone()).await?;
                        let granted = take_or_renew(&c, SWEEP, &me, lease).await?;
                        let mut renewed = Vec::new();
                        for epoch in [4i64, 5] {
                            let c = lay(pool.clone(), row.clone()).await?;
                            renewed.push(renew(&c, SWEEP, &me, epoch, lease).await?.is_some());
                        }
                        let mut fences = Vec::new();
                        for epoch in [None, Some(4i64), Some(5)] {
                            let mut c = lay(pool.clone(), row.clone()).await?;
                            let tx = c.transaction().await.map_err(pg_err)?;
                            fences.push(fenced(&tx, SWEEP, &me, epoch).await?);
                            tx.rollback().await.map_err(pg_err)?;
                        }
                        Ok::<_, StoreError>((granted, renewed, fences))
                    }
                })
                .unwrap();
            assert_eq!(
                granted.map(|e| e as u64),
                claim::take_or_renew(model.as_ref(), &me),
                "take_or_renew over {row:?}"
            );
            for (epoch, got) in [4u64, 5].into_iter().zip(renewed) {
                assert_eq!(
                    got,
                    claim::renews_term(model.as_ref(), &me, epoch),
                    "renew {epoch} over {row:?}"
                );
            }
            for (epoch, got) in [None, Some(4u64), Some(5)].into_iter().zip(fences) {
                assert_eq!(
                    got,
                    claim::term_current(model.as_ref(), &me, epoch),
                    "fenced {epoch:?} over {row:?}"
                );
            }
        }
    }
}
