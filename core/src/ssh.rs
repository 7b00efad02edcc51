//! Approver keys that OpenSSH holds: in ssh-agent, or on a FIDO token (issue #35).
//!
//! A keyring line names the OpenSSH public key exactly as `authorized_keys` writes it,
//! without a comment:
//!
//! ```text
//! alice ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI...
//! bob   sk-ssh-ed25519@openssh.com AAAAGnNrLXNzaC1lZDI1NTE5QG9wZW5zc2guY29tAAAAI...
//! ```
//!
//! A decision made with such a key is an SSHSIG (OpenSSH's PROTOCOL.sshsig) with
//! namespace `approval-v1` and hash `sha512` over the same decision text an Ed25519
//! key signs; it travels as the standard base64 of the binary SSHSIG blob (what the
//! armoured `-----BEGIN SSH SIGNATURE-----` form holds). The `ssh-key` crate checks
//! the signature; what it leaves to its caller is checked here: the namespace, the
//! hash, a canonical encoding, and for `sk-` keys the application `ssh:` and the
//! user-presence flag. The token's counter is returned for the server to check that it
//! goes up (state, so not here).

use crate::keys::KeyPartError;
use crate::keys::PublicKey;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine;
use sha2::{Digest, Sha256};
use ssh_encoding::{Decode, Encode};
use ssh_key::{HashAlg, SshSig};

/// The SSHSIG namespace of decisions (`ssh-keygen -Y sign -n approval-v1`).
pub const NAMESPACE: &str = "approval-v1";
/// The FIDO application an `sk-` key must be bound to: OpenSSH's default.
pub const SK_APPLICATION: &str = "ssh:";
/// The user-present flag of an `sk-` signature (the token was touched).
pub const FLAG_USER_PRESENT: u8 = 0x01;
/// The user-verified flag of an `sk-` signature (PIN or biometrics).
pub const FLAG_USER_VERIFIED: u8 = 0x04;
/// The keyring word of a plain OpenSSH Ed25519 key.
pub const WORD_ED25519: &str = "ssh-ed25519";
/// The keyring word of a FIDO (security key) Ed25519 key.
pub const WORD_SK_ED25519: &str = "sk-ssh-ed25519@openssh.com";
/// The longest SSHSIG accepted, in bytes (an Ed25519 one is under 200).
const MAX_SIG_BYTES: usize = 4096;

/// An OpenSSH Ed25519 public key from a keyring line, plain or on a FIDO token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SshKey {
    blob: Vec<u8>,
    point: [u8; 32],
    sk: bool,
}

impl SshKey {
    /// Reads `ssh-ed25519 <base64 blob>` or `sk-ssh-ed25519@openssh.com <base64 blob>`:
    /// canonical base64, a blob of the named type and nothing after it, a strong
    /// Ed25519 point, and for a security key the application `ssh:`.
    pub fn parse(word: &str, b64: &str) -> Result<Self, KeyPartError> {
        let bad = |m: String| KeyPartError::Malformed(m);
        let sk = match word {
            WORD_ED25519 => false,
            WORD_SK_ED25519 => true,
            _ => return Err(bad(format!("{word:?} is not an OpenSSH key type this gate takes (ssh-ed25519, sk-ssh-ed25519@openssh.com)"))),
        };
        let blob = STANDARD
            .decode(b64)
            .ok()
            .filter(|b| STANDARD.encode(b) == b64)
            .ok_or_else(|| {
                bad(format!(
                    "the {word} key is not standard base64 (copy it from the .pub file)"
                ))
            })?;
        let key = ssh_key::PublicKey::from_bytes(&blob)
            .map_err(|_| bad(format!("the {word} key is not an OpenSSH key blob: copy the base64 after the type from the .pub file or `ssh-add -L` (it starts with {})", if sk { "AAAAGnNrLXNzaC1lZDI1NTE5" } else { "AAAAC3NzaC1lZDI1NTE5" })))?;
        if key.algorithm().as_str() != word {
            return Err(bad(format!(
                "the key is a {}, but the line says {word}",
                key.algorithm().as_str()
            )));
        }
        if key.to_bytes().ok().as_deref() != Some(&blob[..]) {
            return Err(bad(format!(
                "the {word} key has trailing or non-canonical bytes"
            )));
        }
        let point = match (key.key_data().ed25519(), key.key_data().sk_ed25519()) {
            (Some(k), None) => k.0,
            (None, Some(k)) => {
                if k.application() != SK_APPLICATION {
                    return Err(bad(format!(
                        "the security key is bound to application {:?}: only {SK_APPLICATION:?} (OpenSSH's default, `ssh-keygen -t ed25519-sk`) is taken",
                        k.application()
                    )));
                }
                k.public_key().0
            }
            _ => return Err(bad(format!("the {word} key is not an Ed25519 key"))),
        };
        PublicKey::from_bytes(&point).map_err(KeyPartError::Key)?;
        Ok(Self { blob, point, sk })
    }

