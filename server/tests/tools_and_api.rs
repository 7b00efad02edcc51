//! In-process tests of every MCP tool and approver endpoint, on a real loopback
//! port, with a clock the tests move instead of sleeping.

mod common;

use approval_core::message::Decision;
use approval_core::Status;
use approval_server::audit::{verify_chain, AuditEntry};
use approval_server::store::SledStore;
use common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn tools_list_has_five_tools_with_schemas_and_annotations() {
    let s = start().await;
    let v = s.rpc("tools/list", json!({})).await;
    let tools = v["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "approval_prepare",
            "approval_status",
            "approval_execute",
            "approval_list",
            "approval_withdraw"
        ]
    );
    for t in tools {
        assert_eq!(t["outputSchema"]["type"], "object", "{t}");
        assert!(t["outputSchema"]["required"]
            .as_array()
            .unwrap()
            .contains(&json!("code")));
    }
    let ann = |n: usize| &tools[n]["annotations"];
    assert_eq!(ann(1)["readOnlyHint"], true);
    assert_eq!(ann(3)["readOnlyHint"], true);
    assert_eq!(ann(2)["destructiveHint"], true);
    assert_eq!(ann(2)["idempotentHint"], false);
    assert!(tools[0]["description"]
        .as_str()
        .unwrap()
        .contains("`note.write`"));
    assert!(
        !names.iter().any(|n| n.contains("approve")),
        "no approve tool may exist"
    );
}

#[tokio::test]
async fn quorum_two_of_three_with_group_then_execute_once() {
    let s = start().await;
    let (id, hash) = s.prepare("hello").await;
    // alice + bob is two approvals but carol's group is missing.
    assert_eq!(
        s.decide(&id, &hash, "alice", Decision::Approve).await.0,
        200
    );
    let (code, v) = s.decide(&id, &hash, "bob", Decision::Approve).await;
    assert_eq!(code, 200);
    assert_eq!(v["proposal"]["status"], "PENDING");
    assert_eq!(
        v["proposal"]["quorum"]["missing_groups"][0]["group"],
        json!(["carol"])
    );
    let (_, st) = s.call("approval_status", json!({"proposal_id": id})).await;
    assert_eq!(
        (st["code"].as_str(), st["executable"].as_bool()),
        (Some("PENDING_QUORUM"), Some(false))
    );
    let (_, v) = s.decide(&id, &hash, "carol", Decision::Approve).await;
    assert_eq!(v["proposal"]["status"], "APPROVED");
    let (_, st) = s.call("approval_status", json!({"proposal_id": id})).await;
    assert_eq!(
        (st["code"].as_str(), st["executable"].as_bool()),
        (Some("QUORUM_REACHED"), Some(true))
    );
    assert_eq!(st["approvals"].as_array().unwrap().len(), 3);
    let (err, out) = s
        .call(
            "approval_execute",
            json!({"proposal_id": id, "preview_sha256": hash}),
        )
        .await;
    assert!(!err, "{out}");
    assert_eq!(out["code"], "SUCCEEDED");
    assert_eq!(
        out["result"]["readback_sha256"],
        json!(approval_core::Sha256Hex::digest(b"hello").to_string())
    );
    let note = s.dir.path().join("sandbox").join(format!("{id}.txt"));
    assert_eq!(std::fs::read_to_string(note).unwrap(), "hello");
    let (err, again) = s
        .call(
            "approval_execute",
            json!({"proposal_id": id, "preview_sha256": hash}),
        )
        .await;
    assert!(err);
    assert_eq!(
        (again["code"].as_str(), again["retry_allowed"].as_bool()),
        (Some("ALREADY_EXECUTED_NO_REPLAY"), Some(false))
    );
    // The receipt verifies offline with the keyring.
    let (code, receipt) = s
        .get_signed("alice", &format!("/v1/proposals/{id}/receipt"))
        .await;
    assert_eq!(code, 200);
    let receipt: approval_core::Receipt = serde_json::from_value(receipt).unwrap();
    let kr = approval_core::Keyring::parse(&keyring_text(&["alice", "bob", "carol"])).unwrap();
    let verified = approval_core::verify_receipt(&receipt, &kr, None).unwrap();
    assert_eq!(verified.approvers().len(), 3);
}

