//! The embedded store: sled, one folder, the default backend.
//!
//! Every state change is one atomic sled batch that writes the record, its index
//! entries, its pending counters and its audit entries together, and the caller
//! flushes before it replies. The compare-and-swap on a record's revision is what
//! makes the execute claim atomic: of any number of concurrent claims, exactly one
//! sees its expected revision and wins.
//!
//! Why one tree and a writer lock rather than sled transactions: every write
//! touches the audit chain's head, so writers are serial whatever we do. sled 0.34
//! transactions over several trees made that serial section long (a read set,
//! conflict checks and retries under a process-wide lock) and thrashed when 32
//! writers collided on the head. Here writers take one short in-process lock,
//! read what they need, and apply one batch, which sled makes atomic on disk (a
//! crash leaves all of it or none). The lock holds the audit head and the pending
//! counters in memory, so a write reads only the record it changes. Readers
//! never take the lock.
//!
//! Flushes are grouped ([`GroupCommit`](super::group_commit::GroupCommit)): one
//! flusher fsyncs for every ticket issued before it started, the others wait for it.
//! Durability is never skipped, only shared; the writer lock is never held across an
//! fsync. Inside sled the same holds one level down (vendor/sled/PATCHES.md §6).
//!
//! May import: the store's contract, `shared`, `page`, `memo`, `outbox`, `audit`, `record`, core.

use super::api::{AuditLog, Cas, PendingLimits, Store};
use super::error::StoreError;
use super::memo::DecodeMemo;
use super::outbox::{due::Pick, OutboxItem, OutboxState};
use super::page::{
    decode_head, walk, Cursor, HeadPage, IndexEntries, ListIndex, RecordHead, RecordPage,
};
use super::shared::{self, encode, moved, pending_delta, seal};
use crate::audit::{self, AuditEntry, AuditEvent};
use crate::record::ProposalRecord;
use ::sled;
use approval_core::claim::{cas_applies, Guard};
use approval_core::ids::AgentName;
use approval_core::status::{Lifecycle, Status};
use approval_core::{ProposalId, PublicKey, ServerId, Sha256Hex, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

impl From<::sled::Error> for StoreError {
    fn from(e: ::sled::Error) -> Self {
        StoreError::Backend(e.to_string())
    }
}

mod backup;
mod config;
mod key;
mod marks;
mod settings;

pub use settings::{CACHE_BYTES, CHECKPOINT_BYTES, CHECKPOINT_BYTES_ENV};

/// The layout of keys written by this build; see [`key`]. Layout 1 (one sled
/// tree per kind of entry, written with sled transactions) is refused by name.
///
/// Layout 3 files the records of minted ids ([`ProposalId::mint`]) under their
/// creation-ordered key; it reads layout 2 (every record under its id), and marks such a
/// folder 3 when it opens it, so a layout-2 build refuses it afterwards instead of
/// missing every record made since.
const LAYOUT: &str = "3";

/// The earlier layout this build reads as it is, and upgrades by its mark alone.
const LAYOUT_READ: &str = "2";

/// Trees of layout 1, whose presence means an older build made the folder.
const LAYOUT_1_TREES: [&[u8]; 3] = [b"meta", b"proposals", b"audit"];

#[derive(Serialize, Deserialize)]
struct Head {
    seq: u64,
    hash: Sha256Hex,
}

/// What the writer lock guards: the state every write reads and advances, kept in
/// memory so that a write does not read it back from the tree. It only changes
/// after the batch that carries it was applied, so a failed write leaves it as is.
struct Writer {
    seq: u64,
    head: Sha256Hex,
    pending_total: u64,
    pending: HashMap<String, u64>,
    /// Outbox entries held, and the next entry's number.
    outbox_len: u64,
    outbox_next: u64,
    /// Whether writes queue notifications, the cap, and what was dropped at it.
    outbox: OutboxState,
}

/// Just the fields of a stored record that a write needs to find its index
/// entries: decoding these skips the preview payload and the decisions.
#[derive(Deserialize)]
struct Indexed {
    schema: u32,
    revision: u64,
    lifecycle: Lifecycle,
    preview: IndexedPreview,
}

#[derive(Deserialize)]
struct IndexedPreview {
    proposal_id: ProposalId,
    requested_by: AgentName,
    created_at: Timestamp,
}

/// The sled backend.
pub struct SledStore {
    db: sled::Db,
    tree: sled::Tree,
    server_id: ServerId,
    writer: Mutex<Writer>,
    memo: DecodeMemo, // a record read again with the same bytes is not parsed again
}

fn read_u64(v: Option<sled::IVec>) -> u64 {
    v.and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0)
}

