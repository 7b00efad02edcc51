//! Start-up, serving and shutdown.
//!
//! Order matters: open the store, load the configuration (refusing to start on a
//! broken one), turn every EXECUTING record into OUTCOME_UNKNOWN, void proposals
//! whose policy changed while we were down, and only then accept requests.

mod background;
use crate::clock::SystemClock;
use crate::config::ConfigSource;
use crate::executor::ExecContext;
use crate::failstop::FailStop;
use crate::http::{self, McpOptions};
use crate::identity::ServerIdentity;
use crate::service::Service;
use crate::store::{PgStore, SledStore, Store};
use anyhow::Context;
use background::{spawn_background, tokio_util_shutdown};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Text to print once the server listens, made from its `/mcp` and approver API URLs:
/// the command that starts the server supplies it, so the wiring knows no command.
#[derive(Clone)]
pub struct Banner(pub Arc<BannerText>);

/// What a [`Banner`] calls: `/mcp` URL and approver API URL in, lines out.
pub type BannerText = dyn Fn(&str, &str) -> String + Send + Sync;

impl std::fmt::Debug for Banner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Banner")
    }
}

/// Everything `serve` needs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Store folder.
    pub data: PathBuf,
    /// Where the rules come from.
    pub source: ConfigSource,
    /// `/mcp` (and the approver API, unless separate).
    pub listen: SocketAddr,
    /// A separate address for the approver API.
    pub approver_listen: Option<SocketAddr>,
    /// Extra `Host` values accepted on `/mcp`.
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted on `/mcp`.
    pub allowed_origins: Vec<String>,
    /// Lines printed under the endpoint lines once the addresses are known (the
    /// demo's banner), given the `/mcp` URL and the approver API's URL.
    pub banner: Option<Banner>,
    /// Caps on PENDING proposals.
    pub limits: crate::store::PendingLimits,
    /// Notification channels' server side (relay, defaults, retry timings).
    pub notify: crate::notify::NotifyOptions,
    /// A PostgreSQL URL: the store is that database, shared with other instances,
    /// rather than the embedded store in `data` (which then keeps only local files).
    pub database: Option<String>,
    /// On PostgreSQL: how long an execution claim stays leased without renewal.
    pub claim_lease: Duration,
    /// Where approvers open the gate's pages (`--public-url`), for the links in
    /// notices; by default `http://localhost:<port>` of a loopback approver listener.
    pub public_url: Option<String>,
    /// HTTPS on both listeners (`--tls-cert`/`--tls-key`); `None`: plain HTTP.
    pub tls: Option<crate::tls::TlsFiles>,
    /// `/metrics` on a listener of its own (`--metrics-listen`), plain HTTP.
    pub metrics_listen: Option<SocketAddr>,
}

impl ServeOptions {
    /// One listener and the embedded store in `data`, everything else at its default:
    /// what embedded stdio runs, and what tests that need a real service start.
    pub fn local(data: PathBuf, source: ConfigSource, listen: SocketAddr) -> Self {
        Self {
            data,
            source,
            listen,
            approver_listen: None,
            allowed_hosts: vec![],
            allowed_origins: vec![],
            banner: None,
            limits: Default::default(),
            notify: Default::default(),
            public_url: None,
            database: None,
            claim_lease: crate::store::postgres::DEFAULT_LEASE,
            tls: None,
            metrics_listen: None,
        }
    }
}

/// Where the store is, as `--store` or `APPROVAL_STORE` say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// `sled:DIR`: the embedded store, the same as `--data DIR`.
    Sled(PathBuf),
    /// `postgres://USER[:PASSWORD]@HOST:PORT/DATABASE` (or `postgresql://`).
    Postgres(String),
}

impl std::str::FromStr for StoreSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if crate::store::postgres::is_postgres_url(s) {
            return Ok(StoreSpec::Postgres(s.to_owned()));
        }
        match s.strip_prefix("sled:") {
            Some(dir) if !dir.is_empty() => Ok(StoreSpec::Sled(PathBuf::from(dir))),
            _ => Err(format!(
                "{:?} is not a store: write sled:DIR for the embedded store, or \
                 postgres://USER[:PASSWORD]@HOST:PORT/DATABASE for PostgreSQL",
                // A mistyped scheme may still carry a password.
                if s.contains("://") {
                    crate::store::postgres::redact(s)
                } else {
                    s.to_owned()
                }
            )),
        }
    }
}

