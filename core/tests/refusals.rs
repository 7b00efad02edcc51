//! Every refusal of the smaller pieces, each with its exact error: exact JSON,
//! previews, signed messages, identifiers and time.

mod common;

use approval_core::ids::{AgentName, IdError};
use approval_core::json::{self, PayloadError, Problem, MAX_DEPTH};
use approval_core::message::{
    check_reason, decision_message, parse_decision_message, MessageError, Signature,
    MAX_REASON_CHARS,
};
use approval_core::preview::{Preview, PreviewError};
use approval_core::time::TimeError;
use approval_core::{
    ApproverName, Decision, Kind, ProposalId, Seconds, ServerId, Sha256Hex, SignedDecision,
    Timestamp,
};
use common::*;
use serde_json::{json, Value};

fn refused(text: &str) -> PayloadError {
    json::parse_exact(text).expect_err(text)
}

// ---------------------------------------------------------------------------
// Exact JSON
// ---------------------------------------------------------------------------

#[test]
fn regression_parse_exact_refused_the_jcs_spelling_of_a_halfway_double() {
    // 1795465850265754.25 is a double, halfway between the two 17-digit
    // spellings ...754.2 and ...754.3. JCS (like ECMAScript) prints the even one,
    // ...754.2; Rust's formatter prints ...754.3. The exactness check compared
    // with Rust's spelling, so it refused the canonical text and accepted the
    // other, whose decimal value the canonical form (and the signature) changes.
    let jcs = "1795465850265754.2";
    let v = json::parse_exact(jcs).unwrap();
    assert_eq!(json::canonical_bytes(&v), jcs.as_bytes());
    assert_eq!(serde_json::to_string(&v).unwrap(), jcs);
    assert_eq!(
        refused("1795465850265754.3"),
        PayloadError {
            pointer: String::new(),
            problem: Problem::LosesPrecision
        }
    );
    // Both spell the same double: only the canonical one may be signed.
    assert_eq!(
        "1795465850265754.3".parse::<f64>().unwrap(),
        v.as_f64().unwrap()
    );
}

#[test]
fn every_canonical_number_spelling_is_accepted_back() {
    // For many doubles, including halfway cases, the canonical spelling parses
    // exactly and to the same value.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..20_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let f = if i % 2 == 0 {
            f64::from_bits(x)
        } else {
            // Values around 2^50..2^53, where halfway cases are common.
            (x >> 11) as f64 / 4.0
        };
        if !f.is_finite() {
            continue;
        }
        let canon = json::canonical_bytes(&json!(f));
        let text = std::str::from_utf8(&canon).unwrap();
        if text.len() > 1 && !text.contains(['.', 'e']) && f.abs() > 9007199254740992.0 {
            // An integral double below 1e21 printed as a big integer: refused
            // by design (see own_vectors::canonical_form_may_spell_large_doubles_as_integers).
            assert_eq!(refused(text).problem, Problem::IntegerTooLarge, "{text}");
            continue;
        }
        let back = json::parse_exact(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(back.as_f64(), Some(f), "{text}");
        assert_eq!(json::canonical_bytes(&back), canon);
    }
}

#[test]
fn problems_have_advice_and_messages() {
    let cases = [
        (
            "[9007199254740993]",
            Problem::IntegerTooLarge,
            "/0",
            "send it as a string",
        ),
        (
            "[0.10000000000000000001]",
            Problem::LosesPrecision,
            "/0",
            "send it as a string",
        ),
        (
            "[1e999]",
            Problem::NotFinite,
            "/0",
            "too large for a double",
        ),
        (
            r#"{"k":1,"k":2}"#,
            Problem::DuplicateKey("k".into()),
            "/k",
            "remove the duplicate",
        ),
        (
            r#"["\udead"]"#,
            Problem::LoneSurrogate,
            "/0",
            "unpaired surrogate",
        ),
    ];
    for (text, problem, pointer, advice) in cases {
        let e = refused(text);
        assert_eq!(
            e,
            PayloadError {
                pointer: pointer.into(),
                problem
            }
        );
        assert!(e.advice().contains(advice), "{e}");
        assert!(e.to_string().contains(&format!("at {pointer}: ")), "{e}");
    }
    let e = refused("[");
    assert!(
        matches!(e.problem, Problem::Syntax(ref m) if m.contains("at byte 1")),
        "{e}"
    );
    assert_eq!(e.advice(), "send valid JSON");
    let root = refused("9007199254740993");
    assert!(root.to_string().contains("at (root)"), "{root}");
    // The root is depth 0; a value at depth MAX_DEPTH is fine, one deeper is not.
    let nested = |n: usize| "[".repeat(n) + &"]".repeat(n);
    assert!(json::parse_exact(&nested(MAX_DEPTH + 1)).is_ok());
    let deep = refused(&nested(MAX_DEPTH + 2));
    assert_eq!(deep.problem, Problem::TooDeep);
    assert_eq!(deep.pointer, "/0".repeat(MAX_DEPTH + 1));
    assert_eq!(deep.advice(), "nest less deeply");
}

