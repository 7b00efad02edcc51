//! What stands behind an approver's name: an Ed25519 key that signer-cli holds, or a
//! passkey (WebAuthn) on a phone or a hardware token (issue #34).
//!
//! A keyring line names one of them:
//!
//! ```text
//! alice ed25519 <base64 key>
//! dana  webauthn-es256 <base64 COSE key> rp=approvals.example.com cred=<base64url credential id>
//! erin  webauthn-eddsa <base64 COSE key> rp=localhost origin=http://localhost:8080 cred=<...>
//! fred  ssh-ed25519 <base64 OpenSSH key blob>
//! gina  sk-ssh-ed25519@openssh.com <base64 OpenSSH key blob>
//! ```
//!
//! The last two are OpenSSH keys (issue #35, [`crate::ssh`]): in ssh-agent, or on a
//! FIDO token; they sign SSHSIGs and are of kind `key`.
//!
//! A passkey is bound to its relying party: the RP ID whose hash opens every
//! assertion, and the one origin (default `https://<rp>`) the browser must report.
//! Both live in the keyring line, so a receipt verified offline checks them against
//! the verifier's keyring, never against anything the server says. The credential id
//! lets the approver page ask the authenticator for exactly this credential.
//!
//! Which of the two kinds of signature a policy counts is the policy's `accept`
//! ([`SignatureKind`]): keys are verified against a preview hash the approver's own
//! machine recomputed; a passkey signs on a page the gate serves (THREAT_MODEL.md).

use crate::fingerprint;
pub use crate::keys::KeyPartError;
use crate::keys::PublicKey;
use crate::keys::Signature;
use crate::passkey::{self, Algorithm, Assertion, CoseKey};
use crate::ssh::{SshKey, SshSignature};
use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;

/// The two ways an approver can sign, as a policy's `accept` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SignatureKind {
    /// An Ed25519 signature made by signer-cli (or anything holding the key).
    Key,
    /// A WebAuthn assertion from a passkey, made on the gate's approver page.
    Passkey,
}

impl SignatureKind {
    /// The policy word.
    pub fn as_str(self) -> &'static str {
        match self {
            SignatureKind::Key => "key",
            SignatureKind::Passkey => "passkey",
        }
    }
}

impl fmt::Display for SignatureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What proves a decision: a signature over `message::decision_message`, or a WebAuthn
/// assertion whose challenge is the SHA-256 of it (`message::passkey_challenge`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// Ed25519 over `message::decision_message`.
    Signature(Signature),
    /// A passkey's assertion over `message::passkey_challenge`.
    Passkey(Box<Assertion>),
    /// An SSHSIG (namespace `approval-v1`, sha512) over `message::decision_message`.
    SshSig(Box<SshSignature>),
}

impl Proof {
    /// The authenticator's signature counter the proof carries: a passkey's (in its
    /// authenticatorData), a security key's (the end of its SSHSIG); `None` for a
    /// plain signature or a malformed proof. Authentic only once the proof verified,
    /// so a caller that already verified it reads it here instead of verifying again.
    pub fn sign_count(&self) -> Option<u32> {
        match self {
            Proof::Passkey(a) => a
                .authenticator_data
                .get(33..37)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes),
            Proof::SshSig(s) => s.sk_flags_counter().map(|(_, n)| n),
            Proof::Signature(_) => None,
        }
    }

    /// Which kind of signature this is, as a policy's `accept` names it.
    pub fn kind(&self) -> SignatureKind {
        match self {
            Proof::Signature(_) | Proof::SshSig(_) => SignatureKind::Key,
            Proof::Passkey(_) => SignatureKind::Passkey,
        }
    }

    /// What the proof says about the human at the authenticator, as a policy's
    /// `require_touch` and `require_verify` read it: a passkey assertion always
    /// shows both (its verification requires them), a security key's SSHSIG shows
    /// its flags, anything else neither. Authentic only once the proof verified.
    pub fn presence(&self) -> Presence {
        match self {
            Proof::Passkey(_) => Presence {
                touched: true,
                verified: true,
            },
            Proof::SshSig(s) => match s.sk_flags_counter() {
                Some((flags, _)) => Presence {
                    touched: flags & crate::ssh::FLAG_USER_PRESENT != 0,
                    verified: flags & crate::ssh::FLAG_USER_VERIFIED != 0,
                },
                None => Presence::default(),
            },
            Proof::Signature(_) => Presence::default(),
        }
    }
}