/// A stored value named by its sled key, as errors name it.
fn corrupt(key: &[u8], why: impl ToString) -> StoreError {
    shared::corrupt(&String::from_utf8_lossy(key), why)
}

fn decode_record(key: &[u8], bytes: &[u8]) -> Result<ProposalRecord, StoreError> {
    shared::decode_record(&String::from_utf8_lossy(key), bytes)
}

fn decode_indexed(key: &[u8], bytes: &[u8]) -> Result<Indexed, StoreError> {
    let rec: Indexed = serde_json::from_slice(bytes).map_err(|e| corrupt(key, e))?;
    shared::check_schema(&String::from_utf8_lossy(key), rec.schema)?;
    Ok(rec)
}

impl SledStore {
    /// Opens (or creates) the store in `dir`. The server id is made on first open.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::on(settings::config(dir).open()?, dir)
    }

    /// The store over `db` (opened on `dir`): layout checked, server id and writer read.
    fn on(db: sled::Db, dir: &Path) -> Result<Self, StoreError> {
        let names = db.tree_names();
        if LAYOUT_1_TREES
            .iter()
            .any(|t| names.iter().any(|n| n.as_ref() == *t))
        {
            return Err(StoreError::Layout(format!(
                "the data folder {} was written by an earlier build (store layout 1); this build \
                 reads layout {LAYOUT}. Start this build with a new --data folder, and keep the old \
                 one: the earlier build can still export its audit log (audit export)",
                dir.display()
            )));
        }
        let tree = db.open_tree("state")?;
        match tree.get(key::LAYOUT)? {
            Some(v) if v.as_ref() == LAYOUT_READ.as_bytes() => {
                // Durable before any record is filed the new way.
                tree.insert(key::LAYOUT, LAYOUT.as_bytes())?;
                db.flush()?;
            }
            Some(v) if v.as_ref() != LAYOUT.as_bytes() => {
                return Err(StoreError::Layout(format!(
                    "the data folder {} has store layout {}, which this build (layout {LAYOUT}) \
                     cannot read: use the build that wrote it",
                    dir.display(),
                    String::from_utf8_lossy(&v)
                )))
            }
            Some(_) => {}
            None => {
                tree.insert(key::LAYOUT, LAYOUT.as_bytes())?;
            }
        }
        let server_id = Self::server_id_of(&db, &tree)?;
        let writer = Self::load_writer(&tree)?;
        Ok(Self {
            db,
            tree,
            server_id,
            writer: Mutex::new(writer),
            memo: DecodeMemo::default(),
        })
    }

    fn server_id_of(db: &sled::Db, tree: &sled::Tree) -> Result<ServerId, StoreError> {
        let parse = |v: &[u8]| {
            ServerId::parse(&String::from_utf8_lossy(v)).map_err(|e| corrupt(key::SERVER_ID, e))
        };
        if let Some(v) = tree.get(key::SERVER_ID)? {
            return parse(&v);
        }
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).map_err(|e| StoreError::Backend(format!("no randomness: {e}")))?;
        let id = format!("srv-{}", hex::encode(b));
        // Only the first writer wins, even if two processes raced here.
        let _ =
            tree.compare_and_swap(key::SERVER_ID, None as Option<&[u8]>, Some(id.as_bytes()))?;
        let v = tree.get(key::SERVER_ID)?.unwrap_or_default();
        db.flush()?;
        parse(&v)
    }

    fn load_writer(tree: &sled::Tree) -> Result<Writer, StoreError> {
        let (seq, head) = match tree.get(key::AUDIT_HEAD)? {
            Some(v) => {
                let h: Head =
                    serde_json::from_slice(&v).map_err(|e| corrupt(key::AUDIT_HEAD, e))?;
                (h.seq, h.hash)
            }
            None => (0, audit::genesis()),
        };
        let mut pending = HashMap::new();
        for item in tree.scan_prefix(key::PENDING_AGENT) {
            let (k, v) = item?;
            let agent = String::from_utf8_lossy(&k[key::PENDING_AGENT.len()..]).into_owned();
            pending.insert(agent, read_u64(Some(v)));
        }
        let mut outbox_len = 0u64;
        for item in tree.scan_prefix(key::OUTBOX).keys() {
            item?;
            outbox_len += 1;
        }
        let after_last = match tree.scan_prefix(key::OUTBOX).keys().next_back() {
            Some(k) => {
                let k = k?;
                key::outbox_seq(&k)? + 1
            }
            None => 1,
        };
        let outbox_next = after_last.max(read_u64(tree.get(key::OUTBOX_NEXT)?));
        Ok(Writer {
            seq,
            head,
            pending_total: read_u64(tree.get(key::PENDING_TOTAL)?),
            pending,
            outbox_len,
            outbox_next,
            outbox: OutboxState::default(),
        })
    }

    /// The writer lock. A panic while it was held cannot have left it half-updated
    /// (it changes only after a successful write), so a poisoned lock is still sound.
    fn writer(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes the store takes on disk.
    pub fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }

    fn scan_index(
        &self,
        prefix: &[u8],
        limit: usize,
        keep: impl Fn(&ProposalRecord) -> bool,
    ) -> Result<Vec<ProposalRecord>, StoreError> {
        let mut out = Vec::new();
        for item in self.tree.scan_prefix(prefix).rev() {
            if out.len() >= limit {
                break;
            }
            let (k, _) = item?;
            let Some(id) = k.get(prefix.len() + 8..) else {
                return Err(corrupt(&k, "index key too short"));
            };
            let rk = key::record_of(id);
            if let Some(v) = self.tree.get(&rk)? {
                let rec = decode_record(&rk, &v)?;
                // A reader may see an index entry a moment before or after its record
                // changes; what it returns always matches what was asked for.
                if keep(&rec) {
                    out.push(rec);
                }
            }
        }
        Ok(out)
    }

    /// Seals `events` after the writer's head into `batch`; returns the new head.
    fn append_audit(
        w: &Writer,
        batch: &mut sled::Batch,
        events: Vec<AuditEvent>,
    ) -> Result<(u64, Sha256Hex), StoreError> {
        let (entries, (seq, hash)) = seal((w.seq, w.head), events);
        if entries.is_empty() {
            return Ok((seq, hash));
        }
        for entry in &entries {
            batch.insert(key::audit(entry.seq), encode(entry)?);
        }
        batch.insert(key::AUDIT_HEAD, encode(&Head { seq, hash })?);
        Ok((seq, hash))
    }

    /// Seals `events` into `batch`, applies it atomically, and only then advances the
    /// writer's in-memory state (audit head, `agent`'s and the total pending counters
    /// when they moved), so a failed write leaves that state as it was.
    fn apply(
        &self,
        w: &mut Writer,
        mut batch: sled::Batch,
        rec: &ProposalRecord,
        events: Vec<AuditEvent>,
        agent: &str,
        counters: Option<(u64, u64)>,
    ) -> Result<(), StoreError> {
        // The notifications this change causes go into the same batch: queued if and
        // only if the change commits.
        let items = w.outbox.items(rec, &events);
        let (room, dropped) = OutboxState::room(w.outbox.cap, w.outbox_len, items.len());
        let mut next = w.outbox_next;
        for item in items.iter().take(room) {
            batch.insert(key::outbox(next), encode(item)?);
            next += 1;
        }
        let queued = next - w.outbox_next;
        if queued > 0 {
            batch.insert(key::OUTBOX_NEXT, &next.to_be_bytes());
        }
        let head = Self::append_audit(w, &mut batch, events)?;
        self.tree.apply_batch(batch)?;
        (w.seq, w.head) = head;
        w.outbox_next = next;
        w.outbox_len += queued;
        w.outbox.count_dropped(rec.id(), dropped);
        if let Some((mine, total)) = counters {
            w.pending.insert(agent.to_owned(), mine);
            w.pending_total = total;
        }
        Ok(())
    }

    /// Writes the pending counters moved by `delta` into `batch`; returns their new values.
    fn move_pending(w: &Writer, batch: &mut sled::Batch, agent: &str, delta: i64) -> (u64, u64) {
        let mine = moved(w.pending.get(agent).copied().unwrap_or(0), delta);
        let total = moved(w.pending_total, delta);
        batch.insert(key::pending(agent), &mine.to_be_bytes());
        batch.insert(key::PENDING_TOTAL, &total.to_be_bytes());
        (mine, total)
    }

    /// The entries of `index` strictly after `after`, newest first: one reverse range
    /// per prefix, ending just before the cursor's position, merged by position
    /// (creation time, then id).
    fn entries(&self, index: &ListIndex, after: Option<&Cursor>) -> Entries<'_> {
        let prefixes: Vec<Vec<u8>> = match index {
            ListIndex::Agent(a) => vec![key::index_prefix(key::BY_AGENT, a.as_str())],
            ListIndex::Statuses(st) => st
                .iter()
                .map(|s| key::index_prefix(key::BY_STATUS, s.as_str()))
                .collect(),
        };
        let mut walks = Vec::with_capacity(prefixes.len());
        for p in &prefixes {
            let end = match after {
                Some(c) => [
                    p.as_slice(),
                    &key::secs_of(c.created),
                    c.id.as_str().as_bytes(),
                ]
                .concat(),
                None => key::prefix_end(p),
            };
            walks.push((p.len(), self.tree.range(p.clone()..end).rev().peekable()));
        }
        Entries {
            tree: &self.tree,
            walks,
        }
    }
}

