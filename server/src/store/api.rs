//! The contract every backend implements ([`Store`]) and what its writes take and
//! give: the pending limits ([`PendingLimits`], whose admission rule is written
//! here once), the compare-and-swap's answer ([`Cas`]), the audit log ([`AuditLog`]).
//!
//! May import: the store's leaves (`error`, `page`, `outbox`), `audit`, `record`, core.

use super::error::StoreError;
use super::outbox::OutboxItem;
use super::page::{Cursor, HeadPage, ListIndex, RecordHead, RecordPage};
use crate::audit::{AuditEntry, AuditEvent};
use crate::record::ProposalRecord;
use approval_core::governance::ConfigHead;
use approval_core::ids::AgentName;
use approval_core::status::Status;
use approval_core::{ProposalId, PublicKey, ServerId, Sha256Hex, Timestamp};

/// A write's answer to a caller on the async runtime ([`Store::create_async`],
/// [`Store::update_async`]).
pub type Pending<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, StoreError>> + Send + 'a>>;

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

/// What [`Store::raise`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raise {
    /// The mark was absent or lower: it holds the new value now, durably.
    Raised,
    /// The mark already held this value or a higher one, which it keeps.
    Kept(u64),
}

/// The audit chain in order, with the stored head `(seq, hash)`.
pub type AuditLog = (Vec<AuditEntry>, Option<(u64, Sha256Hex)>);

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
    /// Reads a record. On PostgreSQL this may be served from the instance's read
    /// cache: never older than a change this instance made, but it may trail another
    /// instance's by the time its NOTIFY takes (see `postgres::cache`).
    fn get(&self, id: &ProposalId) -> Result<Option<ProposalRecord>, StoreError>;
    /// Reads a record as stored now, never from a cache: for a read an answer rests
    /// on that a compare-and-swap would not correct (the agent's execute, whose
    /// "not approved yet" must not come from a copy that trails an approval made on
    /// another instance). The embedded store has no cache: the same as [`Store::get`].
    fn get_latest(&self, id: &ProposalId) -> Result<Option<ProposalRecord>, StoreError> {
        self.get(id)
    }
    /// [`Store::get`] for a caller on the async runtime: see [`Store::create_async`].
    fn get_async<'a>(&'a self, id: &'a ProposalId) -> Pending<'a, Option<ProposalRecord>> {
        Box::pin(std::future::ready(self.get(id)))
    }
    /// [`Store::get_latest`] for a caller on the async runtime: see
    /// [`Store::create_async`].
    fn get_latest_async<'a>(&'a self, id: &'a ProposalId) -> Pending<'a, Option<ProposalRecord>> {
        Box::pin(std::future::ready(self.get_latest(id)))
    }
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
    /// [`Store::create`] for a caller on the async runtime (the service). A backend
    /// whose write waits on I/O of its own (PostgreSQL: its batcher's round trips and
    /// commit) answers without holding a runtime thread meanwhile; its blocking
    /// `create` must hand the thread's other work to another thread for the wait
    /// (`block_in_place`), a few context switches on every write. The default runs
    /// [`Store::create`]: sled's writes do not wait (their flush is awaited apart).
    fn create_async<'a>(
        &'a self,
        rec: &'a ProposalRecord,
        events: Vec<AuditEvent>,
        limits: PendingLimits,
    ) -> Pending<'a, ()> {
        Box::pin(std::future::ready(self.create(rec, events, limits)))
    }
    /// [`Store::update`] for a caller on the async runtime: see [`Store::create_async`].
    fn update_async<'a>(
        &'a self,
        new: &'a ProposalRecord,
        events: Vec<AuditEvent>,
    ) -> Pending<'a, Cas> {
        Box::pin(std::future::ready(self.update(new, events)))
    }
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
    /// [`MAX_PAGE_SCAN`](super::page::MAX_PAGE_SCAN) entries; `next` is set whenever entries may remain.
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
    /// Up to `limit` records whose deadline ([`Lifecycle::deadline`](approval_core::status::Lifecycle::deadline)) has passed at
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
    /// Writes a consistent copy of the store and `files` (`crate::backup`'s format)
    /// to `out`, for `approval-server backup`; returns the copy's checksum. Only the
    /// embedded store takes its own copies: a database has its own tools (pg_dump).
    fn snapshot(
        &self,
        _made_at: &str,
        _made_by: &str,
        _files: &[(&str, Vec<u8>)],
        _out: &mut dyn std::io::Write,
    ) -> Result<String, StoreError> {
        Err(StoreError::Backend(
            "this store is not copied by approval-server backup: use the database's own \
             tools (pg_dump, see the README's Backups)"
                .into(),
        ))
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
    /// [`Pick`](super::outbox::due::Pick), which the embedded store uses and which the
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
    /// Raises the mark `name` to `value` if it is absent or lower, in one atomic step,
    /// durably before it returns; otherwise keeps it and says what it holds. Marks
    /// are what must only go up across every instance: a passkey's signature counter
    /// (`passkey/<credential id>`, a counter that goes back means a cloned
    /// authenticator) and single-use enrolment links (`enroll/<nonce>`, raised to 1
    /// once). Names are at most 200 bytes.
    fn raise(&self, name: &str, value: u64) -> Result<Raise, StoreError>;
    /// The configuration version in force under quorum (issue #35), once `root.toml`
    /// has put the configuration under quorum; `None` before.
    fn config_head(&self) -> Result<Option<ConfigHead>, StoreError>;
    /// The version of [`Store::config_head`] (0: none), which each instance polls to
    /// learn of a change another applied; cheaper than the whole head.
    fn config_version(&self) -> Result<u64, StoreError> {
        Ok(self.config_head()?.map_or(0, |h| h.version))
    }
    /// Replaces configuration version `from` (0: none yet) by `head`, with its audit
    /// events, in one atomic write that is durable before it returns: true if
    /// applied, false (nothing written) when `from` is no longer the version in
    /// force. Versions only go up, one at a time, in the same order on every instance.
    fn advance_config(
        &self,
        from: u64,
        head: &ConfigHead,
        events: Vec<AuditEvent>,
    ) -> Result<bool, StoreError>;
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
    /// everything), and this instance's own writes whose writer went away before
    /// their answer came (the service announces the rest itself); `None` for a store
    /// only this process writes.
    fn remote_events(&self) -> Option<tokio::sync::broadcast::Receiver<Option<ProposalId>>> {
        None
    }
}
