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

use super::*;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use std::time::Duration;
use tokio_postgres::{NoTls, Row};

pub mod lease;

/// The schema versions this build knows, in order: `migrations/NNNN_*.sql`.
pub const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("migrations/0001_init.sql")),
    (2, include_str!("migrations/0002_leadership.sql")),
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

/// Whether `spec` names a PostgreSQL database (`postgres://` or `postgresql://`).
pub fn is_postgres_url(spec: &str) -> bool {
    spec.starts_with("postgres://") || spec.starts_with("postgresql://")
}

/// `url` with any password replaced by `***`, for messages and logs: the one in the
/// user part (wherever its `@` is: a password may hold `/`) and any `password=`
/// parameter. A text that is not a URL at all is shown only by its scheme.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "(not a URL)".to_owned();
    };
    let (auth, tail) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let q: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => kv.to_owned(),
                })
                .collect();
            format!("{path}?{}", q.join("&"))
        }
        None => tail.to_owned(),
    };
    match auth {
        Some(a) => match a.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{tail}"),
            None => format!("{scheme}://{a}@{tail}"),
        },
        None => format!("{scheme}://{tail}"),
    }
}

/// How this store's connections reach PostgreSQL, chosen by the URL's `sslmode`.
#[derive(Clone)]
pub enum Tls {
    /// Plain TCP (`sslmode` absent or `disable`): only for a database on the same host
    /// or on a network that only the gate's hosts reach.
    Plain,
    /// TLS, the server's certificate verified (chain and host name) against the URL's
    /// `sslrootcert=FILE`, or else the system's roots.
    Verified(tokio_postgres_rustls::MakeRustlsConnect),
}

/// Reads a store URL: the driver's configuration and how to connect.
///
/// `sslmode=require`, `verify-ca` and `verify-full` all mean TLS with the certificate
/// and host name verified (stricter than libpq's `require`, which checks nothing: the
/// server's signing key crosses this connection). `prefer` is refused: a connection
/// that silently falls back to plain TCP is not one a security product should offer.
/// `sslrootcert` is taken out before the driver reads the URL (it does not know it).
pub fn parse_url(url: &str) -> Result<(tokio_postgres::Config, Tls), StoreError> {
    let bad = |why: String| {
        StoreError::Layout(format!(
            "the store URL {} {why}: write postgres://USER[:PASSWORD]@HOST:PORT/DATABASE\
             [?sslmode=verify-full&sslrootcert=CA.pem]",
            redact(url)
        ))
    };
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let (mut mode, mut root, mut kept) = (None, None, Vec::new());
    for kv in query.into_iter().flat_map(|q| q.split('&')) {
        match kv.split_once('=') {
            Some(("sslmode", v)) => mode = Some(v.to_owned()),
            Some(("sslrootcert", v)) => root = Some(v.to_owned()),
            _ => kept.push(kv),
        }
    }
    let verified = match mode.as_deref() {
        None | Some("disable") => false,
        Some("require" | "verify-ca" | "verify-full") => true,
        Some("prefer" | "allow") => {
            return Err(bad(format!(
                "asks for sslmode={}, which falls back to plain TCP without saying so; \
                 use sslmode=verify-full (TLS, certificate checked) or sslmode=disable",
                mode.as_deref().unwrap_or("")
            )))
        }
        Some(other) => return Err(bad(format!("has an unknown sslmode {other:?}"))),
    };
    if verified {
        kept.push("sslmode=require");
    } else if root.is_some() {
        return Err(bad("names an sslrootcert but no sslmode=verify-full".into()));
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    let cfg: tokio_postgres::Config = rest
        .parse()
        .map_err(|e| bad(format!("is not a PostgreSQL URL ({e})")))?;
    if !verified {
        return Ok((cfg, Tls::Plain));
    }
    let mut roots = rustls::RootCertStore::empty();
    match &root {
        Some(path) => {
            use rustls::pki_types::pem::PemObject;
            let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(path)
                .map_err(|e| {
                    bad(format!(
                        "names sslrootcert {path:?}, which cannot be read ({e})"
                    ))
                })?
                .collect::<Result<_, _>>()
                .map_err(|e| {
                    bad(format!(
                        "names sslrootcert {path:?}, which is not PEM ({e})"
                    ))
                })?;
            if certs.is_empty() {
                return Err(bad(format!(
                    "names sslrootcert {path:?}, which holds no certificate"
                )));
            }
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| bad(format!("names sslrootcert {path:?}: {e}")))?;
            }
        }
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                return Err(bad(
                    "asks for TLS but this system has no root certificates: give sslrootcert=CA.pem"
                        .into(),
                ));
            }
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Backend(format!("TLS set-up: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok((
        cfg,
        Tls::Verified(tokio_postgres_rustls::MakeRustlsConnect::new(config)),
    ))
}
/// Session settings every connection of this store gets (also the dedicated LISTEN
/// and leader connections), whatever the role's or database's defaults say:
/// - `synchronous_commit=on`: a commit is on disk (and on synchronous standbys) when
///   it returns. The execute claim is reported, and the effect run, only after its
///   commit: with `off`, a database crash could lose a claim whose effect already
///   ran, and the proposal would be APPROVED and executable again.
/// - `idle_in_transaction_session_timeout`, `lock_timeout`: every write locks the one
///   audit head; an instance frozen (or cut off) inside a transaction would otherwise
///   hold it, and stop every instance's writes, until TCP gave up (hours). The
///   database ends such a transaction after 5 s; a writer waits 9 s at most for the
///   lock (a clear "unreachable, retry" then, under the call's own 10 s limit).
const SESSION_OPTIONS: &str =
    "-c synchronous_commit=on -c idle_in_transaction_session_timeout=5000 -c lock_timeout=9000";

