//! The exact texts approvers sign, and signing and verifying them.
//!
//! A decision is signed over `approval-v1\n<decision>\n<preview_sha256>\n<reason>`.
//! The decision word is inside the signature, so an approval can never be replayed
//! as a rejection or a resolve, and the reason is last so that it may hold newlines
//! and is still covered. Reads of the approver API are signed over
//! `approval-v1-read\n<server_id>\n<unix_seconds>\n<METHOD>\n<path and query>`:
//! the server id binds a read to the one server it was made for, so a server (or
//! anyone who saw the header) cannot replay it to another. The older form without
//! the server id is refused with [`ReadAuthError::OldFormat`], which says what changed.
//!
//! Verification always uses `verify_strict`, which refuses small-order keys and
//! non-canonical signatures (the malleable cases plain `verify` lets through).

use crate::ids::{ApproverName, ServerId, Sha256Hex};
use crate::keyring::Keyring;
use crate::time::Timestamp;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

use crate::approver_key::ApproverKey;
pub use crate::approver_key::Proof;
use crate::keys::PublicKey;
pub use crate::keys::{MessageError, Signature};
use crate::passkey::Assertion;
use crate::ssh::SshSignature;
use sha2::{Digest, Sha256};

/// The longest reason accepted, in characters.
pub const MAX_REASON_CHARS: usize = 1000;

/// How far a signed read's timestamp may be from the server's clock, in seconds.
pub const READ_WINDOW_SECS: i64 = 300;

const DECISION_PREFIX: &str = "approval-v1";
const READ_PREFIX: &str = "approval-v1-read";

/// What an approver says about a proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// Counts toward quorum.
    Approve,
    /// Counts toward a veto.
    Reject,
    /// Withdraws an approval already given, before the action runs.
    Revoke,
    /// Settles an OUTCOME_UNKNOWN proposal as succeeded.
    ResolveSucceeded,
    /// Settles an OUTCOME_UNKNOWN proposal as failed.
    ResolveFailed,
}

impl Decision {
    /// Every decision, in a fixed order.
    pub const ALL: [Decision; 5] = [
        Decision::Approve,
        Decision::Reject,
        Decision::Revoke,
        Decision::ResolveSucceeded,
        Decision::ResolveFailed,
    ];

    /// The wire word, e.g. `resolve-succeeded`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Reject => "reject",
            Decision::Revoke => "revoke",
            Decision::ResolveSucceeded => "resolve-succeeded",
            Decision::ResolveFailed => "resolve-failed",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Decision {
    type Err = MessageError;
    fn from_str(s: &str) -> Result<Self, MessageError> {
        Decision::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| MessageError::Decision(s.chars().take(40).collect()))
    }
}

/// Checks a reason's length.
pub fn check_reason(reason: &str) -> Result<(), MessageError> {
    let n = reason.chars().count();
    if n > MAX_REASON_CHARS {
        return Err(MessageError::ReasonTooLong(n));
    }
    Ok(())
}

/// The exact text signed for a decision.
pub fn decision_message(
    decision: Decision,
    preview_sha256: &Sha256Hex,
    reason: &str,
) -> Result<String, MessageError> {
    check_reason(reason)?;
    Ok(format!(
        "{DECISION_PREFIX}\n{decision}\n{preview_sha256}\n{reason}"
    ))
}

/// Reads a decision message back into its parts. The reason is everything after
/// the third newline, newlines included.
pub fn parse_decision_message(text: &str) -> Result<(Decision, Sha256Hex, String), MessageError> {
    let mut parts = text.splitn(4, '\n');
    if parts.next() != Some(DECISION_PREFIX) {
        return Err(MessageError::Format("first line must be approval-v1"));
    }
    let decision: Decision = parts
        .next()
        .ok_or(MessageError::Format("missing decision line"))?
        .parse()?;
    let hash = parts
        .next()
        .ok_or(MessageError::Format("missing hash line"))?;
    let hash = Sha256Hex::parse(hash).map_err(|_| MessageError::Hash)?;
    let reason = parts
        .next()
        .ok_or(MessageError::Format("missing reason line"))?;
    check_reason(reason)?;
    Ok((decision, hash, reason.to_owned()))
}

/// A decision as an approver sends it, before anything has checked it.
///
/// On the wire it is `{approver, decision, reason, signature}` for a key,
/// `{approver, decision, reason, passkey}` for a passkey, and
/// `{approver, decision, reason, sshsig}` for an OpenSSH key (the standard base64 of
/// the binary SSHSIG blob): exactly one of the three proofs, anything else refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WireDecision", into = "WireDecision")]
pub struct SignedDecision {
    /// The approver's name in the keyring.
    pub approver: ApproverName,
    /// What they decided.
    pub decision: Decision,
    /// Free text, signed too (at most 1000 characters).
    pub reason: String,
    /// What proves the approver made it.
    pub proof: Proof,
}

