//! The transitions. Each step names the real code it mirrors, and decides with the
//! real rules: `approval_core::status::Lifecycle` (claim, finish, crash recovery,
//! over the state table `Action::rule`) and `approval_core::claim` (the
//! compare-and-swap, a batch's in-order decisions, the lease renewal, the
//! leadership terms, the group commit's tickets). The model adds only what the code
//! leaves to the world: which process runs next, which writes share a batch, when a
//! lease expires, when a process freezes, thaws or dies.

use crate::state::{Exec, Holder, Member, Proc, Rec, State, Sweep, Then};
use crate::{Backend, ExactlyOnce};
use approval_core::action::Action;
use approval_core::claim::{
    cas_applies, flush_covers, lease_renews, take_or_renew, term_current, Batch, BatchDecision,
    BatchWrite, Guard, LeaderRow,
};
use approval_core::status::{Lifecycle, Outcome, Status};
use approval_core::Timestamp;
use stateright::{Model, Property};

/// One step of the system. `usize` is the execute task for the steps of an execute
/// call (`Read` to `Retry`), and the instance (PostgreSQL) or process (sled, always
/// 0) for the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// `Service::execute`: `get_for_agent` reads the record.
    Read(usize),
    /// `Service::execute`'s claim: `Lifecycle::claim`, then `Store::update`
    /// (`transition_from`). sled's `update` writes at once, deciding with
    /// `claim::cas_applies`; a conflict retries from what is stored. PostgreSQL
    /// queues the write for the instance's batcher and waits for its answer
    /// ([`Step::BatchCommit`]).
    Claim(usize),
    /// sled: `GroupCommit::flush` returns to the writer (`claim::flush_covers`).
    Acknowledged(usize),
    /// `run_claimed`: the executor starts the effect.
    Start(usize),
    /// `keep_lease` → `Store::renew_lease` (PostgreSQL: `UPDATE ... WHERE status =
    /// 'EXECUTING'`, `claim::lease_renews`).
    Renew(usize),
    /// `run_claimed`'s second compare-and-swap: `Lifecycle::finish` from the claimed
    /// record; a conflict retries from what is stored, whose lifecycle may refuse.
    /// PostgreSQL: queued for the batcher, as the claim.
    Finish(usize),
    /// The agent calls `approval_execute` again after its answer.
    Retry(usize),
    /// sled: a flusher takes `GroupCommit::flusher` and starts `flush_blocking` with
    /// target `requested`.
    FlushStart,
    /// sled: the flush is on disk; `completed` moves to its target.
    FlushDone,
    /// PostgreSQL: the instance's batcher takes its whole queue into one transaction:
    /// the audit head and the record locked, `claim::Batch::found` seeded with the
    /// stored revision, every member decided in queue order with `Batch::decide`
    /// (of two claims from one read, the first applies, the second conflicts), the
    /// applied ones written, one commit; only then is every member answered
    /// (`Applied`: the claim's effect may start, the finish answers; `Conflict`: the
    /// writer retries from what is stored). Atomic, as the commit is: a crash before
    /// it drops the queue with nothing written and nothing answered.
    BatchCommit(usize),
    /// PostgreSQL, only under the seeded bug `answer_before_commit`: the batch's
    /// commit, after its members were answered.
    Committed(usize),
    /// Someone else's change through the state table (`Action::rule`): an approver's
    /// revoke, veto or resolve, the expiry sweep, a voiding, ... to the `usize`-th
    /// status the rule leads to. The model takes every row but the claim and finish
    /// (modelled above) and the propose, so a new edge in core's table is explored.
    Other(Action, usize),
    /// PostgreSQL: the record's claim lease runs out on the database's clock, at any
    /// time: a live instance may be slower than its lease (a stall, a full pool).
    ClaimLeaseExpires,
    /// PostgreSQL: the sweep leadership lease runs out.
    LeaderLeaseExpires,
    /// PostgreSQL: `Service::leads(Task::Sweep)` → `try_lead` → `take_or_renew`
    /// (`claim::take_or_renew`).
    Lead(usize),
    /// PostgreSQL: `sweep_leases_once`: `expired_claims` and `get`.
    SweepRead(usize),
    /// PostgreSQL: `sweep_leases_once`: `Lifecycle::crash_recovered`, then
    /// `end_expired_claim` → `write_fenced` (`cas_applies` with
    /// `Guard::ExpiredClaim`, the term checked by `claim::term_current`).
    SweepEnd(usize),
    /// A process dies (SIGKILL, power). sled: the one process; its restart replays
    /// the flushed log and `Service::recover` ends a claim found EXECUTING as
    /// OUTCOME_UNKNOWN (`Lifecycle::crash_recovered`). PostgreSQL: one instance, its
    /// batch queue lost (nothing of it written or answered), restarted as a new
    /// leadership holder; its `recover` touches nothing.
    Crash(usize),
    /// PostgreSQL: an instance is paused (SIGSTOP, a paused VM).
    Freeze(usize),
    /// PostgreSQL: it continues, with whatever it believed before.
    Thaw(usize),
}

