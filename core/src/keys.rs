//! The two halves of an Ed25519 signature check: an approver's public key
//! ([`PublicKey`], refusing weak and non-canonical keys) and a signature
//! ([`Signature`]), with the error a refused signature gives ([`MessageError`]).
//!
//! It sits below both `keyring` (which maps names to these keys) and `message` (which
//! builds the texts signed with them), so that neither imports the other. Imports
//! nothing of the crate.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use thiserror::Error;

/// An approver's Ed25519 public key: canonical, not of small order.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(VerifyingKey);

/// The keys that passed [`PublicKey::from_bytes`]'s checks lately, per thread.
///
/// Only a key that passed every check goes in, and a lookup matches its exact bytes,
/// so a remembered key is what the checks would return again: a refused key, an
/// alias of a remembered one (a mixed-order twin, a non-canonical encoding) or any
/// other byte string is never found here and is checked in full. The memory is
/// [`SLOTS`] keys per thread, filled in turn: a stream of distinct keys (valid ones
/// from whoever may send keys) only pushes older ones out, so the worst it can do
/// is make later parses pay for the checks, as every parse did before.
mod recent {
    use ed25519_dalek::VerifyingKey;
    use std::cell::RefCell;

    /// Keys remembered per thread: more than a server's own key and a keyring's
    /// approvers that a burst of reads goes through, few enough to scan.
    pub(super) const SLOTS: usize = 8;

    struct Recent {
        keys: [Option<VerifyingKey>; SLOTS],
        next: usize,
    }

    thread_local! {
        static RECENT: RefCell<Recent> = const {
            RefCell::new(Recent { keys: [None; SLOTS], next: 0 })
        };
    }

    /// The remembered key whose encoding is exactly `bytes`. None also while the
    /// thread is being torn down (its memo is gone): the caller then checks in full.
    pub(super) fn find(bytes: &[u8; 32]) -> Option<VerifyingKey> {
        RECENT
            .try_with(|r| {
                r.borrow()
                    .keys
                    .iter()
                    .flatten()
                    .find(|k| k.as_bytes() == bytes)
                    .copied()
            })
            .ok()
            .flatten()
    }

    /// Remembers a key that passed every check, in place of the oldest (nothing, on a
    /// thread being torn down).
    pub(super) fn remember(key: VerifyingKey) {
        let _ = RECENT.try_with(|r| {
            let mut r = r.borrow_mut();
            let slot = r.next;
            r.keys[slot] = Some(key);
            r.next = (slot + 1) % SLOTS;
        });
    }
}

/// A public key that was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    /// Not standard base64 of 32 bytes.
    #[error("public key is not standard base64 of 32 bytes")]
    Encoding,
    /// Not a point on the curve, or a non-canonical encoding of one.
    #[error("public key is not a canonical Ed25519 point")]
    NotCanonical,
    /// A small-order point (signatures under it prove nothing), or a point with a
    /// small-order component (it can alias another key).
    #[error("public key is weak (small order or mixed order): generate a new key with `signer-cli keygen`")]
    Weak,
}

impl PublicKey {
    /// Decodes a base64 public key, refusing weak and non-canonical keys.
    pub fn parse(b64: &str) -> Result<Self, KeyError> {
        let bytes = STANDARD.decode(b64).map_err(|_| KeyError::Encoding)?;
        let arr: [u8; 32] = bytes.try_into().map_err(|_| KeyError::Encoding)?;
        if STANDARD.encode(arr) != b64 {
            return Err(KeyError::Encoding);
        }
        Self::from_bytes(&arr)
    }

    /// Checks raw key bytes: a canonical encoding of a point in the prime-order
    /// subgroup, other than the identity.
    ///
    /// The checks cost about half a signature verification (a point decompression,
    /// a scalar multiplication by the group order, a compression), and the same few
    /// keys come back again and again: every stored attestation carries the server's
    /// key, so each read of an executed proposal parses it. Keys that passed lately
    /// on this thread are remembered by their exact 32 bytes ([`recent`]), so a
    /// repeat costs a comparison and always gets the answer the checks gave.
    pub fn from_bytes(arr: &[u8; 32]) -> Result<Self, KeyError> {
        if let Some(vk) = recent::find(arr) {
            return Ok(Self(vk));
        }
        let key = Self::checked(arr)?;
        recent::remember(key.0);
        Ok(key)
    }

    /// The checks of [`PublicKey::from_bytes`], every time.
    fn checked(arr: &[u8; 32]) -> Result<Self, KeyError> {
        let vk = VerifyingKey::from_bytes(arr).map_err(|_| KeyError::NotCanonical)?;
        if vk.is_weak() || !vk.to_edwards().is_torsion_free() {
            return Err(KeyError::Weak);
        }
        if vk.to_edwards().compress().to_bytes() != *arr {
            return Err(KeyError::NotCanonical);
        }
        Ok(Self(vk))
    }

    /// The public half of a secret key.
    pub fn from_signing_key(sk: &SigningKey) -> Self {
        Self(sk.verifying_key())
    }

    /// The base64 form, as written in keyrings and receipts.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0.to_bytes())
    }

    /// The raw key bytes.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// `verify_strict` of a message.
    pub fn verify_strict(&self, msg: &[u8], sig: &Signature) -> Result<(), MessageError> {
        let sig = ed25519_dalek::Signature::from_bytes(&sig.0);
        self.0
            .verify_strict(msg, &sig)
            .map_err(|_| MessageError::BadSignature)
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_base64())
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_base64())
    }
}