#[test]
fn parse_collecting_keeps_going_and_reports_in_order() {
    let p = json::parse_collecting(
        r#"{"a": 9007199254740993, "b": {"c": 1, "c": 2}, "d": "\ud800", "e": 1e400, "f": 0.30000000000000000001}"#,
    )
    .unwrap();
    let got: Vec<(&str, &Problem)> = p
        .problems
        .iter()
        .map(|e| (e.pointer.as_str(), &e.problem))
        .collect();
    assert_eq!(
        got,
        [
            ("/a", &Problem::IntegerTooLarge),
            ("/b/c", &Problem::DuplicateKey("c".into())),
            ("/d", &Problem::LoneSurrogate),
            ("/e", &Problem::NotFinite),
            ("/f", &Problem::LosesPrecision),
        ]
    );
    // Stand-ins: null for refused numbers, the first value for a duplicate key.
    assert_eq!(p.value["a"], Value::Null);
    assert_eq!(p.value["b"]["c"], json!(1));
    // A syntax error still stops it.
    assert!(matches!(
        json::parse_collecting("{\"a\": 9007199254740993,"),
        Err(PayloadError {
            problem: Problem::Syntax(_),
            ..
        })
    ));
}

#[test]
fn check_value_catches_what_survives_a_lax_parse() {
    assert_eq!(
        json::check_value(&json!({"a": [1, 2.5, "x", null]})),
        Ok(())
    );
    for (v, pointer) in [
        (json!({"a": [1, 9007199254740993u64]}), "/a/1"),
        (json!([-9007199254740993i64]), "/0"),
        (json!({"x/y": {"~": u64::MAX}}), "/x~1y/~0"),
    ] {
        assert_eq!(
            json::check_value(&v),
            Err(PayloadError {
                pointer: pointer.into(),
                problem: Problem::IntegerTooLarge
            })
        );
    }
    let mut deep = json!(1);
    for _ in 0..=MAX_DEPTH {
        deep = json!([deep]);
    }
    assert_eq!(
        json::check_value(&deep).unwrap_err().problem,
        Problem::TooDeep
    );
    assert_eq!(json::pointer_push("/a", "b/~c"), "/a/b~1~0c");
    assert_eq!(json::pointer_push("", ""), "/");
}

// ---------------------------------------------------------------------------
// Previews
// ---------------------------------------------------------------------------

fn preview_json() -> Value {
    standard_preview().to_value()
}

#[test]
fn preview_refusals_by_field() {
    let shape = |edit: &dyn Fn(&mut Value)| {
        let mut v = preview_json();
        edit(&mut v);
        Preview::from_value(&v)
    };
    let is_shape = |r: Result<Preview, PreviewError>, what: &str| {
        assert!(matches!(r, Err(PreviewError::Shape(_))), "{what}: {r:?}");
    };
    for key in [
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
    ] {
        is_shape(
            shape(&|v| {
                v.as_object_mut().unwrap().remove(key);
            }),
            key,
        );
    }
    is_shape(shape(&|v| v["extra"] = json!(null)), "extra field");
    is_shape(shape(&|v| v["v"] = json!("1")), "v as a string");
    is_shape(shape(&|v| v["v"] = json!(1.0)), "v as a double");
    is_shape(
        shape(&|v| v["server_id"] = json!("srv 1")),
        "server id with a space",
    );
    is_shape(
        shape(&|v| v["proposal_id"] = json!("p.1")),
        "proposal id with a dot",
    );
    is_shape(shape(&|v| v["kind"] = json!("")), "empty kind");
    is_shape(shape(&|v| v["summary"] = json!(null)), "summary null");
    is_shape(
        shape(&|v| v["requested_by"] = json!("agent\n")),
        "agent with newline",
    );
    is_shape(
        shape(&|v| v["created_at"] = json!("2026-11-30T00:00:00.5Z")),
        "fractional time",
    );
    is_shape(
        shape(&|v| v["expires_at"] = json!(1795998600)),
        "time as a number",
    );
    is_shape(
        shape(&|v| v["policy_sha256"] = json!(Sha256Hex::digest(b"x").to_hex().to_uppercase())),
        "uppercase hash",
    );
    is_shape(shape(&|v| *v = json!([])), "not an object");
    assert_eq!(shape(&|v| v["v"] = json!(0)), Err(PreviewError::Version(0)));
    assert_eq!(shape(&|v| v["v"] = json!(2)), Err(PreviewError::Version(2)));
    assert_eq!(
        shape(&|v| v["payload"] = json!({"n": [9007199254740993u64]})),
        Err(PreviewError::Payload(PayloadError {
            pointer: "/n/0".into(),
            problem: Problem::IntegerTooLarge
        }))
    );
}

