//! Durable storage behind a small trait, with sled as the backend.
//!
//! Every state change is one transaction that writes the record, its index
//! entries and its audit entry together, and the caller flushes before it
//! replies. The compare-and-swap on a record's revision is what makes the execute
//! claim atomic: of any number of concurrent claims, exactly one sees its expected
//! revision and wins.
//!
//! Flushes are grouped: a request that needs its write on disk takes a ticket;
//! one flusher fsyncs for every ticket issued before it started, and the others
//! wait for it rather than each paying for an fsync of their own
//! ([`GroupCommit`]). Durability is never skipped, only shared.

use crate::audit::{self, AuditEntry, AuditEvent};
use crate::record::{ProposalRecord, SCHEMA_VERSION};
use approval_core::ids::AgentName;
use approval_core::status::Status;
use approval_core::{ProposalId, ServerId, Sha256Hex};
use serde::{Deserialize, Serialize};
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use thiserror::Error;

/// A storage failure. Nothing half-written is left behind: every write is one transaction.
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
    /// A proposal with this id already exists.
    #[error("proposal {0} already exists")]
    Exists(String),
    /// A pending-proposal limit is reached.
    #[error("{0}")]
    Full(String),
}

/// Caps on PENDING proposals, enforced inside the creating transaction.
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

impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
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

/// What any storage backend must do. Contract tests in this module run against
/// every implementation.
pub trait Store: Send + Sync + 'static {
    /// The server's permanent identity, made at first start.
    fn server_id(&self) -> &ServerId;
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
    /// Number of records with this stored status.
    fn count_status(&self, status: Status) -> Result<usize, StoreError>;
    /// The whole audit chain in order, and the stored head.
    fn audit(&self) -> Result<AuditLog, StoreError>;
    /// Makes every write so far durable (fsync). Blocking.
    fn flush_blocking(&self) -> Result<(), StoreError>;
}

/// The sled backend.
pub struct SledStore {
    db: sled::Db,
    meta: sled::Tree,
    proposals: sled::Tree,
    by_status: sled::Tree,
    by_agent: sled::Tree,
    audit: sled::Tree,
    counters: sled::Tree,
    policies: sled::Tree,
    server_id: ServerId,
}

const PENDING_TOTAL: &[u8] = b"pending";

fn pending_key(agent: &AgentName) -> Vec<u8> {
    format!("pending/{agent}").into_bytes()
}

fn read_u64(v: Option<sled::IVec>) -> u64 {
    v.and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0)
}

fn bump(
    tree: &sled::transaction::TransactionalTree,
    key: &[u8],
    delta: i64,
) -> Result<u64, TxError> {
    let cur = read_u64(tree.get(key)?);
    let next = if delta >= 0 {
        cur.saturating_add(delta as u64)
    } else {
        cur.saturating_sub(delta.unsigned_abs())
    };
    tree.insert(key, &next.to_be_bytes())?;
    Ok(next)
}

const AUDIT_HEAD: &[u8] = b"audit_head";

/// sled's page cache size.
pub const CACHE_BYTES: u64 = 256 * 1024 * 1024;

#[derive(Serialize, Deserialize)]
struct Head {
    seq: u64,
    hash: Sha256Hex,
}

fn index_key(prefix: &str, rec: &ProposalRecord) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + 40);
    k.extend_from_slice(prefix.as_bytes());
    k.push(0);
    k.extend_from_slice(&rec.preview.created_at.unix().to_be_bytes());
    k.extend_from_slice(rec.id().as_str().as_bytes());
    k
}

fn status_key(rec: &ProposalRecord) -> Vec<u8> {
    index_key(rec.status().as_str(), rec)
}

fn agent_key(rec: &ProposalRecord) -> Vec<u8> {
    index_key(rec.preview.requested_by.as_str(), rec)
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(v).map_err(|e| StoreError::Backend(format!("cannot encode record: {e}")))
}

fn decode_record(key: &[u8], bytes: &[u8]) -> Result<ProposalRecord, StoreError> {
    let rec: ProposalRecord = serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        why: e.to_string(),
    })?;
    if rec.schema != SCHEMA_VERSION {
        return Err(StoreError::Corrupt {
            key: String::from_utf8_lossy(key).into_owned(),
            why: format!(
                "schema version {} is not supported by this build",
                rec.schema
            ),
        });
    }
    Ok(rec)
}

type TxError = ConflictableTransactionError<StoreError>;

