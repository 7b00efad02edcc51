//! Property tests: what must hold for every input, not just the ones we thought of.
//!
//! Signature verification is slow in debug builds (about 12 ms), so the
//! properties that verify run fewer cases than the pure-JSON ones.

mod common;

use approval_core::json::{self, MAX_SAFE_INTEGER};
use approval_core::keyring::KeyringError;
use approval_core::preview::Preview;
use approval_core::quorum::Ignored;
use approval_core::{
    evaluate, verify_receipt, ApproverName, Decision, Keyring, QuorumOutcome, Receipt, Sha256Hex,
    SignedDecision, Timestamp,
};
use common::*;
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use std::sync::OnceLock;

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

/// Strings with the characters that break naive JSON handling.
fn arb_string() -> impl Strategy<Value = String> {
    let tricky = prop_oneof![
        Just('\u{0}'),
        Just('\u{1f}'),
        Just('"'),
        Just('\\'),
        Just('/'),
        Just('\u{7f}'),
        Just('\u{2028}'),
        Just('\u{202E}'),
        Just('\u{FEFF}'),
        Just('é'),
        Just('😀'),
        Just('\u{10FFFF}'),
        any::<char>(),
    ];
    prop_oneof![
        "[a-z]{0,6}",
        any::<String>(),
        proptest::collection::vec(tricky, 0..8).prop_map(|v| v.into_iter().collect()),
    ]
}

/// Numbers JCS carries exactly: safe integers and finite doubles.
fn arb_number() -> impl Strategy<Value = Value> {
    let max = MAX_SAFE_INTEGER as i64;
    prop_oneof![
        (-max..=max).prop_map(|i| json!(i)),
        (-1000i64..1000).prop_map(|i| json!(i)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        prop::sample::select(vec![
            5e-324,
            1e21,
            1e20,
            -0.0,
            0.1,
            1.7976931348623157e308,
            2.2250738585072014e-308,
            9007199254740992.0,
            123456789012345680000.0,
            1e-7,
        ])
        .prop_map(|f: f64| json!(f)),
    ]
}

/// Any JSON value that JCS can carry exactly.
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        arb_number(),
        arb_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(arb_string(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn arb_token(extra: &'static str) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("[a-zA-Z0-9][a-zA-Z0-9{extra}]{{0,24}}"))
        .expect("valid regex")
}

fn arb_time() -> impl Strategy<Value = Timestamp> {
    (0i64..=253_402_300_799).prop_map(Timestamp::from_unix)
}

fn arb_preview() -> impl Strategy<Value = Preview> {
    (
        arb_token("_-"),
        arb_token("_-"),
        arb_token("._-"),
        arb_json(),
        arb_string(),
        arb_token("._-"),
        arb_time(),
        arb_time(),
        any::<[u8; 32]>(),
    )
        .prop_map(
            |(server, proposal, kind, payload, summary, agent, c, e, h)| {
                Preview::from_value(&json!({
                    "v": 1,
                    "server_id": server,
                    "proposal_id": proposal,
                    "kind": kind,
                    "payload": payload,
                    "summary": summary,
                    "requested_by": agent,
                    "created_at": c.to_rfc3339(),
                    "expires_at": e.to_rfc3339(),
                    "policy_sha256": Sha256Hex::digest(&h).to_hex(),
                }))
                .expect("generated previews are valid")
            },
        )
}

// ---------------------------------------------------------------------------
// Writing JSON text in many spellings
// ---------------------------------------------------------------------------

/// A small deterministic generator, seeded by proptest.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn ws(r: &mut Rng, out: &mut String) {
    for _ in 0..r.below(3) {
        out.push([' ', '\t', '\n', '\r'][r.below(4) as usize]);
    }
}

fn hex4(r: &mut Rng, unit: u16) -> String {
    let h = format!("{unit:04x}");
    if r.below(2) == 0 {
        h.to_uppercase()
    } else {
        h
    }
}

/// A JSON string literal, each character spelt plainly, as a short escape or as
/// `\uXXXX` (surrogate pairs above the BMP), hex digits in either case.
fn write_string(s: &str, r: &mut Rng, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match r.below(4) {
            0 => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str("\\u");
                    out.push_str(&hex4(r, *u));
                }
            }
            1 if c == '/' => out.push_str("\\/"),
            _ => {
                let lit = serde_json::to_string(&c.to_string()).unwrap();
                out.push_str(&lit[1..lit.len() - 1]);
            }
        }
    }
    out.push('"');
}

