//! The cases behind our own vectors in `core/tests/vectors/*.json`.
//!
//! `cargo run --example gen_vectors -p approval-core` writes them; the test
//! `own_vectors::checked_in_vectors_match_the_generator` checks that the files in
//! the repository are what this code makes. Expected results (problems, pointers,
//! lines, refusal stages) are written here by hand, never read back from the code
//! under test; `tests/own_vectors.rs` checks that the code agrees with them.
//!
//! File formats use the wire's names (DESIGN, "Signed messages"):
//! - `previews.json`: `[{preview, preview_sha256}]`;
//! - `decisions.json`: `[{public_key, message, signature}]` (base64 key and signature,
//!   UTF-8 message);
//! - `fail_payloads.json`: `[{why, payload_json, problem, pointer}]`;
//! - `fail_decisions.json`: `[{why, public_key, message, signature, refused_at}]`;
//! - `fail_keyrings.json`: `[{why, keyring, line}]`;
//! - `fail_policies.json`: `[{why, file, policy, keyring, line}]`.
// Some test binaries use only part of this (`policies.rs` uses GOOD_POLICY).
#![allow(dead_code)]

use crate::common::*;
use approval_core::json::MAX_DEPTH;
use approval_core::message::decision_message;
use approval_core::preview::Preview;
use approval_core::{Decision, Sha256Hex};
use ed25519_dalek::Signer;
use serde_json::{json, Value};

/// Every vector file: its name under `core/tests/vectors/` and its content.
pub fn all_files() -> Vec<(&'static str, Value)> {
    vec![
        ("previews.json", previews()),
        ("decisions.json", decisions()),
        ("reads.json", reads()),
        ("fail_payloads.json", fail_payloads()),
        ("fail_decisions.json", fail_decisions()),
        ("fail_keyrings.json", fail_keyrings()),
        ("fail_policies.json", fail_policies()),
    ]
}

/// The text written for a file: pretty JSON and a final newline.
pub fn file_text(v: &Value) -> String {
    serde_json::to_string_pretty(v).expect("values serialise") + "\n"
}

// ---------------------------------------------------------------------------
// previews.json
// ---------------------------------------------------------------------------

const SERVER: &str = "srv-7f3a9c0e12b4d5e6";

fn preview_value(n: usize, payload: Value, summary: &str) -> Value {
    json!({
        "v": 1,
        "server_id": SERVER,
        "proposal_id": format!("p-{n:04}"),
        "kind": "email.send",
        "payload": payload,
        "summary": summary,
        "requested_by": "agent-7",
        "created_at": "2026-11-30T00:00:00Z",
        "expires_at": "2026-11-30T00:30:00Z",
        "policy_sha256": standard_policy().sha256().to_hex(),
    })
}