/// Whether a human touched the authenticator (user present) and was verified
/// (PIN, biometrics) for a signature.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Presence {
    /// User present (a touch).
    pub touched: bool,
    /// User verified.
    pub verified: bool,
}

/// A passkey as the keyring names it: its public key and where it may be used.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PasskeyEntry {
    key: CoseKey,
    rp_id: String,
    origin: String,
    credential_id: Vec<u8>,
}

impl PasskeyEntry {
    /// A passkey entry, checking the RP ID, the origin (whose host must be the RP ID or
    /// one of its subdomains, as WebAuthn requires) and the credential id.
    pub fn new(
        key: CoseKey,
        rp_id: &str,
        origin: Option<&str>,
        credential_id: Vec<u8>,
    ) -> Result<Self, String> {
        check_rp_id(rp_id)?;
        let origin = match origin {
            Some(o) => o.to_owned(),
            None => format!("https://{rp_id}"),
        };
        check_origin(&origin, rp_id)?;
        if credential_id.is_empty() || credential_id.len() > 1023 {
            return Err("cred= must be the base64url of 1 to 1023 bytes".into());
        }
        Ok(Self {
            key,
            rp_id: rp_id.to_owned(),
            origin,
            credential_id,
        })
    }

    /// Checks a relying party id and an origin as a keyring line's `rp=` and
    /// `origin=` are checked (before a link is made that would produce such a line).
    pub fn check_place(rp_id: &str, origin: &str) -> Result<(), String> {
        check_rp_id(rp_id)?;
        check_origin(origin, rp_id)
    }

    /// The COSE public key.
    pub fn key(&self) -> &CoseKey {
        &self.key
    }

    /// The relying party id.
    pub fn rp_id(&self) -> &str {
        &self.rp_id
    }

    /// The one origin assertions must come from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The credential id the authenticator knows this passkey by.
    pub fn credential_id(&self) -> &[u8] {
        &self.credential_id
    }

    /// The name under which the server keeps this passkey's last counter:
    /// `passkey/<base64url of SHA-256 of the credential id>`.
    pub fn counter_mark(&self) -> String {
        format!(
            "passkey/{}",
            passkey::b64url(&Sha256::digest(&self.credential_id))
        )
    }

    /// The relying party, as [`passkey::verify_assertion`] checks it.
    pub fn relying(&self) -> passkey::Relying<'_> {
        passkey::Relying {
            rp_id: &self.rp_id,
            origin: &self.origin,
        }
    }
}

/// An approver's public credential.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ApproverKey {
    /// An Ed25519 key (`ed25519`).
    Key(PublicKey),
    /// A passkey (`webauthn-es256`, `webauthn-eddsa`).
    Passkey(PasskeyEntry),
    /// An OpenSSH key (`ssh-ed25519`, `sk-ssh-ed25519@openssh.com`), issue #35.
    Ssh(SshKey),
}

