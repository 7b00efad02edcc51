//! `approval-server stdio` without `--connect` (issue #12 part 2): the gate runs in
//! the host's subprocess when it can take the data folder's lock, joins the server
//! that holds it otherwise (`approval-server init`'s folder for it: `init.rs`).
//! All over the real binaries: MCP JSON-RPC on the child's stdin/stdout, approvers
//! through signer-cli on the address the child prints on stderr.

use anyhow::{bail, Context, Result};
use approval_e2e::{approval_server, McpClient, Stdio, World, STEP_TIMEOUT};
use serde_json::{json, Value};
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use approval_e2e::NOTE_POLICY_ALICE_AND_BOB as POLICY;

/// How long a child may take to start (a loaded 2-core CI machine).
const START: Duration = Duration::from_secs(30);

fn world() -> Result<World> {
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("note.write.toml", POLICY)?;
    Ok(w)
}

/// `--data D --policies P --keys K --listen 127.0.0.1:0` plus `extra`.
fn args(w: &World, extra: &[&str]) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![
        "--data".into(),
        w.data.clone().into(),
        "--policies".into(),
        w.policies.clone().into(),
        "--keys".into(),
        w.keys.clone().into(),
        "--listen".into(),
        "127.0.0.1:0".into(),
    ];
    a.extend(extra.iter().map(OsString::from));
    a
}

/// Starts an embedded session; returns it and the approver API it printed on stderr.
async fn embedded(w: &World) -> Result<(Stdio, String)> {
    let s = Stdio::spawn_args(&args(w, &[]), &[])?;
    s.initialize().await?;
    let api = s.stderr().wait_for("Approver API: ", START).await?;
    let mcp = s.stderr().wait_for("MCP endpoint: ", START).await?;
    if !api.starts_with("http://127.0.0.1:") || mcp != format!("{api}/mcp") {
        bail!("endpoint lines: {api:?} {mcp:?}");
    }
    Ok((s, api))
}

