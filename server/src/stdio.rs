//! `approval-server stdio` without `--connect`: run the gate in this process, or
//! join the server that already holds the data folder.
//!
//! A host that launches MCP servers as subprocesses starts us with the folder's
//! paths. When the store's lock is free, the whole service runs here: MCP on
//! stdin/stdout goes straight to the rmcp handler (no HTTP hop), the approver API
//! and `/mcp` listen on `--listen` so approvers can sign, and the endpoint lines go
//! to stderr, because stdout carries only protocol. When another process holds the
//! lock and publishes a live endpoint in `<data>/endpoint.json`, we forward to it
//! (the `--connect` bridge), so several host sessions share one store.
//!
//! The lock is the truth: a server holds the store's lock for as long as it runs,
//! so an endpoint file found while the lock is free is stale (its server died
//! without removing it) and is replaced. An endpoint file is only believed when
//! its address is loopback and `/healthz` there answers with the same `server_id`.
//!
//! This file is the mode's wiring, beside [`crate::run`] (which it calls to start the
//! service); the transport itself, MCP lines on stdin/stdout, is [`session`], and the
//! endpoint file is [`crate::endpoint`].

pub mod bridge;
pub mod session;
pub mod streams;

use crate::config::ConfigSource;
use crate::endpoint::Endpoint;
use crate::mcp::Identity;
use crate::run::{self, Announce, ServeOptions};
use crate::service::Service;
use anyhow::Context;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The default `--listen` of embedded stdio; when it is taken and `--listen` was
/// not given, a free loopback port is used instead (and printed).
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4800);

/// How long a session waits for the server that holds the lock to publish its endpoint.
pub const JOIN_WAIT: Duration = Duration::from_secs(15);

/// Everything `approval-server stdio` was given.
#[derive(Debug, Clone)]
pub struct StdioOptions {
    /// `--connect URL`: always bridge to that service.
    pub connect: Option<String>,
    /// Agent token: sent to a joined server; checked against `--agents` when embedded.
    pub token: Option<String>,
    /// Store folder.
    pub data: PathBuf,
    /// Policies folder.
    pub policies: PathBuf,
    /// Keyring file.
    pub keys: PathBuf,
    /// Agents file.
    pub agents: Option<PathBuf>,
    /// `root.toml` (`--root`): puts the configuration under quorum (issue #35).
    pub root: Option<PathBuf>,
    /// Where the embedded service listens; `None` means [`DEFAULT_LISTEN`] or any free port.
    pub listen: Option<SocketAddr>,
}

/// Whether another process holds the store's lock (sled takes an exclusive `flock`
/// on `<data>/store/db` for as long as it has the store open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lock {
    Free,
    Held,
}

fn lock_state(data: &Path) -> Lock {
    let db = data.join("store").join("db");
    let Ok(f) = std::fs::OpenOptions::new().read(true).open(&db) else {
        return Lock::Free;
    };
    match f.try_lock() {
        Ok(()) => Lock::Free, // released when `f` drops, below
        Err(std::fs::TryLockError::WouldBlock) => Lock::Held,
        Err(std::fs::TryLockError::Error(_)) => Lock::Free,
    }
}

/// Runs `approval-server stdio`.
pub async fn run(opts: StdioOptions) -> anyhow::Result<()> {
    if let Some(url) = opts.connect.clone() {
        return crate::stdio::bridge::run(url, opts.token.clone()).await;
    }
    let deadline = tokio::time::Instant::now() + JOIN_WAIT;
    loop {
        if lock_state(&opts.data) == Lock::Free {
            match Embedded::start(&opts).await? {
                Some(embedded) => return embedded.run().await,
                None => continue, // someone took the lock first: join them
            }
        }
        let why_not_joined = match Endpoint::read(&opts.data) {
            Ok(Some(ep)) => match ep.check_live().await {
                Ok(()) => {
                    eprintln!(
                        "joining the approval service that holds {} (pid {}): {} (its own policies, keys and agents apply)",
                        opts.data.display(),
                        ep.pid,
                        ep.mcp
                    );
                    return crate::stdio::bridge::run(ep.mcp, opts.token.clone()).await;
                }
                Err(e) => e,
            },
            Ok(None) => "no endpoint file".to_owned(),
            Err(e) => e,
        };
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "the data folder {} is locked by another process, and it publishes no live endpoint ({why_not_joined}): stop that process (an `approval-server audit` run holds the lock too), or pass --connect URL",
                opts.data.display()
            );
        }
        // The holder may be starting: it publishes its endpoint once it listens.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The service running in this process.
struct Embedded {
    serve: ServeOptions,
    svc: Arc<Service>,
    identity: Identity,
}

impl Embedded {
    /// Opens the store and loads the rules; `Ok(None)` when another process took
    /// the lock between our look and our open.
    async fn start(opts: &StdioOptions) -> anyhow::Result<Option<Self>> {
        let listen = match opts.listen {
            Some(a) => a,
            None => match std::net::TcpListener::bind(DEFAULT_LISTEN) {
                Ok(_) => DEFAULT_LISTEN,
                Err(e) => {
                    eprintln!(
                        "{DEFAULT_LISTEN} is not free ({e}); listening on a free loopback port instead (pass --listen to choose)"
                    );
                    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)
                }
            },
        };
        let source = ConfigSource {
            policies: opts.policies.clone(),
            keys: opts.keys.clone(),
            agents: opts.agents.clone(),
            root: opts.root.clone(),
            embedded_policies: None,
        };
        let serve = ServeOptions::local(opts.data.clone(), source, listen);
        let svc = match run::start(&serve).await {
            Ok(svc) => svc,
            Err(e) if lock_state(&opts.data) == Lock::Held => {
                tracing::debug!(error = %e, "the store was taken first; joining");
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        if let Ok(Some(old)) = Endpoint::read(&opts.data) {
            eprintln!(
                "stale endpoint file in {} (pid {}, {}): its server is gone; replacing it",
                opts.data.display(),
                old.pid,
                old.mcp
            );
        }
        let identity = Identity::new(opts.token.clone());
        let config = svc.config();
        match (&config.agents, &opts.token) {
            (Some(_), _) => {
                identity.agent(&config).map_err(|e| anyhow::anyhow!("{}", e.message))?;
            }
            (None, Some(_)) => eprintln!(
                "note: no --agents file, so the token is not checked and this session acts as `local`"
            ),
            (None, None) => {}
        }
        Ok(Some(Self {
            serve,
            svc,
            identity,
        }))
    }

    /// Serves stdin/stdout and the listener until stdin closes (or a signal).
    async fn run(self) -> anyhow::Result<()> {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        // Before the session's thread answers anything (see `run::Signals`).
        let signals = run::Signals::take();
        let mut server = tokio::spawn(run::serve_until(
            self.serve,
            self.svc.clone(),
            signals,
            Announce::Stderr,
            async move {
                let _ = stop_rx.await;
            },
        ));
        let session = session::on_own_thread(self.svc, self.identity)?;
        tokio::select! {
            r = session => {
                let _ = stop_tx.send(());
                server.await.context("the service task failed")??;
                r
            }
            r = &mut server => {
                // A signal (or a listener that could not start) ended the service.
                r.context("the service task failed")?
            }
        }
    }
}