    /// The keyring word.
    pub fn word(&self) -> &'static str {
        if self.sk {
            WORD_SK_ED25519
        } else {
            WORD_ED25519
        }
    }

    /// Whether the key lives on a FIDO token (`sk-`).
    pub fn is_sk(&self) -> bool {
        self.sk
    }

    /// The OpenSSH key blob (what `authorized_keys` base64-encodes).
    pub fn blob(&self) -> &[u8] {
        &self.blob
    }

    /// The fields after the name, as a keyring line writes them.
    pub fn to_fields(&self) -> String {
        format!("{} {}", self.word(), STANDARD.encode(&self.blob))
    }

    /// The Ed25519 point: one secret, whatever line form names it. A keyring line
    /// `ed25519 <key>` and an `ssh-ed25519` or `sk-` line over the same point are
    /// the same signer (anyone with the secret can make all three kinds of
    /// signature), so this is the identity the keyring's duplicate check uses.
    pub fn point(&self) -> [u8; 32] {
        self.point
    }

    /// `SHA256:...` exactly as `ssh-keygen -l` prints it.
    pub fn fingerprint(&self) -> String {
        format!(
            "SHA256:{}",
            STANDARD_NO_PAD.encode(Sha256::digest(&self.blob))
        )
    }

    /// The name under which the server keeps this token's last counter:
    /// `sk/<base64url of SHA-256 of the key blob>`.
    pub fn counter_mark(&self) -> String {
        format!("sk/{}", URL_SAFE_NO_PAD.encode(Sha256::digest(&self.blob)))
    }

    /// Checks an SSHSIG over `msg` under this key: namespace `approval-v1`, hash
    /// sha512, the signature (by `ssh-key`), and for an `sk-` key the user-presence
    /// flag. Returns the token's counter for an `sk-` key.
    pub fn verify(&self, msg: &[u8], sig: &SshSignature) -> Result<Option<u32>, String> {
        if sig.sig.namespace() != NAMESPACE {
            return Err(format!(
                "namespace is {:?}, not {NAMESPACE:?} (ssh-keygen -Y sign -n {NAMESPACE})",
                sig.sig.namespace()
            ));
        }
        if sig.sig.hash_alg() != HashAlg::Sha512 {
            return Err("the hash must be sha512".into());
        }
        let key = ssh_key::PublicKey::from_bytes(&self.blob)
            .map_err(|e| format!("keyring key does not decode: {e}"))?;
        key.verify(NAMESPACE, msg, &sig.sig).map_err(|e| match e {
            ssh_key::Error::PublicKey => {
                "made with another key than the keyring's for this approver".to_owned()
            }
            _ => "does not verify for this key, decision and preview hash".to_owned(),
        })?;
        if !self.sk {
            return Ok(None);
        }
        let (flags, counter) = sig
            .sk_flags_counter()
            .ok_or("a security key signature without flags and counter")?;
        if flags & FLAG_USER_PRESENT == 0 {
            return Err(
                "the token reports no user presence (flags without 0x01): touch the key when it blinks".into(),
            );
        }
        Ok(Some(counter))
    }
}

/// An SSHSIG blob as received: its exact bytes and what they decode to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshSignature {
    bytes: Vec<u8>,
    sig: SshSig,
}

