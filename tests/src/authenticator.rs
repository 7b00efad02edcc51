//! A software passkey authenticator, for tests that decide with a passkey without a
//! browser: it makes registrations (attestation `none`) and assertions exactly as
//! the WebAuthn wire has them (authenticatorData, clientDataJSON, a signature over
//! `authenticatorData || SHA-256(clientDataJSON)`), with a signature counter that
//! goes up on each assertion. Flags and origins are the caller's, so a test can make
//! each thing the server must refuse. The browser tests use Chromium's virtual
//! authenticator instead; this one is for the raw HTTP tests.

use approval_core::passkey::{b64url, Assertion};
use ciborium::value::{Integer, Value as Cbor};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicU32, Ordering};

/// authenticatorData flags.
pub const UP: u8 = 0x01;
/// User verified.
pub const UV: u8 = 0x04;
const AT: u8 = 0x40;

enum Key {
    Es256(p256::ecdsa::SigningKey),
    EdDsa(ed25519_dalek::SigningKey),
}

/// One credential on a software authenticator.
pub struct SoftPasskey {
    key: Key,
    /// The credential id.
    pub credential_id: Vec<u8>,
    counter: AtomicU32,
}

fn int(i: i64) -> Cbor {
    Cbor::Integer(Integer::from(i))
}

fn cbor(v: &Cbor) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = ciborium::into_writer(v, &mut out);
    out
}

impl SoftPasskey {
    /// An ES256 credential from a seed byte (deterministic, distinct per seed).
    pub fn es256(seed: u8) -> Self {
        let mut scalar = [seed; 32];
        scalar[0] = 0x01;
        let key = p256::ecdsa::SigningKey::from_slice(&scalar).expect("a valid scalar");
        Self::new(Key::Es256(key), seed)
    }

    /// An EdDSA (Ed25519) credential from a seed byte.
    pub fn eddsa(seed: u8) -> Self {
        Self::new(
            Key::EdDsa(ed25519_dalek::SigningKey::from_bytes(&[seed; 32])),
            seed,
        )
    }

    fn new(key: Key, seed: u8) -> Self {
        Self {
            key,
            credential_id: format!("soft-credential-{seed}").into_bytes(),
            counter: AtomicU32::new(0),
        }
    }

    /// The COSE_Key of the public key.
    pub fn cose(&self) -> Vec<u8> {
        match &self.key {
            Key::Es256(sk) => {
                let p = sk.verifying_key().to_encoded_point(false);
                cbor(&Cbor::Map(vec![
                    (int(1), int(2)),
                    (int(3), int(-7)),
                    (int(-1), int(1)),
                    (int(-2), Cbor::Bytes(p.x().expect("x").to_vec())),
                    (int(-3), Cbor::Bytes(p.y().expect("y").to_vec())),
                ]))
            }
            Key::EdDsa(sk) => cbor(&Cbor::Map(vec![
                (int(1), int(1)),
                (int(3), int(-8)),
                (int(-1), int(6)),
                (int(-2), Cbor::Bytes(sk.verifying_key().to_bytes().to_vec())),
            ])),
        }
    }

    fn sign(&self, msg: &[u8]) -> Vec<u8> {
        match &self.key {
            Key::Es256(sk) => {
                use p256::ecdsa::signature::Signer;
                let s: p256::ecdsa::Signature = sk.sign(msg);
                s.to_der().as_bytes().to_vec()
            }
            Key::EdDsa(sk) => {
                use ed25519_dalek::Signer;
                sk.sign(msg).to_bytes().to_vec()
            }
        }
    }

    /// The keyring line this credential's enrolment would produce.
    pub fn keyring_line(&self, name: &str, rp_id: &str, origin: &str) -> String {
        let word = match self.key {
            Key::Es256(_) => "webauthn-es256",
            Key::EdDsa(_) => "webauthn-eddsa",
        };
        use base64::Engine;
        format!(
            "{name} {word} {} rp={rp_id} cred={} origin={origin}",
            base64::engine::general_purpose::STANDARD.encode(self.cose()),
            b64url(&self.credential_id)
        )
    }

    fn client_data(ty: &str, challenge: &[u8], origin: &str) -> Vec<u8> {
        json!({"type": ty, "challenge": b64url(challenge), "origin": origin, "crossOrigin": false})
            .to_string()
            .into_bytes()
    }

    fn auth_data(rp_id: &str, flags: u8, counter: u32) -> Vec<u8> {
        let mut out = Sha256::digest(rp_id.as_bytes()).to_vec();
        out.push(flags);
        out.extend_from_slice(&counter.to_be_bytes());
        out
    }

    /// `navigator.credentials.create`'s answer, as the enrolment page posts it.
    pub fn register(&self, rp_id: &str, origin: &str, challenge: &[u8]) -> Value {
        let mut auth = Self::auth_data(rp_id, UP | UV | AT, 0);
        auth.extend_from_slice(&[0u8; 16]);
        auth.extend_from_slice(&(self.credential_id.len() as u16).to_be_bytes());
        auth.extend_from_slice(&self.credential_id);
        auth.extend_from_slice(&self.cose());
        let att = cbor(&Cbor::Map(vec![
            (Cbor::Text("fmt".into()), Cbor::Text("none".into())),
            (Cbor::Text("attStmt".into()), Cbor::Map(vec![])),
            (Cbor::Text("authData".into()), Cbor::Bytes(auth)),
        ]));
        json!({
            "credential_id": b64url(&self.credential_id),
            "attestation_object": b64url(&att),
            "client_data_json": b64url(&Self::client_data("webauthn.create", challenge, origin)),
        })
    }

    /// An assertion over `challenge` with `flags`, the counter one higher than the last.
    pub fn assert(&self, rp_id: &str, origin: &str, challenge: &[u8], flags: u8) -> Assertion {
        let n = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
        self.assert_with_counter(rp_id, origin, challenge, flags, n)
    }

    /// An assertion with a counter of the caller's choosing (to replay a lower one).
    pub fn assert_with_counter(
        &self,
        rp_id: &str,
        origin: &str,
        challenge: &[u8],
        flags: u8,
        counter: u32,
    ) -> Assertion {
        let authenticator_data = Self::auth_data(rp_id, flags, counter);
        let client_data_json = Self::client_data("webauthn.get", challenge, origin);
        let msg = [
            authenticator_data.as_slice(),
            Sha256::digest(&client_data_json).as_slice(),
        ]
        .concat();
        Assertion {
            credential_id: self.credential_id.clone(),
            signature: self.sign(&msg),
            authenticator_data,
            client_data_json,
        }
    }
}
