//! A passkey's public key, as the authenticator states it: a COSE_Key (RFC 9052
//! §7, RFC 9053 §2 and §7), CBOR-encoded.
//!
//! We keep the exact bytes the key was parsed from, because that is what a keyring
//! stores and what a reader compares; the parsed key is only a cache of them. Parsing
//! is strict so that one key has one spelling: the CBOR must be in its shortest
//! definite form (re-encoding gives the same bytes), a label may appear once, and
//! only the labels an ES256 or Ed25519 public key needs are allowed (a private key
//! `d`, or anything we would silently ignore, is refused).

use super::{Algorithm, PasskeyError};
use crate::keys::{PublicKey, Signature};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ciborium::value::Value;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::VerifyingKey;
use p256::EncodedPoint;
use std::fmt;
use std::hash::{Hash, Hasher};

/// COSE key labels (RFC 9052 §7.1, RFC 9053 §7.1.1 and §7.2).
const KTY: i64 = 1;
const ALG: i64 = 3;
const CRV: i64 = -1;
const X: i64 = -2;
const Y: i64 = -3;
const D: i64 = -4;

/// Key types and curves (RFC 9053 §7).
const KTY_OKP: i64 = 1;
const KTY_EC2: i64 = 2;
const CRV_P256: i64 = 1;
const CRV_ED25519: i64 = 6;

/// A passkey's public key from its COSE_Key (RFC 9052/9053): EC2 P-256 (kty 2, crv 1,
/// alg -7, x, y 32 bytes each, point on curve) or OKP Ed25519 (kty 1, crv 6, alg -8,
/// x 32 bytes). Keeps the exact COSE bytes it was parsed from; two keys are equal when
/// those bytes are (the strict parse gives each key a single spelling).
#[derive(Clone)]
pub struct CoseKey {
    /// The COSE_Key exactly as received.
    bytes: Vec<u8>,
    /// The key those bytes hold, checked.
    key: Parsed,
}

/// The checked key behind a [`CoseKey`].
#[derive(Clone)]
enum Parsed {
    Es256(VerifyingKey),
    EdDsa(PublicKey),
}

impl CoseKey {
    /// Parses a COSE_Key. Refuses trailing bytes, non-shortest CBOR, repeated or
    /// unknown labels, a wrong kty/crv/alg, missing or wrong-length coordinates, a
    /// P-256 point not on the curve, and weak or non-canonical Ed25519 keys.
    pub fn from_cose(bytes: &[u8]) -> Result<Self, PasskeyError> {
        let (value, used) = read_cbor(bytes).map_err(|e| PasskeyError::Cose(e.to_string()))?;
        if used != bytes.len() {
            return Err(cose("bytes follow the COSE key: send the key alone"));
        }
        if !is_shortest_form(&value, bytes) {
            return Err(cose(
                "not in CBOR's shortest definite form (as CTAP2 authenticators write it)",
            ));
        }
        let key = parse_map(&value)?;
        Ok(Self {
            bytes: bytes.to_vec(),
            key,
        })
    }

    /// Parses standard base64 (with padding) of the COSE bytes, as a keyring writes
    /// it; a non-canonical spelling (other alphabet, missing padding, stray bits) is
    /// refused so the same key is always written the same way.
    pub fn parse(b64: &str) -> Result<Self, PasskeyError> {
        // A COSE key is under 100 bytes; refuse long strings before decoding them.
        if b64.len() > 1024 {
            return Err(PasskeyError::TooLarge {
                field: "COSE key",
                max: 768,
            });
        }
        let bytes = STANDARD
            .decode(b64)
            .map_err(|_| PasskeyError::Encoding("COSE key is not standard base64 with padding"))?;
        if STANDARD.encode(&bytes) != b64 {
            return Err(PasskeyError::Encoding(
                "COSE key is not canonical standard base64 (with padding, no stray bits)",
            ));
        }
        Self::from_cose(&bytes)
    }

    /// Standard base64 (with padding) of the exact COSE bytes.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(&self.bytes)
    }

    /// The exact COSE bytes the key was parsed from.
    pub fn cose_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The key's algorithm.
    pub fn algorithm(&self) -> Algorithm {
        match self.key {
            Parsed::Es256(_) => Algorithm::Es256,
            Parsed::EdDsa(_) => Algorithm::EdDsa,
        }
    }

    /// Verifies `sig` over `msg`: ES256 is ECDSA P-256 SHA-256 with an ASN.1 DER
    /// signature (as authenticators send it, high or low S); EdDSA is a raw 64-byte
    /// Ed25519 signature checked with `verify_strict`.
    pub fn verify(&self, msg: &[u8], sig: &[u8]) -> Result<(), PasskeyError> {
        match &self.key {
            Parsed::Es256(vk) => {
                let sig = p256::ecdsa::Signature::from_der(sig)
                    .map_err(|_| PasskeyError::BadSignature)?;
                vk.verify(msg, &sig).map_err(|_| PasskeyError::BadSignature)
            }
            Parsed::EdDsa(pk) => {
                let arr: [u8; 64] = sig.try_into().map_err(|_| PasskeyError::BadSignature)?;
                pk.verify_strict(msg, &Signature(arr))
                    .map_err(|_| PasskeyError::BadSignature)
            }
        }
    }
}

impl PartialEq for CoseKey {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for CoseKey {}

impl Hash for CoseKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.bytes.hash(state);
    }
}

impl fmt::Debug for CoseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CoseKey({}, {})",
            self.algorithm().keyring_word(),
            self.to_base64()
        )
    }
}

