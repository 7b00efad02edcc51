//! Fixtures shared by the fuzz targets: a fixed keyring, a fixed policy and a
//! fixed preview frame. `seedgen` uses the same seeds (it cannot link this crate,
//! which pulls in libFuzzer), so the signed seeds in `corpus/` verify here.

use approval_core::ids::{AgentName, Kind, ProposalId, ServerId};
use approval_core::keyring::SecretKey;
use approval_core::{ApproverName, Keyring, Policy, Preview, Sha256Hex, Timestamp};
use serde_json::Value;

/// The approvers of the fixed keyring.
pub const NAMES: [&str; 3] = ["alice", "bob", "carol"];

/// "Now" for every time-dependent check: 2027-01-15T08:00:00Z.
pub const NOW: i64 = 1_800_000_000;

/// The fixed policy: 2 of alice/bob/carol, carol required, one veto.
pub const POLICY: &str = r#"kind = "note.write"
description = "Write a note"
quorum = 2
approvers = ["alice", "bob", "carol"]
vetoes = 1
ttl = "30m"
execute_within = "10m"
[[require]]
group = ["carol"]
count = 1
[executor]
type = "note"
"#;

/// An approver's secret key: seed = SHA-256("approval fuzz key <name>").
pub fn secret(name: &str) -> SecretKey {
    let seed = Sha256Hex::digest(format!("approval fuzz key {name}").as_bytes());
    SecretKey::from_seed(
        ApproverName::parse(name).expect("fixed name"),
        *seed.as_bytes(),
    )
}

/// The fixed keyring.
pub fn keyring() -> Keyring {
    let text: String = NAMES
        .iter()
        .map(|n| secret(n).keyring_line() + "\n")
        .collect();
    Keyring::parse(&text).expect("fixed keyring parses")
}

/// The fixed policy.
pub fn policy() -> Policy {
    Policy::parse_toml("<fuzz>", POLICY).expect("fixed policy parses")
}

/// A preview in the fixed frame, carrying `payload`.
pub fn preview(payload: Value) -> Preview {
    Preview {
        v: 1,
        server_id: ServerId::parse("srv-fuzz0000").expect("fixed id"),
        proposal_id: ProposalId::parse("p-fuzz").expect("fixed id"),
        kind: Kind::parse("note.write").expect("fixed kind"),
        payload,
        summary: "fuzz".into(),
        requested_by: AgentName::parse("local").expect("fixed agent"),
        created_at: Timestamp::from_unix(NOW),
        expires_at: Timestamp::from_unix(NOW + 1800),
        policy_sha256: policy().sha256(),
    }
}
