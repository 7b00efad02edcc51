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
//!
//! Beyond that, capacity is shared out per identity ([`crate::capacity`]): every
//! request head is admitted or refused (429, connection closed) against its
//! identity's budget before a handler runs; a connection over its failed-signature
//! budget is closed after that answer; an HTTP/1 connection is closed after
//! [`MAX_REQUESTS_PER_HTTP1_CONNECTION`] requests; and when the general pool is full,
//! up to [`APPROVER_RESERVE`] more connections are accepted for approvers only
//! (signed requests, and `/healthz`), each closed after an answer or [`RESERVE_FUSE`]
//! unless a signature on it has verified.
//!
//! With TLS ([`crate::tls`]) the handshake runs in the connection's task, inside the
//! same fuse from accept and holding the same slot: a client that never finishes its
//! handshake is closed when a silent one would be, and a failed handshake frees its
//! slot at once.

use crate::capacity::{
    Admission, Charge, ConnCharges, APPROVER_RESERVE, MAX_CONNECTIONS,
    MAX_REQUESTS_PER_HTTP1_CONNECTION, RESERVE_FUSE,
};
use crate::tls::Stream;
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
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::Instant;
use tower::ServiceExt;

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
    /// Requests begun on this connection.
    requests: AtomicU32,
    /// Set when the connection must end after its current answers.
    close: AtomicBool,
    /// Accepted into the approvers' reserve rather than the general pool.
    reserve: bool,
    /// Its requests in flight per identity (see crate::capacity).
    charges: Arc<ConnCharges>,
}

impl ConnState {
    fn new(now: Instant, reserve: bool) -> Self {
        ConnState {
            started: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle_since: Mutex::new(now),
            changed: Notify::new(),
            requests: AtomicU32::new(0),
            close: AtomicBool::new(false),
            reserve,
            charges: Arc::default(),
        }
    }

