//! Durable storage behind one contract ([`Store`]), with two backends: the embedded
//! sled store ([`sled`], the default: one folder, nothing to install) and PostgreSQL
//! for several instances on one database.
//!
//! The contract is what the service relies on: every state change is atomic (the
//! record, its indexes, its counters and its audit entries together, or none), the
//! execute claim is a compare-and-swap on the record's revision, and nothing is
//! reported before [`Store::flush_blocking`] (or [`GroupCommit::flush`]) made it durable.
//! [`contract`] holds the tests every backend must pass.
//!
//! The files, top to bottom (each imports only those below it; none imports this
//! face): [`failstop`] wraps any store; the backends [`sled`] and [`postgres`]
//! supply primitive operations; `group_commit` shares fsyncs; `api` is the
//! contract; `shared` (encoding, schema check, audit sealing, pending counters),
//! `page` (listing types and the one page walk), `memo` (decoded records by their
//! bytes, for the embedded store's reads) and [`outbox`] (its entry, which
//! changes queue which, the cap) are the write rules written once; `error` is the
//! leaf. The store never imports notify, the service, run, executors or transports.

mod api;
#[cfg(test)]
pub(crate) mod contract;
mod error;
pub mod failstop;
mod group_commit;
mod memo;
pub mod outbox;
mod page;
pub mod postgres;
mod shared;
pub mod sled;

pub use self::api::{AuditLog, Cas, Pending, PendingLimits, Raise, Store};
pub use self::error::StoreError;
pub use self::group_commit::{flush_inline_on_this_thread, GroupCommit, WriteGuard};
pub use self::outbox::OutboxItem;
pub use self::page::{
    Cursor, HeadPage, ListIndex, PreviewHead, RecordHead, RecordPage, MAX_PAGE_SCAN,
};
pub use self::postgres::PgStore;
pub use self::sled::{SledStore, Summary, Tally, CACHE_BYTES};
