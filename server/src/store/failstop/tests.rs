//! Fail-stop tests: a faulty store, a hanging flush, the watchdog.

use super::*;
use crate::store::SledStore;

/// What a faulty store does on `create` and on `flush_blocking`.
#[derive(Clone, Copy)]
enum Fault {
    None,
    /// Fails like a full disk.
    Full,
    /// Returns only after this long, like sled's deadlock (for a while).
    Hang(Duration),
}

impl Fault {
    fn apply<T>(self, op: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
        match self {
            Fault::None => op(),
            Fault::Full => Err(StoreError::Backend(
                "No space left on device (os error 28)".into(),
            )),
            Fault::Hang(d) => {
                std::thread::sleep(d);
                op()
            }
        }
    }
}

/// The real store, with a fault injected into creates and flushes.
struct Faulty {
    inner: SledStore,
    create: Fault,
    flush: Fault,
}

impl Store for Faulty {
    fn server_id(&self) -> &ServerId {
        self.inner.server_id()
    }
    fn server_key(&self) -> Result<Option<approval_core::PublicKey>, StoreError> {
        self.inner.server_key()
    }
    fn bind_server_key(
        &self,
        key: &approval_core::PublicKey,
    ) -> Result<approval_core::PublicKey, StoreError> {
        self.inner.bind_server_key(key)
    }
    fn get(&self, id: &ProposalId) -> Result<Option<ProposalRecord>, StoreError> {
        self.inner.get(id)
    }
    fn raise(&self, name: &str, value: u64) -> Result<crate::store::Raise, StoreError> {
        self.inner.raise(name, value)
    }
    fn config_head(&self) -> Result<Option<approval_core::governance::ConfigHead>, StoreError> {
        self.inner.config_head()
    }
    fn advance_config(
        &self,
        from: u64,
        head: &approval_core::governance::ConfigHead,
        events: Vec<AuditEvent>,
    ) -> Result<bool, StoreError> {
        self.inner.advance_config(from, head, events)
    }
    fn create(
        &self,
        r: &ProposalRecord,
        e: Vec<AuditEvent>,
        l: PendingLimits,
    ) -> Result<(), StoreError> {
        self.create.apply(|| self.inner.create(r, e, l))
    }
    fn put_policy(&self, h: &Sha256Hex, c: &serde_json::Value) -> Result<(), StoreError> {
        self.inner.put_policy(h, c)
    }
    fn get_policy(&self, h: &Sha256Hex) -> Result<Option<serde_json::Value>, StoreError> {
        self.inner.get_policy(h)
    }
    fn pending_count(&self, a: Option<&AgentName>) -> Result<u64, StoreError> {
        self.inner.pending_count(a)
    }
    fn update(&self, n: &ProposalRecord, e: Vec<AuditEvent>) -> Result<Cas, StoreError> {
        self.inner.update(n, e)
    }
    fn list_status(&self, s: Status, l: usize) -> Result<Vec<ProposalRecord>, StoreError> {
        self.inner.list_status(s, l)
    }
    fn list_agent(&self, a: &AgentName, l: usize) -> Result<Vec<ProposalRecord>, StoreError> {
        self.inner.list_agent(a, l)
    }
    fn page(
        &self,
        index: &crate::store::ListIndex,
        after: Option<&crate::store::Cursor>,
        limit: usize,
        keep: &mut dyn FnMut(&crate::store::RecordHead) -> bool,
    ) -> Result<crate::store::HeadPage, StoreError> {
        self.inner.page(index, after, limit, keep)
    }
    fn page_records(
        &self,
        index: &crate::store::ListIndex,
        after: Option<&crate::store::Cursor>,
        limit: usize,
        keep: &mut dyn FnMut(&crate::store::RecordHead) -> bool,
    ) -> Result<crate::store::RecordPage, StoreError> {
        self.inner.page_records(index, after, limit, keep)
    }
    fn due(&self, n: Timestamp, l: usize) -> Result<Vec<crate::store::RecordHead>, StoreError> {
        self.inner.due(n, l)
    }
    fn count_status(&self, s: Status) -> Result<usize, StoreError> {
        self.inner.count_status(s)
    }
    fn audit(&self) -> Result<AuditLog, StoreError> {
        self.inner.audit()
    }
    fn flush_blocking(&self) -> Result<(), StoreError> {
        self.flush.apply(|| self.inner.flush_blocking())
    }
}