/// One index's entries in a page walk ([`walk`]): the merge of its ranges.
struct Entries<'a> {
    tree: &'a sled::Tree,
    walks: Vec<(usize, std::iter::Peekable<std::iter::Rev<sled::Iter>>)>,
}

impl IndexEntries for Entries<'_> {
    type Body = sled::IVec;

    fn next_entry(&mut self) -> Option<Result<(Cursor, String, Option<sled::IVec>), StoreError>> {
        loop {
            // The walk whose next entry is the newest.
            let mut best: Option<(usize, Vec<u8>)> = None;
            for (i, (plen, w)) in self.walks.iter_mut().enumerate() {
                let pos = match w.peek() {
                    None => continue,
                    Some(Err(_)) => {
                        if let Some(Err(e)) = w.next() {
                            return Some(Err(e.into()));
                        }
                        continue;
                    }
                    Some(Ok((k, _))) => k.get(*plen..).unwrap_or_default().to_vec(),
                };
                if best.as_ref().is_none_or(|(_, b)| pos > *b) {
                    best = Some((i, pos));
                }
            }
            let (i, pos) = best?;
            let (plen, w) = &mut self.walks[i];
            let plen = *plen;
            let Some(Ok((k, _))) = w.next() else {
                continue;
            };
            return Some(self.entry(plen, &k, &pos));
        }
    }

    fn more(&mut self) -> bool {
        self.walks.iter_mut().any(|(_, w)| w.peek().is_some())
    }
}