fn unreachable(why: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(why.to_string())
}

/// A driver error: lost connections and server shutdowns are "unreachable" (worth a
/// retry, and the pool reconnects); anything the database refused is a backend error.
fn pg_err(e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error() {
        // 08: connection exception; 57P: operator intervention (shutdown, restart);
        // 53: insufficient resources (too many connections).
        Some(db)
            if db.code().code().starts_with("08")
                || db.code().code().starts_with("57P")
                || db.code().code().starts_with("53") =>
        {
            unreachable(db.message())
        }
        Some(db) => StoreError::Backend(format!(
            "PostgreSQL: {} ({})",
            db.message(),
            db.code().code()
        )),
        // The driver's own text is terse ("error performing TLS handshake"): the
        // causes say what to fix (a certificate for another name, an unknown issuer).
        None => {
            let mut why = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                why.push_str(&format!(": {c}"));
                cause = c.source();
            }
            unreachable(why)
        }
    }
}

fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => pg_err(e),
        other => unreachable(other),
    }
}

fn corrupt(key: &str, why: impl ToString) -> StoreError {
    StoreError::Corrupt {
        key: key.to_owned(),
        why: why.to_string(),
    }
}

fn encode<T: Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Backend(format!("cannot encode: {e}")))
}

/// Refuses a stored body written by a build with another record schema.
fn check_schema(id: &str, schema: u32) -> Result<(), StoreError> {
    if schema != SCHEMA_VERSION {
        return Err(corrupt(
            id,
            format!("schema version {schema} is not supported by this build"),
        ));
    }
    Ok(())
}

fn decode_record(id: &str, body: &str) -> Result<ProposalRecord, StoreError> {
    let rec: ProposalRecord = serde_json::from_str(body).map_err(|e| corrupt(id, e))?;
    check_schema(id, rec.schema)?;
    Ok(rec)
}

fn deadline_of(rec: &ProposalRecord) -> Option<i64> {
    rec.lifecycle.deadline().map(|d| d.unix())
}

/// Outbox rows (`seq`, `item`) as entries; an item that does not decode is named.
fn outbox_entries(rows: &[tokio_postgres::Row]) -> Result<Vec<(u64, OutboxItem)>, StoreError> {
    rows.iter()
        .map(|r| {
            let seq: i64 = r.get(0);
            let item: OutboxItem = serde_json::from_str(r.get::<_, &str>(1))
                .map_err(|e| corrupt(&format!("outbox/{seq}"), e))?;
            Ok((seq as u64, item))
        })
        .collect()
}

/// Converts a `usize` limit to SQL's `LIMIT` (which takes a signed 64-bit number).
fn sql_limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What this instance keeps about the outbox (the switch is per instance: its
/// channels configuration; the entries are shared).
struct OutboxState {
    on: bool,
    cap: u64,
    dropped: u64,
}

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
}

impl Drop for PgStore {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which a runtime thread may not do.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// The key of the migrator's advisory lock, per schema (tests share a database).
const LOCK_KEY: &str = "hashtext(current_schema() || ':' || $1)";

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
        let mut store = Self {
            rt: Some(rt),
            pool,
            pg_config: cfg,
            tls,
            server_id: ServerId::parse("srv-unset")
                .map_err(|e| StoreError::Backend(e.to_string()))?,
            leadership: lease::Leadership::new(instance.clone(), DEFAULT_LEASE),
            instance,
            lease: DEFAULT_LEASE,
            outbox: Arc::new(Mutex::new(OutboxState {
                on: false,
                cap: crate::notify::DEFAULT_OUTBOX_CAP,
                dropped: 0,
            })),
            events: tokio::sync::broadcast::channel(4096).0,
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

    fn rt(&self) -> Result<&tokio::runtime::Runtime, StoreError> {
        self.rt
            .as_ref()
            .ok_or_else(|| StoreError::Backend("the store is closed".into()))
    }

    /// Runs `f` on the store's runtime and waits for it, at most [`CALL_TIMEOUT`].
    fn block<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.rt()?.spawn(async move {
            let r = match tokio::time::timeout(CALL_TIMEOUT, f).await {
                Ok(r) => r,
                Err(_) => Err(unreachable(format!(
                    "no answer from PostgreSQL within {} s",
                    CALL_TIMEOUT.as_secs()
                ))),
            };
            let _ = tx.send(r);
        });
        let wait = || {
            rx.recv()
                .map_err(|_| StoreError::Backend("the store's runtime stopped".into()))
        };
        // The service calls the store from its async tasks. A database round trip is
        // milliseconds, not sled's microseconds: on a worker of a multi-threaded
        // runtime, hand the worker's other tasks to another thread while we wait, or
        // two blocked workers would serialise every request of the server.
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(wait)?
            }
            _ => wait()?,
        }
    }

    /// Keeps one connection LISTENing for every instance's events, reconnecting after
    /// an outage; after a reconnect it sends `None` (events may have been missed:
    /// every waiter re-reads).
    fn listen(&self) {
        let (cfg, tls, events, me) = (
            self.pg_config.clone(),
            self.tls.clone(),
            self.events.clone(),
            self.instance.clone(),
        );
        let Ok(rt) = self.rt() else { return };
        rt.spawn(async move {
            let mut first = true;
            loop {
                match listen_once(&cfg, &tls, &events, &me, first).await {
                    Ok(()) => {}
                    Err(e) => tracing::warn!(error = %e, "PostgreSQL event listener lost its connection; reconnecting"),
                }
                first = false;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
    }

    /// Makes `url`'s schema current: applies every migration newer than the
    /// database's, each in one transaction with its `schema_migrations` row, under an
    /// advisory lock so that two migrators never race. Returns (from, to) versions.
    pub fn migrate(url: &str) -> Result<(i32, i32), StoreError> {
        let (cfg, tls) = parse_url(url)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Backend(format!("cannot start a runtime: {e}")))?;
        let display = redact(url);
        // Run on a thread of its own: the caller may be inside another runtime.
        std::thread::scope(|s| {
            s.spawn(|| rt.block_on(migrate_async(cfg, tls, display)))
                .join()
                .unwrap_or_else(|_| Err(StoreError::Backend("the migrator panicked".into())))
        })
    }
}

async fn connect(
    cfg: &tokio_postgres::Config,
    tls: &Tls,
) -> Result<tokio_postgres::Client, StoreError> {
    fn drive<F>(conn: F)
    where
        F: std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
    {
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "PostgreSQL connection ended");
            }
        });
    }
    match tls {
        Tls::Plain => {
            let (client, conn) = cfg.connect(NoTls).await.map_err(pg_err)?;
            drive(conn);
            Ok(client)
        }
        Tls::Verified(m) => {
            let (client, conn) = cfg.connect(m.clone()).await.map_err(pg_err)?;
            drive(conn);
            Ok(client)
        }
    }
}

