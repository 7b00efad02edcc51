//! Our own vectors, `core/tests/vectors/*.json`, checked case by case.
//!
//! They use the wire's names so that any implementation (signer-cli, a system
//! that acts on receipts, a port to another language) can read them. The
//! generator is `examples/gen_vectors.rs`; the cases live in `common/gen.rs`.

mod common;
#[path = "common/gen.rs"]
mod gen;

use approval_core::json::{self, Problem};
use approval_core::message::{parse_decision_message, Signature};
use approval_core::policy::PolicySet;
use approval_core::preview::Preview;
use approval_core::{Keyring, PublicKey, SignedDecision};
use common::*;
use serde_json::Value;

#[test]
fn checked_in_vectors_match_the_generator() {
    for (name, value) in gen::all_files() {
        let on_disk = read_vector_text(name);
        // Compare values, not bytes: with serde_json's `preserve_order` (turned on
        // by other crates in a workspace build) the generator prints keys in
        // another order, which is the same JSON.
        let parsed: Value = serde_json::from_str(&on_disk).unwrap();
        assert!(
            on_disk == gen::file_text(&value) || parsed == value,
            "{name} is stale: run `cargo run --example gen_vectors -p approval-core`"
        );
        assert!(on_disk.ends_with("}\n]\n"), "{name}");
    }
}