/// The wire shape of [`SignedDecision`].
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireDecision {
    approver: ApproverName,
    decision: Decision,
    #[serde(default)]
    reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signature: Option<Signature>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    passkey: Option<Box<Assertion>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sshsig: Option<Box<SshSignature>>,
}

impl TryFrom<WireDecision> for SignedDecision {
    type Error = String;
    fn try_from(w: WireDecision) -> Result<Self, String> {
        let proof = match (w.signature, w.passkey, w.sshsig) {
            (Some(s), None, None) => Proof::Signature(s),
            (None, Some(a), None) => Proof::Passkey(a),
            (None, None, Some(s)) => Proof::SshSig(s),
            (None, None, None) => {
                return Err(
                    "a decision needs a signature (a key), a passkey assertion or an sshsig (an OpenSSH key)".into(),
                )
            }
            _ => {
                return Err(
                    "a decision carries exactly one of signature, passkey and sshsig".into(),
                )
            }
        };
        Ok(Self {
            approver: w.approver,
            decision: w.decision,
            reason: w.reason,
            proof,
        })
    }
}

impl From<SignedDecision> for WireDecision {
    fn from(d: SignedDecision) -> Self {
        let (signature, passkey, sshsig) = match d.proof {
            Proof::Signature(s) => (Some(s), None, None),
            Proof::Passkey(a) => (None, Some(a), None),
            Proof::SshSig(s) => (None, None, Some(s)),
        };
        Self {
            approver: d.approver,
            decision: d.decision,
            reason: d.reason,
            signature,
            passkey,
            sshsig,
        }
    }
}

/// The WebAuthn challenge for a decision: the SHA-256 of the exact text signer-cli
/// signs, so a passkey signs the same server, proposal, preview hash, decision and
/// reason a key does (the preview hash binds the first two and the times).
pub fn passkey_challenge(
    decision: Decision,
    preview_sha256: &Sha256Hex,
    reason: &str,
) -> Result<[u8; 32], MessageError> {
    let msg = decision_message(decision, preview_sha256, reason)?;
    Ok(Sha256::digest(msg.as_bytes()).into())
}

/// What a verified decision says beyond "it is theirs".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    /// A passkey's or a security key's (`sk-`) signature counter (never going back is
    /// the caller's check: it needs the last counter seen, which is state). `None`
    /// for a key without one.
    pub sign_count: Option<u32>,
}

impl SignedDecision {
    /// Signs a decision with an approver's secret key.
    pub fn sign(
        key: &SigningKey,
        approver: ApproverName,
        decision: Decision,
        preview_sha256: &Sha256Hex,
        reason: &str,
    ) -> Result<Self, MessageError> {
        let msg = decision_message(decision, preview_sha256, reason)?;
        let signature = Signature(key.sign(msg.as_bytes()).to_bytes());
        Ok(Self {
            approver,
            decision,
            reason: reason.to_owned(),
            proof: Proof::Signature(signature),
        })
    }

    /// [`SignedDecision::verify`] under an Ed25519 key.
    pub fn verify_key(
        &self,
        key: &PublicKey,
        preview_sha256: &Sha256Hex,
    ) -> Result<(), MessageError> {
        self.verify(&ApproverKey::Key(*key), preview_sha256)
            .map(|_| ())
    }

    /// The Ed25519 signature, when a key made the decision.
    pub fn signature(&self) -> Option<&Signature> {
        match &self.proof {
            Proof::Signature(s) => Some(s),
            Proof::Passkey(_) | Proof::SshSig(_) => None,
        }
    }

