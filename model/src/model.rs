//! The transitions. Each step names the real code it mirrors, and decides with the
//! real rules: `approval_core::status::Lifecycle` (claim, finish, crash recovery,
//! over the state table `Action::rule`) and `approval_core::claim` (the
//! compare-and-swap, the lease renewal, the leadership terms, the group commit's
//! tickets). The model adds only what the code leaves to the world: which process
//! runs next, when a lease expires, when a process freezes, thaws or dies.

use crate::state::{Exec, Holder, Proc, Rec, State, Sweep, Then};
use crate::{Backend, ExactlyOnce};
use approval_core::action::Action;
use approval_core::claim::{
    cas_applies, flush_covers, lease_renews, take_or_renew, term_current, Guard, LeaderRow,
};
use approval_core::status::{Lifecycle, Outcome, Status};
use approval_core::Timestamp;
use stateright::{Model, Property};

/// One step of the system. `usize` is the instance (PostgreSQL) or task (sled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// `Service::execute`: `get_for_agent` reads the record.
    Read(usize),
    /// `Service::execute`'s claim: `Lifecycle::claim`, then `Store::update`
    /// (`transition_from`; sled `update`, PostgreSQL `write_record`, both deciding
    /// with `claim::cas_applies`). A conflict retries from what is stored.
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
    Finish(usize),
    /// The agent calls `approval_execute` again after its answer.
    Retry(usize),
    /// sled: a flusher takes `GroupCommit::flusher` and starts `flush_blocking` with
    /// target `requested`.
    FlushStart,
    /// sled: the flush is on disk; `completed` moves to its target.
    FlushDone,
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
    /// OUTCOME_UNKNOWN (`Lifecycle::crash_recovered`). PostgreSQL: one instance,
    /// restarted as a new leadership holder; its `recover` touches nothing.
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

    /// After a write the caller is told about: acknowledged at once where a commit
    /// is durable (PostgreSQL), else (sled) after a flush covers `ticket`.
    fn answer(&self, s: &mut State, i: usize, rec: Rec, ticket: u8, then: Then) {
        let acked = match then {
            Then::Run => Exec::Claimed(rec),
            Then::Answer => Exec::Done,
        };
        if self.shared() || self.bugs.ack_before_flush {
            s.acked = s.acked.max(rec.revision);
            s.procs[i].exec = acked;
        } else {
            s.procs[i].exec = Exec::Flushing { rec, ticket, then };
        }
    }

    fn may_act(&self, s: &State, i: usize) -> bool {
        !s.procs[i].frozen
    }

    pub(crate) fn steps(&self, s: &State, out: &mut Vec<Step>) {
        let n = s.procs.len();
        for i in 0..n {
            let p = &s.procs[i];
            if s.crashes < self.crashes && (self.shared() || i == 0) {
                out.push(Step::Crash(i));
            }
            if self.shared() {
                out.push(if p.frozen {
                    Step::Thaw(i)
                } else {
                    Step::Freeze(i)
                });
            }
            if !self.may_act(s, i) {
                continue;
            }
            match p.exec {
                Exec::Idle => out.push(Step::Read(i)),
                Exec::Read(..) => out.push(Step::Claim(i)),
                Exec::Flushing { ticket, .. }
                    if flush_covers(s.completed as u64, ticket as u64) =>
                {
                    out.push(Step::Acknowledged(i))
                }
                Exec::Flushing { .. } => {}
                Exec::Claimed(_) => out.push(Step::Start(i)),
                Exec::Running(_) => {
                    out.push(Step::Finish(i));
                    if self.shared() && s.lease_expired {
                        out.push(Step::Renew(i));
                    }
                }
                Exec::Done => out.push(Step::Retry(i)),
            }
            if self.shared() {
                out.push(Step::Lead(i));
                match p.sweep {
                    Sweep::Idle if p.term.is_some() => out.push(Step::SweepRead(i)),
                    Sweep::Idle => {}
                    Sweep::Found(_) => out.push(Step::SweepEnd(i)),
                }
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
            Step::Read(i) => {
                let ticket = (self.bugs.ticket_before_write && !self.shared()).then(|| {
                    s.requested += 1;
                    s.requested
                });
                s.procs[i].exec = Exec::Read(s.stored, ticket);
            }
            Step::Claim(i) => {
                let Exec::Read(seen, early) = s.procs[i].exec else {
                    return None;
                };
                let Some(to) = self.claim_to(seen.status) else {
                    s.procs[i].exec = Exec::Done; // refused: the table says why
                    return Some(s);
                };
                let next = Rec {
                    status: to,
                    revision: seen.revision + 1,
                };
                let applies = self.bugs.non_atomic_claim
                    || cas_applies(
                        s.stored.revision as u64,
                        next.revision as u64,
                        Guard::Revision,
                    );
                if !applies {
                    // `Cas::Conflict`: `transition_from` tries again from what is stored.
                    s.procs[i].exec = Exec::Read(s.stored, early);
                    return Some(s);
                }
                let ticket = self.write(&mut s, next);
                self.answer(&mut s, i, next, early.unwrap_or(ticket), Then::Run);
            }
            Step::Acknowledged(i) => {
                let Exec::Flushing { rec, then, .. } = s.procs[i].exec else {
                    return None;
                };
                s.acked = s.acked.max(rec.revision);
                s.procs[i].exec = match then {
                    Then::Run => Exec::Claimed(rec),
                    Then::Answer => Exec::Done,
                };
            }
            Step::Start(i) => {
                let Exec::Claimed(rec) = s.procs[i].exec else {
                    return None;
                };
                s.effects += 1;
                s.procs[i].exec = Exec::Running(rec);
            }
            Step::Renew(i) => {
                if !lease_renews(s.stored.status == Status::Executing) {
                    return None;
                }
                let _ = i;
                s.lease_expired = false;
            }
            Step::Finish(i) => {
                let Exec::Running(base) = s.procs[i].exec else {
                    return None;
                };
                if !cas_applies(
                    s.stored.revision as u64,
                    base.revision as u64 + 1,
                    Guard::Revision,
                ) {
                    // Retry from what is stored: its lifecycle may refuse the finish
                    // (ended by the sweep), and then the outcome is only in the log.
                    s.procs[i].exec = match lifecycle(s.stored.status).finish(Outcome::Succeeded) {
                        Ok(_) => Exec::Running(s.stored),
                        Err(_) => Exec::Done,
                    };
                    return Some(s);
                }
                let to = lifecycle(base.status)
                    .finish(Outcome::Succeeded)
                    .ok()?
                    .status;
                let next = Rec {
                    status: to,
                    revision: base.revision + 1,
                };
                let ticket = self.write(&mut s, next);
                self.answer(&mut s, i, next, ticket, Then::Answer);
            }
            Step::Retry(i) => s.procs[i].exec = Exec::Idle,
            Step::FlushStart => s.flushing = Some((s.requested, s.stored)),
            Step::FlushDone => {
                let (target, carried) = s.flushing.take()?;
                s.durable = carried;
                s.completed = s.completed.max(target);
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
                    let generation = s.procs[i].generation + 1;
                    s.procs[i] = Proc::fresh(generation);
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
                    && s.procs
                        .iter()
                        .any(|p| p.frozen && matches!(p.exec, Exec::Running(_)))
            }),
        ]
    }
}
