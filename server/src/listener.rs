//! Accepting connections with limits that `axum::serve` does not set.
//!
//! One deadline runs from accept to a connection's first complete request (its
//! HTTP/1 request head, or its first HTTP/2 HEADERS frame), whatever the protocol:
//! a client that connects and sends nothing, only the HTTP/2 preface, or its
//! headers a byte at a time (slow-loris), is closed [`HEADER_READ_TIMEOUT`] after
//! accept. Before, the protocol detection had no time-out, so 1,030 silent sockets
//! held every slot and nobody was answered (issue #11). After the first request a
//! connection with no request in flight (no response body still streaming) for the
//! same time is closed: HTTP/1 by hyper's header-read time-out between requests,
//! HTTP/2 by our own idle timer (GOAWAY); HTTP/2 keep-alive pings close a
//! connection whose peer stops answering while a stream is open. At most
//! [`MAX_CONNECTIONS`] connections are served at once (further ones wait in the
//! kernel's backlog); on shutdown, in-flight requests finish (up to
//! [`SHUTDOWN_GRACE`]) before the caller flushes the store.
//!
//! Under pressure the fuse gets shorter: a connection accepted while more than
//! [`PRESSURE_AT`] are open gets [`PRESSURED_HEADER_TIMEOUT`] for the same limits.
//! Without that, a client holding every slot with silent or trickling sockets made
//! everyone else wait out the full time-out in the backlog (1,100 such sockets kept
//! `/healthz` waiting 8.4 s); with it, slots above the mark turn over every couple
//! of seconds, and a waiting client gets one.

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::Instant;
use tower::ServiceExt;

/// The builder every outbound HTTP client of this crate starts from (the stdio bridge,
/// webhook executors and notifications): an idle pooled connection is dropped after
/// [`approval_core::time::CLIENT_POOL_IDLE_SECS`], before a server closing it for
/// idling ([`HEADER_READ_TIMEOUT`] here) could lose a request written on it.
pub fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().pool_idle_timeout(Duration::from_secs(
        approval_core::time::CLIENT_POOL_IDLE_SECS,
    ))
}

/// Connections served at once, per listener.
pub const MAX_CONNECTIONS: usize = 1024;
/// Time a client has from accept to its first complete request head, and between
/// requests once it has sent one (idle keep-alive, HTTP/1 and HTTP/2 alike).
pub const HEADER_READ_TIMEOUT: Duration =
    Duration::from_secs(approval_core::time::CONNECTION_IDLE_SECS);
/// Open connections beyond which new ones get [`PRESSURED_HEADER_TIMEOUT`].
pub const PRESSURE_AT: usize = MAX_CONNECTIONS * 3 / 4;
/// [`HEADER_READ_TIMEOUT`] for connections accepted under pressure: long enough
/// for any real client on a slow link to send a request head, short enough to
/// recycle slots.
pub const PRESSURED_HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// Concurrent HTTP/2 streams per connection (hyper's default is 200): bounds how much
/// work one connection can keep waiting, e.g. paced forgeries (see crate::throttle).
pub const MAX_HTTP2_STREAMS: u32 = 32;
/// How often an HTTP/2 connection with a stream open is pinged...
pub const HTTP2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// ...and how long the peer has to answer before the connection is closed.
pub const HTTP2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Time in-flight requests get to finish on shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// What the accept loop knows of one connection: whether its first request has
/// arrived, how many requests are in flight, and since when it has been idle.
struct ConnState {
    started: AtomicBool,
    in_flight: AtomicUsize,
    idle_since: Mutex<Instant>,
    changed: Notify,
}

impl ConnState {
    fn new(now: Instant) -> Self {
        ConnState {
            started: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle_since: Mutex::new(now),
            changed: Notify::new(),
        }
    }

    /// A request's head has arrived: counted in flight until its response body is
    /// dropped (sent, or abandoned).
    fn begin(self: &Arc<Self>) -> InFlight {
        self.started.store(true, Ordering::SeqCst);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_one();
        InFlight(self.clone())
    }

