//! Signing in with a passkey (WebAuthn L3 §7.2, "Verifying an Authentication
//! Assertion"): the browser's [`Assertion`] and [`verify_assertion`].
//!
//! What is signed is `authenticatorData || SHA-256(clientDataJSON)`, the bytes as
//! received: every check below reads those same bytes, never a re-encoding.

use super::auth_data::{self, HEADER_LEN};
use super::client_data::{self, Ceremony};
use super::{
    b64url, from_b64url_capped, sha256, CoseKey, PasskeyError, Relying, MAX_CREDENTIAL_ID,
    MAX_FIELD,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A WebAuthn assertion as the browser returns it (`navigator.credentials.get`).
/// On the wire (serde) every field is base64url without padding, unknown fields are
/// refused, and each field is capped ([`MAX_CREDENTIAL_ID`] bytes for the credential
/// ID, [`MAX_FIELD`] for the others) before it is decoded.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assertion {
    /// The credential's ID (`rawId`): which passkey the caller should look up. It is
    /// not signed; [`verify_assertion`] is given the key the caller found for it.
    #[serde(serialize_with = "ser", deserialize_with = "de_credential_id")]
    pub credential_id: Vec<u8>,
    /// `response.authenticatorData`.
    #[serde(serialize_with = "ser", deserialize_with = "de_field")]
    pub authenticator_data: Vec<u8>,
    /// `response.clientDataJSON`.
    #[serde(serialize_with = "ser", deserialize_with = "de_field")]
    pub client_data_json: Vec<u8>,
    /// `response.signature`: DER for ES256, 64 raw bytes for EdDSA.
    #[serde(serialize_with = "ser", deserialize_with = "de_field")]
    pub signature: Vec<u8>,
}

fn ser<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&b64url(bytes))
}

fn de_capped<'de, D: Deserializer<'de>>(
    d: D,
    field: &'static str,
    max: usize,
) -> Result<Vec<u8>, D::Error> {
    let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
    from_b64url_capped(&s, field, max).map_err(serde::de::Error::custom)
}

fn de_credential_id<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    de_capped(d, "credential_id", MAX_CREDENTIAL_ID)
}

fn de_field<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    de_capped(d, "assertion field", MAX_FIELD)
}

/// What a verified assertion says.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Asserted {
    /// The authenticator's signature counter. The caller compares it with the one it
    /// stored: a counter that does not grow (other than 0 and 0) may mean a cloned key.
    pub sign_count: u32,
    /// BE: the credential may be synced between devices.
    pub backup_eligible: bool,
    /// BS: the credential is synced now.
    pub backed_up: bool,
}

/// Full verification of an assertion (WebAuthn L3 §7.2), in this order, each failure
/// its own [`PasskeyError`]:
///
/// 1. sizes ([`PasskeyError::TooLarge`]);
/// 2. clientDataJSON: UTF-8 JSON object; `type` is `webauthn.get`; `challenge` is
///    exactly base64url-without-padding of `expected_challenge`; `origin` is exactly
///    `relying.origin`; `crossOrigin` absent or false, no `topOrigin`;
/// 3. authenticatorData: at least 37 bytes; RP ID hash is SHA-256 of
///    `relying.rp_id`; UP set; UV set; BS only with BE; AT clear (attested
///    credential data belongs to registrations); extension data (ED) one
///    well-formed CBOR map, and nothing else after the 37 bytes;
/// 4. the signature over `authenticatorData || SHA-256(clientDataJSON)` verifies
///    under `key`.
///
/// The caller must find `key` by `a.credential_id` among the approver's passkeys,
/// issue `expected_challenge` once and forget it after this call, and check the
/// counter it returns.
pub fn verify_assertion(
    key: &CoseKey,
    relying: &Relying,
    expected_challenge: &[u8],
    a: &Assertion,
) -> Result<Asserted, PasskeyError> {
    for (field, len, max) in [
        ("credential_id", a.credential_id.len(), MAX_CREDENTIAL_ID),
        ("authenticator_data", a.authenticator_data.len(), MAX_FIELD),
        ("client_data_json", a.client_data_json.len(), MAX_FIELD),
        ("signature", a.signature.len(), MAX_FIELD),
    ] {
        if len > max {
            return Err(PasskeyError::TooLarge { field, max });
        }
    }
    client_data::check(
        &a.client_data_json,
        Ceremony::Get,
        expected_challenge,
        relying,
    )?;
    let header = auth_data::check_header(&a.authenticator_data, relying)?;
    if header.attested() {
        return Err(PasskeyError::AttestedDataInAssertion);
    }
    let rest = a.authenticator_data.get(HEADER_LEN..).unwrap_or_default();
    auth_data::check_extensions(rest, header)?;
    let mut signed = Vec::with_capacity(a.authenticator_data.len() + 32);
    signed.extend_from_slice(&a.authenticator_data);
    signed.extend_from_slice(&sha256(&a.client_data_json));
    key.verify(&signed, &a.signature)?;
    Ok(Asserted {
        sign_count: header.sign_count,
        backup_eligible: header.backup_eligible(),
        backed_up: header.backed_up(),
    })
}
