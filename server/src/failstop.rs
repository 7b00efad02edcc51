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
//! (or a flush still running after [`FLUSH_DEADLINE`]) records the failure, after
//! which every call refuses at once with that reason, and calls the halt action
//! (in the binary: exit with [`EXIT_STORAGE_FAILED`] shortly after, so the error
//! answer reaches its caller first). `/healthz` reports the failure.

use crate::audit::AuditEvent;
use crate::record::ProposalRecord;
use crate::store::{AuditLog, Cas, PendingLimits, Store, StoreError};
use approval_core::ids::AgentName;
use approval_core::status::Status;
use approval_core::{ProposalId, ServerId, Sha256Hex, Timestamp};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The process exit status after a storage failure (EX_IOERR from sysexits.h).
pub const EXIT_STORAGE_FAILED: i32 = 74;
/// A flush that has not returned after this long counts as a failed store.
pub const FLUSH_DEADLINE: Duration = Duration::from_secs(20);

type Halt = Box<dyn Fn(&str) + Send + Sync>;

/// A store that stops the server at its first write failure.
pub struct FailStop {
    inner: Arc<dyn Store>,
    failed: Arc<OnceLock<String>>,
    halt: Arc<Halt>,
    /// When the running flush started (ms since `epoch`), 0 when none runs.
    flush_started: Arc<AtomicU64>,
    epoch: Instant,
}

impl FailStop {
    /// Wraps `inner`; `halt` runs once, at the first failure, with the reason.
    /// A watchdog thread notices a flush that hangs.
    pub fn new(inner: Arc<dyn Store>, halt: impl Fn(&str) + Send + Sync + 'static) -> Self {
        let s = Self {
            inner,
            failed: Arc::new(OnceLock::new()),
            halt: Arc::new(Box::new(halt)),
            flush_started: Arc::new(AtomicU64::new(0)),
            epoch: Instant::now(),
        };
        let (failed, halt, started, epoch) = (
            s.failed.clone(),
            s.halt.clone(),
            s.flush_started.clone(),
            s.epoch,
        );
        std::thread::Builder::new()
            .name("flush-watchdog".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_secs(1));
                let t = started.load(Ordering::SeqCst);
                let now = epoch.elapsed().as_millis() as u64;
                if t != 0 && now.saturating_sub(t) > FLUSH_DEADLINE.as_millis() as u64 {
                    fail(
                        &failed,
                        &halt,
                        format!(
                            "a flush to disk has not returned for {} s",
                            FLUSH_DEADLINE.as_secs()
                        ),
                    );
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
    fn server_id(&self) -> &ServerId {
        self.inner.server_id()
    }
    fn get(&self, id: &ProposalId) -> Result<Option<ProposalRecord>, StoreError> {
        self.refused()?;
        self.inner.get(id)
    }
    fn create(
        &self,
        rec: &ProposalRecord,
        events: Vec<AuditEvent>,
        limits: PendingLimits,
    ) -> Result<(), StoreError> {
        self.refused()?;
        self.watch(self.inner.create(rec, events, limits))
    }
    fn put_policy(
        &self,
        hash: &Sha256Hex,
        canonical: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.refused()?;
        self.watch(self.inner.put_policy(hash, canonical))
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
        self.watch(self.inner.update(new, events))
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
    fn due(&self, now: Timestamp, limit: usize) -> Result<Vec<ProposalRecord>, StoreError> {
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
        let started = (self.epoch.elapsed().as_millis() as u64).max(1);
        // Several flushes may overlap (the final one at shutdown); the watchdog
        // watches the oldest one running.
        let _ = self
            .flush_started
            .compare_exchange(0, started, Ordering::SeqCst, Ordering::SeqCst);
        let r = self.inner.flush_blocking();
        let _ = self
            .flush_started
            .compare_exchange(started, 0, Ordering::SeqCst, Ordering::SeqCst);
        self.watch(r)
    }
    fn failure(&self) -> Option<String> {
        self.failed.get().cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SledStore;
    use std::sync::Mutex;

    /// A store whose writes fail like a full disk.
    struct Full(SledStore);

    impl Store for Full {
        fn server_id(&self) -> &ServerId {
            self.0.server_id()
        }
        fn get(&self, id: &ProposalId) -> Result<Option<ProposalRecord>, StoreError> {
            self.0.get(id)
        }
        fn create(
            &self,
            _: &ProposalRecord,
            _: Vec<AuditEvent>,
            _: PendingLimits,
        ) -> Result<(), StoreError> {
            Err(StoreError::Backend(
                "No space left on device (os error 28)".into(),
            ))
        }
        fn put_policy(&self, h: &Sha256Hex, c: &serde_json::Value) -> Result<(), StoreError> {
            self.0.put_policy(h, c)
        }
        fn get_policy(&self, h: &Sha256Hex) -> Result<Option<serde_json::Value>, StoreError> {
            self.0.get_policy(h)
        }
        fn pending_count(&self, a: Option<&AgentName>) -> Result<u64, StoreError> {
            self.0.pending_count(a)
        }
        fn update(&self, n: &ProposalRecord, e: Vec<AuditEvent>) -> Result<Cas, StoreError> {
            self.0.update(n, e)
        }
        fn list_status(&self, s: Status, l: usize) -> Result<Vec<ProposalRecord>, StoreError> {
            self.0.list_status(s, l)
        }
        fn list_agent(&self, a: &AgentName, l: usize) -> Result<Vec<ProposalRecord>, StoreError> {
            self.0.list_agent(a, l)
        }
        fn due(&self, n: Timestamp, l: usize) -> Result<Vec<ProposalRecord>, StoreError> {
            self.0.due(n, l)
        }
        fn count_status(&self, s: Status) -> Result<usize, StoreError> {
            self.0.count_status(s)
        }
        fn audit(&self) -> Result<AuditLog, StoreError> {
            self.0.audit()
        }
        fn flush_blocking(&self) -> Result<(), StoreError> {
            self.0.flush_blocking()
        }
    }

    #[test]
    fn the_first_write_failure_halts_once_and_refuses_everything_after() {
        let dir = tempfile::tempdir().unwrap();
        let halted = Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = halted.clone();
        let store = FailStop::new(
            Arc::new(Full(SledStore::open(dir.path()).unwrap())),
            move |why| seen.lock().unwrap().push(why.to_owned()),
        );
        let rec = crate::store::contract::record("p-1", "local", 1_800_000_000);
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
}