fn endpoint_file(data: &Path) -> Result<Option<Value>> {
    match std::fs::read_to_string(data.join("endpoint.json")) {
        Ok(t) => Ok(Some(serde_json::from_str(&t).context("endpoint.json")?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[tokio::test]
async fn embedded_stdio_runs_a_whole_round_trip_with_nothing_else_running() -> Result<()> {
    let w = world()?;
    let (s, api) = embedded(&w).await?;

    let names: Vec<String> = s
        .list_tools()
        .await?
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        names.len(),
        5,
        "the five agent tools, no way to approve: {names:?}"
    );
    assert!(names.contains(&"approval_prepare".to_owned()));

    // The exact-JSON check of the HTTP front holds on this transport too.
    let inexact = s
        .call_tool(
            "approval_prepare",
            serde_json::from_str(
                r#"{"kind": "note.write", "payload": {"text": "n", "n": 9007199254740993}}"#,
            )?,
        )
        .await?;
    inexact.expect("INVALID_PAYLOAD", true);

    let prep = s
        .prepare("note.write", json!({"text": "embedded"}), "one note")
        .await?;
    prep.expect("PENDING_QUORUM", false);
    assert_eq!(
        prep.structured["preview"]["requested_by"], "local",
        "a session the host launched is the agent `local`"
    );
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());

    // Approvers sign on the address printed on stderr.
    w.signer_at("alice", &api).approve(&id).await?;
    w.signer_at("bob", &api).approve(&id).await?;
    s.status(&id).await?.expect("QUORUM_REACHED", false);
    s.execute(&id, &hash).await?.expect("SUCCEEDED", false);
    s.execute(&id, &hash)
        .await?
        .expect("ALREADY_EXECUTED_NO_REPLAY", true);
    s.status(&id).await?.expect("SUCCEEDED", false);

    let ep = endpoint_file(&w.data)?.context("no endpoint.json while serving")?;
    assert_eq!(ep["approver"], api.as_str());
    assert_eq!(ep["mcp"], format!("{api}/mcp"));
    assert_eq!(ep["pid"], json!(s.pid().context("no pid")?));

    let status = s.close().await?;
    assert!(status.success(), "exit status {status}");
    Ok(())
}

#[tokio::test]
async fn stdio_joins_the_server_that_holds_the_data_folder() -> Result<()> {
    let w = world()?;
    let server = w.start()?;
    let ep = endpoint_file(&w.data)?.context("serve wrote no endpoint.json")?;
    assert_eq!(ep["mcp"], server.mcp_url.as_str());
    assert_eq!(ep["pid"], json!(server.pid));

    let s = Stdio::spawn_args(&args(&w, &[]), &[])?;
    s.initialize().await?;
    s.stderr()
        .wait_for("joining the approval service", START)
        .await?;
    let prep = s
        .prepare("note.write", json!({"text": "joined"}), "")
        .await?;
    prep.expect("PENDING_QUORUM", false);
    let id = prep.proposal_id();
    // One store: the server sees what the session made, as the same agent.
    let http = server.mcp().await?;
    http.status(&id).await?.expect("PENDING_QUORUM", false);
    w.signer("alice", &server).approve(&id).await?;
    w.signer("bob", &server).approve(&id).await?;
    s.status(&id).await?.expect("QUORUM_REACHED", false);
    assert!(s.close().await?.success());
    Ok(())
}

#[tokio::test]
async fn a_second_stdio_session_joins_the_embedded_one() -> Result<()> {
    let w = world()?;
    let (first, api) = embedded(&w).await?;
    let second = Stdio::spawn_args(&args(&w, &[]), &[])?;
    second.initialize().await?;
    second
        .stderr()
        .wait_for("joining the approval service", START)
        .await?;
    let prep = second
        .prepare("note.write", json!({"text": "shared"}), "")
        .await?;
    let id = prep.proposal_id();
    first.status(&id).await?.expect("PENDING_QUORUM", false);
    w.signer_at("alice", &api).approve(&id).await?;
    w.signer_at("bob", &api).approve(&id).await?;
    second
        .execute(&id, &prep.preview_sha256())
        .await?
        .expect("SUCCEEDED", false);
    first
        .execute(&id, &prep.preview_sha256())
        .await?
        .expect("ALREADY_EXECUTED_NO_REPLAY", true);
    assert!(second.close().await?.success());
    assert!(first.close().await?.success());
    Ok(())
}

#[tokio::test]
async fn a_stale_endpoint_file_is_detected() -> Result<()> {
    let w = world()?;
    let mut server = w.start()?;
    let old = server.mcp_url.clone();
    server.kill(); // SIGKILL: no chance to remove its endpoint file
    let stale = endpoint_file(&w.data)?.context("the killed server left no endpoint.json")?;
    assert_eq!(stale["mcp"], old.as_str());

    let s = Stdio::spawn_args(&args(&w, &[]), &[])?;
    s.initialize().await?;
    let api = s.stderr().wait_for("Approver API: ", START).await?;
    let note = s.stderr().wait_for("stale endpoint file", START).await?;
    assert!(note.contains(&old), "{note}");
    assert!(
        !s.stderr().text().contains("joining"),
        "{}",
        s.stderr().text()
    );
    let fresh = endpoint_file(&w.data)?.context("no endpoint.json")?;
    assert_eq!(fresh["pid"], json!(s.pid().context("no pid")?));
    assert_eq!(fresh["approver"], api.as_str());
    s.prepare("note.write", json!({"text": "after a crash"}), "")
        .await?
        .expect("PENDING_QUORUM", false);
    assert!(s.close().await?.success());
    Ok(())
}

#[tokio::test]
async fn an_endpoint_file_naming_another_server_is_not_joined() -> Result<()> {
    let w = world()?;
    // A live server on another folder, and this folder's endpoint file pointing at it
    // while this folder's own server holds the lock: the server_id does not match.
    let other = world()?;
    let other_server = other.start()?;
    let mut ours = w.start()?;
    let forged = endpoint_file(&other.data)?.context("no endpoint.json")?;
    let mut ep = endpoint_file(&w.data)?.context("no endpoint.json")?;
    ep["mcp"] = forged["mcp"].clone();
    ep["approver"] = forged["approver"].clone();
    std::fs::write(w.data.join("endpoint.json"), ep.to_string())?;

    let s = Stdio::spawn_args(&args(&w, &[]), &[])?;
    let stderr = s.stderr().clone();
    let out = tokio::time::timeout(Duration::from_secs(60), s.close()).await??;
    assert!(!out.success(), "it must not join another store");
    let why = stderr.wait_for("error: ", START).await?;
    assert!(
        why.contains("locked by another process") && why.contains("server_id"),
        "{why}"
    );
    drop(other_server);
    ours.kill();
    Ok(())
}

#[tokio::test]
async fn closing_stdin_stops_the_embedded_service_cleanly() -> Result<()> {
    let w = world()?;
    let (s, _api) = embedded(&w).await?;
    let first = s.prepare("note.write", json!({"text": "kept"}), "").await?;
    let id = first.proposal_id();

    // A request sent just before stdin closes still gets its answer.
    let last = json!({"jsonrpc": "2.0", "id": 999_001, "method": "tools/call",
        "params": {"name": "approval_prepare",
                   "arguments": {"kind": "note.write", "payload": {"text": "last words"}}}});
    let (lines, status) = s.send_then_close(&[last]).await?;
    assert!(status.success(), "exit status {status}");
    let answer = lines
        .iter()
        .find(|l| l["id"] == json!(999_001))
        .with_context(|| format!("no answer to the last request: {lines:?}"))?;
    assert_eq!(
        answer["result"]["structuredContent"]["code"], "PENDING_QUORUM",
        "{answer}"
    );
    let last_id = answer["result"]["structuredContent"]["proposal_id"]
        .as_str()
        .context("no proposal_id")?
        .to_owned();

    assert!(
        endpoint_file(&w.data)?.is_none(),
        "endpoint.json left behind"
    );
    // The lock is released: the audit command opens the store.
    let data: &std::ffi::OsStr = w.data.as_ref();
    let audit = approval_server(&["audit".as_ref(), "verify".as_ref(), "--data".as_ref(), data])?;
    assert!(audit.status.success(), "{audit}");

    // A new session on the same folder has both proposals.
    let (again, _) = embedded(&w).await?;
    again.status(&id).await?.expect("PENDING_QUORUM", false);
    again
        .status(&last_id)
        .await?
        .expect("PENDING_QUORUM", false);
    assert!(again.close().await?.success());
    Ok(())
}

#[tokio::test]
async fn closing_stdin_after_a_cancelled_request_does_not_wait_for_it() -> Result<()> {
    let w = world()?;
    let (s, _api) = embedded(&w).await?;
    let id = s
        .prepare("note.write", json!({"text": "waited on"}), "")
        .await?
        .proposal_id();
    // A 30-second long-poll, cancelled: rmcp sends no answer to it, so the session
    // must not wait for one when stdin closes.
    let poll = json!({"jsonrpc": "2.0", "id": 777, "method": "tools/call",
        "params": {"name": "approval_status", "arguments": {"proposal_id": id, "wait_seconds": 30}}});
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 777, "reason": "the user moved on"}});
    let started = std::time::Instant::now();
    let (_, status) = s.send_then_close(&[poll, cancel]).await?;
    assert!(status.success(), "exit status {status}");
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "stopping waited {:?} for a cancelled request",
        started.elapsed()
    );
    Ok(())
}