/// A fail-stop store over `Faulty`, and the reasons its halt action was given.
fn faulty(
    dir: &tempfile::TempDir,
    create: Fault,
    flush: Fault,
    deadline: Duration,
) -> (Arc<FailStop>, Arc<Mutex<Vec<String>>>) {
    let halted = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = halted.clone();
    let inner = Faulty {
        inner: SledStore::open(dir.path()).unwrap(),
        create,
        flush,
    };
    let store = FailStop::with_deadline(
        Arc::new(inner),
        move |why| seen.lock().unwrap().push(why.to_owned()),
        deadline,
    );
    (Arc::new(store), halted)
}

fn record(id: &str) -> ProposalRecord {
    crate::store::contract::record(id, "local", 1_800_000_000)
}

#[test]
fn the_first_write_failure_halts_once_and_refuses_everything_after() {
    let dir = tempfile::tempdir().unwrap();
    let (store, halted) = faulty(&dir, Fault::Full, Fault::None, STALL_DEADLINE);
    let rec = record("p-1");
    assert!(store.get(rec.id()).unwrap().is_none());
    assert_eq!(store.failure(), None);
    let e = store
        .create(&rec, vec![], PendingLimits::default())
        .unwrap_err();
    assert!(e.to_string().contains("No space left"), "{e}");
    assert!(store.failure().unwrap().contains("No space left"));
    // Reads refuse too: nothing applied but unflushed may be reported.
    let e = store.get(rec.id()).unwrap_err();
    assert!(e.to_string().contains("must be restarted"), "{e}");
    assert!(store.flush_blocking().is_err());
    let _ = store.create(&rec, vec![], PendingLimits::default());
    assert_eq!(halted.lock().unwrap().len(), 1, "halt runs once");
}

#[test]
fn metrics_show_the_fail_stop_once_a_write_failed() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _halted) = faulty(&dir, Fault::Full, Fault::None, STALL_DEADLINE);
    let metrics = crate::metrics::Metrics::new();
    let sampled = store.clone();
    metrics.set_sampler(Box::new(move || metrics_sample(sampled.as_ref())));
    let text = metrics.render();
    assert!(text.lines().any(|l| l == "approval_fail_stop 0"), "{text}");
    assert!(
        text.lines().any(|l| l == "approval_pending_proposals 0"),
        "{text}"
    );
    let _ = store.create(&record("p-1"), vec![], PendingLimits::default());
    let text = metrics.render();
    assert!(text.lines().any(|l| l == "approval_fail_stop 1"), "{text}");
}

