//! The configuration version under quorum (issue #35) in the embedded store: one key,
//! `m:config`, holding the [`ConfigHead`] as JSON, replaced under the writer lock in
//! the same batch as its audit entries.

use super::{corrupt, encode, key, SledStore};
use crate::audit::AuditEvent;
use crate::store::error::StoreError;
use approval_core::governance::ConfigHead;

impl SledStore {
    pub(super) fn read_config_head(&self) -> Result<Option<ConfigHead>, StoreError> {
        match self.tree.get(key::CONFIG)? {
            None => Ok(None),
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|e| corrupt(key::CONFIG, e)),
        }
    }

    /// The compare-and-swap on the version, under the writer lock (every write that
    /// touches the audit chain takes it), then one flush: durable before it returns.
    pub(super) fn write_config_head(
        &self,
        from: u64,
        head: &ConfigHead,
        events: Vec<AuditEvent>,
    ) -> Result<bool, StoreError> {
        let mut w = self.writer();
        let current = self.read_config_head()?.map_or(0, |h| h.version);
        if current != from || head.version != from + 1 {
            return Ok(false);
        }
        let mut batch = sled::Batch::default();
        batch.insert(key::CONFIG, encode(head)?);
        let sealed = Self::append_audit(&w, &mut batch, events)?;
        self.tree.apply_batch(batch)?;
        (w.seq, w.head) = sealed;
        drop(w);
        self.db.flush()?;
        Ok(true)
    }
}