/// The highest record revision (and group-commit ticket) explored: an APPROVED
/// record reaches a final state in a few writes, so this bounds only the seeded
/// bugs that loop (a table edge out of OUTCOME_UNKNOWN).
const MAX_REVISION: u8 = 8;

/// A time well before every deadline of the modelled record: expiry is a row of the
/// table (`Other(Expire)`), not a clock in the model.
fn now() -> Timestamp {
    Timestamp::from_unix(1_800_000_000)
}

/// The real lifecycle of a record in `status`, APPROVED at `now() - 60` with an
/// hour to execute and no cooldown.
pub fn lifecycle(status: Status) -> Lifecycle {
    Lifecycle {
        status,
        expires_at: Timestamp::from_unix(1_800_003_600),
        approved_at: Some(Timestamp::from_unix(1_799_999_940)),
        executable_until: Some(Timestamp::from_unix(1_800_003_600)),
        executable_from: None,
    }
}

impl ExactlyOnce {
    /// `Lifecycle::claim` (the table's `Execute` row), or the seeded table edit.
    fn claim_to(&self, from: Status) -> Option<Status> {
        if self.bugs.execute_after_outcome_unknown && from == Status::OutcomeUnknown {
            return Some(Status::Executing);
        }
        lifecycle(from).claim(now()).ok().map(|l| l.status)
    }

    /// The instance execute task `t` runs on.
    fn instance(&self, t: usize) -> usize {
        t % self.procs as usize
    }

    fn holder(&self, s: &State, i: usize) -> Holder {
        (i as u8, s.procs[i].generation)
    }

    fn shared(&self) -> bool {
        self.backend == Backend::Postgres
    }

    /// A write lands: in memory and (PostgreSQL) committed. Returns the group commit
    /// ticket a sled writer waits for, taken after the write.
    fn write(&self, s: &mut State, rec: Rec) -> u8 {
        s.stored = rec;
        // `lease_until` is set by a write to EXECUTING and NULL otherwise.
        s.lease_expired = false;
        if self.shared() {
            s.durable = rec;
            return 0;
        }
        s.requested += 1;
        s.requested
    }

    /// sled: after a write in memory the writer waits for a flush that covers
    /// `ticket` (or, seeded bug, is answered at once).
    fn answer(&self, s: &mut State, t: usize, rec: Rec, ticket: u8, then: Then) {
        if self.bugs.ack_before_flush {
            acknowledge(s, t, rec, then);
        } else {
            s.tasks[t] = Exec::Flushing { rec, ticket, then };
        }
    }

    /// PostgreSQL: the write joins the instance's batch queue and the writer waits.
    fn enqueue(&self, s: &mut State, t: usize, rec: Rec, then: Then) {
        let i = self.instance(t);
        s.procs[i].queue.push(Member {
            task: t as u8,
            rec,
            then,
        });
        s.tasks[t] = Exec::Queued;
    }

