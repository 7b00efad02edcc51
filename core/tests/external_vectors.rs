//! Vectors made outside this project (copied into `tests/vectors/external/`, see its
//! README for where each came from). Agreeing with them means agreeing with the
//! rest of the world; none of them was produced by our code.

mod common;

use approval_core::json::{self, PayloadError, Problem};
use approval_core::keyring::KeyError;
use approval_core::message::{self, parse_decision_message, Signature};
use approval_core::preview::Preview;
use approval_core::{Decision, PublicKey, Sha256Hex, SignedDecision};
use common::{field, read_vector_cases, read_vector_json, read_vector_text, unb64, vector_path};
use ed25519_dalek::SigningKey;
use serde_json::Value;

// ---------------------------------------------------------------------------
// RFC 8785 reference data (cyberphone/json-canonicalization, testdata/)
// ---------------------------------------------------------------------------

const RFC8785_FILES: [&str; 6] = [
    "arrays.json",
    "french.json",
    "structures.json",
    "unicode.json",
    "values.json",
    "weird.json",
];

fn rfc8785(name: &str) -> (String, Vec<u8>) {
    let input = read_vector_text(&format!("external/rfc8785/input/{name}"));
    let output = std::fs::read(vector_path(&format!("external/rfc8785/output/{name}")))
        .expect("output file exists");
    (input, output)
}

