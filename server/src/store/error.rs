//! The store's one error type, a leaf: every part of the store and every backend
//! names its failures with it, and the service maps it to stable codes.
//!
//! May import: nothing of the server.

use thiserror::Error;

/// A storage failure. Nothing half-written is left behind: every write is one atomic batch.
/// `Clone`: a batched write's failure is every member's answer.
#[derive(Debug, Clone, Error)]
pub enum StoreError {
    /// The backend failed (disk full, I/O error, corruption).
    #[error("storage error: {0}")]
    Backend(String),
    /// A stored value cannot be read by this build.
    #[error("stored record {key} cannot be read: {why}")]
    Corrupt {
        /// Which key.
        key: String,
        /// Why.
        why: String,
    },
    /// An earlier failure stopped the store; the server is exiting (see `failstop`).
    #[error("{0}")]
    Stopped(String),
    /// The data folder was written in a layout this build does not read.
    #[error("{0}")]
    Layout(String),
    /// A proposal with this id already exists.
    #[error("proposal {0} already exists")]
    Exists(String),
    /// A pending-proposal limit is reached.
    #[error("{0}")]
    Full(String),
    /// The database cannot be reached now (PostgreSQL down, network gone, no answer
    /// in time). Not a fail-stop: the store reconnects by itself, so a retry later
    /// may succeed.
    #[error("the store is unreachable: {0}")]
    Unavailable(String),
}
