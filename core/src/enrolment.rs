//! Enrolment links: how a new passkey approver gets their keyring line (issue #34).
//!
//! `approval-server enroll NAME` signs a short-lived claim with the server's identity
//! key and prints a link carrying it. Opening the link creates a passkey in the
//! approver's browser and shows the keyring line to send to the operator; the server
//! adds nothing to the keyring itself. The token is:
//!
//! ```text
//! <base64url(claim JSON)>.<base64url(Ed25519 signature)>
//! ```
//!
//! signed over `approval-v1-enroll\n<server_id>\n<claim JSON bytes>`, so a link made
//! for one server is void on another, and an edited name, RP, origin or expiry
//! breaks the signature. The WebAuthn challenge of the ceremony is
//! [`enrolment_challenge`] of the token, so the created credential is bound to this
//! one link. The link is single-use: the server marks its nonce used when a
//! registration succeeds (a mark in the store), never when the page is merely
//! opened, so a chat client that previews links does not spend it.

use crate::ids::{ApproverName, ServerId};
use crate::keys::{PublicKey, Signature};
use crate::passkey::{b64url, from_b64url};
use crate::time::Timestamp;
use ed25519_dalek::{Signer, SigningKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

const PREFIX: &str = "approval-v1-enroll";
/// The longest token accepted, in characters (a claim is well under 1 KiB).
pub const MAX_TOKEN_CHARS: usize = 2048;

/// What an enrolment link allows: one passkey, for one name, on one relying party.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrolmentClaim {
    /// The approver name the keyring line will carry.
    pub name: ApproverName,
    /// The relying party id (the domain of the approver page).
    pub rp: String,
    /// The exact origin of the approver page.
    pub origin: String,
    /// Unix seconds after which the link is refused.
    pub exp: i64,
    /// 16 random bytes, base64url: what the single-use mark is named by.
    pub nonce: String,
}

/// Why an enrolment token was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EnrolmentError {
    /// Not `<claim>.<signature>` in base64url, or the claim is not JSON of the shape.
    #[error("this enrolment link is malformed ({0}): ask whoever runs the server for a new one (`approval-server enroll NAME`)")]
    Malformed(&'static str),
    /// The signature is not this server's.
    #[error("this enrolment link was not made by this server: ask whoever runs it for a new one (`approval-server enroll NAME`)")]
    BadSignature,
    /// Past its expiry.
    #[error("this enrolment link expired at {0}: ask whoever runs the server for a new one (`approval-server enroll NAME`)")]
    Expired(Timestamp),
}

impl EnrolmentClaim {
    /// The mark that spends this link (`Store::raise` to 1).
    pub fn mark(&self) -> String {
        format!("enroll/{}", self.nonce)
    }

    /// Signs the claim with the server's identity key: the link's token.
    pub fn sign(&self, key: &SigningKey, server_id: &ServerId) -> String {
        let claim = serde_json::to_vec(self).unwrap_or_default();
        let sig = key.sign(&signed_text(server_id, &claim));
        format!("{}.{}", b64url(&claim), b64url(&sig.to_bytes()))
    }

    /// Checks a token against the server's key and clock (the single-use mark is
    /// the caller's: it needs the store).
    pub fn verify(
        token: &str,
        server_key: &PublicKey,
        server_id: &ServerId,
        now: Timestamp,
    ) -> Result<Self, EnrolmentError> {
        if token.len() > MAX_TOKEN_CHARS {
            return Err(EnrolmentError::Malformed("too long"));
        }
        let (claim_b64, sig_b64) = token
            .split_once('.')
            .ok_or(EnrolmentError::Malformed("no signature"))?;
        let claim = from_b64url(claim_b64).map_err(|_| EnrolmentError::Malformed("claim"))?;
        let sig: [u8; 64] = from_b64url(sig_b64)
            .ok()
            .and_then(|s| s.try_into().ok())
            .ok_or(EnrolmentError::Malformed("signature"))?;
        server_key
            .verify_strict(&signed_text(server_id, &claim), &Signature(sig))
            .map_err(|_| EnrolmentError::BadSignature)?;
        let claim: EnrolmentClaim =
            serde_json::from_slice(&claim).map_err(|_| EnrolmentError::Malformed("claim"))?;
        if now.unix() >= claim.exp {
            return Err(EnrolmentError::Expired(Timestamp::from_unix(claim.exp)));
        }
        Ok(claim)
    }
}

fn signed_text(server_id: &ServerId, claim: &[u8]) -> Vec<u8> {
    let mut t = format!("{PREFIX}\n{server_id}\n").into_bytes();
    t.extend_from_slice(claim);
    t
}

/// The WebAuthn challenge of the enrolment ceremony: bound to the one token.
pub fn enrolment_challenge(token: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"approval-v1-enroll-challenge\n");
    h.update(token.as_bytes());
    h.finalize().into()
}

/// The WebAuthn user handle for an approver: derived from the server and the name,
/// so enrolling the same name again on the same authenticator replaces the old
/// passkey there instead of leaving two.
pub fn user_handle(server_id: &ServerId, name: &ApproverName) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"approval-v1-user\n");
    h.update(server_id.as_str().as_bytes());
    h.update(b"\n");
    h.update(name.as_str().as_bytes());
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(exp: i64) -> EnrolmentClaim {
        EnrolmentClaim {
            name: ApproverName::parse("dana").unwrap(),
            rp: "localhost".into(),
            origin: "http://localhost:8080".into(),
            exp,
            nonce: b64url(&[7; 16]),
        }
    }

    #[test]
    fn a_token_verifies_only_on_its_server_unaltered_and_in_time() {
        let key = SigningKey::from_bytes(&[9; 32]);
        let pk = PublicKey::from_signing_key(&key);
        let srv = ServerId::parse("srv-a").unwrap();
        let t = claim(2_000).sign(&key, &srv);
        let now = Timestamp::from_unix(1_000);
        assert_eq!(EnrolmentClaim::verify(&t, &pk, &srv, now), Ok(claim(2_000)));
        let other = ServerId::parse("srv-b").unwrap();
        assert_eq!(
            EnrolmentClaim::verify(&t, &pk, &other, now),
            Err(EnrolmentError::BadSignature)
        );
        assert_eq!(
            EnrolmentClaim::verify(&t, &pk, &srv, Timestamp::from_unix(2_000)),
            Err(EnrolmentError::Expired(Timestamp::from_unix(2_000)))
        );
        // Another name in the claim, signature kept.
        let (_, sig) = t.split_once('.').unwrap();
        let mut c = claim(2_000);
        c.name = ApproverName::parse("mallory").unwrap();
        let forged = format!("{}.{sig}", b64url(&serde_json::to_vec(&c).unwrap()));
        assert_eq!(
            EnrolmentClaim::verify(&forged, &pk, &srv, now),
            Err(EnrolmentError::BadSignature)
        );
        for bad in ["", "x", "x.y", &"a".repeat(3000)] {
            assert!(
                EnrolmentClaim::verify(bad, &pk, &srv, now).is_err(),
                "{bad}"
            );
        }
        assert_ne!(enrolment_challenge(&t), enrolment_challenge(&forged));
    }
}
