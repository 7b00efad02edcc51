//! Decoded records, remembered by the exact bytes they were decoded from.
//!
//! A status read on the embedded store spent a sixth of its instructions parsing the
//! record's JSON (BENCHMARKS.md, round 15, "a status read without its parse"). A
//! sequential agent polls the same record over and over, and the bytes only change when
//! the record does. So a read fetches the stored bytes as before (the store stays the
//! one truth), and when they are the very bytes this memo decoded last time for that
//! id, it answers a copy of that decoding instead of parsing again.
//!
//! **Exact by construction.** Decoding is a pure function of the bytes, and a hit
//! needs the whole stored value to be equal, byte for byte, to what was decoded.
//! Nothing is ever invalidated: a record that changed simply misses, is decoded,
//! and replaces its entry. No write path touches the memo, so no ordering between a
//! write and a read can make it answer anything but what the bytes say.
//!
//! **Bounded.** At most [`MAX_ENTRIES`] entries and [`MAX_WEIGHT`] of memory, each
//! entry counted as its bytes plus [`held_weight`] of them (what its decoding can
//! hold, never less: a payload of `[0,0,…]` decodes to 16 times its bytes); an entry
//! heavier than [`MAX_ENTRY_WEIGHT`] is never kept; the oldest entries go first. An
//! agent that reads many or large records of its own can only push other entries
//! out, which costs a later read one parse, never a wrong answer or more memory.

use super::shared::held_weight;
use crate::record::ProposalRecord;
use approval_core::ProposalId;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Most entries kept.
pub const MAX_ENTRIES: usize = 4096;
/// Most memory held, by the entries' weights (see the module's documentation).
pub const MAX_WEIGHT: usize = 32 << 20;
/// The heaviest entry kept (a 64th of [`MAX_WEIGHT`]): heavier records are decoded
/// on every read.
pub const MAX_ENTRY_WEIGHT: usize = MAX_WEIGHT / 64;

/// The memo; see the module's documentation.
#[derive(Default)]
pub struct DecodeMemo {
    inner: Mutex<Inner>,
}

/// One decoding, the bytes it came from, and their weight.
struct Entry {
    bytes: Vec<u8>,
    rec: ProposalRecord,
    weight: usize,
}

#[derive(Default)]
struct Inner {
    map: HashMap<ProposalId, Arc<Entry>>,
    /// Ids in the order they were first kept, for eviction (an id replaced in
    /// place keeps its place).
    order: VecDeque<ProposalId>,
    weight: usize,
}