/// Opens the store (and the identity it is bound to) that `opts` names.
async fn open_store(opts: &ServeOptions) -> anyhow::Result<(Arc<dyn Store>, ServerIdentity)> {
    if let Some(url) = &opts.database {
        let (url, lease) = (url.clone(), opts.claim_lease);
        let pg =
            tokio::task::spawn_blocking(move || PgStore::open(&url).map(|s| s.with_lease(lease)))
                .await??;
        let store: Arc<dyn Store> = Arc::new(pg);
        let s2 = store.clone();
        let identity =
            tokio::task::spawn_blocking(move || ServerIdentity::open_shared(s2.as_ref()))
                .await?
                .context("the server's identity key is refused")?
                .ok_or_else(|| anyhow::anyhow!("the PostgreSQL store keeps no identity key"))?;
        // No fail-stop: an unreachable database is answered with a retryable error,
        // and the pool reconnects by itself when it is back.
        return Ok((store, identity));
    }
    let sled: Arc<dyn Store> =
        Arc::new(SledStore::open(&opts.data.join("store")).with_context(|| {
            format!(
                "cannot open the store in {} (is another server using it?)",
                opts.data.display()
            )
        })?);
    let identity = ServerIdentity::open(&opts.data, sled.as_ref())
        .context("the server's identity key is refused")?;
    let store: Arc<dyn Store> = Arc::new(FailStop::new(sled, FailStop::exit_process));
    Ok((store, identity))
}

/// Opens the store and builds the service, recovering from a previous crash.
pub async fn start(opts: &ServeOptions) -> anyhow::Result<Arc<Service>> {
    std::fs::create_dir_all(&opts.data)
        .with_context(|| format!("cannot create {}", opts.data.display()))?;
    // The store holds every payload; other local users have no business reading it.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&opts.data, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot restrict {} to its owner", opts.data.display()))?;
    }
    let (store, identity) = open_store(opts).await?;
    // Under quorum (issue #35) the store's version is the configuration, and the
    // files, however edited, are not read for it.
    let config = match store.config_head()? {
        Some(head) => {
            let version = head.version;
            let config = crate::config::load_governed(head).map_err(|e| {
                anyhow::anyhow!("configuration version {version} in the store refused: {e}")
            })?;
            crate::service::tools::resolve(config).await
        }
        None => crate::service::load_config(&opts.source)
            .await
            .map_err(|e| anyhow::anyhow!("configuration refused: {}", opts.source.explain(&e)))?,
    };
    // A policy naming an approver the keyring lacks disables its kind rather than
    // refusing to start, the same as on reload (see config.rs); say so loudly.
    for why in config.disabled_reasons() {
        tracing::error!("{why}");
        eprintln!("warning: {why}");
    }
    let svc = Service::with_limits(
        store,
        identity,
        config,
        Some(opts.source.clone()),
        Arc::new(SystemClock),
        ExecContext::new(opts.data.clone()),
        opts.limits,
    );
    svc.govern_at_start()
        .await
        .map_err(|e| anyhow::anyhow!("configuration under quorum: {e}"))?;
    let recovered = svc.recover().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    if recovered > 0 {
        tracing::warn!(
            recovered,
            "proposals found EXECUTING are now OUTCOME_UNKNOWN"
        );
    }
    let open = open_proposals(&svc);
    let voided = svc
        .void_changed_policies()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if voided > 0 {
        tracing::warn!("{}", ended_message(&policy_changed(&svc, &open)));
    }
    // The gate runs on-quorum proposals itself; approvals that landed while it was
    // down run now (their claim is still the one compare-and-swap).
    tokio::spawn(crate::service::on_quorum::run_forever(svc.clone()));
    svc.sweep_on_quorum()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(svc)
}

/// Why a listener could not start, and the flag that picks another address.
pub fn cannot_listen(addr: SocketAddr, flag: &str, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::AddrInUse {
        format!(
            "cannot listen on {addr}: the address is already in use (another approval-server, or another program, has port {}): stop it, or pick another address with {flag}, e.g. {flag} {}:{}",
            addr.port(),
            url_host_ip(&addr),
            addr.port().wrapping_add(1).max(1)
        )
    } else {
        format!("cannot listen on {addr}: {e}: pick another address with {flag}")
    }
}

fn url_host_ip(addr: &SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => a.ip().to_string(),
        SocketAddr::V6(a) => format!("[{}]", a.ip()),
    }
}

