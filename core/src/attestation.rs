//! Execution attestations: the server's signed word that it claimed a proposal for
//! execution, while it was APPROVED and inside its execution window.
//!
//! A receipt's decisions prove that a quorum of approvers signed a preview. They do
//! not prove that nothing stopped it afterwards: the signatures stay valid after a
//! revoke or a veto, and anyone who can read them can re-assemble them. So the trust
//! is split, like TUF's timestamp role: the approvers' keys prove the quorum, and
//! the server's own Ed25519 identity key proves "it was claimed, once, while still
//! approved". Forging an execution needs both.
//!
//! The signed text, one field a line, in the decisions' style:
//!
//! ```text
//! approval-v1-attest
//! <server_id>
//! <proposal_id>
//! <preview_sha256>
//! <approved_at, RFC 3339 UTC>
//! <claimed_at, RFC 3339 UTC>
//! ```
//!
//! No field can hold a newline (ids, hex and timestamps are all checked), so the
//! text has exactly one reading.

use crate::ids::{ProposalId, ServerId, Sha256Hex};
use crate::keyring::PublicKey;
use crate::message::{MessageError, Signature};
use crate::time::{Seconds, Timestamp};
use ed25519_dalek::{Signer, SigningKey};
use serde::{Deserialize, Serialize};
use thiserror::Error;

const ATTEST_PREFIX: &str = "approval-v1-attest";

const HELLO_PREFIX: &str = "approval-v1-hello";

/// Whether `challenge` is one a client may send to `GET /healthz?challenge=`: 16 to
/// 128 characters of `A-Z a-z 0-9 - _` (so the signed text has one reading).
pub fn valid_challenge(challenge: &str) -> bool {
    (16..=128).contains(&challenge.len())
        && challenge
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The text a server signs to prove, to a client that sent `challenge`, that it holds
/// the identity key it publishes: `approval-v1-hello\n<server_id>\n<challenge>`.
///
/// `/healthz` is not signed, so without this anyone can replay a server's id and key
/// (an impersonator on the port while the real server restarts, a network attacker)
/// and pass a pin check; a fresh challenge makes the answer unreplayable.
pub fn hello_message(server_id: &ServerId, challenge: &str) -> String {
    format!("{HELLO_PREFIX}\n{server_id}\n{challenge}")
}

/// The server's answer to a challenge.
pub fn prove_identity(key: &SigningKey, server_id: &ServerId, challenge: &str) -> Signature {
    Signature(
        key.sign(hello_message(server_id, challenge).as_bytes())
            .to_bytes(),
    )
}

/// Checks a server's answer to `challenge` against the key it presents.
pub fn verify_identity(
    server_key: &PublicKey,
    server_id: &ServerId,
    challenge: &str,
    proof: &Signature,
) -> Result<(), MessageError> {
    if !valid_challenge(challenge) {
        return Err(MessageError::BadSignature);
    }
    server_key.verify_strict(hello_message(server_id, challenge).as_bytes(), proof)
}

/// The exact text the server signs when it claims a proposal for execution.
pub fn attestation_message(
    server_id: &ServerId,
    proposal_id: &ProposalId,
    preview_sha256: &Sha256Hex,
    approved_at: Timestamp,
    claimed_at: Timestamp,
) -> String {
    format!("{ATTEST_PREFIX}\n{server_id}\n{proposal_id}\n{preview_sha256}\n{approved_at}\n{claimed_at}")
}

/// An execution attestation as a receipt carries it (`receipt.attestation`). The
/// proposal and the preview hash it binds are the receipt's own; they are not
/// repeated here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attestation {
    /// The server that claimed it (also the preview's `server_id`).
    pub server_id: ServerId,
    /// The server's identity key, for the reader's convenience: the verifier's own
    /// copy of the key (`--server-key`) decides.
    pub server_key: PublicKey,
    /// When quorum was reached.
    pub approved_at: Timestamp,
    /// When the server claimed it for execution (APPROVED to EXECUTING).
    pub claimed_at: Timestamp,
    /// Ed25519 over [`attestation_message`].
    pub signature: Signature,
}

