//! Enrolling a passkey (WebAuthn L3 §7.1, "Registering a New Credential"):
//! [`verify_registration`] reads the key the authenticator made, after checking that
//! the ceremony was ours (challenge, origin, RP ID) and that the holder was verified.
//!
//! Attestation is not trusted: which make of authenticator holds the key is not
//! something this gate decides on, so statements are read as opaque data and the
//! key is taken for what the authenticator says it is (WebAuthn's "None" trust, as
//! §7.1 step 23 allows). Formats accepted: `none` (with an empty statement, what
//! browsers send by default) and `packed` (self or x5c: what security keys send
//! when asked for attestation; its statement is not verified). Other formats are
//! refused by name, so an enrolment page that asks for `attestation: "none"` never
//! meets them.

use super::auth_data::{self, HEADER_LEN};
use super::client_data::{self, Ceremony};
use super::cose::read_cbor;
use super::{CoseKey, PasskeyError, Relying, MAX_ATTESTATION_OBJECT};
use ciborium::value::Value;

/// The longest credential ID WebAuthn allows (§5.1, credentialIdLength).
const MAX_CREDENTIAL_ID_LEN: usize = 1023;

/// A new credential, ready to be kept for an approver.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Registration {
    /// The credential ID: what the browser will name in later assertions.
    pub credential_id: Vec<u8>,
    /// The credential's public key.
    pub key: CoseKey,
    /// The signature counter at creation (keep it, to compare with later ones).
    pub sign_count: u32,
}

/// Verifies a registration (`navigator.credentials.create`), in this order:
///
/// 1. sizes: the attestation object at most [`MAX_ATTESTATION_OBJECT`] bytes,
///    clientDataJSON at most [`super::MAX_FIELD`];
/// 2. clientDataJSON: `type` is `webauthn.create`, then challenge, origin and
///    cross-origin as for an assertion;
/// 3. the attestation object: one CBOR map of exactly `fmt`, `attStmt`, `authData`,
///    nothing after it; `fmt` `none` (empty `attStmt`) or `packed` (not verified);
/// 4. authData: RP ID hash, UP, UV, BS only with BE, AT set; the attested credential
///    data (AAGUID 16 bytes, credential ID length as u16 big-endian, 1 to 1023,
///    the ID, a COSE key that [`CoseKey::from_cose`] accepts: ES256 or EdDSA);
///    then extension data only if ED is set, and nothing else.
pub fn verify_registration(
    relying: &Relying,
    expected_challenge: &[u8],
    attestation_object: &[u8],
    client_data_json: &[u8],
) -> Result<Registration, PasskeyError> {
    if attestation_object.len() > MAX_ATTESTATION_OBJECT {
        return Err(PasskeyError::TooLarge {
            field: "attestation object",
            max: MAX_ATTESTATION_OBJECT,
        });
    }
    client_data::check(
        client_data_json,
        Ceremony::Create,
        expected_challenge,
        relying,
    )?;
    let auth_data = read_attestation_object(attestation_object)?;
    let header = auth_data::check_header(&auth_data, relying)?;
    if !header.attested() {
        return Err(PasskeyError::NoAttestedData);
    }
    let rest = auth_data.get(HEADER_LEN..).unwrap_or_default();
    let Some((_aaguid, rest)) = rest.split_first_chunk::<16>() else {
        return Err(PasskeyError::AuthenticatorData(
            "attested credential data is cut short (AAGUID)",
        ));
    };
    let Some((len, rest)) = rest.split_first_chunk::<2>() else {
        return Err(PasskeyError::AuthenticatorData(
            "attested credential data is cut short (credential ID length)",
        ));
    };
    let len = usize::from(u16::from_be_bytes(*len));
    if len == 0 || len > MAX_CREDENTIAL_ID_LEN {
        return Err(PasskeyError::AuthenticatorData(
            "credential ID length must be 1 to 1023 bytes",
        ));
    }
    let Some((credential_id, rest)) = rest.split_at_checked(len) else {
        return Err(PasskeyError::AuthenticatorData(
            "attested credential data is cut short (credential ID)",
        ));
    };
    let (_, key_len) = read_cbor(rest).map_err(|e| PasskeyError::Cose(e.to_string()))?;
    let (key_bytes, rest) = rest.split_at(key_len);
    let key = CoseKey::from_cose(key_bytes)?;
    auth_data::check_extensions(rest, header)?;
    Ok(Registration {
        credential_id: credential_id.to_vec(),
        key,
        sign_count: header.sign_count,
    })
}

/// The attestation object's `authData`, after checking its shape and format.
fn read_attestation_object(bytes: &[u8]) -> Result<Vec<u8>, PasskeyError> {
    let (value, used) = read_cbor(bytes)?;
    if used != bytes.len() {
        return Err(PasskeyError::Attestation(
            "bytes follow the attestation object",
        ));
    }
    let Value::Map(entries) = value else {
        return Err(PasskeyError::Attestation("not a CBOR map"));
    };
    let (mut fmt, mut stmt, mut auth) = (None, None, None);
    for (k, v) in entries {
        let slot = match k.as_text() {
            Some("fmt") => &mut fmt,
            Some("attStmt") => &mut stmt,
            Some("authData") => &mut auth,
            _ => {
                return Err(PasskeyError::Attestation(
                    "unexpected member: only fmt, attStmt and authData belong",
                ))
            }
        };
        if slot.replace(v).is_some() {
            return Err(PasskeyError::Attestation("a member appears twice"));
        }
    }
    let Some(Value::Text(fmt)) = fmt else {
        return Err(PasskeyError::Attestation("fmt missing or not text"));
    };
    let Some(Value::Map(stmt)) = stmt else {
        return Err(PasskeyError::Attestation("attStmt missing or not a map"));
    };
    match fmt.as_str() {
        "none" if !stmt.is_empty() => {
            return Err(PasskeyError::Attestation(
                "fmt none must have an empty attStmt",
            ))
        }
        "none" | "packed" => {}
        _ => return Err(PasskeyError::AttestationFormat(fmt)),
    }
    let Some(Value::Bytes(auth)) = auth else {
        return Err(PasskeyError::Attestation(
            "authData missing or not a byte string",
        ));
    };
    Ok(auth)
}
