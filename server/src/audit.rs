//! The audit log: a hash chain of every event, kept in the store.
//!
//! Each entry carries the hash of the one before it and its own hash over its
//! canonical JSON, so an edited, removed or reordered entry breaks the chain.
//! The store keeps the head (last sequence number and hash) beside the entries
//! and writes both in the same transaction as the state change they record, so
//! the log can never disagree with the state. `approval-server audit verify`
//! walks the chain; `audit export` writes it as JSON lines.

use approval_core::{json, ProposalId, Sha256Hex, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// An agent proposed.
    Proposed,
    /// An approver's decision was accepted.
    Decision,
    /// Quorum reached.
    Approved,
    /// Vetoed.
    Rejected,
    /// An approver revoked.
    Revoked,
    /// The execute claim was won.
    Executing,
    /// The executor finished (or the process died: outcome unknown).
    Finished,
    /// The deadline passed.
    Expired,
    /// The agent withdrew it.
    Withdrawn,
    /// Its policy changed.
    PolicyChanged,
    /// A human resolved an unknown outcome.
    Resolved,
    /// A configuration version came into force (issue #35): the first, adopted from
    /// the files when `root.toml` appeared, or a `gate.config` change applied on
    /// quorum. `detail` names the version, its bundle's hash, and any emergency
    /// removal.
    ConfigApplied,
}

/// An event before it is chained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// What happened.
    pub kind: AuditKind,
    /// To which proposal.
    pub proposal_id: ProposalId,
    /// When.
    pub at: Timestamp,
    /// Details (who, status, outcome).
    pub detail: Value,
}

/// A chained entry, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// 1, 2, 3, ... without gaps.
    pub seq: u64,
    /// The previous entry's hash (all zeros for the first).
    pub prev: Sha256Hex,
    /// The event.
    #[serde(flatten)]
    pub event: AuditEvent,
    /// SHA-256 of the canonical JSON of this entry without `hash`.
    pub hash: Sha256Hex,
}

/// The hash before the first entry.
pub fn genesis() -> Sha256Hex {
    Sha256Hex::digest(b"approval-audit-v1")
}

/// SHA-256 of the entry's canonical JSON (RFC 8785) without `hash`:
/// `{"at","detail","kind","prev","proposal_id","seq"}` in that (sorted) order.
///
/// Written out field by field instead of canonicalising a `Value` built for the
/// purpose: every state change pays for this inside the store's write lock. Only
/// `detail` needs the general canonicaliser; the other members are strings and an
/// integer, which serde_json spells exactly as RFC 8785 does. A unit test holds
/// this to the general canonicaliser.
fn entry_hash(seq: u64, prev: &Sha256Hex, event: &AuditEvent) -> Sha256Hex {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"at\":");
    out.extend_from_slice(string(&event.at).as_bytes());
    out.extend_from_slice(b",\"detail\":");
    out.extend_from_slice(&json::canonical_bytes(&event.detail));
    out.extend_from_slice(b",\"kind\":");
    out.extend_from_slice(string(&event.kind).as_bytes());
    out.extend_from_slice(b",\"prev\":");
    out.extend_from_slice(string(prev).as_bytes());
    out.extend_from_slice(b",\"proposal_id\":");
    out.extend_from_slice(string(&event.proposal_id).as_bytes());
    out.extend_from_slice(b",\"seq\":");
    out.extend_from_slice(seq.to_string().as_bytes());
    out.push(b'}');
    Sha256Hex::digest(&out)
}

/// A string member of an audit entry as JSON (these types cannot fail to serialise).
fn string<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

impl AuditEntry {
    /// Chains `event` after the entry `(seq - 1, prev)`.
    pub fn seal(seq: u64, prev: Sha256Hex, event: AuditEvent) -> Self {
        let hash = entry_hash(seq, &prev, &event);
        Self {
            seq,
            prev,
            event,
            hash,
        }
    }
}

/// A broken chain.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AuditError {
    /// An entry's contents do not match its hash.
    #[error("entry {0} was edited: its hash does not match its contents")]
    Edited(u64),
    /// Entries out of order, or one missing.
    #[error("gap or reorder at entry {found}: expected sequence number {expected}")]
    Gap {
        /// Expected.
        expected: u64,
        /// Found.
        found: u64,
    },
    /// An entry does not point at the one before it.
    #[error("entry {0} does not follow the entry before it (prev hash differs)")]
    Unlinked(u64),
    /// The stored head disagrees with the last entry (entries removed at the end).
    #[error("the log ends at entry {last} but the head says {head}: entries were removed")]
    Truncated {
        /// Last entry found.
        last: u64,
        /// Head's sequence number.
        head: u64,
    },
}