#[test]
fn preview_text_is_read_exactly() {
    let text = serde_json::to_string(&preview_json()).unwrap();
    assert_eq!(Preview::from_json_text(&text).unwrap(), standard_preview());
    let dup = text.replacen("\"v\":1", "\"v\":1,\"v\":1", 1);
    assert_eq!(
        Preview::from_json_text(&dup),
        Err(PreviewError::Payload(PayloadError {
            pointer: "/v".into(),
            problem: Problem::DuplicateKey("v".into())
        }))
    );
    let imprecise = text.replacen("12.5", "12.50000000000000000001", 1);
    assert_eq!(
        Preview::from_json_text(&imprecise).unwrap_err(),
        PreviewError::Payload(PayloadError {
            pointer: "/payload/amount".into(),
            problem: Problem::LosesPrecision
        })
    );
    assert!(matches!(
        Preview::from_json_text("{"),
        Err(PreviewError::Payload(PayloadError {
            problem: Problem::Syntax(_),
            ..
        }))
    ));
    // Hash is independent of field order and spacing in the text.
    let pretty = serde_json::to_string_pretty(&preview_json()).unwrap();
    assert_eq!(
        Preview::from_json_text(&pretty).unwrap().sha256(),
        standard_preview().sha256()
    );
}

// ---------------------------------------------------------------------------
// Signed messages
// ---------------------------------------------------------------------------

#[test]
fn decision_words_are_exact() {
    for d in Decision::ALL {
        assert_eq!(d.as_str().parse::<Decision>(), Ok(d));
        assert_eq!(d.to_string(), d.as_str());
        assert_eq!(serde_json::to_value(d).unwrap(), json!(d.as_str()));
    }
    for bad in [
        "",
        "Approve",
        "APPROVE",
        "approve ",
        "approved",
        "resolve_succeeded",
        "resolve",
    ] {
        assert_eq!(
            bad.parse::<Decision>(),
            Err(MessageError::Decision(bad.into())),
            "{bad:?}"
        );
        assert!(serde_json::from_value::<Decision>(json!(bad)).is_err());
    }
}

#[test]
fn message_refusals() {
    let h = Sha256Hex::digest(b"x");
    let fmt = |s: &'static str| Err(MessageError::Format(s));
    assert_eq!(
        parse_decision_message(""),
        fmt("first line must be approval-v1")
    );
    assert_eq!(
        parse_decision_message("approval-v1-read\n1\nGET\n/"),
        fmt("first line must be approval-v1")
    );
    assert_eq!(
        parse_decision_message("approval-v1"),
        fmt("missing decision line")
    );
    assert_eq!(
        parse_decision_message("approval-v1\napprove"),
        fmt("missing hash line")
    );
    assert_eq!(
        parse_decision_message(&format!("approval-v1\napprove\n{h}")),
        fmt("missing reason line")
    );
    assert_eq!(
        parse_decision_message(&format!("approval-v1\nok\n{h}\n")),
        Err(MessageError::Decision("ok".into()))
    );
    assert_eq!(
        parse_decision_message("approval-v1\napprove\nabc\n"),
        Err(MessageError::Hash)
    );
    assert_eq!(
        parse_decision_message(&format!("approval-v1\r\napprove\n{h}\n")),
        fmt("first line must be approval-v1")
    );
    let long = "x".repeat(MAX_REASON_CHARS + 1);
    assert_eq!(
        parse_decision_message(&format!("approval-v1\napprove\n{h}\n{long}")),
        Err(MessageError::ReasonTooLong(1001))
    );
    // Characters, not bytes: 1000 emoji are fine.
    let emoji = "😀".repeat(MAX_REASON_CHARS);
    assert_eq!(check_reason(&emoji), Ok(()));
    assert_eq!(
        check_reason(&(emoji.clone() + "x")),
        Err(MessageError::ReasonTooLong(1001))
    );
    assert_eq!(
        decision_message(Decision::Approve, &h, &(emoji + "x")),
        Err(MessageError::ReasonTooLong(1001))
    );
    // The reason may hold anything else, including what looks like a message.
    let m = decision_message(Decision::Reject, &h, "\napproval-v1\napprove\n").unwrap();
    assert_eq!(
        parse_decision_message(&m).unwrap(),
        (Decision::Reject, h, "\napproval-v1\napprove\n".into())
    );
}

