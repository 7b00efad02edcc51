//! A consistent copy of the embedded store, and a store made back from one.
//!
//! Why under the writer lock: every write that touches a record or the audit chain
//! takes it, so while the copy is read no record can change without its audit
//! entries and the chain read is the one the records match. sled's iterators are
//! not snapshots; the lock is what makes this one. Writes wait while the entries
//! are copied (to a local file, never to a client: `admin_socket.rs` streams that
//! file afterwards), so a slow reader holds nothing. Marks (`k:`) and policies
//! (`y:`), written without the lock, only ever grow and are keyed by content.
//!
//! May import: the store's contract, `audit`, the backup format, core.

use super::{corrupt, key, Head, SledStore, LAYOUT, LAYOUT_READ};
use crate::audit::{verify_chain, AuditEntry};
use crate::backup::{Header, Item, Writer, FORMAT};
use crate::store::error::StoreError;
use crate::store::Store;
use approval_core::Sha256Hex;
use std::path::Path;

/// What a copy holds, as the commands report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The server the copy is of.
    pub server_id: String,
    /// Proposals.
    pub proposals: u64,
    /// Audit entries, checked as a chain.
    pub audit_entries: u64,
    /// The chain's head, if any entry was written.
    pub head: Option<Sha256Hex>,
}

/// Where [`SledStore::restore_into`] takes a backup's items from, one at a time.
pub type Items<'a> = dyn FnMut() -> Result<Option<Item>, StoreError> + 'a;
/// What [`SledStore::restore_into`] hands each file of the data folder to.
pub type FileSink<'a> = dyn FnMut(&str, &[u8]) -> Result<(), StoreError> + 'a;

/// How long a running server's copy may hold the writer lock: half the fail-stop
/// watchdog's deadline, so a write queued behind the copy never trips it.
pub const LIVE_COPY_LIMIT: std::time::Duration =
    std::time::Duration::from_secs(crate::store::failstop::STALL_DEADLINE.as_secs() / 2);

fn io(e: std::io::Error) -> StoreError {
    StoreError::Backend(format!("cannot write the backup: {e}"))
}

impl SledStore {
    /// Writes every entry of the store, then `files` (name and bytes), in the backup
    /// format; returns the checksum. `made_at` and `made_by` go into the header.
    ///
    /// `lock_limit`: how long the copy may hold the writer lock (a running server's
    /// copy, [`LIVE_COPY_LIMIT`]); past it the copy stops with a clear refusal rather
    /// than holding every write until the fail-stop watchdog ends the server. `None`
    /// for a stopped store, which nobody else writes.
    pub fn snapshot_to(
        &self,
        made_at: &str,
        made_by: &str,
        files: &[(&str, Vec<u8>)],
        out: &mut dyn std::io::Write,
        lock_limit: Option<std::time::Duration>,
    ) -> Result<String, StoreError> {
        let layout = self
            .tree
            .get(key::LAYOUT)?
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_else(|| LAYOUT.to_owned());
        let header = Header {
            format: FORMAT,
            store: "sled".into(),
            layout,
            server_id: self.server_id.to_string(),
            made_at: made_at.into(),
            made_by: made_by.into(),
        };
        let mut w = Writer::start(out, &header).map_err(io)?;
        {
            let _held = self.writer();
            let started = std::time::Instant::now();
            for (n, item) in self.tree.iter().enumerate() {
                let (k, v) = item?;
                w.entry(&k, &v).map_err(io)?;
                if n % 1024 == 1023 && lock_limit.is_some_and(|l| started.elapsed() > l) {
                    return Err(StoreError::Backend(format!(
                        "the store did not copy within {} s while the server runs (writes wait \
                         for the copy, and the server stops after {} s of a held write): stop \
                         the server and run `approval-server backup` on the stopped store",
                        lock_limit.map_or(0, |l| l.as_secs()),
                        crate::store::failstop::STALL_DEADLINE.as_secs()
                    )));
                }
            }
        }
        for (name, bytes) in files {
            w.file(name, bytes).map_err(io)?;
        }
        Ok(w.finish().map_err(io)?.1)
    }

    /// Makes a store in `dir` (which must not hold one) from a backup's items,
    /// handing every [`Item::File`] to `file`; stops at the first error. The store is
    /// flushed and returned open; it is checked by [`SledStore::check`], not here.
    ///
    /// Returned open rather than reopened by the caller: a sled database dropped
    /// while its thread pool still writes keeps its file (and the file's lock) open
    /// a little longer, and an open right after it failed ("could not acquire lock")
    /// under disk load (`copies_taken_during_writes_hold_a_chain_that_verifies`).
    pub fn restore_into(
        dir: &Path,
        header: &Header,
        items: &mut Items<'_>,
        file: &mut FileSink<'_>,
    ) -> Result<SledStore, StoreError> {
        if header.store != "sled" {
            return Err(StoreError::Layout(format!(
                "the backup is of a {} store; this command restores the embedded store",
                header.store
            )));
        }
        if header.layout != LAYOUT && header.layout != LAYOUT_READ {
            return Err(StoreError::Layout(format!(
                "the backup has store layout {}, which this build (layout {LAYOUT}) cannot \
                 read: restore it with the build that made it",
                header.layout
            )));
        }
        let db = super::settings::config(dir).open()?;
        let tree = db.open_tree("state")?;
        let mut batch = sled::Batch::default();
        let mut in_batch = 0usize;
        while let Some(item) = items()? {
            match item {
                Item::Entry(k, v) => {
                    batch.insert(k, v);
                    in_batch += 1;
                    if in_batch == 10_000 {
                        tree.apply_batch(std::mem::take(&mut batch))?;
                        in_batch = 0;
                    }
                }
                Item::File(name, bytes) => file(&name, &bytes)?,
            }
        }
        tree.apply_batch(batch)?;
        db.flush()?;
        Self::on(db, dir)
    }

