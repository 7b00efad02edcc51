//! authenticatorData (WebAuthn L3 §6.1): what the authenticator itself says, signed.
//! The first 37 bytes are fixed: the SHA-256 of the RP ID the credential belongs to,
//! a flags byte, and a 32-bit signature counter. Then, if flagged, the attested
//! credential data (registrations only) and a CBOR map of extension outputs.
//!
//! Extensions (ED flag) are tolerated when they are one well-formed CBOR map and
//! nothing follows it; their contents are not read, because we request none. Any
//! byte past what the flags announce is refused, so the signed bytes hold nothing
//! we did not look at.

use super::cose::read_cbor;
use super::{sha256, PasskeyError, Relying};
use ciborium::value::Value;

/// The fixed part's length: rpIdHash (32), flags (1), signCount (4).
pub(super) const HEADER_LEN: usize = 37;

/// User present: someone touched the authenticator.
const UP: u8 = 0x01;
/// User verified: a PIN or biometric was checked.
const UV: u8 = 0x04;
/// Backup eligible: the credential may be synced (a multi-device passkey).
const BE: u8 = 0x08;
/// Backed up: the credential is synced now.
const BS: u8 = 0x10;
/// Attested credential data follows.
const AT: u8 = 0x40;
/// Extension data follows.
const ED: u8 = 0x80;

/// The checked fixed part of authenticatorData.
#[derive(Clone, Copy, Debug)]
pub(super) struct Header {
    /// The flags byte.
    flags: u8,
    /// The signature counter (0 when the authenticator keeps none).
    pub(super) sign_count: u32,
}

impl Header {
    pub(super) fn backup_eligible(self) -> bool {
        self.flags & BE != 0
    }
    pub(super) fn backed_up(self) -> bool {
        self.flags & BS != 0
    }
    pub(super) fn attested(self) -> bool {
        self.flags & AT != 0
    }
    pub(super) fn extensions(self) -> bool {
        self.flags & ED != 0
    }
}

/// Checks the fixed part, in the specification's order: length, RP ID hash, user
/// present, user verified (always required: an approval must be the holder's, not
/// whoever touches the key), and BS only with BE.
pub(super) fn check_header(auth_data: &[u8], relying: &Relying) -> Result<Header, PasskeyError> {
    let Some((head, _)) = auth_data.split_first_chunk::<HEADER_LEN>() else {
        return Err(PasskeyError::AuthenticatorData(
            "shorter than 37 bytes (RP ID hash, flags, counter)",
        ));
    };
    if head[..32] != sha256(relying.rp_id.as_bytes()) {
        return Err(PasskeyError::RpIdHash);
    }
    let flags = head[32];
    let sign_count = u32::from_be_bytes([head[33], head[34], head[35], head[36]]);
    if flags & UP == 0 {
        return Err(PasskeyError::UserNotPresent);
    }
    if flags & UV == 0 {
        return Err(PasskeyError::UserNotVerified);
    }
    if flags & BS != 0 && flags & BE == 0 {
        return Err(PasskeyError::BackupState);
    }
    Ok(Header { flags, sign_count })
}

/// Checks what follows the attested credential data (or the header): with ED, one
/// CBOR map and nothing after it; without ED, nothing at all.
pub(super) fn check_extensions(rest: &[u8], header: Header) -> Result<(), PasskeyError> {
    if !header.extensions() {
        return if rest.is_empty() {
            Ok(())
        } else {
            Err(PasskeyError::AuthenticatorData(
                "bytes follow the data the flags announce",
            ))
        };
    }
    let (value, used) = read_cbor(rest).map_err(|_| {
        PasskeyError::AuthenticatorData("extension data (ED flag) is not well-formed CBOR")
    })?;
    if !matches!(value, Value::Map(_)) {
        return Err(PasskeyError::AuthenticatorData(
            "extension data (ED flag) is not a CBOR map",
        ));
    }
    if used != rest.len() {
        return Err(PasskeyError::AuthenticatorData(
            "bytes follow the extension data",
        ));
    }
    Ok(())
}
