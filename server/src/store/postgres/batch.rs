//! Group commit on PostgreSQL: concurrent creates and compare-and-swaps of one
//! instance gathered into one transaction under one audit head lock, one commit,
//! and every writer answered only after that commit returned.
//!
//! Why: every write takes the one audit head lock (that is what keeps the chain one
//! chain and the pending counts exact across instances), so writes are serial, and
//! each used to hold the lock for its own round trips and its own commit's flush. A
//! batch pays those once for all its members (the shape of sled's `GroupCommit`).
//!
//! How a batch decides is the rule of `approval_core::claim::Batch`, which the model
//! (`approval-model`) checks: the members in the order they were queued, each against
//! the running view of the rows (what the locked read found, moved on by the members
//! before it), so two claims of one record in one batch decide as two transactions
//! one after the other (the first applies, the second conflicts and gets the first's
//! record). What each applied member adds (its pending count, its outbox items within
//! the cap, its audit entries sealed after the previous member's) is computed the same
//! way, in order, and written in a few statements sent together.
//!
//! When a batch is formed: from what is queued when the batcher is free, and again,
//! once the transaction holds the audit head, from what queued while it waited for
//! it (another instance's commit holds the head through that commit's flush).
//! Those late members are decided after the first ones, in queue order, as the model
//! has it: a batch takes its instance's queue under the head. Measured in
//! BENCHMARKS round 15: 7-14 % more prepares, decisions and round trips, on one
//! instance and on two (bigger batches, fewer commits).
//!
//! All or nothing: if anything fails before the commit returns, no member is answered
//! as applied; a commit without an answer is reported to every member as not known.
//! A member refused on its own (a create over an existing id, a pending limit) does
//! not fail the others.
//!
//! Not batched: the lease sweep's fenced write, leases, leadership, the configuration
//! head (rare, and each has its own conditions inside its own transaction).

use super::cache::{RecordCache, Ticket};
use super::write::{head_of, Sql, LOCK_HEAD};
use super::*;
use crate::store::shared::{held_weight, moved, pending_delta, seal};
use approval_core::claim::{Batch, BatchDecision, BatchWrite};
use std::collections::HashMap;

/// Most members in one transaction.
const MAX_BATCH: usize = 256;

/// What a member asks for.
pub(super) enum Kind {
    Create(PendingLimits),
    Update,
}

/// One writer's request, and where its answer goes.
pub(super) struct Request {
    /// What the transaction needs.
    pub member: Member,
    /// The cache's stamp before the write was asked for.
    pub ticket: Ticket,
    pub reply: Reply,
}

/// Where a member's answer goes: a caller blocked on it, or one awaiting it.
pub(super) enum Reply {
    Blocking(std::sync::mpsc::SyncSender<Result<Cas, StoreError>>),
    Awaited(tokio::sync::oneshot::Sender<Result<Cas, StoreError>>),
}

impl Reply {
    /// Answers; false when the caller went away (it is not waited for).
    fn send(self, answer: Result<Cas, StoreError>) -> bool {
        match self {
            Reply::Blocking(s) => s.send(answer).is_ok(),
            Reply::Awaited(s) => s.send(answer).is_ok(),
        }
    }
}

/// How long a writer waits for its batch's answer: the batch's own time-out and a
/// second.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(CALL_TIMEOUT.as_secs() + 1);

fn stopped() -> StoreError {
    StoreError::Backend("the store's writer stopped".into())
}

fn no_answer() -> StoreError {
    unreachable(format!(
        "no answer from PostgreSQL within {} s (whether the change was stored is not known)",
        CALL_TIMEOUT.as_secs()
    ))
}

/// What the batcher shares with the store.
pub(super) struct Shared {
    pub pool: Pool,
    pub outbox: Arc<Mutex<OutboxState>>,
    pub instance: String,
    pub cache: Arc<RecordCache>,
    pub stats: Arc<BatchStats>,
    /// Where changes are announced to this instance's waiters when their writer
    /// did not hear of them ([`Store::remote_events`]).
    pub events: tokio::sync::broadcast::Sender<Option<ProposalId>>,
}