    /// Reads every record and the whole audit chain: the records decode, the chain
    /// verifies up to its stored head. What `restore` and `backup` report.
    pub fn check(&self) -> Result<Summary, StoreError> {
        let mut proposals = 0u64;
        for item in self.tree.scan_prefix(key::RECORD) {
            let (k, v) = item?;
            super::decode_record(&k, &v)?;
            proposals += 1;
        }
        let (entries, head) = self.audit()?;
        let audit_entries = verify_chain(entries, head)
            .map_err(|e| corrupt(key::AUDIT_HEAD, format!("the audit chain is broken: {e}")))?;
        Ok(Summary {
            server_id: self.server_id.to_string(),
            proposals,
            audit_entries,
            head: head.map(|(_, h)| h),
        })
    }
}

/// Checks a backup's entries without a store: the audit entries (`l:`) chain up to
/// the head (`m:audit_head`), and counts the proposals. What `backup` runs on the
/// file it received, before it keeps it.
#[derive(Default)]
pub struct Tally {
    proposals: u64,
    audit: Vec<AuditEntry>,
    head: Option<(u64, Sha256Hex)>,
}

impl Tally {
    /// Takes one entry into account.
    pub fn add(&mut self, k: &[u8], v: &[u8]) -> Result<(), StoreError> {
        if k.starts_with(key::RECORD) {
            super::decode_record(k, v)?;
            self.proposals += 1;
        } else if k.starts_with(key::AUDIT) {
            self.audit
                .push(serde_json::from_slice(v).map_err(|e| corrupt(k, e))?);
        } else if k == key::AUDIT_HEAD {
            let h: Head = serde_json::from_slice(v).map_err(|e| corrupt(k, e))?;
            self.head = Some((h.seq, h.hash));
        }
        Ok(())
    }

