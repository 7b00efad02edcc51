//! Passkeys (WebAuthn): checking what a browser hands back, without I/O.
//!
//! An approver may hold a passkey instead of (or beside) an Ed25519 key file, so the
//! server must decide, from bytes a browser relays, whether that approver's
//! authenticator really signed our challenge for our site. This module is that
//! decision, written on small primitives (`p256`, `ed25519-dalek`, `sha2`, `ciborium`)
//! rather than a WebAuthn framework, so that every check is here to read, in the
//! order WebAuthn Level 3 lists it:
//!
//! - [`verify_assertion`] (§7.2): a sign-in (`navigator.credentials.get`) with a key
//!   we already hold;
//! - [`verify_registration`] (§7.1): enrolment (`navigator.credentials.create`), which
//!   yields the key to keep. Attestation statements are read, never trusted: we keep
//!   the key the authenticator states and nothing about its make.
//!
//! The pieces: [`cose`] (the key), `client_data` (the browser's JSON), `auth_data`
//! (the authenticator's bytes), [`assertion`] and [`registration`]. As everywhere in
//! core, there is no clock and no storage: the caller supplies the challenge it
//! issued (and keeps it single-use) and compares the sign count with the one it
//! stored.

pub mod assertion;
mod auth_data;
mod client_data;
pub mod cose;
pub mod registration;
#[cfg(test)]
mod tests;

pub use assertion::{verify_assertion, Asserted, Assertion};
pub use cose::CoseKey;
pub use registration::{verify_registration, Registration};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use thiserror::Error;

/// The signature algorithms a passkey may use here: the two every current
/// authenticator offers that are also small, constant-size and well reviewed.
/// RS256 and the larger curves are refused ([`PasskeyError::UnsupportedAlgorithm`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Algorithm {
    /// ECDSA over P-256 with SHA-256 (COSE alg -7): what nearly every authenticator uses.
    Es256,
    /// Ed25519 (COSE alg -8), offered by some security keys.
    EdDsa,
}

impl Algorithm {
    /// The COSE algorithm identifier (RFC 9053).
    pub fn cose_alg(self) -> i64 {
        match self {
            Algorithm::Es256 => -7,
            Algorithm::EdDsa => -8,
        }
    }

    /// The word a keyring writes before a passkey's key, so that a key file says which
    /// verifier applies without parsing the key first.
    pub fn keyring_word(self) -> &'static str {
        match self {
            Algorithm::Es256 => "webauthn-es256",
            Algorithm::EdDsa => "webauthn-eddsa",
        }
    }

    /// The algorithm a keyring word names, if any (exact, lowercase).
    pub fn from_keyring_word(s: &str) -> Option<Self> {
        match s {
            "webauthn-es256" => Some(Algorithm::Es256),
            "webauthn-eddsa" => Some(Algorithm::EdDsa),
            _ => None,
        }
    }
}

/// Where a credential may be used.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Relying<'a> {
    /// The RP ID (a registrable domain, e.g. `gate.example.org`) whose SHA-256 must
    /// open the authenticator data: the authenticator scopes credentials by it.
    pub rp_id: &'a str,
    /// The exact origin (`https://gate.example.org`, port included when not default)
    /// that clientDataJSON must name: the browser writes the page's origin there.
    pub origin: &'a str,
}

/// The most bytes a credential ID may have (WebAuthn caps it at 1023; one spare).
pub const MAX_CREDENTIAL_ID: usize = 1024;
/// The most bytes authenticatorData, clientDataJSON or a signature may have. Real
/// ones are a few hundred at most; the cap bounds the work a stranger can ask for.
pub const MAX_FIELD: usize = 4096;
/// The most bytes an attestation object may have: certificate chains (packed, TPM)
/// take a few kilobytes.
pub const MAX_ATTESTATION_OBJECT: usize = 16384;

