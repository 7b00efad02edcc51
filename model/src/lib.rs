//! `approval-model`: the execute claim, its lease, the lease sweep, sweep leadership,
//! sled's group commit and PostgreSQL's batched commit, as a model that `stateright`
//! checks exhaustively within a bound (issue #37): no interleaving of claims,
//! batches, flushes, crashes, frozen instances and lease expiries runs the effect
//! twice or loses an acknowledged write.
//!
//! Why a model and not only tests: the crash harness and the concurrency tests run
//! a few thousand interleavings chosen by the scheduler; the checker visits every
//! one within the bound, including the rare ones (an instance frozen between its
//! claim and its effect while its lease expires and another instance leads a sweep).
//!
//! Why it cannot drift from the code: it has no rules of its own. Each step
//! ([`Step`]) names the function it mirrors and decides with the same functions the
//! server calls: the state table through `approval_core::status::Lifecycle`
//! (`claim`, `finish`, `crash_recovered`) and `Action::rule` (every other row, so a
//! new edge in the table is explored), and the stores' decisions in
//! `approval_core::claim` (`cas_applies`, used by sled's `update` and PostgreSQL's
//! `write_record`; `Batch::found` and `Batch::decide`, with which PostgreSQL's
//! batcher decides its members in order; `lease_renews`; `take_or_renew` and
//! `term_current`, which the leadership SQL in `server/src/store/postgres/lease.rs`
//! is tested against; `flush_covers`, used by `GroupCommit::flush`). What the model
//! adds is only the world: scheduling, crashes, freezes, and lease expiry at any
//! moment.
//!
//! PostgreSQL's writes are batched, as the store now does them: a claim or a finish
//! joins its instance's queue and waits; the instance's batcher ([`Step::BatchCommit`])
//! takes the whole queue into one transaction, decides every member in queue order
//! over the locked row with `claim::Batch` (of two claims of the record in one
//! batch, the first applies and the second conflicts), writes the applied ones,
//! commits once, and only then answers every member: `Applied` lets the claim's
//! effect start (or answers the finish), `Conflict` sends the writer back to what is
//! stored. A crash before the commit loses the queue: nothing of it written, nothing
//! answered. Batches of two instances serialise (each commit is one atomic step);
//! the lease sweep's fenced write and the lease renewals stay single transactions.
//! Two execute tasks on one instance ([`ExactlyOnce::ci_batches`]) put two claims,
//! or a claim and a finish, in one batch.
//!
//! One record is enough: the claim, its lease and its outcome concern one record,
//! and records share nothing but the audit head's lock and the batch (PostgreSQL:
//! each member is decided on its own row, and the batch commits or dies whole,
//! which the model keeps) or the group commit (sled), whose tickets it keeps.
//!
//! Where the model is more hostile than the world, so that what holds here holds
//! there: a claim's lease may expire at any moment, even while its instance renews;
//! a frozen instance wakes still believing its old leadership term (the real one
//! drops it, counting on its monotonic clock); an agent calls again after every
//! answer and after every crash; every row of the state table that someone other
//! than the executor takes (revoke, veto, expiry, voiding, resolve) may land at any
//! moment it is allowed, cooling down or not.
//!
//! What it leaves out: more than one record; PostgreSQL's own guarantees (a
//! transaction is atomic and a committed one durable, `FOR UPDATE` serialises the
//! writers: modelled as one atomic step each, a batch's included); a commit whose
//! answer was lost (the same as a crash right after it), and a failed commit (the
//! store fails stop, `server/src/store/failstop.rs`: its members get an error, the
//! instance exits, the same as a crash); creates (`BatchWrite::Create`: the record
//! exists, APPROVED, before any claim); the batcher's cap (the model's batches hold
//! at most one write per execute task of the instance, two in the bound; a cap of
//! one would make them two batches in a row, which the model explores anyway);
//! renewals while a finish waits in the queue (fewer renewals only let the lease
//! expire sooner, which the model allows at any moment); the notification outbox
//! and its delivery (at least once by design, with a delivery id); the
//! configuration apply (`ExecutorConfig::Gate`: its own version compare-and-swap,
//! under the same claim); the executor's own retries (it runs once, or its outcome
//! is unknown). The bounds
//! are in [`ExactlyOnce::ci`] and [`ExactlyOnce::ci_batches`].
//!
//! May import: core and stateright. Nothing of the server (no I/O in the model).