    /// `BatchCommit`: how the batch decides `queue`, in order, over the stored
    /// revision its locked read found.
    fn decide_batch(&self, stored: u8, queue: &[Member]) -> Vec<BatchDecision> {
        let mut batch = Batch::default();
        batch.found(RECORD, Some(stored as u64));
        queue
            .iter()
            .map(|m| {
                let write = BatchWrite::Update {
                    new_revision: m.rec.revision as u64,
                };
                if self.bugs.batch_reads_once {
                    // The seeded bug: each member against the row as read, blind to
                    // the members before it.
                    let mut as_read = Batch::default();
                    as_read.found(RECORD, Some(stored as u64));
                    as_read.decide(&RECORD, write)
                } else if self.bugs.non_atomic_claim && m.then == Then::Run {
                    // The seeded bug: the claim is written whatever the revision.
                    batch.found(RECORD, Some(m.rec.revision as u64));
                    BatchDecision::Applied
                } else {
                    batch.decide(&RECORD, write)
                }
            })
            .collect()
    }

    fn may_act(&self, s: &State, i: usize) -> bool {
        !s.procs[i].frozen
    }

    pub(crate) fn steps(&self, s: &State, out: &mut Vec<Step>) {
        // Seeded bug `answer_before_commit`: a batch answered but not committed holds
        // the record's lock; every other write waits for its commit (or its crash).
        let locked = s.procs.iter().any(|p| p.committing.is_some());
        for (i, p) in s.procs.iter().enumerate() {
            if s.crashes < self.crashes {
                out.push(Step::Crash(i));
            }
            if !self.shared() {
                continue;
            }
            out.push(if p.frozen {
                Step::Thaw(i)
            } else {
                Step::Freeze(i)
            });
            if !self.may_act(s, i) {
                continue;
            }
            if p.committing.is_some() {
                out.push(Step::Committed(i));
            }
            if !p.queue.is_empty() && !locked {
                out.push(Step::BatchCommit(i));
            }
            out.push(Step::Lead(i));
            match p.sweep {
                Sweep::Idle if p.term.is_some() => out.push(Step::SweepRead(i)),
                Sweep::Idle => {}
                Sweep::Found(_) if !locked => out.push(Step::SweepEnd(i)),
                Sweep::Found(_) => {}
            }
        }
        for (t, exec) in s.tasks.iter().enumerate() {
            if !self.may_act(s, self.instance(t)) {
                continue;
            }
            match *exec {
                Exec::Idle => out.push(Step::Read(t)),
                Exec::Read(..) => out.push(Step::Claim(t)),
                Exec::Flushing { ticket, .. }
                    if flush_covers(s.completed as u64, ticket as u64) =>
                {
                    out.push(Step::Acknowledged(t))
                }
                Exec::Flushing { .. } | Exec::Queued => {}
                Exec::Claimed(_) => out.push(Step::Start(t)),
                Exec::Running(_) => {
                    out.push(Step::Finish(t));
                    if self.shared() && s.lease_expired {
                        out.push(Step::Renew(t));
                    }
                }
                Exec::Done => out.push(Step::Retry(t)),
            }
        }
        if !self.shared() {
            match s.flushing {
                None if s.requested > s.completed => out.push(Step::FlushStart),
                None => {}
                Some(_) => out.push(Step::FlushDone),
            }
        }
        for action in Action::ALL {
            if locked {
                break;
            }
            if matches!(action, Action::Propose | Action::Execute | Action::Finish) {
                continue;
            }
            let rule = action.rule();
            let from = s.stored.status;
            if action.allowed_in(from, false) || action.allowed_in(from, true) {
                for k in 0..rule.to.len() {
                    out.push(Step::Other(action, k));
                }
            }
        }
        if self.shared() {
            if s.stored.status == Status::Executing && !s.lease_expired {
                out.push(Step::ClaimLeaseExpires);
            }
            if s.leader.is_some_and(|r| !r.expired) {
                out.push(Step::LeaderLeaseExpires);
            }
        }
    }

