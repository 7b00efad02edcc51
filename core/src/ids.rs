//! Newtypes for identifiers and hashes, each buildable only through validation.
//!
//! A name is never just a `String`: an approver name that passed [`ApproverName::parse`]
//! cannot contain a space or a newline, so it can sit in a keyring line or a header.

use serde::{Deserialize, Deserializer, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;
use thiserror::Error;

/// An identifier that failed validation.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid {what} {value:?}: {rule}")]
pub struct IdError {
    /// Which kind of identifier.
    pub what: &'static str,
    /// The value given (truncated).
    pub value: String,
    /// What a valid one looks like.
    pub rule: &'static str,
}

/// The longest identifier of any kind: names, kinds and proposal ids alike. Text
/// that claims to be an id and is longer cannot be one, so a display may cut it here
/// without ever cutting a real id.
pub const ID_MAX_LEN: usize = 64;

fn check_token(what: &'static str, s: &str, max: usize, extra: &[char]) -> Result<(), IdError> {
    let ok = !s.is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(IdError {
            what,
            value: s.chars().take(80).collect(),
            rule:
                "use 1-64 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit",
        })
    }
}

macro_rules! token_newtype {
    ($(#[$doc:meta])* $name:ident, $what:literal, $extra:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps a value.
            pub fn parse(s: &str) -> Result<Self, IdError> {
                check_token($what, s, ID_MAX_LEN, $extra)?;
                Ok(Self(s.to_owned()))
            }
            /// The value as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::parse(&s).map_err(serde::de::Error::custom)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::parse(s)
            }
        }
    };
}

token_newtype!(
    /// An approver's name, as in the keyring and in policies.
    ApproverName, "approver name", &['.', '_', '-']
);
token_newtype!(
    /// An action kind such as `email.send`; one policy file per kind.
    Kind, "kind", &['.', '_', '-']
);
token_newtype!(
    /// A proposal id, chosen by the server (random, unguessable).
    ProposalId, "proposal id", &['-', '_']
);
/// Lowercase hex, for ids and hashes written without allocating.
const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Whether `b` is one of [`HEX_DIGITS`]: the one spelling ids and hashes are read in.
fn is_lower_hex(b: &u8) -> bool {
    matches!(b, b'0'..=b'9' | b'a'..=b'f')
}

/// Hex digits of a minted proposal id's random part (128 bits: unguessable).
const ID_RANDOM_HEX: usize = 32;
/// Hex digits of a minted proposal id's creation time: milliseconds since 1970 in 48
/// bits, which last until the year 10889.
const ID_TIME_HEX: usize = 12;

impl ProposalId {
    /// A fresh id: `p-`, the 128 bits of `random` as 32 hex digits, then `unix_millis`
    /// (the creation time) as 12 hex digits.
    ///
    /// The random part comes first because people pick a proposal by typing the first
    /// few characters of its id (`signer-cli approve p-6355d6`), and ids made in the
    /// same minute would all start alike if the time came first. The time is there for
    /// the store: [`ProposalId::order_key`] files records in creation order, so the
    /// records still open are a few neighbouring pages of a large store rather than
    /// one page each (issue #14: the pending listing on 1,000,000 finished proposals).
    pub fn mint(random: [u8; 16], unix_millis: u64) -> Self {
        let mut s = String::with_capacity(2 + ID_RANDOM_HEX + ID_TIME_HEX);
        s.push_str("p-");
        for b in random {
            s.push(HEX_DIGITS[usize::from(b >> 4)] as char);
            s.push(HEX_DIGITS[usize::from(b & 0xf)] as char);
        }
        let millis = unix_millis & 0xffff_ffff_ffff;
        for shift in (0..ID_TIME_HEX).rev() {
            s.push(HEX_DIGITS[((millis >> (4 * shift)) & 0xf) as usize] as char);
        }
        Self(s)
    }

    /// The bytes a store orders this proposal's record by; see [`order_key_of`].
    pub fn order_key(&self) -> Vec<u8> {
        order_key_of(self.0.as_bytes())
    }
}