#[test]
fn signing_refuses_long_reasons_and_verification_rechecks_them() {
    let h = standard_preview().sha256();
    let long = "x".repeat(1001);
    assert_eq!(
        SignedDecision::sign(
            &signing_key("alice"),
            approver("alice"),
            Decision::Approve,
            &h,
            &long
        ),
        Err(MessageError::ReasonTooLong(1001))
    );
    // A decision that arrives with an over-long reason is refused as such,
    // whatever its signature.
    let mut d = approve("alice", &h);
    d.reason = long;
    assert_eq!(
        d.verify_key(&public_key("alice"), &h),
        Err(MessageError::ReasonTooLong(1001))
    );
}

#[test]
fn signature_encoding_refusals() {
    let sig = approve("alice", &standard_preview().sha256())
        .signature()
        .copied()
        .unwrap();
    let s = sig.to_base64();
    assert_eq!(Signature::parse(&s), Ok(sig));
    for bad in [
        String::new(),
        s.trim_end_matches('=').to_owned(),
        format!("{s}="),
        format!(" {s}"),
        s.replace('+', "-").replace('/', "_"),
        b64(&sig.0[..63]),
        b64(&[sig.0.as_slice(), &[0]].concat()),
        b64_with_an_unused_bit_set(&s),
    ] {
        if bad == s {
            continue;
        }
        assert_eq!(
            Signature::parse(&bad),
            Err(MessageError::SignatureEncoding),
            "{bad:?}"
        );
    }
}

#[test]
fn signed_decision_wire_form_is_strict() {
    let d = sign(
        "alice",
        Decision::Approve,
        &standard_preview().sha256(),
        "fine",
    );
    let v = serde_json::to_value(&d).unwrap();
    assert_eq!(
        sorted_keys(&v),
        ["approver", "decision", "reason", "signature"]
    );
    assert_eq!(
        serde_json::from_value::<SignedDecision>(v.clone()).unwrap(),
        d
    );
    let mut extra = v.clone();
    extra["preview_sha256"] = json!("00");
    assert!(serde_json::from_value::<SignedDecision>(extra).is_err());
    let mut bad_name = v.clone();
    bad_name["approver"] = json!("al ice");
    assert!(serde_json::from_value::<SignedDecision>(bad_name).is_err());
    let mut bad_sig = v.clone();
    bad_sig["signature"] = json!("AAAA");
    assert!(serde_json::from_value::<SignedDecision>(bad_sig).is_err());
    // A missing reason is the empty reason, and is signed as such.
    let mut no_reason =
        serde_json::to_value(approve("alice", &standard_preview().sha256())).unwrap();
    no_reason.as_object_mut().unwrap().remove("reason");
    let back: SignedDecision = serde_json::from_value(no_reason).unwrap();
    assert_eq!(back.reason, "");
    assert_eq!(
        back.verify_key(&public_key("alice"), &standard_preview().sha256()),
        Ok(())
    );
}

// ---------------------------------------------------------------------------
// Identifiers and time
// ---------------------------------------------------------------------------