/// Counters for benchmarks and tests: transactions and members.
#[derive(Default)]
pub struct BatchStats {
    pub batches: std::sync::atomic::AtomicU64,
    pub members: std::sync::atomic::AtomicU64,
}

/// Starts the batcher on the store's runtime; returns where requests go.
///
/// One batcher, one connection. Two in flight (the next batch's `BEGIN` and lock
/// request waiting while the previous commits) was measured: 13 % more prepares but
/// 22 % fewer round trips on a 2-core machine (BENCHMARKS round 15), so not kept.
pub(super) fn start(
    rt: &tokio::runtime::Runtime,
    shared: Shared,
) -> tokio::sync::mpsc::UnboundedSender<Request> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Request>();
    rt.spawn(async move {
        let mut conn: Option<deadpool_postgres::Object> = None;
        while let Some(first) = rx.recv().await {
            run(&shared, &mut conn, first, &mut rx).await;
        }
    });
    tx
}

/// One batch, start to answers, from its `first` request. `rx` is the queue, taken
/// from twice: now (the requests that arrived while the batch before was
/// committing) and once the transaction holds the head ([`transact`]).
async fn run(
    shared: &Shared,
    conn: &mut Option<deadpool_postgres::Object>,
    first: Request,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Request>,
) {
    use std::sync::atomic::Ordering::Relaxed;
    shared.stats.batches.fetch_add(1, Relaxed);
    let mut replies = vec![(first.reply, first.ticket)];
    let mut members = vec![first.member];
    // Up to `room` queued requests: their answers' ways kept here, in queue order.
    let mut join = |room: usize| {
        let mut joined = Vec::new();
        while joined.len() < room {
            let Ok(r) = rx.try_recv() else { break };
            replies.push((r.reply, r.ticket));
            joined.push(r.member);
        }
        joined
    };
    members.extend(join(MAX_BATCH - 1));
    let outbox = *shared.outbox.lock().unwrap_or_else(|e| e.into_inner());
    let started = std::time::Instant::now();
    let done = tokio::time::timeout(CALL_TIMEOUT, async {
        if conn.as_ref().is_none_or(|c| c.is_closed()) {
            *conn = Some(connect_batcher(&shared.pool).await?);
        }
        let Some(c) = conn.as_mut() else {
            return Err(unreachable("no connection"));
        };
        transact(c, &mut members, outbox, shared, &mut join).await
    })
    .await
    .unwrap_or_else(|_| Err(no_answer()));
    shared
        .stats
        .members
        .fetch_add(members.len() as u64, Relaxed);
    let micros = started.elapsed().as_micros() as u64;
    tracing::trace!(micros, members = replies.len(), "batch ended");
    match done {
        Ok(answers) => {
            for ((reply, ticket), (m, answer)) in
                replies.into_iter().zip(members.iter().zip(answers))
            {
                if let Ok(Cas::Applied) = &answer.cas {
                    // Before the writer hears of it: see `cache`.
                    shared.cache.written(&m.rec, m.size, ticket);
                    if answer.dropped > 0 {
                        let mut o = shared.outbox.lock().unwrap_or_else(|e| e.into_inner());
                        o.count_dropped(m.rec.id(), answer.dropped);
                    }
                }
                let applied = matches!(answer.cas, Ok(Cas::Applied));
                let heard = reply.send(answer.cas);
                if applied && !heard {
                    // Its writer went away before the answer (a caller that dropped
                    // an awaited write: a client that hung up): the service never
                    // announces this change, so the store does, after its commit.
                    let _ = shared.events.send(Some(m.rec.id().clone()));
                }
            }
        }
        Err(e) => {
            if matches!(e, StoreError::Unavailable(_)) {
                // Whatever state the connection is in (perhaps inside this batch's
                // transaction, cut off by the time-out), it is closed, never reused.
                discard(conn);
            } else if let Some(c) = conn.as_ref() {
                // A refused statement aborted the transaction: end it, or close the
                // connection if even that fails.
                if c.batch_execute("ROLLBACK").await.is_err() {
                    discard(conn);
                }
            }
            let unheard = replies
                .into_iter()
                .map(|(reply, _)| reply.send(Err(e.clone())))
                .filter(|heard| !heard)
                .count();
            if unheard > 0 {
                // Their writers went away (clients that hung up), so no caller sees
                // this error and the fail-stop wrapper never weighs it: say it here.
                tracing::error!(error = %e, writes = unheard, "writes whose callers had gone away failed");
            }
        }
    }
}

