//! The PostgreSQL store: several instances of the server on one database.
//!
//! Same contract as the embedded store, kept by the database instead of a writer
//! lock: every state change is one transaction that first locks the one-row audit
//! head (`SELECT … FOR UPDATE`), so writers from every instance are serial, the
//! audit chain is one chain without gaps or forks, and the pending limits count
//! what is really there. The execute claim is the compare-and-swap on the record's
//! revision inside that transaction (`SELECT … FOR UPDATE` of the row, then the
//! update), so of any number of concurrent claims on any number of instances
//! exactly one commits. A commit is durable when it returns (PostgreSQL's own
//! `synchronous_commit`), so [`Store::flush_blocking`] has nothing left to do.
//!
//! What several instances add:
//! - **Leases.** A record written EXECUTING carries `lease_until` (database clock),
//!   renewed by the instance running its executor ([`Store::renew_lease`]). An
//!   instance that dies stops renewing; a surviving instance's sweeper finds the
//!   expired lease ([`Store::expired_claims`]) and ends the record OUTCOME_UNKNOWN.
//!   Nothing is ever claimed twice: a claim needs APPROVED.
//! - **One sweeper at a time.** [`Store::try_lead`] takes or renews a leadership
//!   lease per task on the database's clock; a leader that stops renewing (dead, or
//!   frozen with its connections open) is replaced once it expires, and checks its
//!   term before each act ([`Store::still_leads`], fenced writes): see [`lease`].
//! - **Events.** Each write transaction sends `NOTIFY approval_events` with the
//!   proposal's id; every instance LISTENs on a connection of its own and hands
//!   the ids to its long-polls and watch streams ([`Store::remote_events`]).
//!
//! The [`Store`] trait is synchronous (the service calls it as it calls sled). This
//! store owns a small tokio runtime of its own: each method hands its future to
//! that runtime and blocks on the answer, which works from any thread, including
//! another runtime's worker, without nesting `block_on`.
//!
//! A database that cannot be reached gives [`StoreError::Unavailable`] (never a
//! fail-stop): the pool drops broken connections and makes new ones, so the
//! instance serves again as soon as the database is back. A transaction whose
//! commit got no answer is reported as not known, never as done.
//!
//! The files: [`url`] reads a store URL, `conn` connects, migrates and listens,
//! `write` is the write transactions, `read` the queries and the page walk's
//! entries, [`lease`] the leadership leases. The write rules themselves (audit
//! sealing, the outbox cap, the pending limits, the page walk) are the store's
//! (`store::shared`, `store::outbox`, `store::page`), not this backend's.
//!
//! May import: the store's contract and shared rules, `audit`, `record`, core.

use super::api::{AuditLog, Cas, Pending, PendingLimits, Store};
use super::error::StoreError;
use super::outbox::{OutboxItem, OutboxState};
use super::page::walk;
use super::page::{Cursor, HeadPage, ListIndex, RecordHead, RecordPage};
use super::shared::{corrupt, encode_text as encode, held_weight};
use crate::audit::{AuditEntry, AuditEvent};
use crate::record::ProposalRecord;
use approval_core::governance::ConfigHead;
use approval_core::ids::AgentName;
use approval_core::status::Status;
use approval_core::{ProposalId, PublicKey, ServerId, Sha256Hex, Timestamp};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_postgres::{NoTls, Row};

mod batch;
pub mod cache;
mod config;
mod conn;
pub mod lease;
mod read;
#[cfg(test)]
pub(crate) mod testdb;
#[cfg(test)]
mod tests;
pub mod url;
mod write;

use self::conn::*;
use self::read::*;
pub use self::url::{is_postgres_url, parse_url, redact, Tls};
use self::write::*;

/// The schema versions this build knows, in order: `migrations/NNNN_*.sql`.
pub const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../migrations/0001_init.sql")),
    (2, include_str!("../migrations/0002_leadership.sql")),
];

/// The schema version this build reads and writes.
pub const SCHEMA: i32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// The channel every instance LISTENs on.
const CHANNEL: &str = "approval_events";

/// The longest any one store call may take before it counts as unreachable.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a claim stays leased without renewal, by default.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Rows fetched per query while a page is walked.
const PAGE_CHUNK: i64 = 200;

