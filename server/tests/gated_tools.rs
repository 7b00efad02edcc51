//! Gated tools under their own names and MCP tasks (issue #33), as raw JSON-RPC over
//! a real loopback port: one test per rule. The end-to-end runs (a real downstream
//! server, FastMCP's client, PostgreSQL, restarts) are in `tests/tests/gated.rs` and
//! `tests/interop/`.

mod common;

use approval_core::message::Decision;
use approval_core::Sha256Hex;
use common::*;
use serde_json::{json, Value};
use std::time::Duration;

/// note.write as an exposed kind.
fn exposed_policy() -> String {
    NOTE_POLICY.replace("quorum = 2", "quorum = 2\nexpose = true")
}

/// A second kind that is not exposed.
const HIDDEN: &str = r#"kind = "email.send"
quorum = 1
approvers = ["alice"]
[executor]
type = "note"
"#;

const TOKEN_A: &str = "token-of-agent-a-0123456789";
const TOKEN_B: &str = "token-of-agent-b-0123456789";

fn agents() -> String {
    format!(
        "agent-a {}\nagent-b {}\n",
        Sha256Hex::digest(TOKEN_A.as_bytes()),
        Sha256Hex::digest(TOKEN_B.as_bytes())
    )
}

async fn server() -> TestServer {
    let p = exposed_policy();
    start_with(
        &[("note.write.toml", p.as_str()), ("email.send.toml", HIDDEN)],
        Some(&agents()),
    )
    .await
}

/// One JSON-RPC request of revision 2026-07-28 (stateless: what the request carries
/// is all there is), as `token`'s agent, declaring the tasks extension or not.
async fn rpc26(s: &TestServer, token: &str, tasks: bool, method: &str, params: Value) -> Value {
    rpc26_named(s, token, tasks, method, params, Naming::FromBody).await
}

