//! Fail-stop on storage failure: when the store cannot write or flush, the server
//! stops instead of carrying on.
//!
//! Why stop: after an I/O error (a full disk, a failing device) sled 0.34 refuses
//! every later operation, or its flush never returns; and a write that was applied
//! in memory but not flushed must never be reported by a later read. A server that
//! kept answering would either hang its callers or tell them things that are not
//! on disk. Stopping is what a crash would do, and crashes are what the design is
//! built for: everything acknowledged is on disk, an EXECUTING proposal becomes
//! OUTCOME_UNKNOWN at the next start, nothing runs twice. A supervisor (systemd
//! `Restart=on-failure`, a container restart policy) starts it again; once the
//! disk has room, it carries on from its log.
//!
//! [`FailStop`] wraps a [`Store`]: the first backend error from a write or flush
//! (or a write or flush still running after [`STALL_DEADLINE`]) records the
//! failure, after which every call refuses at once with that reason, and calls the
//! halt action (in the binary: exit with [`EXIT_STORAGE_FAILED`] shortly after, so
//! the error answer reaches its caller first). `/healthz` reports the failure.
//!
//! Why writes are timed, not only flushes: sled 0.34.7 as published can deadlock
//! inside a write. A write that needs a new log segment waits for a file truncation
//! queued on sled's I/O thread pool, while every pool thread waits for the segment
//! lock that write holds (reproduced here under a long single-writer load; sled
//! issue #1412 reports the same hang). The write never returns and holds the store's
//! writer lock, so every later write queues behind it; if no flush happened to be
//! running, a flush-only watchdog would never fire and the server would hang for
//! good. The sled we build (vendor/sled) carries a fix for that deadlock; the
//! watchdog stays, because a device that stops answering, or a sled bug not yet
//! found, hangs a store the same way, and a hang must end in a restart.

use super::api::{AuditLog, Cas, Pending, PendingLimits, Store};
use super::error::StoreError;
use super::outbox::OutboxItem;
use super::page::{Cursor, HeadPage, ListIndex, RecordHead, RecordPage};
use crate::audit::AuditEvent;
use crate::record::ProposalRecord;
use approval_core::ids::AgentName;
use approval_core::status::Status;
use approval_core::{ProposalId, ServerId, Sha256Hex, Timestamp};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The process exit status after a storage failure (EX_IOERR from sysexits.h).
pub const EXIT_STORAGE_FAILED: i32 = 74;
/// A write or flush that has not returned after this long counts as a failed store.
pub const STALL_DEADLINE: Duration = Duration::from_secs(20);

type Halt = Box<dyn Fn(&str) + Send + Sync>;

/// What `/metrics` reads from the store when it is scraped (issue #36): the
/// fail-stop state ([`Store::failure`]: set once a [`FailStop`] has failed, or, on
/// PostgreSQL, while the database cannot be reached), the PENDING count and the
/// outbox. Read from the store, so it is exact on every instance. Blocking.
pub fn metrics_sample(store: &dyn Store) -> crate::metrics::Sample {
    let fail_stopped = store.failure().is_some();
    crate::metrics::Sample {
        // A stopped store answers nothing more: those are left out.
        pending: store.pending_count(None).ok().filter(|_| !fail_stopped),
        outbox: (!fail_stopped).then(|| store.outbox_counts()),
        fail_stopped,
    }
}

/// The writes and flushes running now, by start order: the first is the oldest.
#[derive(Default)]
struct InFlight {
    next: AtomicU64,
    running: Mutex<BTreeMap<u64, (Instant, &'static str)>>,
}

impl InFlight {
    fn running(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, (Instant, &'static str)>> {
        // Only inserts and removes happen under it: a poisoned map is still sound.
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `op`, registered as running for the watchdog until it returns (or
    /// unwinds: the guard unregisters it either way).
    fn time<T>(&self, what: &'static str, op: impl FnOnce() -> T) -> T {
        let _done = self.start(what);
        op()
    }

    /// [`InFlight::time`] for an operation awaited (registered until it is answered
    /// or dropped).
    async fn time_async<T>(&self, what: &'static str, op: impl Future<Output = T>) -> T {
        let _done = self.start(what);
        op.await
    }

    /// Registers an operation as running until the returned guard drops.
    fn start(&self, what: &'static str) -> Done<'_> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.running().insert(n, (Instant::now(), what));
        Done(self, n)
    }

    /// The oldest operation still running, if it has run longer than `deadline`.
    fn stalled(&self, deadline: Duration) -> Option<&'static str> {
        let running = self.running();
        let (_, (started, what)) = running.first_key_value()?;
        (started.elapsed() > deadline).then_some(*what)
    }
}

/// An operation's registration in [`InFlight`], removed when it drops.
struct Done<'a>(&'a InFlight, u64);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.running().remove(&self.1);
    }
}

/// A store that stops the server at its first write failure.
pub struct FailStop {
    inner: Arc<dyn Store>,
    failed: Arc<OnceLock<String>>,
    halt: Arc<Halt>,
    in_flight: Arc<InFlight>,
}

