//! Gated tools under their own names and MCP tasks (issue #33) against the real
//! binaries: a policy with `expose = true` is a tool of its own, a call to it is a
//! proposal the gate runs itself once quorum is reached, and a client that declares
//! the tasks extension gets a task whose id is the proposal's. What lives only in the
//! store survives a restart, is shared by PostgreSQL instances, and is served by the
//! embedded stdio transport too; a client of an older revision gets no task and waits
//! with `approval_status`. Approvers sign with the real `signer-cli`.
//!
//! The raw JSON-RPC rules, one test each, are in `server/tests/gated_tools.rs`.
//! The PostgreSQL test runs when `APPROVAL_TEST_DATABASE_URL` is set; otherwise it
//! prints one line saying how to run it.

use anyhow::{bail, Context, Result};
use approval_e2e::pg::FreshDb;
use approval_e2e::{poll_until, McpClient, Server, ServerOptions, Stdio, World, STEP_TIMEOUT};
use serde_json::{json, Value};
use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

/// The revision whose requests carry everything in `_meta` (no `initialize`).
const MODERN: &str = "2026-07-28";

/// The tasks extension, as a client declares it and a server lists it.
const TASKS: &str = "io.modelcontextprotocol/tasks";

/// How long a task may take to complete once quorum is reached.
const DONE_WITHIN: Duration = Duration::from_secs(15);

/// `note.write`, exposed as a tool of its own: alice and bob both approve. `extra`
/// goes after `execute_within` (a cooldown, say).
fn exposed_policy(extra: &str) -> String {
    format!(
        r#"
kind = "note.write"
description = "Write a note"
quorum = 2
approvers = ["alice", "bob"]
ttl = "30m"
execute_within = "10m"
expose = true
{extra}
[payload_schema]
type = "object"
required = ["text"]
[executor]
type = "note"
"#
    )
}

fn world(extra: &str) -> Result<World> {
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("note.write.toml", &exposed_policy(extra))?;
    Ok(w)
}

/// `params` with the per-request `_meta` of revision 2026-07-28, declaring the tasks
/// extension when `tasks`.
fn with_meta(mut params: Value, tasks: bool) -> Value {
    let caps = if tasks {
        json!({"extensions": {TASKS: {}}})
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "approval-e2e-gated", "version": "0.1.0"},
    });
    params
}

/// A client of revision 2026-07-28 over HTTP: stateless, every request carries the
/// standard headers and its `_meta`; no `initialize`.
#[derive(Clone)]
struct Modern {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
}

impl Modern {
    fn new(server: &Server, token: Option<&str>) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(STEP_TIMEOUT)
                .build()
                .expect("an HTTP client"),
            url: server.mcp_url.clone(),
            token: token.map(str::to_owned),
        }
    }

    /// One request, declaring the tasks extension; the whole JSON-RPC answer.
    async fn rpc(&self, method: &str, params: Value) -> Result<Value> {
        let params = with_meta(params, true);
        let name = params
            .get("name")
            .or_else(|| params.get("taskId"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut req = self
            .http
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", MODERN)
            .header("Mcp-Method", method);
        if let Some(n) = name {
            req = req.header("Mcp-Name", n);
        }
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let r = req.body(body.to_string()).send().await?;
        let status = r.status();
        let text = r.text().await?;
        serde_json::from_str(&text).with_context(|| format!("{method}: HTTP {status}: {text}"))
    }
}

/// Anything that answers one 2026-07-28 JSON-RPC request (HTTP or stdio).
trait Rpc26 {
    async fn rpc26(&self, method: &str, params: Value) -> Result<Value>;
}

impl Rpc26 for Modern {
    async fn rpc26(&self, method: &str, params: Value) -> Result<Value> {
        self.rpc(method, params).await
    }
}

impl Rpc26 for Stdio {
    async fn rpc26(&self, method: &str, params: Value) -> Result<Value> {
        self.rpc(method, with_meta(params, true)).await
    }
}

/// `tools/call note.write {text}` with tasks declared: the task (the `result`).
async fn call_task(c: &impl Rpc26, text: &str) -> Result<Value> {
    let v = c
        .rpc26(
            "tools/call",
            json!({"name": "note.write", "arguments": {"text": text}}),
        )
        .await?;
    let r = v.get("result").with_context(|| format!("no result: {v}"))?;
    if r["resultType"] != "task" || r["status"] != "working" || !r["taskId"].is_string() {
        bail!("tools/call with tasks did not answer a working task: {v}");
    }
    for f in ["createdAt", "lastUpdatedAt"] {
        if !r[f].is_string() {
            bail!("no {f} in the task: {v}");
        }
    }
    if !r["ttlMs"].is_u64() || !r["pollIntervalMs"].is_u64() {
        bail!("no ttlMs or pollIntervalMs in the task: {v}");
    }
    Ok(r.clone())
}

/// `tasks/get`: the task (the `result`), or the error.
async fn get_task(c: &impl Rpc26, id: &str) -> Result<Value> {
    let v = c.rpc26("tasks/get", json!({"taskId": id})).await?;
    match v.get("result") {
        Some(r) if r["taskId"] == id => Ok(r.clone()),
        _ => bail!("tasks/get {id} answered {v}"),
    }
}

/// Polls `tasks/get` until the task leaves `working`.
async fn until_done(c: &impl Rpc26, id: &str) -> Result<Value> {
    let last = std::sync::Mutex::new(Value::Null);
    let r = poll_until(&format!("task {id} to complete"), DONE_WITHIN, || async {
        let t = get_task(c, id).await?;
        let done = t["status"] != "working";
        *last.lock().unwrap_or_else(|e| e.into_inner()) = t.clone();
        Ok(done.then_some(t))
    })
    .await;
    let last = last.lock().unwrap_or_else(|e| e.into_inner()).clone();
    r.with_context(|| format!("last tasks/get: {last}"))
}

/// Asserts a task completed with the note written (SUCCEEDED).
#[track_caller]
fn assert_succeeded(task: &Value) {
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["result"]["isError"], false, "{task}");
    assert_eq!(
        task["result"]["structuredContent"]["status"], "SUCCEEDED",
        "{task}"
    );
    assert_eq!(
        task["result"]["_meta"]["io.modelcontextprotocol/tool-approval-disposition"],
        "approved-executed",
        "{task}"
    );
}