/// Forwards the notifications of `conn` (a LISTENing connection) to `tx` until it ends.
fn pump_notifications<S, T>(
    mut conn: tokio_postgres::Connection<S, T>,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
) -> tokio::task::JoinHandle<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use futures::StreamExt;
    let stream = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(m) = stream.next().await {
            match m {
                Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                    if tx.send(n.payload().to_owned()).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "listener connection failed");
                    return;
                }
            }
        }
    })
}

async fn migrate_async(
    cfg: tokio_postgres::Config,
    tls: Tls,
    display: String,
) -> Result<(i32, i32), StoreError> {
    let mut client = connect(&cfg, &tls).await?;
    client
        .execute(
            &format!("SELECT pg_advisory_lock({LOCK_KEY})"),
            &[&"migrate"],
        )
        .await
        .map_err(pg_err)?;
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version integer PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await
        .map_err(pg_err)?;
    let from: i32 = client
        .query_one(
            "SELECT coalesce(max(version), 0) FROM schema_migrations",
            &[],
        )
        .await
        .map_err(pg_err)?
        .get(0);
    if from > SCHEMA {
        return Err(StoreError::Layout(format!(
            "the database {display} has schema version {from}, newer than this build knows ({SCHEMA}): migrate it with the newer build"
        )));
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > from) {
        let tx = client.transaction().await.map_err(pg_err)?;
        tx.batch_execute(sql).await.map_err(pg_err)?;
        tx.execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[version],
        )
        .await
        .map_err(pg_err)?;
        tx.commit().await.map_err(pg_err)?;
    }
    // The lock is the session's: it ends with the connection, here or if we die.
    Ok((from, SCHEMA))
}

/// The database's schema version; `None` when it was never migrated.
async fn schema_version(pool: Pool) -> Result<Option<i32>, StoreError> {
    let c = pool.get().await.map_err(pool_err)?;
    let exists: bool = c
        .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
        .await
        .map_err(pg_err)?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let v: Option<i32> = c
        .query_one("SELECT max(version) FROM schema_migrations", &[])
        .await
        .map_err(pg_err)?
        .get(0);
    Ok(v)
}

/// The deployment's server id: the first instance makes it, every one reads it back.
async fn server_id_of(pool: Pool) -> Result<ServerId, StoreError> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|e| StoreError::Backend(format!("no randomness: {e}")))?;
    let fresh = format!("srv-{}", hex::encode(b));
    let v = meta_insert_get(&pool, "server_id", &fresh).await?;
    ServerId::parse(&v).map_err(|e| corrupt("meta/server_id", e))
}

/// Inserts `k = v` unless `k` is set, and returns what is set (the first writer wins).
async fn meta_insert_get(pool: &Pool, k: &str, v: &str) -> Result<String, StoreError> {
    let c = pool.get().await.map_err(pool_err)?;
    c.execute(
        "INSERT INTO meta (k, v) VALUES ($1, $2) ON CONFLICT (k) DO NOTHING",
        &[&k, &v],
    )
    .await
    .map_err(pg_err)?;
    let row = c
        .query_one("SELECT v FROM meta WHERE k = $1", &[&k])
        .await
        .map_err(pg_err)?;
    Ok(row.get(0))
}