/// Tool calls skip rmcp's session loop on the embedded transport (issue #14): each
/// runs on a task of its own, so a long poll must not hold up the calls behind it,
/// and every answer must still be shaped as rmcp shapes it for this session.
#[tokio::test]
async fn a_long_poll_does_not_hold_up_the_calls_behind_it() -> Result<()> {
    let w = world()?;
    let (s, _api) = embedded(&w).await?;
    let id = s
        .prepare("note.write", json!({"text": "polled"}), "")
        .await?
        .proposal_id();
    let poll = json!({"jsonrpc": "2.0", "id": 501, "method": "tools/call",
        "params": {"name": "approval_status", "arguments": {"proposal_id": id, "wait_seconds": 8}}});
    let quick = json!({"jsonrpc": "2.0", "id": 502, "method": "tools/call",
        "params": {"name": "approval_status", "arguments": {"proposal_id": id}}});
    let unknown = json!({"jsonrpc": "2.0", "id": 503, "method": "tools/call",
        "params": {"name": "approval_approve", "arguments": {}}});
    let started = std::time::Instant::now();
    s.send_line(&poll).await?;
    s.send_line(&quick).await?;
    s.send_line(&unknown).await?;
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let line = s
            .read_line(Duration::from_secs(6))
            .await?
            .context("stdout closed")?;
        assert_ne!(
            line["id"],
            json!(501),
            "the long poll answered first: {line}"
        );
        seen.push(line);
    }
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "the calls behind a long poll waited {:?}",
        started.elapsed()
    );
    let quick = seen
        .iter()
        .find(|l| l["id"] == json!(502))
        .context("no 502")?;
    assert_eq!(quick["jsonrpc"], "2.0");
    assert_eq!(
        quick["result"]["structuredContent"]["code"],
        "PENDING_QUORUM"
    );
    // A session initialized on a revision before 2026-07-28 gets no `resultType` (rmcp strips it for legacy peers).
    assert!(quick["result"].get("resultType").is_none(), "{quick}");
    // The text mirror of the structured content is there, as over HTTP.
    let text = quick["result"]["content"][0]["text"]
        .as_str()
        .context("no text")?;
    assert_eq!(
        serde_json::from_str::<Value>(text)?,
        quick["result"]["structuredContent"]
    );
    // An unknown tool is a JSON-RPC error naming the tools, as rmcp's path answers it.
    let bad = seen
        .iter()
        .find(|l| l["id"] == json!(503))
        .context("no 503")?;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    // The long poll is still under way; closing stdin waits for its answer.
    let (lines, status) = s.send_then_close(&[]).await?;
    assert!(status.success(), "exit status {status}");
    let polled = lines
        .iter()
        .find(|l| l["id"] == json!(501))
        .with_context(|| format!("no answer to the long poll: {lines:?}"))?;
    assert_eq!(
        polled["result"]["structuredContent"]["code"],
        "PENDING_QUORUM"
    );
    Ok(())
}