/// Closes the batcher's connection instead of handing it back to the pool, where
/// another caller could be given it still inside a transaction.
fn discard(conn: &mut Option<deadpool_postgres::Object>) {
    if let Some(c) = conn.take() {
        drop(deadpool_postgres::Object::take(c));
    }
}

/// The batcher's connection, set up once: the batch's statements prepared (see
/// their comment) and planned per execution. The statements take arrays of ids; a
/// plan cached while the tables were small (a fresh database) scans them whole and
/// keeps doing so as they grow (6-10 ms per batch at 15,000 records, measured).
async fn connect_batcher(pool: &Pool) -> Result<deadpool_postgres::Object, StoreError> {
    let c = pool.get().await.map_err(pool_err)?;
    c.batch_execute("SET plan_cache_mode = force_custom_plan")
        .await
        .map_err(pg_err)?;
    for sql in [
        OUTBOX_HELD,
        LOCK_HEAD,
        ROWS,
        COUNTS,
        BODIES,
        INSERT,
        &UPDATE,
        SET_COUNTS,
        QUEUE,
        APPEND,
        NOTIFY,
        MOVE_HEAD,
    ] {
        c.prepare_cached(sql).await.map_err(pg_err)?;
    }
    Ok(c)
}

/// One write, as the transaction decides and writes it.
pub(super) struct Member {
    pub rec: ProposalRecord,
    /// The body's weight in the read cache ([`held_weight`]), counted by the writer,
    /// not by the batcher, which may hold the audit head when a late member joins
    /// (the body itself moves into the statements).
    pub size: usize,
    pub body: String,
    pub events: Vec<AuditEvent>,
    pub kind: Kind,
    /// The claim lease this instance gives a record written EXECUTING.
    pub lease_ms: i64,
}

struct Answer {
    cas: Result<Cas, StoreError>,
    dropped: u64,
}

/// The rows' columns each applied record writes, in the arrays the statements take.
#[derive(Default)]
struct Rows {
    id: Vec<String>,
    agent: Vec<String>,
    status: Vec<&'static str>,
    created: Vec<i64>,
    deadline: Vec<Option<i64>>,
    revision: Vec<i64>,
    body: Vec<String>,
    executing: Vec<bool>,
    lease: Vec<i64>,
}

impl Rows {
    fn push(&mut self, m: &mut Member) {
        self.id.push(m.rec.id().to_string());
        self.agent
            .push(m.rec.preview.requested_by.as_str().to_owned());
        self.status.push(m.rec.status().as_str());
        self.created.push(m.rec.preview.created_at.unix());
        self.deadline.push(deadline_of(&m.rec));
        self.revision.push(m.rec.revision as i64);
        self.body.push(std::mem::take(&mut m.body));
        self.executing.push(m.rec.status() == Status::Executing);
        self.lease.push(m.lease_ms);
    }
}

fn id_of(m: &Member) -> String {
    m.rec.id().to_string()
}

fn agent_of(m: &Member) -> String {
    m.rec.preview.requested_by.as_str().to_owned()
}

/// `keys` sorted, each once (the order the statements take and `binary_search` needs).
fn sorted(keys: impl Iterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = keys.collect();
    v.sort();
    v.dedup();
    v
}