async fn listen_once(
    cfg: &tokio_postgres::Config,
    tls: &Tls,
    events: &tokio::sync::broadcast::Sender<Option<ProposalId>>,
    me: &str,
    first: bool,
) -> Result<(), StoreError> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (client, pump) = match tls {
        Tls::Plain => {
            let (client, conn) = cfg.connect(NoTls).await.map_err(pg_err)?;
            (client, pump_notifications(conn, tx))
        }
        Tls::Verified(m) => {
            let (client, conn) = cfg.connect(m.clone()).await.map_err(pg_err)?;
            (client, pump_notifications(conn, tx))
        }
    };
    client
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .await
        .map_err(pg_err)?;
    if !first {
        // Whatever happened while we were away is unknown here: wake every waiter.
        let _ = events.send(None);
    }
    while let Some(payload) = rx.recv().await {
        let Some((from, id)) = payload.split_once(':') else {
            continue;
        };
        if from == me {
            continue;
        }
        if let Ok(id) = ProposalId::parse(id) {
            let _ = events.send(Some(id));
        }
    }
    pump.abort();
    drop(client);
    Err(unreachable("the listening connection closed"))
}

type Tx<'a> = deadpool_postgres::Transaction<'a>;
type Sql<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);

/// Runs a statement prepared once per connection (a plain `&str` query would parse
/// it again on every call: one more round trip, inside the serial write section).
async fn exec(tx: &Tx<'_>, sql: &str, params: &[Sql<'_>]) -> Result<u64, StoreError> {
    let st = tx.prepare_cached(sql).await.map_err(pg_err)?;
    tx.execute(&st, params).await.map_err(pg_err)
}

async fn query_opt(tx: &Tx<'_>, sql: &str, params: &[Sql<'_>]) -> Result<Option<Row>, StoreError> {
    let st = tx.prepare_cached(sql).await.map_err(pg_err)?;
    tx.query_opt(&st, params).await.map_err(pg_err)
}

async fn query_one(tx: &Tx<'_>, sql: &str, params: &[Sql<'_>]) -> Result<Row, StoreError> {
    let st = tx.prepare_cached(sql).await.map_err(pg_err)?;
    tx.query_one(&st, params).await.map_err(pg_err)
}