#[test]
fn rfc8785_folder_holds_exactly_the_reference_files() {
    let mut found: Vec<String> = std::fs::read_dir(vector_path("external/rfc8785/input"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    found.sort();
    assert_eq!(found, RFC8785_FILES);
}

#[test]
fn rfc8785_inputs_canonicalise_to_the_reference_bytes() {
    for name in RFC8785_FILES {
        let (input, output) = rfc8785(name);
        match name {
            // `values.json` holds 333333333.33333329: 17 significant digits whose
            // nearest double is 333333333.33333331346..., printed by JCS as
            // 333333333.3333333. The text the sender wrote does not survive the
            // trip through a double, so our exact parser refuses it by design
            // (DESIGN: "numbers that lose precision as doubles"). It is checked
            // separately below, without weakening the parser.
            "values.json" => {
                assert_eq!(
                    json::parse_exact(&input),
                    Err(PayloadError {
                        pointer: "/numbers/0".into(),
                        problem: Problem::LosesPrecision
                    }),
                    "{name}"
                );
            }
            _ => {
                let v = json::parse_exact(&input).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(
                    String::from_utf8(json::canonical_bytes(&v)).unwrap(),
                    String::from_utf8(output.clone()).unwrap(),
                    "{name}"
                );
                assert_eq!(json::canonical_bytes(&v), output, "{name}");
                // Canonical output is itself exact JSON and a fixed point.
                let again = json::parse_exact(std::str::from_utf8(&output).unwrap()).unwrap();
                assert_eq!(json::canonical_bytes(&again), output, "{name}");
            }
        }
    }
}

#[test]
fn rfc8785_values_file_agrees_once_the_imprecise_number_is_written_exactly() {
    let (input, output) = rfc8785("values.json");
    // The serialiser itself agrees with the reference output on the whole file,
    // read the lax way (serde_json rounds the 17-digit number to its double).
    let lax: Value = serde_json::from_str(&input).unwrap();
    assert_eq!(json::canonical_bytes(&lax), output);
    // Written with the digits the double really carries, the exact parser takes
    // it and the output is the reference output byte for byte. Every other
    // number in the file (1E30, 4.50, 2e-3, 0.000000000000000000000000001) goes
    // through the exact parser unchanged.
    let exact_text = input.replacen("333333333.33333329", "333333333.3333333", 1);
    assert_ne!(exact_text, input);
    let v = json::parse_exact(&exact_text).unwrap();
    assert_eq!(json::canonical_bytes(&v), output);
}

// ---------------------------------------------------------------------------
// Project Wycheproof: Ed25519 verification (C2SP/wycheproof, testvectors_v1/)
// ---------------------------------------------------------------------------

/// How one Wycheproof case came out for us.
#[derive(Debug, PartialEq)]
enum Ours {
    Accepted,
    /// `PublicKey::from_bytes` refused the group's key.
    KeyRefused(KeyError),
    /// The signature is not 64 bytes, so it cannot even be a `Signature`.
    WrongLength,
    /// `verify_strict` refused.
    Refused,
}

fn hex_bytes(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap_or_else(|e| panic!("hex {s:?}: {e}"))
}

#[test]
fn wycheproof_ed25519_agrees_with_every_case() {
    let file = read_vector_json("external/wycheproof/ed25519_test.json");
    assert_eq!(file["algorithm"], "EDDSA");
    assert_eq!(file["numberOfTests"], 151);
    let mut total = 0;
    let mut valid = 0;
    let mut invalid = 0;
    let mut acceptable = 0;
    let mut disagreements = Vec::new();
    for group in file["testGroups"].as_array().unwrap() {
        assert_eq!(group["type"], "EddsaVerify");
        assert_eq!(group["publicKey"]["curve"], "edwards25519");
        let pk_bytes = hex_bytes(group["publicKey"]["pk"].as_str().unwrap());
        let pk_arr: [u8; 32] = pk_bytes.try_into().expect("Wycheproof keys are 32 bytes");
        let key = PublicKey::from_bytes(&pk_arr);
        for case in group["tests"].as_array().unwrap() {
            total += 1;
            let id = case["tcId"].as_u64().unwrap();
            let msg = hex_bytes(field(case, "msg"));
            let sig = hex_bytes(field(case, "sig"));
            let ours = match (&key, <[u8; 64]>::try_from(sig.as_slice())) {
                (Err(e), _) => Ours::KeyRefused(e.clone()),
                (Ok(_), Err(_)) => Ours::WrongLength,
                (Ok(k), Ok(arr)) => {
                    // Through the wire form too: standard base64, parsed strictly.
                    let wire = Signature::parse(&common::b64(&arr)).unwrap();
                    assert_eq!(wire, Signature(arr));
                    match k.verify_strict(&msg, &wire) {
                        Ok(()) => Ours::Accepted,
                        Err(e) => {
                            assert_eq!(e, message::MessageError::BadSignature);
                            Ours::Refused
                        }
                    }
                }
            };
            let flags: Vec<&str> = case["flags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap())
                .collect();
            // "acceptable" marks behaviour Wycheproof allows either way. Every
            // such EdDSA flag is about leniency (malleability, encodings), and we
            // verify strictly, so an acceptable case must be refused by us. This
            // file (testvectors_v1) has no acceptable case; the count is asserted
            // below so that a newer file makes us look again.
            let must_accept = match field(case, "result") {
                "valid" => {
                    valid += 1;
                    true
                }
                "invalid" => {
                    invalid += 1;
                    false
                }
                "acceptable" => {
                    acceptable += 1;
                    false
                }
                other => panic!("tcId {id}: unknown result {other:?}"),
            };
            // A valid case whose key our keyring refuses would be a finding: it
            // is reported below as KeyRefused.
            let agrees = if must_accept {
                ours == Ours::Accepted
            } else {
                ours != Ours::Accepted
            };
            if !agrees {
                disagreements.push(format!(
                    "tcId {id} {:?} flags {flags:?}: we said {ours:?}",
                    case["result"]
                ));
            }
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");
    assert_eq!(total, 151);
    assert_eq!((valid, invalid, acceptable), (88, 63, 0));
}

#[test]
fn wycheproof_keys_are_all_accepted_by_the_keyring() {
    // No group key is weak or non-canonical, so every invalid case above was
    // refused by the signature check itself, never by the key check.
    let file = read_vector_json("external/wycheproof/ed25519_test.json");
    for group in file["testGroups"].as_array().unwrap() {
        let pk: [u8; 32] = hex_bytes(group["publicKey"]["pk"].as_str().unwrap())
            .try_into()
            .unwrap();
        let key = PublicKey::from_bytes(&pk).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(key.to_bytes(), pk);
        assert_eq!(PublicKey::parse(&common::b64(&pk)).unwrap(), key);
    }
}

// ---------------------------------------------------------------------------
// Independent previews and decisions (Python `rfc8785`, `hashlib`, `cryptography`)
// ---------------------------------------------------------------------------

#[test]
fn independent_previews_hash_as_other_implementations_hash_them() {
    let cases = read_vector_cases("external/independent/previews.json");
    assert_eq!(cases.len(), 60);
    for (i, case) in cases.iter().enumerate() {
        let p = Preview::from_value(&case["preview"]).unwrap_or_else(|e| panic!("case {i}: {e}"));
        let canonical = field(case, "canonical");
        assert_eq!(
            String::from_utf8(p.canonical_bytes()).unwrap(),
            canonical,
            "case {i}"
        );
        assert_eq!(
            p.sha256().to_hex(),
            field(case, "preview_sha256"),
            "case {i}"
        );
        assert_eq!(
            Sha256Hex::digest(canonical.as_bytes()).to_hex(),
            field(case, "preview_sha256"),
            "case {i}"
        );
        // The same through the exact text parser, from the canonical text and
        // from ordinary serde_json text.
        let from_canon = Preview::from_json_text(canonical).unwrap();
        assert_eq!(from_canon, p, "case {i}");
        let text = serde_json::to_string_pretty(&case["preview"]).unwrap();
        assert_eq!(Preview::from_json_text(&text).unwrap(), p, "case {i}");
        assert_eq!(p.to_value(), case["preview"], "case {i}");
    }
}

#[test]
fn independent_decisions_sign_and_verify_byte_for_byte() {
    let cases = read_vector_cases("external/independent/decisions.json");
    assert_eq!(cases.len(), 7);
    let mut decisions_seen = std::collections::BTreeSet::new();
    for (i, case) in cases.iter().enumerate() {
        let seed: [u8; 32] = unb64(field(case, "seed")).try_into().unwrap();
        let sk = SigningKey::from_bytes(&seed);
        let pk = PublicKey::from_signing_key(&sk);
        assert_eq!(pk.to_base64(), field(case, "public_key"), "case {i}");
        assert_eq!(PublicKey::parse(field(case, "public_key")).unwrap(), pk);
        let decision: Decision = field(case, "decision").parse().unwrap();
        decisions_seen.insert(decision);
        let hash = Sha256Hex::parse(field(case, "preview_sha256")).unwrap();
        let reason = field(case, "reason");
        let msg = message::decision_message(decision, &hash, reason).unwrap();
        assert_eq!(msg, field(case, "message"), "case {i}");
        assert_eq!(
            parse_decision_message(&msg).unwrap(),
            (decision, hash, reason.to_owned()),
            "case {i}"
        );
        let signed =
            SignedDecision::sign(&sk, common::approver("alice"), decision, &hash, reason).unwrap();
        // Ed25519 is deterministic: the same seed and message give the same bytes.
        assert_eq!(
            signed.signature().unwrap().to_base64(),
            field(case, "signature"),
            "case {i}"
        );
        let sig = Signature::parse(field(case, "signature")).unwrap();
        assert_eq!(signed.verify_key(&pk, &hash), Ok(()), "case {i}");
        assert_eq!(pk.verify_strict(msg.as_bytes(), &sig), Ok(()), "case {i}");
        // A changed byte, in the signature or the message, is refused. Positions
        // are spread out because verification is slow in debug builds; the
        // property tests flip every bit of random signatures and messages.
        for b in (0..64).step_by(9).chain([31, 32, 63]) {
            let mut bad = sig;
            bad.0[b] ^= 0x01;
            assert!(
                pk.verify_strict(msg.as_bytes(), &bad).is_err(),
                "case {i} sig byte {b}"
            );
        }
        let n = msg.len();
        let positions = (0..n.min(96))
            .step_by(7)
            .chain((96..n).step_by(97))
            .chain([n - 1]);
        for b in positions {
            let mut bad = msg.clone().into_bytes();
            bad[b] ^= 0x01;
            assert!(
                pk.verify_strict(&bad, &sig).is_err(),
                "case {i} message byte {b}"
            );
        }
    }
    assert_eq!(decisions_seen.len(), 5, "every decision word is covered");
}

#[test]
fn independent_fail_payloads_are_refused_with_the_right_problem_and_pointer() {
    let cases = read_vector_cases("external/independent/fail_payloads.json");
    // (why, problem, pointer), in file order.
    let expected: [(&str, Problem, &str); 8] = [
        ("integer beyond 2^53", Problem::IntegerTooLarge, "/amount"),
        (
            "integer beyond 2^53 (negative)",
            Problem::IntegerTooLarge,
            "/amount",
        ),
        ("u64 max", Problem::IntegerTooLarge, "/0"),
        (
            "number that does not round-trip through f64",
            Problem::LosesPrecision,
            "/x",
        ),
        ("duplicate key", Problem::DuplicateKey("to".into()), "/to"),
        (
            "duplicate key, nested",
            Problem::DuplicateKey("b".into()),
            "/a/b",
        ),
        ("lone high surrogate", Problem::LoneSurrogate, "/t"),
        ("lone low surrogate", Problem::LoneSurrogate, "/t"),
    ];
    assert_eq!(cases.len(), expected.len());
    for (case, (why, problem, pointer)) in cases.iter().zip(expected) {
        assert_eq!(field(case, "why"), why);
        let e = json::parse_exact(field(case, "payload_json")).unwrap_err();
        assert_eq!(
            e,
            PayloadError {
                pointer: pointer.into(),
                problem
            },
            "{why}"
        );
        assert!(!e.advice().is_empty());
    }
}

#[test]
fn external_copies_are_unchanged() {
    // The README lists the SHA-256 of every file as copied; an edit to a vector
    // (to make a test pass) shows up here.
    let readme = read_vector_text("external/README.md");
    let listed: Vec<(&str, &str)> = readme
        .lines()
        .filter_map(|l| l.split_once("  ./"))
        .filter(|(h, _)| h.len() == 64)
        .collect();
    assert_eq!(listed.len(), 16);
    for (hash, rel) in listed {
        let bytes = std::fs::read(vector_path(&format!("external/{rel}"))).unwrap();
        assert_eq!(Sha256Hex::digest(&bytes).to_hex(), hash, "{rel}");
    }
}