/// The PostgreSQL backend.
pub struct PgStore {
    rt: Option<tokio::runtime::Runtime>,
    pool: Pool,
    pg_config: tokio_postgres::Config,
    /// Plain TCP or verified TLS, for every connection (pooled and dedicated).
    tls: Tls,
    server_id: ServerId,
    /// Tells this instance's own NOTIFYs from others'.
    instance: String,
    lease: Duration,
    outbox: Arc<Mutex<OutboxState>>,
    events: tokio::sync::broadcast::Sender<Option<ProposalId>>,
    /// This instance's leadership leases (its `instance` id is their holder).
    leadership: lease::Leadership,
    /// Where creates and updates go to be committed in batches ([`batch`]).
    batcher: tokio::sync::mpsc::UnboundedSender<batch::Request>,
    /// What the batches did (for benchmarks and tests).
    batch_stats: Arc<batch::BatchStats>,
    /// Records read or written here, kept exact by the listener ([`cache`]).
    cache: Arc<cache::RecordCache>,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which a runtime thread may not do.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl PgStore {
    /// Connects to `url`, checks that its schema is the version this build knows,
    /// and starts listening for other instances' events. Refuses a database that
    /// was never migrated, or was migrated by an older or newer build, saying which
    /// command to run.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        let (pg_config, tls) = parse_url(url)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("pg-store")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Backend(format!("cannot start the store's runtime: {e}")))?;
        let mut cfg = pg_config.clone();
        cfg.connect_timeout(Duration::from_secs(5));
        // A peer that vanished without a reset (failover, partition) is noticed in
        // seconds, not after the kernel's 15 minutes of retransmissions or 2 hours of
        // keepalive silence: this matters most for the LISTEN and leader connections.
        cfg.keepalives(true);
        cfg.keepalives_idle(Duration::from_secs(10));
        cfg.tcp_user_timeout(Duration::from_secs(15));
        let options = match pg_config.get_options() {
            Some(o) if !o.trim().is_empty() => format!("{o} {SESSION_OPTIONS}"),
            _ => SESSION_OPTIONS.to_owned(),
        };
        cfg.options(&options);
        let manager_config = || ManagerConfig {
            // A pooled connection is checked with a round trip before reuse, so one
            // left behind by a timed-out call is never handed out dead.
            recycling_method: RecyclingMethod::Verified,
        };
        let mgr = match &tls {
            Tls::Plain => Manager::from_config(cfg.clone(), NoTls, manager_config()),
            Tls::Verified(m) => Manager::from_config(cfg.clone(), m.clone(), manager_config()),
        };
        let pool = {
            let _enter = rt.enter();
            Pool::builder(mgr)
                .max_size(16)
                .runtime(deadpool_postgres::Runtime::Tokio1)
                .wait_timeout(Some(CALL_TIMEOUT))
                .create_timeout(Some(Duration::from_secs(5)))
                .recycle_timeout(Some(Duration::from_secs(5)))
                .build()
                .map_err(|e| StoreError::Backend(format!("cannot build the pool: {e}")))?
        };
        let mut inst = [0u8; 8];
        getrandom::fill(&mut inst)
            .map_err(|e| StoreError::Backend(format!("no randomness: {e}")))?;
        let instance = hex::encode(inst);
        let outbox = Arc::new(Mutex::new(OutboxState::default()));
        let cache = Arc::new(cache::RecordCache::default());
        let batch_stats = Arc::new(batch::BatchStats::default());
        let events = tokio::sync::broadcast::channel(4096).0;
        let batcher = batch::start(
            &rt,
            batch::Shared {
                pool: pool.clone(),
                outbox: outbox.clone(),
                instance: instance.clone(),
                cache: cache.clone(),
                stats: batch_stats.clone(),
                events: events.clone(),
            },
        );
        let mut store = Self {
            batcher,
            batch_stats,
            cache,
            rt: Some(rt),
            pool,
            pg_config: cfg,
            tls,
            server_id: ServerId::parse("srv-unset")
                .map_err(|e| StoreError::Backend(e.to_string()))?,
            leadership: lease::Leadership::new(instance.clone(), DEFAULT_LEASE),
            instance,
            lease: DEFAULT_LEASE,
            outbox,
            events,
        };
        let display = redact(url);
        let found = store.block(schema_version(store.pool.clone()))?;
        match found {
            None => {
                return Err(StoreError::Layout(format!(
                    "the database {display} has no approval-server schema: run `approval-server migrate --store {display}` first"
                )))
            }
            Some(v) if v < SCHEMA => {
                return Err(StoreError::Layout(format!(
                    "the database {display} has schema version {v}, older than this build's {SCHEMA}: run `approval-server migrate --store {display}` (stop older instances first)"
                )))
            }
            Some(v) if v > SCHEMA => {
                return Err(StoreError::Layout(format!(
                    "the database {display} has schema version {v}, newer than this build knows ({SCHEMA}): run the newer approval-server build that migrated it"
                )))
            }
            Some(_) => {}
        }
        store.server_id = store.block(server_id_of(store.pool.clone()))?;
        store.listen();
        Ok(store)
    }