/// Moves `agent`'s and the total PENDING counters by `delta` (never below zero);
/// returns their new values (agent's, total).
async fn move_pending(tx: &Tx<'_>, agent: &str, delta: i64) -> Result<(u64, u64), StoreError> {
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

/// Locks the audit head for this transaction; returns (seq, hash).
async fn lock_head(tx: &Tx<'_>) -> Result<(u64, Sha256Hex), StoreError> {
    let row = query_one(tx, "SELECT seq, hash FROM audit_head FOR UPDATE", &[]).await?;
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
async fn finish_write(
    tx: &Tx<'_>,
    rec: &ProposalRecord,
    events: Vec<AuditEvent>,
    head: (u64, Sha256Hex),
    outbox: (bool, u64),
    me: &str,
) -> Result<u64, StoreError> {
    let mut dropped = 0u64;
    if outbox.0 {
        let items = crate::notify::items_for(rec, &events);
        if !items.is_empty() {
            let held: i64 = query_one(tx, "SELECT count(*) FROM outbox", &[])
                .await?
                .get(0);
            let room = outbox.1.saturating_sub(held as u64) as usize;
            dropped = items.len().saturating_sub(room) as u64;
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
    }
    let (mut seq, mut prev) = head;
    let (mut seqs, mut entries) = (Vec::new(), Vec::new());
    for ev in events {
        seq += 1;
        let entry = AuditEntry::seal(seq, prev, ev);
        prev = entry.hash;
        seqs.push(seq as i64);
        entries.push(encode(&entry)?);
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
const DB_NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

impl PgStore {
    fn outbox_switch(&self) -> (bool, u64) {
        let o = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        (o.on, o.cap)
    }

    fn count_dropped(&self, id: &ProposalId, dropped: u64) {
        if dropped > 0 {
            let mut o = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
            o.dropped += dropped;
            tracing::warn!(%id, dropped, cap = o.cap, "notification outbox full: notifications for this change were dropped (the change itself committed)");
        }
    }

    fn records(
        &self,
        sql: &'static str,
        params: Vec<Param>,
    ) -> Result<Vec<ProposalRecord>, StoreError> {
        let pool = self.pool.clone();
        self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                params.iter().map(|p| p.as_sql()).collect();
            let rows = c.query(sql, &refs).await.map_err(pg_err)?;
            rows.iter()
                .map(|r| decode_record(r.get::<_, &str>(0), r.get::<_, &str>(1)))
                .collect()
        })
    }
}

/// An owned query parameter (the store's futures must own what they send).
enum Param {
    Text(String),
    Int(i64),
    Texts(Vec<String>),
}

impl Param {
    fn as_sql(&self) -> &(dyn tokio_postgres::types::ToSql + Sync) {
        match self {
            Param::Text(s) => s,
            Param::Int(i) => i,
            Param::Texts(v) => v,
        }
    }
}

fn head_row(r: &Row) -> Result<(Cursor, RecordHead), StoreError> {
    let id: &str = r.get(0);
    let head: RecordHead = serde_json::from_str(r.get(1)).map_err(|e| corrupt(id, e))?;
    check_schema(id, head.schema)?;
    Ok((
        Cursor::of(head.preview.created_at, &head.preview.proposal_id),
        head,
    ))
}

impl PgStore {
    /// The walk behind [`Store::page`] and [`Store::page_records`]: each row's head is
    /// what `keep` judges, and a kept row gives a `T`.
    fn walk<T: Listed>(
        &self,
        index: &ListIndex,
        after: Option<&Cursor>,
        limit: usize,
        keep: &mut dyn FnMut(&RecordHead) -> bool,
    ) -> Result<(Vec<T>, Option<Cursor>), StoreError> {
        let filter = match index {
            ListIndex::Agent(a) => ("agent = $1", Param::Text(a.as_str().into())),
            ListIndex::Statuses(st) => (
                "status = ANY($1)",
                Param::Texts(st.iter().map(|s| s.as_str().to_owned()).collect()),
            ),
        };
        let mut pos = after.cloned();
        let mut out = Vec::new();
        let mut scanned = 0usize;
        loop {
            // One chunk of the index after `pos`, newest first; one row more than
            // used tells whether anything remains.
            let (cond, p0) = (
                filter.0,
                match &filter.1 {
                    Param::Text(s) => Param::Text(s.clone()),
                    Param::Texts(v) => Param::Texts(v.clone()),
                    Param::Int(i) => Param::Int(*i),
                },
            );
            let pool = self.pool.clone();
            let p = pos.clone();
            let rows: Vec<Row> = self.block(async move {
                let c = pool.get().await.map_err(pool_err)?;
                match p {
                    Some(p) => {
                        let sql = format!(
                            "SELECT id, body FROM records WHERE {cond} AND (created, id) < ($2, $3) \
                             ORDER BY created DESC, id DESC LIMIT $4"
                        );
                        c.query(
                            &sql,
                            &[p0.as_sql(), &p.created.unix(), &p.id.to_string(), &(PAGE_CHUNK + 1)],
                        )
                        .await
                    }
                    None => {
                        let sql = format!(
                            "SELECT id, body FROM records WHERE {cond} ORDER BY created DESC, id DESC LIMIT $2"
                        );
                        c.query(&sql, &[p0.as_sql(), &(PAGE_CHUNK + 1)]).await
                    }
                }
                .map_err(pg_err)
            })?;
            let more_after_chunk = rows.len() as i64 > PAGE_CHUNK;
            let n = rows.len().min(PAGE_CHUNK as usize);
            for (i, row) in rows.iter().take(n).enumerate() {
                let (here, head) = head_row(row)?;
                scanned += 1;
                if keep(&head) {
                    let body: &str = row.get(1);
                    let item = T::kept(head, body.as_bytes());
                    out.push(item.map_err(|e| corrupt(&here.id.to_string(), e))?);
                }
                if out.len() >= limit || scanned >= MAX_PAGE_SCAN {
                    let more = i + 1 < n || more_after_chunk;
                    return Ok((out, more.then_some(here)));
                }
                pos = Some(here);
            }
            if !more_after_chunk {
                return Ok((out, None));
            }
        }
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

    fn get(&self, id: &ProposalId) -> Result<Option<ProposalRecord>, StoreError> {
        let mut v = self.records(
            "SELECT id, body FROM records WHERE id = $1",
            vec![Param::Text(id.to_string())],
        )?;
        Ok(v.pop())
    }

    fn create(
        &self,
        rec: &ProposalRecord,
        events: Vec<AuditEvent>,
        limits: PendingLimits,
    ) -> Result<(), StoreError> {
        let (pool, rec2, outbox, me) = (
            self.pool.clone(),
            rec.clone(),
            self.outbox_switch(),
            self.instance.clone(),
        );
        let body = encode(rec)?;
        let dropped = self.block(async move {
            let rec = rec2;
            let mut c = pool.get().await.map_err(pool_err)?;
            let tx = c.transaction().await.map_err(pg_err)?;
            let id = rec.id().to_string();
            let agent = rec.preview.requested_by.as_str().to_owned();
            // Sent together (pipelined), executed in this order: the head lock first.
            let by_id: [Sql; 1] = [&id];
            let (head, exists) = futures::try_join!(
                lock_head(&tx),
                query_opt(&tx, "SELECT 1 FROM records WHERE id = $1", &by_id),
            )?;
            if exists.is_some() {
                return Err(StoreError::Exists(id));
            }
            if rec.status() == Status::Pending {
                // Counted up first; a refusal rolls the transaction (and them) back.
                let (mine, total) = move_pending(&tx, &agent, 1).await?;
                limits.admit(&agent, mine, total)?;
            }
            let (status, created, deadline, revision) = (
                rec.status().as_str(),
                rec.preview.created_at.unix(),
                deadline_of(&rec),
                rec.revision as i64,
            );
            let row: [Sql; 7] = [&id, &agent, &status, &created, &deadline, &revision, &body];
            let (_, dropped) = futures::try_join!(
                exec(
                    &tx,
                    "INSERT INTO records (id, agent, status, created, deadline, revision, body) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                    &row,
                ),
                finish_write(&tx, &rec, events, head, outbox, &me),
            )?;
            tx.commit().await.map_err(|e| commit_unknown(pg_err(e)))?;
            Ok(dropped)
        })?;
        self.count_dropped(rec.id(), dropped);
        Ok(())
    }

    fn update(&self, new: &ProposalRecord, events: Vec<AuditEvent>) -> Result<Cas, StoreError> {
        self.write_record(new, events, None)
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
        let (heads, next) = self.walk(index, after, limit, keep)?;
        Ok(HeadPage { heads, next })
    }

    fn page_records(
        &self,
        index: &ListIndex,
        after: Option<&Cursor>,
        limit: usize,
        keep: &mut dyn FnMut(&RecordHead) -> bool,
    ) -> Result<RecordPage, StoreError> {
        let (records, next) = self.walk(index, after, limit, keep)?;
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
        // The selection of `notify::due::pick`, in SQL: rank each kind's due entries
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

/// A commit that failed without an answer may or may not have happened.
fn commit_unknown(e: StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(why) => StoreError::Unavailable(format!(
            "{why} (while committing: whether the change was stored is not known)"
        )),
        other => other,
    }
}

/// Test support: a fresh schema per test on the database of
/// `APPROVAL_TEST_DATABASE_URL`, dropped at the end.
#[cfg(test)]
pub(crate) mod testdb {
    use super::*;

    /// The line printed when the PostgreSQL tests are skipped.
    pub const NOT_RUN: &str =
        "PostgreSQL tests not run: set APPROVAL_TEST_DATABASE_URL=postgres://root@127.0.0.1:5432/test";

    /// Prints [`NOT_RUN`] once per test binary, past the test harness's capture
    /// (which would hide a `println!` of a passing test).
    pub fn say_not_run() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "{NOT_RUN}");
        });
    }

    /// A schema of its own on the test database; dropped on drop.
    pub struct Fresh {
        pub url: String,
        base: String,
        schema: String,
    }

    impl Fresh {
        /// `None` (after printing [`NOT_RUN`]) when no test database is configured;
        /// panics when one is configured but cannot be reached.
        pub fn new() -> Option<Self> {
            let Ok(base) = std::env::var("APPROVAL_TEST_DATABASE_URL") else {
                say_not_run();
                return None;
            };
            let mut b = [0u8; 6];
            getrandom::fill(&mut b).unwrap();
            let schema = format!("t_{}", hex::encode(b));
            psql(&base, &format!("CREATE SCHEMA {schema}"));
            let sep = if base.contains('?') { '&' } else { '?' };
            let url = format!("{base}{sep}options=-csearch_path%3D{schema}");
            Some(Self { url, base, schema })
        }
    }

    impl Drop for Fresh {
        fn drop(&mut self) {
            psql(&self.base, &format!("DROP SCHEMA {} CASCADE", self.schema));
        }
    }

    /// Runs one statement on its own thread and runtime.
    pub fn psql(url: &str, sql: &str) {
        let (url, sql) = (url.to_owned(), sql.to_owned());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let (cfg, tls) = parse_url(&url).expect("APPROVAL_TEST_DATABASE_URL parses");
                let c = connect(&cfg, &tls).await.unwrap_or_else(|e| {
                    panic!("APPROVAL_TEST_DATABASE_URL={url} is set but cannot be reached: {e}")
                });
                c.batch_execute(&sql).await.unwrap();
            })
        })
        .join()
        .unwrap();
    }
}

