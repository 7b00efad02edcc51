//! Durable storage behind one contract ([`Store`]), with two backends: the embedded
//! sled store ([`sled`], the default: one folder, nothing to install) and PostgreSQL
//! for several instances on one database.
//!
//! The contract is what the service relies on: every state change is atomic (the
//! record, its indexes, its counters and its audit entries together, or none), the
//! execute claim is a compare-and-swap on the record's revision, and nothing is
//! reported before [`Store::flush_blocking`] (or [`GroupCommit::flush`]) made it durable.
//! [`contract`] holds the tests every backend must pass.

use crate::audit::{self, AuditEntry, AuditEvent};
use crate::notify::OutboxItem;
use crate::record::{ProposalRecord, SCHEMA_VERSION};
use approval_core::ids::AgentName;
use approval_core::status::{Lifecycle, Status};
use approval_core::{Kind, ProposalId, PublicKey, ServerId, Sha256Hex, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use thiserror::Error;

/// A storage failure. Nothing half-written is left behind: every write is one atomic batch.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The backend failed (disk full, I/O error, corruption).
    #[error("storage error: {0}")]
    Backend(String),
    /// A stored value cannot be read by this build.
    #[error("stored record {key} cannot be read: {why}")]
    Corrupt {
        /// Which key.
        key: String,
        /// Why.
        why: String,
    },
    /// An earlier failure stopped the store; the server is exiting (see `failstop`).
    #[error("{0}")]
    Stopped(String),
    /// The data folder was written in a layout this build does not read.
    #[error("{0}")]
    Layout(String),
    /// A proposal with this id already exists.
    #[error("proposal {0} already exists")]
    Exists(String),
    /// A pending-proposal limit is reached.
    #[error("{0}")]
    Full(String),
    /// The database cannot be reached now (PostgreSQL down, network gone, no answer
    /// in time). Not a fail-stop: the store reconnects by itself, so a retry later
    /// may succeed.
    #[error("the store is unreachable: {0}")]
    Unavailable(String),
}

/// Caps on PENDING proposals, enforced under the writer lock that creates them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingLimits {
    /// Per agent.
    pub per_agent: u64,
    /// In all.
    pub total: u64,
}

impl Default for PendingLimits {
    fn default() -> Self {
        Self {
            per_agent: 10_000,
            total: 1_000_000,
        }
    }
}

impl PendingLimits {
    /// The admission rule, one copy for every backend: `mine` and `total` are the
    /// PENDING counts *with* the new proposal; over either limit the write is refused.
    pub fn admit(&self, agent: &str, mine: u64, total: u64) -> Result<(), StoreError> {
        if mine > self.per_agent {
            return Err(StoreError::Full(format!(
                "agent {agent} already has {} pending proposals: wait for decisions or withdraw some",
                self.per_agent
            )));
        }
        if total > self.total {
            return Err(StoreError::Full(format!(
                "the server holds {} pending proposals, its limit: try again after approvers catch up",
                self.total
            )));
        }
        Ok(())
    }
}

impl From<::sled::Error> for StoreError {
    fn from(e: ::sled::Error) -> Self {
        StoreError::Backend(e.to_string())
    }
}

/// The result of a compare-and-swap update.
#[derive(Debug)]
pub enum Cas {
    /// Written.
    Applied,
    /// Someone else changed the record first; here is what is there now.
    Conflict(Box<ProposalRecord>),
    /// No such record.
    Missing,
}

/// The audit chain in order, with the stored head `(seq, hash)`.
pub type AuditLog = (Vec<AuditEntry>, Option<(u64, Sha256Hex)>);

/// The most index entries one [`Store::page`] call walks, matching or not: a listing
/// whose filter skips many records answers a short page with a cursor rather than
/// walking the whole store in one request.
pub const MAX_PAGE_SCAN: usize = 5_000;

/// Where a listing resumes: the position (creation time, then id) of the last
/// record it returned; the next page starts strictly after it, older first.
///
/// On the wire (`next_cursor`, `cursor`) it is `<created_at unix seconds>.<proposal id>`,
/// opaque to clients: pass back what the server gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// Creation time of the last record returned.
    pub created: Timestamp,
    /// Its id.
    pub id: ProposalId,
}

