//! The W3C WebAuthn WebDriver extension (WebAuthn Level 3 §11, "Automation"):
//! a virtual authenticator inside the browser, so a test can make and use real
//! passkeys (real P-256 keys, real authenticator data, real signatures) with no
//! device and no human. chromedriver implements it.
//!
//! Included by `approve_page.rs` after `support/browser.rs` (`mod browser;`), as
//! another `impl Browser` block: the generic harness knows nothing of passkeys.
#![allow(dead_code)]

use crate::browser::Browser;
use anyhow::{Context, Result};
use serde_json::{json, Value};

/// How a virtual authenticator behaves.
#[derive(Clone, Copy, Debug)]
pub struct Authenticator {
    /// Whether it can keep discoverable (resident) credentials.
    pub resident_key: bool,
    /// Whether it can verify the user (PIN, biometrics).
    pub user_verification: bool,
    /// Whether that verification succeeds (when false, it cannot verify the user).
    pub user_verified: bool,
}

impl Default for Authenticator {
    /// A platform authenticator (Touch ID, Windows Hello, a phone) whose user
    /// verification succeeds.
    fn default() -> Self {
        Self {
            resident_key: true,
            user_verification: true,
            user_verified: true,
        }
    }
}

impl Browser {
    /// Adds a CTAP2 authenticator on the "internal" transport (a platform
    /// authenticator); returns its id.
    pub async fn add_authenticator(&self, a: Authenticator) -> Result<String> {
        let v = self
            .cmd(
                reqwest::Method::POST,
                "/webauthn/authenticator",
                Some(json!({
                    "protocol": "ctap2",
                    "transport": "internal",
                    "hasResidentKey": a.resident_key,
                    "hasUserVerification": a.user_verification,
                    "isUserVerified": a.user_verified,
                })),
            )
            .await?;
        v.as_str()
            .map(str::to_owned)
            .with_context(|| format!("no authenticator id: {v}"))
    }

    /// Removes an authenticator (its credentials go with it).
    pub async fn remove_authenticator(&self, id: &str) -> Result<()> {
        self.cmd(
            reqwest::Method::DELETE,
            &format!("/webauthn/authenticator/{id}"),
            None,
        )
        .await
        .map(|_| ())
    }

    /// The credentials an authenticator holds, as the extension describes them
    /// (`credentialId`, `rpId`, `privateKey` as base64url PKCS#8, `signCount`, ...).
    pub async fn credentials(&self, id: &str) -> Result<Vec<Value>> {
        let v = self
            .cmd(
                reqwest::Method::GET,
                &format!("/webauthn/authenticator/{id}/credentials"),
                None,
            )
            .await?;
        v.as_array()
            .cloned()
            .with_context(|| format!("credentials are not a list: {v}"))
    }

    /// Puts a credential (as [`Browser::credentials`] returned it, maybe from
    /// another browser) into an authenticator: the same passkey on another device.
    pub async fn add_credential(&self, id: &str, credential: &Value) -> Result<()> {
        let mut c = credential.clone();
        if let Some(o) = c.as_object_mut() {
            // What "Get Credentials" returns beyond what "Add Credential" takes.
            o.retain(|k, _| {
                matches!(
                    k.as_str(),
                    "credentialId"
                        | "isResidentCredential"
                        | "rpId"
                        | "privateKey"
                        | "userHandle"
                        | "signCount"
                        | "largeBlob"
                )
            });
            o.retain(|_, v| !v.is_null());
        }
        self.cmd(
            reqwest::Method::POST,
            &format!("/webauthn/authenticator/{id}/credential"),
            Some(c),
        )
        .await
        .map(|_| ())
    }

    /// Makes the authenticator's user verification succeed or fail from now on.
    pub async fn set_user_verified(&self, id: &str, verified: bool) -> Result<()> {
        self.cmd(
            reqwest::Method::POST,
            &format!("/webauthn/authenticator/{id}/uv"),
            Some(json!({"isUserVerified": verified})),
        )
        .await
        .map(|_| ())
    }
}