/// The notes in `<data>/sandbox`: (file name, text), sorted.
fn notes(data: &Path) -> Result<Vec<(String, String)>> {
    let dir = data.join("sandbox");
    let entries = match std::fs::read_dir(&dir) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e?;
        out.push((
            e.file_name().to_string_lossy().into_owned(),
            std::fs::read_to_string(e.path())?,
        ));
    }
    out.sort();
    Ok(out)
}

/// The one note the task `id` wrote with `text`.
fn one_note(id: &str, text: &str) -> Vec<(String, String)> {
    vec![(format!("{id}.txt"), text.to_owned())]
}

/// Both approvers sign with `signer-cli approve --yes` on `api`; the second's answer.
async fn approve_both(w: &World, api: &str, id: &str) -> Result<Value> {
    let a = w.signer_at("alice", api).approve(id).await?;
    assert_eq!(a["status"], "PENDING", "{a}");
    w.signer_at("bob", api).approve(id).await
}

#[tokio::test]
async fn a_task_survives_a_restart_between_the_call_and_tasks_get() -> Result<()> {
    let w = world("")?;
    let mut server = w.start()?;
    let c = Modern::new(&server, None);
    // The exposed kind is a tool of its own, and the server offers tasks.
    let listed = c.rpc("tools/list", json!({})).await?;
    let tool = listed["result"]["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "note.write"))
        .with_context(|| format!("note.write is not listed: {listed}"))?;
    assert_eq!(
        tool["_meta"]["dev.approval-gate/approval"]["execution"], "on_quorum",
        "{tool}"
    );
    let task = call_task(&c, "survives a restart").await?;
    let id = task["taskId"].as_str().context("taskId")?.to_owned();
    let before = get_task(&c, &id).await?;
    assert_eq!(before["status"], "working", "{before}");
    // The signed preview says the gate runs it on quorum (what approvers sign).
    let shown = w
        .signer("alice", &server)
        .ok(&["--json", "show", &id])
        .await?;
    assert!(shown.stdout.contains("on_quorum"), "{shown}");

    server.kill();
    let server = w.start()?;
    let c = Modern::new(&server, None);
    let after = get_task(&c, &id).await?;
    assert_eq!(after["status"], "working", "{after}");
    assert_eq!(after["taskId"], id.as_str());
    assert_eq!(after["createdAt"], task["createdAt"], "{after}");
    let m = after["statusMessage"].as_str().unwrap_or_default();
    assert!(
        m.contains("2 more approval") && m.contains(&format!("signer-cli approve {id}")),
        "{after}"
    );
    assert!(notes(&w.data)?.is_empty(), "ran before any approval");

    let b = approve_both(&w, &server.api_url, &id).await?;
    assert_eq!(b["status"], "APPROVED", "{b}");
    let done = until_done(&c, &id).await?;
    assert_succeeded(&done);
    assert_eq!(notes(&w.data)?, one_note(&id, "survives a restart"));
    // Nobody can run it again: the agent's own execute is refused, the note stays one.
    let hash = done["result"]["structuredContent"]["preview_sha256"]
        .as_str()
        .context("preview_sha256")?
        .to_owned();
    let old = server.mcp().await?;
    old.execute(&id, &hash)
        .await?
        .expect("ALREADY_EXECUTED_NO_REPLAY", true);
    assert_eq!(get_task(&c, &id).await?["status"], "completed");
    assert_eq!(notes(&w.data)?, one_note(&id, "survives a restart"));
    Ok(())
}

#[tokio::test]
async fn approvals_that_land_while_the_gate_is_down_run_once_at_start_up() -> Result<()> {
    // Times are whole seconds: the cooldown ends between 2 and 3 s after quorum.
    let w = world("cooldown = \"3s\"")?;
    let mut server = w.start()?;
    let c = Modern::new(&server, None);
    let task = call_task(&c, "run at start-up").await?;
    let id = task["taskId"].as_str().context("taskId")?.to_owned();
    let b = approve_both(&w, &server.api_url, &id).await?;
    let quorum = Instant::now();
    assert_eq!(b["status"], "APPROVED", "{b}");
    // Quorum is reached, the cooldown runs: the gate waits, then dies before it ends.
    let cooling = get_task(&c, &id).await?;
    assert_eq!(cooling["status"], "working", "{cooling}");
    assert!(
        cooling["statusMessage"]
            .as_str()
            .unwrap_or_default()
            .contains("cooldown"),
        "{cooling}"
    );
    server.kill();
    let killed = quorum.elapsed();
    assert!(
        killed < Duration::from_secs(2),
        "the machine is too slow for this test: the gate was killed {killed:?} after quorum, \
         maybe after the cooldown"
    );
    assert!(notes(&w.data)?.is_empty(), "ran during the cooldown");
    // Past the cooldown with the gate down.
    tokio::time::sleep(Duration::from_millis(3100).saturating_sub(quorum.elapsed())).await;
    assert!(notes(&w.data)?.is_empty());

    let mut server = w.start()?;
    let c = Modern::new(&server, None);
    let done = until_done(&c, &id).await?;
    assert_succeeded(&done);
    assert_eq!(notes(&w.data)?, one_note(&id, "run at start-up"));
    assert!(server.log().contains("ran on quorum"), "{}", server.log());

    // Another restart finds nothing left to run.
    server.kill();
    let server = w.start()?;
    let c = Modern::new(&server, None);
    assert_succeeded(&get_task(&c, &id).await?);
    let mcp = server.mcp().await?;
    mcp.status(&id).await?.expect("SUCCEEDED", false);
    assert_eq!(notes(&w.data)?, one_note(&id, "run at start-up"));
    Ok(())
}

/// Starts an instance on `db` with the agents file, its local folder `<world>/<name>`.
fn pg_instance(db: &FreshDb, w: &World, name: &str, agents: &Path) -> Result<Server> {
    Server::start_full(
        &ServerOptions {
            data: w.path().join(name),
            policies: w.policies.clone(),
            keys: w.keys.clone(),
            agents: Some(agents.to_path_buf()),
        },
        &[],
        &["--store".into(), OsString::from(&db.url)],
        &[],
    )
}

#[tokio::test]
async fn two_postgresql_instances_share_tasks() -> Result<()> {
    let Some(db) = FreshDb::new()? else {
        return Ok(());
    };
    let w = world("")?;
    let agents = w.path().join("agents");
    let token = w.add_agent("ci-bot", &agents)?;
    let other = w.add_agent("other-bot", &agents)?;
    let a = pg_instance(&db, &w, "a", &agents)?;
    let b = pg_instance(&db, &w, "b", &agents)?;
    let (ca, cb) = (Modern::new(&a, Some(&token)), Modern::new(&b, Some(&token)));

    let task = call_task(&ca, "shared").await?;
    let id = task["taskId"].as_str().context("taskId")?.to_owned();
    let on_b = get_task(&cb, &id).await?;
    assert_eq!(on_b["status"], "working", "{on_b}");
    assert_eq!(on_b["createdAt"], task["createdAt"], "{on_b}");
    // Another agent's id is unknown on either instance.
    let stranger = Modern::new(&b, Some(&other))
        .rpc("tasks/get", json!({"taskId": id}))
        .await?;
    assert_eq!(stranger["error"]["code"], -32602, "{stranger}");

    let done = approve_both(&w, &b.api_url, &id).await?;
    assert_eq!(done["status"], "APPROVED", "{done}");
    let on_b = until_done(&cb, &id).await?;
    assert_succeeded(&on_b);
    let on_a = until_done(&ca, &id).await?;
    assert_succeeded(&on_a);
    // Give the other instance's sweep time to try too: the claim lets one run.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let mut written = notes(&w.path().join("a"))?;
    written.extend(notes(&w.path().join("b"))?);
    assert_eq!(
        written,
        one_note(&id, "shared"),
        "the note ran other than once"
    );
    for s in [&a, &b] {
        s.mcp_for(&token)
            .await?
            .status(&id)
            .await?
            .expect("SUCCEEDED", false);
    }
    let out = approval_e2e::approval_server(&[
        "audit".as_ref(),
        "verify".as_ref(),
        "--store".as_ref(),
        db.url.as_ref(),
    ])?;
    assert!(out.status.success(), "audit verify failed: {out}");
    Ok(())
}

/// An initialized 2025-06-18 client with a token (the harness's `mcp()` has none).
trait McpFor {
    async fn mcp_for(&self, token: &str) -> Result<approval_e2e::Mcp>;
}

impl McpFor for Server {
    async fn mcp_for(&self, token: &str) -> Result<approval_e2e::Mcp> {
        approval_e2e::Mcp::connect(&self.mcp_url, Some(token)).await
    }
}

#[tokio::test]
async fn the_embedded_stdio_transport_serves_tasks() -> Result<()> {
    let w = world("")?;
    let args: Vec<OsString> = vec![
        "--data".into(),
        w.data.clone().into(),
        "--policies".into(),
        w.policies.clone().into(),
        "--keys".into(),
        w.keys.clone().into(),
        "--listen".into(),
        "127.0.0.1:0".into(),
    ];
    let s = Stdio::spawn_args(&args, &[])?;
    // 2026-07-28 has no initialize: the first line is already a request.
    let listed = s.rpc26("tools/list", json!({})).await?;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .with_context(|| format!("tools/list answered {listed}"))?
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"note.write"), "{listed}");
    let api = s
        .stderr()
        .wait_for("Approver API: ", Duration::from_secs(30))
        .await?;

    let task = call_task(&s, "over stdio").await?;
    let id = task["taskId"].as_str().context("taskId")?.to_owned();
    assert_eq!(get_task(&s, &id).await?["status"], "working");
    let b = approve_both(&w, &api, &id).await?;
    assert_eq!(b["status"], "APPROVED", "{b}");
    let done = until_done(&s, &id).await?;
    assert_succeeded(&done);
    assert_eq!(notes(&w.data)?, one_note(&id, "over stdio"));
    // Cancelling a finished task is acknowledged and changes nothing.
    let c = s.rpc26("tasks/cancel", json!({"taskId": id})).await?;
    assert_eq!(c["result"]["resultType"], "complete", "{c}");
    assert_eq!(get_task(&s, &id).await?["status"], "completed");

    // A pending one is cancelled: withdrawn, and approvals no longer count.
    let task = call_task(&s, "never").await?;
    let never = task["taskId"].as_str().context("taskId")?.to_owned();
    let c = s.rpc26("tasks/cancel", json!({"taskId": never})).await?;
    assert_eq!(c["result"]["resultType"], "complete", "{c}");
    assert_eq!(get_task(&s, &never).await?["status"], "cancelled");
    let late = w
        .signer_at("alice", &api)
        .run(&["--json", "approve", &never, "--yes"])
        .await?;
    assert!(!late.status.success(), "approved a withdrawn task: {late}");
    assert_eq!(notes(&w.data)?, one_note(&id, "over stdio"));

    let status = s.close().await?;
    assert!(status.success(), "exit status {status}");
    Ok(())
}

