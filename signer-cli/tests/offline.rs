//! The commands that need no server: keygen, pubkey, key safety, hash, verify.

mod common;

use approval_core::{Decision, Preview, Receipt, SignedDecision};
use common::*;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;

#[test]
fn keygen_writes_a_0600_key_and_prints_the_keyring_line() {
    let env = Env::new();
    let out = env.path("keys/alice.key");
    let r = env.run(&[
        "keygen",
        "--name",
        "alice",
        "--out",
        out.to_str().unwrap_or(""),
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let mode = std::fs::metadata(&out)
        .expect("key file")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let line = r.stdout.trim();
    assert!(line.starts_with("alice ed25519 "), "{line}");
    assert_eq!(r.stdout.lines().count(), 1);
    assert_eq!(r.stderr.lines().count(), 1, "one-line hint: {}", r.stderr);
    assert!(r.stderr.contains("whoever runs the server"), "{}", r.stderr);
    // The line is a valid keyring, and the file holds the matching secret key.
    approval_core::Keyring::parse(line).expect("keyring line");
    let sk =
        approval_core::keyring::SecretKey::parse(&std::fs::read_to_string(&out).expect("read"))
            .expect("key file format");
    assert_eq!(sk.keyring_line(), line);
    // pubkey prints it again.
    let r = env.run(&["pubkey", "--key", out.to_str().unwrap_or("")]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout.trim(), line);
}

#[test]
fn keygen_never_overwrites() {
    let env = Env::new();
    let out = env.path("alice.key");
    let first = env.run(&[
        "keygen",
        "--name",
        "alice",
        "--out",
        out.to_str().unwrap_or(""),
    ]);
    assert_eq!(first.code, 0, "{first:?}");
    let before = std::fs::read(&out).expect("read");
    let again = env.run(&[
        "keygen",
        "--name",
        "alice",
        "--out",
        out.to_str().unwrap_or(""),
    ]);
    assert_eq!(again.code, 1, "{again:?}");
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
    assert!(again.stdout.is_empty());
    assert_eq!(std::fs::read(&out).expect("read"), before);
}

#[test]
fn keygen_default_path_is_in_the_config_dir_and_is_then_found() {
    let env = Env::new();
    let r = env.run(&["keygen", "--name", "bob"]);
    assert_eq!(r.code, 0, "{r:?}");
    let path = env.path("config/approval-signer/bob.key");
    assert!(path.exists());
    let dir_mode = std::fs::metadata(env.path("config/approval-signer"))
        .expect("dir")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);
    // With no --key, the only key in the config folder is used.
    let p = env.run(&["pubkey"]);
    assert_eq!(p.code, 0, "{p:?}");
    assert_eq!(p.stdout, r.stdout);
}

#[test]
fn keygen_refuses_an_invalid_name() {
    let env = Env::new();
    let r = env.run(&["keygen", "--name", "al ice", "--out", "x.key"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(!env.path("x.key").exists());
}

#[test]
fn a_key_readable_by_others_is_refused_with_the_fix() {
    let env = Env::new();
    let key = env.key("alice");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let r = env.run(&["pubkey", "--key", key.to_str().unwrap_or("")]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("mode 0644"), "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!("chmod 600 {}", key.display())),
        "{}",
        r.stderr
    );
    assert!(r.stdout.is_empty());
    // The same for commands that talk to a server: refused before any connection.
    let r = env.run(&[
        "show",
        "p-1",
        "--server",
        "http://127.0.0.1:9",
        "--key",
        key.to_str().unwrap_or(""),
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("chmod 600"), "{}", r.stderr);
}

#[test]
fn missing_configuration_is_a_usage_error() {
    let env = Env::new();
    let key = env.key("alice");
    let r = env.run(&["pending", "--key", key.to_str().unwrap_or("")]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("no server configured"), "{}", r.stderr);
    let r = env.run(&["pending", "--server", "http://127.0.0.1:9"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("no key configured"), "{}", r.stderr);
    let r = env.run(&[
        "pending",
        "--server",
        "ftp://x",
        "--key",
        key.to_str().unwrap_or(""),
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    let r = env.run(&["approve"]);
    assert_eq!(r.code, 2, "{r:?}");
    let r = env.run(&["resolve", "p-1", "--outcome", "maybe"]);
    assert_eq!(r.code, 2, "{r:?}");
}

#[test]
fn config_file_is_the_last_fallback_and_flags_go_before_or_after() {
    let env = Env::new();
    let key = env.key("alice");
    std::fs::create_dir_all(env.path("config/approval-signer")).expect("mkdir");
    std::fs::write(
        env.path("config/approval-signer/config.toml"),
        format!(
            "server = \"http://127.0.0.1:9\"\nkey = \"{}\"\n",
            key.display()
        ),
    )
    .expect("config");
    let r = env.run(&["pubkey"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("alice ed25519 "));
    // SIGNER_KEY beats the config file; --key beats SIGNER_KEY; global flags go anywhere.
    let bob = env.key("bob");
    let r = Run::from(
        env.cmd()
            .args(["pubkey"])
            .env("SIGNER_KEY", &bob)
            .output()
            .expect("run"),
    );
    assert!(r.stdout.starts_with("bob ed25519 "), "{r:?}");
    let r = Run::from(
        env.cmd()
            .args(["--key", key.to_str().unwrap_or(""), "pubkey", "--json"])
            .env("SIGNER_KEY", &bob)
            .output()
            .expect("run"),
    );
    let v: Value = serde_json::from_str(&r.stdout).expect("json");
    assert_eq!(v["name"], json!("alice"));
    // A broken config file is a usage error naming the file.
    std::fs::write(
        env.path("config/approval-signer/config.toml"),
        "sever = 1\n",
    )
    .expect("config");
    let r = env.run(&["pubkey"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("config.toml"), "{}", r.stderr);
}

/// Cases from /work/shared/vectors/independent/previews.json (computed with the
/// Python `rfc8785` package and hashlib, not by this project), index 4 and 16.
const VECTORS: &[(&str, &str)] = &[
    (
        r#"{"v": 1, "server_id": "srv-0101a47c13ffdb21", "proposal_id": "p-0004", "kind": "email.send", "payload": {"'\t\u20ac\\'\u200d\ud83d\ude00": ["\u2028\\\"Z\u00e9\t\u0000\u00e9"], "a\u202e\u20aca\u20ac": [false], "\u202e\u200d/\u0000/\u001f ": false}, "summary": "\u202e>\u001f\ud83d\ude00\u202e&a\u200d&\ud83d\ude00\u2028/>", "requested_by": "ci-bot", "created_at": "2026-11-30T00:00:00Z", "expires_at": "2026-11-30T00:30:00Z", "policy_sha256": "4b227777d4dd1fc61c6f884f48641d02b4d121d3fd328cb08b5531fcacdabf8a"}"#,
        "f3869c88ea447125fa98c44c113404cbd759a99d50be92666aada6fc1d8d3001",
    ),
    (
        r#"{"v": 1, "server_id": "srv-538594abb2bd8d40", "proposal_id": "p-0016", "kind": "note.create", "payload": {"a \t": true, "<Z\"Z": 0.1, "\u20ac\n\n\\a\u2028": [[null], {"k": true, "/\n\u202e\u200d\\'\u001f/": null}, 1.7976931348623157e+308, null], "k": 5e-324}, "summary": ">\u2028< Z<>\u200d\u0000\ud83d\ude00\u200d\u00e9\u2028\u00e9\ud83d\ude00", "requested_by": "local", "created_at": "2026-11-30T00:00:00Z", "expires_at": "2026-11-30T00:30:00Z", "policy_sha256": "b17ef6d19c7a5b1ee83b907c595526dcb1eb06db8227d650d5dda0a9f4ce8cd9"}"#,
        "9e058347536ab0102ce60d881a641feb51f8ebf68ffeae85967278ed1f2019fe",
    ),
];

#[test]
fn hash_matches_independent_vectors() {
    let env = Env::new();
    for (i, (text, expected)) in VECTORS.iter().enumerate() {
        let f = env.path(&format!("preview{i}.json"));
        std::fs::write(&f, text).expect("write");
        let r = env.run(&["hash", f.to_str().unwrap_or("")]);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(r.stdout, format!("{expected}\n"));
        // Wrapped in a ProposalView-like object with the right claim: same hash.
        let wrapped =
            format!(r#"{{"proposal_id": "x", "preview": {text}, "preview_sha256": "{expected}"}}"#);
        std::fs::write(&f, wrapped).expect("write");
        let r = env.run(&["hash", f.to_str().unwrap_or("")]);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(r.stdout, format!("{expected}\n"));
    }
}

#[test]
fn hash_refuses_a_wrong_claim_and_inexact_json() {
    let env = Env::new();
    let (text, expected) = VECTORS[0];
    let f = env.path("view.json");
    let wrong = "0".repeat(64);
    std::fs::write(
        &f,
        format!(r#"{{"preview": {text}, "preview_sha256": "{wrong}"}}"#),
    )
    .expect("write");
    let r = env.run(&["hash", f.to_str().unwrap_or("")]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.stdout.trim(), expected);
    assert!(r.stderr.contains("PREVIEW HASH MISMATCH"), "{}", r.stderr);
    // Duplicate keys: refused rather than guessed.
    let dup = text.replacen("\"v\": 1,", "\"v\": 1, \"v\": 1,", 1);
    std::fs::write(&f, dup).expect("write");
    let r = env.run(&["hash", f.to_str().unwrap_or("")]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("duplicate key"), "{}", r.stderr);
    let r = env.run(&["hash", "does-not-exist.json"]);
    assert_eq!(r.code, 2, "{r:?}");
}

/// A receipt approved by alice and carol under the test policy.
fn good_receipt() -> Value {
    let p = preview("srv-r", "p-r", json!({"text": "ship it"}), "ship");
    let policy = policy();
    let h = p.sha256();
    let ds: Vec<SignedDecision> = ["alice", "carol"]
        .iter()
        .map(|n| {
            SignedDecision::sign(
                &secret(n).key,
                name(n),
                Decision::Approve,
                &h,
                &format!("ok from {n}"),
            )
            .expect("sign")
        })
        .collect();
    serde_json::to_value(Receipt::build(&p, &policy, &keyring(), &ds)).expect("receipt json")
}

fn verify(env: &Env, receipt: &Value, extra: &[&str]) -> Run {
    let f = env.path("receipt.json");
    std::fs::write(&f, serde_json::to_string_pretty(receipt).expect("json")).expect("write");
    let k = env.path("keys");
    std::fs::write(&k, keyring_text(&["alice", "bob", "carol"])).expect("write");
    let mut args = vec![
        "verify",
        f.to_str().unwrap_or(""),
        "--keys",
        k.to_str().unwrap_or(""),
    ];
    args.extend_from_slice(extra);
    env.run(&args)
}

#[test]
fn verify_accepts_a_good_receipt() {
    let env = Env::new();
    let receipt = good_receipt();
    let r = verify(&env, &receipt, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .starts_with("receipt OK: alice, carol approved p-r (2 of 2 required)"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("kind            note.write"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("quorum 2 of [alice, bob, carol]"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("carol  approve  \"ok from carol\""),
        "{}",
        r.stdout
    );
    let p = Preview::from_value(&receipt["preview"]).expect("preview");
    assert!(r.stdout.contains(&p.sha256().to_hex()), "{}", r.stdout);
    let r = verify(&env, &receipt, &["--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).expect("json");
    assert_eq!(v["approved_by"], json!(["alice", "carol"]));
    assert_eq!(v["quorum"], json!(2));
}

/// One edit of a receipt.
type Change = Box<dyn Fn(&mut Value)>;

#[test]
fn verify_refuses_every_single_field_change() {
    let env = Env::new();
    let base = good_receipt();
    let other_sig = {
        let p = Preview::from_value(&base["preview"]).expect("preview");
        SignedDecision::sign(
            &secret("bob").key,
            name("bob"),
            Decision::Approve,
            &p.sha256(),
            "",
        )
        .expect("sign")
        .signature()
        .map(|s| s.to_base64())
        .unwrap_or_default()
    };
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "preview payload",
            Box::new(|r| r["preview"]["payload"]["text"] = json!("ship it now")),
            "preview_sha256 mismatch",
        ),
        (
            "preview_sha256",
            Box::new(|r| r["preview_sha256"] = json!("0".repeat(64))),
            "preview_sha256 mismatch",
        ),
        (
            "policy quorum",
            Box::new(|r| r["policy"]["quorum"] = json!(1)),
            "policy does not match",
        ),
        (
            "decision reason",
            Box::new(|r| r["decisions"][0]["reason"] = json!("ok from alice!")),
            "signature does not verify",
        ),
        (
            "decision signature",
            Box::new(move |r| r["decisions"][1]["signature"] = json!(other_sig.clone())),
            "signature does not verify",
        ),
        (
            "decision approver",
            Box::new(|r| r["decisions"][0]["approver"] = json!("bob")),
            "decision 0",
        ),
        (
            "decision word",
            Box::new(|r| r["decisions"][0]["decision"] = json!("reject")),
            "signature does not verify",
        ),
        (
            "dropped decision",
            Box::new(|r| {
                r["decisions"].as_array_mut().map(|a| a.pop());
            }),
            "quorum not reached",
        ),
        (
            "preview expiry",
            Box::new(|r| r["preview"]["expires_at"] = json!("2099-01-01T00:00:00Z")),
            "preview_sha256 mismatch",
        ),
    ];
    for (what, change, expected) in cases {
        let mut r = base.clone();
        change(&mut r);
        assert_ne!(r, base, "{what} changed nothing");
        let out = verify(&env, &r, &[]);
        assert_eq!(out.code, 1, "{what}: {out:?}");
        assert!(
            out.stderr.contains("receipt refused"),
            "{what}: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains(expected),
            "{what}: expected {expected:?} in {}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "{what}: {}", out.stdout);
    }
}

#[test]
fn verify_refuses_unknown_keys_and_reports_a_bad_keyring_as_usage() {
    let env = Env::new();
    let f = env.path("receipt.json");
    std::fs::write(&f, good_receipt().to_string()).expect("write");
    // A keyring without carol: her signature cannot count.
    let k = env.path("keys");
    std::fs::write(&k, keyring_text(&["alice", "bob"])).expect("write");
    let r = env.run(&[
        "verify",
        f.to_str().unwrap_or(""),
        "--keys",
        k.to_str().unwrap_or(""),
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("not in the verifier's keyring"),
        "{}",
        r.stderr
    );
    std::fs::write(&k, "alice ed25519 AAAA\n").expect("write");
    let r = env.run(&[
        "verify",
        f.to_str().unwrap_or(""),
        "--keys",
        k.to_str().unwrap_or(""),
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("line 1"), "{}", r.stderr);
    // Expiry is checked on request: this receipt's window is still open.
    std::fs::write(&k, keyring_text(&["alice", "bob", "carol"])).expect("write");
    let r = env.run(&[
        "verify",
        f.to_str().unwrap_or(""),
        "--keys",
        k.to_str().unwrap_or(""),
        "--check-expiry",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
}
