//! The canonical preview: the whole truth of a proposal, and what every approver signs.
//!
//! `preview_sha256` is the SHA-256 of the RFC 8785 form of the preview object. It
//! binds the server, the proposal, the kind, the payload, the times and the policy,
//! so a signature over it cannot be moved to anything else.

use crate::ids::{AgentName, Kind, ProposalId, ServerId, Sha256Hex};
use crate::json::{self, PayloadError};
use crate::time::{Seconds, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

/// The preview format version this crate writes and accepts.
pub const PREVIEW_VERSION: u32 = 1;

/// A proposal as approvers see and sign it. Exactly the DESIGN fields, no more:
/// unknown fields are refused when reading, so nothing unsigned can ride along.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preview {
    /// Format version, always 1.
    pub v: u32,
    /// The server that made the proposal; a signature for one server is void on another.
    pub server_id: ServerId,
    /// The proposal's id.
    pub proposal_id: ProposalId,
    /// The action kind; its policy governs the proposal.
    pub kind: Kind,
    /// The agent's payload, carried exactly.
    pub payload: Value,
    /// The agent's one-line description (may be empty). Shown, never trusted.
    pub summary: String,
    /// The agent identity the server authenticated, never one the agent claimed.
    pub requested_by: AgentName,
    /// When the proposal was made.
    pub created_at: Timestamp,
    /// When it stops waiting for quorum.
    pub expires_at: Timestamp,
    /// Hash of the canonical policy that governs it.
    pub policy_sha256: Sha256Hex,
    /// The policy's cooldown, when it has one: after quorum the proposal is not
    /// executable for this long, and any approver can still revoke or veto it. Shown
    /// so that approvers sign it; absent without one, so such previews (and their
    /// hashes) are exactly as before. Written in its one spelling (`"1m"`, not `"60s"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown: Option<Seconds>,
    /// Who runs it once approved: absent, the agent (with `approval_execute`);
    /// `"on_quorum"`, the gate itself, as soon as quorum (and any cooldown) allows.
    /// Set when the agent called an exposed kind as a tool of its own (issue #33), so
    /// that approvers sign that nobody waits for a second step. Absent otherwise, so
    /// other previews (and their hashes) are exactly as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<Execution>,
}

/// Who runs an approved proposal, when it is not the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Execution {
    /// The gate runs it once, as soon as it is executable.
    OnQuorum,
}

impl Preview {
    /// Whether the gate runs this proposal itself once it is executable.
    pub fn on_quorum(&self) -> bool {
        self.execution == Some(Execution::OnQuorum)
    }
}

/// A preview that cannot be read or hashed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PreviewError {
    /// Not a preview object (missing, extra or ill-typed fields).
    #[error("invalid preview: {0}")]
    Shape(String),
    /// A version this code does not know.
    #[error("unsupported preview version {0}: this build reads version 1")]
    Version(u32),
    /// The payload cannot be carried exactly.
    #[error("invalid payload: {0}")]
    Payload(#[from] PayloadError),
}

impl Preview {
    /// Reads a preview from a JSON value, refusing unknown fields, other versions
    /// and payloads that JCS cannot carry exactly.
    pub fn from_value(v: &Value) -> Result<Self, PreviewError> {
        let p: Preview =
            serde_json::from_value(v.clone()).map_err(|e| PreviewError::Shape(e.to_string()))?;
        if p.v != PREVIEW_VERSION {
            return Err(PreviewError::Version(p.v));
        }
        if let Some(c) = p.cooldown {
            // A duration has several spellings ("60s", "1m"); the hash is over the
            // bytes received, so only the one this crate writes is accepted.
            let got = v
                .get("cooldown")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if got != c.to_spec() {
                return Err(PreviewError::Shape(format!(
                    "cooldown {got:?} is not written in its one spelling {:?}",
                    c.to_spec()
                )));
            }
        }
        if v.get("execution").is_some() && p.execution.is_none() {
            // `null` reads as absent, but the hash is over the bytes received.
            return Err(PreviewError::Shape(
                "execution is null: leave it out, or write \"on_quorum\"".into(),
            ));
        }
        json::check_value(&p.payload)?;
        Ok(p)
    }

    /// Reads a preview from JSON text with the exact parser (duplicate keys,
    /// imprecise numbers and lone surrogates are refused).
    pub fn from_json_text(text: &str) -> Result<Self, PreviewError> {
        Self::from_value(&json::parse_exact(text)?)
    }