impl Entries<'_> {
    /// The index entry `k` (whose position, after the prefix of `plen` bytes, is
    /// `pos`), and its record's stored bytes.
    #[allow(clippy::type_complexity)]
    fn entry(
        &self,
        plen: usize,
        k: &[u8],
        pos: &[u8],
    ) -> Result<(Cursor, String, Option<sled::IVec>), StoreError> {
        let Some(id) = k.get(plen + 8..) else {
            return Err(corrupt(k, "index key too short"));
        };
        let created = pos
            .get(..8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(|b| Timestamp::from_unix(i64::from_be_bytes(b)));
        let id_str = String::from_utf8_lossy(id).into_owned();
        let here = match (created, ProposalId::parse(&id_str).ok()) {
            (Some(c), Some(id)) => Cursor::of(c, &id),
            _ => return Err(corrupt(k, "index key does not name a record")),
        };
        let rk = key::record_of(id);
        let body = self.tree.get(&rk)?;
        Ok((here, String::from_utf8_lossy(&rk).into_owned(), body))
    }
}

impl Store for SledStore {
    fn server_id(&self) -> &ServerId {
        &self.server_id
    }

    fn server_key(&self) -> Result<Option<PublicKey>, StoreError> {
        self.tree
            .get(key::SERVER_KEY)?
            .map(|v| {
                PublicKey::parse(&String::from_utf8_lossy(&v))
                    .map_err(|e| corrupt(key::SERVER_KEY, e))
            })
            .transpose()
    }