/// Waits (up to 10 s) for the halt action to have run.
fn halt_reason(halted: &Mutex<Vec<String>>) -> Option<String> {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if let Some(why) = halted.lock().unwrap().first() {
            return Some(why.clone());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// The agent's lever on the flush path (`store::GroupCommit::flush`): a write of its
/// own whose flush hangs (a disk that stalls) must hold no async worker. Round 5 of
/// issue #14 ran a lone writer's flush on the worker that asked for it; that worker
/// was often the one parked on tokio's I/O and timer driver (it received the request
/// that led to the write), and the other worker sleeps on a condition variable that
/// nothing signals, so while the flush hung no socket and no timer was served at all:
/// CI hung on `an_identical_decision_is_not_acknowledged_before_the_first_is_durable`.
/// Here the flush starts from an I/O event, exactly that way, and while it hangs a
/// timer fires, a new connection is served, and a second writer waits for the first
/// flush without holding a worker either; both writes end durable once it returns.
/// The checks are timed by the test's own thread, never by the runtime under test.
#[test]
fn a_flush_that_hangs_holds_no_worker_and_stops_no_socket_or_timer() {
    for (workers, rounds) in [(2, 3), (1, 1)] {
        for round in 0..rounds {
            flush_hangs_on(workers, round);
        }
    }
}

/// How long the flush-hang tests hold their flush: long enough for the three
/// checks (700 ms each at most) on a loaded machine.
const HANG: Duration = Duration::from_secs(3);

/// A store whose flushes hang for [`HANG`], with one write (`p-1`) waiting for
/// its flush, and the group commit over it.
#[allow(clippy::type_complexity)]
fn hanging_flush() -> (
    tempfile::TempDir,
    Arc<FailStop>,
    Arc<Mutex<Vec<String>>>,
    Arc<crate::store::GroupCommit>,
) {
    let dir = tempfile::tempdir().unwrap();
    let (store, halted) = faulty(&dir, Fault::None, Fault::Hang(HANG), STALL_DEADLINE);
    let commit = Arc::new(crate::store::GroupCommit::new(store.clone()));
    store
        .create(&record("p-1"), vec![], PendingLimits::default())
        .unwrap();
    (dir, store, halted, commit)
}

/// Sends a tick every 10 ms until nobody listens.
async fn ticker(tick: std::sync::mpsc::Sender<()>) {
    let mut every = tokio::time::interval(Duration::from_millis(10));
    loop {
        every.tick().await;
        if tick.send(()).is_err() {
            return;
        }
    }
}

/// The shared runtime of the flush-hang tests, set up before any flush: `workers`
/// workers, a connection echoed whenever it comes (on the returned address), and a
/// timer that ticks every 10 ms (into the returned receiver). Nothing is spawned
/// while a flush hangs until the checks are done: a spawn wakes a sleeping worker,
/// which would mend a stalled driver and hide the fault.
fn shared_runtime(
    workers: usize,
) -> (
    tokio::runtime::Runtime,
    std::net::SocketAddr,
    std::sync::mpsc::Receiver<()>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    let serve = rt.block_on(async { tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap() });
    let addr = serve.local_addr().unwrap();
    rt.spawn(async move {
        let (mut conn, _) = serve.accept().await.unwrap();
        let mut b = [0u8; 1];
        conn.read_exact(&mut b).await.unwrap();
        conn.write_all(&b).await.unwrap();
    });
    let (tick, ticks) = std::sync::mpsc::channel();
    rt.spawn(ticker(tick));
    (rt, addr, ticks)
}

/// The checks, made while a flush hangs, each timed by the test's own thread (700
/// ms at most): the shared runtime's timer fires, a new connection is served, and
/// a second writer (`p-2`) waits for the flush under way without holding a worker
/// (the timer still fires). Returns that writer's flush.
fn shared_runtime_keeps_serving(
    label: &str,
    rt: &tokio::runtime::Runtime,
    addr: std::net::SocketAddr,
    ticks: &std::sync::mpsc::Receiver<()>,
    store: &Arc<FailStop>,
    commit: &Arc<crate::store::GroupCommit>,
) -> tokio::task::JoinHandle<Result<(), StoreError>> {
    use std::io::{Read, Write};
    while ticks.try_recv().is_ok() {}
    ticks
        .recv_timeout(Duration::from_millis(700))
        .unwrap_or_else(|_| panic!("{label}: no timer fired while a flush hung"));
    let mut other = std::net::TcpStream::connect(addr).unwrap();
    other
        .set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    other.write_all(b"r").unwrap();
    let mut echo = [0u8; 1];
    other
        .read_exact(&mut echo)
        .unwrap_or_else(|e| panic!("{label}: no socket was served while a flush hung: {e}"));
    store
        .create(&record("p-2"), vec![], PendingLimits::default())
        .unwrap();
    let c = commit.clone();
    let waiting = rt.spawn(async move { c.flush().await });
    while ticks.try_recv().is_ok() {}
    ticks
        .recv_timeout(Duration::from_millis(700))
        .unwrap_or_else(|_| panic!("{label}: the runtime stopped behind a second writer"));
    assert!(!waiting.is_finished(), "{label}: the second flush waits");
    waiting
}

fn flush_hangs_on(workers: usize, round: usize) {
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    let (_dir, store, halted, commit) = hanging_flush();
    let (rt, serve_addr, ticks) = shared_runtime(workers);
    // The write's request: a byte on a connection; its arrival starts the flush.
    let wire = rt.block_on(async { tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap() });
    let wire_addr = wire.local_addr().unwrap();
    let c = commit.clone();
    let lone = rt.spawn(async move {
        let (mut conn, _) = wire.accept().await.unwrap();
        let mut b = [0u8; 1];
        conn.read_exact(&mut b).await.unwrap();
        c.flush().await
    });
    let mut request = std::net::TcpStream::connect(wire_addr).unwrap();
    // The workers go idle, one of them parked on the driver, before the byte comes.
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    request.write_all(b"w").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(!lone.is_finished(), "the flush is hanging");
    let label = format!("{workers} worker(s), round {round}");
    let waiting = shared_runtime_keeps_serving(&label, &rt, serve_addr, &ticks, &store, &commit);
    assert!(
        t0.elapsed() < HANG,
        "{label}: the checks ran while the flush hung"
    );

    rt.block_on(async {
        lone.await.unwrap().unwrap();
        waiting.await.unwrap().unwrap();
    });
    assert!(t0.elapsed() >= HANG);
    assert!(
        commit.fsync_count() >= 2,
        "{label}: the second write got a flush of its own"
    );
    assert!(
        halted.lock().unwrap().is_empty(),
        "{:?}",
        halted.lock().unwrap()
    );
}

/// The one thread that may block in a flush: the embedded stdio session's own
/// (`store::flush_inline_on_this_thread`), under a current-thread runtime that
/// serves that session alone. The attack: make the session's flush hang (a disk
/// that stalls) to keep approvers out. While it hangs, the shared runtime's timer
/// fires, a new connection is served there and another writer waits there without
/// a worker; the session's own runtime stands still, which shows the flush ran
/// right there rather than on the blocking pool.
#[test]
fn a_flush_that_hangs_on_the_stdio_sessions_thread_stops_nothing_else() {
    let (_dir, store, halted, commit) = hanging_flush();
    let (rt, serve_addr, ticks) = shared_runtime(2);
    // The session: its own thread and runtime, a ticker of its own, then its flush.
    let (session_tick, session_ticks) = std::sync::mpsc::channel();
    let (go, started) = std::sync::mpsc::channel::<()>();
    let c = commit.clone();
    let session = std::thread::spawn(move || {
        let own = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        crate::store::flush_inline_on_this_thread();
        own.block_on(async move {
            tokio::spawn(ticker(session_tick));
            tokio::time::sleep(Duration::from_millis(50)).await;
            go.send(()).unwrap();
            c.flush().await
        })
    });
    started.recv().unwrap();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(100));
    assert!(!session.is_finished(), "the flush is hanging");

    // The session's runtime stands still: its flush runs on its own thread.
    while session_ticks.try_recv().is_ok() {}
    assert!(
        session_ticks
            .recv_timeout(Duration::from_millis(300))
            .is_err(),
        "the session's runtime ran on while its flush hung: the flush was not inline"
    );
    let waiting = shared_runtime_keeps_serving(
        "the session's flush",
        &rt,
        serve_addr,
        &ticks,
        &store,
        &commit,
    );
    assert!(t0.elapsed() < HANG, "the checks ran while the flush hung");

    session.join().unwrap().unwrap();
    rt.block_on(async { waiting.await.unwrap().unwrap() });
    assert!(t0.elapsed() >= HANG - Duration::from_millis(100));
    assert!(
        halted.lock().unwrap().is_empty(),
        "{:?}",
        halted.lock().unwrap()
    );
}

#[test]
fn a_write_that_hangs_stops_the_store_while_it_still_hangs() {
    // The write hangs for 3 s; the deadline is 0.2 s. The store must be failed
    // (and refusing) long before the write returns, with nothing flushing.
    let dir = tempfile::tempdir().unwrap();
    let deadline = Duration::from_millis(200);
    let (store, halted) = faulty(
        &dir,
        Fault::Hang(Duration::from_secs(3)),
        Fault::None,
        deadline,
    );
    let started = Instant::now();
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            store.create(&record("p-hang"), vec![], PendingLimits::default())
        })
    };
    let why = halt_reason(&halted).expect("the watchdog halts a hung write");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(
        why.contains("a write to the store has not returned"),
        "{why}"
    );
    let e = store.get(record("p-other").id()).unwrap_err();
    assert!(e.to_string().contains("must be restarted"), "{e}");
    writer.join().unwrap().unwrap();
    assert_eq!(halted.lock().unwrap().len(), 1, "halt runs once");
}