/// Why an attestation was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum AttestationError {
    /// The receipt has none (it was never claimed, or was re-assembled from decisions).
    #[error(
        "the receipt has no execution attestation: the server never claimed this proposal for \
         execution (it may have been revoked, rejected or never executed), or the receipt was \
         assembled from the approvals alone"
    )]
    Missing,
    /// Signed by another key than the one the verifier trusts.
    #[error("the attestation is by server key {found}, not the expected {expected}: check --server-key against the server's /healthz")]
    KeyMismatch {
        /// The key the verifier trusts (base64).
        expected: String,
        /// The key the attestation names (base64).
        found: String,
    },
    /// For another server than the preview's.
    #[error("the attestation is by server {found} but the preview is from server {expected}")]
    ServerMismatch {
        /// The preview's server.
        expected: ServerId,
        /// The attestation's server.
        found: ServerId,
    },
    /// The signature does not verify for this server, proposal, hash and times.
    #[error("the attestation's signature does not verify for this server key, proposal, preview hash and times")]
    BadSignature,
    /// Quorum time outside the proposal's life.
    #[error("the attestation says quorum was reached at {approved_at}, outside the proposal's life ({created_at} to {expires_at})")]
    ApprovedOutsideLife {
        /// Attested.
        approved_at: Timestamp,
        /// The preview's `created_at`.
        created_at: Timestamp,
        /// The preview's `expires_at`.
        expires_at: Timestamp,
    },
    /// Claimed outside `[approved_at, approved_at + execute_within)`.
    #[error("the attestation says it was claimed at {claimed_at}, outside the execution window {approved_at} to {closes} (approved_at + execute_within)")]
    ClaimedOutsideWindow {
        /// Attested.
        claimed_at: Timestamp,
        /// Attested.
        approved_at: Timestamp,
        /// `approved_at + execute_within`.
        closes: Timestamp,
    },
    /// Claimed inside the cooldown the preview names, before
    /// `approved_at + cooldown`: the server let it run while approvers could still
    /// revoke or veto it.
    #[error("the attestation says it was claimed at {claimed_at}, inside the cooldown the preview names: it could be executed only from {opens} (approved_at + cooldown)")]
    ClaimedDuringCooldown {
        /// Attested.
        claimed_at: Timestamp,
        /// `approved_at + cooldown`.
        opens: Timestamp,
    },
}

impl Attestation {
    /// Signs an attestation with the server's identity key.
    pub fn sign(
        key: &SigningKey,
        server_id: &ServerId,
        proposal_id: &ProposalId,
        preview_sha256: &Sha256Hex,
        approved_at: Timestamp,
        claimed_at: Timestamp,
    ) -> Self {
        let msg = attestation_message(
            server_id,
            proposal_id,
            preview_sha256,
            approved_at,
            claimed_at,
        );
        Self {
            server_id: server_id.clone(),
            server_key: PublicKey::from_signing_key(key),
            approved_at,
            claimed_at,
            signature: Signature(key.sign(msg.as_bytes()).to_bytes()),
        }
    }