    /// Sets how long a claim stays leased without renewal (tests use a short one),
    /// and with it the leadership lease ([`lease::Leadership::lease_for`]).
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self.leadership.set_claim_lease(lease);
        self
    }
}

/// A record's stored body, if any.
async fn read_body(pool: Pool, id: String) -> Result<Option<String>, StoreError> {
    let c = pool.get().await.map_err(pool_err)?;
    let st = c
        .prepare_cached("SELECT body FROM records WHERE id = $1")
        .await
        .map_err(pg_err)?;
    let row = c.query_opt(&st, &[&id]).await.map_err(pg_err)?;
    Ok(row.map(|r| r.get::<_, String>(0)))
}

impl PgStore {
    /// Decodes a body read (a ticket taken before the read), filling the cache.
    fn read_into_cache(
        &self,
        id: &ProposalId,
        body: Option<String>,
        ticket: cache::Ticket,
    ) -> Result<Option<ProposalRecord>, StoreError> {
        let Some(body) = body else { return Ok(None) };
        let rec = decode_record(id.as_str(), &body)?;
        self.cache
            .filled(&rec, held_weight(body.as_bytes()), ticket);
        Ok(Some(rec))
    }
}

/// A create's answer: only `Applied` is one.
fn created(rec: &ProposalRecord, cas: Cas) -> Result<(), StoreError> {
    match cas {
        Cas::Applied => Ok(()),
        _ => Err(StoreError::Backend(format!(
            "creating {} was answered as an update",
            rec.id()
        ))),
    }
}

impl Store for PgStore {
    fn server_id(&self) -> &ServerId {
        &self.server_id
    }