impl PgStore {
    /// [`Store::end_expired_claim`] made under sweep leadership term `term` (the one
    /// this instance believes it holds): applied only if that term is current inside
    /// the transaction ([`lease::fenced`]).
    fn write_fenced(
        &self,
        new: &ProposalRecord,
        events: Vec<AuditEvent>,
        term: Option<i64>,
    ) -> Result<Cas, StoreError> {
        self.write_record(new, events, Some(term))
    }

    /// [`Store::update`], and with `expired_claim_as` [`Store::end_expired_claim`]:
    /// the compare-and-swap on the revision (and then on the lease having run out,
    /// read on the database clock under the row's lock, and on the sweep leader's
    /// term being current) in one transaction.
    fn write_record(
        &self,
        new: &ProposalRecord,
        events: Vec<AuditEvent>,
        expired_claim_as: Option<Option<i64>>,
    ) -> Result<Cas, StoreError> {
        let only_expired_lease = expired_claim_as.is_some();
        let (pool, rec, outbox, me) = (
            self.pool.clone(),
            new.clone(),
            self.outbox_switch(),
            self.instance.clone(),
        );
        let lease_ms = self.lease.as_millis() as i64;
        let body = encode(new)?;
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
            let fence = async {
                match expired_claim_as {
                    None => Ok(true),
                    Some(term) => lease::fenced(&tx, lease::SWEEP, &me, term).await,
                }
            };
            let (head, row, leads) = futures::try_join!(
                lock_head(&tx),
                query_opt(&tx, &select_row, &by_id),
                fence
            )?;
            let Some(row) = row else {
                return Ok((Cas::Missing, 0));
            };
            let revision: i64 = row.get(0);
            let lease_expired: bool = row.get(4);
            if !leads {
                tracing::warn!(%id, "not ending an expired claim: this instance's sweep leadership term is over (another instance leads)");
            }
            if revision as u64 + 1 != rec.revision
                || (only_expired_lease && !lease_expired)
                || !leads
            {
                let cur = decode_record(&id, row.get(1))?;
                return Ok((Cas::Conflict(Box::new(cur)), 0));
            }
            let executing = rec.status() == Status::Executing;
            let (was, agent): (&str, &str) = (row.get(2), row.get(3));
            let delta = i64::from(rec.status() == Status::Pending)
                - i64::from(was == Status::Pending.as_str());
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
        self.count_dropped(new.id(), dropped);
        Ok(cas)
    }
}

#[cfg(test)]
mod tests {
    use super::testdb::Fresh;
    use super::*;

    #[test]
    fn postgres_store_passes_the_contract() {
        let Some(db) = Fresh::new() else { return };
        PgStore::migrate(&db.url).unwrap();
        let store = PgStore::open(&db.url).unwrap();
        contract::run(&store);
    }