/// A number as its canonical (JCS) digits, spelt plainly or in exponent form,
/// or for integers with a fraction or an exponent: all the same value.
///
/// The digits are always the canonical ones: `parse_exact` accepts a double only
/// in the decimal JCS will sign, and where a double lies halfway between two
/// shortest decimals Rust's `{:e}` picks the other one (a case CI's random
/// sample found), so Rust's formatter is no source of spellings here.
fn write_number(n: &serde_json::Number, r: &mut Rng, out: &mut String) {
    if let Some(i) = n.as_i64() {
        match r.below(4) {
            0 => out.push_str(&format!("{i}.0")),
            1 => out.push_str(&format!("{i}e0")),
            2 => out.push_str(&format!("{i}E+0")),
            _ => out.push_str(&i.to_string()),
        }
    } else {
        let canonical = json::canonical_bytes(&Value::Number(n.clone()));
        let canonical = String::from_utf8(canonical).unwrap();
        match r.below(3) {
            0 => out.push_str(&exponent_form(&canonical, "e")),
            1 => out.push_str(&exponent_form(&canonical, "E+")),
            // JCS writes integral doubles below 1e21 as integers, which beyond
            // 2^53 `parse_exact` reads as integers and refuses: keep it a double.
            _ if !canonical.contains(['.', 'e']) => out.push_str(&format!("{canonical}.0")),
            _ => out.push_str(&canonical),
        }
    }
}

/// `d.ddd<e>X` for a plain or exponent decimal (`-0.00125` -> `-1.25e-3`).
fn exponent_form(decimal: &str, e: &str) -> String {
    let (sign, rest) = match decimal.strip_prefix('-') {
        Some(r) => ("-", r),
        None => ("", decimal),
    };
    let (mantissa, exp) = match rest.split_once(['e', 'E']) {
        Some((m, x)) => (m, x.trim_start_matches('+').parse::<i64>().unwrap()),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int}{frac}");
    let lead = digits.len() - digits.trim_start_matches('0').len();
    let digits = digits.trim_start_matches('0').trim_end_matches('0');
    if digits.is_empty() {
        return format!("{sign}0{e}0");
    }
    // The first significant digit's power of ten.
    let power = int.len() as i64 - 1 - lead as i64 + exp;
    let (first, tail) = digits.split_at(1);
    let tail = if tail.is_empty() {
        String::new()
    } else {
        format!(".{tail}")
    };
    let power = if e == "E+" && power < 0 {
        format!("E{power}")
    } else {
        format!("{e}{power}")
    };
    format!("{sign}{first}{tail}{power}")
}

/// JSON text for `v` with object members shuffled and whitespace sprinkled.
fn render(v: &Value, r: &mut Rng, out: &mut String) {
    ws(r, out);
    match v {
        Value::Object(m) => {
            out.push('{');
            let mut entries: Vec<_> = m.iter().collect();
            for i in (1..entries.len()).rev() {
                entries.swap(i, r.below(i as u64 + 1) as usize);
            }
            for (i, (k, x)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                ws(r, out);
                write_string(k, r, out);
                ws(r, out);
                out.push(':');
                render(x, r, out);
            }
            ws(r, out);
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                render(x, r, out);
            }
            ws(r, out);
            out.push(']');
        }
        Value::String(s) => write_string(s, r, out),
        Value::Number(n) => write_number(n, r, out),
        other => out.push_str(&other.to_string()),
    }
    ws(r, out);
}

fn spelling(v: &Value, seed: u64) -> String {
    let mut out = String::new();
    render(v, &mut Rng(seed | 1), &mut out);
    out
}