    fn server_key(&self) -> Result<Option<PublicKey>, StoreError> {
        let pool = self.pool.clone();
        let v = self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            let row = c
                .query_opt("SELECT v FROM meta WHERE k = 'server_key'", &[])
                .await
                .map_err(pg_err)?;
            Ok(row.map(|r| r.get::<_, String>(0)))
        })?;
        v.map(|v| PublicKey::parse(&v).map_err(|e| corrupt("meta/server_key", e)))
            .transpose()
    }

    fn bind_server_key(&self, key: &PublicKey) -> Result<PublicKey, StoreError> {
        let (pool, b64) = (self.pool.clone(), key.to_base64());
        let v = self.block(async move { meta_insert_get(&pool, "server_key", &b64).await })?;
        PublicKey::parse(&v).map_err(|e| corrupt("meta/server_key", e))
    }

    fn shared_server_secret(&self, fresh: &str) -> Result<Option<String>, StoreError> {
        let (pool, fresh) = (self.pool.clone(), fresh.to_owned());
        self.block(async move { meta_insert_get(&pool, "server_secret", &fresh).await })
            .map(Some)
    }

    fn config_head(&self) -> Result<Option<ConfigHead>, StoreError> {
        self.read_config_head()
    }
    fn config_version(&self) -> Result<u64, StoreError> {
        self.read_config_version()
    }
    fn advance_config(
        &self,
        from: u64,
        head: &ConfigHead,
        events: Vec<AuditEvent>,
    ) -> Result<bool, StoreError> {
        self.write_config_head(from, head, events)
    }
    fn raise(&self, name: &str, value: u64) -> Result<crate::store::Raise, StoreError> {
        crate::store::shared::check_mark_name(name)?;
        let (pool, k) = (self.pool.clone(), format!("mark/{name}"));
        self.block(async move { conn::meta_raise(&pool, &k, value).await })
    }

    /// From the read cache when it holds the record ([`cache`]), else one query
    /// whose answer fills it.
    fn get(&self, id: &ProposalId) -> Result<Option<ProposalRecord>, StoreError> {
        if let Some(rec) = self.cache.get(id) {
            return Ok(Some(rec));
        }
        self.get_latest(id)
    }

    /// One query, whose answer fills the read cache.
    fn get_latest(&self, id: &ProposalId) -> Result<Option<ProposalRecord>, StoreError> {
        let ticket = self.cache.before_read();
        let body = self.block(read_body(self.pool.clone(), id.to_string()))?;
        self.read_into_cache(id, body, ticket)
    }

    fn get_async<'a>(&'a self, id: &'a ProposalId) -> Pending<'a, Option<ProposalRecord>> {
        match self.cache.get(id) {
            Some(rec) => Box::pin(std::future::ready(Ok(Some(rec)))),
            None => self.get_latest_async(id),
        }
    }

    fn get_latest_async<'a>(&'a self, id: &'a ProposalId) -> Pending<'a, Option<ProposalRecord>> {
        let ticket = self.cache.before_read();
        let body = self.awaited(read_body(self.pool.clone(), id.to_string()));
        Box::pin(async move { self.read_into_cache(id, body.await?, ticket) })
    }

    fn create(
        &self,
        rec: &ProposalRecord,
        events: Vec<AuditEvent>,
        limits: PendingLimits,
    ) -> Result<(), StoreError> {
        created(rec, self.submit(rec, events, batch::Kind::Create(limits))?)
    }

    fn update(&self, new: &ProposalRecord, events: Vec<AuditEvent>) -> Result<Cas, StoreError> {
        self.submit(new, events, batch::Kind::Update)
    }

    fn create_async<'a>(
        &'a self,
        rec: &'a ProposalRecord,
        events: Vec<AuditEvent>,
        limits: PendingLimits,
    ) -> Pending<'a, ()> {
        let answer = self.submit_async(rec, events, batch::Kind::Create(limits));
        Box::pin(async move { created(rec, answer.await?) })
    }

    fn update_async<'a>(
        &'a self,
        new: &'a ProposalRecord,
        events: Vec<AuditEvent>,
    ) -> Pending<'a, Cas> {
        Box::pin(self.submit_async(new, events, batch::Kind::Update))
    }

    fn end_expired_claim(
        &self,
        new: &ProposalRecord,
        events: Vec<AuditEvent>,
    ) -> Result<Cas, StoreError> {
        self.write_fenced(new, events, self.leadership.term(lease::SWEEP))
    }

    fn put_policy(
        &self,
        hash: &Sha256Hex,
        canonical: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let (pool, hash, body) = (self.pool.clone(), hash.to_string(), encode(canonical)?);
        self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            c.execute(
                "INSERT INTO policies (hash, body) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING",
                &[&hash, &body],
            )
            .await
            .map_err(pg_err)?;
            Ok(())
        })
    }

    fn get_policy(&self, hash: &Sha256Hex) -> Result<Option<serde_json::Value>, StoreError> {
        let (pool, hash) = (self.pool.clone(), hash.to_string());
        self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            let row = c
                .query_opt("SELECT body FROM policies WHERE hash = $1", &[&hash])
                .await
                .map_err(pg_err)?;
            row.map(|r| {
                serde_json::from_str(r.get::<_, &str>(0))
                    .map_err(|e| corrupt(&format!("policies/{hash}"), e))
            })
            .transpose()
        })
    }

    fn pending_count(&self, agent: Option<&AgentName>) -> Result<u64, StoreError> {
        let (pool, agent) = (
            self.pool.clone(),
            agent.map(|a| a.as_str().to_owned()).unwrap_or_default(),
        );
        self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            let row = c
                .query_opt("SELECT n FROM pending_counts WHERE agent = $1", &[&agent])
                .await
                .map_err(pg_err)?;
            Ok(row.map_or(0, |r| r.get::<_, i64>(0) as u64))
        })
    }

    fn list_status(&self, status: Status, limit: usize) -> Result<Vec<ProposalRecord>, StoreError> {
        self.records(
            "SELECT id, body FROM records WHERE status = $1 ORDER BY created DESC, id DESC LIMIT $2",
            vec![Param::Text(status.as_str().into()), Param::Int(sql_limit(limit))],
        )
    }

    fn list_agent(
        &self,
        agent: &AgentName,
        limit: usize,
    ) -> Result<Vec<ProposalRecord>, StoreError> {
        self.records(
            "SELECT id, body FROM records WHERE agent = $1 ORDER BY created DESC, id DESC LIMIT $2",
            vec![
                Param::Text(agent.as_str().into()),
                Param::Int(sql_limit(limit)),
            ],
        )
    }

    fn page(
        &self,
        index: &ListIndex,
        after: Option<&Cursor>,
        limit: usize,
        keep: &mut dyn FnMut(&RecordHead) -> bool,
    ) -> Result<HeadPage, StoreError> {
        let (heads, next) = walk(&mut self.entries(index, after), index, limit, keep)?;
        Ok(HeadPage { heads, next })
    }

    fn page_records(
        &self,
        index: &ListIndex,
        after: Option<&Cursor>,
        limit: usize,
        keep: &mut dyn FnMut(&RecordHead) -> bool,
    ) -> Result<RecordPage, StoreError> {
        let (records, next) = walk(&mut self.entries(index, after), index, limit, keep)?;
        Ok(RecordPage { records, next })
    }

    fn due(&self, now: Timestamp, limit: usize) -> Result<Vec<RecordHead>, StoreError> {
        let pool = self.pool.clone();
        let heads: Vec<RecordHead> = self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            let rows = c
                .query(
                    "SELECT id, body FROM records WHERE deadline <= $1 ORDER BY deadline, id LIMIT $2",
                    &[&now.unix(), &sql_limit(limit)],
                )
                .await
                .map_err(pg_err)?;
            rows.iter().map(|r| head_row(r).map(|(_, h)| h)).collect()
        })?;
        Ok(heads
            .into_iter()
            .filter(|h| h.lifecycle.is_expired_at(now))
            .collect())
    }

    fn count_status(&self, status: Status) -> Result<usize, StoreError> {
        let (pool, st) = (self.pool.clone(), status.as_str());
        self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            let row = c
                .query_one("SELECT count(*) FROM records WHERE status = $1", &[&st])
                .await
                .map_err(pg_err)?;
            Ok(row.get::<_, i64>(0) as usize)
        })
    }

    fn audit(&self) -> Result<AuditLog, StoreError> {
        let pool = self.pool.clone();
        self.block(async move {
            let mut c = pool.get().await.map_err(pool_err)?;
            // One snapshot: the entries and the head agree.
            let tx = c
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await
                .map_err(pg_err)?;
            let rows = tx
                .query("SELECT seq, entry FROM audit ORDER BY seq", &[])
                .await
                .map_err(pg_err)?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let seq: i64 = r.get(0);
                let e: AuditEntry = serde_json::from_str(r.get::<_, &str>(1))
                    .map_err(|e| corrupt(&format!("audit/{seq}"), e))?;
                out.push(e);
            }
            let row = tx
                .query_one("SELECT seq, hash FROM audit_head", &[])
                .await
                .map_err(pg_err)?;
            let (seq, hash): (i64, Option<String>) = (row.get(0), row.get(1));
            let head = match hash {
                Some(h) => Some((
                    seq as u64,
                    Sha256Hex::parse(&h).map_err(|e| corrupt("audit_head", e))?,
                )),
                None => None,
            };
            tx.commit().await.map_err(pg_err)?;
            Ok((out, head))
        })
    }

    fn flush_blocking(&self) -> Result<(), StoreError> {
        // Every write committed before it returned: nothing is waiting for disk.
        Ok(())
    }

    /// Asked by `/healthz`: a live probe, so that a load balancer takes an instance
    /// that cannot reach the database out of rotation, and back once it can.
    fn failure(&self) -> Option<String> {
        let pool = self.pool.clone();
        let probe = self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            c.simple_query("SELECT 1").await.map_err(pg_err)?;
            Ok(())
        });
        probe
            .err()
            .map(|e| format!("{e}; this instance reconnects by itself when it is back"))
    }

    fn set_outbox(&self, on: bool, cap: u64) {
        let mut o = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        o.on = on;
        o.cap = cap;
    }

    fn outbox_page(&self, limit: usize) -> Result<Vec<(u64, OutboxItem)>, StoreError> {
        let pool = self.pool.clone();
        self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            let rows = c
                .query(
                    "SELECT seq, item FROM outbox ORDER BY seq LIMIT $1",
                    &[&sql_limit(limit)],
                )
                .await
                .map_err(pg_err)?;
            outbox_entries(&rows)
        })
    }

    fn outbox_due(
        &self,
        now_ms: u64,
        per_kind: usize,
        limit: usize,
    ) -> Result<Vec<(u64, OutboxItem)>, StoreError> {
        // The selection of `outbox::due::Pick`, in SQL: rank each kind's due entries
        // by next attempt then number, keep the first `per_kind` of each, and
        // interleave the kinds by rank.
        let pool = self.pool.clone();
        let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
        self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            let rows = c
                .query(
                    "SELECT seq, item FROM (                        SELECT seq, item, due, row_number() OVER (PARTITION BY kind ORDER BY due, seq) AS rank                        FROM (SELECT seq, item, COALESCE(j->>'kind', '') AS kind,                                     COALESCE((j->>'next_try_ms')::bigint, 0) AS due                              FROM (SELECT seq, item, item::jsonb AS j FROM outbox) o) k                        WHERE due <= $1) r                      WHERE rank <= $2 ORDER BY rank, due, seq LIMIT $3",
                    &[&now, &sql_limit(per_kind), &sql_limit(limit)],
                )
                .await
                .map_err(pg_err)?;
            outbox_entries(&rows)
        })
    }

    fn outbox_put(&self, seq: u64, item: &OutboxItem) -> Result<(), StoreError> {
        let (pool, body) = (self.pool.clone(), encode(item)?);
        self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            c.execute(
                "UPDATE outbox SET item = $2 WHERE seq = $1",
                &[&(seq as i64), &body],
            )
            .await
            .map_err(pg_err)?;
            Ok(())
        })
    }

    fn outbox_remove(&self, seq: u64) -> Result<(), StoreError> {
        let pool = self.pool.clone();
        self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            c.execute("DELETE FROM outbox WHERE seq = $1", &[&(seq as i64)])
                .await
                .map_err(pg_err)?;
            Ok(())
        })
    }

    fn outbox_counts(&self) -> (u64, u64) {
        let pool = self.pool.clone();
        let held = self
            .block(async move {
                let c = pool.get().await.map_err(pool_err)?;
                let row = c
                    .query_one("SELECT count(*) FROM outbox", &[])
                    .await
                    .map_err(pg_err)?;
                Ok(row.get::<_, i64>(0) as u64)
            })
            .unwrap_or(0);
        let dropped = self
            .outbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .dropped;
        (held, dropped)
    }

    fn leases(&self) -> Option<Duration> {
        Some(self.lease)
    }

    fn renew_lease(&self, id: &ProposalId) -> Result<(), StoreError> {
        let (pool, id, ms) = (
            self.pool.clone(),
            id.to_string(),
            self.lease.as_millis() as i64,
        );
        self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            c.execute(
                &format!(
                    "UPDATE records SET lease_until = {DB_NOW_MS} + $2 WHERE id = $1 AND status = 'EXECUTING'"
                ),
                &[&id, &ms],
            )
            .await
            .map_err(pg_err)?;
            Ok(())
        })
    }

    fn expired_claims(&self, limit: usize) -> Result<Vec<ProposalId>, StoreError> {
        let pool = self.pool.clone();
        self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            let rows = c
                .query(
                    &format!(
                        "SELECT id FROM records WHERE status = 'EXECUTING' AND lease_until < {DB_NOW_MS} \
                         ORDER BY lease_until LIMIT $1"
                    ),
                    &[&sql_limit(limit)],
                )
                .await
                .map_err(pg_err)?;
            rows.iter()
                .map(|r| {
                    let id: &str = r.get(0);
                    ProposalId::parse(id).map_err(|e| corrupt(id, e))
                })
                .collect()
        })
    }

    fn try_lead(&self, task: &str) -> bool {
        self.lead(task, true)
    }

    fn still_leads(&self, task: &str) -> bool {
        self.lead(task, false)
    }

    fn remote_events(&self) -> Option<tokio::sync::broadcast::Receiver<Option<ProposalId>>> {
        Some(self.events.subscribe())
    }
}