    fn bind_server_key(&self, pk: &PublicKey) -> Result<PublicKey, StoreError> {
        let b64 = pk.to_base64();
        // Only the first key bound wins, even if two processes raced here.
        let _ = self.tree.compare_and_swap(
            key::SERVER_KEY,
            None as Option<&[u8]>,
            Some(b64.as_bytes()),
        )?;
        self.db.flush()?;
        self.server_key()?
            .ok_or_else(|| StoreError::Backend("the server key was not stored".into()))
    }

    fn raise(&self, name: &str, value: u64) -> Result<super::Raise, StoreError> {
        marks::raise(&self.db, &self.tree, name, value)
    }
    fn config_head(&self) -> Result<Option<approval_core::governance::ConfigHead>, StoreError> {
        self.read_config_head()
    }
    fn advance_config(
        &self,
        from: u64,
        head: &approval_core::governance::ConfigHead,
        events: Vec<AuditEvent>,
    ) -> Result<bool, StoreError> {
        self.write_config_head(from, head, events)
    }

    fn get(&self, id: &ProposalId) -> Result<Option<ProposalRecord>, StoreError> {
        let k = key::record(id);
        match self.tree.get(&k)? {
            Some(v) => Ok(Some(self.memo.decode(id, &v, |b| decode_record(&k, b))?)),
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
        let (id, agent, created) = (rec.id(), &rec.preview.requested_by, rec.preview.created_at);
        let rk = key::record(id);
        let mut batch = sled::Batch::default();
        batch.insert(rk.as_slice(), bytes);
        batch.insert(key::by_status(rec.status(), created, id), &[]);
        batch.insert(key::by_agent(agent, created, id), &[]);
        if let Some(d) = rec.lifecycle.deadline() {
            batch.insert(key::due(d, id), &[]);
        }

        let mut w = self.writer();
        if self.tree.contains_key(&rk)? {
            return Err(StoreError::Exists(id.to_string()));
        }
        let counters = if rec.status() == Status::Pending {
            let (mine, total) = Self::move_pending(&w, &mut batch, agent.as_str(), 1);
            limits.admit(agent.as_str(), mine, total)?;
            Some((mine, total))
        } else {
            None
        };
        self.apply(&mut w, batch, rec, events, agent.as_str(), counters)
    }

    fn update(&self, new: &ProposalRecord, events: Vec<AuditEvent>) -> Result<Cas, StoreError> {
        let bytes = encode(new)?;
        let id = new.id();
        let rk = key::record(id);
        let mut w = self.writer();
        let Some(cur_bytes) = self.tree.get(&rk)? else {
            return Ok(Cas::Missing);
        };
        let cur = decode_indexed(&rk, &cur_bytes)?;
        // The claim's compare-and-swap: core's rule, shared with PostgreSQL and the model.
        if !cas_applies(cur.revision, new.revision, Guard::Revision)
            || &cur.preview.proposal_id != id
        {
            return Ok(Cas::Conflict(Box::new(decode_record(&rk, &cur_bytes)?)));
        }
        let created = cur.preview.created_at;
        let mut batch = sled::Batch::default();
        let (old_status, new_status) = (cur.lifecycle.status, new.status());
        if old_status != new_status {
            batch.remove(key::by_status(old_status, created, id));
            batch.insert(key::by_status(new_status, created, id), &[]);
        }
        let (old_due, new_due) = (cur.lifecycle.deadline(), new.lifecycle.deadline());
        if old_due != new_due {
            if let Some(d) = old_due {
                batch.remove(key::due(d, id));
            }
            if let Some(d) = new_due {
                batch.insert(key::due(d, id), &[]);
            }
        }
        let agent = cur.preview.requested_by.as_str();
        let delta = pending_delta(Some(old_status), new_status);
        let counters = (delta != 0).then(|| Self::move_pending(&w, &mut batch, agent, delta));
        batch.insert(rk.as_slice(), bytes);
        self.apply(&mut w, batch, new, events, agent, counters)?;
        Ok(Cas::Applied)
    }

    fn put_policy(
        &self,
        hash: &Sha256Hex,
        canonical: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let k = key::policy(hash);
        if !self.tree.contains_key(&k)? {
            // Content-addressed: two racing writers write the same bytes.
            self.tree.insert(k, encode(canonical)?)?;
        }
        Ok(())
    }

    fn get_policy(&self, hash: &Sha256Hex) -> Result<Option<serde_json::Value>, StoreError> {
        let k = key::policy(hash);
        match self.tree.get(&k)? {
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|e| corrupt(&k, e)),
            None => Ok(None),
        }
    }