impl FailStop {
    /// Wraps `inner`; `halt` runs once, at the first failure, with the reason.
    /// A watchdog thread notices a write or flush that hangs for [`STALL_DEADLINE`].
    pub fn new(inner: Arc<dyn Store>, halt: impl Fn(&str) + Send + Sync + 'static) -> Self {
        Self::with_deadline(inner, halt, STALL_DEADLINE)
    }

    /// [`FailStop::new`] with another stall deadline (tests use a short one).
    pub fn with_deadline(
        inner: Arc<dyn Store>,
        halt: impl Fn(&str) + Send + Sync + 'static,
        deadline: Duration,
    ) -> Self {
        let s = Self {
            inner,
            failed: Arc::new(OnceLock::new()),
            halt: Arc::new(Box::new(halt)),
            in_flight: Arc::new(InFlight::default()),
        };
        // The watchdog holds the in-flight set weakly: it ends with the store.
        let (failed, halt) = (s.failed.clone(), s.halt.clone());
        let in_flight = Arc::downgrade(&s.in_flight);
        let tick = (deadline / 20).clamp(Duration::from_millis(10), Duration::from_secs(1));
        std::thread::Builder::new()
            .name("store-watchdog".into())
            .spawn(move || loop {
                std::thread::sleep(tick);
                let Some(in_flight) = in_flight.upgrade() else {
                    return;
                };
                if failed.get().is_some() {
                    return;
                }
                if let Some(what) = in_flight.stalled(deadline) {
                    let why = format!(
                        "a {what} to the store has not returned for {} s",
                        deadline.as_secs_f64()
                    );
                    fail(&failed, &halt, why);
                    return;
                }
            })
            .ok();
        s
    }

    /// The process's default halt action: log, give the answers under way a moment
    /// to leave, then exit with [`EXIT_STORAGE_FAILED`].
    pub fn exit_process(reason: &str) {
        tracing::error!(
            reason,
            "the store failed: stopping (exit status {EXIT_STORAGE_FAILED}) so that a restart \
             recovers from the store's log; free the disk or fix the device, then start again"
        );
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            std::process::exit(EXIT_STORAGE_FAILED);
        });
    }

    fn refused(&self) -> Result<(), StoreError> {
        match self.failed.get() {
            Some(why) => Err(StoreError::Stopped(format!(
                "the server's store failed earlier ({why}); it is stopping and must be restarted. \
                 This request read and changed nothing: try it again once the server is back"
            ))),
            None => Ok(()),
        }
    }

    /// An awaited write: refused once the store has failed, timed by the watchdog
    /// while it is awaited, its error weighed as a blocking write's is. The write is
    /// only asked for after the refusal check (`write` runs inside the future).
    fn write_async<'a, T: Send + 'a>(
        &'a self,
        write: impl FnOnce() -> Pending<'a, T> + Send + 'a,
    ) -> Pending<'a, T> {
        Box::pin(async move {
            self.refused()?;
            let r = self.in_flight.time_async("write", write()).await;
            self.watch(r)
        })
    }

    /// Passes a write's result through, failing the store on a backend error.
    fn watch<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Backend(e)) = &r {
            fail(&self.failed, &self.halt, e.clone());
        }
        r
    }
}

fn fail(failed: &OnceLock<String>, halt: &Halt, why: String) {
    if failed.set(why.clone()).is_ok() {
        halt(&why);
    }
}

