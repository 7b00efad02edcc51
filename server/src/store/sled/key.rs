//! Keys in the one sled tree: a short prefix per kind of entry, then fixed-width
//! big-endian numbers where order matters (so a prefix scan walks them in order).
//!
//! The on-disk layout: these bytes are what a data folder holds, so they never change
//! without a new layout number (see `LAYOUT` in the parent module).

use approval_core::ids::AgentName;
use approval_core::status::Status;
use approval_core::{ProposalId, Sha256Hex, Timestamp};

pub const SERVER_ID: &[u8] = b"m:server_id";
pub const SERVER_KEY: &[u8] = b"m:server_key";
pub const LAYOUT: &[u8] = b"m:layout";
pub const AUDIT_HEAD: &[u8] = b"m:audit_head";
/// The configuration version under quorum (issue #35): a `ConfigHead` as JSON.
pub const CONFIG: &[u8] = b"m:config";
pub const PENDING_TOTAL: &[u8] = b"c:pending";
pub const PENDING_AGENT: &[u8] = b"c:pending:";
pub const RECORD: &[u8] = b"p:";
pub const BY_STATUS: &[u8] = b"s:";
pub const BY_AGENT: &[u8] = b"a:";
pub const DUE: &[u8] = b"d:";
pub const AUDIT: &[u8] = b"l:";
pub const POLICY: &[u8] = b"y:";
pub const OUTBOX: &[u8] = b"o:";
/// Marks that only go up (`Store::raise`): `k:<name>` to a big-endian u64.
pub const MARK: &[u8] = b"k:";
/// The next outbox entry's number, so numbers (and the `X-Approval-Delivery`
/// ids made of them) are never reused, even after the outbox emptied.
pub const OUTBOX_NEXT: &[u8] = b"c:outbox_next";

pub fn outbox(seq: u64) -> Vec<u8> {
    join(&[OUTBOX, &seq.to_be_bytes()])
}

fn join(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn secs(t: Timestamp) -> [u8; 8] {
    // Timestamps are clamped to 1970..=9999, so never negative: big-endian i64
    // bytes sort as the times do.
    t.unix().to_be_bytes()
}

pub fn secs_of(t: Timestamp) -> [u8; 8] {
    secs(t)
}

/// The first key after every key that starts with `prefix` (which ends in NUL).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

/// A record's key: filed by [`ProposalId::order_key`], in creation order for the
/// ids this build mints.
pub fn record(id: &ProposalId) -> Vec<u8> {
    record_of(id.as_str().as_bytes())
}

/// [`record`] for an id read out of an index key.
pub fn record_of(id: &[u8]) -> Vec<u8> {
    join(&[RECORD, &approval_core::ids::order_key_of(id)])
}

pub fn pending(agent: &str) -> Vec<u8> {
    join(&[PENDING_AGENT, agent.as_bytes()])
}

/// `s:<status> NUL` or `a:<agent> NUL`: the prefix of one index's entries.
pub fn index_prefix(kind: &[u8], name: &str) -> Vec<u8> {
    join(&[kind, name.as_bytes(), b"\0"])
}

pub fn by_status(status: Status, created: Timestamp, id: &ProposalId) -> Vec<u8> {
    join(&[
        &index_prefix(BY_STATUS, status.as_str()),
        &secs(created),
        id.as_str().as_bytes(),
    ])
}

pub fn by_agent(agent: &AgentName, created: Timestamp, id: &ProposalId) -> Vec<u8> {
    join(&[
        &index_prefix(BY_AGENT, agent.as_str()),
        &secs(created),
        id.as_str().as_bytes(),
    ])
}

pub fn due(deadline: Timestamp, id: &ProposalId) -> Vec<u8> {
    join(&[DUE, &secs(deadline), id.as_str().as_bytes()])
}

/// The first key after every deadline at or before `now`.
pub fn due_end(now: Timestamp) -> Vec<u8> {
    join(&[DUE, &(now.unix() + 1).to_be_bytes()])
}

pub fn audit(seq: u64) -> Vec<u8> {
    join(&[AUDIT, &seq.to_be_bytes()])
}

pub fn policy(hash: &Sha256Hex) -> Vec<u8> {
    join(&[POLICY, hash.as_bytes()])
}

/// The number of an outbox key (`OUTBOX` + 8 big-endian bytes); any other shape
/// (a damaged store, a crafted backup) is named, never a panic.
pub fn outbox_seq(k: &[u8]) -> Result<u64, crate::store::StoreError> {
    k.get(OUTBOX.len()..)
        .and_then(|n| <[u8; 8]>::try_from(n).ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| super::corrupt(k, "outbox key is not a number"))
}

/// One outbox entry from its key (`OUTBOX` + the big-endian number) and value; a key
/// or item that does not decode is named.
pub fn outbox_entry(
    (k, v): (sled::IVec, sled::IVec),
) -> Result<(u64, crate::store::OutboxItem), crate::store::StoreError> {
    let seq = outbox_seq(&k)?;
    let it: crate::store::OutboxItem =
        serde_json::from_slice(&v).map_err(|e| super::corrupt(&k, e))?;
    Ok((seq, it))
}