/// The transaction: lock, read, decide in order, write, commit. `join(room)`
/// hands over up to `room` writes queued since the batch was formed.
async fn transact(
    c: &mut deadpool_postgres::Object,
    members: &mut Vec<Member>,
    outbox: OutboxState,
    shared: &Shared,
    join: &mut impl FnMut(usize) -> Vec<Member>,
) -> Result<Vec<Answer>, StoreError> {
    let tx: &deadpool_postgres::ClientWrapper = c;
    // The rows and counts to read (`""` is the total's).
    let mut ids = sorted(members.iter().map(id_of));
    let mut agents = sorted(members.iter().map(agent_of).chain([String::new()]));
    let wants_outbox = outbox.on;
    // Sent together (pipelined), executed in this order: the head lock first.
    let (by_ids, by_agents): ([Sql; 1], [Sql; 1]) = ([&ids], [&agents]);
    let held = async {
        if wants_outbox {
            let n: i64 = one(tx, OUTBOX_HELD, &[]).await?.get(0);
            Ok::<_, StoreError>(n as u64)
        } else {
            Ok(0)
        }
    };
    // One round trip: BEGIN, the head lock, the rows and counts, sent together
    // (pipelined) and executed in this order. The transaction is ours from here:
    // every way out before the commit rolls it back (`run`).
    let (_, head, mut rows, mut counts, mut held) = futures::try_join!(
        begin(tx),
        one(tx, LOCK_HEAD, &[]),
        query(tx, ROWS, &by_ids),
        query(tx, COUNTS, &by_agents),
        held,
    )?;
    let head = head_of(&head)?;
    // The head is ours. Writes queued meanwhile join now, at one more round trip
    // for their rows, rather than wait for this whole transaction and then the
    // head again: with two instances, a batch waits here for the other's commit,
    // and its writers' next requests pile up behind it (BEGIN is sent first only
    // because it saves a round trip when the head is free).
    let late = join(MAX_BATCH.saturating_sub(members.len()));
    if !late.is_empty() {
        let not_in = |have: &[String], f: fn(&Member) -> String| {
            sorted(
                late.iter()
                    .map(f)
                    .filter(|x| have.binary_search(x).is_err()),
            )
        };
        let (more_ids, more_agents) = (not_in(&ids, id_of), not_in(&agents, agent_of));
        let (by_ids, by_agents): ([Sql; 1], [Sql; 1]) = ([&more_ids], [&more_agents]);
        let (more_rows, more_counts) = futures::try_join!(
            async {
                match more_ids.is_empty() {
                    true => Ok(Vec::new()),
                    false => query(tx, ROWS, &by_ids).await,
                }
            },
            async {
                match more_agents.is_empty() {
                    true => Ok(Vec::new()),
                    false => query(tx, COUNTS, &by_agents).await,
                }
            },
        )?;
        rows.extend(more_rows);
        counts.extend(more_counts);
        ids.extend(more_ids);
        ids.sort();
        agents.extend(more_agents);
        agents.sort();
        members.extend(late);
    }

    // The running view: revisions (core's rule), statuses and counts.
    let mut view: Batch<String> = Batch::default();
    let mut status: HashMap<String, Status> = HashMap::new();
    for id in &ids {
        view.found(id.clone(), None);
    }
    for r in &rows {
        let (id, revision, st): (&str, i64, &str) = (r.get(0), r.get(1), r.get(2));
        view.found(id.to_owned(), Some(revision as u64));
        if let Some(st) = Status::parse(st) {
            status.insert(id.to_owned(), st);
        }
    }
    let mut count: HashMap<String, u64> = agents.iter().map(|a| (a.clone(), 0)).collect();
    for r in &counts {
        let (agent, n): (&str, i64) = (r.get(0), r.get(1));
        count.insert(agent.to_owned(), n.max(0) as u64);
    }

    let mut head = head;
    let mut answers: Vec<Answer> = Vec::with_capacity(members.len());
    // The last applied member of each id (its final row), and whether it is new.
    let mut last: HashMap<String, (usize, bool)> = HashMap::new();
    let mut touched_agents: Vec<String> = Vec::new();
    let (mut seqs, mut entries, mut queued) = (Vec::new(), Vec::new(), Vec::new());
    // (member, id, the batch's last applied write of that id before it)
    let mut conflicts: Vec<(usize, String, Option<usize>)> = Vec::new();
    for (i, m) in members.iter_mut().enumerate() {
        let id = m.rec.id().to_string();
        let write = match m.kind {
            Kind::Create(_) => BatchWrite::Create {
                revision: m.rec.revision,
            },
            Kind::Update => BatchWrite::Update {
                new_revision: m.rec.revision,
            },
        };
        let cas = match view.check(&id, write) {
            BatchDecision::Exists => Err(StoreError::Exists(id.clone())),
            BatchDecision::Missing => Ok(Cas::Missing),
            BatchDecision::Conflict => {
                conflicts.push((i, id.clone(), last.get(&id).map(|(j, _)| *j)));
                // Filled in below, from the batch or the database.
                Ok(Cas::Missing)
            }
            BatchDecision::Applied => {
                let agent = m.rec.preview.requested_by.as_str();
                let delta = pending_delta(status.get(&id).copied(), m.rec.status());
                let mine = moved(count.get(agent).copied().unwrap_or(0), delta);
                let total = moved(count.get("").copied().unwrap_or(0), delta);
                let admitted = match (&m.kind, delta > 0) {
                    (Kind::Create(limits), true) => limits.admit(agent, mine, total),
                    _ => Ok(()),
                };
                match admitted {
                    Err(e) => Err(e),
                    Ok(()) => {
                        view.decide(&id, write);
                        if delta != 0 {
                            count.insert(agent.to_owned(), mine);
                            count.insert(String::new(), total);
                            touched_agents.push(agent.to_owned());
                        }
                        status.insert(id.clone(), m.rec.status());
                        let created = matches!(m.kind, Kind::Create(_))
                            || last.get(&id).is_some_and(|(_, new)| *new);
                        last.insert(id.clone(), (i, created));
                        Ok(Cas::Applied)
                    }
                }
            }
        };
        let mut dropped = 0;
        if let Ok(Cas::Applied) = cas {
            let items = outbox.items(&m.rec, &m.events);
            if !items.is_empty() {
                let room;
                (room, dropped) = OutboxState::room(outbox.cap, held, items.len());
                held += room as u64;
                for item in items.iter().take(room) {
                    queued.push(encode(item)?);
                }
            }
            let (sealed, next) = seal(head, std::mem::take(&mut m.events));
            head = next;
            for entry in &sealed {
                seqs.push(entry.seq as i64);
                entries.push(encode(entry)?);
            }
        }
        answers.push(Answer { cas, dropped });
    }

    // A conflict hands back what is there now: the batch's own last write of the
    // record if it made one, else the stored row (locked by this transaction).
    let stored: Vec<String> = conflicts
        .iter()
        .filter(|(_, _, before)| before.is_none())
        .map(|(_, id, _)| id.clone())
        .collect();
    let mut bodies: HashMap<String, ProposalRecord> = HashMap::new();
    if !stored.is_empty() {
        let by: [Sql; 1] = [&stored];
        for r in query(tx, BODIES, &by).await? {
            let id: &str = r.get(0);
            bodies.insert(id.to_owned(), decode_record(id, r.get(1))?);
        }
    }
    for (i, id, before) in &conflicts {
        let current = match before {
            Some(j) => Some(members[*j].rec.clone()),
            None => bodies.get(id).cloned(),
        };
        answers[*i].cas = match current {
            Some(cur) => Ok(Cas::Conflict(Box::new(cur))),
            None => Ok(Cas::Missing),
        };
    }

    // The writes, sent together.
    let (mut inserts, mut updates) = (Rows::default(), Rows::default());
    let mut finals: Vec<(usize, bool)> = last.values().copied().collect();
    finals.sort();
    for (i, created) in finals {
        if created {
            inserts.push(&mut members[i]);
        } else {
            updates.push(&mut members[i]);
        }
    }
    touched_agents.sort();
    touched_agents.dedup();
    if !touched_agents.is_empty() {
        touched_agents.push(String::new());
    }
    let touched_counts: Vec<i64> = touched_agents
        .iter()
        .map(|a| count.get(a).copied().unwrap_or(0) as i64)
        .collect();
    let me = &shared.instance;
    let notes: Vec<String> = last.keys().map(|id| format!("{me}:{id}")).collect();
    let insert_rows = async {
        if inserts.id.is_empty() {
            return Ok(0);
        }
        let p: [Sql; 7] = [
            &inserts.id,
            &inserts.agent,
            &inserts.status,
            &inserts.created,
            &inserts.deadline,
            &inserts.revision,
            &inserts.body,
        ];
        exec(tx, INSERT, &p).await
    };
    let update_rows = async {
        if updates.id.is_empty() {
            return Ok(0);
        }
        let p: [Sql; 7] = [
            &updates.id,
            &updates.status,
            &updates.deadline,
            &updates.revision,
            &updates.body,
            &updates.executing,
            &updates.lease,
        ];
        exec(tx, &UPDATE, &p).await
    };
    let set_counts = async {
        if touched_agents.is_empty() {
            return Ok(0);
        }
        exec(tx, SET_COUNTS, &[&touched_agents as Sql, &touched_counts]).await
    };
    let queue = async {
        if queued.is_empty() {
            return Ok(0);
        }
        exec(tx, QUEUE, &[&queued]).await
    };
    let append = async {
        if seqs.is_empty() {
            return Ok(0);
        }
        exec(tx, APPEND, &[&seqs as Sql, &entries]).await
    };
    let (seq, prev) = (head.0 as i64, head.1.to_string());
    let move_head = async {
        if notes.is_empty() {
            return Ok(0);
        }
        if seqs.is_empty() {
            exec(tx, NOTIFY, &[&CHANNEL as Sql, &notes]).await
        } else {
            exec(tx, MOVE_HEAD, &[&seq as Sql, &prev, &CHANNEL, &notes]).await
        }
    };
    // One round trip: the writes and the COMMIT, sent together. If a write fails
    // the database aborts the transaction and the COMMIT only ends it: that
    // failure is the answer. Once the COMMIT is sent, a lost connection means the
    // commit may or may not have happened, and is said so.
    let commit = async { tx.batch_execute("COMMIT").await.map_err(pg_err) };
    futures::try_join!(
        insert_rows,
        update_rows,
        set_counts,
        queue,
        append,
        move_head,
        commit
    )
    .map_err(|e| match e {
        StoreError::Unavailable(_) => commit_unknown(e),
        other => other,
    })?;
    Ok(answers)
}

