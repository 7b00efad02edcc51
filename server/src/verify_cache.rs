//! Remembers which signatures verified, so a status poll does not redo Ed25519 math.
//!
//! Quorum is re-counted on every read with the keyring in force (a key removed from the
//! keyring stops counting at once); only the arithmetic of `verify_strict` is
//! memoised, keyed by the public key, the exact signed message and the signature. A
//! hit therefore means "this key signed exactly this message", which is what the
//! verification would have said. Only successes are remembered, so a forger can
//! neither fill the set nor push genuine entries out (issue #11, item 1: forgeries
//! must cost the forger only); the set is cleared when it grows past its bound, which
//! only genuine signatures can make it do. Failed checks are charged to their source
//! address by [`crate::throttle`].

use approval_core::keyring::ApproverKey;
use approval_core::message::{decision_message, Proof, SignedDecision};
use approval_core::Sha256Hex;
use std::collections::HashSet;
use std::sync::Mutex;

/// Entries kept before the cache is cleared.
pub const CAPACITY: usize = 200_000;

/// A bounded set of verified (key, message, signature) digests.
#[derive(Default)]
pub struct VerifyCache {
    seen: Mutex<HashSet<[u8; 32]>>,
}

impl VerifyCache {
    /// `SignedDecision::verify`, memoised.
    ///
    /// A passkey's entry is keyed by its whole keyring entry (key, RP ID, origin,
    /// credential id) and the whole assertion, so a hit is exactly a check that passed.
    pub fn verify(&self, key: &ApproverKey, d: &SignedDecision, hash: &Sha256Hex) -> bool {
        let Ok(msg) = decision_message(d.decision, hash, &d.reason) else {
            return false;
        };
        let mut buf = Vec::with_capacity(32 + 64 + msg.len());
        match (key, &d.proof) {
            (ApproverKey::Key(k), Proof::Signature(s)) => {
                buf.extend_from_slice(&k.to_bytes());
                buf.extend_from_slice(&s.0);
            }
            (ApproverKey::Passkey(_), Proof::Passkey(a)) => {
                for part in [
                    key.to_fields().as_bytes(),
                    &a.credential_id,
                    &a.authenticator_data,
                    &a.client_data_json,
                    &a.signature,
                ] {
                    buf.extend_from_slice(&(part.len() as u64).to_be_bytes());
                    buf.extend_from_slice(part);
                }
            }
            (ApproverKey::Ssh(_), Proof::SshSig(s)) => {
                for part in [key.to_fields().as_bytes(), s.as_bytes()] {
                    buf.extend_from_slice(&(part.len() as u64).to_be_bytes());
                    buf.extend_from_slice(part);
                }
            }
            // A proof of the other kind never verifies.
            _ => return false,
        }
        buf.extend_from_slice(msg.as_bytes());
        let digest = *Sha256Hex::digest(&buf).as_bytes();
        if self
            .seen
            .lock()
            .map(|s| s.contains(&digest))
            .unwrap_or(false)
        {
            return true;
        }
        let ok = d.verify(key, hash).is_ok();
        if ok {
            if let Ok(mut s) = self.seen.lock() {
                if s.len() >= CAPACITY {
                    s.clear();
                }
                s.insert(digest);
            }
        }
        ok
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.seen.lock().map(|s| s.len()).unwrap_or(0)
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approval_core::keyring::SecretKey;
    use approval_core::message::Decision;
    use approval_core::ApproverName;

    #[test]
    fn a_hit_never_turns_a_bad_signature_good() {
        let k = SecretKey::from_seed(ApproverName::parse("alice").unwrap(), [3; 32]);
        let h = Sha256Hex::digest(b"p");
        let d = SignedDecision::sign(&k.key, k.name.clone(), Decision::Approve, &h, "").unwrap();
        let cache = VerifyCache::default();
        assert!(cache.verify(&k.public_key().into(), &d, &h));
        assert!(cache.verify(&k.public_key().into(), &d, &h));
        let mut other = d.clone();
        other.decision = Decision::Reject;
        assert!(!cache.verify(&k.public_key().into(), &other, &h));
        assert!(!cache.verify(&k.public_key().into(), &d, &Sha256Hex::digest(b"q")));
        let k2 = SecretKey::from_seed(ApproverName::parse("bob").unwrap(), [4; 32]);
        assert!(!cache.verify(&k2.public_key().into(), &d, &h));
    }

    #[test]
    fn ssh_signatures_are_remembered_only_for_their_key_and_message() {
        use approval_core::ssh::{SshSignature, NAMESPACE};
        use ssh_key::private::Ed25519Keypair;
        let line = |seed: u8| {
            let kp = Ed25519Keypair::from_seed(&[seed; 32]);
            let text = ssh_key::PublicKey::from(kp.public).to_openssh().unwrap();
            let fields: Vec<&str> = text.split_whitespace().take(2).collect();
            (ApproverKey::parse_fields(&fields).unwrap(), kp)
        };
        let (key, kp) = line(6);
        let (other, _) = line(7);
        let h = Sha256Hex::digest(b"p");
        let msg = decision_message(Decision::Approve, &h, "").unwrap();
        let sig = ssh_key::PrivateKey::from(kp)
            .sign(NAMESPACE, ssh_key::HashAlg::Sha512, msg.as_bytes())
            .unwrap();
        let sig =
            SshSignature::from_armored(&sig.to_pem(ssh_key::LineEnding::LF).unwrap()).unwrap();
        let d = SignedDecision {
            approver: ApproverName::parse("fred").unwrap(),
            decision: Decision::Approve,
            reason: String::new(),
            proof: Proof::SshSig(Box::new(sig)),
        };
        let cache = VerifyCache::default();
        assert!(cache.verify(&key, &d, &h));
        assert!(cache.verify(&key, &d, &h));
        assert_eq!(cache.len(), 1);
        let mut rejected = d.clone();
        rejected.decision = Decision::Reject;
        assert!(!cache.verify(&key, &rejected, &h));
        assert!(!cache.verify(&other, &d, &h));
        assert!(!cache.verify(&key, &d, &Sha256Hex::digest(b"q")));
        let k = SecretKey::from_seed(ApproverName::parse("fred").unwrap(), [6; 32]);
        assert!(!cache.verify(&k.public_key().into(), &d, &h));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn forgeries_never_enter_the_cache() {
        let k = SecretKey::from_seed(ApproverName::parse("carol").unwrap(), [5; 32]);
        let h = Sha256Hex::digest(b"p");
        let cache = VerifyCache::default();
        for i in 0..1000u32 {
            let mut sig = [0u8; 64];
            sig[..4].copy_from_slice(&i.to_le_bytes());
            let forged = SignedDecision {
                approver: k.name.clone(),
                decision: Decision::Reject,
                reason: String::new(),
                proof: Proof::Signature(approval_core::message::Signature(sig)),
            };
            assert!(!cache.verify(&k.public_key().into(), &forged, &h));
        }
        assert!(cache.is_empty());
        let genuine =
            SignedDecision::sign(&k.key, k.name.clone(), Decision::Reject, &h, "").unwrap();
        assert!(cache.verify(&k.public_key().into(), &genuine, &h));
        assert_eq!(cache.len(), 1);
    }
}
