//! An in-process server on a real loopback port, with a clock the tests move.
#![allow(dead_code)]

use approval_core::keyring::SecretKey;
use approval_core::message::{sign_read, Decision, SignedDecision};
use approval_core::{ApproverName, Sha256Hex};
use approval_server::clock::ManualClock;
use approval_server::config::{Config, ConfigSource};
use approval_server::executor::ExecContext;
use approval_server::http::{self, McpOptions};
use approval_server::service::Service;
use approval_server::store::{SledStore, Store};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub const T0: i64 = 1_800_000_000;

pub fn key(name: &str) -> SecretKey {
    let seed = Sha256Hex::digest(name.as_bytes());
    SecretKey::from_seed(ApproverName::parse(name).unwrap(), *seed.as_bytes())
}

pub fn keyring_text(names: &[&str]) -> String {
    names.iter().map(|n| key(n).keyring_line() + "\n").collect()
}

/// note.write: 2 of alice/bob/carol, carol required; one veto.
pub const NOTE_POLICY: &str = r#"kind = "note.write"
description = "Write a note"
quorum = 2
approvers = ["alice", "bob", "carol"]
vetoes = 1
ttl = "30m"
execute_within = "10m"
[[require]]
group = ["carol"]
count = 1
[payload_schema]
type = "object"
required = ["text"]
[executor]
type = "note"
"#;

pub struct TestServer {
    pub dir: tempfile::TempDir,
    pub svc: Arc<Service>,
    pub clock: ManualClock,
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    pub policies: PathBuf,
    pub keys: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn start() -> TestServer {
    start_with(&[("note.write.toml", NOTE_POLICY)], None).await
}

pub async fn start_with(policies: &[(&str, &str)], agents: Option<&str>) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("policies");
    std::fs::create_dir_all(&pdir).unwrap();
    for (name, text) in policies {
        std::fs::write(pdir.join(name), text).unwrap();
    }
    let keys = dir.path().join("keys");
    std::fs::write(&keys, keyring_text(&["alice", "bob", "carol", "dave"])).unwrap();
    let agents_path = agents.map(|a| {
        let p = dir.path().join("agents");
        std::fs::write(&p, a).unwrap();
        p
    });
    let source = ConfigSource {
        policies: pdir.clone(),
        keys: keys.clone(),
        agents: agents_path,
        root: None,
        embedded_policies: None,
    };
    let config: Config = source.load().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(&dir.path().join("store")).unwrap());
    let clock = ManualClock::new(T0);
    let identity =
        approval_server::identity::ServerIdentity::open(dir.path(), store.as_ref()).unwrap();
    let svc = Service::new(
        store,
        identity,
        config,
        Some(source),
        Arc::new(clock.clone()),
        ExecContext::new(dir.path().to_path_buf()),
    );
    // What `run::start` does: the gate runs on-quorum proposals itself (issue #33).
    tokio::spawn(approval_server::service::on_quorum::run_forever(
        svc.clone(),
    ));
    let (addr, task) = serve(svc.clone()).await;
    TestServer {
        dir,
        svc,
        clock,
        addr,
        http: reqwest::Client::new(),
        policies: pdir,
        keys,
        task,
    }
}

pub async fn serve(svc: Arc<Service>) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = http::app(
        svc,
        &McpOptions::default().allow_own_origins("http", addr.port()),
    );
    let task = tokio::spawn(async move {
        let _ = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await;
    });
    (addr, task)
}

/// A tool result: (isError, structuredContent).
pub type ToolResult = (bool, Value);

impl TestServer {
    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub async fn rpc_raw(&self, body: String, extra: &[(&str, &str)]) -> reqwest::Response {
        let mut req = self
            .http
            .post(self.mcp_url())
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-06-18");
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        req.body(body).send().await.unwrap()
    }

    pub async fn rpc(&self, method: &str, params: Value) -> Value {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        self.rpc_raw(body, &[]).await.json().await.unwrap()
    }

    pub async fn call(&self, tool: &str, args: Value) -> ToolResult {
        let v = self
            .rpc("tools/call", json!({"name": tool, "arguments": args}))
            .await;
        let r = &v["result"];
        assert!(r.is_object(), "no result: {v}");
        let text: Value = serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, r["structuredContent"], "text mirror differs");
        (
            r["isError"].as_bool().unwrap_or(false),
            r["structuredContent"].clone(),
        )
    }

    pub async fn prepare(&self, text: &str) -> (String, String) {
        let (err, out) = self
            .call(
                "approval_prepare",
                json!({"kind": "note.write", "payload": {"text": text}, "summary": "s"}),
            )
            .await;
        assert!(!err, "{out}");
        (
            out["proposal_id"].as_str().unwrap().to_owned(),
            out["preview_sha256"].as_str().unwrap().to_owned(),
        )
    }

    pub fn signed(&self, who: &str, decision: Decision, hash: &str, reason: &str) -> Value {
        let k = key(who);
        let d = SignedDecision::sign(
            &k.key,
            k.name.clone(),
            decision,
            &Sha256Hex::parse(hash).unwrap(),
            reason,
        )
        .unwrap();
        serde_json::to_value(d).unwrap()
    }

    pub async fn post_decision(&self, id: &str, body: &Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("http://{}/v1/proposals/{id}/decisions", self.addr))
            .json(body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    pub async fn decide(
        &self,
        id: &str,
        hash: &str,
        who: &str,
        decision: Decision,
    ) -> (u16, Value) {
        let body = self.signed(who, decision, hash, "");
        self.post_decision(id, &body).await
    }

    pub async fn get_signed(&self, who: &str, path: &str) -> (u16, Value) {
        let k = key(who);
        let now = approval_server::clock::Clock::now(&self.clock).unix();
        let auth = sign_read(
            &k.key,
            &k.name,
            self.svc.store().server_id(),
            now,
            "GET",
            path,
        );
        let r = self
            .http
            .get(format!("http://{}{path}", self.addr))
            .header("Authorization", auth)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// Everything the store holds that a refusal must not change.
    pub fn snapshot(&self) -> (usize, Option<(u64, Sha256Hex)>, Vec<String>) {
        let (entries, head) = self.svc.store().audit().unwrap();
        let mut recs = vec![];
        for st in approval_core::Status::ALL {
            for r in self.svc.store().list_status(st, 10_000).unwrap() {
                recs.push(serde_json::to_string(&r).unwrap());
            }
        }
        recs.sort();
        (entries.len(), head, recs)
    }
}
