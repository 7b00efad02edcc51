//! Listings: the position a page resumes from ([`Cursor`]), the index it walks
//! ([`ListIndex`]), the part of a record a walk decodes ([`RecordHead`]), and the
//! page walk itself ([`walk`]), written once above the backends: a backend supplies
//! only its index entries in order ([`IndexEntries`]).
//!
//! May import: `record`, the store's own `shared`, core.

use super::error::StoreError;
use super::shared::{check_schema, corrupt};
use crate::record::ProposalRecord;
use approval_core::ids::AgentName;
use approval_core::status::{Lifecycle, Status};
use approval_core::{Kind, ProposalId, Sha256Hex, Timestamp};
use serde::Deserialize;

/// The most index entries one [`Store::page`] call walks, matching or not: a listing
/// whose filter skips many records answers a short page with a cursor rather than
/// walking the whole store in one request.
pub const MAX_PAGE_SCAN: usize = 5_000;

/// Where a listing resumes: the position (creation time, then id) of the last
/// record it returned; the next page starts strictly after it, older first.
///
/// On the wire (`next_cursor`, `cursor`) it is `<created_at unix seconds>.<proposal id>`,
/// opaque to clients: pass back what the server gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// Creation time of the last record returned.
    pub created: Timestamp,
    /// Its id.
    pub id: ProposalId,
}

impl Cursor {
    /// The position of a record.
    pub fn of(created: Timestamp, id: &ProposalId) -> Self {
        Self {
            created,
            id: id.clone(),
        }
    }

    /// Parses the wire form; `None` for anything the server did not hand out.
    pub fn parse(text: &str) -> Option<Self> {
        let (secs, id) = text.split_once('.')?;
        if secs.is_empty() || !secs.bytes().all(|b| b.is_ascii_digit()) || secs.len() > 12 {
            return None;
        }
        let unix: i64 = secs.parse().ok()?;
        let created = Timestamp::from_unix(unix);
        if created.unix() != unix {
            return None;
        }
        let id = ProposalId::parse(id).ok()?;
        Some(Self { created, id })
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.created.unix(), self.id)
    }
}

/// Which index a listing walks, newest first.
#[derive(Debug, Clone)]
pub enum ListIndex {
    /// One agent's records.
    Agent(AgentName),
    /// Records stored with any of these statuses (merged in creation order).
    Statuses(Vec<Status>),
}

/// The fields of a stored record a listing filters and shows, decoded without the
/// payload, the decisions or the result: walking an index costs the index, not the
/// records' size.
#[derive(Debug, Clone, Deserialize)]
pub struct RecordHead {
    /// Record format version.
    pub schema: u32,
    /// The preview without its payload.
    pub preview: PreviewHead,
    /// `preview_sha256`.
    pub preview_sha256: Sha256Hex,
    /// Status and deadlines.
    pub lifecycle: Lifecycle,
}

/// A preview without its payload.
#[derive(Debug, Clone, Deserialize)]
pub struct PreviewHead {
    /// The proposal's id.
    pub proposal_id: ProposalId,
    /// Its kind.
    pub kind: Kind,
    /// The agent's summary.
    pub summary: String,
    /// The agent.
    pub requested_by: AgentName,
    /// Created.
    pub created_at: Timestamp,
    /// Expires.
    pub expires_at: Timestamp,
    /// Its policy's hash.
    pub policy_sha256: Sha256Hex,
}

/// What a listing returns for each record it keeps: just the head it judged
/// ([`Store::page`]), or the whole record ([`Store::page_records`]). A walk decodes
/// every entry's head, and only a kept entry's whole record, so an entry the filter
/// skips costs no more in a whole-record listing.
pub(crate) trait Listed: Sized {
    /// What a kept entry gives: its head, and the record's stored JSON.
    fn kept(head: RecordHead, json: &[u8]) -> serde_json::Result<Self>;
}

impl Listed for RecordHead {
    fn kept(head: RecordHead, _: &[u8]) -> serde_json::Result<Self> {
        Ok(head)
    }
}

impl Listed for ProposalRecord {
    /// The same bytes as the head, so the same schema version.
    fn kept(_: RecordHead, json: &[u8]) -> serde_json::Result<Self> {
        serde_json::from_slice(json)
    }
}

/// One page of a listing.
#[derive(Debug, Clone, Default)]
pub struct HeadPage {
    /// The records that matched, newest first.
    pub heads: Vec<RecordHead>,
    /// Where the next page starts; `None` when the index is exhausted.
    pub next: Option<Cursor>,
}

/// One page of a listing that shows whole records.
#[derive(Debug, Clone, Default)]
pub struct RecordPage {
    /// The records that matched, newest first.
    pub records: Vec<ProposalRecord>,
    /// Where the next page starts; `None` when the index is exhausted.
    pub next: Option<Cursor>,
}

impl ListIndex {
    /// Whether a record (by its head) belongs in this index: a reader may see an
    /// index entry a moment before or after its record changes, and what a listing
    /// returns always matches the index it walks.
    pub fn holds(&self, head: &RecordHead) -> bool {
        match self {
            ListIndex::Agent(a) => &head.preview.requested_by == a,
            ListIndex::Statuses(st) => st.contains(&head.lifecycle.status),
        }
    }
}

/// What a backend supplies to a page walk: the entries of one index, newest first,
/// strictly after the cursor it was started from.
pub(crate) trait IndexEntries {
    /// The stored bytes of a record.
    type Body: AsRef<[u8]>;
    /// The next entry: its position, the name of its record (for errors), and the
    /// record's stored bytes (`None`: the record vanished since the index was read).
    #[allow(clippy::type_complexity)]
    fn next_entry(&mut self) -> Option<Result<(Cursor, String, Option<Self::Body>), StoreError>>;
    /// Whether entries may remain after the last one returned.
    fn more(&mut self) -> bool;
}

/// The page walk behind [`Store::page`](super::api::Store::page) and
/// [`Store::page_records`](super::api::Store::page_records), for every backend: each
/// entry's record is read once; its head is what `keep` judges, and a kept entry
/// gives a `T`. Walks at most [`MAX_PAGE_SCAN`] entries; the cursor is set whenever
/// entries may remain.
pub(crate) fn walk<T: Listed, E: IndexEntries>(
    entries: &mut E,
    index: &ListIndex,
    limit: usize,
    keep: &mut dyn FnMut(&RecordHead) -> bool,
) -> Result<(Vec<T>, Option<Cursor>), StoreError> {
    let mut out = Vec::new();
    let mut scanned = 0usize;
    while let Some(entry) = entries.next_entry() {
        let (here, key, body) = entry?;
        scanned += 1;
        if let Some(body) = body {
            let head = decode_head(&key, body.as_ref())?;
            if index.holds(&head) && keep(&head) {
                out.push(T::kept(head, body.as_ref()).map_err(|e| corrupt(&key, e))?);
            }
        }
        if out.len() >= limit || scanned >= MAX_PAGE_SCAN {
            let more = entries.more();
            return Ok((out, more.then_some(here)));
        }
    }
    Ok((out, None))
}

/// A stored record's head (no payload, decisions or result), its schema checked.
pub(crate) fn decode_head(key: &str, bytes: &[u8]) -> Result<RecordHead, StoreError> {
    let head: RecordHead = serde_json::from_slice(bytes).map_err(|e| corrupt(key, e))?;
    check_schema(key, head.schema)?;
    Ok(head)
}