#[tokio::test]
async fn one_rejection_vetoes() {
    let s = start().await;
    let (id, hash) = s.prepare("no").await;
    s.decide(&id, &hash, "alice", Decision::Approve).await;
    let (code, v) = s.decide(&id, &hash, "bob", Decision::Reject).await;
    assert_eq!(
        (code, v["proposal"]["status"].as_str()),
        (200, Some("REJECTED"))
    );
    let (err, out) = s
        .call(
            "approval_execute",
            json!({"proposal_id": id, "preview_sha256": hash}),
        )
        .await;
    assert!(err);
    assert_eq!(out["code"], "REJECTED");
    // Decisions on a finished proposal are refused and change nothing.
    let before = s.snapshot();
    let (code, v) = s.decide(&id, &hash, "carol", Decision::Approve).await;
    assert_eq!(
        (code, v["code"].as_str(), v["status"].as_str()),
        (409, Some("INVALID_TRANSITION"), Some("REJECTED"))
    );
    assert_eq!(s.snapshot(), before);
}

#[tokio::test]
async fn the_same_signed_decision_counts_once() {
    let s = start().await;
    let (id, hash) = s.prepare("x").await;
    let body = s.signed("carol", Decision::Approve, &hash, "ok");
    let (c1, v1) = s.post_decision(&id, &body).await;
    let before = s.snapshot();
    let (c2, v2) = s.post_decision(&id, &body).await;
    assert_eq!((c1, v1["recorded"].as_bool()), (200, Some(true)));
    assert_eq!((c2, v2["already_recorded"].as_bool()), (200, Some(true)));
    // A repeat only says so: it does not read the proposal (issue #11, item 5).
    assert_eq!(v2["status"], "PENDING", "{v2}");
    assert!(v2.get("proposal").is_none(), "{v2}");
    assert_eq!(s.snapshot(), before);
    // The same approver approving again with another reason is refused.
    let other = s.signed("carol", Decision::Approve, &hash, "again");
    let (c3, v3) = s.post_decision(&id, &other).await;
    assert_eq!((c3, v3["code"].as_str()), (409, Some("ALREADY_RECORDED")));
    assert_eq!(s.snapshot(), before);
}