/// The ids of the open (PENDING or APPROVED) proposals, before a reload.
fn open_proposals(svc: &Service) -> Vec<approval_core::ProposalId> {
    use approval_core::Status;
    [Status::Pending, Status::Approved]
        .into_iter()
        .filter_map(|st| svc.store().list_status(st, usize::MAX).ok())
        .flatten()
        .map(|r| r.id().clone())
        .collect()
}

/// Which of `open` a reload ended as POLICY_CHANGED.
fn policy_changed(
    svc: &Service,
    open: &[approval_core::ProposalId],
) -> Vec<approval_core::ProposalId> {
    let now = svc.now();
    open.iter()
        .filter(|id| {
            matches!(svc.store().get(id), Ok(Some(r))
                if r.lifecycle.at(now).status == approval_core::Status::PolicyChanged)
        })
        .cloned()
        .collect()
}

/// `1 open proposal ended POLICY_CHANGED: p-...` (at most 20 ids named).
pub fn ended_message(ids: &[approval_core::ProposalId]) -> String {
    const SHOWN: usize = 20;
    if ids.is_empty() {
        return "open proposals ended POLICY_CHANGED (see the audit log for which)".into();
    }
    let n = ids.len();
    let mut names = ids
        .iter()
        .take(SHOWN)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if n > SHOWN {
        names.push_str(&format!(" and {} more", n - SHOWN));
    }
    format!(
        "{n} open proposal{} ended POLICY_CHANGED: {names}",
        if n == 1 { "" } else { "s" }
    )
}

fn url_host(addr: &SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
    }
}

/// Serves until SIGINT or SIGTERM; reloads on SIGHUP.
pub async fn serve(opts: ServeOptions, svc: Arc<Service>) -> anyhow::Result<()> {
    let signals = Signals::take();
    serve_until(opts, svc, signals, Announce::Stdout, std::future::pending()).await
}

/// The process's signals, taken before anything is served.
///
/// tokio puts a signal's handler in place when the stream is made, not when it is
/// first awaited. Made before the first answer, these streams catch a SIGHUP or a
/// SIGTERM sent the moment the server answers. Made later, as they once were in
/// tasks that start with the listeners, an early SIGHUP met the default action:
/// the process ended, or, where SIGHUP is ignored (under nohup), the reload was
/// dropped without a word while the embedded stdio session went on answering.
pub struct Signals {
    #[cfg(unix)]
    hup: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Puts the handlers in place now; call it inside the runtime, before serving.
    /// A signal that cannot be listened for is logged, and that duty is off.
    pub fn take() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let listen = |kind: SignalKind, name: &str, without: &str| match signal(kind) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::error!(error = %e, "cannot listen for {name}: {without}");
                    None
                }
            };
            Self {
                hup: listen(SignalKind::hangup(), "SIGHUP", "reload disabled"),
                int: listen(
                    SignalKind::interrupt(),
                    "SIGINT",
                    "Ctrl-C will not stop cleanly",
                ),
                term: listen(
                    SignalKind::terminate(),
                    "SIGTERM",
                    "it will not stop cleanly",
                ),
            }
        }
        #[cfg(not(unix))]
        Self {}
    }
}

/// The next delivery of a signal we listen for; never, for one we could not.
#[cfg(unix)]
async fn delivered(signal: &mut Option<tokio::signal::unix::Signal>) {
    if let Some(s) = signal {
        if s.recv().await.is_some() {
            return;
        }
    }
    std::future::pending().await
}

/// Where the endpoint lines go: stdout for `serve` and `demo`, stderr when stdout
/// carries the MCP protocol (embedded `stdio`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announce {
    /// `serve`, `demo`.
    Stdout,
    /// Embedded `stdio`: stdout is the protocol's.
    Stderr,
}

