//! The store's write rules, written once above the backends: how a record is
//! encoded and its schema checked on the way back, how audit events are sealed into
//! the chain after its head, and how a write moves the PENDING counters. The pending
//! limits themselves are [`PendingLimits::admit`](super::api::PendingLimits::admit), the
//! outbox cap is [`OutboxState`](super::outbox::OutboxState), and the page walk is
//! [`page::walk`](super::page::walk), which decodes only heads. A backend supplies only primitive operations
//! (read, compare-and-swap, scan, one atomic batch or transaction).
//!
//! May import: `audit`, `record`, core. Never a backend.

use super::error::StoreError;
use crate::audit::{AuditEntry, AuditEvent};
use crate::record::{ProposalRecord, SCHEMA_VERSION};
use approval_core::status::Status;
use approval_core::Sha256Hex;
use serde::Serialize;

/// A stored value named `key` that this build cannot read.
pub(crate) fn corrupt(key: &str, why: impl ToString) -> StoreError {
    StoreError::Corrupt {
        key: key.to_owned(),
        why: why.to_string(),
    }
}

/// A value as stored (JSON).
pub(crate) fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(v).map_err(|e| StoreError::Backend(format!("cannot encode: {e}")))
}

/// Refuses a stored body written by a build with another record schema.
pub(crate) fn check_schema(key: &str, schema: u32) -> Result<(), StoreError> {
    if schema != SCHEMA_VERSION {
        return Err(corrupt(
            key,
            format!("schema version {schema} is not supported by this build"),
        ));
    }
    Ok(())
}

/// A stored record, its schema checked.
pub(crate) fn decode_record(key: &str, bytes: &[u8]) -> Result<ProposalRecord, StoreError> {
    let rec: ProposalRecord = serde_json::from_slice(bytes).map_err(|e| corrupt(key, e))?;
    check_schema(key, rec.schema)?;
    Ok(rec)
}

/// Seals `events` into audit entries after the chain's head `(seq, hash)`; returns
/// the entries and the new head (the old one when there are no events).
pub(crate) fn seal(
    head: (u64, Sha256Hex),
    events: Vec<AuditEvent>,
) -> (Vec<AuditEntry>, (u64, Sha256Hex)) {
    let (mut seq, mut prev) = head;
    let mut entries = Vec::with_capacity(events.len());
    for ev in events {
        seq += 1;
        let entry = AuditEntry::seal(seq, prev, ev);
        prev = entry.hash;
        entries.push(entry);
    }
    (entries, (seq, prev))
}

/// How a write moves the PENDING counters: +1 into PENDING, -1 out of it, else 0
/// (`was`: the stored status, `None` for a new record).
pub(crate) fn pending_delta(was: Option<Status>, now: Status) -> i64 {
    i64::from(now == Status::Pending) - i64::from(was == Some(Status::Pending))
}

/// Moves a counter by `delta`, never below zero.
pub(crate) fn moved(cur: u64, delta: i64) -> u64 {
    if delta >= 0 {
        cur.saturating_add(delta.unsigned_abs())
    } else {
        cur.saturating_sub(delta.unsigned_abs())
    }
}

/// A value as stored, as text (a database's text column).
pub(crate) fn encode_text<T: Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Backend(format!("cannot encode: {e}")))
}

/// The longest mark name [`Store::raise`](super::Store::raise) takes, in bytes.
pub const MAX_MARK_NAME: usize = 200;

/// Refuses a mark name that is empty or too long: one rule for every backend.
pub fn check_mark_name(name: &str) -> Result<(), StoreError> {
    if name.is_empty() || name.len() > MAX_MARK_NAME {
        return Err(StoreError::Backend(format!(
            "a mark name is 1 to {MAX_MARK_NAME} bytes, not {}",
            name.len()
        )));
    }
    Ok(())
}
