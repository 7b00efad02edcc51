//! Connections: the error mapping (unreachable versus refused), the store's own
//! runtime and the blocking call into it, migrations, and the LISTEN connection
//! that carries other instances' events.

use super::*;

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
pub(super) const SESSION_OPTIONS: &str =
    "-c synchronous_commit=on -c idle_in_transaction_session_timeout=5000 -c lock_timeout=9000";

pub(super) fn unreachable(why: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(why.to_string())
}

/// A driver error: lost connections and server shutdowns are "unreachable" (worth a
/// retry, and the pool reconnects); anything the database refused is a backend error.
pub(super) fn pg_err(e: tokio_postgres::Error) -> StoreError {
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

pub(super) fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => pg_err(e),
        other => unreachable(other),
    }
}

/// Runs `wait` (which blocks until the store's runtime answers) on this thread.
///
/// The service calls the store from its async tasks. A database round trip is
/// milliseconds, not sled's microseconds: on a worker of a multi-threaded runtime,
/// hand the worker's other tasks to another thread while we wait, or two blocked
/// workers would serialise every request of the server.
pub(super) fn wait_here<T>(wait: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}

/// `f`, or unreachable after [`CALL_TIMEOUT`].
async fn timed<T>(
    f: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(unreachable(format!(
            "no answer from PostgreSQL within {} s",
            CALL_TIMEOUT.as_secs()
        ))),
    }
}

fn runtime_stopped() -> StoreError {
    StoreError::Backend("the store's runtime stopped".into())
}

/// The key of the migrator's advisory lock, per schema (tests share a database).
pub(super) const LOCK_KEY: &str = "hashtext(current_schema() || ':' || $1)";

impl PgStore {
    pub(super) fn rt(&self) -> Result<&tokio::runtime::Runtime, StoreError> {
        self.rt
            .as_ref()
            .ok_or_else(|| StoreError::Backend("the store is closed".into()))
    }

    /// Runs `f` on the store's runtime and waits for it, at most [`CALL_TIMEOUT`].
    pub(super) fn block<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.rt()?.spawn(async move {
            let _ = tx.send(timed(f).await);
        });
        wait_here(|| rx.recv().map_err(|_| runtime_stopped()))?
    }

    /// [`PgStore::block`] awaited: `f` runs on the store's runtime (where its
    /// connections are driven) and the caller's thread serves other tasks meanwhile.
    /// `f` is started at once, whether or not the answer is awaited.
    pub(super) fn awaited<T, F>(
        &self,
        f: F,
    ) -> impl std::future::Future<Output = Result<T, StoreError>> + Send + 'static
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let started = self.rt().map(|rt| {
            rt.spawn(async move {
                let _ = tx.send(timed(f).await);
            });
        });
        async move {
            started?;
            rx.await.map_err(|_| runtime_stopped())?
        }
    }

    /// Keeps one connection LISTENing for every instance's events, reconnecting after
    /// an outage; after a reconnect it sends `None` (events may have been missed:
    /// every waiter re-reads).
    pub(super) fn listen(&self) {
        let (cfg, tls, events, me, cache) = (
            self.pg_config.clone(),
            self.tls.clone(),
            self.events.clone(),
            self.instance.clone(),
            self.cache.clone(),
        );
        let Ok(rt) = self.rt() else { return };
        rt.spawn(async move {
            let mut first = true;
            loop {
                match listen_once(&cfg, &tls, &events, &me, &cache, first).await {
                    Ok(()) => {}
                    Err(e) => tracing::warn!(error = %e, "PostgreSQL event listener lost its connection; reconnecting"),
                }
                // Notifications may be missed from here on: the read cache is off
                // (and empty) until the listener listens again.
                cache.set_live(false);
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

pub(super) async fn connect(
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
pub(super) fn pump_notifications<S, T>(
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

pub(super) async fn migrate_async(
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
pub(super) async fn schema_version(pool: Pool) -> Result<Option<i32>, StoreError> {
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
pub(super) async fn server_id_of(pool: Pool) -> Result<ServerId, StoreError> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|e| StoreError::Backend(format!("no randomness: {e}")))?;
    let fresh = format!("srv-{}", hex::encode(b));
    let v = meta_insert_get(&pool, "server_id", &fresh).await?;
    ServerId::parse(&v).map_err(|e| corrupt("meta/server_id", e))
}

/// Inserts `k = v` unless `k` is set, and returns what is set (the first writer wins).
pub(super) async fn meta_insert_get(pool: &Pool, k: &str, v: &str) -> Result<String, StoreError> {
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

/// [`Store::raise`](crate::store::Store::raise) in one statement: the row is
/// inserted, or updated only while it holds less (compared as numbers), so
/// concurrent raises from any instance serialise on the row and never go back.
pub(super) async fn meta_raise(
    pool: &Pool,
    k: &str,
    value: u64,
) -> Result<crate::store::Raise, StoreError> {
    let c = pool.get().await.map_err(pool_err)?;
    let v = value.to_string();
    let raised = c
        .query_opt(
            "INSERT INTO meta (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v \
             WHERE meta.v::numeric < EXCLUDED.v::numeric RETURNING v",
            &[&k, &v],
        )
        .await
        .map_err(pg_err)?;
    if raised.is_some() {
        return Ok(crate::store::Raise::Raised);
    }
    let row = c
        .query_one("SELECT v FROM meta WHERE k = $1", &[&k])
        .await
        .map_err(pg_err)?;
    let held: String = row.get(0);
    held.parse()
        .map(crate::store::Raise::Kept)
        .map_err(|_| crate::store::shared::corrupt(k, "a mark is not a number"))
}

/// How often the listener checks its connection with a round trip, and how long it
/// waits for the answer: a connection cut without a reset (a partition) would
/// otherwise leave the read cache on while notifications no longer arrive, until
/// TCP gave up. So a cached read trails another instance's write by at most about
/// this long plus the ping's time-out, even then.
pub(super) const LISTEN_PING: Duration = Duration::from_millis(500);
pub(super) const LISTEN_PING_TIMEOUT: Duration = Duration::from_millis(1500);

pub(super) async fn listen_once(
    cfg: &tokio_postgres::Config,
    tls: &Tls,
    events: &tokio::sync::broadcast::Sender<Option<ProposalId>>,
    me: &str,
    cache: &cache::RecordCache,
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
    // From here every other instance's write is heard of: the cache may serve.
    cache.set_live(true);
    if !first {
        // Whatever happened while we were away is unknown here: wake every waiter.
        let _ = events.send(None);
    }
    let mut ping = tokio::time::interval(LISTEN_PING);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            payload = rx.recv() => {
                let Some(payload) = payload else { break };
                let Some((from, id)) = payload.split_once(':') else {
                    continue;
                };
                if from == me {
                    continue;
                }
                if let Ok(id) = ProposalId::parse(id) {
                    cache.changed_elsewhere(&id);
                    let _ = events.send(Some(id));
                }
            }
            _ = ping.tick() => {
                let answered = tokio::time::timeout(LISTEN_PING_TIMEOUT, client.simple_query("")).await;
                if !matches!(answered, Ok(Ok(_))) {
                    tracing::warn!("the PostgreSQL event listener's connection did not answer its ping; reconnecting");
                    break;
                }
            }
        }
    }
    cache.set_live(false);
    pump.abort();
    drop(client);
    Err(unreachable("the listening connection closed"))
}
