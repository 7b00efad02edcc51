//! What runs beside the request path once the gate serves: the shutdown watch, the
//! expiry and lease sweeps (under the sweep leadership on PostgreSQL), following the
//! configuration version other instances applied, waking long-polls on other
//! instances' changes, and SIGHUP (configuration and TLS reload).
//!
//! Split out of `run.rs`, which wires these in `serve_until`; nothing else starts them.

use super::{delivered, ended_message, open_proposals, policy_changed};
use crate::service::Service;
use std::sync::Arc;
use std::time::Duration;

/// A shutdown signal shared by several servers.
#[derive(Clone)]
pub(super) struct Shutdown(tokio::sync::watch::Receiver<bool>);

impl Shutdown {
    pub(super) async fn wait(mut self) {
        let _ = self.0.wait_for(|v| *v).await;
    }
}

pub(super) fn tokio_util_shutdown(
    #[cfg(unix)] (mut int, mut term): (
        Option<tokio::signal::unix::Signal>,
        Option<tokio::signal::unix::Signal>,
    ),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Shutdown {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        #[cfg(unix)]
        tokio::select! {
            () = delivered(&mut int) => {},
            () = delivered(&mut term) => {},
            () = stop => {},
        }
        #[cfg(not(unix))]
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = stop => {},
        }
        tracing::info!("shutting down: finishing in-flight requests");
        let _ = tx.send(true);
    });
    Shutdown(rx)
}

pub(super) fn spawn_background(
    svc: Arc<Service>,
    #[cfg(unix)] mut hup: Option<tokio::signal::unix::Signal>,
    tls: Option<Arc<crate::tls::Tls>>,
) {
    let sweeper = svc.clone();
    // With leases (several instances), a dead instance's claims are found within
    // half a lease of expiring, and the sweep's leader ticks often enough to renew its
    // leadership lease (store/postgres/lease.rs).
    let every = match svc.store().leases() {
        Some(lease) => (lease / 2)
            .clamp(Duration::from_millis(200), Duration::from_secs(5))
            .min(crate::store::postgres::lease::Leadership::renewal_for(
                lease,
            )),
        None => Duration::from_secs(5),
    };
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            // One instance at a time sweeps; another takes over when it dies.
            if !sweeper.leads(crate::service::upkeep::Task::Sweep).await {
                continue;
            }
            match sweeper.sweep().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(expired = n, "expiry sweep"),
                Err(e) => tracing::error!(error = %e, "expiry sweep failed"),
            }
            match sweeper.sweep_leases().await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(n, "execution leases expired: OUTCOME_UNKNOWN"),
                Err(e) => tracing::error!(error = %e, "lease sweep failed"),
            }
            if let Err(e) = sweeper.sweep_on_quorum().await {
                tracing::error!(error = %e, "on-quorum sweep failed");
            }
        }
    });
    // A configuration version another instance applied (issue #35) is loaded here
    // within a second; one store's instances all serve the same version.
    if svc.store().leases().is_some() {
        let follower = svc.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                if let Err(e) = follower.follow_config().await {
                    tracing::error!(error = %e, "could not load the configuration version in the store");
                }
            }
        });
    }
    // Changes other instances made wake this instance's long-polls and streams.
    if let Some(mut rx) = svc.store().remote_events() {
        let svc = svc.clone();
        tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                let id = match rx.recv().await {
                    Ok(id) => id,
                    Err(RecvError::Lagged(_)) => None,
                    Err(RecvError::Closed) => return,
                };
                match id {
                    // Numbering and broadcasting an id touches no store: done here,
                    // without a hand-off to the blocking pool for every NOTIFY.
                    Some(id) => svc.announce_remote(Some(id)),
                    // A re-read after missed events lists the store: on the pool.
                    None => {
                        let svc = svc.clone();
                        let _ =
                            tokio::task::spawn_blocking(move || svc.announce_remote(None)).await;
                    }
                }
            }
        });
    }
    #[cfg(unix)]
    tokio::spawn(async move {
        loop {
            delivered(&mut hup).await;
            let open = open_proposals(&svc);
            match svc.reload().await {
                Ok(0) => tracing::info!("configuration reloaded"),
                Ok(_) => tracing::info!(
                    "configuration reloaded; {}",
                    ended_message(&policy_changed(&svc, &open))
                ),
                Err(e @ crate::config::ConfigError::Governance(_)) => tracing::error!("{e}"),
                Err(e) => {
                    tracing::error!("reload refused (a readable keyring was still applied):\n{e}")
                }
            }
            if let Some(tls) = &tls {
                reload_tls(tls);
            }
        }
    });
    #[cfg(not(unix))]
    let _ = tls;
}

/// Re-reads the certificate and key on SIGHUP: new handshakes get a good new pair;
/// a bad one is refused and the pair in force keeps serving (never an outage).
pub fn reload_tls(tls: &crate::tls::Tls) {
    match tls.reload() {
        Ok(()) => tracing::info!(
            cert = %tls.files().cert.display(),
            "TLS certificate reloaded: new connections get it"
        ),
        Err(e) => tracing::error!(
            "TLS certificate reload refused, the certificate in use keeps serving: {e}"
        ),
    }
}