    /// The summary, once the chain verifies.
    pub fn finish(self, server_id: &str) -> Result<Summary, StoreError> {
        let head = self.head;
        let audit_entries = verify_chain(self.audit, self.head)
            .map_err(|e| corrupt(key::AUDIT_HEAD, format!("the audit chain is broken: {e}")))?;
        Ok(Summary {
            server_id: server_id.to_owned(),
            proposals: self.proposals,
            audit_entries,
            head: head.map(|(_, h)| h),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::AuditKind;
    use crate::backup::{Reader, Writer};
    use crate::store::contract;
    use crate::store::PendingLimits;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn items(bytes: &[u8]) -> (Header, Vec<Item>) {
        let (mut r, h) = Reader::open(bytes).unwrap();
        let mut out = Vec::new();
        while let Some(i) = r.item().unwrap() {
            out.push(i);
        }
        (h, out)
    }

    fn tally(h: &Header, items: &[Item]) -> Result<Summary, StoreError> {
        let mut t = Tally::default();
        for i in items {
            if let Item::Entry(k, v) = i {
                t.add(k, v)?;
            }
        }
        t.finish(&h.server_id)
    }

    fn restore(dir: &Path, h: &Header, items: Vec<Item>) -> Result<Summary, StoreError> {
        let mut it = items.into_iter();
        let mut next = || -> Result<Option<Item>, StoreError> { Ok(it.next()) };
        let mut file = |_: &str, _: &[u8]| -> Result<(), StoreError> { Ok(()) };
        SledStore::restore_into(dir, h, &mut next, &mut file)?.check()
    }

    fn snapshot(store: &SledStore) -> Vec<u8> {
        let mut out = Vec::new();
        store
            .snapshot_to("2026-12-07T00:00:00Z", "test", &[], &mut out, None)
            .unwrap();
        out
    }

    /// Four writers create proposals (each with its audit entry) while copies are
    /// taken: every copy's chain verifies and matches its records, before and after
    /// it is restored into a store.
    #[test]
    fn copies_taken_during_writes_hold_a_chain_that_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SledStore::open(&dir.path().join("a")).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let lim = PendingLimits {
            per_agent: u64::MAX,
            total: u64::MAX,
        };
        let writers: Vec<_> = (0..4u8)
            .map(|t| {
                let (store, stop) = (store.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut n = 0u8;
                    while !stop.load(Ordering::Relaxed) && n < 250 {
                        let id = contract::minted(1_800_000_000 + i64::from(t), n);
                        let r = contract::record(&id, "local", 1_800_000_000);
                        store
                            .create(&r, contract::ev(AuditKind::Proposed, &r), lim)
                            .unwrap();
                        n += 1;
                    }
                })
            })
            .collect();
        let mut seen = Vec::new();
        for i in 0..6 {
            let bytes = snapshot(&store);
            let (h, its) = items(&bytes);
            let s = tally(&h, &its).unwrap();
            assert_eq!(
                s.proposals, s.audit_entries,
                "copy {i}: records and chain differ"
            );
            let restored = restore(&dir.path().join(format!("r{i}")), &h, its).unwrap();
            assert_eq!(restored.proposals, s.proposals);
            assert_eq!(restored.audit_entries, s.audit_entries);
            assert_eq!(restored.head, s.head);
            seen.push(s.proposals);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        assert!(
            seen.windows(2).any(|w| w[0] != w[1]),
            "no write landed between copies: {seen:?}"
        );
    }

    /// An audit entry edited and the checksum made anew: the chain gives it away.
    #[test]
    fn a_copy_whose_chain_was_edited_is_refused_whatever_its_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(&dir.path().join("a")).unwrap();
        let lim = PendingLimits::default();
        for n in 0..3 {
            let r = contract::record(&contract::minted(1_800_000_000, n), "local", 1_800_000_000);
            store
                .create(&r, contract::ev(AuditKind::Proposed, &r), lim)
                .unwrap();
        }
        let (h, its) = items(&snapshot(&store));
        let edited: Vec<Item> = its
            .into_iter()
            .map(|i| match i {
                Item::Entry(k, v) if k.starts_with(key::AUDIT) && k.ends_with(&[2]) => {
                    let mut e: serde_json::Value = serde_json::from_slice(&v).unwrap();
                    e["detail"] = serde_json::json!({"edited": true});
                    Item::Entry(k, serde_json::to_vec(&e).unwrap())
                }
                other => other,
            })
            .collect();
        let mut w = Writer::start(Vec::new(), &h).unwrap();
        for i in &edited {
            if let Item::Entry(k, v) = i {
                w.entry(k, v).unwrap();
            }
        }
        let bytes = w.finish().unwrap().0;
        let (h, its) = items(&bytes);
        let e = tally(&h, &its).unwrap_err().to_string();
        assert!(e.contains("audit chain is broken"), "{e}");
        let e = restore(&dir.path().join("r"), &h, its)
            .unwrap_err()
            .to_string();
        assert!(e.contains("audit chain is broken"), "{e}");
    }

    #[test]
    fn a_copy_of_a_newer_layout_or_another_store_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(&dir.path().join("a")).unwrap();
        let (mut h, its) = items(&snapshot(&store));
        h.layout = "4".into();
        let e = restore(&dir.path().join("r"), &h, its.clone())
            .unwrap_err()
            .to_string();
        assert!(e.contains("store layout 4"), "{e}");
        h.layout = LAYOUT.into();
        h.store = "postgres".into();
        let e = restore(&dir.path().join("s"), &h, its)
            .unwrap_err()
            .to_string();
        assert!(e.contains("postgres store"), "{e}");
    }

    /// A live copy that would hold the writer lock past its limit stops with a clear
    /// refusal (and lets writes go on) instead of running into the fail-stop deadline;
    /// a stopped store's copy has no limit.
    #[test]
    fn a_live_copy_past_its_lock_limit_is_refused_and_releases_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(&dir.path().join("a")).unwrap();
        let lim = PendingLimits::default();
        for n in 0..=255u8 {
            for t in 0..3 {
                let r = contract::record(
                    &contract::minted(1_800_000_000 + t, n),
                    "local",
                    1_800_000_000,
                );
                store
                    .create(&r, contract::ev(AuditKind::Proposed, &r), lim)
                    .unwrap();
            }
        }
        let mut out = Vec::new();
        let err = store
            .snapshot_to("t", "test", &[], &mut out, Some(std::time::Duration::ZERO))
            .unwrap_err()
            .to_string();
        assert!(err.contains("stop the server"), "{err}");
        // The lock is free again: a write goes through, and an offline copy is whole.
        let r = contract::record(&contract::minted(1_900_000_000, 1), "local", 1_900_000_000);
        store.create(&r, vec![], lim).unwrap();
        let (h, its) = items(&snapshot(&store));
        assert_eq!(tally(&h, &its).unwrap().proposals, 3 * 256 + 1);
    }

    /// A store whose outbox holds a key of the wrong shape (a damaged folder, a
    /// crafted backup restored) is refused with the key named, never a panic.
    #[test]
    fn a_misshapen_outbox_key_is_named_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        drop(SledStore::open(&path).unwrap());
        {
            let db = sled::open(&path).unwrap();
            let mut k = key::OUTBOX.to_vec();
            k.push(b'x');
            let tree = db.open_tree("state").unwrap();
            tree.insert(k, &b"{}"[..]).unwrap();
            db.flush().unwrap();
        }
        let err = SledStore::open(&path).err().expect("refused").to_string();
        assert!(err.contains("outbox key is not a number"), "{err}");
    }
}
