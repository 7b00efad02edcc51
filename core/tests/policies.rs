//! Policies: loading, refusals with file, line and fix, canonical hashes, payload
//! checks.

mod common;
#[path = "common/gen.rs"]
mod gen;

use approval_core::policy::{PayloadRefusal, PolicySet};
use approval_core::time::{Seconds, TimeError};
use approval_core::{Keyring, Kind, Policy, PolicyError};
use common::*;
use gen::GOOD_POLICY;
use serde_json::json;

fn parse(src: &str) -> Result<Policy, PolicyError> {
    Policy::parse_toml("email.send.toml", src)
}

fn refusal(src: &str) -> PolicyError {
    parse(src).expect_err("policy must be refused")
}

#[test]
fn regression_seconds_parse_panicked_on_a_non_ascii_last_character() {
    // `Seconds::parse` split the text one byte before its end, which panics
    // inside a multi-byte character: a policy with `ttl = "5µ"` crashed the
    // loader instead of being refused with its line.
    for bad in ["5µ", "10µ", "µ", "1ｍ", "30é", "é", "2h\u{301}"] {
        assert_eq!(
            Seconds::parse(bad),
            Err(TimeError::Duration(bad.into())),
            "{bad}"
        );
    }
    let e = refusal(&GOOD_POLICY.replace(r#"ttl = "30m""#, r#"ttl = "30µ""#));
    assert_eq!(e.line, Some(6), "{e}");
    assert!(e.message.contains("invalid duration"), "{e}");
}

#[test]
fn regression_executor_error_line_pointed_at_the_payload_schema_type_line() {
    // Executor errors were reported at the first `type = ...` line of the file,
    // which is `[payload_schema]`'s `type = "object"` when the schema comes first.
    let src = GOOD_POLICY.replace(
        "type = \"note\"\n",
        "type = \"command\"\nprogram = \"ls\"\n",
    );
    let e = refusal(&src);
    assert_eq!(e.line, Some(17), "{e}");
    assert!(e.message.contains("absolute path"), "{e}");
    let src = GOOD_POLICY.replace(
        "type = \"note\"\n",
        "type = \"webhook\"\nurl = \"https://example.com\"\ntimeout = \"61m\"\n",
    );
    let e = refusal(&src);
    assert_eq!(e.line, Some(18), "{e}");
    assert!(e.message.contains("over the limit of 1h"), "{e}");
}

#[test]
fn good_policy_loads_and_has_a_stable_canonical_form() {
    let p = parse(GOOD_POLICY).unwrap();
    assert_eq!(p.kind(), &Kind::parse("email.send").unwrap());
    assert_eq!(p.spec().quorum, 2);
    assert!(p.is_approver(&approver("carol")));
    assert!(!p.is_approver(&approver("dave")));
    // The canonical form is JSON with every default filled in.
    let c = p.canonical_json();
    assert_eq!(
        c,
        &json!({
            "kind": "email.send",
            "description": "Send an email from the team account",
            "quorum": 2,
            "approvers": ["alice", "bob", "carol"],
            "vetoes": 1,
            "ttl": "30m",
            "execute_within": "10m",
            "max_payload_bytes": 65536,
            "require": [{"group": ["carol"], "count": 1}],
            "payload_schema": {"type": "object", "required": ["to", "subject"]},
            "executor": {"type": "note", "dir": null}
        })
    );
    assert_eq!(
        p.sha256(),
        approval_core::Sha256Hex::digest(&approval_core::json::canonical_bytes(c))
    );
    let back = Policy::from_canonical_json(c).unwrap();
    assert_eq!(back.sha256(), p.sha256());
    assert_eq!(back, p);
    // Comments, spacing and equivalent durations do not change the hash.
    let respelt = GOOD_POLICY
        .replace("quorum = 2", "quorum=2 # two of three")
        .replace(r#"ttl = "30m""#, r#"ttl = "1800s""#)
        .replace(r#"execute_within = "10m""#, r#"execute_within = "600s""#);
    assert_eq!(parse(&respelt).unwrap().sha256(), p.sha256());
    // Defaults written out or left out give the same policy.
    let explicit = GOOD_POLICY.replace("vetoes = 1\n", "");
    assert_eq!(parse(&explicit).unwrap().sha256(), p.sha256());
}

#[test]
fn every_field_is_in_the_hash() {
    let base = parse(GOOD_POLICY).unwrap().sha256();
    for (from, to) in [
        ("Send an email", "Send a mail"),
        ("quorum = 2", "quorum = 3"),
        (r#""alice", "bob", "carol""#, r#""bob", "alice", "carol""#),
        ("vetoes = 1", "vetoes = 2"),
        (r#"ttl = "30m""#, r#"ttl = "31m""#),
        (r#"execute_within = "10m""#, r#"execute_within = "11m""#),
        ("max_payload_bytes = 65536", "max_payload_bytes = 65535"),
        (r#"group = ["carol"]"#, r#"group = ["bob"]"#),
        (r#"required = ["to", "subject"]"#, r#"required = ["to"]"#),
        (
            "type = \"note\"\n",
            "type = \"note\"\ndir = \"/tmp/notes\"\n",
        ),
    ] {
        let edited = GOOD_POLICY.replacen(from, to, 1);
        assert_ne!(edited, GOOD_POLICY, "{from}");
        assert_ne!(parse(&edited).unwrap().sha256(), base, "{from} -> {to}");
    }
}

#[test]
fn refusals_say_what_to_do() {
    let cases: Vec<(String, usize, &str)> = vec![
        (GOOD_POLICY.replace("quorum = 2", "quorum = 4"), 3, "cannot be met with 3 approvers: set 1 ≤ quorum ≤ 3"),
        (GOOD_POLICY.replace("quorum = 2", "quorum = 0"), 3, "cannot be met"),
        (GOOD_POLICY.replace("vetoes = 1", "vetoes = 0"), 5, "must be between 1 and the number of approvers (3)"),
        (
            GOOD_POLICY.replace(r#"approvers = ["alice", "bob", "carol"]"#, "approvers = []"),
            4,
            "approvers is empty",
        ),
        (
            GOOD_POLICY.replace(r#""bob", "carol"]"#, r#""bob", "carol", "bob"]"#),
            4,
            "approver \"bob\" is listed twice",
        ),
        (
            GOOD_POLICY.replace("max_payload_bytes = 65536", "max_payload_bytes = 1"),
            8,
            "max_payload_bytes = 1 must be between 2 and 4194304",
        ),
        (GOOD_POLICY.replace(r#"group = ["carol"]"#, "group = []"), 9, "require.group is empty"),
        (
            GOOD_POLICY.replace(r#"group = ["carol"]"#, r#"group = ["dave"]"#),
            9,
            "\"dave\", who is not in approvers",
        ),
        (
            GOOD_POLICY.replace(r#"group = ["carol"]"#, r#"group = ["carol", "carol"]"#),
            9,
            "lists \"carol\" twice",
        ),
        (GOOD_POLICY.replace("count = 1", "count = 2"), 9, "cannot be met by a group of 1"),
        (GOOD_POLICY.replace("count = 1", "count = 0"), 9, "set 1 ≤ count ≤ 1"),
        (
            GOOD_POLICY.replace(r#"type = "object""#, r#"type = "objekt""#),
            12,
            "payload_schema does not compile",
        ),
        (GOOD_POLICY.replace(r#"type = "note""#, r#"type = "shell""#), 16, "shell"),
        (
            GOOD_POLICY.replace("type = \"note\"\n", "type = \"note\"\ndir = \"\"\n"),
            17,
            "executor.dir must be a non-empty path",
        ),
        (
            GOOD_POLICY.replace("type = \"note\"\n", "type = \"webhook\"\nurl = \"https:///x\"\n"),
            17,
            "must be an http:// or https:// URL",
        ),
        (
            GOOD_POLICY.replace("type = \"note\"\n", "type = \"webhook\"\nurl = \"https://a b\"\n"),
            17,
            "must be an http:// or https:// URL",
        ),
        (
            GOOD_POLICY.replace(
                "type = \"note\"\n",
                "type = \"webhook\"\nurl = \"https://x\"\n[executor.headers]\nIdempotency-Key = \"1\"\n",
            ),
            19,
            "may not set \"Idempotency-Key\": the server sets it",
        ),
        (
            GOOD_POLICY.replace(
                "type = \"note\"\n",
                "type = \"webhook\"\nurl = \"https://x\"\n[executor.headers]\nX-A = \"a\\nb\"\n",
            ),
            19,
            "is not a valid HTTP header",
        ),
        (
            GOOD_POLICY.replace(
                "type = \"note\"\n",
                "type = \"command\"\nprogram = \"/bin/echo\"\nargs = [\"a\\u0000b\"]\n",
            ),
            18,
            "executor.args may not contain NUL",
        ),
        (
            GOOD_POLICY.replace("type = \"note\"\n", "type = \"command\"\nprogram = \"/bin/\\u0000\"\n"),
            17,
            "must be an absolute path",
        ),
        (GOOD_POLICY.replace("vetoes = 1", "vetoes = 1\nquorom = 2"), 6, "unknown field `quorom`"),
    ];
    for (src, line, fragment) in cases {
        let e = refusal(&src);
        assert_eq!(e.file, "email.send.toml");
        assert_eq!(e.line, Some(line), "{e}\n{src}");
        assert!(
            e.message.contains(fragment),
            "{e} does not say {fragment:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("email.send.toml:{line}: ")),
            "{e}"
        );
    }
    let e = Policy::parse_toml("policies/email.sned.toml", GOOD_POLICY).unwrap_err();
    assert_eq!(e.line, Some(1));
    assert!(e.message.contains("name the file email.send.toml"), "{e}");
    // Without a .toml name there is no file-name rule (receipts, tests).
    assert!(Policy::parse_toml("<inline>", GOOD_POLICY).is_ok());
}

#[test]
fn policies_carried_in_receipts_are_checked_like_files() {
    let c = parse(GOOD_POLICY).unwrap().canonical_json().clone();
    let mut extra = c.clone();
    extra["surprise"] = json!(true);
    let e = Policy::from_canonical_json(&extra).unwrap_err();
    assert_eq!((e.file.as_str(), e.line), ("<receipt>", None));
    assert!(e.message.contains("unknown field"), "{e}");
    let mut unmeetable = c.clone();
    unmeetable["quorum"] = json!(9);
    assert!(Policy::from_canonical_json(&unmeetable)
        .unwrap_err()
        .message
        .contains("cannot be met"));
    let mut bad_ttl = c.clone();
    bad_ttl["ttl"] = json!("0s");
    assert!(Policy::from_canonical_json(&bad_ttl).is_err());
    // A missing default is filled in, so it hashes differently from the text
    // it was read from (the receipt check compares both hashes).
    let mut short = c.clone();
    short.as_object_mut().unwrap().remove("vetoes");
    let p = Policy::from_canonical_json(&short).unwrap();
    assert_eq!(p.canonical_json(), &c);
    assert_ne!(
        approval_core::Sha256Hex::digest(&approval_core::json::canonical_bytes(&short)),
        p.sha256()
    );
}

#[test]
fn policy_set_reports_every_broken_file() {
    let kr = keyring(&["alice", "bob", "carol"]);
    let deploy = GOOD_POLICY.replace("email.send", "deploy.prod");
    let files = vec![
        ("email.send.toml".to_owned(), GOOD_POLICY.to_owned()),
        ("deploy.prod.toml".to_owned(), deploy.clone()),
        ("broken.toml".to_owned(), "kind = ".to_owned()),
        (
            "mail.toml".to_owned(),
            GOOD_POLICY
                .replace("email.send", "mail")
                .replace("\"carol\"]", "\"carol\", \"zed\"]"),
        ),
        ("again/email.send.toml".to_owned(), GOOD_POLICY.to_owned()),
    ];
    let errs = PolicySet::load(&files, &kr).unwrap_err();
    let got: Vec<(&str, Option<usize>)> = errs.iter().map(|e| (e.file.as_str(), e.line)).collect();
    assert_eq!(
        got,
        [
            ("broken.toml", Some(1)),
            ("mail.toml", Some(4)),
            ("again/email.send.toml", Some(1))
        ]
    );
    assert!(
        errs[1].message.contains("\"zed\" is not in the keyring"),
        "{}",
        errs[1]
    );
    assert!(
        errs[2]
            .message
            .contains("already defined in email.send.toml"),
        "{}",
        errs[2]
    );
    let set = PolicySet::load(&files[..2], &kr).unwrap();
    assert_eq!(set.len(), 2);
    assert!(!set.is_empty());
    let kinds: Vec<_> = set.iter().map(|p| p.kind().to_string()).collect();
    assert_eq!(kinds, ["deploy.prod", "email.send"]);
    assert!(set.get(&Kind::parse("email.send").unwrap()).is_some());
    // A kind with no policy is simply absent: the server fails closed.
    assert!(set.get(&Kind::parse("email.sendx").unwrap()).is_none());
    assert!(PolicySet::load(&[], &Keyring::default())
        .unwrap()
        .is_empty());
    // The keyring check is separate from parsing and names the approvers line.
    let p = parse(GOOD_POLICY).unwrap();
    let e = p
        .check_keyring(
            &keyring(&["alice", "bob"]),
            "email.send.toml",
            Some(GOOD_POLICY),
        )
        .unwrap_err();
    assert_eq!(e.line, Some(4));
    assert!(p.check_keyring(&full_keyring(), "f", None).is_ok());
}

#[test]
fn payload_checks_refuse_with_the_exact_reason() {
    let p = parse(GOOD_POLICY).unwrap();
    assert_eq!(p.check_payload(&json!({"to": "a", "subject": "b"})), Ok(()));
    match p.check_payload(&json!({"to": "a"})) {
        Err(PayloadRefusal::Schema { pointer, message }) => {
            assert_eq!(pointer, "");
            assert!(message.contains("subject"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let typed = GOOD_POLICY.replace(
        "required = [\"to\", \"subject\"]",
        "required = [\"to\", \"subject\"]\nproperties = { to = { type = \"string\" } }",
    );
    let typed = parse(&typed).unwrap();
    let e = typed
        .check_payload(&json!({"to": 5, "subject": "b"}))
        .unwrap_err();
    assert!(
        matches!(&e, PayloadRefusal::Schema { pointer, .. } if pointer == "/to"),
        "{e}"
    );
    assert_eq!(e.pointer(), "/to");
    let e = p
        .check_payload(&json!({"to": "a", "subject": "b", "n": -9007199254740993i64}))
        .unwrap_err();
    assert!(
        matches!(&e, PayloadRefusal::Inexact(pe) if pe.problem == approval_core::json::Problem::IntegerTooLarge),
        "{e}"
    );
    assert_eq!(e.pointer(), "/n");
    // The size limit is on the canonical form, inclusive.
    let payload = json!({"to": "a", "subject": "x".repeat(20)});
    let size = approval_core::json::canonical_bytes(&payload).len();
    let at = |limit: usize| {
        parse(&GOOD_POLICY.replace(
            "max_payload_bytes = 65536",
            &format!("max_payload_bytes = {limit}"),
        ))
        .unwrap()
    };
    assert_eq!(at(size).check_payload(&payload), Ok(()));
    let e = at(size - 1).check_payload(&payload).unwrap_err();
    assert_eq!(
        e,
        PayloadRefusal::TooLarge {
            size,
            limit: size as u64 - 1
        }
    );
    assert_eq!(e.pointer(), "");
    // Whitespace in the agent's text does not count: only the canonical form.
    let spaced: serde_json::Value = serde_json::from_str(
        &serde_json::to_string_pretty(&payload)
            .unwrap()
            .replace('\n', "\n          "),
    )
    .unwrap();
    assert_eq!(at(size).check_payload(&spaced), Ok(()));
}

/// A cooldown is read like the other durations, bounded by the execution window it
/// is the first part of, and left out of the canonical form (and hash) when unset.
#[test]
fn a_cooldown_is_parsed_bounded_and_hashed_only_when_set() {
    let base = parse(GOOD_POLICY).unwrap();
    assert_eq!(base.spec().cooldown, None);
    assert!(base.canonical_json().get("cooldown").is_none());
    let with = |c: &str| {
        parse(&GOOD_POLICY.replace(
            "execute_within = \"10m\"\n",
            &format!("execute_within = \"10m\"\ncooldown = {c}\n"),
        ))
    };
    let p = with("\"60s\"").unwrap();
    assert_eq!(p.spec().cooldown, Some(Seconds::new(60)));
    assert_eq!(p.canonical_json()["cooldown"], json!("1m"));
    assert_ne!(p.sha256(), base.sha256());
    assert_eq!(with("\"1m\"").unwrap().sha256(), p.sha256());
    assert_eq!(
        Policy::from_canonical_json(p.canonical_json())
            .unwrap()
            .sha256(),
        p.sha256()
    );
    // As long as the execution window or longer: nothing would be left to execute in.
    for long in ["\"10m\"", "\"2h\""] {
        let e = with(long).unwrap_err();
        assert_eq!(e.line, Some(8), "{e}");
        assert!(
            e.message.contains("must be shorter than execute_within")
                && e.message.contains("shorten the cooldown"),
            "{e}"
        );
    }
    for bad in ["\"0s\"", "\"soon\"", "60", "\"-1s\""] {
        let e = with(bad).unwrap_err();
        assert_eq!(e.line, Some(8), "{bad}: {e}");
    }
    assert!(with("\"0s\"")
        .unwrap_err()
        .message
        .contains("invalid duration"));
}
