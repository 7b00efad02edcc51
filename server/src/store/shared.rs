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

/// What a value decoded from `json` can hold in memory, never less: its bytes, plus
/// [`VALUE_COST`] for every `,` `:` `[` `{` (each value or member the JSON can hold
/// starts after one). Caches of decoded records count this, not the JSON's length:
/// a payload like `[0,0,0,…]` takes 2 bytes of JSON per element and 32 bytes per
/// decoded element (more while its array grows), so a bound on stored bytes alone
/// let an agent make a cache hold 16 to 32 times its stated size.
pub(crate) fn held_weight(json: &[u8]) -> usize {
    let starts = json
        .iter()
        .filter(|b| matches!(b, b',' | b':' | b'[' | b'{'))
        .count();
    json.len().saturating_add(starts.saturating_mul(VALUE_COST))
}

/// The memory counted per decoded value or member: a `serde_json::Value` (32 bytes)
/// at twice its size, for the spare room of growing arrays and maps and their keys.
pub(crate) const VALUE_COST: usize = 64;

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use std::mem::size_of;

    /// Shapes an agent can put in a payload, each of 60,000 elements: the weight is
    /// never below what their decoding must hold (a `Value` per element, and a key
    /// `String` per member).
    #[test]
    fn held_weight_is_never_below_the_decoded_values() {
        let n = 60_000;
        let zeros = format!("[{}0]", "0,".repeat(n - 1));
        let empties = format!("[{}[]]", "[],".repeat(n - 1));
        let members: Vec<String> = (0..n).map(|i| format!("\"{i}\":0")).collect();
        let object = format!("{{{}}}", members.join(","));
        for (json, floor) in [
            (&zeros, n * size_of::<Value>()),
            (&empties, n * size_of::<Value>()),
            (&object, n * (size_of::<Value>() + size_of::<String>())),
        ] {
            let decoded: Value = serde_json::from_str(json).expect("valid JSON");
            assert!(decoded.is_array() || decoded.is_object());
            let w = held_weight(json.as_bytes());
            assert!(w >= floor, "{w} < {floor} for {}", &json[..12]);
        }
        // A string of the same length is counted at about its bytes.
        let text = format!("\"{}\"", "x".repeat(2 * n));
        assert_eq!(held_weight(text.as_bytes()), text.len());
    }
}