impl DecodeMemo {
    /// The record `bytes` (stored under `id`) decode to: a copy of the remembered
    /// decoding when `bytes` are exactly the ones it came from, else `decode(bytes)`,
    /// which is then remembered if it succeeded.
    pub fn decode<E>(
        &self,
        id: &ProposalId,
        bytes: &[u8],
        decode: impl FnOnce(&[u8]) -> Result<ProposalRecord, E>,
    ) -> Result<ProposalRecord, E> {
        let known = self.lock().map.get(id).cloned();
        // Compared and copied outside the lock: readers of other ids do not wait.
        if let Some(e) = known {
            if e.bytes == bytes {
                return Ok(e.rec.clone());
            }
        }
        let rec = decode(bytes)?;
        // The copy of the bytes, and what the decoding holds.
        let weight = bytes.len().saturating_add(held_weight(bytes));
        if weight <= MAX_ENTRY_WEIGHT {
            self.keep(id, bytes, rec.clone(), weight);
        }
        Ok(rec)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn keep(&self, id: &ProposalId, bytes: &[u8], rec: ProposalRecord, weight: usize) {
        let entry = Arc::new(Entry {
            bytes: bytes.to_vec(),
            rec,
            weight,
        });
        let mut m = self.lock();
        match m.map.insert(id.clone(), entry) {
            Some(old) => m.weight -= old.weight,
            None => m.order.push_back(id.clone()),
        }
        m.weight += weight;
        while m.map.len() > MAX_ENTRIES || m.weight > MAX_WEIGHT {
            let Some(oldest) = m.order.pop_front() else {
                break;
            };
            if let Some(gone) = m.map.remove(&oldest) {
                m.weight -= gone.weight;
            }
        }
    }

    /// Entries and weight held.
    #[cfg(test)]
    pub fn size(&self) -> (usize, usize) {
        let m = self.lock();
        (m.map.len(), m.weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::shared;
    use std::cell::Cell;

    /// A record with id `p-<n>` and `note` in its payload, and its stored bytes.
    fn record(n: usize, note: &str) -> (ProposalRecord, Vec<u8>) {
        let mut rec = crate::store::contract::record(&format!("p-{n}"), "agent", 1_000);
        rec.preview.payload = serde_json::json!({ "text": note });
        let bytes = shared::encode(&rec).expect("encode");
        (rec, bytes)
    }

    fn decode(parsed: &Cell<u32>) -> impl FnOnce(&[u8]) -> Result<ProposalRecord, String> + '_ {
        move |b| {
            parsed.set(parsed.get() + 1);
            serde_json::from_slice(b).map_err(|e| e.to_string())
        }
    }

    #[test]
    fn the_same_bytes_are_parsed_once_and_other_bytes_always_again() {
        let memo = DecodeMemo::default();
        let parsed = Cell::new(0);
        let (a, a_bytes) = record(1, "a");
        assert_eq!(memo.decode(a.id(), &a_bytes, decode(&parsed)).unwrap(), a);
        assert_eq!(memo.decode(a.id(), &a_bytes, decode(&parsed)).unwrap(), a);
        assert_eq!(parsed.get(), 1);
        // The record changed: its new bytes are parsed, never answered from the old.
        let mut b = a.clone();
        b.revision += 1;
        let b_bytes = shared::encode(&b).unwrap();
        assert_eq!(memo.decode(a.id(), &b_bytes, decode(&parsed)).unwrap(), b);
        assert_eq!(parsed.get(), 2);
        // Other bytes that decode to the same record are not a hit either.
        let mut c_bytes = b_bytes.clone();
        c_bytes.push(b' ');
        assert_eq!(memo.decode(a.id(), &c_bytes, decode(&parsed)).unwrap(), b);
        assert_eq!(parsed.get(), 3);
        // A failed decoding is answered as the error and not kept.
        let bad = b"{not json".to_vec();
        assert!(memo.decode(a.id(), &bad, decode(&parsed)).is_err());
        assert!(memo.decode(a.id(), &bad, decode(&parsed)).is_err());
        assert_eq!(parsed.get(), 5);
        assert_eq!(memo.size().0, 1);
    }

    #[test]
    fn many_or_large_records_stay_within_the_bounds() {
        // An agent reading many records of its own, then large ones: the memo keeps
        // its bounds, and an entry over MAX_ENTRY_WEIGHT is never kept.
        let memo = DecodeMemo::default();
        let parsed = Cell::new(0);
        for i in 0..MAX_ENTRIES + 50 {
            let (r, bytes) = record(i, "n");
            memo.decode(r.id(), &bytes, decode(&parsed)).unwrap();
        }
        let (n, weight) = memo.size();
        assert_eq!(n, MAX_ENTRIES);
        assert!(weight <= MAX_WEIGHT);
        let (big, big_bytes) = record(0, &"x".repeat(MAX_ENTRY_WEIGHT));
        assert!(big_bytes.len() > MAX_ENTRY_WEIGHT);
        memo.decode(big.id(), &big_bytes, decode(&parsed)).unwrap();
        assert!(!memo.lock().map.contains_key(big.id()));
        for i in 0..200 {
            let (r, bytes) = record(100_000 + i, &"y".repeat(MAX_ENTRY_WEIGHT / 4));
            memo.decode(r.id(), &bytes, decode(&parsed)).unwrap();
        }
        let (n, weight) = memo.size();
        assert!(weight <= MAX_WEIGHT, "{weight} held");
        assert!(
            n < MAX_ENTRIES,
            "the large ones pushed entries out by weight"
        );
        assert_eq!(memo.lock().order.len(), n);
    }

    /// A record whose payload is `n` zeros in an array.
    fn zeros(i: usize, n: usize) -> (ProposalRecord, Vec<u8>) {
        let mut rec = crate::store::contract::record(&format!("p-z{i}"), "agent", 1_000);
        rec.preview.payload = serde_json::json!({ "v": vec![0; n] });
        let bytes = shared::encode(&rec).expect("encode");
        (rec, bytes)
    }

    #[test]
    fn payloads_that_decode_to_many_values_are_held_by_what_they_decode_to() {
        // The attack: an agent files proposals whose payload is `[0,0,…]` (2 bytes of
        // JSON, 32 bytes decoded, per element) and reads each one. Counted by stored
        // bytes, 16 MiB of them would have held 256 MiB or more of decoded values.
        let memo = DecodeMemo::default();
        let parsed = Cell::new(0);
        let per = 3_000;
        for i in 0..2_000 {
            let (r, bytes) = zeros(i, per);
            memo.decode(r.id(), &bytes, decode(&parsed)).unwrap();
        }
        let (n, weight) = memo.size();
        assert!(weight <= MAX_WEIGHT, "{weight} held");
        let decoded = n * per * std::mem::size_of::<serde_json::Value>();
        assert!(
            decoded <= MAX_WEIGHT,
            "{n} entries hold {decoded} bytes of values"
        );
        // One with a payload heavier than an entry may be is decoded, never kept.
        let (r, bytes) = zeros(9_999, 20_000);
        assert!(bytes.len() < MAX_ENTRY_WEIGHT);
        memo.decode(r.id(), &bytes, decode(&parsed)).unwrap();
        assert!(!memo.lock().map.contains_key(r.id()));
    }
}