type Db = deadpool_postgres::ClientWrapper;

// The batch's statements. Each is prepared on the batcher's connection before any
// batch is pipelined ([`connect_batcher`]): a statement not yet prepared would send its
// Parse first and its execution only after that answer, behind statements polled
// after it, so the pipeline's order (BEGIN first, the head lock before the rows,
// every write before the COMMIT) would not be the order of execution.
const OUTBOX_HELD: &str = "SELECT count(*) FROM outbox";
const ROWS: &str = "SELECT id, revision, status FROM records WHERE id = ANY($1) FOR UPDATE";
const COUNTS: &str = "SELECT agent, n FROM pending_counts WHERE agent = ANY($1)";
const BODIES: &str = "SELECT id, body FROM records WHERE id = ANY($1)";
const INSERT: &str = "INSERT INTO records (id, agent, status, created, deadline, revision, body) \
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::text[])";
static UPDATE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "UPDATE records r SET status = u.status, deadline = u.deadline, revision = u.revision, body = u.body, \
         lease_until = CASE WHEN u.executing THEN {DB_NOW_MS} + u.lease ELSE NULL END \
         FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::bool[], $7::bigint[]) \
         AS u(id, status, deadline, revision, body, executing, lease) WHERE r.id = u.id"
    )
});
const SET_COUNTS: &str =
    "INSERT INTO pending_counts (agent, n) SELECT * FROM unnest($1::text[], $2::bigint[]) \
     ON CONFLICT (agent) DO UPDATE SET n = EXCLUDED.n";
