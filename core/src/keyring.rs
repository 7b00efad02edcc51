//! Approvers' public keys, read from an allowed_signers-like file.
//!
//! One approver a line: `<name> ed25519 <base64 public key>`, or a passkey
//! (`<name> webauthn-es256 <base64 COSE key> rp=<id> cred=<id> [origin=<origin>]`,
//! see [`crate::approver_key`]), or an OpenSSH key (`<name> ssh-ed25519 <blob>`,
//! `<name> sk-ssh-ed25519@openssh.com <blob>`, see [`crate::ssh`]), `#` comments. One
//! name may have one Ed25519 key and any number of passkeys and OpenSSH keys (a
//! phone, a hardware token, an agent): they are one approver, who counts once
//! whichever signs. An OpenSSH key counts as the same key as an `ed25519` line over
//! the same point. A second key line for a name, or a key or passkey
//! credential id that appears twice, refuses the whole file: one key must never
//! count as two approvers, and one name must never mean two keys. Weak (small-order) and
//! non-canonically encoded keys are refused, since `verify_strict` would reject
//! every signature from them anyway and their presence means a mistake or an attack.
//! Mixed-order keys (a real key plus a small-order point) are refused too: no
//! honest key generator makes one, and `verify_strict` (cofactorless) accepts
//! signatures under `A + T` from the holder of `A`'s secret whenever the
//! challenge hash happens to kill `T` (one try in two to one in eight), so one
//! secret could stand behind several byte-distinct keyring lines.
//!
//! The secret key file that `signer-cli` keeps on an approver's laptop is also
//! defined here, so that its format is documented and tested in one place.

use crate::ids::ApproverName;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ed25519_dalek::SigningKey;
use std::collections::BTreeMap;
use thiserror::Error;

pub use crate::approver_key::{ApproverKey, KeyPartError, PasskeyEntry, Proof, SignatureKind};
pub use crate::keys::{KeyError, PublicKey};

/// The approvers the server knows, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keyring {
    by_name: BTreeMap<ApproverName, Vec<ApproverKey>>,
}

/// A keyring file that was refused, with the line to fix.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KeyringError {
    /// Not `<name> ed25519 <base64 key>` nor a passkey line.
    #[error("line {line}: expected `<name> ed25519 <base64 public key>` or `<name> webauthn-es256 <base64 COSE key> rp=<id> cred=<id>` ({why})")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        why: String,
    },
    /// The key on a line was refused.
    #[error("line {line}: {source}")]
    Key {
        /// 1-based line number.
        line: usize,
        /// Why.
        source: KeyError,
    },
    /// A name has a second Ed25519 key.
    #[error("line {line}: approver {name:?} already has a key on line {first}: one ed25519 key per name (passkeys may be added beside it)")]
    DuplicateName {
        /// Where it appears again.
        line: usize,
        /// Where it first appeared.
        first: usize,
        /// The name.
        name: String,
    },
    /// A key appears twice, under any names.
    #[error("line {line}: this key is already {other:?}'s (line {first}): one key cannot count as two approvers")]
    DuplicateKey {
        /// Where it appears again.
        line: usize,
        /// Where it first appeared.
        first: usize,
        /// The approver it already belongs to.
        other: String,
    },
}

impl KeyringError {
    /// The 1-based line to fix.
    pub fn line(&self) -> usize {
        match self {
            KeyringError::Malformed { line, .. }
            | KeyringError::Key { line, .. }
            | KeyringError::DuplicateName { line, .. }
            | KeyringError::DuplicateKey { line, .. } => *line,
        }
    }
}