    pub(crate) fn step(&self, last: &State, step: Step) -> Option<State> {
        let mut s = last.clone();
        match step {
            Step::Read(t) => {
                let ticket = (self.bugs.ticket_before_write && !self.shared()).then(|| {
                    s.requested += 1;
                    s.requested
                });
                s.tasks[t] = Exec::Read(s.stored, ticket);
            }
            Step::Claim(t) => {
                let Exec::Read(seen, early) = s.tasks[t] else {
                    return None;
                };
                let Some(to) = self.claim_to(seen.status) else {
                    s.tasks[t] = Exec::Done; // refused: the table says why
                    return Some(s);
                };
                let next = Rec {
                    status: to,
                    revision: seen.revision + 1,
                };
                if self.shared() {
                    self.enqueue(&mut s, t, next, Then::Run);
                    return Some(s);
                }
                let applies = self.bugs.non_atomic_claim
                    || cas_applies(
                        s.stored.revision as u64,
                        next.revision as u64,
                        Guard::Revision,
                    );
                if !applies {
                    // `Cas::Conflict`: `transition_from` tries again from what is stored.
                    s.tasks[t] = Exec::Read(s.stored, early);
                    return Some(s);
                }
                let ticket = self.write(&mut s, next);
                self.answer(&mut s, t, next, early.unwrap_or(ticket), Then::Run);
            }
            Step::Acknowledged(t) => {
                let Exec::Flushing { rec, then, .. } = s.tasks[t] else {
                    return None;
                };
                acknowledge(&mut s, t, rec, then);
            }
            Step::Start(t) => {
                let Exec::Claimed(rec) = s.tasks[t] else {
                    return None;
                };
                s.effects += 1;
                s.tasks[t] = Exec::Running(rec);
            }
            Step::Renew(t) => {
                if !lease_renews(s.stored.status == Status::Executing) {
                    return None;
                }
                let _ = t;
                s.lease_expired = false;
            }
            Step::Finish(t) => {
                let Exec::Running(base) = s.tasks[t] else {
                    return None;
                };
                let to = lifecycle(base.status)
                    .finish(Outcome::Succeeded)
                    .ok()?
                    .status;
                let next = Rec {
                    status: to,
                    revision: base.revision + 1,
                };
                if self.shared() {
                    self.enqueue(&mut s, t, next, Then::Answer);
                    return Some(s);
                }
                if !cas_applies(
                    s.stored.revision as u64,
                    next.revision as u64,
                    Guard::Revision,
                ) {
                    s.tasks[t] = finish_conflict(s.stored);
                    return Some(s);
                }
                let ticket = self.write(&mut s, next);
                self.answer(&mut s, t, next, ticket, Then::Answer);
            }
            Step::Retry(t) => s.tasks[t] = Exec::Idle,
            Step::FlushStart => s.flushing = Some((s.requested, s.stored)),
            Step::FlushDone => {
                let (target, carried) = s.flushing.take()?;
                s.durable = carried;
                s.completed = s.completed.max(target);
            }
            Step::BatchCommit(i) => {
                let queue = std::mem::take(&mut s.procs[i].queue);
                let decisions = self.decide_batch(s.stored.revision, &queue);
                // The transaction: every applied member written (the last one is what
                // the row holds after it), then one commit.
                let written = queue
                    .iter()
                    .zip(&decisions)
                    .rev()
                    .find(|(_, d)| **d == BatchDecision::Applied)
                    .map(|(m, _)| m.rec);
                let before = s.stored;
                if self.bugs.answer_before_commit {
                    // The seeded bug: the answers go out first; the commit is a step
                    // of its own (`Committed`), the locks held until it or a crash.
                    s.procs[i].committing = written;
                } else if let Some(rec) = written {
                    self.write(&mut s, rec);
                }
                // Only then every member's answer.
                let now_stored = written.unwrap_or(before);
                for (m, d) in queue.iter().zip(&decisions) {
                    let t = m.task as usize;
                    match (d, m.then) {
                        (BatchDecision::Applied, _) => acknowledge(&mut s, t, m.rec, m.then),
                        // `Cas::Conflict(now_stored)`: retry from what is stored.
                        (_, Then::Run) => s.tasks[t] = Exec::Read(now_stored, None),
                        (_, Then::Answer) => s.tasks[t] = finish_conflict(now_stored),
                    }
                }
            }
            Step::Committed(i) => {
                let rec = s.procs[i].committing.take()?;
                self.write(&mut s, rec);
            }
            Step::Other(action, k) => {
                let next = Rec {
                    status: action.rule().to[k],
                    revision: s.stored.revision + 1,
                };
                self.write(&mut s, next);
            }
            Step::ClaimLeaseExpires => s.lease_expired = true,
            Step::LeaderLeaseExpires => s.leader.as_mut()?.expired = true,
            Step::Lead(i) => {
                let me = self.holder(&s, i);
                match take_or_renew(s.leader.as_ref(), &me) {
                    Some(epoch) => {
                        s.leader = Some(LeaderRow {
                            holder: me,
                            epoch,
                            expired: false,
                        });
                        s.procs[i].term = Some(epoch);
                    }
                    None => s.procs[i].term = None,
                }
            }
            Step::SweepRead(i) => {
                if s.stored.status != Status::Executing || !s.lease_expired {
                    return None;
                }
                s.procs[i].sweep = Sweep::Found(s.stored);
            }
            Step::SweepEnd(i) => {
                let Sweep::Found(cur) = s.procs[i].sweep else {
                    return None;
                };
                s.procs[i].sweep = Sweep::Idle;
                let me = self.holder(&s, i);
                let term = s.procs[i].term;
                let guard = Guard::ExpiredClaim {
                    lease_expired: s.lease_expired,
                    term_current: term_current(s.leader.as_ref(), &me, term),
                };
                if term.is_none()
                    || !cas_applies(s.stored.revision as u64, cur.revision as u64 + 1, guard)
                {
                    return Some(s); // `Cas::Conflict`: left alone, the next sweep looks again
                }
                let to = if self.bugs.sweep_reruns {
                    // The seeded bug: the sweeper runs the "abandoned" claim itself.
                    s.effects += 1;
                    Status::Succeeded
                } else {
                    match lifecycle(cur.status).crash_recovered() {
                        Ok(l) => l.status,
                        Err(_) => return Some(s),
                    }
                };
                self.write(
                    &mut s,
                    Rec {
                        status: to,
                        revision: cur.revision + 1,
                    },
                );
            }
            Step::Crash(i) => {
                s.crashes += 1;
                if self.shared() {
                    // The instance's queue dies with it: nothing written, nothing
                    // answered; its agents call again (on this instance, restarted).
                    let generation = s.procs[i].generation + 1;
                    s.procs[i] = Proc::fresh(generation);
                    for t in 0..s.tasks.len() {
                        if self.instance(t) == i {
                            s.tasks[t] = Exec::Idle;
                        }
                    }
                } else {
                    self.restart_sled(&mut s);
                }
            }
            Step::Freeze(i) => s.procs[i].frozen = true,
            Step::Thaw(i) => s.procs[i].frozen = false,
        }
        Some(s)
    }