impl ApproverKey {
    /// Reads the fields after the name: `ed25519 <key>`, or
    /// `webauthn-es256|webauthn-eddsa <COSE key> rp=<id> cred=<id> [origin=<origin>]`.
    pub fn parse_fields(fields: &[&str]) -> Result<Self, KeyPartError> {
        let malformed = |s: &str| KeyPartError::Malformed(s.to_owned());
        let [algo, key, attrs @ ..] = fields else {
            return Err(malformed("wrong number of fields"));
        };
        if *algo == "ed25519" {
            if !attrs.is_empty() {
                return Err(malformed("wrong number of fields"));
            }
            return PublicKey::parse(key)
                .map(ApproverKey::Key)
                .map_err(KeyPartError::Key);
        }
        if *algo == crate::ssh::WORD_ED25519 || *algo == crate::ssh::WORD_SK_ED25519 {
            if !attrs.is_empty() {
                return Err(malformed(
                    "an OpenSSH key line is `<name> <type> <base64 key>`: remove the comment after the key",
                ));
            }
            return SshKey::parse(algo, key).map(ApproverKey::Ssh);
        }
        let Some(alg) = Algorithm::from_keyring_word(algo) else {
            return Err(malformed(
                "the key type must be ed25519, ssh-ed25519, sk-ssh-ed25519@openssh.com, webauthn-es256 or webauthn-eddsa",
            ));
        };
        let cose = CoseKey::parse(key)
            .map_err(|e| KeyPartError::Malformed(format!("passkey public key: {e}")))?;
        if cose.algorithm() != alg {
            return Err(KeyPartError::Malformed(format!(
                "the COSE key is {}, not {algo}",
                cose.algorithm().keyring_word()
            )));
        }
        let (mut rp, mut origin, mut cred) = (None, None, None);
        for a in attrs {
            let (k, v) = a
                .split_once('=')
                .ok_or_else(|| malformed("passkey attributes are rp=, cred= and origin="))?;
            let slot = match k {
                "rp" => &mut rp,
                "origin" => &mut origin,
                "cred" => &mut cred,
                _ => {
                    return Err(KeyPartError::Malformed(format!(
                        "unknown passkey attribute {k:?}: use rp=, cred= and origin="
                    )))
                }
            };
            if slot.replace(v).is_some() {
                return Err(KeyPartError::Malformed(format!("{k}= appears twice")));
            }
        }
        let rp = rp.ok_or_else(|| malformed("a passkey needs rp=<relying party id>"))?;
        let cred = cred.ok_or_else(|| {
            malformed(
                "a passkey needs cred=<credential id> (as `approval-server enroll` prints it)",
            )
        })?;
        let cred = passkey::from_b64url(cred)
            .map_err(|_| malformed("cred= must be base64url without padding"))?;
        PasskeyEntry::new(cose, rp, origin, cred)
            .map(ApproverKey::Passkey)
            .map_err(KeyPartError::Malformed)
    }

    /// The fields after the name, as a keyring line writes them.
    pub fn to_fields(&self) -> String {
        match self {
            ApproverKey::Key(k) => format!("ed25519 {k}"),
            ApproverKey::Passkey(p) => {
                let mut s = format!(
                    "{} {} rp={} cred={}",
                    p.key.algorithm().keyring_word(),
                    p.key.to_base64(),
                    p.rp_id,
                    passkey::b64url(&p.credential_id)
                );
                if p.origin != format!("https://{}", p.rp_id) {
                    s.push_str(&format!(" origin={}", p.origin));
                }
                s
            }
            ApproverKey::Ssh(k) => k.to_fields(),
        }
    }

    /// Which kind of signature this credential makes.
    pub fn kind(&self) -> SignatureKind {
        match self {
            ApproverKey::Key(_) | ApproverKey::Ssh(_) => SignatureKind::Key,
            ApproverKey::Passkey(_) => SignatureKind::Passkey,
        }
    }

    /// The Ed25519 key, for what only keys can do (signed reads of the approver API).
    pub fn as_key(&self) -> Option<&PublicKey> {
        match self {
            ApproverKey::Key(k) => Some(k),
            ApproverKey::Passkey(_) | ApproverKey::Ssh(_) => None,
        }
    }

    /// The OpenSSH key, if it is one.
    pub fn as_ssh(&self) -> Option<&SshKey> {
        match self {
            ApproverKey::Ssh(k) => Some(k),
            _ => None,
        }
    }

    /// The passkey, if it is one.
    pub fn as_passkey(&self) -> Option<&PasskeyEntry> {
        match self {
            ApproverKey::Key(_) | ApproverKey::Ssh(_) => None,
            ApproverKey::Passkey(p) => Some(p),
        }
    }