fn cose(msg: &str) -> PasskeyError {
    PasskeyError::Cose(msg.to_string())
}

/// Reads one CBOR item from the front of `bytes`: the item and how many bytes it took.
/// ciborium bounds nesting (256 levels) and never allocates from a declared length
/// before the bytes arrive, so hostile input costs at most its own size.
pub(super) fn read_cbor(bytes: &[u8]) -> Result<(Value, usize), PasskeyError> {
    let mut rest = bytes;
    let value: Value =
        ciborium::from_reader(&mut rest).map_err(|e| PasskeyError::Cbor(e.to_string()))?;
    Ok((value, bytes.len() - rest.len()))
}

/// Whether `bytes` is the shortest definite encoding of `value` (what ciborium writes).
fn is_shortest_form(value: &Value, bytes: &[u8]) -> bool {
    let mut out = Vec::with_capacity(bytes.len());
    ciborium::into_writer(value, &mut out).is_ok() && out == bytes
}

/// A small integer, or None for anything else.
pub(super) fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Integer(i) => i64::try_from(i128::from(*i)).ok(),
        _ => None,
    }
}

/// The key's parameters, each label once.
struct Params<'a> {
    kty: Option<&'a Value>,
    alg: Option<&'a Value>,
    crv: Option<&'a Value>,
    x: Option<&'a Value>,
    y: Option<&'a Value>,
}

fn parse_map(value: &Value) -> Result<Parsed, PasskeyError> {
    let Value::Map(entries) = value else {
        return Err(cose("a COSE key is a CBOR map"));
    };
    let mut p = Params {
        kty: None,
        alg: None,
        crv: None,
        x: None,
        y: None,
    };
    let mut unknown = None;
    for (k, v) in entries {
        let label = as_i64(k).ok_or_else(|| cose("a COSE key label must be an integer"))?;
        let slot = match label {
            KTY => &mut p.kty,
            ALG => &mut p.alg,
            CRV => &mut p.crv,
            X => &mut p.x,
            Y => &mut p.y,
            D => {
                return Err(cose(
                    "the key holds a private key (label -4): send the public key only",
                ))
            }
            other => {
                unknown.get_or_insert(other);
                continue;
            }
        };
        if slot.replace(v).is_some() {
            return Err(PasskeyError::Cose(format!("label {label} appears twice")));
        }
    }
    // The algorithm decides which other labels belong, so it is read first: an RS256
    // or ES384 key is refused for its algorithm, not for its parameters.
    let alg = p
        .alg
        .ok_or_else(|| cose("no alg (label 3): WebAuthn keys name their algorithm"))?;
    let alg = as_i64(alg).ok_or_else(|| cose("alg (label 3) must be an integer"))?;
    let algorithm = match alg {
        -7 => Algorithm::Es256,
        -8 => Algorithm::EdDsa,
        other => return Err(PasskeyError::UnsupportedAlgorithm(other)),
    };
    if let Some(label) = unknown {
        return Err(PasskeyError::Cose(format!(
            "unexpected label {label}: an {} key has only kty, alg, crv, x{}",
            algorithm.keyring_word(),
            if algorithm == Algorithm::Es256 {
                ", y"
            } else {
                ""
            }
        )));
    }
    let int = |v: Option<&Value>, name: &str| -> Result<i64, PasskeyError> {
        v.and_then(as_i64)
            .ok_or_else(|| PasskeyError::Cose(format!("{name} missing or not an integer")))
    };
    let coord = |v: Option<&Value>, name: &str| -> Result<[u8; 32], PasskeyError> {
        match v {
            Some(Value::Bytes(b)) => b.as_slice().try_into().map_err(|_| {
                PasskeyError::Cose(format!("{name} is {} bytes, expected 32", b.len()))
            }),
            _ => Err(PasskeyError::Cose(format!(
                "{name} missing or not a byte string"
            ))),
        }
    };
    match algorithm {
        Algorithm::Es256 => {
            if int(p.kty, "kty (label 1)")? != KTY_EC2 {
                return Err(cose("alg -7 (ES256) needs kty 2 (EC2)"));
            }
            if int(p.crv, "crv (label -1)")? != CRV_P256 {
                return Err(cose("alg -7 (ES256) needs crv 1 (P-256)"));
            }
            let x = coord(p.x, "x (label -2)")?;
            let y = coord(p.y, "y (label -3)")?;
            let point = EncodedPoint::from_affine_coordinates(&x.into(), &y.into(), false);
            let vk = VerifyingKey::from_encoded_point(&point)
                .map_err(|_| cose("x, y is not a point on P-256"))?;
            Ok(Parsed::Es256(vk))
        }
        Algorithm::EdDsa => {
            if int(p.kty, "kty (label 1)")? != KTY_OKP {
                return Err(cose("alg -8 (EdDSA) needs kty 1 (OKP)"));
            }
            if int(p.crv, "crv (label -1)")? != CRV_ED25519 {
                return Err(cose(
                    "alg -8 (EdDSA) is accepted with crv 6 (Ed25519) only, not Ed448",
                ));
            }
            if p.y.is_some() {
                return Err(cose("an Ed25519 key has no y (label -3)"));
            }
            let x = coord(p.x, "x (label -2)")?;
            let pk = PublicKey::from_bytes(&x)
                .map_err(|e| PasskeyError::Cose(format!("Ed25519 key: {e}")))?;
            Ok(Parsed::EdDsa(pk))
        }
    }
}
