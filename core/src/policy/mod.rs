//! Policies: who must approve an action kind, for how long, and what runs.
//!
//! One TOML file per kind. A policy that cannot be met, that names an approver the
//! keyring does not know, or that has a schema that does not compile refuses to
//! load, with the file, the line and the fix: the service fails closed rather than
//! guessing. Each loaded policy has a canonical form (JSON, defaults filled in) whose
//! SHA-256 goes into every preview, so approvers sign the rules along with the action.
//!
//! One file per concern, each importing only the ones above it in this list:
//! - `toml_lines`: finding the line of a key or table in TOML text, for error messages;
//! - `executor`: the `[executor]` table ([`ExecutorConfig`]) and its checks;
//! - `spec`: the file's data with its defaults ([`PolicySpec`], [`Requirement`]);
//! - `payload`: the checks of an agent's payload ([`PayloadRefusal`]);
//! - `model`: a loaded, validated [`Policy`] and its hash ([`PolicyError`]);
//! - `set`: every policy in force and the disabled kinds ([`PolicySet`], [`DisabledKind`]).
//!
//! The paths `approval_core::policy::...` are the public ones: the files are private.

mod executor;
mod model;
mod payload;
mod set;
mod spec;
mod toml_lines;

pub use executor::{ExecutorConfig, MAX_EXECUTOR_TIMEOUT};
pub use model::{Policy, PolicyError};
pub use payload::{PayloadRefusal, MAX_PAYLOAD_NESTING};
pub use set::{DisabledKind, KindState, PolicySet};
pub use spec::{
    is_tool_name, PolicySpec, Requirement, DEFAULT_MAX_PAYLOAD_BYTES, MAX_MAX_PAYLOAD_BYTES,
    RESERVED_KIND_PREFIX, RESERVED_TOOL_PREFIX,
};

#[cfg(test)]
mod tests;