    /// Verifies the proof under the approver's credential for `preview_sha256`: a
    /// signature with `verify_strict`, or a passkey assertion in full (origin, RP ID,
    /// user present and verified, challenge, signature). A signature under a passkey
    /// or an assertion under a key is refused.
    pub fn verify(
        &self,
        key: &ApproverKey,
        preview_sha256: &Sha256Hex,
    ) -> Result<Verified, MessageError> {
        match (&self.proof, key) {
            (Proof::Signature(sig), ApproverKey::Key(k)) => {
                let msg = decision_message(self.decision, preview_sha256, &self.reason)?;
                k.verify_strict(msg.as_bytes(), sig)?;
                Ok(Verified { sign_count: None })
            }
            (Proof::Passkey(a), ApproverKey::Passkey(p)) => {
                if a.credential_id != p.credential_id() {
                    return Err(MessageError::Passkey(
                        "the assertion is from another credential than the keyring's for this approver".into(),
                    ));
                }
                let challenge = passkey_challenge(self.decision, preview_sha256, &self.reason)?;
                let done = crate::passkey::verify_assertion(p.key(), &p.relying(), &challenge, a)
                    .map_err(|e| MessageError::Passkey(e.to_string()))?;
                Ok(Verified {
                    sign_count: Some(done.sign_count),
                })
            }
            (Proof::SshSig(s), ApproverKey::Ssh(k)) => {
                let msg = decision_message(self.decision, preview_sha256, &self.reason)?;
                let sign_count = k.verify(msg.as_bytes(), s).map_err(MessageError::Ssh)?;
                Ok(Verified { sign_count })
            }
            (_, ApproverKey::Passkey(_)) => Err(MessageError::ProofKind(
                "this approver holds a passkey: decide on the approver page, not with a key",
            )),
            (_, ApproverKey::Key(_)) => Err(MessageError::ProofKind(
                "this credential is an ed25519 key: decide with signer-cli and its key file",
            )),
            (_, ApproverKey::Ssh(_)) => Err(MessageError::ProofKind(
                "this credential is an OpenSSH key: decide with an SSHSIG (signer-cli --ssh-agent)",
            )),
        }
    }
}

/// The exact text signed for a read of the approver API on server `server_id`.
pub fn read_message(
    server_id: &ServerId,
    unix_seconds: i64,
    method: &str,
    path_and_query: &str,
) -> String {
    format!("{READ_PREFIX}\n{server_id}\n{unix_seconds}\n{method}\n{path_and_query}")
}

/// The read message before the server id was added (four lines). Only used to
/// recognise an outdated client and tell it what changed; never accepted.
fn old_read_message(unix_seconds: i64, method: &str, path_and_query: &str) -> String {
    format!("{READ_PREFIX}\n{unix_seconds}\n{method}\n{path_and_query}")
}

/// A signed read that was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ReadAuthError {
    /// No or malformed `Authorization` header.
    #[error("Authorization must be `Approval <name> <unix_seconds> <base64 signature>`")]
    Malformed,
    /// The name is not in the keyring.
    #[error("approver {0:?} is not in the server's keyring")]
    UnknownApprover(String),
    /// The name holds a passkey, which cannot sign reads of this API.
    #[error("approver {0:?} holds a passkey, which signs decisions only: open the approver page (/approve/<proposal_id>) from the notification")]
    PasskeyApprover(String),
    /// Timestamp outside ±300 s of the server's clock.
    #[error("signed read is {0} s away from the server's clock (allowed ±300 s): check the laptop's clock")]
    Stale(i64),
    /// The signature verifies only over the old message without the server id.
    #[error(
        "this read is signed in the old format without the server id: reads are now signed over \
         `approval-v1-read\\n<server_id>\\n<unix_seconds>\\n<METHOD>\\n<path and query>` with the \
         server_id from GET /healthz; upgrade signer-cli (or your client) and sign again"
    )]
    OldFormat,
    /// The signature does not verify.
    #[error("read signature does not verify for this approver, server id, time, method and path (reads are signed over the server_id of this server's GET /healthz: docs/PROTOCOL.md section 2.2)")]
    BadSignature,
}

/// Builds the `Authorization` header value for a signed read on server `server_id`.
pub fn sign_read(
    key: &SigningKey,
    approver: &ApproverName,
    server_id: &ServerId,
    unix_seconds: i64,
    method: &str,
    path_and_query: &str,
) -> String {
    let sig = key.sign(read_message(server_id, unix_seconds, method, path_and_query).as_bytes());
    format!(
        "Approval {approver} {unix_seconds} {}",
        STANDARD.encode(sig.to_bytes())
    )
}

/// A signed-read header taken apart, before any key or clock is consulted: what a
/// server needs to know who claims to be reading before it spends an Ed25519
/// verification on the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadAuth {
    /// Who claims to read.
    pub approver: ApproverName,
    /// The signed time, in Unix seconds.
    pub unix_seconds: i64,
    signature: Signature,
}

