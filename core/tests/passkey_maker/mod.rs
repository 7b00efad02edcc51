//! Passkey ceremonies made in the tests: an ES256 or Ed25519 authenticator with a
//! fixed key, signing whatever flags, client data and extensions a test wants, so a
//! check can be shown to refuse on its own (the signature being valid).
#![allow(dead_code)]

use approval_core::passkey::{
    b64url, verify_assertion, Asserted, Assertion, CoseKey, PasskeyError, Relying,
};
use ciborium::value::{Integer, Value as Cbor};
use sha2::{Digest, Sha256};

/// authenticatorData flags (WebAuthn L3 §6.1).
pub const UP: u8 = 0x01;
pub const UV: u8 = 0x04;
pub const BE: u8 = 0x08;
pub const BS: u8 = 0x10;
pub const AT: u8 = 0x40;
pub const ED: u8 = 0x80;

pub const RP_ID: &str = "gate.example.org";
pub const ORIGIN: &str = "https://gate.example.org";
pub const CHALLENGE: &[u8] = b"approval-core passkey test challenge";
pub const CREDENTIAL_ID: &[u8] = b"test credential";

pub fn relying() -> Relying<'static> {
    Relying {
        rp_id: RP_ID,
        origin: ORIGIN,
    }
}

pub fn int(i: i64) -> Cbor {
    Cbor::Integer(Integer::from(i))
}

pub fn encode(v: &Cbor) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(v, &mut out).expect("encodes");
    out
}

enum Signer {
    Es(p256::ecdsa::SigningKey),
    Ed(ed25519_dalek::SigningKey),
}

/// A test authenticator.
pub struct Maker {
    signer: Signer,
    /// Its COSE key bytes.
    pub cose: Vec<u8>,
    /// Its key, parsed.
    pub key: CoseKey,
}

impl Maker {
    pub fn es256() -> Self {
        let sk = p256::ecdsa::SigningKey::from_slice(&[0x11; 32]).expect("scalar");
        let point = sk.verifying_key().to_encoded_point(false);
        let cose = encode(&Cbor::Map(vec![
            (int(1), int(2)),
            (int(3), int(-7)),
            (int(-1), int(1)),
            (int(-2), Cbor::Bytes(point.x().expect("x").to_vec())),
            (int(-3), Cbor::Bytes(point.y().expect("y").to_vec())),
        ]));
        let key = CoseKey::from_cose(&cose).expect("ES256 key");
        Self {
            signer: Signer::Es(sk),
            cose,
            key,
        }
    }

    pub fn eddsa() -> Self {
        let sk = ed25519_dalek::SigningKey::from_bytes(&[0x22; 32]);
        let cose = encode(&Cbor::Map(vec![
            (int(1), int(1)),
            (int(3), int(-8)),
            (int(-1), int(6)),
            (int(-2), Cbor::Bytes(sk.verifying_key().to_bytes().to_vec())),
        ]));
        let key = CoseKey::from_cose(&cose).expect("Ed25519 key");
        Self {
            signer: Signer::Ed(sk),
            cose,
            key,
        }
    }

    pub fn both() -> [Maker; 2] {
        [Self::es256(), Self::eddsa()]
    }

    /// The authenticator's signature: DER for ES256, raw for Ed25519.
    pub fn sign(&self, msg: &[u8]) -> Vec<u8> {
        match &self.signer {
            Signer::Es(sk) => {
                use p256::ecdsa::signature::Signer as _;
                let sig: p256::ecdsa::Signature = sk.sign(msg);
                sig.to_der().as_bytes().to_vec()
            }
            Signer::Ed(sk) => {
                use ed25519_dalek::Signer as _;
                sk.sign(msg).to_bytes().to_vec()
            }
        }
    }

    /// clientDataJSON for our challenge and origin, with `extra` members appended
    /// (each starting with a comma).
    pub fn client_data(&self, ty: &str, extra: &str) -> Vec<u8> {
        format!(
            r#"{{"type":"{ty}","challenge":"{}","origin":"{ORIGIN}"{extra}}}"#,
            b64url(CHALLENGE)
        )
        .into_bytes()
    }

    /// authenticatorData for our RP ID: header with `flags` and counter 7, then `tail`.
    pub fn auth_data(flags: u8, tail: &[u8]) -> Vec<u8> {
        let mut out = Sha256::digest(RP_ID.as_bytes()).to_vec();
        out.push(flags);
        out.extend_from_slice(&7u32.to_be_bytes());
        out.extend_from_slice(tail);
        out
    }

    pub fn sign_assertion(
        &self,
        authenticator_data: Vec<u8>,
        client_data_json: Vec<u8>,
    ) -> Assertion {
        let msg = [
            authenticator_data.as_slice(),
            &Sha256::digest(&client_data_json),
        ]
        .concat();
        Assertion {
            credential_id: CREDENTIAL_ID.to_vec(),
            signature: self.sign(&msg),
            authenticator_data,
            client_data_json,
        }
    }

    pub fn assertion(&self, ty: &str, flags: u8, tail: &[u8]) -> Assertion {
        self.assertion_with_client_data(
            &self.client_data(ty, r#","crossOrigin":false"#),
            flags,
            tail,
        )
    }

    pub fn assertion_with_client_data(&self, cdj: &[u8], flags: u8, tail: &[u8]) -> Assertion {
        self.sign_assertion(Self::auth_data(flags, tail), cdj.to_vec())
    }

    pub fn verify(&self, a: &Assertion) -> Result<Asserted, PasskeyError> {
        verify_assertion(&self.key, &relying(), CHALLENGE, a)
    }

    /// Attested credential data: AAGUID, length, ID, then `cose`.
    pub fn attested(credential_id: &[u8], cose: &[u8]) -> Vec<u8> {
        let mut out = vec![0xaa; 16];
        out.extend_from_slice(&(credential_id.len() as u16).to_be_bytes());
        out.extend_from_slice(credential_id);
        out.extend_from_slice(cose);
        out
    }

    pub fn attestation_object(fmt: &str, att_stmt: Cbor, auth_data: &[u8]) -> Vec<u8> {
        encode(&Cbor::Map(vec![
            (Cbor::Text("fmt".into()), Cbor::Text(fmt.into())),
            (Cbor::Text("attStmt".into()), att_stmt),
            (
                Cbor::Text("authData".into()),
                Cbor::Bytes(auth_data.to_vec()),
            ),
        ]))
    }

    /// A `none` registration of this key with `flags` (AT is the caller's to set).
    pub fn registration(&self, flags: u8) -> (Vec<u8>, Vec<u8>) {
        let auth = Self::auth_data(flags, &Self::attested(CREDENTIAL_ID, &self.cose));
        (
            Self::attestation_object("none", Cbor::Map(vec![]), &auth),
            self.client_data("webauthn.create", ""),
        )
    }
}