    /// When the connection must be closed (or, once started and idle, shut down
    /// gracefully) unless something changes first; `None` while requests are in
    /// flight.
    fn deadline(&self, accepted: Instant, fuse: Duration) -> Option<Instant> {
        if !self.started.load(Ordering::SeqCst) {
            Some(accepted + fuse)
        } else if self.in_flight.load(Ordering::SeqCst) == 0 {
            let since = *self.idle_since.lock().unwrap_or_else(|e| e.into_inner());
            Some(since + fuse)
        } else {
            None
        }
    }
}

/// One request in flight on a connection; dropping it may make the connection idle.
struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_one();
    }
}

/// A response body that keeps its request counted in flight until it is dropped,
/// so a streaming response (server-sent events) is not mistaken for idleness.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, router: Router, shutdown: impl Future<Output = ()>) {
    let builder = |fuse| {
        let mut b = Builder::new(TokioExecutor::new());
        b.http1().timer(TokioTimer::new()).header_read_timeout(fuse);
        b.http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(Some(HTTP2_KEEP_ALIVE_INTERVAL))
            .keep_alive_timeout(HTTP2_KEEP_ALIVE_TIMEOUT)
            .max_concurrent_streams(MAX_HTTP2_STREAMS);
        b
    };
    let (relaxed, pressured) = (
        builder(HEADER_READ_TIMEOUT),
        builder(PRESSURED_HEADER_TIMEOUT),
    );
    let (stop, stopping) = tokio::sync::watch::channel(false);
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
        let accepted = Instant::now();
        let open = MAX_CONNECTIONS - slots.available_permits();
        let (builder, fuse) = if open > PRESSURE_AT {
            (&pressured, PRESSURED_HEADER_TIMEOUT)
        } else {
            (&relaxed, HEADER_READ_TIMEOUT)
        };
        let state = Arc::new(ConnState::new(accepted));
        // Failed signatures are charged to the connection (crate::throttle), never reused.
        let conn_id = crate::throttle::ConnectionId::next();
        let svc = {
            let (router, state) = (router.clone(), state.clone());
            tower::service_fn(move |req: Request<Incoming>| {
                let in_flight = state.begin();
                let mut req = req.map(Body::new);
                req.extensions_mut().insert(ConnectInfo(addr));
                req.extensions_mut().insert(conn_id);
                let router = router.clone();
                async move {
                    let res = router.oneshot(req).await?;
                    Ok::<_, std::convert::Infallible>(res.map(|body| Tracked {
                        body,
                        _in_flight: in_flight,
                    }))
                }
            })
        };
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(svc))
            .into_owned();
        let mut stopping = stopping.clone();
        tokio::spawn(async move {
            tokio::pin!(conn);
            // Set once the connection was asked to end gracefully: (when, whether
            // because it was idle rather than for shutdown).
            let mut closing: Option<(Instant, bool)> = None;
            loop {
                let wake = match closing {
                    // An idle connection gets one more fuse to finish its GOAWAY.
                    Some((since, true)) => Some(since + fuse),
                    Some((_, false)) => None,
                    None => state.deadline(accepted, fuse),
                };
                let sleep = async {
                    match wake {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    _ = sleep => {
                        if closing.is_some() || !state.started.load(Ordering::SeqCst) {
                            // No complete request in time, or a GOAWAY not
                            // finished in time: dropping the connection closes it.
                            tracing::debug!(%addr, "connection closed at its deadline");
                            break;
                        }
                        if state.deadline(accepted, fuse).is_some_and(|at| at <= Instant::now()) {
                            conn.as_mut().graceful_shutdown();
                            closing = Some((Instant::now(), true));
                        }
                    }
                    _ = state.changed.notified() => {}
                    r = stopping.changed(), if !matches!(closing, Some((_, false))) => {
                        let _ = r;
                        conn.as_mut().graceful_shutdown();
                        closing = Some((Instant::now(), false));
                    }
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    let _ = stop.send(true);
    let all = u32::try_from(MAX_CONNECTIONS).unwrap_or(u32::MAX);
    tokio::select! {
        _ = slots.acquire_many(all) => {},
        _ = tokio::time::sleep(SHUTDOWN_GRACE) => tracing::warn!("in-flight requests did not finish in time"),
    }
}