impl Keyring {
    /// Parses keyring text.
    pub fn parse(text: &str) -> Result<Self, KeyringError> {
        let mut by_name: BTreeMap<ApproverName, Vec<ApproverKey>> = BTreeMap::new();
        let mut name_line: BTreeMap<ApproverName, usize> = BTreeMap::new();
        let mut key_line: BTreeMap<[u8; 32], (usize, ApproverName)> = BTreeMap::new();
        let mut cred_line: BTreeMap<Vec<u8>, (usize, ApproverName)> = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let l = raw.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = l.split_whitespace().collect();
            let malformed = |why: &str| KeyringError::Malformed {
                line,
                why: why.to_owned(),
            };
            let [name, rest @ ..] = &fields[..] else {
                return Err(malformed("wrong number of fields"));
            };
            let name = ApproverName::parse(name).map_err(|e| malformed(&e.to_string()))?;
            let key = ApproverKey::parse_fields(rest).map_err(|e| match e {
                KeyPartError::Malformed(why) => malformed(&why),
                KeyPartError::Key(source) => KeyringError::Key { line, source },
            })?;
            if let (Some(&first), Some(_)) = (name_line.get(&name), key.as_key()) {
                return Err(KeyringError::DuplicateName {
                    line,
                    first,
                    name: name.to_string(),
                });
            }
            let taken = key_line.get(&key.identity()).or_else(|| {
                key.as_passkey()
                    .and_then(|p| cred_line.get(p.credential_id()))
            });
            if let Some((first, other)) = taken {
                return Err(KeyringError::DuplicateKey {
                    line,
                    first: *first,
                    other: other.to_string(),
                });
            }
            if key.as_key().is_some() {
                name_line.insert(name.clone(), line);
            }
            key_line.insert(key.identity(), (line, name.clone()));
            if let Some(p) = key.as_passkey() {
                cred_line.insert(p.credential_id().to_vec(), (line, name.clone()));
            }
            by_name.entry(name).or_default().push(key);
        }
        Ok(Self { by_name })
    }

    /// Every credential of an approver (none for an unknown name).
    pub fn credentials(&self, name: &ApproverName) -> &[ApproverKey] {
        self.by_name.get(name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// An approver's Ed25519 key: what signs reads of the approver API.
    pub fn key(&self, name: &ApproverName) -> Option<&PublicKey> {
        self.credentials(name).iter().find_map(ApproverKey::as_key)
    }

    /// The credential a decision's proof must verify under: the approver's key for
    /// a signature, their passkey with the assertion's credential id for a passkey.
    pub fn for_proof(&self, name: &ApproverName, proof: &Proof) -> Option<&ApproverKey> {
        self.credentials(name).iter().find(|k| match (k, proof) {
            (ApproverKey::Key(_), Proof::Signature(_)) => true,
            (ApproverKey::Passkey(p), Proof::Passkey(a)) => p.credential_id() == a.credential_id,
            (ApproverKey::Ssh(k), Proof::SshSig(s)) => s.key_blob().as_deref() == Some(k.blob()),
            _ => false,
        })
    }

    /// The passkeys of an approver.
    pub fn passkeys(&self, name: &ApproverName) -> impl Iterator<Item = &PasskeyEntry> {
        self.credentials(name)
            .iter()
            .filter_map(ApproverKey::as_passkey)
    }

    /// Whether an approver is known.
    pub fn contains(&self, name: &ApproverName) -> bool {
        self.by_name.contains_key(name)
    }

    /// Every credential with its approver, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&ApproverName, &ApproverKey)> {
        self.by_name
            .iter()
            .flat_map(|(n, ks)| ks.iter().map(move |k| (n, k)))
    }

    /// Number of approvers.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The keyring line for an approver, as `keygen` prints it.
    pub fn line(name: &ApproverName, key: &PublicKey) -> String {
        format!("{name} ed25519 {key}")
    }

    /// The keyring line for any credential (a passkey's as enrolment prints it).
    pub fn entry_line(name: &ApproverName, key: &ApproverKey) -> String {
        format!("{name} {key}")
    }
}

/// An approver's secret key, as `signer-cli` stores it (file mode 0600).
///
/// Format (version 1), three lines:
/// ```text
/// approval-signer-key v1
/// name: alice
/// seed: <standard base64 of the 32-byte Ed25519 seed>
/// ```
pub struct SecretKey {
    /// The approver's name, as in the keyring.
    pub name: ApproverName,
    /// The key (zeroised on drop by ed25519-dalek).
    pub key: SigningKey,
}

