//! The fuzz fixtures: a fixed keyring, a fixed policy and a fixed preview frame.
//!
//! One file compiled into both the fuzz crate (`lib.rs`) and `seedgen` (through
//! `#[path]`, because `seedgen` cannot link the fuzz crate, which pulls in
//! libFuzzer), so the signed seeds in `corpus/` verify inside the targets.
#![allow(dead_code)]

use approval_core::ids::{AgentName, Kind, ProposalId, ServerId};
use approval_core::keyring::SecretKey;
use approval_core::{ApproverName, Keyring, Policy, Preview, Sha256Hex, Timestamp};
use serde_json::Value;

/// The approvers of the fixed keyring.
pub const NAMES: [&str; 3] = ["alice", "bob", "carol"];

/// "Now" for every time-dependent check: 2027-01-15T08:00:00Z.
pub const NOW: i64 = 1_800_000_000;

/// The fixed server id (previews and signed reads).
pub const SERVER_ID: &str = "srv-fuzz0000";

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

/// The fixed keyring's text, one line per approver.
pub fn keyring_text() -> String {
    NAMES
        .iter()
        .map(|n| secret(n).keyring_line() + "\n")
        .collect()
}

/// The fixed keyring.
pub fn keyring() -> Keyring {
    Keyring::parse(&keyring_text()).expect("fixed keyring parses")
}

/// The fixed policy.
pub fn policy() -> Policy {
    Policy::parse_toml("<fuzz>", POLICY).expect("fixed policy parses")
}

/// A preview in the fixed frame, carrying `payload`.
pub fn preview(payload: Value) -> Preview {
    Preview {
        v: 1,
        server_id: ServerId::parse(SERVER_ID).expect("fixed id"),
        proposal_id: ProposalId::parse("p-fuzz").expect("fixed id"),
        kind: Kind::parse("note.write").expect("fixed kind"),
        payload,
        summary: "fuzz".into(),
        requested_by: AgentName::parse("local").expect("fixed agent"),
        created_at: Timestamp::from_unix(NOW),
        expires_at: Timestamp::from_unix(NOW + 1800),
        policy_sha256: policy().sha256(),
        cooldown: None,
        execution: None,
    }
}