#[tokio::test]
async fn signatures_for_another_proposal_or_by_outsiders_are_refused() {
    let s = start().await;
    let (a, hash_a) = s.prepare("a").await;
    let (b, _) = s.prepare("b").await;
    let before = s.snapshot();
    let for_a = s.signed("carol", Decision::Approve, &hash_a, "");
    let (code, v) = s.post_decision(&b, &for_a).await;
    assert_eq!(
        (code, v["code"].as_str()),
        (403, Some("INVALID_SIGNATURE")),
        "{v}"
    );
    // dave is in the keyring but not in the policy: refused, and he cannot read it either.
    let (code, v) = s.decide(&a, &hash_a, "dave", Decision::Approve).await;
    assert_eq!(
        (code, v["code"].as_str()),
        (403, Some("INVALID_SIGNATURE")),
        "{v}"
    );
    let (code, _) = s.get_signed("dave", &format!("/v1/proposals/{a}")).await;
    assert_eq!(code, 404);
    // An approve signature replayed as a reject fails.
    let mut replay = s.signed("bob", Decision::Approve, &hash_a, "");
    replay["decision"] = json!("reject");
    let (code, _) = s.post_decision(&a, &replay).await;
    assert_eq!(code, 403);
    // Malformed bodies.
    for bad in [
        json!({}),
        json!({"approver": "bob", "decision": "approve", "signature": "AAAA"}),
        json!("x"),
    ] {
        let (code, v) = s.post_decision(&a, &bad).await;
        assert_eq!(
            (code, v["code"].as_str()),
            (400, Some("BAD_REQUEST")),
            "{bad} -> {v}"
        );
    }
    let r = s
        .http
        .post(format!("http://{}/v1/proposals/{a}/decisions", s.addr))
        .header("content-type", "application/json")
        .body(r#"{"approver":"bob","approver":"carol","decision":"approve","reason":"","signature":"x"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(s.snapshot(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_concurrent_executes_run_the_effect_once() {
    let s = start().await;
    let (id, hash) = s.prepare("once").await;
    s.decide(&id, &hash, "alice", Decision::Approve).await;
    s.decide(&id, &hash, "carol", Decision::Approve).await;
    let s = std::sync::Arc::new(s);
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let (s, id, hash) = (s.clone(), id.clone(), hash.clone());
        tasks.push(tokio::spawn(async move {
            s.call(
                "approval_execute",
                json!({"proposal_id": id, "preview_sha256": hash}),
            )
            .await
        }));
    }
    let mut codes = std::collections::BTreeMap::<String, usize>::new();
    for t in tasks {
        let (_, out) = t.await.unwrap();
        *codes
            .entry(out["code"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(codes.get("SUCCEEDED"), Some(&1), "{codes:?}");
    let others: usize = codes
        .iter()
        .filter(|(k, _)| *k != "SUCCEEDED")
        .map(|(_, v)| v)
        .sum();
    assert_eq!(others, 99);
    assert!(
        codes.keys().all(|k| [
            "SUCCEEDED",
            "ALREADY_EXECUTED_NO_REPLAY",
            "EXECUTION_IN_PROGRESS"
        ]
        .contains(&k.as_str())),
        "{codes:?}"
    );
    let files = std::fs::read_dir(s.dir.path().join("sandbox"))
        .unwrap()
        .count();
    assert_eq!(files, 1);
}

#[tokio::test]
async fn preview_mismatch_and_unknown_ids_change_nothing() {
    let s = start().await;
    let (id, hash) = s.prepare("x").await;
    s.decide(&id, &hash, "alice", Decision::Approve).await;
    s.decide(&id, &hash, "carol", Decision::Approve).await;
    let before = s.snapshot();
    let mut wrong = hash.clone().into_bytes();
    wrong[0] = if wrong[0] == b'a' { b'b' } else { b'a' };
    let (err, out) = s
        .call(
            "approval_execute",
            json!({"proposal_id": id, "preview_sha256": String::from_utf8(wrong).unwrap()}),
        )
        .await;
    assert!(err);
    assert_eq!(out["code"], "PREVIEW_MISMATCH");
    let (err, out) = s
        .call(
            "approval_execute",
            json!({"proposal_id": id, "preview_sha256": "nothex"}),
        )
        .await;
    assert_eq!(
        (err, out["code"].as_str()),
        (true, Some("PREVIEW_MISMATCH"))
    );
    for tool in ["approval_status", "approval_withdraw"] {
        let (err, out) = s.call(tool, json!({"proposal_id": "p-nope"})).await;
        assert_eq!(
            (err, out["code"].as_str()),
            (true, Some("UNKNOWN_PROPOSAL")),
            "{tool}"
        );
    }
    let (err, out) = s
        .call("approval_prepare", json!({"kind": "rm.rf", "payload": {}}))
        .await;
    assert_eq!((err, out["code"].as_str()), (true, Some("UNKNOWN_KIND")));
    assert!(out["message"].as_str().unwrap().contains("note.write"));
    let (err, out) = s
        .call(
            "approval_prepare",
            json!({"kind": "note.write", "payload": {"nottext": 1}}),
        )
        .await;
    assert_eq!(
        (err, out["code"].as_str()),
        (true, Some("INVALID_PAYLOAD")),
        "{out}"
    );
    assert_eq!(s.snapshot(), before);
}

#[tokio::test]
async fn payloads_that_json_cannot_carry_exactly_are_refused_with_a_pointer() {
    let s = start().await;
    let before = s.snapshot();
    let cases = [
        (r#"{"text": "a", "n": 9007199254740993}"#, "/n"),
        (r#"{"text": "a", "x": 0.10000000000000000000000001}"#, "/x"),
        (r#"{"text": "a", "text": "b"}"#, "/text"),
        (r#"{"text": "\ud800"}"#, "/text"),
    ];
    for (payload, ptr) in cases {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"approval_prepare","arguments":{{"kind":"note.write","payload":{payload}}}}}}}"#
        );
        let v: Value = s.rpc_raw(body, &[]).await.json().await.unwrap();
        let r = &v["result"];
        assert_eq!(v["id"], 7);
        assert_eq!(
            (
                r["isError"].as_bool(),
                r["structuredContent"]["code"].as_str()
            ),
            (Some(true), Some("INVALID_PAYLOAD")),
            "{payload}: {v}"
        );
        assert!(
            r["structuredContent"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("at {ptr}")),
            "{payload}: {v}"
        );
    }
    assert_eq!(s.snapshot(), before);
}

#[tokio::test]
async fn protocol_faults_are_json_rpc_errors() {
    let s = start().await;
    let v: Value = s
        .rpc_raw("{not json".into(), &[])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["error"]["code"], -32700, "{v}");
    let v = s
        .rpc(
            "tools/call",
            json!({"name": "approval_approve", "arguments": {}}),
        )
        .await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    let v = s
        .rpc(
            "tools/call",
            json!({"name": "approval_status", "arguments": {"proposal_id": 5}}),
        )
        .await;
    // Bad arguments are the agent's to fix: an isError result it can read (SEP-1303).
    let r = &v["result"];
    assert_eq!(
        (
            r["isError"].as_bool(),
            r["structuredContent"]["code"].as_str()
        ),
        (Some(true), Some("INVALID_ARGUMENTS")),
        "{v}"
    );
    let (err, out) = s
        .call("approval_status", json!({"proposal_id": "p", "extra": 1}))
        .await;
    assert_eq!(
        (err, out["code"].as_str()),
        (true, Some("INVALID_ARGUMENTS"))
    );
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `extra`"),
        "{out}"
    );
    let (err, out) = s.call("approval_list", json!({"status": "DONE"})).await;
    assert_eq!(
        (err, out["code"].as_str()),
        (true, Some("INVALID_ARGUMENTS"))
    );
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":"{}"}}}}"#,
        "a".repeat(6 * 1024 * 1024)
    );
    assert_eq!(s.rpc_raw(big, &[]).await.status().as_u16(), 413);
}