impl Cursor {
    /// The position of a record.
    pub fn of(created: Timestamp, id: &ProposalId) -> Self {
        Self {
            created,
            id: id.clone(),
        }
    }

    /// Parses the wire form; `None` for anything the server did not hand out.
    pub fn parse(text: &str) -> Option<Self> {
        let (secs, id) = text.split_once('.')?;
        if secs.is_empty() || !secs.bytes().all(|b| b.is_ascii_digit()) || secs.len() > 12 {
            return None;
        }
        let unix: i64 = secs.parse().ok()?;
        let created = Timestamp::from_unix(unix);
        if created.unix() != unix {
            return None;
        }
        let id = ProposalId::parse(id).ok()?;
        Some(Self { created, id })
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.created.unix(), self.id)
    }
}

/// Which index a listing walks, newest first.
#[derive(Debug, Clone)]
pub enum ListIndex {
    /// One agent's records.
    Agent(AgentName),
    /// Records stored with any of these statuses (merged in creation order).
    Statuses(Vec<Status>),
}

/// The fields of a stored record a listing filters and shows, decoded without the
/// payload, the decisions or the result: walking an index costs the index, not the
/// records' size.
#[derive(Debug, Clone, Deserialize)]
pub struct RecordHead {
    /// Record format version.
    pub schema: u32,
    /// The preview without its payload.
    pub preview: PreviewHead,
    /// `preview_sha256`.
    pub preview_sha256: Sha256Hex,
    /// Status and deadlines.
    pub lifecycle: Lifecycle,
}

/// A preview without its payload.
#[derive(Debug, Clone, Deserialize)]
pub struct PreviewHead {
    /// The proposal's id.
    pub proposal_id: ProposalId,
    /// Its kind.
    pub kind: Kind,
    /// The agent's summary.
    pub summary: String,
    /// The agent.
    pub requested_by: AgentName,
    /// Created.
    pub created_at: Timestamp,
    /// Expires.
    pub expires_at: Timestamp,
    /// Its policy's hash.
    pub policy_sha256: Sha256Hex,
}

/// What a listing returns for each record it keeps: just the head it judged
/// ([`Store::page`]), or the whole record ([`Store::page_records`]). A walk decodes
/// every entry's head, and only a kept entry's whole record, so an entry the filter
/// skips costs no more in a whole-record listing.
pub(crate) trait Listed: Sized {
    /// What a kept entry gives: its head, and the record's stored JSON.
    fn kept(head: RecordHead, json: &[u8]) -> serde_json::Result<Self>;
}

impl Listed for RecordHead {
    fn kept(head: RecordHead, _: &[u8]) -> serde_json::Result<Self> {
        Ok(head)
    }
}

impl Listed for ProposalRecord {
    /// The same bytes as the head, so the same schema version.
    fn kept(_: RecordHead, json: &[u8]) -> serde_json::Result<Self> {
        serde_json::from_slice(json)
    }
}

/// One page of a listing.
#[derive(Debug, Clone, Default)]
pub struct HeadPage {
    /// The records that matched, newest first.
    pub heads: Vec<RecordHead>,
    /// Where the next page starts; `None` when the index is exhausted.
    pub next: Option<Cursor>,
}

/// One page of a listing that shows whole records.
#[derive(Debug, Clone, Default)]
pub struct RecordPage {
    /// The records that matched, newest first.
    pub records: Vec<ProposalRecord>,
    /// Where the next page starts; `None` when the index is exhausted.
    pub next: Option<Cursor>,
}