    /// The preview as a JSON value.
    pub fn to_value(&self) -> Value {
        // Serialising plain strings, integers and a `Value` cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The RFC 8785 canonical bytes.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        json::canonical_bytes(&self.to_value())
    }

    /// `preview_sha256`: SHA-256 of the canonical bytes.
    pub fn sha256(&self) -> Sha256Hex {
        Sha256Hex::digest(&self.canonical_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Value {
        json!({
            "v": 1, "server_id": "srv-1", "proposal_id": "p-1", "kind": "email.send",
            "payload": {"to": "a@example.com"}, "summary": "", "requested_by": "local",
            "created_at": "2026-11-30T00:00:00Z", "expires_at": "2026-11-30T00:30:00Z",
            "policy_sha256": "5feceb66ffc86f38d952786c6d696c79c2dbc239dd4e91b46729d73a27fb57e9"
        })
    }

    #[test]
    fn round_trips_and_hashes_stably() {
        let p = Preview::from_value(&sample()).unwrap();
        assert_eq!(p.to_value(), sample());
        assert_eq!(
            p.sha256(),
            Preview::from_value(&p.to_value()).unwrap().sha256()
        );
        let canon = String::from_utf8(p.canonical_bytes()).unwrap();
        assert!(
            canon.starts_with(r#"{"created_at":"2026-11-30T00:00:00Z","expires_at""#),
            "{canon}"
        );
    }

    #[test]
    fn refuses_extra_missing_and_versions() {
        let mut v = sample();
        v["extra"] = json!(1);
        assert!(matches!(
            Preview::from_value(&v),
            Err(PreviewError::Shape(_))
        ));
        let mut v = sample();
        v.as_object_mut().unwrap().remove("summary");
        assert!(matches!(
            Preview::from_value(&v),
            Err(PreviewError::Shape(_))
        ));
        let mut v = sample();
        v["v"] = json!(2);
        assert_eq!(Preview::from_value(&v), Err(PreviewError::Version(2)));
        let mut v = sample();
        v["payload"] = json!(9007199254740993u64);
        assert!(matches!(
            Preview::from_value(&v),
            Err(PreviewError::Payload(_))
        ));
        let mut v = sample();
        v["created_at"] = json!("2026-11-30T00:00:00+00:00");
        assert!(matches!(
            Preview::from_value(&v),
            Err(PreviewError::Shape(_))
        ));
    }

    #[test]
    fn a_cooldown_is_carried_in_its_one_spelling_and_only_when_set() {
        let without = Preview::from_value(&sample()).unwrap();
        assert_eq!(without.cooldown, None);
        assert!(!String::from_utf8(without.canonical_bytes())
            .unwrap()
            .contains("cooldown"));
        let mut v = sample();
        v["cooldown"] = json!("1m");
        let with = Preview::from_value(&v).unwrap();
        assert_eq!(with.cooldown, Some(Seconds::new(60)));
        assert_eq!(with.to_value(), v);
        assert_ne!(with.sha256(), without.sha256());
        for bad in ["60s", "0s", "soon", ""] {
            v["cooldown"] = json!(bad);
            assert!(
                matches!(Preview::from_value(&v), Err(PreviewError::Shape(_))),
                "{bad}"
            );
        }
        v["cooldown"] = json!(60);
        assert!(matches!(
            Preview::from_value(&v),
            Err(PreviewError::Shape(_))
        ));
    }

    #[test]
    fn on_quorum_execution_is_signed_only_when_set_and_in_its_one_spelling() {
        let without = Preview::from_value(&sample()).unwrap();
        assert!(!without.on_quorum());
        assert!(!String::from_utf8(without.canonical_bytes())
            .unwrap()
            .contains("execution"));
        let mut v = sample();
        v["execution"] = json!("on_quorum");
        let with = Preview::from_value(&v).unwrap();
        assert!(with.on_quorum());
        assert_eq!(with.to_value(), v);
        assert_ne!(with.sha256(), without.sha256());
        for bad in [
            json!("agent"),
            json!(false),
            json!(null),
            json!("ON_QUORUM"),
        ] {
            v["execution"] = bad.clone();
            assert!(
                matches!(Preview::from_value(&v), Err(PreviewError::Shape(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn duplicate_keys_in_text_are_refused() {
        let text = sample().to_string().replacen(
            "\"summary\":\"\"",
            "\"summary\":\"\",\"summary\":\"x\"",
            1,
        );
        assert!(matches!(
            Preview::from_json_text(&text),
            Err(PreviewError::Payload(_))
        ));
    }
}