impl ReadAuth {
    /// Reads `Approval <name> <unix_seconds> <base64 sig>`.
    pub fn parse(header: &str) -> Result<Self, ReadAuthError> {
        let mut it = header.split(' ');
        let (Some("Approval"), Some(name), Some(ts), Some(sig), None) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            return Err(ReadAuthError::Malformed);
        };
        if ts.is_empty() || ts.len() > 12 || !ts.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ReadAuthError::Malformed);
        }
        Ok(Self {
            unix_seconds: ts.parse().map_err(|_| ReadAuthError::Malformed)?,
            signature: Signature::parse(sig).map_err(|_| ReadAuthError::Malformed)?,
            approver: ApproverName::parse(name).map_err(|_| ReadAuthError::Malformed)?,
        })
    }

    /// The last second at which this signature is still inside the server's window:
    /// a stream opened with it must end after this.
    pub fn valid_until(&self) -> Timestamp {
        Timestamp::from_unix(self.unix_seconds.saturating_add(READ_WINDOW_SECS))
    }

    /// Checks the claim against the keyring, this server's id and its clock.
    pub fn verify(
        &self,
        keyring: &Keyring,
        server_id: &ServerId,
        method: &str,
        path_and_query: &str,
        now: Timestamp,
    ) -> Result<ApproverName, ReadAuthError> {
        if !keyring.contains(&self.approver) {
            return Err(ReadAuthError::UnknownApprover(self.approver.to_string()));
        }
        let key = keyring
            .key(&self.approver)
            .ok_or_else(|| ReadAuthError::PasskeyApprover(self.approver.to_string()))?;
        let skew = self.unix_seconds - now.unix();
        if skew.abs() > READ_WINDOW_SECS {
            return Err(ReadAuthError::Stale(skew));
        }
        let msg = read_message(server_id, self.unix_seconds, method, path_and_query);
        if key.verify_strict(msg.as_bytes(), &self.signature).is_ok() {
            return Ok(self.approver.clone());
        }
        // A genuine client of the old protocol deserves to hear what changed; the
        // old message is never accepted.
        let old = old_read_message(self.unix_seconds, method, path_and_query);
        if key.verify_strict(old.as_bytes(), &self.signature).is_ok() {
            return Err(ReadAuthError::OldFormat);
        }
        Err(ReadAuthError::BadSignature)
    }
}