// ---------------------------------------------------------------------------
// JSON and previews
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    #[test]
    fn canonical_bytes_ignore_key_order_whitespace_and_spelling(
        v in arb_json(), s1 in any::<u64>(), s2 in any::<u64>()
    ) {
        let want = json::canonical_bytes(&v);
        prop_assert_eq!(json::canonical_bytes(&v), want.clone(), "deterministic");
        for seed in [s1, s2] {
            let text = spelling(&v, seed);
            let parsed = json::parse_exact(&text)
                .map_err(|e| TestCaseError::fail(format!("{e} in {text:?}")))?;
            prop_assert_eq!(json::canonical_bytes(&parsed), want.clone(), "{}", text);
        }
    }

    /// Our canonical writer and the general-purpose canonicaliser agree byte for
    /// byte on any value, including member names that sort differently in UTF-16
    /// than in UTF-8, and integers beyond 2^53 (formatted as doubles).
    #[test]
    fn canonical_bytes_agree_with_serde_json_canonicalizer(
        v in arb_json(), big in any::<u64>(), neg in any::<i64>()
    ) {
        let v = json!({"v": v, "big": big, "neg": neg, "\u{FF61}": 1, "\u{1F600}": 2, "\u{E000}": [big]});
        prop_assert_eq!(
            String::from_utf8(json::canonical_bytes(&v)).unwrap(),
            String::from_utf8(serde_json_canonicalizer::to_vec(&v).unwrap()).unwrap()
        );
    }

    #[test]
    fn parse_exact_round_trips_serde_json_text(v in arb_json()) {
        let compact = serde_json::to_string(&v).unwrap();
        prop_assert_eq!(json::parse_exact(&compact), Ok(v.clone()));
        let pretty = serde_json::to_string_pretty(&v).unwrap();
        prop_assert_eq!(json::parse_exact(&pretty), Ok(v.clone()));
        prop_assert_eq!(json::check_value(&v), Ok(()));
        // Canonical text is JSON that means the same value (read laxly: JCS
        // spells some large doubles as integers, which parse_exact refuses).
        let canon = json::canonical_bytes(&v);
        let back: Value = serde_json::from_slice(&canon).unwrap();
        prop_assert_eq!(json::canonical_bytes(&back), canon);
    }

    #[test]
    fn parse_exact_never_panics_on_arbitrary_text(s in any::<String>()) {
        let _ = json::parse_exact(&s);
        let _ = json::parse_collecting(&s);
    }

    #[test]
    fn parse_exact_agrees_with_serde_json_on_what_is_json(s in "[\\[\\]{}\":,0-9eE.+\\- tfnrul\\\\a]{0,24}") {
        // Wherever we accept, serde_json accepts the same value.
        if let Ok(v) = json::parse_exact(&s) {
            let theirs: Value = serde_json::from_str(&s)
                .map_err(|e| TestCaseError::fail(format!("{s:?}: we accept, serde_json says {e}")))?;
            prop_assert_eq!(json::canonical_bytes(&v), json::canonical_bytes(&theirs));
        }
    }

    #[test]
    fn integers_beyond_2_pow_53_are_always_refused(m in (MAX_SAFE_INTEGER + 1)..u64::MAX, neg in any::<bool>()) {
        let text = format!("{{\"n\":{}{m}}}", if neg { "-" } else { "" });
        let e = json::parse_exact(&text).unwrap_err();
        prop_assert_eq!(e.pointer.as_str(), "/n");
        prop_assert_eq!(e.problem, json::Problem::IntegerTooLarge);
    }

    #[test]
    fn preview_value_round_trip(p in arb_preview()) {
        let v = p.to_value();
        prop_assert_eq!(Preview::from_value(&v), Ok(p.clone()));
        let text = serde_json::to_string(&v).unwrap();
        prop_assert_eq!(Preview::from_json_text(&text), Ok(p.clone()));
        prop_assert_eq!(p.canonical_bytes(), json::canonical_bytes(&v));
        prop_assert_eq!(p.sha256(), Sha256Hex::digest(&p.canonical_bytes()));
    }
}

// ---------------------------------------------------------------------------
// Single-bit changes
// ---------------------------------------------------------------------------