    /// Checks the attestation for this exact proposal and preview hash under the
    /// trusted `server_key` (`verify_strict`), and that it was claimed while the
    /// approval was executable: `approved_at + cooldown <= claimed_at < approved_at +
    /// execute_within` (no cooldown: zero), with `created_at <= approved_at < expires_at`.
    /// The window is [`crate::time::execution_window`]'s, the one the server keeps.
    #[allow(clippy::too_many_arguments)]
    pub fn verify(
        &self,
        server_key: &PublicKey,
        server_id: &ServerId,
        proposal_id: &ProposalId,
        preview_sha256: &Sha256Hex,
        created_at: Timestamp,
        expires_at: Timestamp,
        execute_within: Seconds,
        cooldown: Option<Seconds>,
    ) -> Result<(), AttestationError> {
        if &self.server_key != server_key {
            return Err(AttestationError::KeyMismatch {
                expected: server_key.to_base64(),
                found: self.server_key.to_base64(),
            });
        }
        if &self.server_id != server_id {
            return Err(AttestationError::ServerMismatch {
                expected: server_id.clone(),
                found: self.server_id.clone(),
            });
        }
        let msg = attestation_message(
            server_id,
            proposal_id,
            preview_sha256,
            self.approved_at,
            self.claimed_at,
        );
        server_key
            .verify_strict(msg.as_bytes(), &self.signature)
            .map_err(|_: MessageError| AttestationError::BadSignature)?;
        if self.approved_at < created_at || self.approved_at >= expires_at {
            return Err(AttestationError::ApprovedOutsideLife {
                approved_at: self.approved_at,
                created_at,
                expires_at,
            });
        }
        let (opens, closes) =
            crate::time::execution_window(self.approved_at, cooldown, execute_within);
        if self.claimed_at < self.approved_at || self.claimed_at >= closes {
            return Err(AttestationError::ClaimedOutsideWindow {
                claimed_at: self.claimed_at,
                approved_at: self.approved_at,
                closes,
            });
        }
        if self.claimed_at < opens {
            return Err(AttestationError::ClaimedDuringCooldown {
                claimed_at: self.claimed_at,
                opens,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> (ServerId, ProposalId, Sha256Hex) {
        (
            ServerId::parse("srv-0011223344556677").unwrap(),
            ProposalId::parse("p-00112233445566778899aabbccddeeff").unwrap(),
            Sha256Hex::digest(b"preview"),
        )
    }

    #[test]
    fn message_format_is_exact() {
        let (s, p, h) = ids();
        let m = attestation_message(
            &s,
            &p,
            &h,
            Timestamp::from_unix(1_800_000_000),
            Timestamp::from_unix(1_800_000_060),
        );
        assert_eq!(
            m,
            format!("approval-v1-attest\nsrv-0011223344556677\np-00112233445566778899aabbccddeeff\n{h}\n2027-01-15T08:00:00Z\n2027-01-15T08:01:00Z")
        );
    }

    #[test]
    fn sign_and_verify_binds_every_field() {
        let (s, p, h) = ids();
        let sk = SigningKey::from_bytes(&[3; 32]);
        let pk = PublicKey::from_signing_key(&sk);
        let (created, expires) = (
            Timestamp::from_unix(1_800_000_000),
            Timestamp::from_unix(1_800_001_800),
        );
        let within = Seconds::parse("10m").unwrap();
        let approved = Timestamp::from_unix(1_800_000_100);
        let claimed = Timestamp::from_unix(1_800_000_200);
        let a = Attestation::sign(&sk, &s, &p, &h, approved, claimed);
        assert_eq!(
            a.verify(&pk, &s, &p, &h, created, expires, within, None),
            Ok(())
        );
        // Another proposal, hash, server, key or time: refused.
        let p2 = ProposalId::parse("p-ffffffffffffffffffffffffffffffff").unwrap();
        assert_eq!(
            a.verify(&pk, &s, &p2, &h, created, expires, within, None),
            Err(AttestationError::BadSignature)
        );
        assert_eq!(
            a.verify(
                &pk,
                &s,
                &p,
                &Sha256Hex::digest(b"other"),
                created,
                expires,
                within,
                None
            ),
            Err(AttestationError::BadSignature)
        );
        let s2 = ServerId::parse("srv-ffffffffffffffff").unwrap();
        assert!(matches!(
            a.verify(&pk, &s2, &p, &h, created, expires, within, None),
            Err(AttestationError::ServerMismatch { .. })
        ));
        let other = PublicKey::from_signing_key(&SigningKey::from_bytes(&[4; 32]));
        assert!(matches!(
            a.verify(&other, &s, &p, &h, created, expires, within, None),
            Err(AttestationError::KeyMismatch { .. })
        ));
        let mut later = a.clone();
        later.claimed_at = Timestamp::from_unix(1_800_000_201);
        assert_eq!(
            later.verify(&pk, &s, &p, &h, created, expires, within, None),
            Err(AttestationError::BadSignature)
        );
    }

    #[test]
    fn claim_must_be_inside_the_servers_window() {
        let (s, p, h) = ids();
        let sk = SigningKey::from_bytes(&[5; 32]);
        let pk = PublicKey::from_signing_key(&sk);
        let created = Timestamp::from_unix(1_800_000_000);
        let expires = Timestamp::from_unix(1_800_001_800);
        let within = Seconds::parse("10m").unwrap();
        let approved = Timestamp::from_unix(1_800_000_100);
        let at = |claimed: i64| {
            Attestation::sign(&sk, &s, &p, &h, approved, Timestamp::from_unix(claimed))
                .verify(&pk, &s, &p, &h, created, expires, within, None)
        };
        assert_eq!(at(1_800_000_100), Ok(()));
        assert_eq!(at(1_800_000_699), Ok(()));
        assert!(matches!(
            at(1_800_000_700),
            Err(AttestationError::ClaimedOutsideWindow { .. })
        ));
        assert!(matches!(
            at(1_800_000_099),
            Err(AttestationError::ClaimedOutsideWindow { .. })
        ));
        // With a cooldown of 2 minutes the window opens at approved_at + 120.
        let cooled = |claimed: i64| {
            Attestation::sign(&sk, &s, &p, &h, approved, Timestamp::from_unix(claimed)).verify(
                &pk,
                &s,
                &p,
                &h,
                created,
                expires,
                within,
                Some(Seconds::new(120)),
            )
        };
        assert_eq!(
            cooled(1_800_000_219),
            Err(AttestationError::ClaimedDuringCooldown {
                claimed_at: Timestamp::from_unix(1_800_000_219),
                opens: Timestamp::from_unix(1_800_000_220),
            })
        );
        assert_eq!(cooled(1_800_000_220), Ok(()));
        assert!(matches!(
            cooled(1_800_000_700),
            Err(AttestationError::ClaimedOutsideWindow { .. })
        ));
        // Quorum "reached" after the proposal expired: refused.
        let late = Attestation::sign(
            &sk,
            &s,
            &p,
            &h,
            expires,
            Timestamp::from_unix(expires.unix() + 1),
        );
        assert!(matches!(
            late.verify(&pk, &s, &p, &h, created, expires, within, None),
            Err(AttestationError::ApprovedOutsideLife { .. })
        ));
    }

    #[test]
    fn identity_proofs_bind_key_server_and_challenge() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let public = PublicKey::from_signing_key(&key);
        let id = ServerId::parse("srv-0123456789abcdef").unwrap();
        let other = ServerId::parse("srv-fedcba9876543210").unwrap();
        let c = "0123456789abcdef0123";
        let proof = prove_identity(&key, &id, c);
        assert!(verify_identity(&public, &id, c, &proof).is_ok());
        assert!(verify_identity(&public, &other, c, &proof).is_err());
        assert!(verify_identity(&public, &id, "0123456789abcdef0124", &proof).is_err());
        let stranger = PublicKey::from_signing_key(&SigningKey::from_bytes(&[8; 32]));
        assert!(verify_identity(&stranger, &id, c, &proof).is_err());
        assert!(!valid_challenge("short"));
        assert!(!valid_challenge("0123456789abcdef\nsrv-x"));
        assert!(valid_challenge(c));
    }
}