/// The bytes a store orders the record of the proposal id `id` by.
///
/// For an id made by [`ProposalId::mint`]: a NUL byte, the creation time, then the
/// random part, so keys sort by creation time. For any other id (an earlier build's
/// `p-` and 32 random hex digits), the id itself. Two different ids never share a
/// key: a minted id's key is the only kind that starts with NUL, which no id contains,
/// and within that kind the rearrangement is one-to-one.
pub fn order_key_of(id: &[u8]) -> Vec<u8> {
    let minted = id.len() == 2 + ID_RANDOM_HEX + ID_TIME_HEX
        && id.starts_with(b"p-")
        && id[2..].iter().all(is_lower_hex);
    if !minted {
        return id.to_vec();
    }
    let (random, time) = id[2..].split_at(ID_RANDOM_HEX);
    [&[0u8][..], time, random].concat()
}

token_newtype!(
    /// The server's identity, made once at the store's first start and kept forever.
    ServerId, "server id", &['-', '_']
);
token_newtype!(
    /// The agent identity the server authenticated (`local` without an agents file).
    AgentName, "agent name", &['.', '_', '-']
);

/// A SHA-256 digest, shown as 64 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sha256Hex([u8; 32]);

impl Sha256Hex {
    /// Hashes bytes.
    pub fn digest(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// Parses exactly 64 lowercase hex characters; anything else is refused, so that
    /// two spellings of one hash can never both be accepted.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        let err = || IdError {
            what: "sha256",
            value: s.chars().take(80).collect(),
            rule: "use 64 lowercase hex characters",
        };
        if s.len() != 64 || !s.as_bytes().iter().all(is_lower_hex) {
            return Err(err());
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).map_err(|_| err())?;
        Ok(Self(out))
    }

    /// The raw digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The lowercase hex form.
    pub fn to_hex(&self) -> String {
        self.hex_str(&mut [0; 64]).to_owned()
    }

    /// The lowercase hex form written into `buf`, without allocating: every stored
    /// record, answer and audit entry writes several of these.
    fn hex_str<'b>(&self, buf: &'b mut [u8; 64]) -> &'b str {
        for (pair, b) in buf.chunks_exact_mut(2).zip(self.0) {
            pair[0] = HEX_DIGITS[usize::from(b >> 4)];
            pair[1] = HEX_DIGITS[usize::from(b & 0x0f)];
        }
        // Only ASCII digits were written: this cannot fail, and would show as "" if it did.
        std::str::from_utf8(buf).unwrap_or_default()
    }

    /// The first `n` hex characters, what a human is asked to compare.
    pub fn prefix(&self, n: usize) -> String {
        let mut h = self.to_hex();
        h.truncate(n);
        h
    }
}

impl fmt::Display for Sha256Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.hex_str(&mut [0; 64]))
    }
}

impl fmt::Debug for Sha256Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256Hex({})", self.to_hex())
    }
}

impl Serialize for Sha256Hex {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.hex_str(&mut [0; 64]))
    }
}

impl<'de> Deserialize<'de> for Sha256Hex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Parsed from the input's own text where it can be borrowed, else from a
        // transient copy: never through an owned String of its own.
        struct HexVisitor;
        impl serde::de::Visitor<'_> for HexVisitor {
            type Value = Sha256Hex;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a SHA-256 digest as 64 lowercase hex characters")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Sha256Hex, E> {
                Sha256Hex::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_str(HexVisitor)
    }
}

impl std::str::FromStr for Sha256Hex {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_refuse_spaces_newlines_and_empty() {
        for bad in [
            "",
            " alice",
            "al ice",
            "alice\n",
            "-alice",
            "a".repeat(65).as_str(),
            "ålice",
        ] {
            assert!(ApproverName::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            ApproverName::parse("alice.b-c_1").unwrap().as_str(),
            "alice.b-c_1"
        );
    }

    #[test]
    fn sha256_accepts_only_lowercase_hex_of_64() {
        let h = Sha256Hex::digest(b"abc");
        assert_eq!(
            h.to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Sha256Hex::parse(&h.to_hex()).unwrap(), h);
        assert!(Sha256Hex::parse(&h.to_hex().to_uppercase()).is_err());
        assert!(Sha256Hex::parse(&h.to_hex()[1..]).is_err());
        assert_eq!(h.prefix(8), "ba7816bf");
    }

