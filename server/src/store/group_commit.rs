//! Group commit: writers that need their write on disk share one fsync
//! ([`GroupCommit`]), run off the async workers.
//!
//! May import: the store contract ([`Store`]) and the metrics (a leaf), nothing above.

use super::api::Store;
use super::error::StoreError;
use approval_core::claim::flush_covers;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Most times a flusher yields to let writers under way join its group.
const GATHER_YIELDS: usize = 8;

thread_local! {
    /// Set on a thread that serves one stdio session and nothing else
    /// ([`flush_inline_on_this_thread`]).
    static FLUSH_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as one whose blocking holds up nobody but its own session,
/// so that [`GroupCommit::flush`] runs a flush asked for on it right there instead of
/// handing it to the blocking pool and waiting to be woken (two thread wake-ups on
/// every sequential durable write).
///
/// Only the embedded stdio session's thread is marked (`stdio::Embedded::run`): it
/// runs a current-thread runtime of its own that drives that session's pipes and
/// timers and nothing else. The approver API, `/mcp` and every other task stay on the
/// shared runtime, whose workers never block in a flush (see [`GroupCommit::flush`]).
/// A flush that hangs there stalls that one session, as the agent's own write does
/// anyway, until the fail-stop watchdog ends the process.
pub fn flush_inline_on_this_thread() {
    FLUSH_HERE.with(|f| f.set(true));
}

/// Shares fsyncs between concurrent writers (group commit).
pub struct GroupCommit {
    store: Arc<dyn Store>,
    flusher: tokio::sync::Mutex<()>,
    requested: AtomicU64,
    completed: tokio::sync::watch::Sender<u64>,
    fsyncs: AtomicU64,
    inflight: AtomicU64,
    /// Where each write's commit latency goes (`approval_store_commit_seconds`).
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl GroupCommit {
    /// Wraps a store.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            flusher: tokio::sync::Mutex::new(()),
            requested: AtomicU64::new(0),
            completed: tokio::sync::watch::channel(0).0,
            fsyncs: AtomicU64::new(0),
            inflight: AtomicU64::new(0),
            metrics: None,
        }
    }

    /// Records each write's commit latency: from [`GroupCommit::begin`] to the
    /// guard's drop, after its flush (on PostgreSQL the commit is the write itself).
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Returns once every write made before the call is durable.
    pub async fn flush(&self) -> Result<(), StoreError> {
        // The caller's writes happened before this ticket was taken, so any
        // fsync that starts after the ticket covers them.
        let ticket = self.requested.fetch_add(1, Ordering::SeqCst) + 1;
        let mut done = self.completed.subscribe();
        loop {
            if flush_covers(*done.borrow_and_update(), ticket) {
                return Ok(());
            }
            if let Ok(guard) = self.flusher.try_lock() {
                if flush_covers(*self.completed.borrow(), ticket) {
                    return Ok(());
                }
                // Let writers that are already runnable reach their ticket first, so
                // this fsync covers them too: a larger group costs the same one fsync.
                for _ in 0..GATHER_YIELDS {
                    let ticketed = self.requested.load(Ordering::SeqCst) - *self.completed.borrow();
                    if self.inflight.load(Ordering::SeqCst) <= ticketed {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
                let target = self.requested.load(Ordering::SeqCst);
                let store = self.store.clone();
                let started = std::time::Instant::now();
                // The flush runs on the blocking pool, never on the worker that asked:
                // a worker blocked in a flush may be the one that drives tokio's sockets
                // and timers, and the others sleep until a task is spawned for them, so
                // nothing on the runtime would be served until the disk answered (issue
                // #14, round 6: running a lone writer's flush inline saved two thread
                // wake-ups and hung CI that way). Attack test:
                // failstop::tests::a_flush_that_hangs_holds_no_worker_and_stops_no_socket_or_timer.
                //
                // The one exception is a thread that serves a single stdio session and
                // nothing else ([`flush_inline_on_this_thread`]).
                let r = if FLUSH_HERE.with(std::cell::Cell::get) {
                    store.flush_blocking()
                } else {
                    tokio::task::spawn_blocking(move || store.flush_blocking())
                        .await
                        .map_err(|e| StoreError::Backend(format!("flush task failed: {e}")))?
                };
                let covered = target - *self.completed.borrow();
                tracing::trace!(
                    micros = started.elapsed().as_micros() as u64,
                    covered,
                    "group flush"
                );
                self.fsyncs.fetch_add(1, Ordering::Relaxed);
                drop(guard);
                if let Err(e) = r {
                    // Wake the writers waiting on this flush without advancing the mark:
                    // each tries a flush of its own and gets its own error, rather than
                    // waiting for a success that will not come.
                    self.completed.send_modify(|_| {});
                    return Err(e);
                }
                self.completed.send_modify(|c| *c = (*c).max(target));
            } else if done.changed().await.is_err() {
                return Err(StoreError::Backend("flusher stopped".into()));
            }
        }
    }

    /// How many fsyncs ran (for benchmarks and tests).
    pub fn fsync_count(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }

    /// Marks a write as under way until the guard drops (after its flush), so that a
    /// read that may have seen it can wait for it to be durable ([`GroupCommit::settle`]).
    pub fn begin(&self) -> WriteGuard<'_> {
        self.inflight.fetch_add(1, Ordering::SeqCst);
        WriteGuard(self, std::time::Instant::now())
    }

    /// Returns once nothing a read may have seen is still waiting for its fsync: at
    /// once when no write is under way, else after a (shared) flush. Call it after
    /// reading and before replying, so no answer reports a state that is not on disk.
    pub async fn settle(&self) -> Result<(), StoreError> {
        if self.inflight.load(Ordering::SeqCst) == 0 {
            return Ok(());
        }
        self.flush().await
    }
}

/// A write under way; see [`GroupCommit::begin`].
pub struct WriteGuard<'a>(&'a GroupCommit, std::time::Instant);

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::SeqCst);
        if let Some(m) = &self.0.metrics {
            m.commit(self.1.elapsed());
        }
    }
}