#[tokio::test]
async fn dns_rebinding_and_agent_tokens() {
    let s = start().await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    assert_eq!(
        s.rpc_raw(ping.clone(), &[("Origin", "http://evil.example")])
            .await
            .status()
            .as_u16(),
        403
    );
    assert_eq!(
        s.rpc_raw(ping.clone(), &[("Host", "evil.example")])
            .await
            .status()
            .as_u16(),
        403
    );
    assert_eq!(s.rpc_raw(ping.clone(), &[]).await.status().as_u16(), 200);
    // The server's own loopback origin (same port) is accepted; another port is not.
    let own = format!("http://127.0.0.1:{}", s.addr.port());
    assert_eq!(
        s.rpc_raw(ping.clone(), &[("Origin", &own)])
            .await
            .status()
            .as_u16(),
        200
    );
    let other = format!("http://localhost:{}", s.addr.port() as u32 + 1);
    assert_eq!(
        s.rpc_raw(ping.clone(), &[("Origin", &other)])
            .await
            .status()
            .as_u16(),
        403
    );

    let token = approval_server::agents::new_token().unwrap();
    let line = approval_server::agents::line(
        &approval_core::ids::AgentName::parse("bot").unwrap(),
        &token,
    );
    let s = start_with(&[("note.write.toml", NOTE_POLICY)], Some(&line)).await;
    assert_eq!(s.rpc_raw(ping.clone(), &[]).await.status().as_u16(), 401);
    assert_eq!(
        s.rpc_raw(ping.clone(), &[("Authorization", "Bearer agt_wrong")])
            .await
            .status()
            .as_u16(),
        401
    );
    let auth = format!("Bearer {token}");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "approval_prepare", "arguments": {"kind": "note.write", "payload": {"text": "t"}, "requested_by": "admin"}}}).to_string();
    let v: Value = s
        .rpc_raw(body, &[("Authorization", &auth)])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["result"]["structuredContent"]["code"], "INVALID_ARGUMENTS",
        "requested_by cannot be an argument: {v}"
    );
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "approval_prepare", "arguments": {"kind": "note.write", "payload": {"text": "t"}}}}).to_string();
    let v: Value = s
        .rpc_raw(body, &[("Authorization", &auth)])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["result"]["structuredContent"]["preview"]["requested_by"], "bot",
        "{v}"
    );
}