#[tokio::test]
async fn embedded_stdio_with_an_agents_file_acts_as_the_tokens_agent() -> Result<()> {
    let w = world()?;
    let agents = w.path().join("agents");
    let token = w.add_agent("ci-bot", &agents)?;
    let agents_s = agents.to_str().context("path")?;

    // Without a token the session would have no agent: refused at start, saying how.
    let s = Stdio::spawn_args(&args(&w, &["--agents", agents_s]), &[])?;
    let stderr = s.stderr().clone();
    let status = tokio::time::timeout(STEP_TIMEOUT, s.close()).await??;
    assert!(!status.success());
    let text = stderr.wait_for("error: ", START).await?;
    assert!(
        text.contains("--token") && text.contains("APPROVAL_AGENT_TOKEN"),
        "{text}"
    );

    let s = Stdio::spawn_args(
        &args(&w, &["--agents", agents_s]),
        &[("APPROVAL_AGENT_TOKEN", &token)],
    )?;
    s.initialize().await?;
    let prep = s
        .prepare("note.write", json!({"text": "as a bot"}), "")
        .await?;
    prep.expect("PENDING_QUORUM", false);
    assert_eq!(prep.structured["preview"]["requested_by"], "ci-bot");

    // The token is checked at every call: remove the agent, reload, and the session
    // is locked out.
    std::fs::write(&agents, "")?;
    let pid = s.pid().context("no pid")?;
    let st = std::process::Command::new("/bin/kill")
        .args(["-HUP", &pid.to_string()])
        .status()?;
    assert!(st.success());
    let (session, id) = (&s, prep.proposal_id());
    let refused = approval_e2e::poll_until("the reload", START, || {
        let id = id.clone();
        async move {
            let r = session
                .rpc(
                    "tools/call",
                    json!({"name": "approval_status", "arguments": {"proposal_id": id}}),
                )
                .await?;
            Ok(r.get("error").cloned())
        }
    })
    .await?;
    assert_eq!(refused["code"], -32001, "{refused}");
    assert!(s.close().await?.success());
    Ok(())
}

/// A SIGHUP sent the moment the session first answers reaches the reload. The
/// session answers on its own thread while the service's listeners start, so the
/// signal handlers are put in place before either: a handler installed later leaves
/// an early SIGHUP to the default action, which ends the process (or, where SIGHUP
/// is ignored, as under nohup, drops the reload without a word). A fresh-clone CI
/// run lost a reload this way in `embedded_stdio_with_an_agents_file_acts_as_the_tokens_agent`.
#[tokio::test]
async fn a_sighup_at_the_first_answer_reloads() -> Result<()> {
    let w = world()?;
    for round in 0..8 {
        let s = Stdio::spawn_args(&args(&w, &[]), &[("RUST_LOG", "info")])?;
        let stderr = s.stderr().clone();
        s.initialize().await?;
        let pid = s.pid().context("no pid")?;
        let st = std::process::Command::new("/bin/kill")
            .args(["-HUP", &pid.to_string()])
            .status()?;
        assert!(st.success());
        approval_e2e::poll_until("the reload", Duration::from_secs(10), || {
            let seen = stderr.text().contains("configuration reloaded");
            async move { Ok(seen.then_some(())) }
        })
        .await
        .with_context(|| {
            format!(
                "round {round}: the SIGHUP was lost; stderr:\n{}",
                stderr.text()
            )
        })?;
        let listed = s.rpc("tools/list", json!({})).await?;
        assert!(
            listed["result"]["tools"]
                .as_array()
                .is_some_and(|t| !t.is_empty()),
            "round {round}: {listed}"
        );
        assert!(s.close().await?.success(), "round {round}");
    }
    Ok(())
}