/// Serves until SIGINT, SIGTERM or `stop` completes; reloads on SIGHUP. While it
/// listens, `<data>/endpoint.json` says where (see [`crate::endpoint::Endpoint`]), so a
/// `stdio` session started on the same folder joins this server.
pub async fn serve_until(
    opts: ServeOptions,
    svc: Arc<Service>,
    signals: Signals,
    announce: Announce,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // A bad pair refuses the start, before anything listens.
    let tls = match &opts.tls {
        Some(files) => Some(Arc::new(
            crate::tls::Tls::load(files.clone()).map_err(|e| anyhow::anyhow!("{e}"))?,
        )),
        None => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut mcp_opts = McpOptions::default();
    mcp_opts
        .allowed_hosts
        .extend(opts.allowed_hosts.iter().cloned());
    if !opts.listen.ip().is_unspecified() {
        mcp_opts.allowed_hosts.push(opts.listen.ip().to_string());
    }
    mcp_opts.allowed_origins = opts.allowed_origins.clone();
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| anyhow::anyhow!(cannot_listen(opts.listen, "--listen", &e)))?;
    let mcp_addr = listener.local_addr()?;
    let mcp_opts = mcp_opts.allow_own_origins(scheme, mcp_addr.port());
    let (main_router, approver) = match opts.approver_listen {
        Some(a) => {
            let l = tokio::net::TcpListener::bind(a)
                .await
                .map_err(|e| anyhow::anyhow!(cannot_listen(a, "--approver-listen", &e)))?;
            (http::mcp_router(svc.clone(), &mcp_opts), Some(l))
        }
        None => (http::app(svc.clone(), &mcp_opts), None),
    };
    let approver_addr = match &approver {
        Some(l) => l.local_addr()?,
        None => mcp_addr,
    };
    let main_router = http::scrape::track(main_router, svc.metrics().clone());
    let metrics = match opts.metrics_listen {
        Some(a) => Some(
            tokio::net::TcpListener::bind(a)
                .await
                .map_err(|e| anyhow::anyhow!(cannot_listen(a, "--metrics-listen", &e)))?,
        ),
        None => None,
    };
    // The links in notices: the operator's public URL, or this loopback listener as
    // localhost (a secure context for WebAuthn; an IP address cannot be an RP ID).
    match (&opts.public_url, approver_addr.ip().is_loopback()) {
        (Some(u), _) => svc.set_public_url(u),
        (None, true) => svc.set_public_url(&format!(
            "{}://localhost:{}",
            if opts.tls.is_some() { "https" } else { "http" },
            approver_addr.port()
        )),
        (None, false) => tracing::warn!(
            "no --public-url: notices carry no approver page link (passkey approvers need one: give the https:// address approvers open)"
        ),
    }
    // Notifications are queued from the first proposal on (before anyone can connect).
    crate::notify::spawn(svc.clone(), opts.notify.clone());
    // The embedded store's backups while it runs (PROTOCOL §16.1); a path at
    // admin.sock that is not ours refuses the start, before anything is announced.
    let admin = match opts.database {
        None => crate::admin_socket::AdminSocket::bind(&opts.data)?,
        Some(_) => None,
    };
    // Published before the lines are printed: whoever read them can find the file.
    let server_id = svc.store().server_id().to_string();
    let endpoint = crate::endpoint::Endpoint::publish(
        &opts.data,
        scheme,
        mcp_addr,
        approver_addr,
        &server_id,
    )?;
    if tls.is_none() {
        warn_plain_remote(mcp_addr, approver_addr);
    }
    let mut lines = format!(
        "MCP endpoint: {scheme}://{}/mcp\nApprover API: {scheme}://{}\nServer identity: {} key {}",
        url_host(&mcp_addr),
        url_host(&approver_addr),
        svc.identity().server_id(),
        svc.identity().public_key()
    );
    if let Some(l) = &metrics {
        lines.push_str(&format!(
            "\nMetrics: http://{}/metrics",
            url_host(&l.local_addr()?)
        ));
    }
    if let Some(Banner(banner)) = &opts.banner {
        lines.push('\n');
        lines.push_str(&banner(
            &format!("{scheme}://{}/mcp", url_host(&mcp_addr)),
            &format!("{scheme}://{}", url_host(&approver_addr)),
        ));
    }
    use std::io::Write;
    match announce {
        Announce::Stdout => {
            println!("{lines}");
            let _ = std::io::stdout().flush();
        }
        Announce::Stderr => eprintln!("{lines}"),
    }

    #[cfg(unix)]
    let Signals { hup, int, term } = signals;
    #[cfg(not(unix))]
    let Signals {} = signals;
    let shutdown = tokio_util_shutdown(
        #[cfg(unix)]
        (int, term),
        stop,
    );
    spawn_background(
        svc.clone(),
        #[cfg(unix)]
        hup,
        tls.clone(),
    );
    if let Some(a) = admin {
        let (store, data) = (svc.store().clone(), opts.data.clone());
        tokio::spawn(a.serve(store, data, shutdown.clone().wait()));
    }
    if let Some(l) = metrics {
        let (m, own) = (
            svc.metrics().clone(),
            crate::capacity::Admission::new(svc.clone()),
        );
        tokio::spawn(http::scrape::serve(l, m, own, shutdown.clone().wait()));
    }
    // One set of budgets for both listeners: an identity's share is the same wherever
    // it connects.
    let admission = crate::capacity::Admission::new(svc.clone());
    let main = crate::listener::serve(
        listener,
        main_router,
        admission.clone(),
        tls.clone(),
        shutdown.clone().wait(),
    );
    match approver {
        Some(l) => {
            let api = crate::listener::serve(
                l,
                http::scrape::track(
                    crate::http::approver_routes(svc.clone()),
                    svc.metrics().clone(),
                ),
                admission,
                tls,
                shutdown.clone().wait(),
            );
            tokio::join!(main, api);
        }
        None => main.await,
    }
    // In-flight requests have finished; make sure everything they wrote is on disk.
    let store = svc.store().clone();
    tokio::task::spawn_blocking(move || store.flush_blocking()).await??;
    endpoint.withdraw();
    tracing::info!("stopped");
    Ok(())
}