#[tokio::test]
async fn an_older_session_revision_gets_no_task_but_waits_with_approval_status() -> Result<()> {
    let w = world("")?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    assert_eq!(mcp.protocol_version(), "2025-06-18");
    let tools = mcp.list_tools().await?;
    assert!(tools.iter().any(|t| t["name"] == "note.write"), "{tools:?}");
    let r = mcp
        .call_tool("note.write", json!({"text": "the old way"}))
        .await?;
    assert!(!r.is_error, "{}", r.raw);
    assert!(
        r.raw.get("taskId").is_none(),
        "a task for 2025-06-18: {}",
        r.raw
    );
    assert!(r.raw.get("resultType").is_none(), "{}", r.raw);
    assert_eq!(r.status(), "PENDING", "{}", r.raw);
    assert_eq!(r.structured["required"]["quorum"], 2, "{}", r.raw);
    let next = r.str("next");
    assert!(
        next.contains("approval_status") && next.contains("Do not call approval_execute"),
        "{next}"
    );
    let (id, hash) = (r.proposal_id(), r.preview_sha256());
    assert!(!id.is_empty() && !hash.is_empty(), "{}", r.raw);
    let b = approve_both(&w, &server.api_url, &id).await?;
    assert_eq!(b["status"], "APPROVED", "{b}");
    let done = mcp.wait_status(&id, "SUCCEEDED", DONE_WITHIN).await?;
    done.expect("SUCCEEDED", false);
    assert_eq!(notes(&w.data)?, one_note(&id, "the old way"));
    mcp.execute(&id, &hash)
        .await?
        .expect("ALREADY_EXECUTED_NO_REPLAY", true);
    assert_eq!(notes(&w.data)?, one_note(&id, "the old way"));
    Ok(())
}
