//! Configuration under quorum (issue #35): once an operator adds `root.toml`, the
//! policies, the keyring, the agents file and `root.toml` itself change only through
//! the gate's own machinery. A change is a proposal of the built-in kind
//! [`CONFIG_KIND`] whose payload is a [`ConfigChange`]: the complete new
//! configuration ([`Bundle`]), a readable diff against the one in force, and the
//! version it replaces. Its policy is not a file: [`config_policy`] derives it from
//! the root in force, so the administrators of version N decide version N+1 (TUF's
//! rule for root metadata), and a replayed or stale change names a version that is no
//! longer the current one and is refused.
//!
//! By concern: [`root`] (who administers, and how many must agree), [`bundle`] (the
//! configuration as files, its hash and its diff), [`change`] (the proposal's payload,
//! its policy, and the emergency removal of one administrator). No I/O: the server
//! reads the files and keeps the versions.

pub mod bundle;
pub mod change;
pub mod root;

pub use bundle::{Bundle, BundleError, MAX_BUNDLE_BYTES};
pub use change::{config_policy, emergency_removal, ConfigChange, ConfigHead};
pub use root::{Root, RootError};

pub use crate::policy::RESERVED_KIND_PREFIX;

/// The kind of a configuration change.
pub const CONFIG_KIND: &str = "gate.config";

/// The agent name configuration changes are requested under (`requested_by`). The
/// agents file refuses it, so no agent's token can read, withdraw or execute one.
pub const CONFIG_PROPOSER: &str = "gate-operator";
