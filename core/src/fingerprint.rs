//! Key fingerprints, and the note a refusal carries about the key the server holds.
//!
//! A fingerprint is written like OpenSSH's: `SHA256:` and the standard base64,
//! without padding, of the SHA-256 of the 32 raw public key bytes. When a signed
//! read or a decision does not verify, the server's refusal ends with
//! [`held_key_note`] (`the server's key for alice is SHA256:...`), so the approver's
//! client can compare it with its own key and say what is really wrong: the server
//! holds another key for that name. Fingerprints are of public keys; they reveal
//! nothing a keyring line does not.

use crate::ids::ApproverName;
use crate::keys::PublicKey;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

/// The marker a refusal's message carries before the approver's name.
const NOTE_START: &str = "the server's key for ";
/// Characters of the base64 of a SHA-256 without padding.
const FP_B64_LEN: usize = 43;

/// `SHA256:<base64 without padding of sha256(raw 32 key bytes)>`, like `ssh-keygen -l`.
pub fn fingerprint(key: &PublicKey) -> String {
    format!(
        "SHA256:{}",
        STANDARD_NO_PAD.encode(Sha256::digest(key.to_bytes()))
    )
}

/// The note appended to an UNAUTHORIZED or INVALID_SIGNATURE refusal:
/// `the server's key for <name> is SHA256:<...>`.
pub fn held_key_note(name: &ApproverName, key: &PublicKey) -> String {
    format!("{NOTE_START}{name} is {}", fingerprint(key))
}

/// Finds a [`held_key_note`] in a refusal's message: the name and the fingerprint.
pub fn parse_held_key_note(message: &str) -> Option<(ApproverName, String)> {
    let at = message.rfind(NOTE_START)?;
    let rest = &message[at + NOTE_START.len()..];
    let (name, rest) = rest.split_once(" is ")?;
    let name = ApproverName::parse(name).ok()?;
    let b64 = rest.strip_prefix("SHA256:")?;
    let b64: String = b64.chars().take(FP_B64_LEN).collect();
    if b64.len() != FP_B64_LEN || STANDARD_NO_PAD.decode(&b64).map(|d| d.len()) != Ok(32) {
        return None;
    }
    Some((name, format!("SHA256:{b64}")))
}

/// What an approver reads when the server holds another key for their name.
pub fn key_mismatch_advice(name: &ApproverName, server_fp: &str, yours_fp: &str) -> String {
    format!(
        "the server has another key for {name}: {server_fp} ; yours is {yours_fp} ; send your keyring line (`signer-cli pubkey`) to whoever runs the server, or use the key file the server knows"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::SigningKey;

    fn pk(seed: u8) -> PublicKey {
        PublicKey::from_signing_key(&SigningKey::from_bytes(&[seed; 32]))
    }

    #[test]
    fn fingerprint_is_ssh_style_sha256_of_the_raw_key() {
        let k = pk(7);
        let fp = fingerprint(&k);
        let expected = STANDARD_NO_PAD.encode(Sha256::digest(k.to_bytes()));
        assert_eq!(fp, format!("SHA256:{expected}"));
        assert_eq!(fp.len(), 7 + FP_B64_LEN);
        assert!(!fp.ends_with('='));
        assert_ne!(fingerprint(&pk(8)), fp);
    }

    #[test]
    fn a_note_in_a_refusal_parses_back() {
        let alice = ApproverName::parse("alice").unwrap();
        let msg = format!(
            "read signature does not verify for this approver, server id, time, method and path (reads are signed over the server_id of this server's GET /healthz: docs/PROTOCOL.md section 2.2); {}",
            held_key_note(&alice, &pk(1))
        );
        assert_eq!(
            parse_held_key_note(&msg),
            Some((alice.clone(), fingerprint(&pk(1))))
        );
        let advice = key_mismatch_advice(&alice, &fingerprint(&pk(1)), &fingerprint(&pk(2)));
        assert!(advice.starts_with("the server has another key for alice: SHA256:"));
        assert!(advice.contains(&format!("; yours is {} ;", fingerprint(&pk(2)))));
    }

    #[test]
    fn messages_without_a_well_formed_note_give_nothing() {
        assert_eq!(parse_held_key_note("read signature does not verify"), None);
        assert_eq!(
            parse_held_key_note("the server's key for alice is SHA256:short"),
            None
        );
        assert_eq!(
            parse_held_key_note("the server's key for bad name is SHA256:x"),
            None
        );
    }
}
