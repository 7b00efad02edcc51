//! Accepting connections with limits that `axum::serve` does not set.
//!
//! A client that opens a connection and sends its headers a byte at a time
//! (slow-loris), or keeps one idle between requests, is dropped after
//! [`HEADER_READ_TIMEOUT`]; at most [`MAX_CONNECTIONS`] connections are served at
//! once (further ones wait in the kernel's backlog); on shutdown, in-flight
//! requests finish (up to [`SHUTDOWN_GRACE`]) before the caller flushes the store.
//!
//! Under pressure the fuse gets shorter: a connection accepted while more than
//! [`PRESSURE_AT`] are open must send each request's headers within
//! [`PRESSURED_HEADER_TIMEOUT`]. Without that, a client holding every slot with
//! trickling sockets made everyone else wait out the full time-out in the backlog
//! (1,100 such sockets kept `/healthz` waiting 8.4 s); with it, slots above the
//! mark turn over every couple of seconds, and a waiting client gets one.

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// Connections served at once, per listener.
pub const MAX_CONNECTIONS: usize = 1024;
/// Time a client has to send its request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Open connections beyond which new ones get [`PRESSURED_HEADER_TIMEOUT`].
pub const PRESSURE_AT: usize = MAX_CONNECTIONS * 3 / 4;
/// Header time-out for connections accepted under pressure: long enough for any
/// real client on a slow link to send a request head, short enough to recycle slots.
pub const PRESSURED_HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// Time in-flight requests get to finish on shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, router: Router, shutdown: impl Future<Output = ()>) {
    let builder = |header_timeout| {
        let mut b = Builder::new(TokioExecutor::new());
        b.http1()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout);
        b
    };
    let (relaxed, pressured) = (
        builder(HEADER_READ_TIMEOUT),
        builder(PRESSURED_HEADER_TIMEOUT),
    );
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = &mut shutdown => break,
        };
        let (stream, addr): (_, SocketAddr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let svc = router
            .clone()
            .map_request(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(addr));
                req.map(Body::new)
            });
        let open = MAX_CONNECTIONS - slots.available_permits();
        let builder = if open > PRESSURE_AT {
            &pressured
        } else {
            &relaxed
        };
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(svc));
        let fut = graceful.watch(conn.into_owned());
        tokio::spawn(async move {
            if let Err(e) = fut.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {},
        _ = tokio::time::sleep(SHUTDOWN_GRACE) => tracing::warn!("in-flight requests did not finish in time"),
    }
}