    /// The sled process restarts: memory is what the log holds, the group commit
    /// starts again, every caller may retry, and `Service::recover` ends a claim
    /// found EXECUTING (written and flushed before start-up serves anything).
    fn restart_sled(&self, s: &mut State) {
        s.stored = s.durable;
        s.flushing = None;
        s.requested = 0;
        s.completed = 0;
        for p in s.procs.iter_mut() {
            *p = Proc::fresh(p.generation + 1);
        }
        for exec in s.tasks.iter_mut() {
            *exec = Exec::Idle;
        }
        if let Ok(l) = lifecycle(s.stored.status).crash_recovered() {
            let rec = Rec {
                status: l.status,
                revision: s.stored.revision + 1,
            };
            s.stored = rec;
            s.durable = rec;
        }
    }
}

/// The one record's id in a [`Batch`].
const RECORD: u8 = 0;

/// The writer of `rec` is told it is stored: the claim's effect may start, the
/// finish answers the agent.
fn acknowledge(s: &mut State, t: usize, rec: Rec, then: Then) {
    s.acked = s.acked.max(rec.revision);
    s.tasks[t] = match then {
        Then::Run => Exec::Claimed(rec),
        Then::Answer => Exec::Done,
    };
}

/// A finish that conflicted retries from `stored`: its lifecycle may refuse the
/// finish (the sweep ended the claim), and then the outcome is only in the log.
fn finish_conflict(stored: Rec) -> Exec {
    match lifecycle(stored.status).finish(Outcome::Succeeded) {
        Ok(_) => Exec::Running(stored),
        Err(_) => Exec::Done,
    }
}