    /// What makes two lines the same credential: the Ed25519 key bytes (of an
    /// `ed25519` line or inside an OpenSSH key: the same secret signs all forms), or a
    /// passkey's COSE key (its credential id is checked apart). One credential must
    /// never count as two approvers.
    pub fn identity(&self) -> [u8; 32] {
        match self {
            ApproverKey::Key(k) => k.to_bytes(),
            ApproverKey::Ssh(k) => k.point(),
            ApproverKey::Passkey(p) => {
                let mut h = Sha256::new();
                h.update(b"approval-passkey-identity\n");
                h.update(p.key.cose_bytes());
                h.finalize().into()
            }
        }
    }

    /// `SHA256:...` as `ssh-keygen -l` writes it: of the raw Ed25519 key, or of the
    /// passkey's COSE key.
    pub fn fingerprint(&self) -> String {
        match self {
            ApproverKey::Key(k) => fingerprint::fingerprint(k),
            ApproverKey::Ssh(k) => k.fingerprint(),
            ApproverKey::Passkey(p) => format!(
                "SHA256:{}",
                STANDARD_NO_PAD.encode(Sha256::digest(p.key.cose_bytes()))
            ),
        }
    }
}

impl From<PublicKey> for ApproverKey {
    fn from(k: PublicKey) -> Self {
        ApproverKey::Key(k)
    }
}

impl fmt::Display for ApproverKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_fields())
    }
}

impl Serialize for ApproverKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_fields())
    }
}

impl<'de> Deserialize<'de> for ApproverKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let fields: Vec<&str> = s.split(' ').collect();
        ApproverKey::parse_fields(&fields).map_err(|e| {
            serde::de::Error::custom(match e {
                KeyPartError::Malformed(m) => m,
                KeyPartError::Key(k) => k.to_string(),
            })
        })
    }
}

/// An RP ID is a domain (lowercase letters, digits, `-` and `.`), as WebAuthn uses it.
fn check_rp_id(rp: &str) -> Result<(), String> {
    let ok = !rp.is_empty()
        && rp.len() <= 253
        && rp
            .split('.')
            .all(|l| !l.is_empty() && l.len() <= 63 && !l.starts_with('-') && !l.ends_with('-'))
        && rp
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "rp={rp:?} is not a relying party id: use the lowercase domain the approver page is served on, e.g. rp=approvals.example.com"
        ))
    }
}

/// An origin is `https://host[:port]` (or `http://localhost[:port]`, which browsers
/// treat as secure), whose host is the RP ID or a subdomain of it.
fn check_origin(origin: &str, rp: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "origin={origin:?} {why}: use the scheme, host and port the approver page is served on, e.g. origin=https://{rp}"
        ))
    };
    let (scheme, rest) = match origin.split_once("://") {
        Some(x) => x,
        None => return bad("has no scheme"),
    };
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (rest, None),
    };
    if let Some(p) = port {
        if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return bad("has a bad port");
        }
    }
    match scheme {
        "https" => {}
        "http" if host == "localhost" => {}
        _ => return bad("must be https (http only for localhost)"),
    }
    let host_ok = host == rp || host.ends_with(&format!(".{rp}"));
    if !host_ok || check_rp_id(host).is_err() {
        return bad("must be on the relying party's domain (its host is the rp or a subdomain)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_follow_the_rp() {
        assert!(check_origin("https://approvals.example.com", "approvals.example.com").is_ok());
        assert!(check_origin("https://a.example.com:8443", "example.com").is_ok());
        assert!(check_origin("http://localhost:8080", "localhost").is_ok());
        assert!(check_origin("http://example.com", "example.com").is_err());
        assert!(check_origin("https://evilexample.com", "example.com").is_err());
        assert!(check_origin("https://example.com/", "example.com").is_err());
        assert!(check_origin("https://example.com:x", "example.com").is_err());
        assert!(check_origin("example.com", "example.com").is_err());
        assert!(check_rp_id("Example.com").is_err());
        assert!(check_rp_id("a..b").is_err());
        assert!(check_rp_id("https://a").is_err());
    }
}