/// The previews, as values (also used by `decisions.json` for their hashes).
pub fn preview_cases() -> Vec<Value> {
    let hostile = "\u{202E}fdp.exe\u{202C} \u{2028}\u{2029}\u{0}\u{1f}\u{7f}\u{200B}\u{200D}\u{FEFF}😀 \"quoted\" \\back\\ </script> A\u{30A} \u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467}";
    let all_controls: String = (0u8..0x20).map(char::from).collect();
    let mut deep = json!([]);
    for i in 0..40 {
        deep = json!({ format!("n{i}"): deep });
    }
    let mut cases = vec![
        preview_value(
            0,
            json!({"to": "cfo@example.com", "subject": "Q3 report", "body": "Hi,\nthe report is attached.\n"}),
            "Send the Q3 report to the CFO",
        ),
        preview_value(1, Value::Null, ""),
        preview_value(2, json!({"text": hostile, "to": "x@example.com"}), hostile),
        preview_value(
            3,
            json!([
                5e-324,
                1e21,
                1e20,
                1e-6,
                1e-7,
                1.7976931348623157e308,
                -1.7976931348623157e308,
                2.2250738585072014e-308,
                9007199254740992i64,
                -9007199254740992i64,
                0.1,
                0.30000000000000004,
                -0.0,
                0,
                1,
                -1,
                4.5,
                0.002,
                333333333.3333333,
                1.2345678901234568e20,
                1e22,
                123.456,
                -0.5,
                1795465850265754.2
            ]),
            "edge numbers",
        ),
        preview_value(
            4,
            json!({
                "\u{e9}": 1, "\u{1F600}": 2, "\u{FB33}": 3, "a": 4, "A": 5, "": 6, "aa": 7,
                "\u{7f}": 8, "\n": 9, "10": 10, "1": 11, "\u{2028}": 12, "\u{10FFFF}": 13,
                "\u{FFFF}": 14
            }),
            "keys sorted by UTF-16 code units",
        ),
        preview_value(5, deep, "nested forty deep"),
        json!({
            "v": 1,
            "server_id": "s".repeat(64),
            "proposal_id": "P".repeat(64),
            "kind": "a.b-c_d",
            "payload": {"ok": true},
            "summary": "😀".repeat(250),
            "requested_by": "local",
            "created_at": "1970-01-01T00:00:00Z",
            "expires_at": "9999-12-31T23:59:59Z",
            "policy_sha256": Sha256Hex::digest(b"").to_hex(),
        }),
        preview_value(
            7,
            json!((0..100).map(|i| i * i - 50).collect::<Vec<i64>>()),
            "a hundred integers",
        ),
        preview_value(8, json!({}), "   "),
        preview_value(9, json!([]), "\t\r\n"),
        preview_value(10, json!(all_controls), "every C0 control character"),
        preview_value(
            11,
            json!({"ok": true, "list": [false, null, {"x": []}, [[[]]], ""]}),
            "literals and empties",
        ),
        preview_value(
            12,
            json!({"a/b": {"~c": 1, "~0": 2, "~1": 3}}),
            "pointer characters in keys",
        ),
        preview_value(13, json!("é".repeat(10_000)), "a long string"),
        preview_value(
            14,
            json!({"amount": 1234.56, "rate": 0.0725, "qty": 3, "currency": "EUR"}),
            "money as numbers",
        ),
        preview_value(
            15,
            json!({"\u{0}": "\u{0}", "\\": "\\\\", "\"": "\"\""}),
            "escapes in keys",
        ),
    ];
    // One with another server, kind and policy, so hashes bind those too.
    let mut other = cases[0].clone();
    other["server_id"] = json!("srv-other");
    other["kind"] = json!("deploy.prod");
    other["policy_sha256"] = json!(Sha256Hex::digest(b"another policy").to_hex());
    cases.push(other);
    cases
}

fn previews() -> Value {
    Value::Array(
        preview_cases()
            .into_iter()
            .map(|v| {
                let p = Preview::from_value(&v).expect("generated previews are valid");
                assert_eq!(p.to_value(), v);
                json!({"preview": v, "preview_sha256": p.sha256().to_hex()})
            })
            .collect(),
    )
}

/// The hash of the `i`th preview case.
pub fn preview_hash(i: usize) -> Sha256Hex {
    Preview::from_value(&preview_cases()[i])
        .expect("valid")
        .sha256()
}

// ---------------------------------------------------------------------------
// decisions.json
// ---------------------------------------------------------------------------

/// (approver, decision, preview case, reason) for each signed decision.
pub fn decision_cases() -> Vec<(&'static str, Decision, usize, String)> {
    vec![
        ("alice", Decision::Approve, 0, String::new()),
        ("bob", Decision::Reject, 1, "Wrong recipient".into()),
        (
            "carol",
            Decision::Revoke,
            2,
            "Found a problem after approving.\nDo not send.\r\nThird line".into(),
        ),
        (
            "alice",
            Decision::ResolveSucceeded,
            3,
            "Checked the mailbox: it went out".into(),
        ),
        (
            "bob",
            Decision::ResolveFailed,
            4,
            "Bounce received ✉ — nicht zugestellt, 未送達".into(),
        ),
        (
            "carol",
            Decision::Approve,
            5,
            "\u{202E}txt.exe \u{2190} an override inside a reason is signed as is".into(),
        ),
        ("dave", Decision::Approve, 6, "é".repeat(1000)),
        ("erin", Decision::Reject, 7, "trailing newline\n".into()),
        (
            "alice",
            Decision::Approve,
            8,
            format!(
                "approval-v1\nreject\n{}\na message inside the reason is just text",
                preview_hash(9)
            ),
        ),
        ("bob", Decision::Revoke, 9, "😀".into()),
        ("carol", Decision::ResolveFailed, 10, "\n\n".into()),
        ("dave", Decision::ResolveSucceeded, 11, " ".into()),
    ]
}