mod mirrors;
mod model;
pub mod state;

pub use mirrors::{Mirror, MIRRORS};
pub use model::{lifecycle, Step};
use stateright::{Checker, HasDiscoveries, Model};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// No effect runs twice (`State::effects` ≤ 1). An expired lease never lets a second
/// executor run an effect the first may have started: that would be a second run.
pub const ONCE: &str = "no effect runs twice";
/// No acknowledged write is lost: what a caller was told is stored survives every
/// crash (the durable revision never falls behind an acknowledged one).
pub const NOTHING_LOST: &str = "no acknowledged write is lost";
/// Reachability: the effect ran and its success is stored (the model is not vacuous).
pub const RAN_AND_SUCCEEDED: &str = "the effect can run and succeed";
/// Reachability: the effect ran and the record ended OUTCOME_UNKNOWN (crash, or the
/// lease sweep), never run again.
pub const RAN_THEN_UNKNOWN: &str = "a run can end OUTCOME_UNKNOWN";
/// Reachability (PostgreSQL): a frozen instance is still running the effect when
/// another instance's sweep has ended its claim.
pub const SWEPT_WHILE_RUNNING: &str = "a frozen executor's claim can be swept";
/// Reachability (PostgreSQL): two claims of the record wait in one instance's batch
/// queue, so one batch decides both (the second against the first's result).
pub const CLAIMS_IN_ONE_BATCH: &str = "two claims can share a batch";

/// The store the model follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// One process on sled: concurrent execute tasks, the group commit, crash and
    /// restart with `Service::recover`.
    Sled,
    /// Several instances on one PostgreSQL database: each instance's writes (claims,
    /// finishes) go through its batcher, one transaction and one commit per batch;
    /// claims carry leases, one instance leads the lease sweep, whose fenced write
    /// and the lease renewals are single transactions of their own.
    Postgres,
}

/// Seeded bugs: each breaks one thing the real code does, and the checker must
/// catch it (the tests in `tests/seeded_bugs.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Bugs {
    /// The claim checks the status it read, then writes without the revision
    /// compare-and-swap (a read-check-write race).
    pub non_atomic_claim: bool,
    /// sled: a write is acknowledged (the claim lets the effect start, the finish
    /// answers) before a flush covers it.
    pub ack_before_flush: bool,
    /// sled: the group commit's ticket is taken before the write instead of after,
    /// so a flush already under way can "cover" a write it does not carry.
    pub ticket_before_write: bool,
    /// PostgreSQL: the lease sweep treats an expired claim as abandoned and runs
    /// the effect itself instead of ending it OUTCOME_UNKNOWN.
    pub sweep_reruns: bool,
    /// The state table gains an edge OUTCOME_UNKNOWN → EXECUTING (execute allowed
    /// again after a crash): the edit a drift between table and model would be.
    pub execute_after_outcome_unknown: bool,
    /// PostgreSQL: the batcher decides every member against the row as its locked
    /// read found it, not against the running view `claim::Batch` keeps (blind to
    /// the members before it in the batch).
    pub batch_reads_once: bool,
    /// PostgreSQL: the batcher answers its members (the claim lets the effect start,
    /// the finish answers) as decided, before the batch's commit returns.
    pub answer_before_commit: bool,
}

/// The model and its bound.
#[derive(Debug, Clone)]
pub struct ExactlyOnce {
    /// Which store.
    pub backend: Backend,
    /// Instances (PostgreSQL); sled has one process.
    pub procs: u8,
    /// Concurrent execute tasks, each with an agent calling `approval_execute` (and
    /// calling again after each answer); task `t` runs on instance `t % procs`, so
    /// with more tasks than instances two claims can meet in one instance's batch.
    pub tasks: u8,
    /// Most crashes in one run.
    pub crashes: u8,
    /// Highest sweep leadership term explored (each takeover is a new one).
    pub max_epoch: u64,
    /// The seeded bugs turned on (none for the real protocol).
    pub bugs: Bugs,
}