    /// The sweep reads expired claims, then ends each one: a renewal landing in
    /// between (its instance is alive, only slow) must win, so a claim whose
    /// instance still runs it is never ended under it.
    #[test]
    fn a_lease_renewed_after_the_sweep_read_it_is_not_ended() {
        let Some(db) = Fresh::new() else { return };
        PgStore::migrate(&db.url).unwrap();
        let store = PgStore::open(&db.url)
            .unwrap()
            .with_lease(Duration::from_millis(300));
        let t0 = Timestamp::from_unix(1_800_000_000);
        let mut rec = contract::record("p-lease", "agent1", 1_800_000_000);
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
        let next = step(&rec, approved);
        assert!(matches!(store.update(&next, vec![]).unwrap(), Cas::Applied));
        rec = next;
        let next = step(&rec, rec.lifecycle.claim(t0).unwrap());
        assert!(matches!(store.update(&next, vec![]).unwrap(), Cas::Applied));
        rec = next;

        std::thread::sleep(Duration::from_millis(500));
        // Ending an expired claim is the sweep leader's act.
        assert!(store.try_lead("sweep"));
        assert_eq!(store.expired_claims(10).unwrap(), vec![rec.id().clone()]);
        // The running instance renews now, after the sweep's read.
        store.renew_lease(rec.id()).unwrap();
        let ended = step(&rec, rec.lifecycle.crash_recovered().unwrap());
        assert!(
            matches!(
                store.end_expired_claim(&ended, vec![]).unwrap(),
                Cas::Conflict(_)
            ),
            "a renewed claim was ended"
        );
        assert_eq!(
            store.get(rec.id()).unwrap().unwrap().status(),
            Status::Executing
        );
        // Its instance dies: no more renewals, and the next sweep ends it.
        std::thread::sleep(Duration::from_millis(500));
        assert!(store.try_lead("sweep"));
        assert!(matches!(
            store.end_expired_claim(&ended, vec![]).unwrap(),
            Cas::Applied
        ));
        assert_eq!(
            store.get(rec.id()).unwrap().unwrap().status(),
            Status::OutcomeUnknown
        );
    }

