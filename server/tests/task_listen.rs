//! `subscriptions/listen` for task status (`notifications/tasks`, SEP-2663; issue #33),
//! as raw JSON-RPC over a real loopback port: what is acknowledged, what is pushed as
//! approvals land, how the stream ends, and what a listen may not do.

mod common;

use approval_core::message::Decision;
use approval_core::Sha256Hex;
use common::*;
use serde_json::{json, Value};
use std::time::Duration;

const TOKEN_A: &str = "token-of-agent-a-0123456789";
const TOKEN_B: &str = "token-of-agent-b-0123456789";

async fn server() -> TestServer {
    let policy = NOTE_POLICY.replace("quorum = 2", "quorum = 2\nexpose = true");
    let agents = format!(
        "agent-a {}\nagent-b {}\n",
        Sha256Hex::digest(TOKEN_A.as_bytes()),
        Sha256Hex::digest(TOKEN_B.as_bytes())
    );
    start_with(&[("note.write.toml", policy.as_str())], Some(&agents)).await
}

fn meta(tasks: bool) -> Value {
    let caps = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"},
    })
}

fn post(s: &TestServer, token: &str, method: &str, body: Value) -> reqwest::RequestBuilder {
    s.http
        .post(s.mcp_url())
        .header("Mcp-Method", method)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Authorization", format!("Bearer {token}"))
        .body(body.to_string())
}

/// A task made by calling the exposed kind as `token`'s agent.
async fn new_task(s: &TestServer, token: &str, text: &str) -> String {
    let params = json!({"name": "note.write", "arguments": {"text": text}, "_meta": meta(true)});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let v: Value = post(s, token, "tools/call", body)
        .header("Mcp-Name", "note.write")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["result"]["taskId"].as_str().expect("a task").to_owned()
}

fn listen_body(ids: Value, tasks: bool) -> Value {
    json!({"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen",
           "params": {"notifications": {"tasksStatus": ids}, "_meta": meta(tasks)}})
}

/// An open listen stream, read message by message.
struct Stream {
    resp: reqwest::Response,
    buf: String,
}

impl Stream {
    async fn open(s: &TestServer, token: &str, ids: Value) -> Stream {
        let resp = post(s, token, "subscriptions/listen", listen_body(ids, true))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        Stream {
            resp,
            buf: String::new(),
        }
    }

    /// The next JSON-RPC message, or `None` when the stream ended; at most 10 s.
    async fn next(&mut self) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..end + 2).collect();
                let data: String = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                return Some(serde_json::from_str(&data).unwrap());
            }
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk())
                .await
                .expect("a message within 10 s")
                .unwrap();
            match chunk {
                Some(c) => self.buf.push_str(&String::from_utf8_lossy(&c)),
                None => return None,
            }
        }
    }
}

#[tokio::test]
async fn a_listen_pushes_each_change_of_its_own_tasks_and_ends_when_they_finish() {
    let s = server().await;
    let mine = new_task(&s, TOKEN_A, "listened").await;
    let theirs = new_task(&s, TOKEN_B, "not yours").await;
    let mut st = Stream::open(&s, TOKEN_A, json!([mine, theirs, "p-made-up", mine])).await;
    // The acknowledgement names only the caller's own task, once.
    let ack = st.next().await.unwrap();
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["tasksStatus"],
        json!([mine]),
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "listen-1"
    );
    // Then its current state, as tasks/get tells it.
    let first = st.next().await.unwrap();
    assert_eq!(first["method"], "notifications/tasks", "{first}");
    assert_eq!(first["params"]["taskId"], mine.as_str());
    assert_eq!(first["params"]["status"], "working");
    assert!(first["params"]["statusMessage"]
        .as_str()
        .unwrap()
        .contains("2 more approval"));
    let rec = s
        .svc
        .store()
        .get(&approval_core::ProposalId::parse(&mine).unwrap())
        .unwrap()
        .unwrap();
    let hash = rec.preview_sha256.to_string();
    let (code, v) = s.decide(&mine, &hash, "carol", Decision::Approve).await;
    assert_eq!(code, 200, "{v}");
    let after_one = st.next().await.unwrap();
    assert_eq!(after_one["params"]["status"], "working", "{after_one}");
    assert!(
        after_one["params"]["statusMessage"]
            .as_str()
            .unwrap()
            .contains("1 more approval"),
        "{after_one}"
    );
    let (code, v) = s.decide(&mine, &hash, "bob", Decision::Approve).await;
    assert_eq!(code, 200, "{v}");
    // Working notices as the gate takes it, then completed with the result inlined.
    let mut last = Value::Null;
    let mut seen = Vec::new();
    while let Some(m) = st.next().await {
        if m["method"] == "notifications/tasks" {
            seen.push(m["params"]["status"].as_str().unwrap().to_owned());
            last = m;
            continue;
        }
        // The listen request's own result ends the stream.
        assert_eq!(m["id"], "listen-1", "{m}");
        assert_eq!(m["result"]["resultType"], "complete", "{m}");
        assert!(st.next().await.is_none(), "nothing after the result");
        break;
    }
    assert_eq!(
        seen.last().map(String::as_str),
        Some("completed"),
        "{seen:?}"
    );
    assert_eq!(last["params"]["result"]["isError"], false, "{last}");
    assert_eq!(
        last["params"]["result"]["structuredContent"]["status"],
        "SUCCEEDED"
    );
    assert_eq!(
        s.svc.long_polls_held(&agent("agent-a")),
        0,
        "the slot is given back"
    );
}