    /// Asks the connection task to end the connection once the answers in flight
    /// are written (HTTP/1 also gets `Connection: close` on this answer).
    fn close_after(&self) {
        self.close.store(true, Ordering::SeqCst);
        self.changed.notify_one();
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
    /// The request's share of its identity's budget, given back with the body and
    /// by whatever work of the request outlives it (`capacity::Held`).
    _charge: Option<Arc<Charge>>,
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

/// Where a connection was accepted: its permit is given back when it ends.
enum Slot {
    Pool(#[allow(dead_code)] tokio::sync::OwnedSemaphorePermit),
    Reserve(#[allow(dead_code)] tokio::sync::OwnedSemaphorePermit),
}

/// Ends the answer on `version` with `Connection: close` where HTTP/1 allows it.
fn mark_close(res: &mut axum::response::Response, version: hyper::Version) {
    if version <= hyper::Version::HTTP_11 {
        res.headers_mut().insert(
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("close"),
        );
    }
}

/// Serves `router` on `listener` until `shutdown` completes, admitting requests
/// against `admission`'s budgets (shared by all listeners of one server); over TLS
/// when `tls` is given.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    admission: Arc<Admission>,
    tls: Option<Arc<crate::tls::Tls>>,
    shutdown: impl Future<Output = ()>,
) {
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
    let reserve = Arc::new(tokio::sync::Semaphore::new(APPROVER_RESERVE));
    tokio::pin!(shutdown);
    loop {
        // The general pool first; when it is full, the approvers' reserve.
        let slot = tokio::select! {
            biased;
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => Slot::Pool(p),
                Err(_) => break,
            },
            p = reserve.clone().acquire_owned() => match p {
                Ok(p) => Slot::Reserve(p),
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
        // A slot freed in the pool while this one waited in the reserve is taken.
        let slot = match slot {
            Slot::Reserve(r) => match slots.clone().try_acquire_owned() {
                Ok(p) => {
                    drop(r);
                    Slot::Pool(p)
                }
                Err(_) => Slot::Reserve(r),
            },
            pool => pool,
        };
        let in_reserve = matches!(slot, Slot::Reserve(_));
        let open = MAX_CONNECTIONS - slots.available_permits();
        let (builder, fuse) = if in_reserve {
            (&pressured, RESERVE_FUSE)
        } else if open > PRESSURE_AT {
            (&pressured, PRESSURED_HEADER_TIMEOUT)
        } else {
            (&relaxed, HEADER_READ_TIMEOUT)
        };
        let state = Arc::new(ConnState::new(accepted, in_reserve));
        // Failed signatures are charged to the connection (crate::throttle), never reused.
        let conn_id = crate::throttle::ConnectionId::next();
        let svc = {
            let (router, state, admission) = (router.clone(), state.clone(), admission.clone());
            tower::service_fn(move |req: Request<Incoming>| {
                let in_flight = state.begin();
                let n = state.requests.fetch_add(1, Ordering::SeqCst) + 1;
                let version = req.version();
                let admitted = admission
                    .admit(&req, &state.charges, state.reserve)
                    .map(|c| c.map(Arc::new));
                let mcp = req.uri().path() == "/mcp";
                let mut req = req.map(Body::new);
                req.extensions_mut().insert(ConnectInfo(addr));
                req.extensions_mut().insert(conn_id);
                if let Ok(Some(charge)) = &admitted {
                    req.extensions_mut()
                        .insert(crate::capacity::Held::new(charge.clone()));
                }
                if let Ok(Some(agent)) = admitted
                    .as_ref()
                    .map(|c| c.as_ref().and_then(|c| c.agent()))
                {
                    req.extensions_mut()
                        .insert(crate::capacity::AdmittedAgent(agent.clone()));
                }
                let (router, state, admission) = (router.clone(), state.clone(), admission.clone());
                async move {
                    let (mut res, charge) = match admitted {
                        Ok(charge) => (router.oneshot(req).await?, charge),
                        Err(refusal) => {
                            tracing::debug!(%addr, reason = %refusal.message(), "request refused at admission");
                            state.close_after();
                            (refusal.response(mcp), None)
                        }
                    };
                    let last = version <= hyper::Version::HTTP_11
                        && n >= MAX_REQUESTS_PER_HTTP1_CONNECTION;
                    if last || admission.must_close(conn_id, state.reserve) {
                        state.close_after();
                    }
                    if state.close.load(Ordering::SeqCst) {
                        mark_close(&mut res, version);
                    }
                    Ok::<_, std::convert::Infallible>(res.map(|body| Tracked {
                        body,
                        _in_flight: in_flight,
                        _charge: charge,
                    }))
                }
            })
        };
        let builder = builder.clone();
        let mut stopping = stopping.clone();
        let admission = admission.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let stream = match tls {
                None => Stream::Plain(stream),
                // The handshake is part of the first request: same fuse, same slot.
                Some(tls) => tokio::select! {
                    r = tokio::time::timeout_at(accepted + fuse, tls.acceptor().accept(stream)) => match r {
                        Ok(Ok(s)) => Stream::Tls(Box::new(s)),
                        Ok(Err(e)) => {
                            tracing::debug!(%addr, error = %e, "TLS handshake failed");
                            admission.ended(conn_id);
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%addr, "TLS handshake not finished at its deadline: closed");
                            admission.ended(conn_id);
                            return;
                        }
                    },
                    _ = stopping.changed() => {
                        admission.ended(conn_id);
                        return;
                    }
                },
            };
            let conn = builder.serve_connection_with_upgrades(
                TokioIo::new(stream),
                TowerToHyperService::new(svc),
            );
            tokio::pin!(conn);
            // Set once the connection was asked to end gracefully: (when, whether
            // because it was idle rather than for shutdown).
            let mut closing: Option<(Instant, bool)> = None;
            // A reserve connection is dropped at this time unless a signature on it
            // has verified by then, whatever is in flight.
            let mut reserve_end = state.reserve.then_some(accepted + RESERVE_FUSE);
            loop {
                if closing.is_none() && state.close.load(Ordering::SeqCst) {
                    // Answers in flight (a stream, the answer just given) are
                    // finished; nothing more is read.
                    conn.as_mut().graceful_shutdown();
                    closing = Some((Instant::now(), false));
                }
                let wake = match closing {
                    // An idle connection gets one more fuse to finish its GOAWAY.
                    Some((since, true)) => Some(since + fuse),
                    Some((_, false)) => None,
                    None => state.deadline(accepted, fuse),
                };
                let wake = match (wake, reserve_end) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
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
                        if reserve_end.is_some_and(|at| at <= Instant::now()) {
                            if !admission.verified(conn_id) {
                                tracing::debug!(%addr, "reserve connection without a verified signature closed");
                                break;
                            }
                            // Verified: from now on an ordinary connection.
                            reserve_end = None;
                            continue;
                        }
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
            admission.ended(conn_id);
            drop(slot);
        });
    }
    drop(listener);
    let _ = stop.send(true);
    let all = u32::try_from(MAX_CONNECTIONS).unwrap_or(u32::MAX);
    let reserved = u32::try_from(APPROVER_RESERVE).unwrap_or(u32::MAX);
    tokio::select! {
        _ = async { let _ = tokio::join!(slots.acquire_many(all), reserve.acquire_many(reserved)); } => {},
        _ = tokio::time::sleep(SHUTDOWN_GRACE) => tracing::warn!("in-flight requests did not finish in time"),
    }
}