/// Verifies a chain in storage order against the stored head. Returns the number of entries.
pub fn verify_chain(
    entries: impl IntoIterator<Item = AuditEntry>,
    head: Option<(u64, Sha256Hex)>,
) -> Result<u64, AuditError> {
    let mut prev = genesis();
    let mut n = 0u64;
    for e in entries {
        let expected = n + 1;
        if e.seq != expected {
            return Err(AuditError::Gap {
                expected,
                found: e.seq,
            });
        }
        if e.prev != prev {
            return Err(AuditError::Unlinked(e.seq));
        }
        if entry_hash(e.seq, &e.prev, &e.event) != e.hash {
            return Err(AuditError::Edited(e.seq));
        }
        prev = e.hash;
        n = e.seq;
    }
    match head {
        Some((seq, hash)) if seq != n || (n > 0 && hash != prev) => {
            Err(AuditError::Truncated { last: n, head: seq })
        }
        None if n > 0 => Err(AuditError::Truncated { last: n, head: 0 }),
        _ => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(i: i64) -> AuditEvent {
        AuditEvent {
            kind: AuditKind::Proposed,
            proposal_id: ProposalId::parse("p-1").unwrap(),
            at: Timestamp::from_unix(1_800_000_000 + i),
            detail: serde_json::json!({"i": i}),
        }
    }

    fn chain(n: i64) -> Vec<AuditEntry> {
        let mut prev = genesis();
        (1..=n)
            .map(|i| {
                let e = AuditEntry::seal(i as u64, prev, ev(i));
                prev = e.hash;
                e
            })
            .collect()
    }

    fn head(c: &[AuditEntry]) -> Option<(u64, Sha256Hex)> {
        c.last().map(|e| (e.seq, e.hash))
    }

    /// The hand-written canonical form agrees with the general canonicaliser, for
    /// every kind and for details full of characters that need escaping.
    #[test]
    fn entry_hash_is_the_canonical_json_hash() {
        let kinds = [
            AuditKind::Proposed,
            AuditKind::Decision,
            AuditKind::Approved,
            AuditKind::Rejected,
            AuditKind::Revoked,
            AuditKind::Executing,
            AuditKind::Finished,
            AuditKind::Expired,
            AuditKind::Withdrawn,
            AuditKind::PolicyChanged,
            AuditKind::Resolved,
        ];
        let details = [
            serde_json::json!({}),
            serde_json::json!({"agent": "local", "z": [1, 2.5, -0.0, 1e21], "a": null}),
            serde_json::json!({"why": "quote \" back\\slash \u{1} tab\t é \u{10348} \u{2028}"}),
            serde_json::json!("a string"),
            serde_json::json!([{"b": 1, "a": {"d": true, "c": false}}]),
        ];
        for (i, kind) in kinds.into_iter().enumerate() {
            for detail in &details {
                let event = AuditEvent {
                    kind,
                    proposal_id: ProposalId::parse("p-0123456789abcdef").unwrap(),
                    at: Timestamp::from_unix(1_800_000_000 + i as i64),
                    detail: detail.clone(),
                };
                let seq = [1, 42, u64::from(u32::MAX), 1 << 53][i % 4];
                let prev = Sha256Hex::digest(&[i as u8]);
                let general = serde_json::json!({
                    "seq": seq, "prev": prev, "kind": event.kind,
                    "proposal_id": event.proposal_id, "at": event.at, "detail": event.detail,
                });
                assert_eq!(
                    entry_hash(seq, &prev, &event),
                    Sha256Hex::digest(&json::canonical_bytes(&general)),
                    "{kind:?} {detail}"
                );
            }
        }
    }

    #[test]
    fn a_sound_chain_verifies() {
        let c = chain(5);
        assert_eq!(verify_chain(c.clone(), head(&c)), Ok(5));
        assert_eq!(verify_chain(vec![], None), Ok(0));
    }

    #[test]
    fn edits_gaps_reorders_and_truncation_are_caught() {
        let c = chain(5);
        let h = head(&c);
        let mut edited = c.clone();
        edited[2].event.detail = serde_json::json!({"i": 99});
        assert_eq!(verify_chain(edited, h), Err(AuditError::Edited(3)));
        let mut gap = c.clone();
        gap.remove(2);
        assert_eq!(
            verify_chain(gap, h),
            Err(AuditError::Gap {
                expected: 3,
                found: 4
            })
        );
        let mut swapped = c.clone();
        swapped.swap(1, 2);
        assert_eq!(
            verify_chain(swapped, h),
            Err(AuditError::Gap {
                expected: 2,
                found: 3
            })
        );
        let truncated = c[..4].to_vec();
        assert_eq!(
            verify_chain(truncated, h),
            Err(AuditError::Truncated { last: 4, head: 5 })
        );
        // Re-sealing an edited entry still breaks the link to the next one.
        let mut resealed = c.clone();
        resealed[2] = AuditEntry::seal(3, c[1].hash, ev(42));
        assert_eq!(verify_chain(resealed, h), Err(AuditError::Unlinked(4)));
    }
}