fn decisions() -> Value {
    Value::Array(
        decision_cases()
            .into_iter()
            .map(|(who, d, i, reason)| {
                let h = preview_hash(i);
                let signed = sign(who, d, &h, &reason);
                assert_eq!(signed.verify_key(&public_key(who), &h), Ok(()));
                json!({
                    "public_key": public_key(who).to_base64(),
                    "message": decision_message(d, &h, &reason).expect("short reason"),
                    "signature": signed.signature().unwrap().to_base64(),
                })
            })
            .collect(),
    )
}

// ---------------------------------------------------------------------------
// reads.json
// ---------------------------------------------------------------------------

/// Signed reads: the exact message (`approval-v1-read\n<server_id>\n<unix_seconds>\n
/// <METHOD>\n<path and query>`) and the `Authorization` header a client sends.
fn reads() -> Value {
    let srv = approval_core::ServerId::parse(SERVER).expect("fixed id");
    let cases: [(&str, i64, &str, &str); 5] = [
        (
            "alice",
            1_795_996_800,
            "GET",
            "/v1/proposals?status=pending",
        ),
        (
            "bob",
            1_795_996_801,
            "GET",
            "/v1/proposals/p-0123456789abcdef0123456789abcdef",
        ),
        ("carol", 1_795_996_802, "GET", "/v1/events"),
        (
            "dave",
            1_795_996_803,
            "GET",
            "/v1/proposals/p-0123456789abcdef0123456789abcdef/receipt",
        ),
        (
            "erin",
            1_795_996_804,
            "GET",
            "/v1/proposals?status=all&limit=5",
        ),
    ];
    Value::Array(
        cases
            .into_iter()
            .map(|(who, at, method, pq)| {
                json!({
                    "public_key": public_key(who).to_base64(),
                    "server_id": SERVER,
                    "unix_seconds": at,
                    "method": method,
                    "path_and_query": pq,
                    "message": approval_core::message::read_message(&srv, at, method, pq),
                    "authorization": approval_core::message::sign_read(
                        &signing_key(who), &approver(who), &srv, at, method, pq,
                    ),
                })
            })
            .collect(),
    )
}

// ---------------------------------------------------------------------------
// fail_payloads.json
// ---------------------------------------------------------------------------