/// What any storage backend must do. Contract tests in this module run against
/// every implementation.
pub trait Store: Send + Sync + 'static {
    /// The server's permanent identity, made at first start.
    fn server_id(&self) -> &ServerId;
    /// The public identity key bound to `server_id`, once bound (see `identity`).
    fn server_key(&self) -> Result<Option<PublicKey>, StoreError>;
    /// Binds `key` to `server_id` if no key is bound yet, durably; returns the key
    /// bound now (the first one bound wins, and is never replaced).
    fn bind_server_key(&self, key: &PublicKey) -> Result<PublicKey, StoreError>;
    /// Reads a record.
    fn get(&self, id: &ProposalId) -> Result<Option<ProposalRecord>, StoreError>;
    /// Writes a new record with its audit events, refusing an id that exists or a
    /// PENDING record beyond `limits`.
    fn create(
        &self,
        rec: &ProposalRecord,
        events: Vec<AuditEvent>,
        limits: PendingLimits,
    ) -> Result<(), StoreError>;
    /// Keeps a canonical policy under its hash (idempotent). Written before any record
    /// that names it, so a record never refers to a policy the store lacks.
    fn put_policy(&self, hash: &Sha256Hex, canonical: &serde_json::Value)
        -> Result<(), StoreError>;
    /// A canonical policy by its hash.
    fn get_policy(&self, hash: &Sha256Hex) -> Result<Option<serde_json::Value>, StoreError>;
    /// PENDING records of one agent, or of all (kept as counters: O(1)).
    fn pending_count(&self, agent: Option<&AgentName>) -> Result<u64, StoreError>;
    /// Replaces the record if its stored revision is `new.revision - 1`, with its audit events.
    fn update(&self, new: &ProposalRecord, events: Vec<AuditEvent>) -> Result<Cas, StoreError>;
    /// Records with this stored status, newest first.
    fn list_status(&self, status: Status, limit: usize) -> Result<Vec<ProposalRecord>, StoreError>;
    /// An agent's records, newest first.
    fn list_agent(
        &self,
        agent: &AgentName,
        limit: usize,
    ) -> Result<Vec<ProposalRecord>, StoreError>;
    /// Walks `index` newest first, strictly after `after`, decoding only each record's
    /// head, and returns up to `limit` heads that `keep` accepts. Walks at most
    /// [`MAX_PAGE_SCAN`] entries; `next` is set whenever entries may remain.
    fn page(
        &self,
        index: &ListIndex,
        after: Option<&Cursor>,
        limit: usize,
        keep: &mut dyn FnMut(&RecordHead) -> bool,
    ) -> Result<HeadPage, StoreError>;
    /// As [`Store::page`], but returns the whole records `keep` accepts, each read
    /// once: a listing that shows records must not look each up again after the
    /// walk, since in a large store every lookup costs more than the walk's read.
    fn page_records(
        &self,
        index: &ListIndex,
        after: Option<&Cursor>,
        limit: usize,
        keep: &mut dyn FnMut(&RecordHead) -> bool,
    ) -> Result<RecordPage, StoreError>;
    /// Up to `limit` records whose deadline ([`Lifecycle::deadline`]) has passed at
    /// `now`, earliest first: what the expiry sweep ends. Costs the number of
    /// records due, not the number alive.
    /// Heads only: a sweep of a thousand large records must not hold them all.
    fn due(&self, now: Timestamp, limit: usize) -> Result<Vec<RecordHead>, StoreError>;
    /// Number of records with this stored status.
    fn count_status(&self, status: Status) -> Result<usize, StoreError>;
    /// The whole audit chain in order, and the stored head.
    fn audit(&self) -> Result<AuditLog, StoreError>;
    /// Makes every write so far durable (fsync). Blocking.
    fn flush_blocking(&self) -> Result<(), StoreError>;
    /// Why the store stopped working, once it has (see `failstop`).
    fn failure(&self) -> Option<String> {
        None
    }
    /// Turns the notification outbox on or off (off: no channel is configured, so
    /// writes queue nothing), with the most entries it may hold; past that a state
    /// change still commits and its notifications are dropped and counted.
    fn set_outbox(&self, _on: bool, _cap: u64) {}
    /// Up to `limit` outbox entries, oldest first.
    fn outbox_page(&self, _limit: usize) -> Result<Vec<(u64, OutboxItem)>, StoreError> {
        Ok(Vec::new())
    }
    /// The outbox entries due at `now_ms` (`next_try_ms <= now_ms`), fairly across
    /// kinds: at most `per_kind` of any one kind (each kind's earliest next attempt
    /// first, then oldest), interleaved (every kind's first, then every kind's
    /// second, ...), at most `limit` in all. An entry waiting for its retry never
    /// takes a place, and one kind's backlog never hides another kind's entry. See
    /// [`crate::notify::due::pick`], which the embedded store uses and which the
    /// SQL of shared stores computes the same way.
    fn outbox_due(
        &self,
        _now_ms: u64,
        _per_kind: usize,
        _limit: usize,
    ) -> Result<Vec<(u64, OutboxItem)>, StoreError> {
        Ok(Vec::new())
    }
    /// Rewrites an outbox entry (its retry state).
    fn outbox_put(&self, _seq: u64, _item: &OutboxItem) -> Result<(), StoreError> {
        Ok(())
    }
    /// Removes a delivered (or abandoned) outbox entry.
    fn outbox_remove(&self, _seq: u64) -> Result<(), StoreError> {
        Ok(())
    }
    /// Entries queued, and notifications dropped at the cap since start.
    fn outbox_counts(&self) -> (u64, u64) {
        (0, 0)
    }

    // What several instances on one database need. The embedded store is one
    // process: these defaults are what one process means.

    /// The deployment's shared identity secret (base64 of the 32-byte seed): stores
    /// shared by several instances keep it, storing `fresh` if none is kept yet and
    /// returning what is kept. `None`: the secret lives in the data folder.
    fn shared_server_secret(&self, _fresh: &str) -> Result<Option<String>, StoreError> {
        Ok(None)
    }
    /// How long an EXECUTING claim stays leased without renewal, for stores shared by
    /// several instances; `None`: one process, whose claims are all its own, so every
    /// EXECUTING record found at start-up is orphaned.
    fn leases(&self) -> Option<std::time::Duration> {
        None
    }
    /// Extends this instance's lease on an EXECUTING record while its executor runs.
    fn renew_lease(&self, _id: &ProposalId) -> Result<(), StoreError> {
        Ok(())
    }
    /// Ends an EXECUTING claim whose lease ran out: [`Store::update`], but applied only
    /// if the lease is still expired inside the same atomic write, so a renewal that
    /// lands between the sweep's read and this write wins (then `Conflict`). A store
    /// without leases (one process) just updates.
    fn end_expired_claim(
        &self,
        new: &ProposalRecord,
        events: Vec<AuditEvent>,
    ) -> Result<Cas, StoreError> {
        self.update(new, events)
    }
    /// Up to `limit` EXECUTING records whose lease ran out (their instance died).
    fn expired_claims(&self, _limit: usize) -> Result<Vec<ProposalId>, StoreError> {
        Ok(Vec::new())
    }
    /// Whether this instance leads background `task` (expiry sweep, outbox delivery)
    /// now, taking or renewing its lead: one instance does at a time, and another
    /// takes over when it dies or stops renewing (frozen). Called at each tick.
    fn try_lead(&self, _task: &str) -> bool {
        true
    }
    /// Whether this instance still leads `task`, checked right before each act of a
    /// leader (a notification sent, a record swept): false once its lead may have
    /// passed to another instance (e.g. this process was frozen past its lease). It
    /// renews a lead that is due but never takes one. A store shared by several
    /// instances also refuses [`Store::end_expired_claim`] (`Conflict`) unless this
    /// instance's lead of the `"sweep"` task is current inside that write.
    fn still_leads(&self, _task: &str) -> bool {
        true
    }
    /// Changes made by other instances (`None`: some may have been missed, re-read
    /// everything); `None` for a store only this process writes.
    fn remote_events(&self) -> Option<tokio::sync::broadcast::Receiver<Option<ProposalId>>> {
        None
    }
}

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
        }
    }

    /// Returns once every write made before the call is durable.
    pub async fn flush(&self) -> Result<(), StoreError> {
        // The caller's writes happened before this ticket was taken, so any
        // fsync that starts after the ticket covers them.
        let ticket = self.requested.fetch_add(1, Ordering::SeqCst) + 1;
        let mut done = self.completed.subscribe();
        loop {
            if *done.borrow_and_update() >= ticket {
                return Ok(());
            }
            if let Ok(guard) = self.flusher.try_lock() {
                if *self.completed.borrow() >= ticket {
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
        WriteGuard(self)
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
pub struct WriteGuard<'a>(&'a GroupCommit);

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
pub(crate) mod contract;
pub mod postgres;
pub mod sled;

pub use self::postgres::PgStore;
pub use self::sled::{SledStore, CACHE_BYTES};