/// A secret key file that was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid key file: {0} (expected `approval-signer-key v1`, `name: NAME`, `seed: BASE64`)")]
pub struct SecretKeyError(pub &'static str);

impl SecretKey {
    /// Makes a key from a 32-byte seed.
    pub fn from_seed(name: ApproverName, seed: [u8; 32]) -> Self {
        Self {
            name,
            key: SigningKey::from_bytes(&seed),
        }
    }

    /// Reads the file format above.
    pub fn parse(text: &str) -> Result<Self, SecretKeyError> {
        let mut lines = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'));
        if lines.next() != Some("approval-signer-key v1") {
            return Err(SecretKeyError("first line is not `approval-signer-key v1`"));
        }
        let name = lines
            .next()
            .and_then(|l| l.strip_prefix("name: "))
            .ok_or(SecretKeyError("missing `name:` line"))?;
        let name = ApproverName::parse(name).map_err(|_| SecretKeyError("invalid name"))?;
        let seed = lines
            .next()
            .and_then(|l| l.strip_prefix("seed: "))
            .ok_or(SecretKeyError("missing `seed:` line"))?;
        let seed: [u8; 32] = STANDARD
            .decode(seed)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or(SecretKeyError("seed is not base64 of 32 bytes"))?;
        if lines.next().is_some() {
            return Err(SecretKeyError("unexpected extra lines"));
        }
        Ok(Self::from_seed(name, seed))
    }

    /// Writes the file format above.
    pub fn to_file_text(&self) -> String {
        format!(
            "approval-signer-key v1\nname: {}\nseed: {}\n",
            self.name,
            STANDARD.encode(self.key.to_bytes())
        )
    }

    /// The public key.
    pub fn public_key(&self) -> PublicKey {
        PublicKey::from_signing_key(&self.key)
    }

    /// The keyring line to send to whoever runs the server.
    pub fn keyring_line(&self) -> String {
        Keyring::line(&self.name, &self.public_key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pk(n: u8) -> String {
        PublicKey::from_signing_key(&SigningKey::from_bytes(&[n; 32])).to_base64()
    }

    #[test]
    fn parses_comments_and_blank_lines() {
        let text = format!(
            "# team\n\nalice ed25519 {}\n  bob   ed25519 {}  # x\n",
            pk(1),
            pk(2)
        );
        // A trailing comment is a fourth field: refused, so nothing is guessed.
        assert!(matches!(
            Keyring::parse(&text),
            Err(KeyringError::Malformed { line: 4, .. })
        ));
        let text = format!(
            "# team\n\nalice ed25519 {}\n  bob   ed25519 {}\n",
            pk(1),
            pk(2)
        );
        let kr = Keyring::parse(&text).unwrap();
        assert_eq!(kr.len(), 2);
        assert!(kr.contains(&ApproverName::parse("bob").unwrap()));
    }

    #[test]
    fn refuses_duplicates() {
        let dn = format!("alice ed25519 {}\nalice ed25519 {}\n", pk(1), pk(2));
        assert_eq!(
            Keyring::parse(&dn),
            Err(KeyringError::DuplicateName {
                line: 2,
                first: 1,
                name: "alice".into()
            })
        );
        let dk = format!("alice ed25519 {}\nbob ed25519 {}\n", pk(1), pk(1));
        assert_eq!(
            Keyring::parse(&dk),
            Err(KeyringError::DuplicateKey {
                line: 2,
                first: 1,
                other: "alice".into()
            })
        );
    }

    #[test]
    fn refuses_malformed_and_weak_keys() {
        assert!(matches!(
            Keyring::parse("alice ed25519\n"),
            Err(KeyringError::Malformed { line: 1, .. })
        ));
        assert!(matches!(
            Keyring::parse(&format!("alice rsa {}\n", pk(1))),
            Err(KeyringError::Malformed { line: 1, .. })
        ));
        assert!(matches!(
            Keyring::parse("al ice ed25519 x\n"),
            Err(KeyringError::Malformed { line: 1, .. })
        ));
        assert_eq!(
            Keyring::parse("alice ed25519 AAAA\n"),
            Err(KeyringError::Key {
                line: 1,
                source: KeyError::Encoding
            })
        );
        // The identity point (small order).
        let mut id = [0u8; 32];
        id[0] = 1;
        assert_eq!(
            Keyring::parse(&format!("alice ed25519 {}\n", STANDARD.encode(id))),
            Err(KeyringError::Key {
                line: 1,
                source: KeyError::Weak
            })
        );
        // Non-canonical: y = p (encodes 0 non-canonically).
        let mut nc = [0xffu8; 32];
        nc[0] = 0xed;
        nc[31] = 0x7f;
        assert!(matches!(
            Keyring::parse(&format!("alice ed25519 {}\n", STANDARD.encode(nc))),
            Err(KeyringError::Key { line: 1, .. })
        ));
    }

    #[test]
    fn secret_key_file_round_trips() {
        let sk = SecretKey::from_seed(ApproverName::parse("alice").unwrap(), [5; 32]);
        let text = sk.to_file_text();
        let back = SecretKey::parse(&text).unwrap();
        assert_eq!(back.public_key(), sk.public_key());
        assert_eq!(back.keyring_line(), format!("alice ed25519 {}", pk(5)));
        assert_eq!(
            SecretKey::parse("").err(),
            Some(SecretKeyError("first line is not `approval-signer-key v1`"))
        );
        assert!(SecretKey::parse(&text.replace("seed: ", "seed: x")).is_err());
    }
}