impl Store for FailStop {
    fn set_outbox(&self, on: bool, cap: u64) {
        self.inner.set_outbox(on, cap)
    }
    fn outbox_page(&self, limit: usize) -> Result<Vec<(u64, OutboxItem)>, StoreError> {
        self.refused()?;
        self.inner.outbox_page(limit)
    }
    fn outbox_due(
        &self,
        now_ms: u64,
        per_kind: usize,
        limit: usize,
    ) -> Result<Vec<(u64, OutboxItem)>, StoreError> {
        self.refused()?;
        self.inner.outbox_due(now_ms, per_kind, limit)
    }
    fn outbox_put(&self, seq: u64, item: &OutboxItem) -> Result<(), StoreError> {
        self.refused()?;
        self.inner.outbox_put(seq, item)
    }
    fn outbox_remove(&self, seq: u64) -> Result<(), StoreError> {
        self.refused()?;
        self.inner.outbox_remove(seq)
    }
    fn outbox_counts(&self) -> (u64, u64) {
        self.inner.outbox_counts()
    }
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
        self.refused()?;
        self.inner.get(id)
    }
    fn get_latest(&self, id: &ProposalId) -> Result<Option<ProposalRecord>, StoreError> {
        self.refused()?;
        self.inner.get_latest(id)
    }
    fn get_async<'a>(&'a self, id: &'a ProposalId) -> Pending<'a, Option<ProposalRecord>> {
        match self.refused() {
            Ok(()) => self.inner.get_async(id),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
    fn get_latest_async<'a>(&'a self, id: &'a ProposalId) -> Pending<'a, Option<ProposalRecord>> {
        match self.refused() {
            Ok(()) => self.inner.get_latest_async(id),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
    fn raise(&self, name: &str, value: u64) -> Result<super::Raise, StoreError> {
        self.refused()?;
        let r = self
            .in_flight
            .time("write", || self.inner.raise(name, value));
        self.watch(r)
    }
    fn config_head(&self) -> Result<Option<approval_core::governance::ConfigHead>, StoreError> {
        self.refused()?;
        let r = self.in_flight.time("read", || self.inner.config_head());
        self.watch(r)
    }
    fn config_version(&self) -> Result<u64, StoreError> {
        self.refused()?;
        let r = self.in_flight.time("read", || self.inner.config_version());
        self.watch(r)
    }
    fn advance_config(
        &self,
        from: u64,
        head: &approval_core::governance::ConfigHead,
        events: Vec<AuditEvent>,
    ) -> Result<bool, StoreError> {
        self.refused()?;
        let r = self
            .in_flight
            .time("write", || self.inner.advance_config(from, head, events));
        self.watch(r)
    }
    fn create(
        &self,
        rec: &ProposalRecord,
        events: Vec<AuditEvent>,
        limits: PendingLimits,
    ) -> Result<(), StoreError> {
        self.refused()?;
        let r = self
            .in_flight
            .time("write", || self.inner.create(rec, events, limits));
        self.watch(r)
    }
    fn put_policy(
        &self,
        hash: &Sha256Hex,
        canonical: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.refused()?;
        let r = self
            .in_flight
            .time("write", || self.inner.put_policy(hash, canonical));
        self.watch(r)
    }
    fn get_policy(&self, hash: &Sha256Hex) -> Result<Option<serde_json::Value>, StoreError> {
        self.refused()?;
        self.inner.get_policy(hash)
    }
    fn pending_count(&self, agent: Option<&AgentName>) -> Result<u64, StoreError> {
        self.refused()?;
        self.inner.pending_count(agent)
    }
    fn update(&self, new: &ProposalRecord, events: Vec<AuditEvent>) -> Result<Cas, StoreError> {
        self.refused()?;
        let r = self
            .in_flight
            .time("write", || self.inner.update(new, events));
        self.watch(r)
    }
    fn create_async<'a>(
        &'a self,
        rec: &'a ProposalRecord,
        events: Vec<AuditEvent>,
        limits: PendingLimits,
    ) -> Pending<'a, ()> {
        self.write_async(move || self.inner.create_async(rec, events, limits))
    }
    fn update_async<'a>(
        &'a self,
        new: &'a ProposalRecord,
        events: Vec<AuditEvent>,
    ) -> Pending<'a, Cas> {
        self.write_async(move || self.inner.update_async(new, events))
    }
    fn list_status(&self, status: Status, limit: usize) -> Result<Vec<ProposalRecord>, StoreError> {
        self.refused()?;
        self.inner.list_status(status, limit)
    }
    fn list_agent(
        &self,
        agent: &AgentName,
        limit: usize,
    ) -> Result<Vec<ProposalRecord>, StoreError> {
        self.refused()?;
        self.inner.list_agent(agent, limit)
    }
    fn page(
        &self,
        index: &ListIndex,
        after: Option<&Cursor>,
        limit: usize,
        keep: &mut dyn FnMut(&RecordHead) -> bool,
    ) -> Result<HeadPage, StoreError> {
        self.refused()?;
        self.inner.page(index, after, limit, keep)
    }
    fn page_records(
        &self,
        index: &ListIndex,
        after: Option<&Cursor>,
        limit: usize,
        keep: &mut dyn FnMut(&RecordHead) -> bool,
    ) -> Result<RecordPage, StoreError> {
        self.refused()?;
        self.inner.page_records(index, after, limit, keep)
    }
    fn due(&self, now: Timestamp, limit: usize) -> Result<Vec<RecordHead>, StoreError> {
        self.refused()?;
        self.inner.due(now, limit)
    }
    fn count_status(&self, status: Status) -> Result<usize, StoreError> {
        self.refused()?;
        self.inner.count_status(status)
    }
    fn audit(&self) -> Result<AuditLog, StoreError> {
        self.refused()?;
        self.inner.audit()
    }
    fn flush_blocking(&self) -> Result<(), StoreError> {
        self.refused()?;
        let r = self.in_flight.time("flush", || self.inner.flush_blocking());
        self.watch(r)
    }
    fn failure(&self) -> Option<String> {
        self.failed.get().cloned()
    }
    // Not watched: a backup that cannot be written (its file, its socket) says
    // nothing about the store, and must not stop the server.
    fn snapshot(
        &self,
        made_at: &str,
        made_by: &str,
        files: &[(&str, Vec<u8>)],
        out: &mut dyn std::io::Write,
    ) -> Result<String, StoreError> {
        self.refused()?;
        self.inner.snapshot(made_at, made_by, files, out)
    }
}

#[cfg(test)]
mod tests;