const QUEUE: &str = "INSERT INTO outbox (item) SELECT unnest($1::text[])";
const APPEND: &str =
    "INSERT INTO audit (seq, entry) SELECT * FROM unnest($1::bigint[], $2::text[])";
const NOTIFY: &str = "SELECT pg_notify($1, n) FROM unnest($2::text[]) n";
const MOVE_HEAD: &str = "WITH h AS (UPDATE audit_head SET seq = $1, hash = $2 RETURNING 1) \
     SELECT pg_notify($3, n) FROM h, unnest($4::text[]) n";

async fn begin(c: &Db) -> Result<(), StoreError> {
    c.batch_execute("BEGIN").await.map_err(pg_err)
}

async fn query(c: &Db, sql: &str, params: &[Sql<'_>]) -> Result<Vec<Row>, StoreError> {
    let st = c.prepare_cached(sql).await.map_err(pg_err)?;
    c.query(&st, params).await.map_err(pg_err)
}

async fn one(c: &Db, sql: &str, params: &[Sql<'_>]) -> Result<Row, StoreError> {
    let st = c.prepare_cached(sql).await.map_err(pg_err)?;
    c.query_one(&st, params).await.map_err(pg_err)
}

async fn exec(c: &Db, sql: &str, params: &[Sql<'_>]) -> Result<u64, StoreError> {
    let st = c.prepare_cached(sql).await.map_err(pg_err)?;
    c.execute(&st, params).await.map_err(pg_err)
}

impl PgStore {
    /// Queues a create or an update for the batcher and waits for its answer, which
    /// comes after the batch's commit (at most [`CALL_TIMEOUT`] and a second).
    pub(super) fn submit(
        &self,
        rec: &ProposalRecord,
        events: Vec<AuditEvent>,
        kind: Kind,
    ) -> Result<Cas, StoreError> {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.enqueue(rec, events, kind, Reply::Blocking(reply))?;
        wait_here(|| match answer.recv_timeout(ANSWER_TIMEOUT) {
            Ok(r) => r,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(no_answer()),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(stopped()),
        })
    }

    /// [`PgStore::submit`] awaited: the caller's runtime thread serves other tasks
    /// meanwhile. The request is queued before the future is first polled, so a
    /// caller that drops it has still asked for the write (as a blocking caller that
    /// went away would have).
    pub(super) fn submit_async(
        &self,
        rec: &ProposalRecord,
        events: Vec<AuditEvent>,
        kind: Kind,
    ) -> impl std::future::Future<Output = Result<Cas, StoreError>> + Send + 'static {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let queued = self.enqueue(rec, events, kind, Reply::Awaited(reply));
        async move {
            queued?;
            match tokio::time::timeout(ANSWER_TIMEOUT, answer).await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => Err(stopped()),
                Err(_) => Err(no_answer()),
            }
        }
    }

    fn enqueue(
        &self,
        rec: &ProposalRecord,
        events: Vec<AuditEvent>,
        kind: Kind,
        reply: Reply,
    ) -> Result<(), StoreError> {
        self.rt()?;
        let body = encode(rec)?;
        let request = Request {
            member: Member {
                rec: rec.clone(),
                size: held_weight(body.as_bytes()),
                body,
                events,
                kind,
                lease_ms: self.lease.as_millis() as i64,
            },
            ticket: self.cache.before_read(),
            reply,
        };
        self.batcher.send(request).map_err(|_| stopped())
    }

    /// Transactions and members the batcher has run (for benchmarks and tests).
    pub fn batch_counts(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.batch_stats.batches.load(Relaxed),
            self.batch_stats.members.load(Relaxed),
        )
    }
}