/// (why, payload text, problem name, pointer).
pub fn fail_payload_cases() -> Vec<(&'static str, String, &'static str, String)> {
    let s = |x: &str| x.to_owned();
    let deep = "[".repeat(MAX_DEPTH + 2) + &"]".repeat(MAX_DEPTH + 2);
    vec![
        ("integer 2^53 + 1", s(r#"{"amount": 9007199254740993}"#), "IntegerTooLarge", s("/amount")),
        ("integer -(2^53 + 1)", s("[-9007199254740993]"), "IntegerTooLarge", s("/0")),
        (
            "integer 2^64, nested",
            s(r#"{"a": {"b": [1, 2, {"c": 18446744073709551616}]}}"#),
            "IntegerTooLarge",
            s("/a/b/2/c"),
        ),
        ("integer with 40 digits", s("1234567890123456789012345678901234567890"), "IntegerTooLarge", s("")),
        (
            "2^53 + 1 written with a fraction: the double is 2^53",
            s("9007199254740993.0"),
            "LosesPrecision",
            s(""),
        ),
        (
            "the exact decimal value of the double nearest 0.1: JCS would print 0.1, so the text does not survive",
            s(r#"{"x": 0.1000000000000000055511151231257827021181583404541015625}"#),
            "LosesPrecision",
            s("/x"),
        ),
        (
            "halfway double 1795465850265754.25: JCS spells it ...754.2 (even digit), this text is the other 17-digit spelling",
            s("[1795465850265754.3]"),
            "LosesPrecision",
            s("/0"),
        ),
        ("pi to 21 digits", s(r#"{"pi": 3.14159265358979323846}"#), "LosesPrecision", s("/pi")),
        ("underflows to zero", s(r#"{"tiny": 1e-400}"#), "LosesPrecision", s("/tiny")),
        ("below the smallest subnormal", s("[2e-324]"), "LosesPrecision", s("/0")),
        ("overflows to infinity", s(r#"{"huge": 1e400}"#), "NotFinite", s("/huge")),
        ("overflows to minus infinity", s("[-1.8e308]"), "NotFinite", s("/0")),
        ("duplicate key", s(r#"{"to": "a@example.com", "to": "b@example.com"}"#), "DuplicateKey", s("/to")),
        ("duplicate key spelled with an escape", s(r#"{"a": 1, "\u0061": 2}"#), "DuplicateKey", s("/a")),
        ("duplicate key with the same value", s(r#"[{"k": 1}, {"k": 1, "k": 1}]"#), "DuplicateKey", s("/1/k")),
        (
            "duplicate key whose pointer needs escaping",
            s(r#"{"a/b": {"~": 1, "~": 2}}"#),
            "DuplicateKey",
            s("/a~1b/~0"),
        ),
        ("lone high surrogate", s(r#"{"t": "\ud800"}"#), "LoneSurrogate", s("/t")),
        ("lone low surrogate", s(r#"{"t": "x\udfff"}"#), "LoneSurrogate", s("/t")),
        ("surrogates in the wrong order", s(r#""\ude00\ud83d""#), "LoneSurrogate", s("")),
        ("high surrogate followed by a non-surrogate escape", s(r#"{"t": "\ud83d\u0041"}"#), "LoneSurrogate", s("/t")),
        ("lone surrogate in a key (reported at the object)", s(r#"{"o": {"\ud800": 1}}"#), "LoneSurrogate", s("/o")),
        ("nesting deeper than 128", deep, "TooDeep", "/0".repeat(MAX_DEPTH + 1)),
        ("trailing comma in an array", s("[1,]"), "Syntax", s("/1")),
        ("trailing comma in an object", s(r#"{"a": 1,}"#), "Syntax", s("")),
        ("NaN", s(r#"{"x": NaN}"#), "Syntax", s("/x")),
        ("Infinity", s("[Infinity]"), "Syntax", s("/0")),
        ("single quotes", s("{'a': 1}"), "Syntax", s("")),
        ("a comment", s("// c\n1"), "Syntax", s("")),
        ("leading zero", s("[01]"), "Syntax", s("")),
        ("leading plus", s("+1"), "Syntax", s("")),
        ("fraction without an integer part", s(".5"), "Syntax", s("")),
        ("fraction without digits", s("[1.]"), "Syntax", s("/0")),
        ("exponent without digits", s("[1e]"), "Syntax", s("/0")),
        ("hexadecimal", s("0x10"), "Syntax", s("")),
        ("invalid escape", s(r#"{"a": "\x41"}"#), "Syntax", s("/a")),
        ("short unicode escape", s(r#""\u12""#), "Syntax", s("")),
        ("raw tab in a string", s("{\"a\": \"x\ty\"}"), "Syntax", s("/a")),
        ("raw newline in a string", s("[\"x\ny\"]"), "Syntax", s("/0")),
        ("missing comma", s("[1 2]"), "Syntax", s("")),
        ("missing colon", s(r#"{"a" 1}"#), "Syntax", s("")),
        ("missing value", s(r#"{"a": }"#), "Syntax", s("/a")),
        ("empty text", s(""), "Syntax", s("")),
        ("only whitespace", s(" \n\t "), "Syntax", s("")),
        ("byte order mark", s("\u{FEFF}{}"), "Syntax", s("")),
        ("two values", s("1 2"), "Syntax", s("")),
        ("truncated literal", s("tru"), "Syntax", s("")),
        ("unterminated string", s(r#"{"a": "x"#), "Syntax", s("/a")),
        ("unclosed array", s("["), "Syntax", s("/0")),
        ("non-JSON whitespace (form feed)", s("\u{c}1"), "Syntax", s("")),
    ]
}

fn fail_payloads() -> Value {
    Value::Array(
        fail_payload_cases()
            .into_iter()
            .map(|(why, text, problem, pointer)| {
                json!({"why": why, "payload_json": text, "problem": problem, "pointer": pointer})
            })
            .collect(),
    )
}

// ---------------------------------------------------------------------------
// fail_decisions.json
// ---------------------------------------------------------------------------

/// A signed-decision case that must be refused.
pub struct FailDecision {
    /// What is wrong.
    pub why: String,
    /// Base64 public key.
    pub public_key: String,
    /// The message, UTF-8.
    pub message: String,
    /// Base64 signature (may be malformed on purpose).
    pub signature: String,
    /// Where we refuse it: `public_key` (the key is refused), `signature` (not
    /// base64 of 64 bytes), `message` (not a decision message we would build) or
    /// `verify` (`verify_strict` says no).
    pub refused_at: &'static str,
}

fn raw_sign(who: &str, msg: &str) -> [u8; 64] {
    signing_key(who).sign(msg.as_bytes()).to_bytes()
}

/// The refused signed decisions.
pub fn fail_decision_cases() -> Vec<FailDecision> {
    let h0 = preview_hash(0);
    let h1 = preview_hash(1);
    let approve0 = decision_message(Decision::Approve, &h0, "ok").unwrap();
    let sig = raw_sign("alice", &approve0);
    let alice = public_key("alice").to_base64();
    let case = |why: &str, pk: &str, msg: &str, sig: &[u8], at: &'static str| FailDecision {
        why: why.to_owned(),
        public_key: pk.to_owned(),
        message: msg.to_owned(),
        signature: b64(sig),
        refused_at: at,
    };
    let mut flipped = sig;
    flipped[40] ^= 0x10;
    let mut zero_r_s = [0u8; 64];
    zero_r_s[..32].copy_from_slice(&IDENTITY_POINT);
    let mut swapped = [0u8; 64];
    swapped[..32].copy_from_slice(&sig[32..]);
    swapped[32..].copy_from_slice(&sig[..32]);
    let mut high_bit = sig;
    high_bit[63] |= 0x80;
    let reject0 = decision_message(Decision::Reject, &h0, "ok").unwrap();
    let mixed_msg = decision_message(Decision::Approve, &h1, "").unwrap();
    let (mixed_key, mixed_sig) = sign_for_mixed_order_key("alice", mixed_msg.as_bytes());
    let upper = format!("approval-v1\napprove\n{}\nok", h0.to_hex().to_uppercase());
    let long = format!("approval-v1\napprove\n{h0}\n{}", "x".repeat(1001));
    let read = approval_core::message::read_message(
        &approval_core::ServerId::parse(SERVER).unwrap(),
        1_795_996_800,
        "GET",
        "/v1/proposals",
    );
    let v2 = format!("approval-v2\napprove\n{h0}\nok");
    let no_reason = format!("approval-v1\napprove\n{h0}");
    let unknown = format!("approval-v1\napproved\n{h0}\nok");
    let cases = vec![
        case("signed by alice, presented with bob's key", &public_key("bob").to_base64(), &approve0, &sig, "verify"),
        case("an approval presented as a rejection", &alice, &reject0, &sig, "verify"),
        case(
            "signed for one preview hash, presented for another",
            &alice,
            &decision_message(Decision::Approve, &h1, "ok").unwrap(),
            &sig,
            "verify",
        ),
        case(
            "the reason changed by one character",
            &alice,
            &decision_message(Decision::Approve, &h0, "ok.").unwrap(),
            &sig,
            "verify",
        ),
        case(
            "a newline added after the reason",
            &alice,
            &decision_message(Decision::Approve, &h0, "ok\n").unwrap(),
            &sig,
            "verify",
        ),
        case("one bit of S flipped", &alice, &approve0, &flipped, "verify"),
        case("non-canonical S (S + L): the malleable twin of a valid signature", &alice, &approve0, &add_l_to_s(&sig), "verify"),
        case("S with its top bit set", &alice, &approve0, &high_bit, "verify"),
        case("R and S swapped", &alice, &approve0, &swapped, "verify"),
        case("all-zero signature", &alice, &approve0, &[0u8; 64], "verify"),
        case(
            "small-order key (identity) with R = identity, S = 0: plain verify accepts this for any message",
            &b64(&IDENTITY_POINT),
            &approve0,
            &zero_r_s,
            "public_key",
        ),
        case("small-order key of order 8", &b64(&ORDER_8_POINT), &approve0, &zero_r_s, "public_key"),
        case(
            "mixed-order key (alice's key + the point of order 2), with a signature by alice's secret that verify_strict accepts",
            &b64(&mixed_key),
            &mixed_msg,
            &mixed_sig,
            "public_key",
        ),
        case("signature of 63 bytes", &alice, &approve0, &sig[..63], "signature"),
        case("signature of 65 bytes", &alice, &approve0, &[&sig[..], &[0u8]].concat(), "signature"),
        case("signed by alice over an uppercase hash", &alice, &upper, &raw_sign("alice", &upper), "message"),
        case("signed by alice, reason over 1000 characters", &alice, &long, &raw_sign("alice", &long), "message"),
        case("a signed read presented as a decision", &alice, &read, &raw_sign("alice", &read), "message"),
        case("another protocol version", &alice, &v2, &raw_sign("alice", &v2), "message"),
        case("no reason line", &alice, &no_reason, &raw_sign("alice", &no_reason), "message"),
        case("unknown decision word", &alice, &unknown, &raw_sign("alice", &unknown), "message"),
    ];
    let mut cases = cases;
    cases.push(FailDecision {
        why: "signature without base64 padding".into(),
        public_key: alice.clone(),
        message: approve0.clone(),
        signature: b64(&sig).trim_end_matches('=').to_owned(),
        refused_at: "signature",
    });
    cases.push(FailDecision {
        why: "signature in base64 with non-zero unused bits (a second spelling)".into(),
        public_key: alice.clone(),
        message: approve0.clone(),
        signature: b64_with_an_unused_bit_set(&b64(&sig)),
        refused_at: "signature",
    });
    cases.push(FailDecision {
        why: "public key without base64 padding".into(),
        public_key: alice.trim_end_matches('=').to_owned(),
        message: approve0.clone(),
        signature: b64(&sig),
        refused_at: "public_key",
    });
    cases
}

fn fail_decisions() -> Value {
    Value::Array(
        fail_decision_cases()
            .into_iter()
            .map(|c| {
                json!({
                    "why": c.why,
                    "public_key": c.public_key,
                    "message": c.message,
                    "signature": c.signature,
                    "refused_at": c.refused_at,
                })
            })
            .collect(),
    )
}

// ---------------------------------------------------------------------------
// fail_keyrings.json
// ---------------------------------------------------------------------------

/// (why, keyring text, line to fix).
pub fn fail_keyring_cases() -> Vec<(&'static str, String, usize)> {
    let good = keyring_text(&["alice", "bob"]);
    let carol = public_key("carol").to_base64();
    let line = |name: &str, key: &[u8]| format!("{name} ed25519 {}\n", b64(key));
    let bad_bits = b64_with_an_unused_bit_set(&carol);
    let mut y_p_plus = [0xffu8; 32];
    y_p_plus[31] = 0x7f;
    // p + 4: a second spelling of y = 4, a point of large order.
    y_p_plus[0] = 0xed + 4;
    let off_curve = {
        let mut b = [0u8; 32];
        b[0] = 2;
        b
    };
    vec![
        ("two fields", format!("{good}carol ed25519\n"), 3),
        (
            "a trailing comment is a fourth field",
            format!("{good}carol ed25519 {carol} # laptop\n"),
            3,
        ),
        (
            "OpenSSH algorithm name",
            format!("{good}carol ssh-ed25519 {carol}\n"),
            3,
        ),
        (
            "algorithm in capitals",
            format!("carol ED25519 {carol}\n"),
            1,
        ),
        (
            "comments and blank lines count as lines",
            format!("# team\n\n{good}\ncarol rsa {carol}\n"),
            6,
        ),
        (
            "name with a non-ASCII letter",
            format!("{good}c\u{e4}rol ed25519 {carol}\n"),
            3,
        ),
        (
            "name starting with a dash",
            format!("-carol ed25519 {carol}\n"),
            1,
        ),
        (
            "name of 65 characters",
            format!("{} ed25519 {carol}\n", "c".repeat(65)),
            1,
        ),
        ("key not base64", format!("{good}carol ed25519 !!!!\n"), 3),
        (
            "key of 31 bytes",
            format!("{good}{}", line("carol", &[9; 31])),
            3,
        ),
        (
            "key of 33 bytes",
            format!("{good}{}", line("carol", &[9; 33])),
            3,
        ),
        (
            "key without padding",
            format!("{good}carol ed25519 {}\n", carol.trim_end_matches('=')),
            3,
        ),
        (
            "key in base64 with non-zero unused bits",
            format!("{good}carol ed25519 {bad_bits}\n"),
            3,
        ),
        (
            "small-order key: the identity",
            format!("{good}{}", line("mallory", &IDENTITY_POINT)),
            3,
        ),
        (
            "small-order key: order 2",
            format!("{good}{}", line("mallory", &ORDER_2_POINT)),
            3,
        ),
        (
            "small-order key: order 8",
            format!("{good}{}", line("mallory", &ORDER_8_POINT)),
            3,
        ),
        (
            "small-order key: order 4 (all zero bytes)",
            format!("{good}{}", line("mallory", &[0; 32])),
            3,
        ),
        (
            "mixed-order key: alice's key plus a point of order 2, usable by alice's secret",
            format!(
                "{good}{}",
                line("mallory", &mixed_order_key("alice", &ORDER_2_POINT))
            ),
            3,
        ),
        (
            "mixed-order key: carol's key plus a point of order 8",
            line("carol", &mixed_order_key("carol", &ORDER_8_POINT)),
            1,
        ),
        (
            "non-canonical encoding (y = p + 4)",
            format!("{good}{}", line("mallory", &y_p_plus)),
            3,
        ),
        (
            "not a point on the curve",
            format!("{good}{}", line("mallory", &off_curve)),
            3,
        ),
        (
            "the same name twice",
            format!("{good}alice ed25519 {carol}\n"),
            3,
        ),
        (
            "the same key under a second name: one key cannot count as two approvers",
            format!(
                "{good}# bob's laptop\nbobby ed25519 {}\n",
                public_key("bob")
            ),
            4,
        ),
        (
            "CRLF line endings, error on line 3",
            format!("{}x\r\n", good.replace('\n', "\r\n")),
            3,
        ),
    ]
}

fn fail_keyrings() -> Value {
    Value::Array(
        fail_keyring_cases()
            .into_iter()
            .map(|(why, text, line)| json!({"why": why, "keyring": text, "line": line}))
            .collect(),
    )
}

// ---------------------------------------------------------------------------
// fail_policies.json
// ---------------------------------------------------------------------------

/// The good policy the failing ones are edited from. Lines:
/// 1 kind, 2 description, 3 quorum, 4 approvers, 5 vetoes, 6 ttl,
/// 7 execute_within, 8 max_payload_bytes, 9 [[require]], 10 group, 11 count,
/// 12 [payload_schema], 13 type, 14 required, 15 [executor], 16 type.
pub const GOOD_POLICY: &str = r#"kind = "email.send"
description = "Send an email from the team account"
quorum = 2
approvers = ["alice", "bob", "carol"]
vetoes = 1
ttl = "30m"
execute_within = "10m"
max_payload_bytes = 65536
[[require]]
group = ["carol"]
count = 1
[payload_schema]
type = "object"
required = ["to", "subject"]
[executor]
type = "note"
"#;

/// (why, file name, policy text, line to fix). The keyring is alice, bob, carol.
pub fn fail_policy_cases() -> Vec<(&'static str, &'static str, String, usize)> {
    let g = GOOD_POLICY;
    let r = |from: &str, to: &str| {
        assert!(g.contains(from), "{from}");
        g.replacen(from, to, 1)
    };
    let f = "email.send.toml";
    vec![
        ("quorum 0", f, r("quorum = 2", "quorum = 0"), 3),
        ("quorum above the number of approvers", f, r("quorum = 2", "quorum = 4"), 3),
        ("quorum negative", f, r("quorum = 2", "quorum = -1"), 3),
        ("quorum as a string", f, r("quorum = 2", "quorum = \"2\""), 3),
        ("vetoes 0", f, r("vetoes = 1", "vetoes = 0"), 5),
        ("vetoes above the number of approvers", f, r("vetoes = 1", "vetoes = 4"), 5),
        ("no approvers", f, r(r#"approvers = ["alice", "bob", "carol"]"#, "approvers = []"), 4),
        ("an approver listed twice", f, r(r#"["alice", "bob", "carol"]"#, r#"["alice", "bob", "carol", "bob"]"#), 4),
        ("an approver not in the keyring", f, r(r#""carol"]"#, r#""carol", "dave"]"#), 4),
        ("an approver name with a space", f, r(r#""bob""#, r#""bo b""#), 4),
        ("a misspelt key", f, r("vetoes = 1", "vetoes = 1\nquorom = 2"), 6),
        ("ttl not a duration", f, r(r#"ttl = "30m""#, r#"ttl = "30 minutes""#), 6),
        ("ttl zero", f, r(r#"ttl = "30m""#, r#"ttl = "0s""#), 6),
        ("ttl over ten years", f, r(r#"ttl = "30m""#, r#"ttl = "4000d""#), 6),
        ("execute_within with a non-ASCII unit", f, r(r#"execute_within = "10m""#, r#"execute_within = "10µ""#), 7),
        ("max_payload_bytes below 2", f, r("max_payload_bytes = 65536", "max_payload_bytes = 1"), 8),
        ("max_payload_bytes over 4 MiB", f, r("max_payload_bytes = 65536", "max_payload_bytes = 4194305"), 8),
        ("empty require group", f, r(r#"group = ["carol"]"#, "group = []"), 9),
        ("require group names someone outside approvers", f, r(r#"group = ["carol"]"#, r#"group = ["dave"]"#), 9),
        ("require count above the group", f, r("count = 1", "count = 2"), 9),
        ("require count 0", f, r("count = 1", "count = 0"), 9),
        ("require group lists someone twice", f, r(r#"group = ["carol"]"#, r#"group = ["carol", "carol"]"#), 9),
        (
            "the second require block is the bad one",
            f,
            r("count = 1\n", "count = 1\n[[require]]\ngroup = [\"alice\"]\ncount = 3\n"),
            12,
        ),
        ("payload_schema does not compile", f, r(r#"type = "object""#, r#"type = "objekt""#), 12),
        (
            "inline payload_schema does not compile",
            f,
            r("max_payload_bytes = 65536\n", "max_payload_bytes = 65536\npayload_schema = { type = 7 }\n")
                .replacen("[payload_schema]\ntype = \"object\"\nrequired = [\"to\", \"subject\"]\n", "", 1),
            9,
        ),
        ("unknown executor type", f, r(r#"type = "note""#, r#"type = "shell""#), 16),
        ("note dir empty", f, r("type = \"note\"\n", "type = \"note\"\ndir = \"\"\n"), 17),
        (
            "command program not absolute (the schema's own `type` line comes first)",
            f,
            r("type = \"note\"\n", "type = \"command\"\nprogram = \"ls\"\n"),
            17,
        ),
        (
            "command timeout over 1h",
            f,
            r("type = \"note\"\n", "type = \"command\"\nprogram = \"/bin/true\"\ntimeout = \"2h\"\n"),
            18,
        ),
        (
            "webhook URL not http(s)",
            f,
            r("type = \"note\"\n", "type = \"webhook\"\nurl = \"ftp://example.com/hook\"\n"),
            17,
        ),
        (
            "webhook header the server sets",
            f,
            r(
                "type = \"note\"\n",
                "type = \"webhook\"\nurl = \"https://example.com/hook\"\n[executor.headers]\nX-Team = \"ops\"\nContent-Type = \"text/plain\"\n",
            ),
            20,
        ),
        (
            "webhook header name with a space",
            f,
            r(
                "type = \"note\"\n",
                "type = \"webhook\"\nurl = \"https://example.com/hook\"\nheaders = { \"X Team\" = \"ops\" }\n",
            ),
            18,
        ),
        ("no executor", f, r("[executor]\ntype = \"note\"\n", ""), 1),
        ("executor without a type", f, r("type = \"note\"\n", ""), 15),
        ("kind does not match the file name", "email.sned.toml", g.to_owned(), 1),
        ("kind not a valid name", "email send.toml", r(r#"kind = "email.send""#, r#"kind = "email send""#), 1),
        ("TOML syntax error", f, r(r#"ttl = "30m""#, r#"ttl = "30m"#), 6),
        ("a key given twice", f, r("vetoes = 1", "vetoes = 1\nquorum = 3"), 6),
    ]
}

/// The keyring the policy cases are checked against.
pub fn fail_policy_keyring() -> String {
    keyring_text(&["alice", "bob", "carol"])
}

fn fail_policies() -> Value {
    let keyring = fail_policy_keyring();
    Value::Array(
        fail_policy_cases()
            .into_iter()
            .map(|(why, file, policy, line)| {
                json!({"why": why, "file": file, "policy": policy, "keyring": keyring, "line": line})
            })
            .collect(),
    )
}