    fn pending_count(&self, agent: Option<&AgentName>) -> Result<u64, StoreError> {
        let w = self.writer();
        Ok(match agent {
            Some(a) => w.pending.get(a.as_str()).copied().unwrap_or(0),
            None => w.pending_total,
        })
    }

    fn list_status(&self, status: Status, limit: usize) -> Result<Vec<ProposalRecord>, StoreError> {
        let prefix = key::index_prefix(key::BY_STATUS, status.as_str());
        self.scan_index(&prefix, limit, |r| r.status() == status)
    }

    fn list_agent(
        &self,
        agent: &AgentName,
        limit: usize,
    ) -> Result<Vec<ProposalRecord>, StoreError> {
        let prefix = key::index_prefix(key::BY_AGENT, agent.as_str());
        self.scan_index(&prefix, limit, |r| &r.preview.requested_by == agent)
    }

    fn page(
        &self,
        index: &ListIndex,
        after: Option<&Cursor>,
        limit: usize,
        keep: &mut dyn FnMut(&RecordHead) -> bool,
    ) -> Result<HeadPage, StoreError> {
        let (heads, next) = walk(&mut self.entries(index, after), index, limit, keep)?;
        Ok(HeadPage { heads, next })
    }

    fn page_records(
        &self,
        index: &ListIndex,
        after: Option<&Cursor>,
        limit: usize,
        keep: &mut dyn FnMut(&RecordHead) -> bool,
    ) -> Result<RecordPage, StoreError> {
        let (records, next) = walk(&mut self.entries(index, after), index, limit, keep)?;
        Ok(RecordPage { records, next })
    }

    fn due(&self, now: Timestamp, limit: usize) -> Result<Vec<RecordHead>, StoreError> {
        let mut out = Vec::new();
        for item in self.tree.range(key::DUE.to_vec()..key::due_end(now)) {
            if out.len() >= limit {
                break;
            }
            let (k, _) = item?;
            let Some(id) = k.get(key::DUE.len() + 8..) else {
                return Err(corrupt(&k, "index key too short"));
            };
            let rk = key::record_of(id);
            if let Some(v) = self.tree.get(&rk)? {
                let head = decode_head(&String::from_utf8_lossy(&rk), &v)?;
                if head.lifecycle.is_expired_at(now) {
                    out.push(head);
                }
            }
        }
        Ok(out)
    }