fn abort(e: StoreError) -> TxError {
    ConflictableTransactionError::Abort(e)
}

fn tx_result<T>(r: Result<T, TransactionError<StoreError>>) -> Result<T, StoreError> {
    r.map_err(|e| match e {
        TransactionError::Abort(e) => e,
        TransactionError::Storage(e) => StoreError::from(e),
    })
}

impl SledStore {
    /// Opens (or creates) the store in `dir`. The server id is made on first open.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let db = sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            // sled's default page cache is 1 GiB; a bounded cache keeps the server's
            // memory bounded however many proposals the store holds.
            .cache_capacity(CACHE_BYTES)
            .open()?;
        let meta = db.open_tree("meta")?;
        let server_id = match meta.get("server_id")? {
            Some(v) => {
                let s = String::from_utf8_lossy(&v).into_owned();
                ServerId::parse(&s).map_err(|e| StoreError::Corrupt {
                    key: "server_id".into(),
                    why: e.to_string(),
                })?
            }
            None => {
                let mut b = [0u8; 8];
                getrandom::fill(&mut b)
                    .map_err(|e| StoreError::Backend(format!("no randomness: {e}")))?;
                let id = ServerId::parse(&format!("srv-{}", hex::encode(b)))
                    .map_err(|e| StoreError::Backend(e.to_string()))?;
                // Only the first writer wins, even if two processes raced here.
                let _ = meta.compare_and_swap(
                    "server_id",
                    None as Option<&[u8]>,
                    Some(id.as_str().as_bytes()),
                )?;
                let v = meta.get("server_id")?.unwrap_or_default();
                db.flush()?;
                ServerId::parse(&String::from_utf8_lossy(&v)).map_err(|e| StoreError::Corrupt {
                    key: "server_id".into(),
                    why: e.to_string(),
                })?
            }
        };
        meta.insert("schema_version", SCHEMA_VERSION.to_string().as_bytes())?;
        Ok(Self {
            proposals: db.open_tree("proposals")?,
            by_status: db.open_tree("by_status")?,
            by_agent: db.open_tree("by_agent")?,
            audit: db.open_tree("audit")?,
            counters: db.open_tree("counters")?,
            policies: db.open_tree("policies")?,
            meta,
            db,
            server_id,
        })
    }

    /// Bytes the store takes on disk.
    pub fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }

    fn scan_index(
        &self,
        tree: &sled::Tree,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<ProposalRecord>, StoreError> {
        let mut p = prefix.as_bytes().to_vec();
        p.push(0);
        let mut out = Vec::new();
        for item in tree.scan_prefix(&p).rev() {
            if out.len() >= limit {
                break;
            }
            let (k, _) = item?;
            let id = &k[p.len() + 8..];
            if let Some(v) = self.proposals.get(id)? {
                out.push(decode_record(id, &v)?);
            }
        }
        Ok(out)
    }

    fn append_audit(
        meta: &sled::transaction::TransactionalTree,
        audit: &sled::transaction::TransactionalTree,
        events: &[AuditEvent],
    ) -> Result<(), TxError> {
        let head: Option<Head> = match meta.get(AUDIT_HEAD)? {
            Some(v) => Some(serde_json::from_slice(&v).map_err(|e| {
                abort(StoreError::Corrupt {
                    key: "audit_head".into(),
                    why: e.to_string(),
                })
            })?),
            None => None,
        };
        let (mut seq, mut prev) = head
            .map(|h| (h.seq, h.hash))
            .unwrap_or((0, audit::genesis()));
        for ev in events {
            seq += 1;
            let entry = AuditEntry::seal(seq, prev, ev.clone());
            prev = entry.hash;
            audit.insert(&seq.to_be_bytes(), encode(&entry).map_err(abort)?)?;
        }
        meta.insert(
            AUDIT_HEAD,
            encode(&Head { seq, hash: prev }).map_err(abort)?,
        )?;
        Ok(())
    }
}

impl Store for SledStore {
    fn server_id(&self) -> &ServerId {
        &self.server_id
    }

    fn get(&self, id: &ProposalId) -> Result<Option<ProposalRecord>, StoreError> {
        match self.proposals.get(id.as_str())? {
            Some(v) => Ok(Some(decode_record(id.as_str().as_bytes(), &v)?)),
            None => Ok(None),
        }
    }