impl Model for ExactlyOnce {
    type State = State;
    type Action = Step;

    fn init_states(&self) -> Vec<State> {
        // An APPROVED proposal, its approval acknowledged and durable.
        let approved = Rec {
            status: Status::Approved,
            revision: 1,
        };
        vec![State {
            stored: approved,
            durable: approved,
            lease_expired: false,
            leader: None,
            requested: 0,
            completed: 0,
            flushing: None,
            acked: approved.revision,
            effects: 0,
            crashes: 0,
            procs: (0..self.procs).map(|_| Proc::fresh(0)).collect(),
            tasks: vec![Exec::Idle; self.tasks as usize],
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Step>) {
        self.steps(s, out)
    }

    fn next_state(&self, last: &State, step: Step) -> Option<State> {
        self.step(last, step).filter(|s| s != last)
    }

    fn within_boundary(&self, s: &State) -> bool {
        // Past a second run every state is already a counterexample; epochs grow with
        // each takeover, revisions and group-commit tickets with each write: all
        // bounded. (Without seeded bugs, tickets since a restart never exceed the
        // writes, so the ticket bound cuts nothing the revision bound keeps.)
        s.effects <= 2
            && s.leader.is_none_or(|r| r.epoch <= self.max_epoch)
            && s.stored.revision <= MAX_REVISION
            && s.requested <= MAX_REVISION
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(crate::ONCE, |_: &ExactlyOnce, s: &State| s.effects <= 1),
            Property::always(crate::NOTHING_LOST, |_: &ExactlyOnce, s: &State| {
                s.durable.revision >= s.acked && s.stored.revision >= s.acked
            }),
            Property::sometimes(crate::RAN_AND_SUCCEEDED, |_: &ExactlyOnce, s: &State| {
                s.effects == 1 && s.durable.status == Status::Succeeded
            }),
            Property::sometimes(crate::RAN_THEN_UNKNOWN, |_: &ExactlyOnce, s: &State| {
                s.effects == 1 && s.durable.status == Status::OutcomeUnknown
            }),
            Property::sometimes(crate::SWEPT_WHILE_RUNNING, |m: &ExactlyOnce, s: &State| {
                m.shared()
                    && s.durable.status == Status::OutcomeUnknown
                    && s.tasks.iter().enumerate().any(|(t, e)| {
                        s.procs[m.instance(t)].frozen && matches!(e, Exec::Running(_))
                    })
            }),
            Property::sometimes(crate::CLAIMS_IN_ONE_BATCH, |_: &ExactlyOnce, s: &State| {
                s.procs
                    .iter()
                    .any(|p| p.queue.iter().filter(|m| m.then == Then::Run).count() >= 2)
            }),
        ]
    }
}