fn flip_bit(bytes: &[u8], bit: usize) -> Vec<u8> {
    let mut b = bytes.to_vec();
    if !b.is_empty() {
        let bit = bit % (b.len() * 8);
        b[bit / 8] ^= 1 << (bit % 8);
    }
    b
}

/// Flips one bit of one field. `None` when the result is not a preview at all
/// (refused before any hash is taken) or is the same preview.
fn mutate(p: &Preview, field: u8, bit: usize) -> Option<Preview> {
    let mut v = p.to_value();
    let flip_str = |s: &str| String::from_utf8(flip_bit(s.as_bytes(), bit)).ok();
    let key = [
        "v",
        "server_id",
        "proposal_id",
        "kind",
        "payload",
        "summary",
        "requested_by",
        "created_at",
        "expires_at",
        "policy_sha256",
    ][field as usize % 10];
    match key {
        "v" => v["v"] = json!(1u64 ^ (1 << (bit % 32))),
        "created_at" | "expires_at" => {
            let t = Timestamp::parse(v[key].as_str()?).ok()?;
            v[key] = json!(Timestamp::from_unix(t.unix() ^ (1 << (bit % 38))).to_rfc3339());
        }
        "policy_sha256" => {
            let h = Sha256Hex::parse(v[key].as_str()?).ok()?;
            let flipped: [u8; 32] = flip_bit(h.as_bytes(), bit).try_into().ok()?;
            v[key] = json!(hex::encode(flipped));
        }
        "payload" => {
            let text = serde_json::to_string(&v["payload"]).ok()?;
            let changed = flip_str(&text)?;
            v["payload"] = json::parse_exact(&changed).ok()?;
        }
        _ => v[key] = json!(flip_str(v[key].as_str()?)?),
    }
    let q = Preview::from_value(&v).ok()?;
    (q != *p).then_some(q)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    #[test]
    fn any_single_bit_change_to_a_preview_field_changes_the_hash_and_voids_signatures(
        p in arb_preview(), field in any::<u8>(), bit in any::<usize>()
    ) {
        let h = p.sha256();
        let d = approve("alice", &h);
        if let Some(q) = mutate(&p, field, bit) {
            prop_assert_ne!(q.sha256(), h);
            prop_assert!(d.verify_key(&public_key("alice"), &q.sha256()).is_err());
        }
    }

    #[test]
    fn any_single_bit_change_to_a_signed_decision_fails_verification(
        reason in "(?s).{0,40}",
        d in 0usize..5,
        hash in any::<[u8; 32]>(),
        what in 0u8..4,
        bit in any::<usize>(),
        other in 1usize..5,
    ) {
        let h = Sha256Hex::digest(&hash);
        let pk = public_key("bob");
        let signed = sign("bob", Decision::ALL[d], &h, &reason);
        prop_assert_eq!(signed.verify_key(&pk, &h), Ok(()));
        let mut bad = signed.clone();
        let mut bad_hash = h;
        match what {
            0 => {
                let s: [u8; 64] = flip_bit(&signed.signature().unwrap().0, bit).try_into().unwrap();
                bad.proof = approval_core::message::Proof::Signature(approval_core::message::Signature(s));
            }
            1 => match String::from_utf8(flip_bit(reason.as_bytes(), bit)) {
                Ok(r) if !reason.is_empty() => bad.reason = r,
                // Not UTF-8 (refused before verification) or nothing to flip.
                _ => return Ok(()),
            },
            2 => bad.decision = Decision::ALL[(d + other) % 5],
            _ => {
                bad_hash = Sha256Hex::parse(&hex::encode(flip_bit(h.as_bytes(), bit))).unwrap();
            }
        }
        prop_assert!(bad.verify_key(&pk, &bad_hash).is_err());
    }
}

// ---------------------------------------------------------------------------
// Quorum
// ---------------------------------------------------------------------------

const QUORUM_DECISIONS: [Decision; 3] = [Decision::Approve, Decision::Reject, Decision::Revoke];

