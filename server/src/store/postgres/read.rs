//! The queries: rows decoded into records and heads, the outbox's rows, and the
//! entries a page walk reads in chunks ([`Entries`]).

use super::*;
use crate::store::page::IndexEntries;
use crate::store::shared;

/// A stored record from its row's id and body.
pub(super) fn decode_record(id: &str, body: &str) -> Result<ProposalRecord, StoreError> {
    shared::decode_record(id, body.as_bytes())
}

pub(super) fn deadline_of(rec: &ProposalRecord) -> Option<i64> {
    rec.lifecycle.deadline().map(|d| d.unix())
}

/// Outbox rows (`seq`, `item`) as entries; an item that does not decode is named.
pub(super) fn outbox_entries(
    rows: &[tokio_postgres::Row],
) -> Result<Vec<(u64, OutboxItem)>, StoreError> {
    rows.iter()
        .map(|r| {
            let seq: i64 = r.get(0);
            let item: OutboxItem = serde_json::from_str(r.get::<_, &str>(1))
                .map_err(|e| corrupt(&format!("outbox/{seq}"), e))?;
            Ok((seq as u64, item))
        })
        .collect()
}

/// Converts a `usize` limit to SQL's `LIMIT` (which takes a signed 64-bit number).
pub(super) fn sql_limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// An owned query parameter (the store's futures must own what they send).
#[derive(Clone)]
pub(super) enum Param {
    Text(String),
    Int(i64),
    Texts(Vec<String>),
}

impl Param {
    pub(super) fn as_sql(&self) -> &(dyn tokio_postgres::types::ToSql + Sync) {
        match self {
            Param::Text(s) => s,
            Param::Int(i) => i,
            Param::Texts(v) => v,
        }
    }
}

pub(super) fn head_row(r: &Row) -> Result<(Cursor, RecordHead), StoreError> {
    let id: &str = r.get(0);
    let head = crate::store::page::decode_head(id, r.get::<_, &str>(1).as_bytes())?;
    Ok((
        Cursor::of(head.preview.created_at, &head.preview.proposal_id),
        head,
    ))
}

impl PgStore {
    pub(super) fn records(
        &self,
        sql: &'static str,
        params: Vec<Param>,
    ) -> Result<Vec<ProposalRecord>, StoreError> {
        let pool = self.pool.clone();
        self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                params.iter().map(|p| p.as_sql()).collect();
            let rows = c.query(sql, &refs).await.map_err(pg_err)?;
            rows.iter()
                .map(|r| decode_record(r.get::<_, &str>(0), r.get::<_, &str>(1)))
                .collect()
        })
    }

    /// The entries of `index` strictly after `after`, newest first, read in chunks.
    pub(super) fn entries(&self, index: &ListIndex, after: Option<&Cursor>) -> Entries<'_> {
        let filter = match index {
            ListIndex::Agent(a) => ("agent = $1", Param::Text(a.as_str().into())),
            ListIndex::Statuses(st) => (
                "status = ANY($1)",
                Param::Texts(st.iter().map(|s| s.as_str().to_owned()).collect()),
            ),
        };
        Entries {
            store: self,
            filter,
            pos: after.cloned(),
            chunk: std::collections::VecDeque::new(),
            started: false,
            more_after_chunk: false,
        }
    }
}

/// One index's entries in a page walk ([`walk`]): a chunk of rows at a time, one
/// row more than used telling whether anything remains.
pub(super) struct Entries<'a> {
    store: &'a PgStore,
    filter: (&'static str, Param),
    pos: Option<Cursor>,
    chunk: std::collections::VecDeque<Row>,
    started: bool,
    more_after_chunk: bool,
}

impl Entries<'_> {
    /// The next chunk of the index after `pos`, newest first.
    fn fetch(&mut self) -> Result<(), StoreError> {
        let (cond, p0) = (self.filter.0, self.filter.1.clone());
        let pool = self.store.pool.clone();
        let p = self.pos.clone();
        let rows: Vec<Row> = self.store.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            match p {
                Some(p) => {
                    let sql = format!(
                        "SELECT id, body, created FROM records WHERE {cond} AND (created, id) < ($2, $3) \
                         ORDER BY created DESC, id DESC LIMIT $4"
                    );
                    c.query(
                        &sql,
                        &[p0.as_sql(), &p.created.unix(), &p.id.to_string(), &(PAGE_CHUNK + 1)],
                    )
                    .await
                }
                None => {
                    let sql = format!(
                        "SELECT id, body, created FROM records WHERE {cond} ORDER BY created DESC, id DESC LIMIT $2"
                    );
                    c.query(&sql, &[p0.as_sql(), &(PAGE_CHUNK + 1)]).await
                }
            }
            .map_err(pg_err)
        })?;
        self.more_after_chunk = rows.len() as i64 > PAGE_CHUNK;
        self.chunk = rows.into_iter().take(PAGE_CHUNK as usize).collect();
        Ok(())
    }
}

/// A row's body, as the walk reads it.
pub(super) struct Body(Row);

impl AsRef<[u8]> for Body {
    fn as_ref(&self) -> &[u8] {
        self.0.get::<_, &str>(1).as_bytes()
    }
}

impl IndexEntries for Entries<'_> {
    type Body = Body;

    fn next_entry(&mut self) -> Option<Result<(Cursor, String, Option<Body>), StoreError>> {
        if self.chunk.is_empty() && (!self.started || self.more_after_chunk) {
            self.started = true;
            if let Err(e) = self.fetch() {
                self.more_after_chunk = false;
                return Some(Err(e));
            }
        }
        let row = self.chunk.pop_front()?;
        let (id, created): (&str, i64) = (row.get(0), row.get(2));
        let here = match ProposalId::parse(id) {
            Ok(pid) => Cursor::of(Timestamp::from_unix(created), &pid),
            Err(e) => return Some(Err(corrupt(id, e))),
        };
        let key = id.to_owned();
        self.pos = Some(here.clone());
        Some(Ok((here, key, Some(Body(row)))))
    }

    fn more(&mut self) -> bool {
        !self.chunk.is_empty() || self.more_after_chunk
    }
}
