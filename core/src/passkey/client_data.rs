//! clientDataJSON (WebAuthn L3 §5.8.1): the browser's account of the ceremony, which
//! the authenticator signs by hash. It is the only place the origin and the
//! challenge appear, so it is where phishing (another origin) and replay (another
//! challenge) are caught. Parsed with core's exact JSON parser, so a repeated key
//! (two `type`s, two `origin`s) is refused instead of silently taking one.

use super::{b64url, PasskeyError, Relying, MAX_FIELD};
use crate::json;
use serde_json::Value;

/// The ceremony a clientDataJSON must describe.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Ceremony {
    /// `navigator.credentials.get`: an assertion.
    Get,
    /// `navigator.credentials.create`: a registration.
    Create,
}

impl Ceremony {
    fn type_word(self) -> &'static str {
        match self {
            Ceremony::Get => "webauthn.get",
            Ceremony::Create => "webauthn.create",
        }
    }
}

/// Checks clientDataJSON, in the specification's order: a UTF-8 JSON object; `type`;
/// `challenge` (base64url without padding of exactly the bytes we issued); `origin`
/// (exactly ours); `crossOrigin` absent or false and no `topOrigin` (a passkey
/// used inside another site's frame is refused: approvals happen on the gate's page).
/// Other members (`tokenBinding`, `extraData`, future ones) are ignored, as the
/// specification asks.
pub(super) fn check(
    client_data_json: &[u8],
    ceremony: Ceremony,
    expected_challenge: &[u8],
    relying: &Relying,
) -> Result<(), PasskeyError> {
    if client_data_json.len() > MAX_FIELD {
        return Err(PasskeyError::TooLarge {
            field: "clientDataJSON",
            max: MAX_FIELD,
        });
    }
    let text = std::str::from_utf8(client_data_json)
        .map_err(|_| PasskeyError::Encoding("clientDataJSON is not UTF-8"))?;
    let value = json::parse_exact(text).map_err(|e| PasskeyError::ClientData(e.to_string()))?;
    let Value::Object(members) = value else {
        return Err(PasskeyError::ClientData("not a JSON object".into()));
    };
    let string = |name: &str| -> Result<&str, PasskeyError> {
        match members.get(name) {
            Some(Value::String(s)) => Ok(s),
            Some(_) => Err(PasskeyError::ClientData(format!("{name} is not a string"))),
            None => Err(PasskeyError::ClientData(format!("{name} is missing"))),
        }
    };
    let found = string("type")?;
    if found != ceremony.type_word() {
        return Err(PasskeyError::ClientDataType {
            expected: ceremony.type_word(),
            found: found.to_string(),
        });
    }
    if string("challenge")? != b64url(expected_challenge) {
        return Err(PasskeyError::Challenge);
    }
    let origin = string("origin")?;
    if origin != relying.origin {
        return Err(PasskeyError::Origin {
            expected: relying.origin.to_string(),
            found: origin.to_string(),
        });
    }
    match members.get("crossOrigin") {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => return Err(PasskeyError::CrossOrigin),
        Some(_) => {
            return Err(PasskeyError::ClientData(
                "crossOrigin is not a boolean".into(),
            ))
        }
    }
    if members.contains_key("topOrigin") {
        return Err(PasskeyError::CrossOrigin);
    }
    Ok(())
}