    /// `sslmode` is read strictly: no silent fall-back to plain TCP, no CA file
    /// without TLS, and a CA file that cannot be used is named.
    #[test]
    fn store_urls_choose_tls_strictly() {
        let plain = |u: &str| matches!(parse_url(u), Ok((_, Tls::Plain)));
        assert!(plain("postgres://u@h/db"));
        assert!(plain(
            "postgres://u@h/db?sslmode=disable&application_name=x"
        ));
        for (url, says) in [
            (
                "postgres://u@h/db?sslmode=prefer",
                "falls back to plain TCP",
            ),
            ("postgres://u@h/db?sslmode=allow", "falls back to plain TCP"),
            ("postgres://u@h/db?sslmode=bogus", "unknown sslmode"),
            (
                "postgres://u@h/db?sslrootcert=/x.pem",
                "no sslmode=verify-full",
            ),
            (
                "postgres://u:pw@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
                "/nonexistent/ca.pem",
            ),
        ] {
            let err = parse_url(url)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(says), "{url}: {err}");
            assert!(!err.contains("pw@"), "the password leaked: {err}");
        }
    }

    /// TLS to the machine's PostgreSQL (Debian's default cluster: `ssl = on` with the
    /// snakeoil certificate, issued for `localhost`): with that certificate as
    /// `sslrootcert` the store connects and the session is encrypted; the same
    /// certificate under another host name, or without the CA file, is refused.
    #[test]
    fn tls_to_postgres_verifies_the_certificate_and_its_name() {
        let Some(db) = Fresh::new() else { return };
        const SNAKEOIL: &str = "/etc/ssl/certs/ssl-cert-snakeoil.pem";
        let ssl_on = run_query(&db.url, "SHOW ssl").as_deref() == Ok("on");
        if !ssl_on || !std::path::Path::new(SNAKEOIL).exists() {
            println!("TLS to PostgreSQL not tested: this database has ssl off or no {SNAKEOIL}");
            return;
        }
        PgStore::migrate(&db.url).unwrap();
        let host = "127.0.0.1";
        assert!(
            db.url.contains(host),
            "the test URL names {host}: {}",
            db.url
        );
        let by_name = db.url.replacen(host, "localhost", 1);
        let tls = format!("{by_name}&sslmode=verify-full&sslrootcert={SNAKEOIL}");
        let store = PgStore::open(&tls).unwrap();
        assert!(store.pending_count(None).is_ok());
        assert_eq!(
            run_query(
                &tls,
                "SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
            )
            .as_deref(),
            Ok("true"),
            "the session is not encrypted"
        );
        // The right CA under the wrong name; and another CA (any other one the system
        // has) for the right name.
        let mut refused = vec![format!(
            "{}&sslmode=verify-full&sslrootcert={SNAKEOIL}",
            db.url
        )];
        let other_ca = std::fs::read_dir("/etc/ssl/certs")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "pem"))
            .find(|p| !p.ends_with("ssl-cert-snakeoil.pem"));
        if let Some(ca) = other_ca {
            refused.push(format!(
                "{by_name}&sslmode=verify-full&sslrootcert={}",
                ca.display()
            ));
        }
        for url in refused {
            let err = run_query(&url, "SELECT 'connected'")
                .err()
                .unwrap_or_default();
            assert!(
                err.to_lowercase().contains("certificate"),
                "{url}: expected a certificate error, got {err:?}"
            );
        }
    }

    /// One query's first column as text, on a connection made as the store makes them.
    fn run_query(url: &str, sql: &str) -> Result<String, String> {
        let (url, sql) = (url.to_owned(), sql.to_owned());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let (cfg, tls) = parse_url(&url).map_err(|e| e.to_string())?;
                let c = connect(&cfg, &tls).await.map_err(|e| e.to_string())?;
                let row = c.query_one(&sql, &[]).await.map_err(|e| e.to_string())?;
                row.try_get::<_, String>(0).map_err(|e| e.to_string())
            })
        })
        .join()
        .unwrap()
    }

    #[test]
    fn postgres_store_passes_the_outbox_contract() {
        let Some(db) = Fresh::new() else { return };
        PgStore::migrate(&db.url).unwrap();
        contract::outbox(&PgStore::open(&db.url).unwrap());
    }

    #[test]
    fn postgres_outbox_due_entries_of_a_flooded_kind_do_not_hide_another_kinds() {
        let Some(db) = Fresh::new() else { return };
        PgStore::migrate(&db.url).unwrap();
        contract::outbox_due_is_fair(&PgStore::open(&db.url).unwrap());
    }

    #[test]
    fn serve_refuses_an_unmigrated_or_newer_schema_naming_the_command() {
        let Some(db) = Fresh::new() else { return };
        let err = PgStore::open(&db.url).err().expect("refused");
        assert!(
            err.to_string().contains("approval-server migrate --store"),
            "{err}"
        );
        assert_eq!(PgStore::migrate(&db.url).unwrap(), (0, SCHEMA));
        // Twice is harmless.
        assert_eq!(PgStore::migrate(&db.url).unwrap(), (SCHEMA, SCHEMA));
        PgStore::open(&db.url).unwrap();
        testdb::psql(
            &db.url,
            &format!(
                "INSERT INTO schema_migrations (version) VALUES ({})",
                SCHEMA + 1
            ),
        );
        let err = PgStore::open(&db.url).err().expect("refused");
        assert!(err.to_string().contains("newer than this build"), "{err}");
    }

    #[test]
    fn two_instances_share_the_server_id_and_key() {
        let Some(db) = Fresh::new() else { return };
        PgStore::migrate(&db.url).unwrap();
        let a = PgStore::open(&db.url).unwrap();
        let b = PgStore::open(&db.url).unwrap();
        assert_eq!(a.server_id(), b.server_id());
        let k1 = PublicKey::from_signing_key(&ed25519_dalek::SigningKey::from_bytes(&[1; 32]));
        let k2 = PublicKey::from_signing_key(&ed25519_dalek::SigningKey::from_bytes(&[2; 32]));
        assert_eq!(a.bind_server_key(&k1).unwrap(), k1);
        assert_eq!(b.bind_server_key(&k2).unwrap(), k1);
        assert_eq!(
            a.shared_server_secret("one").unwrap(),
            b.shared_server_secret("two").unwrap()
        );
    }

    /// Concurrent writers on two instances: one audit chain, no gap, no fork; of
    /// concurrent claims on one revision exactly one wins.
    #[test]
    fn concurrent_writers_on_two_instances_make_one_chain_and_one_winner() {
        let Some(db) = Fresh::new() else { return };
        PgStore::migrate(&db.url).unwrap();
        let stores = [
            Arc::new(PgStore::open(&db.url).unwrap()),
            Arc::new(PgStore::open(&db.url).unwrap()),
        ];
        let ev = |rec: &ProposalRecord| contract::ev(crate::audit::AuditKind::Proposed, rec);
        let target = contract::record("p-target", "agent1", 1_800_000_000);
        stores[0]
            .create(&target, ev(&target), PendingLimits::default())
            .unwrap();
        let mut threads = Vec::new();
        for t in 0..8 {
            let s = stores[t % 2].clone();
            let target = target.clone();
            threads.push(std::thread::spawn(move || {
                for i in 0..10 {
                    let r = contract::record(&format!("p-{t}-{i}"), "agent1", 1_800_000_000 + i);
                    s.create(&r, ev(&r), PendingLimits::default()).unwrap();
                }
                let mut next = target.clone();
                next.revision = 1;
                matches!(s.update(&next, ev(&next)).unwrap(), Cas::Applied)
            }));
        }
        let wins = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|w| *w)
            .count();
        assert_eq!(wins, 1);
        let (entries, head) = stores[1].audit().unwrap();
        assert_eq!(crate::audit::verify_chain(entries, head), Ok(1 + 80 + 1));
    }

    #[test]
    fn an_unreachable_database_is_reported_as_unavailable() {
        if std::env::var("APPROVAL_TEST_DATABASE_URL").is_err() {
            testdb::say_not_run();
            return;
        }
        // A port nothing listens on.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let err = PgStore::open(&format!("postgres://root@127.0.0.1:{port}/test"))
            .err()
            .expect("refused");
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        // A password holding `/` (base64) or `@`, and one given as a parameter.
        assert_eq!(
            redact("postgres://u:ab/c+d=@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("postgres://u:p@ss@h/db"), "postgres://u:***@h/db");
        assert_eq!(
            redact("postgres://h/db?user=u&password=s3cret&sslmode=disable"),
            "postgres://h/db?user=u&password=***&sslmode=disable"
        );
        assert_eq!(redact("u:secret"), "(not a URL)");
    }
}
