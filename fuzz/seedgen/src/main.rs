//! Writes the seed corpora of the fuzz targets into `fuzz/corpus/<target>/`.
//!
//! Run from anywhere: `cargo run --manifest-path fuzz/Cargo.toml -p approval-fuzz-seedgen`.
//! Signed seeds (receipts, signed reads, signed decision bodies) use the fixed
//! fuzz keyring of `fuzz/src/fixtures.rs` (seed = SHA-256("approval fuzz key <name>")),
//! so they verify inside the targets. Other seeds come from the project's own
//! vectors (`core/tests/vectors`) and, when present, `../shared/vectors`.

use approval_core::message::{decision_message, sign_read, Decision, SignedDecision};
use approval_core::receipt::Receipt;
use approval_core::{Keyring, Policy, Sha256Hex};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

#[path = "../../src/fixtures.rs"]
mod fixtures;
use fixtures::{keyring_text, preview, secret, NAMES, NOW, POLICY, SERVER_ID};

fn sign(name: &str, d: Decision, h: &Sha256Hex, reason: &str) -> SignedDecision {
    let k = secret(name);
    SignedDecision::sign(&k.key, k.name.clone(), d, h, reason).unwrap()
}

struct Out(PathBuf);

impl Out {
    fn put(&self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.0.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

fn read_json(p: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok()
}

fn main() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let root = fuzz.join("..");
    let shared = root.join("../shared/vectors");
    let out = Out(fuzz.join("corpus"));
    let policy = Policy::parse_toml("<fuzz>", POLICY).unwrap();
    let keyring = Keyring::parse(&keyring_text()).unwrap();

    // receipt_verify: receipts that verify, and near misses.
    let p = preview(json!({"text": "hello"}));
    let h = p.sha256();
    let cases: Vec<(&str, Vec<SignedDecision>)> = vec![
        (
            "quorum_alice_carol",
            vec![
                sign("alice", Decision::Approve, &h, ""),
                sign("carol", Decision::Approve, &h, "ok"),
            ],
        ),
        (
            "quorum_all_three",
            vec![
                sign("alice", Decision::Approve, &h, "a"),
                sign("bob", Decision::Approve, &h, "b\nmulti-line"),
                sign("carol", Decision::Approve, &h, "c"),
            ],
        ),
        (
            "no_group",
            vec![
                sign("alice", Decision::Approve, &h, ""),
                sign("bob", Decision::Approve, &h, ""),
            ],
        ),
        (
            "vetoed",
            vec![
                sign("alice", Decision::Approve, &h, ""),
                sign("carol", Decision::Approve, &h, ""),
                sign("bob", Decision::Reject, &h, "no"),
            ],
        ),
    ];
    for (name, ds) in cases {
        let r = Receipt::build(&p, &policy, &keyring, &ds);
        let text = serde_json::to_string(&r).unwrap();
        out.put("receipt_verify", &format!("{name}.json"), text.as_bytes());
        let pretty = serde_json::to_string_pretty(&r).unwrap();
        out.put(
            "receipt_verify",
            &format!("{name}_pretty.json"),
            pretty.as_bytes(),
        );
    }
    // A payload with numbers and odd strings.
    let p2 = preview(
        json!({"n": [0, -1, 1.5, 5e-324, 1e21, 9007199254740992_u64], "s": "\u{202e}\u{0}\u{2028}😀"}),
    );
    let h2 = p2.sha256();
    let r = Receipt::build(
        &p2,
        &policy,
        &keyring,
        &[
            sign("bob", Decision::Approve, &h2, ""),
            sign("carol", Decision::Approve, &h2, ""),
        ],
    );
    out.put(
        "receipt_verify",
        "numbers.json",
        serde_json::to_string(&r).unwrap().as_bytes(),
    );

    // message_parse: signed reads (header NUL path), decision messages, decision bodies.
    for (i, path) in [
        "/v1/proposals?status=pending",
        "/v1/proposals/p-fuzz",
        "/v1/events",
    ]
    .iter()
    .enumerate()
    {
        let k = secret(NAMES[i]);
        let srv = approval_core::ServerId::parse(SERVER_ID).expect("fixed id");
        let hdr = sign_read(&k.key, &k.name, &srv, NOW - 10, "GET", path);
        out.put(
            "message_parse",
            &format!("read_{i}"),
            format!("{hdr}\0{path}").as_bytes(),
        );
    }
    for (i, d) in Decision::ALL.iter().enumerate() {
        let m = decision_message(*d, &h, if i % 2 == 0 { "" } else { "why\nnot" }).unwrap();
        out.put("message_parse", &format!("message_{d}"), m.as_bytes());
    }
    let body_hash = Sha256Hex::digest(b"/v1/proposals?status=pending");
    let d = sign("alice", Decision::Approve, &body_hash, "fine");
    out.put(
        "message_parse",
        "decision_body",
        serde_json::to_string(&d).unwrap().as_bytes(),
    );

    // keyring_parse.
    out.put("keyring_parse", "fuzz_keyring", keyring_text().as_bytes());
    out.put(
        "keyring_parse",
        "secret_key",
        secret("alice").to_file_text().as_bytes(),
    );
    if let Some(Value::Array(v)) = read_json(&root.join("core/tests/vectors/fail_keyrings.json")) {
        for (i, c) in v.iter().enumerate().take(12) {
            if let Some(t) = c["keyring"].as_str() {
                out.put("keyring_parse", &format!("fail_{i}"), t.as_bytes());
            }
        }
    }

    // policy_parse.
    out.put("policy_parse", "fuzz_policy.toml", POLICY.as_bytes());
    for entry in std::fs::read_dir(root.join("policies"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "toml") {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            out.put("policy_parse", &name, &std::fs::read(&p).unwrap());
        }
    }
    if let Some(Value::Array(v)) = read_json(&root.join("core/tests/vectors/fail_policies.json")) {
        for (i, c) in v.iter().enumerate().take(12) {
            if let Some(t) = c["policy"].as_str() {
                out.put("policy_parse", &format!("fail_{i}.toml"), t.as_bytes());
            }
        }
    }

    // preview_hash: payloads and whole previews, from our vectors and the shared ones.
    for (dir, tag) in [
        (root.join("core/tests/vectors"), "own"),
        (shared.join("independent"), "shared"),
    ] {
        if let Some(Value::Array(v)) = read_json(&dir.join("previews.json")) {
            for (i, c) in v.iter().enumerate().take(10) {
                let t = serde_json::to_string(&c["preview"]).unwrap();
                out.put(
                    "preview_hash",
                    &format!("{tag}_preview_{i}.json"),
                    t.as_bytes(),
                );
                let t = serde_json::to_string(&c["preview"]["payload"]).unwrap();
                out.put(
                    "preview_hash",
                    &format!("{tag}_payload_{i}.json"),
                    t.as_bytes(),
                );
            }
        }
        if let Some(Value::Array(v)) = read_json(&dir.join("fail_payloads.json")) {
            for (i, c) in v.iter().enumerate().take(16) {
                if let Some(t) = c["payload_json"].as_str() {
                    out.put(
                        "preview_hash",
                        &format!("{tag}_fail_{i}.json"),
                        t.as_bytes(),
                    );
                }
            }
        }
    }
    for entry in std::fs::read_dir(shared.join("rfc8785/input"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let p = entry.path();
        let name = format!("rfc8785_{}", p.file_name().unwrap().to_string_lossy());
        out.put("preview_hash", &name, &std::fs::read(&p).unwrap());
    }

    // mcp_request: JSON-RPC bodies.
    let call = |tool: &str, args: Value| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}})
            .to_string()
    };
    let bodies: Vec<(&str, String)> = vec![
        ("initialize", json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}}).to_string()),
        ("tools_list", json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string()),
        ("ping", json!({"jsonrpc": "2.0", "id": "x", "method": "ping"}).to_string()),
        ("notification", json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string()),
        ("prepare", call("approval_prepare", json!({"kind": "note.write", "payload": {"text": "hi", "n": [1, 2.5, -0.0]}, "summary": "s"}))),
        ("prepare_unknown_kind", call("approval_prepare", json!({"kind": "nope", "payload": {}}))),
        ("status", call("approval_status", json!({"proposal_id": "p-0", "wait_seconds": 0}))),
        ("execute", call("approval_execute", json!({"proposal_id": "p-0", "preview_sha256": h.to_hex()}))),
        ("list", call("approval_list", json!({"status": "PENDING"}))),
        ("withdraw", call("approval_withdraw", json!({"proposal_id": "p-0"}))),
        ("prepare_dup_payload_key", r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"approval_prepare","arguments":{"kind":"note.write","payload":{"text":"a","text":"b"}}}}"#.to_owned()),
        ("prepare_big_int", r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"approval_prepare","arguments":{"kind":"note.write","payload":{"text":"a","n":9007199254740993}}}}"#.to_owned()),
        ("prepare_precise", r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"approval_prepare","arguments":{"kind":"note.write","payload":{"text":"a","x":0.1,"y":1e21,"z":5e-324}}}}"#.to_owned()),
        ("dup_method", r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"approval_list","arguments":{}}}"#.to_owned()),
        ("escaped_keys", r#"{"jsonrpc":"2.0","id":1,"m\u0065thod":"tools/call","params":{"name":"approval_prepare","arguments":{"kind":"note.write","payload":{"text":"\ud83d\ude00"}}}}"#.to_owned()),
    ];
    for (name, body) in bodies {
        out.put("mcp_request", &format!("{name}.json"), body.as_bytes());
    }
    println!("seeds written to {}", out.0.display());
}