impl SshSignature {
    /// Decodes a binary SSHSIG: version 1, nothing after it, and encoded exactly as
    /// its decoding encodes again (one spelling per signature).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, String> {
        if bytes.len() > MAX_SIG_BYTES {
            return Err(format!("SSHSIG is over {MAX_SIG_BYTES} bytes"));
        }
        let mut r = &bytes[..];
        let sig = SshSig::decode(&mut r).map_err(|e| format!("not an SSHSIG blob: {e}"))?;
        if !r.is_empty() {
            return Err("bytes after the SSHSIG blob".into());
        }
        if sig.version() != SshSig::VERSION {
            return Err(format!("SSHSIG version {}, not 1", sig.version()));
        }
        let mut again = Vec::new();
        if sig.encode(&mut again).is_err() || again != bytes {
            return Err("the SSHSIG blob is not canonically encoded".into());
        }
        Ok(Self { bytes, sig })
    }

    /// Reads the standard base64 (with padding) of a binary SSHSIG.
    pub fn parse(b64: &str) -> Result<Self, String> {
        if b64.len() > MAX_SIG_BYTES * 2 {
            return Err("sshsig is too long".into());
        }
        let bytes = STANDARD
            .decode(b64)
            .ok()
            .filter(|b| STANDARD.encode(b) == b64)
            .ok_or("sshsig must be the standard base64 (with padding) of the binary SSHSIG blob")?;
        Self::from_bytes(bytes)
    }

    /// Reads the armoured form `ssh-keygen -Y sign` writes.
    pub fn from_armored(pem: &str) -> Result<Self, String> {
        let sig = SshSig::from_pem(pem).map_err(|e| format!("not an SSH SIGNATURE: {e}"))?;
        let mut bytes = Vec::new();
        sig.encode(&mut bytes).map_err(|e| e.to_string())?;
        Self::from_bytes(bytes)
    }

    /// Makes the SSHSIG for `key` around a signature an agent (or a token) returned
    /// over [`signed_data`], given as its SSH wire encoding.
    pub fn from_agent(key: &SshKey, signature_blob: &[u8]) -> Result<Self, String> {
        let mut r = signature_blob;
        let signature = ssh_key::Signature::decode(&mut r)
            .map_err(|e| format!("the agent's signature does not decode: {e}"))?;
        if !r.is_empty() {
            return Err("bytes after the agent's signature".into());
        }
        let key = ssh_key::PublicKey::from_bytes(&key.blob).map_err(|e| e.to_string())?;
        let sig = SshSig::new(
            key.key_data().clone(),
            NAMESPACE,
            HashAlg::Sha512,
            signature,
        )
        .map_err(|e| e.to_string())?;
        let mut bytes = Vec::new();
        sig.encode(&mut bytes).map_err(|e| e.to_string())?;
        Self::from_bytes(bytes)
    }

    /// The exact bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The wire form: standard base64 of the bytes.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(&self.bytes)
    }

    /// The OpenSSH blob of the key the signature names.
    pub fn key_blob(&self) -> Option<Vec<u8>> {
        let mut v = Vec::new();
        self.sig.public_key().encode(&mut v).ok()?;
        Some(v)
    }

    /// A security key's flags and counter (the last 5 bytes of its signature), or
    /// `None` for a plain key's signature. Authentic only once verified.
    pub fn sk_flags_counter(&self) -> Option<(u8, u32)> {
        if self.sig.algorithm() != ssh_key::Algorithm::SkEd25519 {
            return None;
        }
        let b = self.sig.signature_bytes();
        let t = b.get(b.len().checked_sub(5)?..)?;
        Some((t[0], u32::from_be_bytes([t[1], t[2], t[3], t[4]])))
    }
}

/// What a key signs for a decision text `msg` (PROTOCOL.sshsig's signed data):
/// `"SSHSIG" || string(namespace) || string("") || string("sha512") || string(SHA-512(msg))`.
/// An agent is asked to sign exactly this.
pub fn signed_data(msg: &[u8]) -> Result<Vec<u8>, String> {
    SshSig::signed_data(NAMESPACE, HashAlg::Sha512, msg).map_err(|e| e.to_string())
}

impl serde::Serialize for SshSignature {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_base64())
    }
}

impl<'de> serde::Deserialize<'de> for SshSignature {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}
