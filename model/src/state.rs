//! The model's state: one proposal record as the store holds it (in memory and on
//! disk), the leases on it, each instance (PostgreSQL; sled has one process) with its
//! sweep and its batch queue, and each execute task with the point its call has
//! reached.
//!
//! Everything is small and hashable: the checker keeps every state it has seen.

use approval_core::claim::LeaderRow;
use approval_core::status::Status;

/// A record as a read sees it: its status and its revision (the compare-and-swap's
/// token, `ProposalRecord::revision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rec {
    /// The status.
    pub status: Status,
    /// The revision.
    pub revision: u8,
}

/// What comes after a write is acknowledged (sled: after the flush that covers it;
/// PostgreSQL: after the commit of the batch that carries it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Then {
    /// The claim is acknowledged: `run_claimed` may start the effect.
    Run,
    /// The finish is acknowledged: the agent gets its answer.
    Answer,
}

/// Where one agent's `approval_execute` call is (`service/execute.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Exec {
    /// Not called yet, or to be called again (an agent retries after an error or a
    /// crash).
    Idle,
    /// `get_for_agent` read this record; the claim's compare-and-swap comes next.
    /// The ticket is only taken here under the seeded bug `ticket_before_write`.
    Read(Rec, Option<u8>),
    /// sled: written in memory, waiting in `GroupCommit::flush` for a flush that
    /// covers `ticket`.
    Flushing {
        /// The record as written.
        rec: Rec,
        /// The group commit's ticket, taken after the write.
        ticket: u8,
        /// What the acknowledgement lets happen.
        then: Then,
    },
    /// PostgreSQL: the write is queued for its instance's batcher, and the writer
    /// waits for the answer, given after the batch's commit (the member, with what it
    /// writes, is in [`Proc::queue`]).
    Queued,
    /// The claim is stored (and durable): `run_claimed` is about to start the effect.
    Claimed(Rec),
    /// The effect has started (`executor::run`); the finish's compare-and-swap
    /// starts from this record.
    Running(Rec),
    /// The call has its answer.
    Done,
}

/// Where an instance's lease sweep is (`Service::sweep_leases_once`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sweep {
    /// Not sweeping.
    Idle,
    /// `expired_claims` and `get` found this EXECUTING record with an expired lease.
    Found(Rec),
}

/// One write waiting in a PostgreSQL instance's batch queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Member {
    /// The execute task that queued it (an index of [`State::tasks`]).
    pub task: u8,
    /// The record as the writer computed it: the revision it asks for is its read's + 1.
    pub rec: Rec,
    /// What the answer `Applied` lets the writer do.
    pub then: Then,
}

/// One PostgreSQL instance, or the one sled process.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Proc {
    /// Its lease sweep (PostgreSQL).
    pub sweep: Sweep,
    /// The sweep leadership term it believes it holds (`Leadership::term`). Kept
    /// across a freeze: the real instance drops it on waking (its monotonic count ran
    /// out), the model lets it act on it, so only the database's fence stops it.
    pub term: Option<u64>,
    /// Paused (SIGSTOP, a paused VM): takes no step until thawed.
    pub frozen: bool,
    /// How many times it restarted: a restarted process is a new leadership holder.
    pub generation: u8,
    /// PostgreSQL: the writes queued for its batcher, in queue order (each execute
    /// task has at most one; a batch takes them all, the model's queue never
    /// reaching the batcher's cap).
    pub queue: Vec<Member>,
    /// PostgreSQL, only under the seeded bug `answer_before_commit`: a batch whose
    /// members were answered, its transaction not yet committed (what it writes).
    pub committing: Option<Rec>,
}

impl Proc {
    /// A process that has just started.
    pub fn fresh(generation: u8) -> Self {
        Self {
            sweep: Sweep::Idle,
            term: None,
            frozen: false,
            generation,
            queue: Vec::new(),
            committing: None,
        }
    }
}

/// A leadership holder: (instance, generation).
pub type Holder = (u8, u8);

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// What reads see: sled's in-memory tree, PostgreSQL's committed row.
    pub stored: Rec,
    /// What survives a crash: sled's flushed log, PostgreSQL's committed row.
    pub durable: Rec,
    /// PostgreSQL: the record's `lease_until` has passed on the database's clock
    /// (false while no lease: the column is NULL outside EXECUTING).
    pub lease_expired: bool,
    /// PostgreSQL: the `leadership` row of the `sweep` task.
    pub leader: Option<LeaderRow<Holder>>,
    /// sled's group commit: tickets handed out (`GroupCommit::requested`).
    pub requested: u8,
    /// sled's group commit: tickets covered by a finished flush (`completed`).
    pub completed: u8,
    /// sled's group commit: a flush under way, with its target and the writes it
    /// carries (those made before it started).
    pub flushing: Option<(u8, Rec)>,
    /// The highest revision anyone was told is stored (an acknowledged write).
    pub acked: u8,
    /// How many times the effect started: the property is that it stays ≤ 1.
    pub effects: u8,
    /// Crashes so far (bounded by the model).
    pub crashes: u8,
    /// The instances (PostgreSQL) or the one process (sled).
    pub procs: Vec<Proc>,
    /// Each execute task's call: task `t` runs on instance `t % procs.len()`.
    pub tasks: Vec<Exec>,
}
