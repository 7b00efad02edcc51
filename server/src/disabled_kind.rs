//! What a disabled kind means outside the operator's console: what the agent and
//! anyone reading `/healthz` are told, and what becomes of its open proposals.
//!
//! Two reasons disable a kind (see [`approval_core::DisabledKind`]): its policy names
//! an approver the keyring lacks, or it takes its payload schema from a downstream MCP
//! tool (`payload_schema_from_tool = true`) whose `inputSchema` could not be read.
//!
//! Why this module exists (issue #31, items 6 and 9):
//! - The operator's reason names the policy file and the downstream's command line or
//!   URL, with the transport's own error. That belongs in the log, not in an answer to
//!   the agent or in the unauthenticated `/healthz`: [`public_reason`] says only the
//!   kind and the cause.
//! - A schema that could not be *read* is not a policy that *changed*: the policy hash
//!   of such a kind is unknown, not different. One instance starting while the
//!   downstream blinks must not end, as POLICY_CHANGED, the kind's open proposals that
//!   every other instance (sharing the database) still serves. [`awaits_schema`] tells
//!   the sweeps to leave them alone and the service's execute refuses to run them
//!   until the schema is back, when the ordinary hash comparison decides.
//!
//! A leaf: it imports the configuration and core, and says what the rules are; the
//! service applies them.

use crate::config::Config;
use approval_core::{DisabledKind, Kind, KindState};

/// Whether the kind is disabled only because its downstream tool's schema could not
/// be read (every approver is in the keyring): its policy in force is unknown, not
/// changed.
pub fn awaits_schema(d: &DisabledKind) -> bool {
    d.missing().is_empty() && d.downstream().is_some()
}

/// Whether `kind`, under `config`, is disabled waiting for its schema: its open
/// proposals are neither voided nor run.
pub fn kind_awaits_schema(config: &Config, kind: &Kind) -> bool {
    matches!(config.policies.state(kind), KindState::Disabled(d) if awaits_schema(d))
}

/// The kind and the cause, without file paths, command lines, URLs or transport
/// errors: what the agent's KIND_DISABLED and `/healthz` say. The operator's full
/// reason ([`DisabledKind::reason`]) goes to the log.
pub fn public_reason(d: &DisabledKind) -> String {
    if awaits_schema(d) {
        format!(
            "kind {} is disabled: its payload schema comes from a downstream MCP tool (payload_schema_from_tool) whose inputSchema could not be read; the operator's log says why",
            d.kind()
        )
    } else {
        // Approver names are no secret (every preview shows them); the file is.
        let names = d
            .missing()
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "kind {} is disabled: its policy names approver(s) {names} who are not in the keyring; an operator must remove them from the policy or add their key (or enrol their passkey) back, then reload",
            d.kind()
        )
    }
}

/// A stable word for the cause, for machines reading `/healthz`.
pub fn cause(d: &DisabledKind) -> &'static str {
    if awaits_schema(d) {
        "downstream_schema_unavailable"
    } else {
        "approvers_missing_from_keyring"
    }
}
