//! Which real code each step of the model mirrors, as lines that must be in the
//! server's files. The rules themselves are shared (the model calls core's), so
//! what can still drift is the code around them: a store that stops calling the
//! shared rule, a flush that moves after the answer, a sweep that stops going
//! through the fenced write. `tests/drift.rs` fails when a line below is no longer
//! in its file; whoever changes that code then updates the step and this table.
//!
//! `BatchCommit` (PostgreSQL's group commit) mirrors the batcher in
//! `server/src/store/postgres/batch.rs`: the `Batch::found` seeding from the rows
//! read under the audit head lock, the in-order `check`/`decide` with core's rule,
//! and the answers sent only after the one commit returned.

/// One step and the code it stands for.
#[derive(Debug, Clone, Copy)]
pub struct Mirror {
    /// The model's step (`crate::Step`).
    pub step: &'static str,
    /// A file of the workspace.
    pub file: &'static str,
    /// Code that must be in it, exactly.
    pub code: &'static str,
}

const fn m(step: &'static str, file: &'static str, code: &'static str) -> Mirror {
    Mirror { step, file, code }
}

/// Every step's mirror.
pub const MIRRORS: &[Mirror] = &[
    m(
        "Read",
        "server/src/service/execute.rs",
        "let rec = self.get_for_agent_latest(agent, id).await?;",
    ),
    m(
        "Read",
        "server/src/service/mod.rs",
        "let found = self.store.get_latest_async(id).await?;",
    ),
    m(
        "Claim",
        "server/src/service/execute.rs",
        "cur.lifecycle.claim(now)",
    ),
    m(
        "Claim",
        "server/src/service/mod.rs",
        "Cas::Conflict(now_stored) => cur = *now_stored,",
    ),
    m(
        "Claim",
        "server/src/store/sled/mod.rs",
        "cas_applies(cur.revision, new.revision, Guard::Revision)",
    ),
    m(
        "Claim",
        "server/src/store/postgres/batch.rs",
        "let cas = match view.check(&id, write) {",
    ),
    m(
        "Acknowledged",
        "server/src/service/mod.rs",
        "Cas::Applied => {\n                    self.commit.flush().await?;",
    ),
    m(
        "Acknowledged",
        "server/src/store/group_commit.rs",
        "if flush_covers(*done.borrow_and_update(), ticket) {",
    ),
    m(
        "FlushStart",
        "server/src/store/group_commit.rs",
        "let ticket = self.requested.fetch_add(1, Ordering::SeqCst) + 1;",
    ),
    m(
        "FlushStart",
        "server/src/store/group_commit.rs",
        "let target = self.requested.load(Ordering::SeqCst);",
    ),
    m(
        "FlushDone",
        "server/src/store/group_commit.rs",
        "self.completed.send_modify(|c| *c = (*c).max(target));",
    ),
    m(
        "BatchCommit",
        "core/src/claim.rs",
        "pub fn decide(&mut self, id: &K, write: BatchWrite) -> BatchDecision {",
    ),
    m(
        "BatchCommit",
        "model/src/model.rs",
        "batch.decide(&RECORD, write)",
    ),
    m(
        "BatchCommit",
        "server/src/store/postgres/batch.rs",
        "view.found(id.to_owned(), Some(revision as u64));",
    ),
    m(
        "BatchCommit",
        "server/src/store/postgres/batch.rs",
        "let cas = match view.check(&id, write) {",
    ),
    m(
        "BatchCommit",
        "server/src/store/postgres/batch.rs",
        "view.decide(&id, write);",
    ),
    m(
        "BatchCommit",
        "server/src/store/postgres/batch.rs",
        "        move_head,\n        commit\n    )",
    ),
    m(
        "BatchCommit",
        "server/src/store/postgres/batch.rs",
        "let heard = reply.send(answer.cas);",
    ),
    m(
        "Start",
        "server/src/service/execute.rs",
        "executor::run(&cfg, &exec, &id, &payload, &receipt)",
    ),
    m(
        "Renew",
        "server/src/service/execute.rs",
        "store.renew_lease(&id)",
    ),
    m(
        "Renew",
        "server/src/store/postgres/mod.rs",
        "SET lease_until = {DB_NOW_MS} + $2 WHERE id = $1 AND status = 'EXECUTING'",
    ),
    m(
        "Finish",
        "server/src/service/execute.rs",
        "self.transition_from(claimed.clone(), |cur, now| {",
    ),
    m(
        "Finish",
        "server/src/service/execute.rs",
        ".finish(report.outcome)",
    ),
    m(
        "Lead",
        "server/src/service/upkeep.rs",
        "store.try_lead(task.as_str())",
    ),
    m(
        "Lead",
        "server/src/store/postgres/lease.rs",
        "(true, _) => take_or_renew(&c, &task_owned, &holder, lease).await,",
    ),
    m(
        "SweepRead",
        "server/src/service/upkeep.rs",
        "let expired = self.store.expired_claims(SWEEP_BATCH)?;",
    ),
    m(
        "SweepRead",
        "server/src/store/postgres/mod.rs",
        "WHERE status = 'EXECUTING' AND lease_until < {DB_NOW_MS}",
    ),
    m(
        "SweepEnd",
        "server/src/service/upkeep.rs",
        "let Ok(life) = cur.lifecycle.crash_recovered() else {",
    ),
    m(
        "SweepEnd",
        "server/src/service/upkeep.rs",
        "match self.store.end_expired_claim(&next, events)? {",
    ),
    m(
        "SweepEnd",
        "server/src/store/postgres/mod.rs",
        "self.write_fenced(new, events, self.leadership.term(lease::SWEEP))",
    ),
    m(
        "SweepEnd",
        "server/src/store/postgres/write.rs",
        "lease::fenced(&tx, lease::SWEEP, &me, term),",
    ),
    m(
        "SweepEnd",
        "server/src/store/postgres/write.rs",
        "cas_applies(revision as u64, rec.revision, guard)",
    ),
    m(
        "Crash",
        "server/src/service/upkeep.rs",
        "let Ok(life) = cur.lifecycle.crash_recovered() else { return Ok(None) };",
    ),
    m(
        "Crash",
        "server/src/service/upkeep.rs",
        "if self.store.leases().is_some() {\n            return Ok(0);\n        }",
    ),
];
