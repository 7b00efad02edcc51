//! The accept loop against clients that connect and then say nothing, or only
//! part of what they must (issue #11, item 2), in-process on a real loopback port
//! served by the production accept loop (`approval_server::listener::serve`).
//!
//! One rule is checked: from accept to its first complete request a connection
//! has one deadline (`HEADER_READ_TIMEOUT`, or `PRESSURED_HEADER_TIMEOUT` when it was
//! accepted under pressure) whatever the protocol, so silent sockets and sockets
//! that only sent the HTTP/2 preface cannot hold the connection slots; after
//! that, an HTTP/2 connection with no request in flight is closed like an idle
//! HTTP/1 keep-alive one.

mod common;

use approval_server::capacity::MAX_CONNECTIONS;
use approval_server::http::{self, McpOptions};
use approval_server::listener::{HEADER_READ_TIMEOUT, PRESSURED_HEADER_TIMEOUT};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What a client sends first on an HTTP/2 connection with prior knowledge.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A test server behind the production listener, and the task serving it.
struct Srv {
    _inner: common::TestServer,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Srv {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start() -> Srv {
    let inner = common::start().await;
    let app = http::app(inner.svc.clone(), &McpOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(approval_server::listener::serve(
        listener,
        app,
        approval_server::capacity::Admission::new(inner.svc.clone()),
        None,
        std::future::pending(),
    ));
    Srv {
        _inner: inner,
        addr,
        task,
    }
}

/// Raises this process's soft limit on open files to at least `want` (up to the
/// hard limit): the test holds both ends of every socket.
fn raise_fd_limit(want: libc::rlim_t) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed in.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return;
        }
        if lim.rlim_cur < want {
            lim.rlim_cur = lim.rlim_max.min(want);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Reads (and discards) until the peer closes the socket (EOF or reset) or
/// `give_up` passes; returns when it was seen closed, after `since`.
async fn closed_after(mut c: TcpStream, since: Instant, give_up: Instant) -> Option<Duration> {
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(give_up.into(), c.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(since.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

/// 1,100 sockets that send nothing and 50 that send only the HTTP/2 preface,
/// more than the listener has slots: `/healthz` still answers within 3 s, and
/// every one of those sockets is closed by the server at its deadline (the
/// first-request time-out, plus slack for a loaded machine). Before the fix the
/// protocol detection had no time-out: the silent sockets held every slot
/// forever and `/healthz` never answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_preface_only_sockets_cannot_wedge_the_listener() {
    const SILENT: usize = 1100;
    const PREFACE_ONLY: usize = 50;
    const { assert!(SILENT + PREFACE_ONLY > MAX_CONNECTIONS) };
    // Both ends of every socket live in this process.
    raise_fd_limit(((SILENT + PREFACE_ONLY) * 2 + 512) as libc::rlim_t);
    let s = start().await;
    let mut socks = Vec::with_capacity(SILENT + PREFACE_ONLY);
    let opened = Instant::now();
    for i in 0..SILENT + PREFACE_ONLY {
        let mut c = TcpStream::connect(s.addr).await.unwrap_or_else(|e| {
            panic!(
                "socket {i}: {e} (is `ulimit -n` above {}?)",
                (SILENT + PREFACE_ONLY) * 2
            )
        });
        if i >= SILENT {
            c.write_all(H2_PREFACE).await.unwrap();
        }
        socks.push(c);
    }
    eprintln!(
        "opened {SILENT} silent and {PREFACE_ONLY} preface-only sockets in {:?}",
        opened.elapsed()
    );
    // Every socket has its deadline; watch for the server closing each one.
    let give_up = opened + HEADER_READ_TIMEOUT + Duration::from_secs(8);
    let watchers: Vec<_> = socks
        .into_iter()
        .map(|c| tokio::spawn(closed_after(c, opened, give_up)))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let http = reqwest::Client::new();
    let t = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        http.get(format!("http://{}/healthz", s.addr)).send(),
    )
    .await;
    let healthz = t.elapsed();
    let status = match r {
        Ok(Ok(r)) => r.status().as_u16(),
        Ok(Err(e)) => panic!("healthz failed after {healthz:?}: {e}"),
        Err(_) => panic!(
            "healthz did not answer in {healthz:?} with {SILENT} silent and \
             {PREFACE_ONLY} preface-only sockets open: the listener is wedged"
        ),
    };
    assert_eq!(status, 200);
    eprintln!(
        "healthz answered after {healthz:?} behind {SILENT} silent + {PREFACE_ONLY} \
         preface-only sockets ({MAX_CONNECTIONS} slots, pressured fuse {PRESSURED_HEADER_TIMEOUT:?})"
    );
    assert!(
        healthz < Duration::from_secs(3),
        "healthz took {healthz:?} (must be under 3 s)"
    );
    let mut closed = Vec::with_capacity(watchers.len());
    for w in watchers {
        closed.push(w.await.unwrap());
    }
    let silent_open = closed[..SILENT].iter().filter(|c| c.is_none()).count();
    let preface_open = closed[SILENT..].iter().filter(|c| c.is_none()).count();
    let latest = closed.iter().flatten().max().copied().unwrap_or_default();
    let early = closed
        .iter()
        .flatten()
        .filter(|d| **d < PRESSURED_HEADER_TIMEOUT + Duration::from_secs(2))
        .count();
    eprintln!(
        "closed by the server: {} of {SILENT} silent, {} of {PREFACE_ONLY} preface-only; \
         {early} within the pressured fuse (+2 s), the last after {latest:?} \
         (first-request time-out {HEADER_READ_TIMEOUT:?})",
        SILENT - silent_open,
        PREFACE_ONLY - preface_open
    );
    assert_eq!(
        (silent_open, preface_open),
        (0, 0),
        "sockets still open {:?} after accept (silent, preface-only)",
        give_up - opened
    );
    assert!(
        latest <= HEADER_READ_TIMEOUT + Duration::from_secs(8),
        "the last socket was closed only after {latest:?}"
    );
}

/// One HTTP/2 frame: (type, flags, stream id, payload).
type Frame = (u8, u8, u32, Vec<u8>);

fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.push(ty);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

async fn read_frame(c: &mut TcpStream) -> std::io::Result<Frame> {
    let mut head = [0u8; 9];
    c.read_exact(&mut head).await?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    c.read_exact(&mut payload).await?;
    Ok((head[3], head[4], stream, payload))
}

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;

/// Opens an HTTP/2 connection (prior knowledge), sends `GET /healthz` on stream 1
/// and reads until its response has ended. Answers the server's SETTINGS and PINGs.
async fn h2_get_healthz(addr: SocketAddr) -> TcpStream {
    let mut c = TcpStream::connect(addr).await.unwrap();
    let authority = addr.to_string();
    // HPACK: :method GET (static 2), :scheme http (static 6), :path (name 4,
    // literal), :authority (name 1, literal); no Huffman, no indexing.
    let mut block = vec![0x82, 0x86, 0x04, 8];
    block.extend_from_slice(b"/healthz");
    block.push(0x01);
    block.push(authority.len() as u8);
    block.extend_from_slice(authority.as_bytes());
    let mut hello = H2_PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    hello.extend(frame(HEADERS, END_STREAM | 0x4, 1, &block));
    c.write_all(&hello).await.unwrap();
    let mut status_seen = false;
    loop {
        let (ty, flags, stream, payload) =
            tokio::time::timeout(Duration::from_secs(10), read_frame(&mut c))
                .await
                .expect("no HTTP/2 response in 10 s")
                .expect("connection closed before the response");
        match ty {
            SETTINGS if flags & ACK == 0 => {
                c.write_all(&frame(SETTINGS, ACK, 0, &[])).await.unwrap()
            }
            PING if flags & ACK == 0 => c.write_all(&frame(PING, ACK, 0, &payload)).await.unwrap(),
            HEADERS if stream == 1 => {
                // :status 200 is static index 8.
                assert_eq!(payload.first(), Some(&0x88), "not 200: {payload:?}");
                status_seen = true;
                if flags & END_STREAM != 0 {
                    break;
                }
            }
            DATA if stream == 1 && flags & END_STREAM != 0 => break,
            GOAWAY => panic!("GOAWAY before the response"),
            _ => {}
        }
    }
    assert!(status_seen);
    c
}

/// An HTTP/2 connection that made one request and then sits idle, answering
/// the server's pings, is closed (GOAWAY, then EOF) once it has been idle for the
/// idle time-out, as an idle HTTP/1 keep-alive connection is. Before the fix it
/// stayed open for good, holding a connection slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_is_closed() {
    let s = start().await;
    let mut c = h2_get_healthz(s.addr).await;
    let answered = Instant::now();
    let give_up = HEADER_READ_TIMEOUT + Duration::from_secs(8);
    let mut goaway = false;
    let closed = loop {
        match tokio::time::timeout_at((answered + give_up).into(), read_frame(&mut c)).await {
            Err(_) => break None,
            Ok(Err(_)) => break Some(answered.elapsed()),
            Ok(Ok((ty, flags, _, payload))) => match ty {
                GOAWAY => goaway = true,
                PING if flags & ACK == 0 => {
                    let _ = c.write_all(&frame(PING, ACK, 0, &payload)).await;
                }
                _ => {}
            },
        }
    };
    eprintln!("idle HTTP/2 connection: GOAWAY {goaway}, closed after {closed:?}");
    let closed = closed.unwrap_or_else(|| {
        panic!("an idle HTTP/2 connection was still open {give_up:?} after its last response")
    });
    assert!(goaway, "the idle connection was closed without a GOAWAY");
    assert!(
        closed >= HEADER_READ_TIMEOUT - Duration::from_millis(500),
        "closed after {closed:?}, before the idle time-out"
    );
}

/// The `Authorization` header of a signed read as `who` at `at` (unix seconds).
fn read_auth(server_id: &approval_core::ServerId, who: &str, at: i64, path: &str) -> String {
    let k = common::key(who);
    approval_core::message::sign_read(&k.key, &k.name, server_id, at, "GET", path)
}

/// An event stream is a request in flight for as long as it streams, so the idle
/// time-out does not cut it, over HTTP/1 or HTTP/2, while nothing is sent on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_event_stream_is_not_closed_as_idle() {
    let s = start().await;
    let now = approval_server::clock::Clock::now(&s._inner.clock).unix();
    let h1 = reqwest::Client::new();
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let url = format!("http://{}/v1/events", s.addr);
    let mut streams = vec![];
    for (who, client) in [("alice", &h1), ("bob", &h2)] {
        let r = client
            .get(&url)
            .header(
                "Authorization",
                read_auth(s._inner.svc.store().server_id(), who, now, "/v1/events"),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{who}");
        streams.push((who, r.version(), r));
    }
    assert_eq!(streams[0].1, reqwest::Version::HTTP_11);
    assert_eq!(streams[1].1, reqwest::Version::HTTP_2);
    let until = Instant::now() + HEADER_READ_TIMEOUT + Duration::from_secs(3);
    for (who, version, mut r) in streams {
        let ended = loop {
            match tokio::time::timeout_at(until.into(), r.chunk()).await {
                Err(_) => break None,
                Ok(Ok(Some(_))) => {}
                Ok(Ok(None)) => break Some("ended"),
                Ok(Err(_)) => break Some("failed"),
            }
        };
        assert_eq!(
            ended,
            None,
            "{who}'s event stream ({version:?}) was cut before {:?} passed",
            HEADER_READ_TIMEOUT + Duration::from_secs(3)
        );
    }
}

/// The other half of the idle rule: a request written on a keep-alive connection at
/// the moment the server closes it for idling is lost ("connection closed before
/// message completed", stop 24's CI failure), so the project's own clients must drop
/// an idle connection well before [`HEADER_READ_TIMEOUT`]. The peer answers with the
/// client's port, which shows whether a request reused a connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_clients_drop_an_idle_connection_before_a_server_would() {
    use axum::extract::ConnectInfo;
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
            peer.port().to_string()
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    let client = approval_server::outbound::client_builder().build().unwrap();
    let port = || async {
        let r = client.get(format!("http://{addr}/")).send().await.unwrap();
        r.text().await.unwrap()
    };
    let pool_idle = Duration::from_secs(approval_core::time::CLIENT_POOL_IDLE_SECS);
    assert!(pool_idle + Duration::from_secs(2) <= HEADER_READ_TIMEOUT);

    let first = port().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        port().await,
        first,
        "a connection idle for 1 s was not reused"
    );
    tokio::time::sleep(pool_idle + Duration::from_millis(1500)).await;
    assert_ne!(
        port().await,
        first,
        "a connection idle for longer than the client's pool time-out was reused"
    );
    task.abort();
}