#[test]
fn own_vector_files_are_exact_json() {
    // Our own files must survive our own exact parser (no duplicate keys, no
    // imprecise numbers), so other implementations read exactly what we meant.
    for (name, _) in gen::all_files() {
        json::parse_exact(&read_vector_text(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn previews_hash_to_their_preview_sha256() {
    let cases = read_vector_cases("previews.json");
    assert!(cases.len() >= 10);
    let mut hashes = std::collections::BTreeSet::new();
    for (i, case) in cases.iter().enumerate() {
        assert_eq!(sorted_keys(case), ["preview", "preview_sha256"]);
        let p = Preview::from_value(&case["preview"]).unwrap_or_else(|e| panic!("case {i}: {e}"));
        let want = field(case, "preview_sha256");
        assert_eq!(p.sha256().to_hex(), want, "case {i}");
        // From text, through the exact parser, whatever the formatting.
        let compact = serde_json::to_string(&case["preview"]).unwrap();
        let pretty = serde_json::to_string_pretty(&case["preview"]).unwrap();
        for text in [compact, pretty] {
            assert_eq!(
                Preview::from_json_text(&text).unwrap().sha256().to_hex(),
                want
            );
        }
        // And the canonical bytes are a fixed point of parse + canonicalise.
        // (Read laxly: see `canonical_form_may_spell_large_doubles_as_integers`.)
        let canon = p.canonical_bytes();
        let again: Value = serde_json::from_slice(&canon).unwrap();
        assert_eq!(json::canonical_bytes(&again), canon, "case {i}");
        assert!(hashes.insert(want.to_owned()), "case {i} repeats a hash");
    }
}

#[test]
fn previews_cover_hostile_strings_and_edge_numbers() {
    let text = read_vector_text("previews.json");
    for needle in [
        "\u{202E}",
        "\u{2028}",
        "\u{2029}",
        "\\u0000",
        "\u{FEFF}",
        "\u{200B}",
        "😀",
        "5e-324",
        "1e+21",
        "1.7976931348623157e+308",
        "-0.0",
        "9007199254740992",
        "</script>",
    ] {
        assert!(text.contains(needle), "{needle:?}");
    }
    // JCS spellings of the edge numbers, in the canonical bytes.
    let cases = read_vector_cases("previews.json");
    let numbers = Preview::from_value(&cases[3]["preview"]).unwrap();
    let canon = String::from_utf8(numbers.canonical_bytes()).unwrap();
    assert!(
        canon.contains(
            r#""payload":[5e-324,1e+21,100000000000000000000,0.000001,1e-7,1.7976931348623157e+308,-1.7976931348623157e+308,2.2250738585072014e-308,9007199254740992,-9007199254740992,0.1,0.30000000000000004,0,0,1,-1,4.5,0.002,333333333.3333333,123456789012345680000,1e+22,123.456,-0.5,1795465850265754.2]"#
        ),
        "{canon}"
    );
}

#[test]
fn canonical_form_may_spell_large_doubles_as_integers() {
    // JCS prints an integral double below 1e21 without an exponent, so the
    // accepted payload value 1e20 is spelt 100000000000000000000 in the
    // canonical bytes. Our exact parser refuses that spelling (DESIGN: integers
    // beyond ±2^53 are refused), so canonical bytes are for hashing, not for
    // reading back with `parse_exact`. Previews and receipts travel as ordinary
    // serde_json text, which spells it 1e+20 and reads back exactly.
    let cases = read_vector_cases("previews.json");
    let numbers = Preview::from_value(&cases[3]["preview"]).unwrap();
    let canon = String::from_utf8(numbers.canonical_bytes()).unwrap();
    assert!(canon.contains(",100000000000000000000,"));
    assert_eq!(
        json::parse_exact(&canon).unwrap_err(),
        json::PayloadError {
            pointer: "/payload/2".into(),
            problem: Problem::IntegerTooLarge
        }
    );
    let wire = serde_json::to_string(&numbers.to_value()).unwrap();
    assert!(wire.contains(",1e+20,"));
    assert_eq!(Preview::from_json_text(&wire).unwrap(), numbers);
}

#[test]
fn decisions_verify_and_are_what_we_sign() {
    let cases = read_vector_cases("decisions.json");
    let mut words = std::collections::BTreeSet::new();
    let mut multi_line = false;
    let mut non_ascii = false;
    for (i, case) in cases.iter().enumerate() {
        assert_eq!(sorted_keys(case), ["message", "public_key", "signature"]);
        let pk = PublicKey::parse(field(case, "public_key")).unwrap();
        let sig = Signature::parse(field(case, "signature")).unwrap();
        let msg = field(case, "message");
        assert_eq!(pk.verify_strict(msg.as_bytes(), &sig), Ok(()), "case {i}");
        let (decision, hash, reason) = parse_decision_message(msg).unwrap();
        words.insert(decision);
        multi_line |= reason.contains('\n');
        non_ascii |= !reason.is_ascii();
        // The same bytes come out of our signer for the approver with this key.
        let who = NAMES
            .into_iter()
            .find(|n| public_key(n) == pk)
            .expect("a fixture approver's key");
        let ours = SignedDecision::sign(&signing_key(who), approver(who), decision, &hash, &reason)
            .unwrap();
        assert_eq!(ours.signature(), Some(&sig), "case {i}");
        assert_eq!(ours.verify_key(&pk, &hash), Ok(()));
        // Bound to every field: another decision word, hash or reason fails.
        for d in approval_core::Decision::ALL {
            let mut other = ours.clone();
            other.decision = d;
            assert_eq!(
                other.verify_key(&pk, &hash).is_ok(),
                d == decision,
                "case {i} {d}"
            );
        }
        let mut other = ours.clone();
        other.reason.push(' ');
        assert!(other.verify_key(&pk, &hash).is_err());
    }
    assert_eq!(words.len(), 5, "all five decisions");
    assert!(multi_line && non_ascii);
}

fn problem_name(p: &Problem) -> &'static str {
    match p {
        Problem::IntegerTooLarge => "IntegerTooLarge",
        Problem::LosesPrecision => "LosesPrecision",
        Problem::NotFinite => "NotFinite",
        Problem::DuplicateKey(_) => "DuplicateKey",
        Problem::LoneSurrogate => "LoneSurrogate",
        Problem::TooDeep => "TooDeep",
        Problem::Syntax(_) => "Syntax",
    }
}

#[test]
fn fail_payloads_are_refused_with_problem_and_pointer() {
    let cases = read_vector_cases("fail_payloads.json");
    let mut kinds = std::collections::BTreeSet::new();
    for case in &cases {
        let why = field(case, "why");
        let e = json::parse_exact(field(case, "payload_json")).expect_err(why);
        assert_eq!(
            problem_name(&e.problem),
            field(case, "problem"),
            "{why}: {e}"
        );
        assert_eq!(e.pointer, field(case, "pointer"), "{why}: {e}");
        kinds.insert(problem_name(&e.problem));
        // parse_collecting agrees: the first problem is the same one (or the
        // syntax error stops it).
        match json::parse_collecting(field(case, "payload_json")) {
            Ok(p) => assert_eq!(p.problems.first(), Some(&e), "{why}"),
            Err(s) => assert_eq!(s, e, "{why}"),
        }
    }
    assert_eq!(
        kinds.len(),
        7,
        "every Problem variant is covered: {kinds:?}"
    );
}

/// Runs a decision through every check a verifier makes; `Err` says which refused.
fn accept(case: &Value) -> Result<(), &'static str> {
    let pk = PublicKey::parse(field(case, "public_key")).map_err(|_| "public_key")?;
    let sig = Signature::parse(field(case, "signature")).map_err(|_| "signature")?;
    let msg = field(case, "message");
    let (decision, hash, reason) = parse_decision_message(msg).map_err(|_| "message")?;
    pk.verify_strict(msg.as_bytes(), &sig)
        .map_err(|_| "verify")?;
    let d = SignedDecision {
        approver: approver("alice"),
        decision,
        reason,
        proof: approval_core::message::Proof::Signature(sig),
    };
    d.verify_key(&pk, &hash).map_err(|_| "verify")
}

#[test]
fn reads_verify_and_bind_the_server_id() {
    use approval_core::message::{verify_read, ReadAuthError};
    use approval_core::{ServerId, Timestamp};
    let cases = read_vector_cases("reads.json");
    assert!(cases.len() >= 5);
    let kr = keyring(&NAMES);
    for (i, case) in cases.iter().enumerate() {
        assert_eq!(
            sorted_keys(case),
            [
                "authorization",
                "message",
                "method",
                "path_and_query",
                "public_key",
                "server_id",
                "unix_seconds"
            ]
        );
        let srv = ServerId::parse(field(case, "server_id")).unwrap();
        let at = case["unix_seconds"].as_i64().unwrap();
        let (method, pq) = (field(case, "method"), field(case, "path_and_query"));
        let msg = field(case, "message");
        assert_eq!(
            msg,
            format!("approval-v1-read\n{srv}\n{at}\n{method}\n{pq}"),
            "case {i}"
        );
        let auth = field(case, "authorization");
        let sig = Signature::parse(auth.rsplit(' ').next().unwrap()).unwrap();
        let pk = PublicKey::parse(field(case, "public_key")).unwrap();
        assert_eq!(pk.verify_strict(msg.as_bytes(), &sig), Ok(()), "case {i}");
        let now = Timestamp::from_unix(at);
        assert!(
            verify_read(&kr, &srv, auth, method, pq, now).is_ok(),
            "case {i}"
        );
        let other = ServerId::parse("srv-other").unwrap();
        assert_eq!(
            verify_read(&kr, &other, auth, method, pq, now),
            Err(ReadAuthError::BadSignature),
            "case {i}: bound to the server id"
        );
    }
}

#[test]
fn fail_decisions_are_refused_where_stated() {
    let cases = read_vector_cases("fail_decisions.json");
    let mut stages = std::collections::BTreeSet::new();
    for case in &cases {
        let why = field(case, "why");
        let at = field(case, "refused_at");
        assert_eq!(accept(case), Err(at), "{why}");
        stages.insert(at);
        if at == "message" {
            // The signature itself is good: only the message format refuses it.
            let pk = PublicKey::parse(field(case, "public_key")).unwrap();
            let sig = Signature::parse(field(case, "signature")).unwrap();
            assert!(
                pk.verify_strict(field(case, "message").as_bytes(), &sig)
                    .is_ok(),
                "{why}"
            );
        }
    }
    assert_eq!(stages.len(), 4);
    // The cases that need the key checks really do need them.
    let find = |prefix: &str| {
        cases
            .iter()
            .find(|c| field(c, "why").starts_with(prefix))
            .unwrap_or_else(|| panic!("{prefix}"))
    };
    let raw = |c: &Value| {
        let pk: [u8; 32] = unb64(field(c, "public_key")).try_into().unwrap();
        let sig: [u8; 64] = unb64(field(c, "signature")).try_into().unwrap();
        (
            ed25519_dalek::VerifyingKey::from_bytes(&pk).unwrap(),
            ed25519_dalek::Signature::from_bytes(&sig),
            field(c, "message").as_bytes().to_vec(),
        )
    };
    let (k, s, m) = raw(find("small-order key (identity)"));
    assert!(ed25519_dalek::Verifier::verify(&k, &m, &s).is_ok());
    let (k, s, m) = raw(find("mixed-order key"));
    assert!(k.verify_strict(&m, &s).is_ok());
    let (k, s, m) = raw(find("non-canonical S"));
    assert!(k.verify_strict(&m, &s).is_err());
    assert!(find("an approval presented as a rejection")["message"]
        .as_str()
        .unwrap()
        .contains("\nreject\n"));
}

#[test]
fn fail_keyrings_are_refused_on_the_stated_line() {
    let cases = read_vector_cases("fail_keyrings.json");
    assert!(cases.len() >= 20);
    for case in &cases {
        let why = field(case, "why");
        let e = Keyring::parse(field(case, "keyring")).expect_err(why);
        assert_eq!(
            e.line() as u64,
            case["line"].as_u64().unwrap(),
            "{why}: {e}"
        );
        assert!(
            e.to_string().starts_with(&format!("line {}:", e.line())),
            "{e}"
        );
    }
}

#[test]
fn fail_policies_are_refused_on_the_stated_line() {
    let cases = read_vector_cases("fail_policies.json");
    assert!(cases.len() >= 30);
    for case in &cases {
        let why = field(case, "why");
        let keyring = Keyring::parse(field(case, "keyring")).unwrap();
        let file = field(case, "file");
        let errs = PolicySet::load(&[(file.into(), field(case, "policy").into())], &keyring)
            .expect_err(why);
        assert_eq!(errs.len(), 1, "{why}: {errs:?}");
        assert_eq!(errs[0].file, file, "{why}");
        assert_eq!(
            errs[0].line,
            Some(case["line"].as_u64().unwrap() as usize),
            "{why}: {}",
            errs[0]
        );
    }
    // The policy they are all edited from loads.
    let keyring = Keyring::parse(&gen::fail_policy_keyring()).unwrap();
    PolicySet::load(
        &[("email.send.toml".into(), gen::GOOD_POLICY.into())],
        &keyring,
    )
    .unwrap();
}