/// Pre-signed decisions on one hash: `[name][decision][valid]`, where an invalid
/// one is signed for another hash.
fn signed_cache() -> &'static Vec<Vec<[SignedDecision; 2]>> {
    static CACHE: OnceLock<Vec<Vec<[SignedDecision; 2]>>> = OnceLock::new();
    CACHE.get_or_init(|| {
        let h = standard_preview().sha256();
        let other = Sha256Hex::digest(b"another preview");
        NAMES
            .iter()
            .map(|n| {
                QUORUM_DECISIONS
                    .iter()
                    .map(|d| [sign(n, *d, &other, ""), sign(n, *d, &h, "")])
                    .collect()
            })
            .collect()
    })
}

/// A random policy over a subset of the fixture approvers, and a keyring that
/// may miss some of them.
fn arb_setup() -> impl Strategy<Value = (approval_core::Policy, Keyring)> {
    (1u8..32, 0u8..32, any::<u64>()).prop_map(|(members, missing, r)| {
        let mut r = Rng(r | 1);
        let approvers: Vec<&str> = (0..5)
            .filter(|i| members & (1 << i) != 0)
            .map(|i| NAMES[i])
            .collect();
        let n = approvers.len() as u64;
        let quorum = 1 + r.below(n) as u32;
        let vetoes = 1 + r.below(n) as u32;
        let group: Vec<&str> = approvers
            .iter()
            .copied()
            .filter(|_| r.below(2) == 0)
            .collect();
        let require: Vec<(&[&str], u32)> = if group.is_empty() {
            vec![]
        } else {
            vec![(&group[..], 1 + r.below(group.len() as u64) as u32)]
        };
        let p = policy(quorum, &approvers, vetoes, &require);
        let in_keyring: Vec<&str> = (0..5)
            .filter(|i| missing & (1 << i) == 0)
            .map(|i| NAMES[i])
            .collect();
        (p, keyring(&in_keyring))
    })
}

fn arb_decisions() -> impl Strategy<Value = Vec<SignedDecision>> {
    proptest::collection::vec((0usize..5, 0usize..3, prop::bool::weighted(0.85)), 0..6).prop_map(
        |v| {
            v.into_iter()
                .map(|(n, d, ok)| signed_cache()[n][d][usize::from(ok)].clone())
                .collect()
        },
    )
}