/// Why a passkey, an assertion or a registration was refused. Each message says what
/// was wrong and what to do, because an approver reads it in a browser.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PasskeyError {
    /// Not the expected text encoding (base64, base64url, UTF-8).
    #[error("bad encoding: {0}")]
    Encoding(&'static str),
    /// A field is longer than we accept.
    #[error("{field} is too large: at most {max} bytes are accepted")]
    TooLarge {
        /// Which field.
        field: &'static str,
        /// The cap, in decoded bytes.
        max: usize,
    },
    /// A COSE key was refused.
    #[error("passkey public key refused: {0}")]
    Cose(String),
    /// A COSE key names an algorithm we do not verify.
    #[error("passkey algorithm {0} is not supported: use a passkey with ES256 (-7) or EdDSA (-8)")]
    UnsupportedAlgorithm(i64),
    /// Malformed CBOR (attestation object or extensions).
    #[error("malformed CBOR: {0}")]
    Cbor(String),
    /// clientDataJSON is not a JSON object of the expected shape.
    #[error("clientDataJSON refused: {0}")]
    ClientData(String),
    /// clientDataJSON's `type` is not the ceremony being checked.
    #[error("clientDataJSON type is {found:?}, expected {expected:?}: the browser answered a different ceremony")]
    ClientDataType {
        /// What we wanted.
        expected: &'static str,
        /// What the browser wrote.
        found: String,
    },
    /// clientDataJSON's `challenge` is not the one we issued.
    #[error("challenge does not match the one issued: start the sign-in again")]
    Challenge,
    /// clientDataJSON's `origin` is not ours.
    #[error(
        "origin is {found:?}, expected {expected:?}: use the passkey from the gate's own page"
    )]
    Origin {
        /// Our origin.
        expected: String,
        /// The origin the browser wrote.
        found: String,
    },
    /// The ceremony ran in a frame of another site (`crossOrigin` true or `topOrigin`).
    #[error("passkey used from inside another site's frame: open the gate's page directly")]
    CrossOrigin,
    /// authenticatorData is malformed.
    #[error("authenticator data refused: {0}")]
    AuthenticatorData(&'static str),
    /// authenticatorData is for another RP ID.
    #[error("authenticator data is for another site (RP ID hash differs): use a passkey made for this gate")]
    RpIdHash,
    /// The UP flag is clear.
    #[error("user presence not confirmed: touch the authenticator when asked")]
    UserNotPresent,
    /// The UV flag is clear: an approval needs the PIN or biometric, not a touch alone.
    #[error("user not verified: the authenticator must check a PIN or biometric (userVerification \"required\")")]
    UserNotVerified,
    /// The BS flag is set without BE.
    #[error("authenticator data claims a backed-up credential that is not backup-eligible")]
    BackupState,
    /// An assertion carries attested credential data (AT flag): only registrations may.
    #[error(
        "assertion carries attested credential data (AT flag): that belongs to a registration only"
    )]
    AttestedDataInAssertion,
    /// A registration lacks attested credential data.
    #[error("registration carries no credential (AT flag clear): create the passkey again")]
    NoAttestedData,
    /// An attestation object is malformed.
    #[error("attestation object refused: {0}")]
    Attestation(&'static str),
    /// The attestation format is not one we read.
    #[error("attestation format {0:?} is not accepted: request attestation \"none\"")]
    AttestationFormat(String),
    /// The signature does not verify.
    #[error("passkey signature does not verify for this key and challenge")]
    BadSignature,
}

/// base64url without padding, as WebAuthn writes binary in JSON.
pub fn b64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes base64url without padding, refusing padding, other alphabets and
/// non-zero trailing bits, so one byte string has exactly one spelling.
pub fn from_b64url(s: &str) -> Result<Vec<u8>, PasskeyError> {
    URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| PasskeyError::Encoding("expected base64url without padding"))
}

/// Decodes base64url of at most `max` bytes, checking the length before decoding.
fn from_b64url_capped(s: &str, field: &'static str, max: usize) -> Result<Vec<u8>, PasskeyError> {
    if s.len() > max.div_ceil(3) * 4 {
        return Err(PasskeyError::TooLarge { field, max });
    }
    let bytes = from_b64url(s)?;
    if bytes.len() > max {
        return Err(PasskeyError::TooLarge { field, max });
    }
    Ok(bytes)
}

/// A byte string's SHA-256.
fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes).into()
}
