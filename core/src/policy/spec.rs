//! A policy file's data, with the defaults filled in: its serialised form is the
//! canonical JSON that `policy_sha256` covers. Imports `executor` for the
//! `[executor]` table.

use super::executor::ExecutorConfig;
use crate::approver_key::SignatureKind;
use crate::ids::{ApproverName, Kind};
use crate::time::Seconds;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Default size limit of a payload's canonical form: 64 KiB.
pub const DEFAULT_MAX_PAYLOAD_BYTES: u64 = 64 * 1024;
/// The largest payload limit a policy may set: 4 MiB.
pub const MAX_MAX_PAYLOAD_BYTES: u64 = 4 * 1024 * 1024;

fn default_vetoes() -> u32 {
    1
}
fn default_ttl() -> Seconds {
    Seconds::new(30 * 60)
}
fn default_execute_within() -> Seconds {
    Seconds::new(10 * 60)
}
fn default_max_payload() -> u64 {
    DEFAULT_MAX_PAYLOAD_BYTES
}
fn default_accept() -> Vec<SignatureKind> {
    vec![SignatureKind::Key]
}
fn is_default_accept(a: &[SignatureKind]) -> bool {
    a == [SignatureKind::Key]
}

/// A group requirement: at least `count` of `group` must be among the approvers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    /// The approvers of the group.
    pub group: Vec<ApproverName>,
    /// How many of them must approve.
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

/// A policy's data in canonical form: what the file says, with defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    /// The action kind it governs.
    pub kind: Kind,
    /// A human description.
    #[serde(default)]
    pub description: String,
    /// Distinct approvers needed.
    pub quorum: u32,
    /// Who may approve.
    pub approvers: Vec<ApproverName>,
    /// Rejections that end the proposal for good.
    #[serde(default = "default_vetoes")]
    pub vetoes: u32,
    /// How long a proposal may wait for quorum.
    #[serde(default = "default_ttl")]
    pub ttl: Seconds,
    /// How long an approval stays executable.
    #[serde(default = "default_execute_within")]
    pub execute_within: Seconds,
    /// How long after quorum the proposal is not yet executable (`cooldown = "60s"`),
    /// so that any approver can still revoke or veto it: defence in depth against an
    /// agent that races a revoke (Safe's delay modules). The cooldown is the first part
    /// of `execute_within`, so it must be shorter. Left out of the canonical form when
    /// unset, so a policy without it keeps its hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown: Option<Seconds>,
    /// Limit on the payload's canonical size in bytes.
    #[serde(default = "default_max_payload")]
    pub max_payload_bytes: u64,
    /// Group requirements.
    #[serde(default)]
    pub require: Vec<Requirement>,
    /// Optional JSON Schema the payload must satisfy.
    #[serde(default)]
    pub payload_schema: Option<Value>,
    /// What execute does.
    pub executor: ExecutorConfig,
    /// Where to tell approvers about its proposals (`[[notify]]`; none: the server's
    /// default channels). Left out of the canonical form when empty, so a policy
    /// without it keeps its hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<crate::notify::NotifyChannel>,
    /// List the kind in `tools/list` as a tool of its own, named by the kind (issue
    /// #33): a call to it is a proposal the gate runs itself once approved. Left out
    /// of the canonical form when false, so a policy without it keeps its hash.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expose: bool,
    /// Tools of the same downstream MCP server (this policy's `mcp` executor) that
    /// agents may call directly, without approval: read-only tools such as
    /// `git_status`. Written here, so approvers see it in the policy hash; never the
    /// agent's to decide. Left out of the canonical form when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass_through: Vec<String>,
    /// Which signatures count toward quorum, vetoes and revokes (issue #34): `"key"`
    /// (signer-cli, which recomputes the preview hash on the approver's machine) and
    /// `"passkey"` (the gate's approver page; see THREAT_MODEL.md for the trade).
    /// Sorted, each once. Left out of the canonical form when it is the default
    /// `["key"]`, so a policy without it keeps its hash.
    #[serde(default = "default_accept", skip_serializing_if = "is_default_accept")]
    pub accept: Vec<SignatureKind>,
    /// Count only signatures made with a human's touch (issue #35): a security key's
    /// (`sk-ssh-ed25519@openssh.com`) SSHSIG with the user-present flag, or a passkey
    /// (which always shows it); plain key signatures are refused, since malware on
    /// the laptop can make them without anyone. Left out of the canonical form when
    /// false, so a policy without it keeps its hash.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_touch: bool,
    /// As `require_touch`, and the token verified the user too (PIN or biometrics:
    /// the user-verified flag 0x04). Left out of the canonical form when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_verify: bool,
}

/// The prefix of the gate's own tools (`approval_prepare`, ...): no exposed kind or
/// pass-through tool may start with it, so an agent always knows which is which.
pub const RESERVED_TOOL_PREFIX: &str = "approval_";

/// Kinds starting with this are the gate's own (`gate.config`, issue #35): no policy
/// file may define one.
pub const RESERVED_KIND_PREFIX: &str = "gate.";

/// Whether `name` is a valid MCP tool name (MCP 2025-11-25, SEP-986): 1 to 128
/// ASCII letters, digits, `_`, `-` and `.`.
pub fn is_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}