#[test]
fn a_flush_that_hangs_stops_the_store_too() {
    let dir = tempfile::tempdir().unwrap();
    let deadline = Duration::from_millis(200);
    let (store, halted) = faulty(
        &dir,
        Fault::None,
        Fault::Hang(Duration::from_secs(3)),
        deadline,
    );
    let flusher = {
        let store = store.clone();
        std::thread::spawn(move || store.flush_blocking())
    };
    let why = halt_reason(&halted).expect("the watchdog halts a hung flush");
    assert!(
        why.contains("a flush to the store has not returned"),
        "{why}"
    );
    let _ = flusher.join().unwrap();
}

#[test]
fn writes_and_flushes_that_return_in_time_never_trip_the_watchdog() {
    // Each slow step (0.2 s, plus the real write or fsync) stays well under the
    // 1.5 s deadline, with room for a loaded CI disk; ten in a row, over 2 s in
    // all, must not add up to a stall.
    let dir = tempfile::tempdir().unwrap();
    let slow = Fault::Hang(Duration::from_millis(200));
    let (store, halted) = faulty(&dir, slow, slow, Duration::from_millis(1500));
    for i in 0..5 {
        store
            .create(&record(&format!("p-{i}")), vec![], PendingLimits::default())
            .unwrap();
        store.flush_blocking().unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(halted.lock().unwrap().is_empty());
    assert_eq!(store.failure(), None);
}