/// What `Mcp-Name` header a request carries.
enum Naming {
    FromBody,
    Absent,
    Given(&'static str),
}

async fn rpc26_named(
    s: &TestServer,
    token: &str,
    tasks: bool,
    method: &str,
    params: Value,
    naming: Naming,
) -> Value {
    let caps = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"},
    });
    let name = match naming {
        Naming::FromBody => params
            .get("name")
            .or_else(|| params.get("taskId"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        Naming::Absent => None,
        Naming::Given(n) => Some(n.to_owned()),
    };
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let mut req = s.http.post(s.mcp_url()).header("Mcp-Method", method);
    if let Some(n) = name {
        req = req.header("Mcp-Name", n);
    }
    let r = req
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Authorization", format!("Bearer {token}"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    r.json().await.unwrap()
}

/// A call of an older revision (no `_meta`): the direct path.
async fn rpc_old(s: &TestServer, token: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    s.rpc_raw(body, &[("Authorization", &format!("Bearer {token}"))])
        .await
        .json()
        .await
        .unwrap()
}

async fn approve(s: &TestServer, id: &str, hash: &str, who: &[&str]) {
    for w in who {
        let (code, v) = s.decide(id, hash, w, Decision::Approve).await;
        assert_eq!(code, 200, "{w}: {v}");
    }
}

/// Polls `tasks/get` until the task leaves `working` (the gate runs it in the
/// background), at most 10 s.
async fn until_done(s: &TestServer, token: &str, id: &str) -> Value {
    for _ in 0..200 {
        let v = rpc26(s, token, true, "tasks/get", json!({"taskId": id})).await;
        if v["result"]["status"] != "working" {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {id} still working after 10 s");
}

fn notes(s: &TestServer) -> usize {
    std::fs::read_dir(s.dir.path().join("sandbox"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[tokio::test]
async fn an_exposed_kind_is_listed_as_its_own_tool_and_the_gates_tools_stay() {
    let s = server().await;
    let v = rpc26(&s, TOKEN_A, false, "tools/list", json!({})).await;
    let tools = v["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "approval_prepare",
            "approval_status",
            "approval_execute",
            "approval_list",
            "approval_withdraw",
            "note.write"
        ],
        "email.send is not exposed, so not listed"
    );
    let t = &tools[5];
    assert_eq!(t["inputSchema"]["required"], json!(["text"]));
    assert_eq!(t["annotations"]["destructiveHint"], true);
    assert_eq!(t["annotations"]["readOnlyHint"], false);
    let d = t["description"].as_str().unwrap();
    assert!(d.starts_with("Write a note"), "{d}");
    assert!(
        d.contains("Needs approval: 2 of alice, bob, carol (and 1 of carol)"),
        "{d}"
    );
    let meta = &t["_meta"]["dev.approval-gate/approval"];
    assert_eq!(meta["required"], true);
    assert_eq!(meta["quorum"], 2);
    assert_eq!(meta["execution"], "on_quorum");
    // The server says it speaks tasks and the tool-approval draft.
    let d = rpc26(&s, TOKEN_A, false, "server/discover", json!({})).await;
    let ext = &d["result"]["capabilities"]["extensions"];
    assert!(ext["io.modelcontextprotocol/tasks"].is_object(), "{d}");
    assert!(
        ext["io.modelcontextprotocol/tool-approval"].is_object(),
        "{d}"
    );
}

#[tokio::test]
async fn a_call_without_tasks_is_a_proposal_answered_at_once_with_what_to_do_next() {
    let s = server().await;
    for old in [false, true] {
        let args = json!({"name": "note.write", "arguments": {"text": "hello"}});
        let v = if old {
            rpc_old(&s, TOKEN_A, "tools/call", args).await
        } else {
            rpc26(&s, TOKEN_A, false, "tools/call", args).await
        };
        let r = &v["result"];
        assert_eq!(r["isError"], false, "{v}");
        assert!(
            r.get("taskId").is_none(),
            "no task without the extension: {v}"
        );
        let out = &r["structuredContent"];
        assert_eq!(out["status"], "PENDING");
        assert_eq!(out["required"]["quorum"], 2);
        let next = out["next"].as_str().unwrap();
        assert!(
            next.contains("approval_status") && next.contains("Do not call approval_execute"),
            "{next}"
        );
        let id = out["proposal_id"].as_str().unwrap();
        let hash = out["preview_sha256"].as_str().unwrap();
        // The signed preview says it runs on quorum; the payload is the arguments.
        let rec = s
            .svc
            .store()
            .get(&approval_core::ProposalId::parse(id).unwrap())
            .unwrap()
            .unwrap();
        let preview = rec.preview.to_value();
        assert_eq!(preview["execution"], "on_quorum");
        assert_eq!(preview["payload"], json!({"text": "hello"}));
        assert_eq!(rec.preview_sha256.to_string(), hash);
        // Quorum: the gate runs it by itself, once; approval_status shows the result.
        let before = notes(&s);
        approve(&s, id, hash, &["alice", "carol"]).await;
        let mut status = Value::Null;
        for _ in 0..200 {
            let v = rpc_old(
                &s,
                TOKEN_A,
                "tools/call",
                json!({"name": "approval_status", "arguments": {"proposal_id": id}}),
            )
            .await;
            status = v["result"]["structuredContent"].clone();
            if status["status"] == "SUCCEEDED" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(status["status"], "SUCCEEDED", "{status}");
        assert_eq!(notes(&s), before + 1);
        // The agent's own execute afterwards is refused: it ran once.
        let v = rpc_old(&s, TOKEN_A, "tools/call", json!({"name": "approval_execute", "arguments": {"proposal_id": id, "preview_sha256": hash}})).await;
        assert_eq!(
            v["result"]["structuredContent"]["code"], "ALREADY_EXECUTED_NO_REPLAY",
            "{v}"
        );
        assert_eq!(notes(&s), before + 1);
    }
}

#[tokio::test]
async fn a_call_with_tasks_gets_a_task_that_works_until_quorum_then_completes_with_the_result() {
    let s = server().await;
    let v = rpc26(
        &s,
        TOKEN_A,
        true,
        "tools/call",
        json!({"name": "note.write", "arguments": {"text": "task"}}),
    )
    .await;
    let r = &v["result"];
    assert_eq!(r["resultType"], "task", "{v}");
    assert_eq!(r["status"], "working");
    for f in ["taskId", "createdAt", "lastUpdatedAt"] {
        assert!(r[f].is_string(), "{f}: {v}");
    }
    assert_eq!(r["ttlMs"], 30 * 60 * 1000, "the policy's ttl");
    assert_eq!(r["pollIntervalMs"], 2000);
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/authorization"]["remediation"],
        "available"
    );
    let id = r["taskId"].as_str().unwrap().to_owned();
    let rec = s
        .svc
        .store()
        .get(&approval_core::ProposalId::parse(&id).unwrap())
        .unwrap()
        .unwrap();
    let hash = rec.preview_sha256.to_string();
    // Working, with words a human can act on.
    let g = rpc26(&s, TOKEN_A, true, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(g["result"]["resultType"], "complete", "{g}");
    assert_eq!(g["result"]["status"], "working");
    let m = g["result"]["statusMessage"].as_str().unwrap();
    assert!(
        m.contains(&hash[..8])
            && m.contains(&format!("signer-cli approve {id}"))
            && m.contains("2 more approval"),
        "{m}"
    );
    approve(&s, &id, &hash, &["carol"]).await;
    let g = rpc26(&s, TOKEN_A, true, "tasks/get", json!({"taskId": id})).await;
    assert!(
        g["result"]["statusMessage"]
            .as_str()
            .unwrap()
            .contains("1 more approval"),
        "{g}"
    );
    approve(&s, &id, &hash, &["bob"]).await;
    let done = until_done(&s, TOKEN_A, &id).await;
    let t = &done["result"];
    assert_eq!(t["status"], "completed", "{done}");
    assert_eq!(t["result"]["isError"], false, "{done}");
    assert_eq!(
        t["result"]["structuredContent"]["status"], "SUCCEEDED",
        "{done}"
    );
    assert_eq!(
        t["result"]["_meta"]["io.modelcontextprotocol/tool-approval-disposition"],
        "approved-executed"
    );
    assert_eq!(notes(&s), 1);
}

#[tokio::test]
async fn refusals_end_as_completed_with_is_error_and_the_code() {
    let s = server().await;
    let make = || async {
        let v = rpc26(
            &s,
            TOKEN_A,
            true,
            "tools/call",
            json!({"name": "note.write", "arguments": {"text": "no"}}),
        )
        .await;
        let id = v["result"]["taskId"].as_str().unwrap().to_owned();
        let rec = s
            .svc
            .store()
            .get(&approval_core::ProposalId::parse(&id).unwrap())
            .unwrap()
            .unwrap();
        (id, rec.preview_sha256.to_string())
    };
    // Rejected.
    let (rejected, hash) = make().await;
    assert_eq!(
        s.decide(&rejected, &hash, "bob", Decision::Reject).await.0,
        200
    );
    // Revoked after quorum, inside a cooldown-free policy: the revoke races the gate,
    // so it is not tested here (see cooldown below); expired:
    let (expired, _) = make().await;
    s.clock.advance(31 * 60);
    for (id, code, disposition) in [
        (&rejected, "REJECTED", "denied-not-executed"),
        (&expired, "EXPIRED", "denied-not-executed"),
    ] {
        let g = rpc26(&s, TOKEN_A, true, "tasks/get", json!({"taskId": id})).await;
        let t = &g["result"];
        assert_eq!(t["status"], "completed", "{g}");
        assert_eq!(t["result"]["isError"], true, "{g}");
        assert_eq!(t["result"]["structuredContent"]["code"], code, "{g}");
        assert_eq!(
            t["result"]["_meta"]["io.modelcontextprotocol/tool-approval-disposition"],
            disposition
        );
        assert_eq!(
            t["result"]["_meta"]["io.modelcontextprotocol/authorization"]["remediation"],
            "unavailable"
        );
        assert!(
            t["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with(code),
            "{g}"
        );
    }
    assert_eq!(notes(&s), 0);
}

#[tokio::test]
async fn a_revoke_during_the_cooldown_ends_the_task_and_nothing_runs() {
    let p = exposed_policy().replace(
        "execute_within = \"10m\"",
        "execute_within = \"10m\"\ncooldown = \"1m\"",
    );
    let s = start_with(&[("note.write.toml", p.as_str())], Some(&agents())).await;
    let v = rpc26(
        &s,
        TOKEN_A,
        true,
        "tools/call",
        json!({"name": "note.write", "arguments": {"text": "cool"}}),
    )
    .await;
    let id = v["result"]["taskId"].as_str().unwrap().to_owned();
    let rec = s
        .svc
        .store()
        .get(&approval_core::ProposalId::parse(&id).unwrap())
        .unwrap()
        .unwrap();
    let hash = rec.preview_sha256.to_string();
    approve(&s, &id, &hash, &["alice", "carol"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let g = rpc26(&s, TOKEN_A, true, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(g["result"]["status"], "working", "{g}");
    assert!(
        g["result"]["statusMessage"]
            .as_str()
            .unwrap()
            .contains("cooldown"),
        "{g}"
    );
    assert_eq!(s.decide(&id, &hash, "bob", Decision::Revoke).await.0, 200);
    s.clock.advance(120);
    let g = until_done(&s, TOKEN_A, &id).await;
    assert_eq!(
        g["result"]["result"]["structuredContent"]["code"], "REVOKED",
        "{g}"
    );
    assert_eq!(notes(&s), 0);

    // Without a revoke, the gate runs it once the cooldown is over.
    let v = rpc26(
        &s,
        TOKEN_A,
        true,
        "tools/call",
        json!({"name": "note.write", "arguments": {"text": "later"}}),
    )
    .await;
    let id = v["result"]["taskId"].as_str().unwrap().to_owned();
    let rec = s
        .svc
        .store()
        .get(&approval_core::ProposalId::parse(&id).unwrap())
        .unwrap()
        .unwrap();
    approve(
        &s,
        &id,
        &rec.preview_sha256.to_string(),
        &["alice", "carol"],
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(notes(&s), 0, "not during the cooldown");
    s.clock.advance(61);
    let g = until_done(&s, TOKEN_A, &id).await;
    assert_eq!(
        g["result"]["result"]["structuredContent"]["status"], "SUCCEEDED",
        "{g}"
    );
    assert_eq!(notes(&s), 1);
}

#[tokio::test]
async fn a_task_belongs_to_its_agent_and_tasks_methods_need_the_extension() {
    let s = server().await;
    let v = rpc26(
        &s,
        TOKEN_A,
        true,
        "tools/call",
        json!({"name": "note.write", "arguments": {"text": "mine"}}),
    )
    .await;
    let id = v["result"]["taskId"].as_str().unwrap().to_owned();
    // Another agent: exactly as for a made-up id.
    let other = rpc26(&s, TOKEN_B, true, "tasks/get", json!({"taskId": id})).await;
    let made_up = rpc26(&s, TOKEN_B, true, "tasks/get", json!({"taskId": "p-nope"})).await;
    assert_eq!(other["error"]["code"], -32602, "{other}");
    assert_eq!(made_up["error"]["code"], -32602, "{made_up}");
    assert_eq!(
        other["error"]["message"]
            .as_str()
            .unwrap()
            .replace(&id, "X"),
        made_up["error"]["message"]
            .as_str()
            .unwrap()
            .replace("p-nope", "X")
    );
    let cancel = rpc26(&s, TOKEN_B, true, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(cancel["error"]["code"], -32602, "{cancel}");
    // A proposal made with approval_prepare is not a task.
    let p = rpc26(&s, TOKEN_A, true, "tools/call", json!({"name": "approval_prepare", "arguments": {"kind": "note.write", "payload": {"text": "x"}}})).await;
    let pid = p["result"]["structuredContent"]["proposal_id"]
        .as_str()
        .unwrap();
    let g = rpc26(&s, TOKEN_A, true, "tasks/get", json!({"taskId": pid})).await;
    assert_eq!(g["error"]["code"], -32602, "{g}");
    // Without the extension declared: -32021, before the id is looked at.
    for method in ["tasks/get", "tasks/cancel"] {
        let g = rpc26(&s, TOKEN_A, false, method, json!({"taskId": id})).await;
        assert_eq!(g["error"]["code"], -32021, "{method}: {g}");
    }
    // Removed methods of the extension's first version.
    for method in ["tasks/result", "tasks/list"] {
        let g = rpc26(&s, TOKEN_A, true, method, json!({"taskId": id})).await;
        assert_eq!(g["error"]["code"], -32601, "{method}: {g}");
    }
    // Our tasks never ask for input.
    let u = rpc26(
        &s,
        TOKEN_A,
        true,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {}}),
    )
    .await;
    assert_eq!(u["error"]["code"], -32602, "{u}");
    assert!(
        u["error"]["message"]
            .as_str()
            .unwrap()
            .contains("asks for no input"),
        "{u}"
    );
}

#[tokio::test]
async fn cancel_withdraws_a_pending_task_and_after_the_claim_changes_nothing() {
    let s = server().await;
    let v = rpc26(
        &s,
        TOKEN_A,
        true,
        "tools/call",
        json!({"name": "note.write", "arguments": {"text": "c"}}),
    )
    .await;
    let id = v["result"]["taskId"].as_str().unwrap().to_owned();
    for _ in 0..2 {
        let c = rpc26(&s, TOKEN_A, true, "tasks/cancel", json!({"taskId": id})).await;
        assert_eq!(
            c["result"],
            json!({"resultType": "complete"}),
            "idempotent ack: {c}"
        );
    }
    let g = rpc26(&s, TOKEN_A, true, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(g["result"]["status"], "cancelled", "{g}");
    // Approvals after the cancel change nothing.
    let rec = s
        .svc
        .store()
        .get(&approval_core::ProposalId::parse(&id).unwrap())
        .unwrap()
        .unwrap();
    let (code, _) = s
        .decide(
            &id,
            &rec.preview_sha256.to_string(),
            "alice",
            Decision::Approve,
        )
        .await;
    assert_ne!(code, 200);
    // After it ran, a cancel is acknowledged and the task stays completed.
    let v = rpc26(
        &s,
        TOKEN_A,
        true,
        "tools/call",
        json!({"name": "note.write", "arguments": {"text": "d"}}),
    )
    .await;
    let id = v["result"]["taskId"].as_str().unwrap().to_owned();
    let rec = s
        .svc
        .store()
        .get(&approval_core::ProposalId::parse(&id).unwrap())
        .unwrap()
        .unwrap();
    approve(
        &s,
        &id,
        &rec.preview_sha256.to_string(),
        &["alice", "carol"],
    )
    .await;
    until_done(&s, TOKEN_A, &id).await;
    let c = rpc26(&s, TOKEN_A, true, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(c["result"], json!({"resultType": "complete"}), "{c}");
    let g = rpc26(&s, TOKEN_A, true, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(g["result"]["status"], "completed", "{g}");
    assert_eq!(notes(&s), 1);
}

#[tokio::test]
async fn arguments_that_cannot_be_carried_exactly_are_refused_before_anything_is_proposed() {
    let s = server().await;
    let before = s.snapshot();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"note.write","arguments":{"text":"a","text":"b"}}}"#;
    let v: Value = s
        .rpc_raw(
            body.into(),
            &[("Authorization", &format!("Bearer {TOKEN_A}"))],
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["result"]["isError"], true, "{v}");
    assert_eq!(
        v["result"]["structuredContent"]["code"], "INVALID_PAYLOAD",
        "{v}"
    );
    assert!(
        v["result"]["structuredContent"]["message"]
            .as_str()
            .unwrap()
            .contains("/text"),
        "{v}"
    );
    // A payload the policy's schema refuses is refused the same way as approval_prepare's.
    let v = rpc_old(
        &s,
        TOKEN_A,
        "tools/call",
        json!({"name": "note.write", "arguments": {"nope": 1}}),
    )
    .await;
    assert_eq!(
        v["result"]["structuredContent"]["code"], "INVALID_PAYLOAD",
        "{v}"
    );
    // A kind that is not exposed is not a tool.
    let v = rpc_old(
        &s,
        TOKEN_A,
        "tools/call",
        json!({"name": "email.send", "arguments": {}}),
    )
    .await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert_eq!(s.snapshot(), before, "nothing stored");
}

#[tokio::test]
async fn a_hundred_concurrent_task_polls_while_approvals_land_run_the_effect_once() {
    let s = server().await;
    let v = rpc26(
        &s,
        TOKEN_A,
        true,
        "tools/call",
        json!({"name": "note.write", "arguments": {"text": "many"}}),
    )
    .await;
    let id = v["result"]["taskId"].as_str().unwrap().to_owned();
    let rec = s
        .svc
        .store()
        .get(&approval_core::ProposalId::parse(&id).unwrap())
        .unwrap()
        .unwrap();
    let hash = rec.preview_sha256.to_string();
    let s = std::sync::Arc::new(s);
    let polls: Vec<_> = (0..100)
        .map(|_| {
            let (s, id) = (s.clone(), id.clone());
            tokio::spawn(async move { until_done(&s, TOKEN_A, &id).await })
        })
        .collect();
    approve(&s, &id, &hash, &["alice", "bob", "carol"]).await;
    for p in polls {
        let g = p.await.unwrap();
        assert_eq!(g["result"]["status"], "completed", "{g}");
        assert_eq!(
            g["result"]["result"]["structuredContent"]["status"], "SUCCEEDED",
            "{g}"
        );
    }
    assert_eq!(notes(&s), 1, "the effect ran once");
}

#[tokio::test]
async fn tasks_get_without_an_mcp_name_header_is_named_by_its_task_id() {
    // FastMCP's Tasks client sends no `Mcp-Name` on tasks/*; the body's taskId names it.
    let s = server().await;
    let v = rpc26(
        &s,
        TOKEN_A,
        true,
        "tools/call",
        json!({"name": "note.write", "arguments": {"text": "unnamed"}}),
    )
    .await;
    let id = v["result"]["taskId"].as_str().unwrap().to_owned();
    let g = rpc26_named(
        &s,
        TOKEN_A,
        true,
        "tasks/get",
        json!({"taskId": id}),
        Naming::Absent,
    )
    .await;
    assert_eq!(g["result"]["status"], "working", "{g}");
    assert_eq!(g["result"]["taskId"], id.as_str(), "{g}");
    // A header that is sent and names another task is still refused.
    let g = rpc26_named(
        &s,
        TOKEN_A,
        true,
        "tasks/get",
        json!({"taskId": id}),
        Naming::Given("00000000000000000000000000000000"),
    )
    .await;
    assert!(g["error"]["code"].is_i64(), "{g}");
    assert!(g.get("result").is_none(), "{g}");
    // And an unnamed cancel of it works as a named one does.
    let c = rpc26_named(
        &s,
        TOKEN_A,
        true,
        "tasks/cancel",
        json!({"taskId": id}),
        Naming::Absent,
    )
    .await;
    assert!(c.get("result").is_some(), "{c}");
    assert_eq!(notes(&s), 0);
}