/// Plain HTTP on an address other machines can reach: their approvers' previews and
/// the agents' tokens would cross the network in clear.
fn warn_plain_remote(mcp: SocketAddr, approver: SocketAddr) {
    for addr in [mcp, approver] {
        if !addr.ip().is_loopback() {
            tracing::warn!(
                "serving plain HTTP on {addr}, which is not a loopback address: remote approvers need HTTPS, start with --tls-cert FILE --tls-key FILE"
            );
            return;
        }
    }
}

/// Admission asks the service who a token names and how a connection's signatures
/// fared; the capacity rules stay below the service ([`crate::capacity::Gate`]).
impl crate::capacity::Gate for Service {
    fn agent_for(&self, token: Option<&str>) -> Option<Option<approval_core::ids::AgentName>> {
        let config = self.config();
        let agents = config.agents.as_ref()?;
        Some(token.and_then(|t| agents.authenticate(t)))
    }

    fn over_budget(&self, conn: crate::throttle::ConnectionId) -> bool {
        self.forgeries().over_budget(Some(conn), self.now())
    }

    fn verified(&self, conn: crate::throttle::ConnectionId) -> bool {
        self.forgeries().verified(Some(conn))
    }

    fn forget(&self, conn: crate::throttle::ConnectionId) {
        self.forgeries().forget(Some(conn));
    }

    fn throttled(&self, reason: &'static str) {
        self.metrics().throttled(reason);
    }
}

#[cfg(test)]
mod newcomer_messages {
    use super::*;
    use approval_core::ProposalId;

    #[test]
    fn ended_message_names_the_proposals() {
        let id = |s: &str| ProposalId::parse(s).unwrap();
        assert_eq!(
            ended_message(&[id("p-1")]),
            "1 open proposal ended POLICY_CHANGED: p-1"
        );
        assert_eq!(
            ended_message(&[id("p-1"), id("p-2")]),
            "2 open proposals ended POLICY_CHANGED: p-1, p-2"
        );
        let many: Vec<ProposalId> = (0..25).map(|i| id(&format!("p-{i}"))).collect();
        assert!(ended_message(&many).ends_with("p-19 and 5 more"));
    }

    #[test]
    fn store_specs_name_the_two_forms() {
        assert_eq!(
            "sled:/var/lib/gate".parse(),
            Ok(StoreSpec::Sled(PathBuf::from("/var/lib/gate")))
        );
        for url in [
            "postgres://gate@db:5432/approval",
            "postgresql://gate:pw@db/approval?sslmode=disable",
        ] {
            assert_eq!(url.parse(), Ok(StoreSpec::Postgres(url.to_owned())));
        }
        for bad in ["", "sled:", "mysql://db/x", "./data"] {
            let err = bad.parse::<StoreSpec>().unwrap_err();
            assert!(
                err.contains("sled:DIR") && err.contains("postgres://"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_taken_address_names_the_flag() {
        let e = std::io::Error::from(std::io::ErrorKind::AddrInUse);
        let addr: SocketAddr = "127.0.0.1:4800".parse().unwrap();
        assert_eq!(
            cannot_listen(addr, "--listen", &e),
            "cannot listen on 127.0.0.1:4800: the address is already in use (another approval-server, or another program, has port 4800): stop it, or pick another address with --listen, e.g. --listen 127.0.0.1:4801"
        );
    }
}
