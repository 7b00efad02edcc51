use std::thread;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::*;

#[derive(Debug, Clone, Copy)]
pub(crate) enum ShutdownState {
    Running,
    ShuttingDown,
    ShutDown,
}

impl ShutdownState {
    fn is_running(self) -> bool {
        if let ShutdownState::Running = self { true } else { false }
    }

    fn is_shutdown(self) -> bool {
        if let ShutdownState::ShutDown = self { true } else { false }
    }
}

#[derive(Debug)]
pub(crate) struct Flusher {
    shutdown: Arc<Mutex<ShutdownState>>,
    sc: Arc<Condvar>,
    join_handle: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Flusher {
    /// Spawns a thread that periodically calls `callback` until dropped.
    pub(crate) fn new(
        name: String,
        pagecache: Arc<PageCache>,
        flush_every_ms: u64,
    ) -> Self {
        #[allow(clippy::mutex_atomic)] // mutex used in CondVar below
        let shutdown = Arc::new(Mutex::new(ShutdownState::Running));
        let sc = Arc::new(Condvar::new());

        let join_handle = thread::Builder::new()
            .name(name)
            .spawn({
                let shutdown = shutdown.clone();
                let sc = sc.clone();
                move || run(&shutdown, &sc, &pagecache, flush_every_ms)
            })
            .unwrap();

        Self { shutdown, sc, join_handle: Mutex::new(Some(join_handle)) }
    }
}

fn run(
    shutdown: &Arc<Mutex<ShutdownState>>,
    sc: &Arc<Condvar>,
    pagecache: &Arc<PageCache>,
    flush_every_ms: u64,
) {
    let flush_every = Duration::from_millis(flush_every_ms);
    // PATCH (vendor/sled/PATCHES.md §7): checkpoints of the recovery snapshot.
    let checkpoint_every = pagecache.config.checkpoint_every_bytes;
    // The first one comes at the first tick that finds anything new stable,
    // so a new tree has a snapshot to fold from soon after it opens.
    let mut next_checkpoint =
        checkpoint_every.map(|_| pagecache.stable_lsn().saturating_add(1));
    let mut shutdown = shutdown.lock();
    let mut wrote_data = false;
    while shutdown.is_running() || wrote_data {
        let before = std::time::Instant::now();
        let cc = concurrency_control::read();
        match pagecache.log.roll_iobuf() {
            Ok(0) => {
                wrote_data = false;
                if !shutdown.is_running() {
                    break;
                }
            }
            Ok(_) => {
                wrote_data = true;
                if !shutdown.is_running() {
                    // loop right away if we're in
                    // shutdown mode, to flush data
                    // more quickly.
                    continue;
                }
            }
            Err(e) => {
                error!("failed to flush from periodic flush thread: {}", e);

                #[cfg(feature = "failpoints")]
                pagecache.set_failpoint(e);

                *shutdown = ShutdownState::ShutDown;

                // having held the mutex makes this linearized
                // with the notify below.
                drop(shutdown);

                let _notified = sc.notify_all();
                return;
            }
        }
        drop(cc);

        // PATCH (vendor/sled/PATCHES.md §6): buffer writes no longer sync
        // themselves, so the periodic flush syncs what has been written (the
        // buffer it just rolled included), outside the concurrency-control
        // guard so no batch waits for the disk. Unpatched, the rolled buffer's
        // own write synced it.
        if let Err(e) = pagecache.log.iobufs.sync_all_written() {
            error!("failed to sync from periodic flush thread: {}", e);

            #[cfg(feature = "failpoints")]
            pagecache.set_failpoint(e);

            *shutdown = ShutdownState::ShutDown;

            // having held the mutex makes this linearized
            // with the notify below.
            drop(shutdown);

            let _notified = sc.notify_all();
            return;
        }

        // so we can spend a little effort
        // cleaning up the segments. try not to
        // spend more than half of our sleep
        // time rewriting pages though.
        //
        // this looks weird because it's a rust-style do-while
        // where the conditional is the full body
        while {
            let made_progress = match pagecache.attempt_gc() {
                Err(e) => {
                    error!(
                        "failed to clean file from periodic flush thread: {}",
                        e
                    );

                    #[cfg(feature = "failpoints")]
                    pagecache.set_failpoint(e);

                    *shutdown = ShutdownState::ShutDown;

                    // having held the mutex makes this linearized
                    // with the notify below.
                    drop(shutdown);

                    let _notified = sc.notify_all();
                    return;
                }
                Ok(false) => false,
                Ok(true) => true,
            };
            made_progress
                && shutdown.is_running()
                && before.elapsed() < flush_every / 2
        } {}

        if let Err(e) = pagecache.config.file.sync_all() {
            error!("failed to fsync from periodic flush thread: {}", e);
        }

        // PATCH (vendor/sled/PATCHES.md §7): once enough log has become stable
        // since the last checkpoint, write a recovery snapshot that covers it,
        // so that a start after a crash replays only what follows. A failed
        // or skipped checkpoint loses nothing (the older snapshot and the log
        // still recover everything), so it is retried after at most
        // `CHECKPOINT_RETRY` more bytes, and it never fails the tree. A panic inside it (an
        // assertion in the log iterator) ends checkpoints for this process
        // rather than the flusher, whose end would hang `Flusher::drop`.
        if let (Some(every), Some(at)) = (checkpoint_every, next_checkpoint) {
            let stable = pagecache.stable_lsn();
            if shutdown.is_running() && stable >= at {
                let retry = lsn_len(every.min(CHECKPOINT_RETRY));
                let every = lsn_len(every);
                let ran = std::panic::catch_unwind(
                    std::panic::AssertUnwindSafe(|| pagecache.checkpoint()),
                );
                next_checkpoint = match ran {
                    Ok(Ok(Some(_))) => Some(stable.saturating_add(every)),
                    Ok(Ok(None)) => Some(stable.saturating_add(retry)),
                    Ok(Err(e)) => {
                        warn!("checkpoint of the recovery snapshot failed: {}", e);
                        Some(stable.saturating_add(retry))
                    }
                    Err(_) => {
                        error!(
                            "checkpoint of the recovery snapshot panicked; \
                             no more checkpoints in this process"
                        );
                        None
                    }
                };
            }
        }

        let sleep_duration = flush_every
            .checked_sub(before.elapsed())
            .unwrap_or_else(|| Duration::from_millis(1));

        if shutdown.is_running() {
            // only sleep before the next flush if we are
            // running normally. if we're shutting down,
            // flush faster.
            sc.wait_for(&mut shutdown, sleep_duration);
        }
    }

    *shutdown = ShutdownState::ShutDown;

    // having held the mutex makes this linearized
    // with the notify below.
    drop(shutdown);

    let _notified = sc.notify_all();
}

/// PATCH (vendor/sled/PATCHES.md §7): how much stable log before the first
/// checkpoint, and before another try after one that wrote nothing.
const CHECKPOINT_RETRY: u64 = 8 * 1024 * 1024;

/// A byte count as a distance in LSNs (which are `i64`).
fn lsn_len(bytes: u64) -> Lsn {
    Lsn::try_from(bytes).unwrap_or(Lsn::max_value())
}

impl Drop for Flusher {
    fn drop(&mut self) {
        let mut shutdown = self.shutdown.lock();
        if shutdown.is_running() {
            *shutdown = ShutdownState::ShuttingDown;
            let _notified = self.sc.notify_all();
        }

        while !shutdown.is_shutdown() {
            let _ = self.sc.wait_for(&mut shutdown, Duration::from_millis(100));
        }

        let mut join_handle_opt = self.join_handle.lock();
        if let Some(join_handle) = join_handle_opt.take() {
            if let Err(e) = join_handle.join() {
                error!("error joining Periodic thread: {:?}", e);
            }
        }
    }
}