fn have(t: &approval_core::Tally) -> usize {
    t.approvals.len()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(24)))]

    #[test]
    fn quorum_is_monotone_in_valid_approvals(
        (policy, kr) in arb_setup(), ds in arb_decisions(), pick in any::<usize>()
    ) {
        let h = standard_preview().sha256();
        // Someone who may approve: in the policy and in the keyring.
        let eligible: Vec<usize> = (0..5)
            .filter(|i| policy.is_approver(&approver(NAMES[*i])) && kr.contains(&approver(NAMES[*i])))
            .collect();
        prop_assume!(!eligible.is_empty());
        let who = eligible[pick % eligible.len()];
        let before = evaluate(&policy, &kr, &h, &ds);
        let mut more = ds.clone();
        more.push(signed_cache()[who][0][1].clone());
        let after = evaluate(&policy, &kr, &h, &more);
        prop_assert!(have(&after) >= have(&before));
        match before.outcome {
            QuorumOutcome::Reached => prop_assert_eq!(&after.outcome, &QuorumOutcome::Reached),
            QuorumOutcome::Vetoed => prop_assert_eq!(&after.outcome, &QuorumOutcome::Vetoed),
            QuorumOutcome::Revoked => prop_assert_eq!(&after.outcome, &QuorumOutcome::Revoked),
            QuorumOutcome::Pending { .. } => {}
        }
        if let (QuorumOutcome::Pending { have: b, .. }, QuorumOutcome::Pending { have: a, .. }) =
            (&before.outcome, &after.outcome)
        {
            prop_assert!(a >= b);
        }
    }

    #[test]
    fn quorum_never_counts_a_key_twice(
        (policy, kr) in arb_setup(), ds in arb_decisions()
    ) {
        let h = standard_preview().sha256();
        let once = evaluate(&policy, &kr, &h, &ds);
        // Every counted approver is distinct, in the policy and in the keyring.
        let mut seen = std::collections::BTreeSet::new();
        for a in once.approvals.iter().chain(&once.rejections) {
            prop_assert!(policy.is_approver(a) && kr.contains(a));
        }
        for a in &once.approvals {
            prop_assert!(seen.insert(kr.key(a).unwrap().to_bytes()), "{} twice", a);
            prop_assert!(!once.rejections.contains(a), "{} approved and rejected", a);
        }
        // Sending everything again changes nothing, and the repeats are ignored.
        let mut twice = ds.clone();
        twice.extend(ds.iter().cloned());
        let t = evaluate(&policy, &kr, &h, &twice);
        prop_assert_eq!(&t.outcome, &once.outcome);
        prop_assert_eq!(&t.approvals, &once.approvals);
        prop_assert_eq!(&t.rejections, &once.rejections);
        prop_assert_eq!(&t.revocations, &once.revocations);
        for (i, why) in &t.ignored {
            if *i >= ds.len() && !once.ignored.iter().any(|(j, _)| *j == i - ds.len()) {
                prop_assert_eq!(*why, Ignored::DuplicateKey);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(32)))]

    #[test]
    fn one_key_under_two_names_is_refused_at_keyring_parse(
        key in 0usize..5,
        first in "[a-z][a-z0-9_.-]{0,10}",
        second in "[a-z][a-z0-9_.-]{0,10}",
        comments in 0usize..3,
        others in proptest::collection::btree_set(0usize..5, 0..4),
    ) {
        prop_assume!(first != second);
        let others: Vec<usize> = others.into_iter().filter(|o| *o != key).collect();
        let mut text = String::new();
        let mut line = 0;
        let mut push = |l: String, text: &mut String| {
            text.push_str(&l);
            text.push('\n');
            line += 1;
            line
        };
        let first_line = push(format!("{first} ed25519 {}", public_key(NAMES[key])), &mut text);
        for o in &others {
            push(format!("other-{o} ed25519 {}", public_key(NAMES[*o])), &mut text);
        }
        for _ in 0..comments {
            push("# a comment".into(), &mut text);
        }
        let second_line = push(format!("{second} ed25519 {}", public_key(NAMES[key])), &mut text);
        prop_assert_eq!(
            Keyring::parse(&text),
            Err(KeyringError::DuplicateKey { line: second_line, first: first_line, other: first.clone() })
        );
        let _ = ApproverName::parse(&second).unwrap();
    }
}

// ---------------------------------------------------------------------------
// Receipts
// ---------------------------------------------------------------------------

fn receipt_text() -> &'static (Receipt, String) {
    static R: OnceLock<(Receipt, String)> = OnceLock::new();
    R.get_or_init(|| {
        let p = standard_preview();
        let h = p.sha256();
        let r = Receipt::build(
            &p,
            &standard_policy(),
            &full_keyring(),
            &[
                sign("alice", Decision::Approve, &h, "Looks right ✓"),
                sign("carol", Decision::Approve, &h, "ok\nsecond line"),
            ],
        );
        let text = serde_json::to_string_pretty(&r).unwrap();
        assert!(verify_receipt(&r, &full_keyring(), None).is_ok());
        (r, text)
    })
}

fn is_json_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(128)))]

    #[test]
    fn any_single_byte_change_to_a_receipt_is_refused_or_insignificant(
        pos in any::<prop::sample::Index>(), byte in any::<u8>()
    ) {
        let (original, text) = receipt_text();
        let i = pos.index(text.len());
        prop_assume!(text.as_bytes()[i] != byte);
        let mut bytes = text.as_bytes().to_vec();
        bytes[i] = byte;
        // Not UTF-8: no receipt at all.
        let Ok(changed) = String::from_utf8(bytes) else { return Ok(()) };
        let Ok(r) = Receipt::from_json_text(&changed) else { return Ok(()) };
        if r == *original {
            // The identical receipt: only whitespace between tokens may change.
            prop_assert!(
                is_json_ws(text.as_bytes()[i]) && is_json_ws(byte),
                "byte {} {:?} -> {:?} gave the same receipt", i, text.as_bytes()[i] as char, byte as char
            );
        } else {
            prop_assert!(
                verify_receipt(&r, &full_keyring(), None).is_err(),
                "byte {} {:?} -> {:?} gave a different receipt that verifies", i, text.as_bytes()[i] as char, byte as char
            );
        }
    }
}