    /// The hand-written hex agrees with the `hex` crate on every byte value, in
    /// `to_hex`, `Display` and JSON; JSON reads it back from borrowed text and from
    /// a `Value`, and refuses what `parse` refuses, naming what it wanted.
    #[test]
    fn sha256_hex_agrees_with_the_hex_crate_and_round_trips_through_json() {
        for i in 0..=255u8 {
            let mut raw = [0u8; 32];
            for (j, b) in raw.iter_mut().enumerate() {
                *b = i.wrapping_add(j as u8).wrapping_mul(37);
            }
            let h = Sha256Hex(raw);
            assert_eq!(h.to_hex(), hex::encode(raw));
            assert_eq!(h.to_string(), hex::encode(raw));
            let json = serde_json::to_string(&h).unwrap();
            assert_eq!(json, format!("\"{}\"", hex::encode(raw)));
            assert_eq!(serde_json::from_str::<Sha256Hex>(&json).unwrap(), h);
            let value = serde_json::to_value(h).unwrap();
            assert_eq!(serde_json::from_value::<Sha256Hex>(value).unwrap(), h);
        }
        let upper = format!("\"{}\"", Sha256Hex::digest(b"x").to_hex().to_uppercase());
        assert!(serde_json::from_str::<Sha256Hex>(&upper).is_err());
        let e = serde_json::from_str::<Sha256Hex>("7")
            .unwrap_err()
            .to_string();
        assert!(e.contains("64 lowercase hex characters"), "{e}");
    }

    /// A minted id is a valid id of the documented shape, keeps its random part where
    /// a person reads it, and is found again by its order key's parts.
    #[test]
    fn a_minted_id_is_p_then_random_then_time() {
        let random = [
            0x63, 0x55, 0xd6, 0xcd, 0xb2, 0xd2, 0x2a, 0x2c, 0x84, 0x19, 0xdd, 0xad, 0xf4, 0x0b,
            0x0d, 0x31,
        ];
        let id = ProposalId::mint(random, 0x0194_2b3c_4d5e);
        assert_eq!(
            id.as_str(),
            "p-6355d6cdb2d22a2c8419ddadf40b0d3101942b3c4d5e"
        );
        assert_eq!(ProposalId::parse(id.as_str()).unwrap(), id);
        let mut key = vec![0u8];
        key.extend_from_slice(b"01942b3c4d5e6355d6cdb2d22a2c8419ddadf40b0d31");
        assert_eq!(id.order_key(), key);
        // Beyond 48 bits of milliseconds the time wraps rather than lengthening the id.
        assert_eq!(ProposalId::mint(random, 1 << 48).as_str().len(), 46);
        // An earlier build's id, and anything else, is its own key.
        for other in [
            "p-6355d6cdb2d22a2c8419ddadf40b0d31",
            "p-old",
            "x",
            "p-6355d6cdb2d22a2c8419ddadf40b0d3101942b3c4d5E",
        ] {
            assert_eq!(order_key_of(other.as_bytes()), other.as_bytes());
        }
    }

    proptest::proptest! {
        /// Records are filed in creation order: an id minted later has a larger order
        /// key, whatever the random parts.
        #[test]
        fn order_keys_sort_by_creation_time(
            r1 in proptest::array::uniform16(proptest::num::u8::ANY),
            r2 in proptest::array::uniform16(proptest::num::u8::ANY),
            t1 in 0u64..(1 << 48),
            dt in 1u64..(1 << 40),
        ) {
            let t2 = (t1 + dt).min((1 << 48) - 1);
            proptest::prop_assume!(t2 > t1);
            proptest::prop_assert!(ProposalId::mint(r1, t1).order_key() < ProposalId::mint(r2, t2).order_key());
        }

        /// Different ids never share an order key (a store would file two records as
        /// one): minted against minted, minted against any other valid id, and any
        /// two other ids.
        #[test]
        fn different_ids_have_different_order_keys(
            r1 in proptest::array::uniform16(proptest::num::u8::ANY),
            r2 in proptest::array::uniform16(proptest::num::u8::ANY),
            t1 in 0u64..(1 << 48),
            t2 in 0u64..(1 << 48),
            other in "[a-z0-9_-]{1,64}",
        ) {
            let (a, b) = (ProposalId::mint(r1, t1), ProposalId::mint(r2, t2));
            proptest::prop_assert_eq!(a == b, a.order_key() == b.order_key());
            if let Ok(o) = ProposalId::parse(&other) {
                proptest::prop_assert_eq!(o == a, o.order_key() == a.order_key());
                if other.len() != 46 {
                    proptest::prop_assert_eq!(order_key_of(other.as_bytes()), other.as_bytes().to_vec());
                }
            }
        }
    }
}