#[test]
fn identifier_rules() {
    let long = "a".repeat(65);
    for bad in [
        "",
        " a",
        "a b",
        "a\n",
        "-a",
        ".a",
        "_a",
        long.as_str(),
        "ä",
        "a/b",
        "a:b",
    ] {
        assert!(ApproverName::parse(bad).is_err(), "{bad:?}");
        assert!(Kind::parse(bad).is_err(), "{bad:?}");
        assert!(AgentName::parse(bad).is_err(), "{bad:?}");
        assert!(ProposalId::parse(bad).is_err(), "{bad:?}");
        assert!(ServerId::parse(bad).is_err(), "{bad:?}");
    }
    // Ids are for the server to make: no dots.
    assert!(ProposalId::parse("p.1").is_err());
    assert!(ServerId::parse("s.1").is_err());
    assert!(Kind::parse("email.send").is_ok());
    assert!(ApproverName::parse(&"a".repeat(64)).is_ok());
    let e = ApproverName::parse("a b").unwrap_err();
    assert_eq!(
        e,
        IdError {
            what: "approver name",
            value: "a b".into(),
            rule:
                "use 1-64 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit"
        }
    );
    // The value in the error is cut short.
    assert_eq!(
        ApproverName::parse(&"é".repeat(200))
            .unwrap_err()
            .value
            .chars()
            .count(),
        80
    );
    assert!(serde_json::from_value::<Kind>(json!("no spaces please")).is_err());
}

#[test]
fn hashes_have_one_spelling() {
    let h = Sha256Hex::digest(b"abc");
    assert_eq!(h.to_string(), h.to_hex());
    assert_eq!(format!("{h:?}"), format!("Sha256Hex({h})"));
    assert_eq!(h.prefix(12).len(), 12);
    assert_eq!(h.prefix(100), h.to_hex());
    for bad in [
        String::new(),
        h.to_hex().to_uppercase(),
        h.to_hex()[..63].to_owned(),
        format!("{h}0"),
        format!(" {}", &h.to_hex()[1..]),
        h.to_hex().replacen(|c: char| c.is_ascii_digit(), "g", 1),
        format!("0x{}", &h.to_hex()[2..]),
    ] {
        assert!(Sha256Hex::parse(&bad).is_err(), "{bad:?}");
        assert!(serde_json::from_value::<Sha256Hex>(json!(bad)).is_err());
    }
    assert_eq!(
        serde_json::from_value::<Sha256Hex>(json!(h.to_hex())).unwrap(),
        h
    );
}

#[test]
fn time_refusals_and_edges() {
    for bad in [
        "1969-12-31T23:59:59Z",
        "10000-01-01T00:00:00Z",
        "2026-11-30T24:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-11-30T00:00:00z",
        "2026-11-30T00:00:00+01:00",
        "2026-11-30T00:00Z",
        "2026-11-30T00:00:00ZZ",
        " 2026-11-30T00:00:00Z",
        "2026-11-3 T00:00:00Z",
        "2026-11-30T00:00:0éZ",
    ] {
        assert_eq!(
            Timestamp::parse(bad),
            Err(TimeError::Timestamp(bad.into())),
            "{bad}"
        );
    }
    assert_eq!(Timestamp::parse("1970-01-01T00:00:00Z").unwrap().unix(), 0);
    assert_eq!(
        Timestamp::parse("9999-12-31T23:59:59Z").unwrap().unix(),
        253_402_300_799
    );
    assert_eq!(Timestamp::from_unix(-5).unix(), 0);
    assert_eq!(
        Timestamp::from_unix(i64::MAX).to_rfc3339(),
        "9999-12-31T23:59:59Z"
    );
    assert_eq!(t(0).plus(Seconds::new(60)), t(60));
    assert_eq!(
        Timestamp::from_unix(i64::MAX).plus(Seconds::new(u64::MAX)),
        Timestamp::from_unix(i64::MAX)
    );
    // Durations: up to ten years (of 366 days), never zero.
    assert_eq!(Seconds::parse("3660d").unwrap().get(), 3660 * 86_400);
    assert!(Seconds::parse("3661d").is_err());
    assert!(Seconds::parse(&format!("{}s", 3660 * 86_400 + 1)).is_err());
    for bad in [
        "0m", "00s", "1", "m", "1 h", "1H", "1.0h", "-1s", "1e3s", "１s",
    ] {
        assert_eq!(
            Seconds::parse(bad),
            Err(TimeError::Duration(bad.into())),
            "{bad}"
        );
    }
    for (secs, spec) in [
        (1, "1s"),
        (59, "59s"),
        (60, "1m"),
        (3600, "1h"),
        (86_400, "1d"),
        (90_000, "25h"),
        (0, "0s"),
    ] {
        assert_eq!(Seconds::new(secs).to_spec(), spec);
        assert_eq!(Seconds::new(secs).to_string(), spec);
    }
    assert!(serde_json::from_value::<Seconds>(json!("0s")).is_err());
    assert!(serde_json::from_value::<Timestamp>(json!("yesterday")).is_err());
}