#[test]
fn bytes_spread_over_a_whole_receipt_are_each_refused_or_insignificant() {
    // The deterministic companion to the property above: every fifth byte of
    // the receipt, each with a different bit flipped. (Not every byte: reading a
    // receipt checks its keys and verifying it checks signatures, each a scalar
    // multiplication, slow in debug builds.)
    let (original, text) = receipt_text();
    let mut verified = 0;
    for i in (0..text.len()).step_by(5) {
        let mut bytes = text.as_bytes().to_vec();
        bytes[i] ^= 1 << (i / 5 % 7);
        let Ok(changed) = String::from_utf8(bytes) else {
            continue;
        };
        let Ok(r) = Receipt::from_json_text(&changed) else {
            continue;
        };
        if r == *original {
            assert!(is_json_ws(text.as_bytes()[i]), "byte {i}");
            continue;
        }
        verified += 1;
        assert!(
            verify_receipt(&r, &full_keyring(), None).is_err(),
            "byte {i}: {:?}",
            &changed[i.saturating_sub(20)..(i + 20).min(changed.len())]
        );
    }
    assert!(verified > 0);
}

// ---------------------------------------------------------------------------
// Parsers: total (never panic) and one spelling per value
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    #[test]
    fn every_parser_refuses_instead_of_panicking(
        s in prop_oneof![
            any::<String>(),
            "[0-9]{0,4}[smhdµé\u{301}ｍ]{0,2}",
            "[0-9T:Z-]{18,22}",
            "[a-z]{1,6} ed25519 [A-Za-z0-9+/=]{0,46}",
            "approval-v1\n[a-z-]{0,20}\n[0-9a-f]{0,66}\n.{0,8}",
        ]
    ) {
        use approval_core::keyring::SecretKey;
        use approval_core::message::{parse_decision_message, verify_read, Signature};
        let _ = Timestamp::parse(&s);
        let _ = approval_core::Seconds::parse(&s);
        let _ = Keyring::parse(&s);
        let _ = SecretKey::parse(&s);
        let _ = parse_decision_message(&s);
        let _ = Signature::parse(&s);
        let _ = approval_core::PublicKey::parse(&s);
        let _ = ApproverName::parse(&s);
        let _ = Sha256Hex::parse(&s);
        let _ = approval_core::Status::parse(&s);
        let _ = s.parse::<Decision>();
        let _ = Preview::from_json_text(&s);
        let _ = Receipt::from_json_text(&s);
        let _ = approval_core::Policy::parse_toml("x.toml", &s);
        let _ = verify_read(
            &full_keyring(),
            &approval_core::ServerId::parse("srv-1").unwrap(),
            &s,
            "GET",
            "/",
            common::t(0),
        );
    }

    #[test]
    fn times_and_durations_have_one_spelling(secs in 0i64..=253_402_300_799, d in 1u64..=(3660 * 86_400)) {
        let t = Timestamp::from_unix(secs);
        prop_assert_eq!(Timestamp::parse(&t.to_rfc3339()), Ok(t));
        let s = approval_core::Seconds::new(d);
        prop_assert_eq!(approval_core::Seconds::parse(&s.to_spec()), Ok(s));
        prop_assert_eq!(approval_core::Seconds::parse(&format!("{d}s")), Ok(s));
    }

    #[test]
    fn signatures_have_one_base64_spelling(bytes in any::<[u8; 32]>(), more in any::<[u8; 32]>()) {
        use approval_core::message::Signature;
        let mut raw = [0u8; 64];
        raw[..32].copy_from_slice(&bytes);
        raw[32..].copy_from_slice(&more);
        let s = Signature(raw);
        prop_assert_eq!(Signature::parse(&s.to_base64()), Ok(s));
        prop_assert!(Signature::parse(&b64_with_an_unused_bit_set(&s.to_base64())).is_err());
    }
}