impl Serialize for PublicKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_base64())
    }
}

impl<'de> Deserialize<'de> for PublicKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Why the key part of a keyring line was refused (any kind of key: kept here,
/// below every module that parses one, so none of them imports another).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPartError {
    /// The line's shape (fields, words, attributes).
    Malformed(String),
    /// An Ed25519 key refused by its checks.
    Key(KeyError),
}

/// A signed message or signature that was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum MessageError {
    /// Not one of the five decision words.
    #[error(
        "unknown decision {0:?}: use approve, reject, revoke, resolve-succeeded or resolve-failed"
    )]
    Decision(String),
    /// Reason longer than `message::MAX_REASON_CHARS`.
    #[error("reason is {0} characters long: keep it to at most 1000")]
    ReasonTooLong(usize),
    /// The text is not a decision message.
    #[error("not an approval-v1 message: {0}")]
    Format(&'static str),
    /// The hash field is not 64 lowercase hex characters.
    #[error("invalid preview_sha256 in message: use 64 lowercase hex characters")]
    Hash,
    /// The signature is not standard base64 of 64 bytes.
    #[error("invalid signature encoding: use standard base64 (with padding) of 64 bytes")]
    SignatureEncoding,
    /// The signature does not verify under the key (or the key is weak).
    #[error("signature does not verify for this key, decision and preview hash")]
    BadSignature,
    /// A passkey assertion was refused (what was wrong, from the WebAuthn checks).
    #[error("passkey assertion refused: {0}")]
    Passkey(String),
    /// A signature under a passkey approver, or an assertion under a key approver.
    #[error("{0}")]
    ProofKind(&'static str),
    /// An SSHSIG refused (issue #35): its encoding, namespace, hash, key or flags.
    #[error("SSH signature refused: {0}")]
    Ssh(String),
}

/// An Ed25519 signature, written as standard base64 with padding.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signature(pub [u8; 64]);

impl Signature {
    /// Decodes standard base64 of exactly 64 bytes; non-canonical encodings are refused.
    pub fn parse(s: &str) -> Result<Self, MessageError> {
        let bytes = STANDARD
            .decode(s)
            .map_err(|_| MessageError::SignatureEncoding)?;
        let arr: [u8; 64] = bytes
            .try_into()
            .map_err(|_| MessageError::SignatureEncoding)?;
        if STANDARD.encode(arr) != s {
            return Err(MessageError::SignatureEncoding);
        }
        Ok(Self(arr))
    }

    /// The base64 form.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({})", self.to_base64())
    }
}

impl Serialize for Signature {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_base64())
    }
}

impl<'de> Deserialize<'de> for Signature {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The memo of checked keys answers exactly as the checks do, whatever came before:
    /// valid keys, more of them than it holds, weak keys, non-canonical encodings
    /// (of 0 and of small y), and each valid key's mixed-order twin, each parsed
    /// again after the valid keys were remembered.
    #[test]
    fn remembered_keys_answer_as_the_checks_do() {
        // (0, -1), the point of order 2: y = p - 1.
        let mut order_2 = [0xffu8; 32];
        order_2[0] = 0xec;
        order_2[31] = 0x7f;
        let t = VerifyingKey::from_bytes(&order_2).unwrap().to_edwards();
        let valid: Vec<[u8; 32]> = (0..(2 * recent::SLOTS as u8 + 3))
            .map(|i| SigningKey::from_bytes(&[i; 32]).verifying_key().to_bytes())
            .collect();
        let mut refused: Vec<[u8; 32]> = Vec::new();
        let mut identity = [0u8; 32];
        identity[0] = 1;
        refused.push(identity);
        let mut nc = [0xffu8; 32];
        nc[0] = 0xed;
        nc[31] = 0x7f;
        refused.push(nc);
        for v in 0..19u8 {
            // p + v: a non-canonical encoding of y = v.
            let mut e = nc;
            e[0] = 0xed + v;
            refused.push(e);
        }
        for k in &valid {
            let a = VerifyingKey::from_bytes(k).unwrap().to_edwards();
            refused.push((a + t).compress().to_bytes());
        }
        let all: Vec<[u8; 32]> = valid.iter().chain(&refused).copied().collect();
        for round in 0..3 {
            for (i, k) in all.iter().enumerate() {
                let expected = PublicKey::checked(k);
                assert_eq!(PublicKey::from_bytes(k), expected, "round {round}, key {i}");
                // Straight after a hit or a remembered pass, too.
                assert_eq!(
                    PublicKey::from_bytes(k),
                    expected,
                    "round {round}, key {i} again"
                );
            }
        }
        for k in &valid {
            assert!(PublicKey::from_bytes(k).is_ok());
        }
        for k in &refused {
            assert!(PublicKey::from_bytes(k).is_err());
            assert_eq!(recent::find(k), None, "a refused key is never remembered");
        }
        // The last valid keys parsed are remembered (the memo is in use at all).
        for k in valid.iter().rev().take(recent::SLOTS) {
            assert_eq!(recent::find(k).map(|v| v.to_bytes()), Some(*k));
        }
    }
}