impl ExactlyOnce {
    /// The bound used in CI for `backend`, without bugs. On PostgreSQL this is the
    /// leases and leadership bound: one execute task per instance, two crashes,
    /// three leadership terms (so a stale leader and a takeover are explored); the
    /// batches' own bound is [`ExactlyOnce::ci_batches`].
    pub fn ci(backend: Backend) -> Self {
        match backend {
            Backend::Sled => Self {
                backend,
                procs: 1,
                tasks: 4,
                crashes: 4,
                max_epoch: 0,
                bugs: Bugs::default(),
            },
            Backend::Postgres => Self {
                backend,
                procs: 2,
                tasks: 2,
                crashes: 2,
                max_epoch: 3,
                bugs: Bugs::default(),
            },
        }
    }

    /// The PostgreSQL bound used in CI for the batches: two execute tasks on
    /// instance 0 (their claims, or a claim and a finish, can meet in one batch) and
    /// one on instance 1, two crashes, one leadership term (a sweep, no takeover:
    /// takeovers are [`ExactlyOnce::ci`]'s).
    pub fn ci_batches() -> Self {
        Self {
            tasks: 3,
            max_epoch: 1,
            ..Self::ci(Backend::Postgres)
        }
    }

    /// A wider bound, checked by hand (`tests/exactly_once.rs`, ignored in CI): on
    /// PostgreSQL both at once, three execute tasks (two on instance 0) with two
    /// crashes and three leadership terms (about 45 s); on sled the CI bound.
    pub fn wide(backend: Backend) -> Self {
        match backend {
            Backend::Sled => Self::ci(backend),
            Backend::Postgres => Self {
                max_epoch: 3,
                ..Self::ci_batches()
            },
        }
    }

    /// The same bound with `bugs` seeded.
    pub fn with_bugs(mut self, bugs: Bugs) -> Self {
        self.bugs = bugs;
        self
    }
}

/// What one check found.
#[derive(Debug)]
pub struct Report {
    /// Distinct states visited.
    pub unique_states: usize,
    /// States generated, repeats included.
    pub states: usize,
    /// The deepest path explored.
    pub max_depth: usize,
    /// Wall time.
    pub elapsed: Duration,
    /// Whether the whole bounded space was explored (not stopped at a discovery).
    pub complete: bool,
    /// For each property with a discovery (a counterexample for `always`, an
    /// example for `sometimes`): the steps from the initial state.
    pub discoveries: Vec<(&'static str, Vec<Step>)>,
}

impl Report {
    /// The discovery for `property`, if any.
    pub fn trace(&self, property: &str) -> Option<&[Step]> {
        self.discoveries
            .iter()
            .find(|(p, _)| *p == property)
            .map(|(_, t)| t.as_slice())
    }
}

/// Checks `model` breadth first on up to two threads. With `stop_at`, stops at the
/// first discovery of that property (a seeded bug's counterexample); otherwise
/// explores the whole bounded space.
pub fn check(model: ExactlyOnce, stop_at: Option<&'static str>) -> Report {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(2);
    let started = Instant::now();
    let mut builder = model.checker().threads(threads);
    if let Some(p) = stop_at {
        // One thread: the search order, and so the trace printed, does not depend on
        // how two threads interleave. (A trace is short, not always the shortest.)
        builder = builder
            .threads(1)
            .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([p])));
    }
    let checker = builder.spawn_bfs().join();
    let elapsed = started.elapsed();
    let mut discoveries: Vec<(&'static str, Vec<Step>)> = checker
        .discoveries()
        .into_iter()
        .map(|(name, path)| (name, path.into_actions()))
        .collect();
    discoveries.sort_by_key(|(name, _)| *name);
    Report {
        unique_states: checker.unique_state_count(),
        states: checker.state_count(),
        max_depth: checker.max_depth(),
        elapsed,
        complete: stop_at.is_none(),
        discoveries,
    }
}