/// Verifies a signed read against the keyring, this server's id and its clock.
pub fn verify_read(
    keyring: &Keyring,
    server_id: &ServerId,
    header: &str,
    method: &str,
    path_and_query: &str,
    now: Timestamp,
) -> Result<ApproverName, ReadAuthError> {
    ReadAuth::parse(header)?.verify(keyring, server_id, method, path_and_query, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> SigningKey {
        SigningKey::from_bytes(&[n; 32])
    }

    #[test]
    fn message_format_is_exact() {
        let h = Sha256Hex::digest(b"x");
        let m = decision_message(Decision::ResolveFailed, &h, "a\nb").unwrap();
        assert_eq!(m, format!("approval-v1\nresolve-failed\n{h}\na\nb"));
        assert_eq!(
            parse_decision_message(&m).unwrap(),
            (Decision::ResolveFailed, h, "a\nb".into())
        );
    }

    #[test]
    fn message_refusals() {
        let h = Sha256Hex::digest(b"x");
        let long = "é".repeat(1001);
        assert_eq!(
            decision_message(Decision::Approve, &h, &long),
            Err(MessageError::ReasonTooLong(1001))
        );
        assert!(decision_message(Decision::Approve, &h, &"é".repeat(1000)).is_ok());
        assert_eq!(
            parse_decision_message(&format!("approval-v2\napprove\n{h}\n")),
            Err(MessageError::Format("first line must be approval-v1"))
        );
        assert_eq!(
            parse_decision_message(&format!("approval-v1\napproved\n{h}\n")),
            Err(MessageError::Decision("approved".into()))
        );
        assert_eq!(
            parse_decision_message(&format!(
                "approval-v1\napprove\n{}\n",
                h.to_hex().to_uppercase()
            )),
            Err(MessageError::Hash)
        );
        assert_eq!(
            parse_decision_message(&format!("approval-v1\napprove\n{h}")),
            Err(MessageError::Format("missing reason line"))
        );
    }

    #[test]
    fn sign_and_verify_binds_decision_hash_and_reason() {
        let sk = key(7);
        let pk = ApproverKey::Key(PublicKey::from_signing_key(&sk));
        let h = Sha256Hex::digest(b"x");
        let alice = ApproverName::parse("alice").unwrap();
        let d = SignedDecision::sign(&sk, alice, Decision::Approve, &h, "ok").unwrap();
        assert_eq!(d.verify(&pk, &h), Ok(Verified { sign_count: None }));
        assert_eq!(
            d.verify(&pk, &Sha256Hex::digest(b"y")),
            Err(MessageError::BadSignature)
        );
        let mut other = d.clone();
        other.decision = Decision::Reject;
        assert_eq!(other.verify(&pk, &h), Err(MessageError::BadSignature));
        let mut other = d.clone();
        other.reason = "ok ".into();
        assert_eq!(other.verify(&pk, &h), Err(MessageError::BadSignature));
        assert_eq!(
            d.verify(&ApproverKey::Key(PublicKey::from_signing_key(&key(8))), &h),
            Err(MessageError::BadSignature)
        );
    }

    #[test]
    fn signature_encoding_is_canonical() {
        let s = Signature([1; 64]).to_base64();
        assert!(Signature::parse(&s).is_ok());
        assert_eq!(
            Signature::parse(s.trim_end_matches('=')),
            Err(MessageError::SignatureEncoding)
        );
        assert_eq!(
            Signature::parse("AAAA"),
            Err(MessageError::SignatureEncoding)
        );
        // Same bytes, different trailing bits: must not be a second spelling.
        let mut alt = s.clone().into_bytes();
        let i = alt.len() - 3;
        alt[i] = if alt[i] == b'Q' { b'R' } else { b'Q' };
        let alt = String::from_utf8(alt).unwrap();
        if alt != s {
            assert!(Signature::parse(&alt)
                .map(|x| x.to_base64() == alt)
                .unwrap_or(true));
        }
    }

    #[test]
    fn signed_reads() {
        let sk = key(9);
        let alice = ApproverName::parse("alice").unwrap();
        let srv = ServerId::parse("srv-1").unwrap();
        let kr = Keyring::parse(&format!(
            "alice ed25519 {}\n",
            PublicKey::from_signing_key(&sk)
        ))
        .unwrap();
        let now = Timestamp::from_unix(1_800_000_000);
        assert_eq!(
            read_message(&srv, 5, "GET", "/v1/events"),
            "approval-v1-read\nsrv-1\n5\nGET\n/v1/events"
        );
        let pq = "/v1/proposals?status=pending";
        let h = sign_read(&sk, &alice, &srv, now.unix() - 10, "GET", pq);
        assert_eq!(
            verify_read(&kr, &srv, &h, "GET", pq, now),
            Ok(alice.clone())
        );
        assert_eq!(
            ReadAuth::parse(&h).unwrap().valid_until().unix(),
            now.unix() - 10 + READ_WINDOW_SECS
        );
        assert_eq!(
            verify_read(&kr, &srv, &h, "GET", "/v1/proposals", now),
            Err(ReadAuthError::BadSignature)
        );
        assert_eq!(
            verify_read(&kr, &srv, &h, "POST", pq, now),
            Err(ReadAuthError::BadSignature)
        );
        let other = ServerId::parse("srv-2").unwrap();
        assert_eq!(
            verify_read(&kr, &other, &h, "GET", pq, now),
            Err(ReadAuthError::BadSignature)
        );
        let old = sign_read(&sk, &alice, &srv, now.unix() - 301, "GET", "/v1/proposals");
        assert_eq!(
            verify_read(&kr, &srv, &old, "GET", "/v1/proposals", now),
            Err(ReadAuthError::Stale(-301))
        );
        let bob = ApproverName::parse("bob").unwrap();
        let hb = sign_read(&sk, &bob, &srv, now.unix(), "GET", "/");
        assert_eq!(
            verify_read(&kr, &srv, &hb, "GET", "/", now),
            Err(ReadAuthError::UnknownApprover("bob".into()))
        );
        for bad in [
            "",
            "Approval",
            "Bearer x",
            "Approval alice 1 x y",
            "Approval alice -1 AAAA",
        ] {
            assert_eq!(
                verify_read(&kr, &srv, bad, "GET", "/", now),
                Err(ReadAuthError::Malformed),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_read_signed_in_the_old_format_is_refused_with_what_changed() {
        let sk = key(9);
        let srv = ServerId::parse("srv-1").unwrap();
        let kr = Keyring::parse(&format!(
            "alice ed25519 {}\n",
            PublicKey::from_signing_key(&sk)
        ))
        .unwrap();
        let now = Timestamp::from_unix(1_800_000_000);
        let sig = sk.sign(old_read_message(now.unix(), "GET", "/v1/events").as_bytes());
        let h = format!(
            "Approval alice {} {}",
            now.unix(),
            STANDARD.encode(sig.to_bytes())
        );
        let e = verify_read(&kr, &srv, &h, "GET", "/v1/events", now).unwrap_err();
        assert_eq!(e, ReadAuthError::OldFormat);
        let m = e.to_string();
        assert!(
            m.contains("server_id") && m.contains("old format") && m.contains("upgrade"),
            "{m}"
        );
    }
}