    fn create(
        &self,
        rec: &ProposalRecord,
        events: Vec<AuditEvent>,
        limits: PendingLimits,
    ) -> Result<(), StoreError> {
        let bytes = encode(rec)?;
        let id = rec.id().as_str().as_bytes().to_vec();
        let (sk, ak) = (status_key(rec), agent_key(rec));
        let agent = &rec.preview.requested_by;
        let pk = pending_key(agent);
        let pending = rec.status() == Status::Pending;
        let trees = (
            &self.meta,
            &self.proposals,
            &self.by_status,
            &self.by_agent,
            &self.audit,
            &self.counters,
        );
        tx_result(trees.transaction(|(meta, proposals, by_status, by_agent, audit, counters)| {
            if proposals.get(&id)?.is_some() {
                return Err(abort(StoreError::Exists(String::from_utf8_lossy(&id).into_owned())));
            }
            if pending {
                if bump(counters, &pk, 1)? > limits.per_agent {
                    return Err(abort(StoreError::Full(format!(
                        "agent {agent} already has {} pending proposals: wait for decisions or withdraw some",
                        limits.per_agent
                    ))));
                }
                if bump(counters, PENDING_TOTAL, 1)? > limits.total {
                    return Err(abort(StoreError::Full(format!(
                        "the server holds {} pending proposals, its limit: try again after approvers catch up",
                        limits.total
                    ))));
                }
            }
            proposals.insert(id.as_slice(), bytes.as_slice())?;
            by_status.insert(sk.as_slice(), &[] as &[u8])?;
            by_agent.insert(ak.as_slice(), &[] as &[u8])?;
            Self::append_audit(meta, audit, &events)?;
            Ok(())
        }))
    }

    fn update(&self, new: &ProposalRecord, events: Vec<AuditEvent>) -> Result<Cas, StoreError> {
        let bytes = encode(new)?;
        let id = new.id().as_str().as_bytes().to_vec();
        let new_sk = status_key(new);
        let pk = pending_key(&new.preview.requested_by);
        let trees = (
            &self.meta,
            &self.proposals,
            &self.by_status,
            &self.audit,
            &self.counters,
        );
        tx_result(
            trees.transaction(|(meta, proposals, by_status, audit, counters)| {
                let Some(cur) = proposals.get(&id)? else {
                    return Ok(Cas::Missing);
                };
                let cur = decode_record(&id, &cur).map_err(abort)?;
                if cur.revision + 1 != new.revision {
                    return Ok(Cas::Conflict(Box::new(cur)));
                }
                by_status.remove(status_key(&cur))?;
                by_status.insert(new_sk.as_slice(), &[] as &[u8])?;
                let delta = i64::from(new.status() == Status::Pending)
                    - i64::from(cur.status() == Status::Pending);
                if delta != 0 {
                    bump(counters, &pk, delta)?;
                    bump(counters, PENDING_TOTAL, delta)?;
                }
                proposals.insert(id.as_slice(), bytes.as_slice())?;
                Self::append_audit(meta, audit, &events)?;
                Ok(Cas::Applied)
            }),
        )
    }

    fn put_policy(
        &self,
        hash: &Sha256Hex,
        canonical: &serde_json::Value,
    ) -> Result<(), StoreError> {
        if self.policies.get(hash.as_bytes())?.is_none() {
            self.policies.insert(hash.as_bytes(), encode(canonical)?)?;
        }
        Ok(())
    }

    fn get_policy(&self, hash: &Sha256Hex) -> Result<Option<serde_json::Value>, StoreError> {
        match self.policies.get(hash.as_bytes())? {
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|e| StoreError::Corrupt {
                    key: format!("policies/{hash}"),
                    why: e.to_string(),
                }),
            None => Ok(None),
        }
    }

    fn pending_count(&self, agent: Option<&AgentName>) -> Result<u64, StoreError> {
        let key = match agent {
            Some(a) => pending_key(a),
            None => PENDING_TOTAL.to_vec(),
        };
        Ok(read_u64(self.counters.get(key)?))
    }

    fn list_status(&self, status: Status, limit: usize) -> Result<Vec<ProposalRecord>, StoreError> {
        self.scan_index(&self.by_status, status.as_str(), limit)
    }

    fn list_agent(
        &self,
        agent: &AgentName,
        limit: usize,
    ) -> Result<Vec<ProposalRecord>, StoreError> {
        self.scan_index(&self.by_agent, agent.as_str(), limit)
    }

    fn count_status(&self, status: Status) -> Result<usize, StoreError> {
        let mut p = status.as_str().as_bytes().to_vec();
        p.push(0);
        Ok(self.by_status.scan_prefix(&p).count())
    }

    fn audit(&self) -> Result<AuditLog, StoreError> {
        let mut out = Vec::new();
        for item in self.audit.iter() {
            let (k, v) = item?;
            let e: AuditEntry = serde_json::from_slice(&v).map_err(|e| StoreError::Corrupt {
                key: format!("audit/{}", hex::encode(&k)),
                why: e.to_string(),
            })?;
            out.push(e);
        }
        let head = match self.meta.get(AUDIT_HEAD)? {
            Some(v) => {
                let h: Head = serde_json::from_slice(&v).map_err(|e| StoreError::Corrupt {
                    key: "audit_head".into(),
                    why: e.to_string(),
                })?;
                Some((h.seq, h.hash))
            }
            None => None,
        };
        Ok((out, head))
    }

    fn flush_blocking(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }
}