fn agent(name: &str) -> approval_core::ids::AgentName {
    approval_core::ids::AgentName::parse(name).unwrap()
}

#[tokio::test]
async fn a_listen_is_refused_without_the_extension_or_with_too_many_ids() {
    let s = server().await;
    let id = new_task(&s, TOKEN_A, "x").await;
    let v: Value = post(
        &s,
        TOKEN_A,
        "subscriptions/listen",
        listen_body(json!([id]), false),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(v["error"]["code"], -32021, "{v}");
    assert!(v["error"]["data"]["requiredCapabilities"]["extensions"]
        .get("io.modelcontextprotocol/tasks")
        .is_some());
    let many: Vec<String> = (0..17).map(|_| id.clone()).collect();
    let v: Value = post(
        &s,
        TOKEN_A,
        "subscriptions/listen",
        listen_body(json!(many), true),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(v["error"]["code"], -32602, "{v}");
    let v: Value = post(
        &s,
        TOKEN_A,
        "subscriptions/listen",
        listen_body(json!([7]), true),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(v["error"]["code"], -32602, "{v}");
}

#[tokio::test]
async fn one_agents_listens_are_bounded_and_never_hold_anothers_capacity() {
    // The attack: an agent opens listen after listen to pin the server. Each one holds
    // one of its own waits; past the limit it is refused, and another agent's listen
    // and a human's decision go on as before.
    let s = server().await;
    let id = new_task(&s, TOKEN_A, "crowd").await;
    let limit = approval_server::service::long_poll::MAX_LONG_POLLS_PER_AGENT;
    let mut held = Vec::new();
    for _ in 0..limit {
        let mut st = Stream::open(&s, TOKEN_A, json!([id])).await;
        st.next().await.unwrap();
        held.push(st);
    }
    assert_eq!(s.svc.long_polls_held(&agent("agent-a")), limit);
    let v: Value = post(
        &s,
        TOKEN_A,
        "subscriptions/listen",
        listen_body(json!([id]), true),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("waits"),
        "{v}"
    );
    let theirs = new_task(&s, TOKEN_B, "other").await;
    let mut other = Stream::open(&s, TOKEN_B, json!([theirs])).await;
    let ack = other.next().await.unwrap();
    assert_eq!(
        ack["params"]["notifications"]["tasksStatus"],
        json!([theirs])
    );
    let rec = s
        .svc
        .store()
        .get(&approval_core::ProposalId::parse(&id).unwrap())
        .unwrap()
        .unwrap();
    let (code, v) = s
        .decide(
            &id,
            &rec.preview_sha256.to_string(),
            "carol",
            Decision::Reject,
        )
        .await;
    assert_eq!(code, 200, "{v}");
    // Closing the streams gives the slots back.
    drop(held);
    for _ in 0..100 {
        if s.svc.long_polls_held(&agent("agent-a")) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "slots still held after the streams closed: {}",
        s.svc.long_polls_held(&agent("agent-a"))
    );
}
