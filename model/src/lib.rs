//! `approval-model`: the execute claim, its lease, the lease sweep, sweep leadership
//! and sled's group commit, as a model that `stateright` checks exhaustively within
//! a bound (issue #37): no interleaving of claims, commits, crashes, frozen
//! instances and lease expiries runs the effect twice or loses an acknowledged write.
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
//! `write_record`; `lease_renews`; `take_or_renew` and `term_current`, which the
//! leadership SQL in `server/src/store/postgres/lease.rs` is tested against;
//! `flush_covers`, used by `GroupCommit::flush`). What the model adds is only the
//! world: scheduling, crashes, freezes, and lease expiry at any moment.
//!
//! One record is enough: the claim, its lease and its outcome concern one record,
//! and records share nothing but the audit head's lock (PostgreSQL) or the group
//! commit (sled), whose tickets the model keeps.
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
//! writers: modelled as one atomic step each); a commit whose answer was lost
//! (the same as a crash right after it); the notification outbox and its delivery
//! (at least once by design, with a delivery id); the configuration apply
//! (`ExecutorConfig::Gate`: its own version compare-and-swap, under the same claim);
//! the executor's own retries (it runs once, or its outcome is unknown). The bound
//! is in [`ExactlyOnce::ci`].
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

/// The store the model follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// One process on sled: concurrent execute tasks, the group commit, crash and
    /// restart with `Service::recover`.
    Sled,
    /// Several instances on one PostgreSQL database: commits are durable, claims
    /// carry leases, one instance leads the lease sweep.
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
}

/// The model and its bound.
#[derive(Debug, Clone)]
pub struct ExactlyOnce {
    /// Which store.
    pub backend: Backend,
    /// Instances (PostgreSQL) or concurrent execute tasks (sled), each with an agent
    /// calling `approval_execute` (and calling again after each answer).
    pub procs: u8,
    /// Most crashes in one run.
    pub crashes: u8,
    /// Highest sweep leadership term explored (each takeover is a new one).
    pub max_epoch: u64,
    /// The seeded bugs turned on (none for the real protocol).
    pub bugs: Bugs,
}

impl ExactlyOnce {
    /// The bound used in CI for `backend`, without bugs.
    pub fn ci(backend: Backend) -> Self {
        match backend {
            Backend::Sled => Self {
                backend,
                procs: 4,
                crashes: 4,
                max_epoch: 0,
                bugs: Bugs::default(),
            },
            Backend::Postgres => Self {
                backend,
                procs: 2,
                crashes: 2,
                max_epoch: 3,
                bugs: Bugs::default(),
            },
        }
    }

    /// A wider bound, checked by hand (`tests/exactly_once.rs`, ignored in CI): on
    /// PostgreSQL one more crash and one more leadership term (about 40 s).
    pub fn wide(backend: Backend) -> Self {
        let mut m = Self::ci(backend);
        if backend == Backend::Postgres {
            m.crashes = 3;
            m.max_epoch = 4;
        }
        m
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