#[tokio::test]
async fn signed_reads_are_required_and_scoped() {
    let s = start().await;
    let (id, _) = s.prepare("x").await;
    let r = s
        .http
        .get(format!("http://{}/v1/proposals", s.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let (code, v) = s.get_signed("alice", "/v1/proposals?status=pending").await;
    assert_eq!(code, 200);
    assert_eq!(v["proposals"][0]["proposal_id"], json!(id));
    let view = &v["proposals"][0];
    let preview = approval_core::Preview::from_value(&view["preview"]).unwrap();
    assert_eq!(
        preview.sha256().to_string(),
        view["preview_sha256"].as_str().unwrap()
    );
    let (code, v) = s.get_signed("dave", "/v1/proposals?status=pending").await;
    assert_eq!(
        (code, v["proposals"].as_array().map(|a| a.len())),
        (200, Some(0))
    );
    let (code, _) = s.get_signed("alice", &format!("/v1/proposals/{id}")).await;
    assert_eq!(code, 200);
    // A read signed at another time than the server's clock is refused.
    s.clock.advance(301);
    let k = key("alice");
    let auth = approval_core::message::sign_read(
        &k.key,
        &k.name,
        s.svc.store().server_id(),
        T0,
        "GET",
        "/v1/proposals",
    );
    let r = s
        .http
        .get(format!("http://{}/v1/proposals", s.addr))
        .header("Authorization", auth)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let health: Value = s
        .http
        .get(format!("http://{}/healthz", s.addr))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["server_id"], json!(s.svc.store().server_id()));
    let (code, v) = s
        .get_signed("alice", &format!("/v1/proposals/{id}/receipt"))
        .await;
    assert_eq!(
        (code, v["code"].as_str()),
        (409, Some("INVALID_TRANSITION"))
    );
}

#[tokio::test]
async fn expiry_withdraw_and_list() {
    let s = start().await;
    let (a, hash_a) = s.prepare("a").await;
    let (b, _) = s.prepare("b").await;
    let (err, out) = s.call("approval_withdraw", json!({"proposal_id": b})).await;
    assert_eq!((err, out["code"].as_str()), (false, Some("WITHDRAWN")));
    let (err, out) = s.call("approval_withdraw", json!({"proposal_id": b})).await;
    assert_eq!((err, out["code"].as_str()), (true, Some("WITHDRAWN")));
    let (_, list) = s.call("approval_list", json!({"status": "PENDING"})).await;
    assert_eq!(list["proposals"].as_array().unwrap().len(), 1);
    s.clock.advance(30 * 60);
    let (_, st) = s.call("approval_status", json!({"proposal_id": a})).await;
    assert_eq!(
        (st["code"].as_str(), st["retry_allowed"].as_bool()),
        (Some("EXPIRED"), Some(false))
    );
    let (code, v) = s.decide(&a, &hash_a, "alice", Decision::Approve).await;
    assert_eq!((code, v["status"].as_str()), (409, Some("EXPIRED")));
    assert_eq!(s.svc.sweep().await.unwrap(), 1);
    assert_eq!(s.svc.store().count_status(Status::Expired).unwrap(), 1);
    let (_, list) = s.call("approval_list", json!({})).await;
    assert_eq!(list["proposals"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn an_approval_expires_after_execute_within_and_revoke_ends_it() {
    let s = start().await;
    let (a, ha) = s.prepare("a").await;
    s.decide(&a, &ha, "alice", Decision::Approve).await;
    s.decide(&a, &ha, "carol", Decision::Approve).await;
    s.clock.advance(10 * 60);
    let (err, out) = s
        .call(
            "approval_execute",
            json!({"proposal_id": a, "preview_sha256": ha}),
        )
        .await;
    assert_eq!((err, out["code"].as_str()), (true, Some("EXPIRED")));
    let (b, hb) = s.prepare("b").await;
    s.decide(&b, &hb, "alice", Decision::Approve).await;
    s.decide(&b, &hb, "carol", Decision::Approve).await;
    let (code, v) = s.decide(&b, &hb, "bob", Decision::Revoke).await;
    assert_eq!(
        (code, v["proposal"]["status"].as_str()),
        (200, Some("REVOKED"))
    );
    let (err, out) = s
        .call(
            "approval_execute",
            json!({"proposal_id": b, "preview_sha256": hb}),
        )
        .await;
    assert_eq!((err, out["code"].as_str()), (true, Some("REVOKED")));
}

#[tokio::test]
async fn wait_seconds_returns_when_a_decision_lands() {
    let s = std::sync::Arc::new(start().await);
    let (id, hash) = s.prepare("w").await;
    let s2 = s.clone();
    let id2 = id.clone();
    let waiter = tokio::spawn(async move {
        s2.call(
            "approval_status",
            json!({"proposal_id": id2, "wait_seconds": 20}),
        )
        .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    s.decide(&id, &hash, "alice", Decision::Approve).await;
    let (_, st) = waiter.await.unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(st["approvals"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn policy_change_and_reload() {
    let s = start().await;
    let (id, hash) = s.prepare("x").await;
    // A broken file keeps the old configuration.
    std::fs::write(
        s.policies.join("note.write.toml"),
        NOTE_POLICY.replace("quorum = 2", "quorum = 9"),
    )
    .unwrap();
    assert!(s.svc.reload().await.is_err());
    let (_, st) = s.call("approval_status", json!({"proposal_id": id})).await;
    assert_eq!(st["code"], "PENDING_QUORUM");
    // A valid edit voids the proposals made under the old policy.
    std::fs::write(
        s.policies.join("note.write.toml"),
        NOTE_POLICY.replace("ttl = \"30m\"", "ttl = \"1h\""),
    )
    .unwrap();
    assert_eq!(s.svc.reload().await.unwrap(), 1);
    let (_, st) = s.call("approval_status", json!({"proposal_id": id})).await;
    assert_eq!(st["code"], "POLICY_CHANGED");
    let (code, _) = s.decide(&id, &hash, "alice", Decision::Approve).await;
    assert_eq!(code, 409);
    let (id2, _) = s.prepare("y").await;
    assert_ne!(id, id2);
}

#[tokio::test]
async fn a_record_left_executing_becomes_outcome_unknown_and_is_never_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let s = start().await;
    let (id, hash) = s.prepare("crash").await;
    s.decide(&id, &hash, "alice", Decision::Approve).await;
    s.decide(&id, &hash, "carol", Decision::Approve).await;
    // Claim without running: what a crash right after the claim leaves behind.
    let rec = s
        .svc
        .store()
        .get(&approval_core::ProposalId::parse(&id).unwrap())
        .unwrap()
        .unwrap();
    let now = approval_core::Timestamp::from_unix(T0);
    let claimed = rec.with_lifecycle(rec.lifecycle.claim(now).unwrap(), now);
    assert!(matches!(
        s.svc.store().update(&claimed, vec![]).unwrap(),
        approval_server::store::Cas::Applied
    ));
    assert_eq!(s.svc.recover().await.unwrap(), 1);
    let (_, st) = s.call("approval_status", json!({"proposal_id": id})).await;
    assert_eq!(st["code"], "OUTCOME_UNKNOWN");
    let (err, out) = s
        .call(
            "approval_execute",
            json!({"proposal_id": id, "preview_sha256": hash}),
        )
        .await;
    assert_eq!(
        (err, out["code"].as_str()),
        (true, Some("ALREADY_EXECUTED_NO_REPLAY"))
    );
    assert!(
        !s.dir.path().join("sandbox").exists(),
        "the effect must not have run"
    );
    let (code, v) = s.decide(&id, &hash, "bob", Decision::ResolveFailed).await;
    assert_eq!(
        (code, v["proposal"]["status"].as_str()),
        (200, Some("FAILED"))
    );
    drop(store_dir);
}

#[tokio::test]
async fn audit_verify_catches_an_edited_entry() {
    let s = start().await;
    let (id, hash) = s.prepare("audited").await;
    s.decide(&id, &hash, "alice", Decision::Approve).await;
    let (entries, head) = s.svc.store().audit().unwrap();
    assert_eq!(verify_chain(entries.clone(), head), Ok(2));
    let data = s.dir.path().join("store");
    let svc = s.svc.clone();
    drop(s);
    drop(svc);
    // Reopen the store alone (the server is gone) and edit one entry.
    let mut reopened = None;
    for _ in 0..100 {
        match SledStore::open(&data) {
            Ok(st) => {
                reopened = Some(st);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
    let store = reopened.expect("store reopens");
    let mut edited: AuditEntry = entries[0].clone();
    edited.event.detail = json!({"agent": "someone-else"});
    store.tamper_audit_entry(1, &edited).unwrap();
    let (entries, head) = approval_server::store::Store::audit(&store).unwrap();
    assert!(verify_chain(entries, head).is_err());
}

#[tokio::test]
async fn events_stream_new_and_changed_proposals_to_watchers() {
    let s = start().await;
    let k = key("bob");
    let auth = approval_core::message::sign_read(
        &k.key,
        &k.name,
        s.svc.store().server_id(),
        T0,
        "GET",
        "/v1/events",
    );
    let mut resp = s
        .http
        .get(format!("http://{}/v1/events", s.addr))
        .header("Authorization", auth)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let (id, hash) = s.prepare("watched").await;
    s.decide(&id, &hash, "alice", Decision::Approve).await;
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while seen.matches("event: proposal").count() < 2 {
        let chunk = tokio::time::timeout_at(deadline, resp.chunk())
            .await
            .expect("events arrive")
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains(&id), "{seen}");
    assert!(
        seen.contains(r#""have":1"#),
        "the second event shows alice's approval: {seen}"
    );
}

#[tokio::test]
async fn replacing_an_approvers_key_after_approval_ends_the_proposal() {
    let s = start().await;
    let (id, hash) = s.prepare("rekeyed").await;
    s.decide(&id, &hash, "alice", Decision::Approve).await;
    s.decide(&id, &hash, "carol", Decision::Approve).await;
    let (_, st) = s.call("approval_status", json!({"proposal_id": id})).await;
    assert_eq!(st["executable"], true);
    // alice's key is replaced: her signature no longer counts, quorum is lost.
    let new_alice = approval_core::keyring::SecretKey::from_seed(
        approval_core::ApproverName::parse("alice").unwrap(),
        [42; 32],
    );
    let text = keyring_text(&["bob", "carol", "dave"]) + &new_alice.keyring_line() + "\n";
    std::fs::write(&s.keys, text).unwrap();
    assert_eq!(s.svc.reload().await.unwrap(), 1);
    let (_, st) = s.call("approval_status", json!({"proposal_id": id})).await;
    assert_eq!(
        (
            st["code"].as_str(),
            st["executable"].as_bool(),
            st["retry_allowed"].as_bool()
        ),
        (Some("POLICY_CHANGED"), Some(false), Some(false))
    );
    let (err, out) = s
        .call(
            "approval_execute",
            json!({"proposal_id": id, "preview_sha256": hash}),
        )
        .await;
    assert_eq!((err, out["code"].as_str()), (true, Some("POLICY_CHANGED")));
    assert!(!s.dir.path().join("sandbox").exists());
}

/// `GET /v1/proposals` answers one page at a time (issue #11 item 6): `limit` (at
/// most 100) and a `next_cursor` that walks every proposal exactly once, also when
/// several were made in the same second.
#[tokio::test]
async fn approver_listing_pages_by_cursor() {
    let s = start().await;
    let mut made = std::collections::BTreeSet::new();
    for i in 0..5 {
        made.insert(s.prepare(&format!("page {i}")).await.0);
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut path = "/v1/proposals?status=pending&limit=2".to_owned();
    let mut pages = 0;
    loop {
        let (code, v) = s.get_signed("alice", &path).await;
        assert_eq!(code, 200, "{v}");
        let items = v["proposals"].as_array().cloned().unwrap_or_default();
        assert!(items.len() <= 2, "{v}");
        for it in &items {
            let id = it["proposal_id"].as_str().unwrap().to_owned();
            assert!(seen.insert(id), "listed twice: {v}");
        }
        pages += 1;
        match v["next_cursor"].as_str() {
            Some(c) => path = format!("/v1/proposals?status=pending&limit=2&cursor={c}"),
            None => break,
        }
        assert!(pages < 10, "the cursor does not advance: {v}");
    }
    assert_eq!((seen, pages), (made, 3));
    let (code, v) = s.get_signed("alice", "/v1/proposals?limit=1000").await;
    assert_eq!(code, 200);
    assert_eq!(v["proposals"].as_array().map(Vec::len), Some(5));
    assert_eq!(v["next_cursor"], Value::Null);
    let (code, v) = s
        .get_signed("alice", "/v1/proposals?cursor=not-a-cursor")
        .await;
    assert_eq!(
        (code, v["code"].as_str()),
        (400, Some("BAD_REQUEST")),
        "{v}"
    );
}
