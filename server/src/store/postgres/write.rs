//! The write transactions: the record's row, then what every write adds (its
//! notifications within the outbox cap, its audit entries sealed after the locked
//! head, the NOTIFY to other instances), with the compare-and-swap and the lease
//! and leadership fences.

use super::*;
use crate::audit;
use crate::store::shared::{held_weight, pending_delta, seal};
use approval_core::claim::{cas_applies, Guard};

pub(super) type Tx<'a> = deadpool_postgres::Transaction<'a>;
pub(super) type Sql<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);

/// Runs a statement prepared once per connection (a plain `&str` query would parse
/// it again on every call: one more round trip, inside the serial write section).
pub(super) async fn exec(tx: &Tx<'_>, sql: &str, params: &[Sql<'_>]) -> Result<u64, StoreError> {
    let st = tx.prepare_cached(sql).await.map_err(pg_err)?;
    tx.execute(&st, params).await.map_err(pg_err)
}

pub(super) async fn query_opt(
    tx: &Tx<'_>,
    sql: &str,
    params: &[Sql<'_>],
) -> Result<Option<Row>, StoreError> {
    let st = tx.prepare_cached(sql).await.map_err(pg_err)?;
    tx.query_opt(&st, params).await.map_err(pg_err)
}

pub(super) async fn query_one(
    tx: &Tx<'_>,
    sql: &str,
    params: &[Sql<'_>],
) -> Result<Row, StoreError> {
    let st = tx.prepare_cached(sql).await.map_err(pg_err)?;
    tx.query_one(&st, params).await.map_err(pg_err)
}

/// Moves `agent`'s and the total PENDING counters by `delta` (never below zero);
/// returns their new values (agent's, total).
pub(super) async fn move_pending(
    tx: &Tx<'_>,
    agent: &str,
    delta: i64,
) -> Result<(u64, u64), StoreError> {
    let st = tx
        .prepare_cached(
            "INSERT INTO pending_counts (agent, n) VALUES ($1, greatest($2::bigint, 0)), ('', greatest($2::bigint, 0)) \
             ON CONFLICT (agent) DO UPDATE SET n = greatest(pending_counts.n + $2::bigint, 0) \
             RETURNING agent, n",
        )
        .await
        .map_err(pg_err)?;
    let rows = tx.query(&st, &[&agent, &delta]).await.map_err(pg_err)?;
    let (mut mine, mut total) = (0u64, 0u64);
    for r in rows {
        let (who, n): (&str, i64) = (r.get(0), r.get(1));
        if who.is_empty() {
            total = n as u64;
        } else {
            mine = n as u64;
        }
    }
    Ok((mine, total))
}

/// The statement that locks the audit head (every write transaction's first).
pub(super) const LOCK_HEAD: &str = "SELECT seq, hash FROM audit_head FOR UPDATE";

/// Locks the audit head for this transaction; returns (seq, hash).
pub(super) async fn lock_head(tx: &Tx<'_>) -> Result<(u64, Sha256Hex), StoreError> {
    head_of(&query_one(tx, LOCK_HEAD, &[]).await?)
}

/// The audit head's (seq, hash) from its row.
pub(super) fn head_of(row: &Row) -> Result<(u64, Sha256Hex), StoreError> {
    let seq: i64 = row.get(0);
    let hash: Option<String> = row.get(1);
    let hash = match hash {
        Some(h) => Sha256Hex::parse(&h).map_err(|e| corrupt("audit_head", e))?,
        None => audit::genesis(),
    };
    Ok((seq as u64, hash))
}

/// Everything a write transaction does after the record itself: queue its
/// notifications, seal its audit entries after the locked head, NOTIFY the other
/// instances. Returns how many notifications were dropped at the cap.
///
/// The audit entries go in one statement and the head with the NOTIFY in another,
/// sent together (the driver pipelines them): the audit head is locked meanwhile,
/// so every round trip here is one every other writer waits for.
pub(super) async fn finish_write(
    tx: &Tx<'_>,
    rec: &ProposalRecord,
    events: Vec<AuditEvent>,
    head: (u64, Sha256Hex),
    outbox: OutboxState,
    me: &str,
) -> Result<u64, StoreError> {
    let mut dropped = 0u64;
    let items = outbox.items(rec, &events);
    if !items.is_empty() {
        let held: i64 = query_one(tx, "SELECT count(*) FROM outbox", &[])
            .await?
            .get(0);
        let room;
        (room, dropped) = OutboxState::room(outbox.cap, held as u64, items.len());
        let queued = items
            .iter()
            .take(room)
            .map(encode)
            .collect::<Result<Vec<String>, _>>()?;
        if !queued.is_empty() {
            exec(
                tx,
                "INSERT INTO outbox (item) SELECT unnest($1::text[])",
                &[&queued],
            )
            .await?;
        }
    }
    let (sealed, (seq, prev)) = seal(head, events);
    let mut seqs = Vec::with_capacity(sealed.len());
    let mut entries = Vec::with_capacity(sealed.len());
    for entry in &sealed {
        seqs.push(entry.seq as i64);
        entries.push(encode(entry)?);
    }
    let payload = format!("{me}:{}", rec.id());
    let (seq, prev) = (seq as i64, prev.to_string());
    let appended = async {
        if !seqs.is_empty() {
            exec(
                tx,
                "INSERT INTO audit (seq, entry) SELECT * FROM unnest($1::bigint[], $2::text[])",
                &[&seqs, &entries],
            )
            .await?;
        }
        Ok::<_, StoreError>(())
    };
    let headed = async {
        if seqs.is_empty() {
            exec(tx, "SELECT pg_notify($1, $2)", &[&CHANNEL, &payload]).await
        } else {
            exec(
                tx,
                "WITH h AS (UPDATE audit_head SET seq = $1, hash = $2 RETURNING 1) \
                 SELECT pg_notify($3, $4) FROM h",
                &[&seq, &prev, &CHANNEL, &payload],
            )
            .await
        }
    };
    futures::try_join!(appended, headed)?;
    Ok(dropped)
}

/// The database's clock in unix milliseconds (leases use it, not the instances').
pub(super) const DB_NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

impl PgStore {
    /// This instance's outbox switch and cap, as a write reads them.
    pub(super) fn outbox_switch(&self) -> OutboxState {
        *self.outbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn count_dropped(&self, id: &ProposalId, dropped: u64) {
        if dropped > 0 {
            let mut o = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
            o.count_dropped(id, dropped);
        }
    }
}

impl PgStore {
    /// [`Store::end_expired_claim`] made under sweep leadership term `term` (the one
    /// this instance believes it holds), in a transaction of its own (not batched:
    /// its conditions are read inside it): the compare-and-swap on the revision, the
    /// lease having run out (read on the database clock under the row's lock), and
    /// that term still current ([`lease::fenced`]).
    pub(super) fn write_fenced(
        &self,
        new: &ProposalRecord,
        events: Vec<AuditEvent>,
        term: Option<i64>,
    ) -> Result<Cas, StoreError> {
        let (pool, rec, outbox, me) = (
            self.pool.clone(),
            new.clone(),
            self.outbox_switch(),
            self.instance.clone(),
        );
        let lease_ms = self.lease.as_millis() as i64;
        let body = encode(new)?;
        let (ticket, size) = (self.cache.before_read(), held_weight(body.as_bytes()));
        let (cas, dropped) = self.block(async move {
            let mut c = pool.get().await.map_err(pool_err)?;
            let tx = c.transaction().await.map_err(pg_err)?;
            let id = rec.id().to_string();
            // Pipelined, executed in this order: the head lock, then the row's.
            let by_id: [Sql; 1] = [&id];
            let select_row = format!(
                "SELECT revision, body, status, agent, \
                 COALESCE(lease_until < {DB_NOW_MS}, false) FROM records WHERE id = $1 FOR UPDATE"
            );
            let (head, row, leads) = futures::try_join!(
                lock_head(&tx),
                query_opt(&tx, &select_row, &by_id),
                lease::fenced(&tx, lease::SWEEP, &me, term),
            )?;
            let Some(row) = row else {
                return Ok((Cas::Missing, 0));
            };
            let revision: i64 = row.get(0);
            let lease_expired: bool = row.get(4);
            if !leads {
                tracing::warn!(%id, "not ending an expired claim: this instance's sweep leadership term is over (another instance leads)");
            }
            // The rule is core's (`approval_core::claim`), shared with sled and the model.
            let guard = Guard::ExpiredClaim {
                lease_expired,
                term_current: leads,
            };
            if !cas_applies(revision as u64, rec.revision, guard) {
                let cur = decode_record(&id, row.get(1))?;
                return Ok((Cas::Conflict(Box::new(cur)), 0));
            }
            let executing = rec.status() == Status::Executing;
            let (was, agent): (&str, &str) = (row.get(2), row.get(3));
            let delta = pending_delta(Status::parse(was), rec.status());
            if delta != 0 {
                move_pending(&tx, agent, delta).await?;
            }
            let sql = format!(
                "UPDATE records SET status = $2, deadline = $3, revision = $4, body = $5, \
                 lease_until = CASE WHEN $6 THEN {DB_NOW_MS} + $7 ELSE NULL END WHERE id = $1"
            );
            let (status, deadline, revision) = (
                rec.status().as_str(),
                deadline_of(&rec),
                rec.revision as i64,
            );
            let row: [Sql; 7] = [
                &id, &status, &deadline, &revision, &body, &executing, &lease_ms,
            ];
            let (_, dropped) = futures::try_join!(
                exec(&tx, &sql, &row),
                finish_write(&tx, &rec, events, head, outbox, &me),
            )?;
            tx.commit().await.map_err(|e| commit_unknown(pg_err(e)))?;
            Ok((Cas::Applied, dropped))
        })?;
        if let Cas::Applied = cas {
            self.cache.written(new, size, ticket);
        }
        self.count_dropped(new.id(), dropped);
        Ok(cas)
    }
}

/// A commit that failed without an answer may or may not have happened.
pub(super) fn commit_unknown(e: StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(why) => StoreError::Unavailable(format!(
            "{why} (while committing: whether the change was stored is not known)"
        )),
        other => other,
    }
}