impl SledStore {
    /// Test and tooling hook: overwrite one raw audit entry (to prove `audit verify` notices).
    pub fn tamper_audit_entry(&self, seq: u64, entry: &AuditEntry) -> Result<(), StoreError> {
        self.audit.insert(seq.to_be_bytes(), encode(entry)?)?;
        self.db.flush()?;
        Ok(())
    }
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
                let target = self.requested.load(Ordering::SeqCst);
                let store = self.store.clone();
                let started = std::time::Instant::now();
                let r = tokio::task::spawn_blocking(move || store.flush_blocking())
                    .await
                    .map_err(|e| StoreError::Backend(format!("flush task failed: {e}")))?;
                let covered = target - *self.completed.borrow();
                tracing::trace!(
                    micros = started.elapsed().as_micros() as u64,
                    covered,
                    "group flush"
                );
                self.fsyncs.fetch_add(1, Ordering::Relaxed);
                drop(guard);
                r?;
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
pub(crate) mod contract {
    //! Contract tests every `Store` backend must pass.
    use super::*;
    use crate::audit::{verify_chain, AuditKind};
    use approval_core::status::Lifecycle;
    use approval_core::{Preview, Timestamp};

    pub fn record(id: &str, agent: &str, created: i64) -> ProposalRecord {
        let preview = Preview {
            v: 1,
            server_id: ServerId::parse("srv-test").unwrap(),
            proposal_id: ProposalId::parse(id).unwrap(),
            kind: approval_core::Kind::parse("note.write").unwrap(),
            payload: serde_json::json!({"text": id}),
            summary: String::new(),
            requested_by: AgentName::parse(agent).unwrap(),
            created_at: Timestamp::from_unix(created),
            expires_at: Timestamp::from_unix(created + 1800),
            policy_sha256: Sha256Hex::digest(b"policy"),
        };
        ProposalRecord {
            schema: SCHEMA_VERSION,
            revision: 0,
            preview_sha256: preview.sha256(),
            lifecycle: Lifecycle::new(preview.expires_at),
            preview,
            decisions: vec![],
            result: None,
            updated_at: Timestamp::from_unix(created),
        }
    }

    fn ev(kind: AuditKind, rec: &ProposalRecord) -> Vec<AuditEvent> {
        vec![AuditEvent {
            kind,
            proposal_id: rec.id().clone(),
            at: rec.updated_at,
            detail: serde_json::json!({}),
        }]
    }