    fn count_status(&self, status: Status) -> Result<usize, StoreError> {
        let prefix = key::index_prefix(key::BY_STATUS, status.as_str());
        Ok(self.tree.scan_prefix(prefix).count())
    }

    fn audit(&self) -> Result<AuditLog, StoreError> {
        let mut out = Vec::new();
        for item in self.tree.scan_prefix(key::AUDIT) {
            let (k, v) = item?;
            let e: AuditEntry = serde_json::from_slice(&v).map_err(|e| StoreError::Corrupt {
                key: format!("audit/{}", hex::encode(&k[key::AUDIT.len()..])),
                why: e.to_string(),
            })?;
            out.push(e);
        }
        let head = match self.tree.get(key::AUDIT_HEAD)? {
            Some(v) => {
                let h: Head =
                    serde_json::from_slice(&v).map_err(|e| corrupt(key::AUDIT_HEAD, e))?;
                Some((h.seq, h.hash))
            }
            None => None,
        };
        Ok((out, head))
    }

    fn set_outbox(&self, on: bool, cap: u64) {
        let mut w = self.writer();
        w.outbox.on = on;
        w.outbox.cap = cap;
    }

    fn outbox_page(&self, limit: usize) -> Result<Vec<(u64, OutboxItem)>, StoreError> {
        self.tree
            .scan_prefix(key::OUTBOX)
            .take(limit)
            .map(|item| key::outbox_entry(item?))
            .collect()
    }

    fn outbox_due(
        &self,
        now_ms: u64,
        per_kind: usize,
        limit: usize,
    ) -> Result<Vec<(u64, OutboxItem)>, StoreError> {
        // One pass over the outbox (at most its cap), holding at most `per_kind`
        // entries of each kind: the selection itself is `outbox::due`'s.
        let mut pick = Pick::new(now_ms, per_kind);
        for item in self.tree.scan_prefix(key::OUTBOX) {
            let (seq, it) = key::outbox_entry(item?)?;
            pick.offer(seq, it);
        }
        Ok(pick.finish(limit))
    }

    fn outbox_put(&self, seq: u64, item: &OutboxItem) -> Result<(), StoreError> {
        let _w = self.writer();
        let k = key::outbox(seq);
        // Only an entry still queued is rewritten.
        if self.tree.contains_key(&k)? {
            self.tree.insert(k, encode(item)?)?;
        }
        Ok(())
    }

    fn outbox_remove(&self, seq: u64) -> Result<(), StoreError> {
        let mut w = self.writer();
        if self.tree.remove(key::outbox(seq))?.is_some() {
            w.outbox_len = w.outbox_len.saturating_sub(1);
        }
        Ok(())
    }

    fn outbox_counts(&self) -> (u64, u64) {
        let w = self.writer();
        (w.outbox_len, w.outbox.dropped)
    }

    fn flush_blocking(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }

    fn snapshot(
        &self,
        made_at: &str,
        made_by: &str,
        files: &[(&str, Vec<u8>)],
        out: &mut dyn std::io::Write,
    ) -> Result<String, StoreError> {
        // The running server's copy (the admin socket's): bounded under the lock.
        self.snapshot_to(made_at, made_by, files, out, Some(backup::LIVE_COPY_LIMIT))
    }
}

pub use backup::{Summary, Tally};

impl SledStore {
    /// Test and tooling hook: overwrite one raw audit entry (to prove `audit verify` notices).
    pub fn tamper_audit_entry(&self, seq: u64, entry: &AuditEntry) -> Result<(), StoreError> {
        self.tree.insert(key::audit(seq), encode(entry)?)?;
        self.db.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