    pub fn run(store: &dyn Store) {
        let a = record("p-a", "agent1", 1_800_000_000);
        let b = record("p-b", "agent2", 1_800_000_001);
        let lim = PendingLimits::default();
        store.create(&a, ev(AuditKind::Proposed, &a), lim).unwrap();
        store.create(&b, ev(AuditKind::Proposed, &b), lim).unwrap();
        assert!(matches!(
            store.create(&a, ev(AuditKind::Proposed, &a), lim),
            Err(StoreError::Exists(_))
        ));
        assert_eq!(store.pending_count(None).unwrap(), 2);
        assert_eq!(
            store
                .pending_count(Some(&AgentName::parse("agent1").unwrap()))
                .unwrap(),
            1
        );
        // Limits: refused when full, and nothing is written.
        let c = record("p-c", "agent1", 1_800_000_002);
        let tight = PendingLimits {
            per_agent: 1,
            total: 100,
        };
        assert!(matches!(
            store.create(&c, ev(AuditKind::Proposed, &c), tight),
            Err(StoreError::Full(_))
        ));
        assert_eq!(store.get(c.id()).unwrap(), None);
        let tight = PendingLimits {
            per_agent: 100,
            total: 2,
        };
        assert!(matches!(
            store.create(&c, ev(AuditKind::Proposed, &c), tight),
            Err(StoreError::Full(_))
        ));
        assert_eq!(store.pending_count(None).unwrap(), 2);
        assert_eq!(store.get(a.id()).unwrap().as_ref(), Some(&a));
        assert_eq!(
            store.get(&ProposalId::parse("p-none").unwrap()).unwrap(),
            None
        );
        // Listing: newest first, by status and by agent.
        let pending: Vec<_> = store
            .list_status(Status::Pending, 10)
            .unwrap()
            .into_iter()
            .map(|r| r.id().clone())
            .collect();
        assert_eq!(pending, vec![b.id().clone(), a.id().clone()]);
        assert_eq!(store.list_status(Status::Pending, 1).unwrap().len(), 1);
        assert_eq!(
            store
                .list_agent(&AgentName::parse("agent1").unwrap(), 10)
                .unwrap(),
            vec![a.clone()]
        );
        // Compare-and-swap: one winner per revision, index follows the status.
        let now = Timestamp::from_unix(1_800_000_010);
        let approved = a.with_lifecycle(
            a.lifecycle
                .approve(now, approval_core::Seconds::new(60))
                .unwrap(),
            now,
        );
        assert!(matches!(
            store
                .update(&approved, ev(AuditKind::Approved, &approved))
                .unwrap(),
            Cas::Applied
        ));
        assert!(matches!(
            store
                .update(&approved, ev(AuditKind::Approved, &approved))
                .unwrap(),
            Cas::Conflict(_)
        ));
        assert_eq!(store.count_status(Status::Pending).unwrap(), 1);
        assert_eq!(store.count_status(Status::Approved).unwrap(), 1);
        assert_eq!(store.pending_count(None).unwrap(), 1);
        assert_eq!(
            store
                .pending_count(Some(&AgentName::parse("agent1").unwrap()))
                .unwrap(),
            0
        );
        let mut ghost = record("p-ghost", "agent1", 1);
        ghost.revision = 1;
        assert!(matches!(
            store.update(&ghost, vec![]).unwrap(),
            Cas::Missing
        ));
        // Policies are kept once per hash; storing one twice changes nothing.
        let ph = Sha256Hex::digest(b"policy");
        assert_eq!(store.get_policy(&ph).unwrap(), None);
        store
            .put_policy(&ph, &serde_json::json!({"kind": "note.write"}))
            .unwrap();
        store
            .put_policy(&ph, &serde_json::json!({"kind": "other"}))
            .unwrap();
        assert_eq!(
            store.get_policy(&ph).unwrap(),
            Some(serde_json::json!({"kind": "note.write"}))
        );
        // The audit chain has every event, in order, and verifies.
        let (entries, head) = store.audit().unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(verify_chain(entries, head), Ok(3));
        store.flush_blocking().unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sled_store_passes_the_contract() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        contract::run(&store);
    }

    #[test]
    fn server_id_survives_reopen_and_records_persist() {
        let dir = tempfile::tempdir().unwrap();
        let rec = contract::record("p-x", "local", 1_800_000_000);
        let id = {
            let store = SledStore::open(dir.path()).unwrap();
            store
                .create(&rec, vec![], PendingLimits::default())
                .unwrap();
            store.flush_blocking().unwrap();
            store.server_id().clone()
        };
        let store = SledStore::open(dir.path()).unwrap();
        assert_eq!(store.server_id(), &id);
        assert_eq!(store.get(rec.id()).unwrap(), Some(rec));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn group_commit_serves_many_waiters_with_few_fsyncs() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
        let gc = Arc::new(GroupCommit::new(store.clone()));
        let mut tasks = Vec::new();
        for i in 0..64 {
            let (gc, store) = (gc.clone(), store.clone());
            tasks.push(tokio::spawn(async move {
                let rec = contract::record(&format!("p-{i}"), "local", 1_800_000_000 + i);
                store
                    .create(&rec, vec![], PendingLimits::default())
                    .unwrap();
                gc.flush().await.unwrap();
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert!(
            gc.fsync_count() >= 1 && gc.fsync_count() <= 64,
            "{}",
            gc.fsync_count()
        );
    }
}
