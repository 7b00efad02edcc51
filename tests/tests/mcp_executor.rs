//! The `mcp` executor end to end: the real gate calling a real third-party MCP server
//! (the reference filesystem server from npm, pinned: see
//! [`approval_e2e::filesystem_server`]) and a small downstream written here that
//! answers the handshake and `tools/list`, then never answers `tools/call` (it appends
//! a line to a file each time a call arrives, so the tests count calls exactly).

use approval_e2e::{filesystem_server, poll_until, McpClient, Server, World};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A stdio MCP server in plain node: `initialize` (any revision the client offers),
/// `tools/list` (tool `slow`), and `tools/call`, which it records and never answers.
/// `server/discover` is refused as unknown, like any server from before 2026-07-28.
/// It exits when its stdin closes, so it dies with the gate.
const HANGING_SERVER: &str = r#"
const fs = require('fs');
const calls = process.argv[2];
let buf = '';
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
process.stdin.on('data', (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf('\n')) >= 0) {
    const line = buf.slice(0, i); buf = buf.slice(i + 1);
    if (!line.trim()) continue;
    const m = JSON.parse(line);
    if (m.id === undefined) continue;
    if (m.method === 'initialize') {
      send({jsonrpc: '2.0', id: m.id, result: {protocolVersion: m.params.protocolVersion,
        capabilities: {tools: {}}, serverInfo: {name: 'hanging', version: '1'}}});
    } else if (m.method === 'tools/list') {
      send({jsonrpc: '2.0', id: m.id, result: {tools: [{name: 'slow',
        description: 'Takes the call and never answers', inputSchema: {type: 'object'}}]}});
    } else if (m.method === 'tools/call') {
      fs.appendFileSync(calls, JSON.stringify(m.params.arguments) + '\n');
    } else {
      send({jsonrpc: '2.0', id: m.id, error: {code: -32601, message: 'Method not found'}});
    }
  }
});
process.stdin.on('end', () => process.exit(0));
"#;

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

fn mcp_policy(kind: &str, command: &[&Path], tool: &str, timeout: &str, extra: &str) -> String {
    let argv: Vec<String> = std::iter::once("node".to_owned())
        .chain(command.iter().map(|p| p.display().to_string()))
        .map(|a| toml_str(&a))
        .collect();
    format!(
        r#"
kind = "{kind}"
description = "Gated downstream tool {tool}"
quorum = 2
approvers = ["alice", "bob"]
ttl = "30m"
execute_within = "10m"
[executor]
type = "mcp"
command = [{}]
tool = "{tool}"
timeout = "{timeout}"
{extra}
"#,
        argv.join(", ")
    )
}

/// Prepares and gets alice and bob to approve; returns (id, hash).
async fn approved(
    w: &World,
    server: &Server,
    mcp: &approval_e2e::Mcp,
    kind: &str,
    payload: Value,
) -> anyhow::Result<(String, String)> {
    let prep = mcp.prepare(kind, payload, "mcp executor test").await?;
    prep.expect("PENDING_QUORUM", false);
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    w.signer("alice", server).approve(&id).await?;
    w.signer("bob", server).approve(&id).await?;
    mcp.wait_status(&id, "APPROVED", Duration::from_secs(10))
        .await?;
    Ok((id, hash))
}

fn hanging_server(w: &World) -> anyhow::Result<(PathBuf, PathBuf)> {
    let script = w.path().join("hanging-mcp.js");
    std::fs::write(&script, HANGING_SERVER)?;
    Ok((script, w.path().join("calls.log")))
}

fn calls(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn mcp_approved_write_file_happens_once_and_a_second_execute_is_refused() -> anyhow::Result<()>
{
    let Some(index) = filesystem_server()? else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    let allowed = w.path().join("allowed");
    std::fs::create_dir_all(&allowed)?;
    // The schema is the tool's own inputSchema, fetched at start.
    w.write_policy(
        "fs.write.toml",
        &mcp_policy(
            "fs.write",
            &[&index, &allowed],
            "write_file",
            "30s",
            "payload_schema_from_tool = true",
        ),
    )?;
    let server = w.start()?;
    let mcp = server.mcp().await?;

    // The agent is told the kind is backed by a downstream tool.
    let tools = mcp.list_tools().await?;
    let prepare = tools
        .iter()
        .find(|t| t["name"] == "approval_prepare")
        .ok_or_else(|| anyhow::anyhow!("no approval_prepare"))?;
    assert!(
        prepare["description"]
            .as_str()
            .unwrap_or_default()
            .contains("`fs.write` (runs the downstream MCP tool `write_file`"),
        "{prepare}"
    );

    // A call the tool's schema refuses is refused before anyone is asked to sign.
    let bad = mcp
        .prepare("fs.write", json!({"path": 5}), "malformed")
        .await?;
    bad.expect("INVALID_PAYLOAD", true);

    let target = allowed.join("hello.txt");
    let payload = json!({"path": target.display().to_string(), "content": "signed words"});
    let (id, hash) = approved(&w, &server, &mcp, "fs.write", payload).await?;
    let done = mcp.execute(&id, &hash).await?;
    done.expect("SUCCEEDED", false);
    assert_eq!(std::fs::read_to_string(&target)?, "signed words");
    // The tool's result is stored and returned.
    let output = &done.structured["result"]["output"];
    let text = output["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("Successfully wrote"), "{}", done.structured);
    assert_ne!(output["isError"], json!(true));

    // Mark the file: a second write (same content) would erase the mark.
    std::fs::write(&target, "signed words + seen")?;
    let again = mcp.execute(&id, &hash).await?;
    again.expect("ALREADY_EXECUTED_NO_REPLAY", true);
    assert_eq!(
        std::fs::read_to_string(&target)?,
        "signed words + seen",
        "the tool was called a second time"
    );
    let st = mcp.status(&id).await?;
    assert_eq!(st.structured["result"]["output"], *output);
    Ok(())
}

#[tokio::test]
async fn mcp_is_error_result_is_failed() -> anyhow::Result<()> {
    let Some(index) = filesystem_server()? else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    let allowed = w.path().join("allowed");
    std::fs::create_dir_all(&allowed)?;
    w.write_policy(
        "fs.write.toml",
        &mcp_policy("fs.write", &[&index, &allowed], "write_file", "30s", ""),
    )?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    // Outside the allowed folder: the tool answers isError: true.
    let outside = w.path().join("outside.txt");
    let payload = json!({"path": outside.display().to_string(), "content": "no"});
    let (id, hash) = approved(&w, &server, &mcp, "fs.write", payload).await?;
    let r = mcp.execute(&id, &hash).await?;
    assert_eq!(r.status(), "FAILED", "{}", r.structured);
    assert_eq!(r.structured["result"]["output"]["isError"], json!(true));
    assert!(!outside.exists());
    Ok(())
}

#[tokio::test]
async fn mcp_hanging_downstream_is_outcome_unknown_after_the_timeout() -> anyhow::Result<()> {
    let Some(_node) = approval_e2e::node() else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    let (script, log) = hanging_server(&w)?;
    w.write_policy(
        "slow.call.toml",
        &mcp_policy("slow.call", &[&script, &log], "slow", "2s", ""),
    )?;
    // The same server, a tool it does not list: refused before anything is sent.
    w.write_policy(
        "absent.call.toml",
        &mcp_policy("absent.call", &[&script, &log], "absent", "10s", ""),
    )?;
    // A downstream that cannot start: its kind is disabled, not enabled unchecked.
    w.write_policy(
        "gone.call.toml",
        r#"
kind = "gone.call"
quorum = 1
approvers = ["alice"]
[executor]
type = "mcp"
command = ["/nonexistent/mcp-server"]
tool = "x"
payload_schema_from_tool = true
"#,
    )?;
    let server = w.start()?;
    let mcp = server.mcp().await?;

    let gone = mcp.prepare("gone.call", json!({}), "gone").await?;
    gone.expect("KIND_DISABLED", true);
    // The agent is told the kind and the cause; the command line is in the log only.
    assert!(
        !gone
            .structured
            .to_string()
            .contains("/nonexistent/mcp-server"),
        "{}",
        gone.structured
    );
    assert!(server.log().contains("/nonexistent/mcp-server"));

    let (id, hash) = approved(&w, &server, &mcp, "absent.call", json!({"n": 0})).await?;
    let r = mcp.execute(&id, &hash).await?;
    assert_eq!(r.status(), "FAILED", "{}", r.structured);
    assert!(
        r.structured["result"]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("nothing was sent"),
        "{}",
        r.structured
    );
    assert!(calls(&log).is_empty());

    let (id, hash) = approved(&w, &server, &mcp, "slow.call", json!({"n": 1})).await?;
    let started = std::time::Instant::now();
    let r = mcp.execute(&id, &hash).await?;
    assert_eq!(r.status(), "OUTCOME_UNKNOWN", "{}", r.structured);
    assert!(!r.retry_allowed());
    assert!(started.elapsed() < Duration::from_secs(25));
    assert_eq!(calls(&log), vec![r#"{"n":1}"#.to_owned()]);
    mcp.execute(&id, &hash)
        .await?
        .expect("ALREADY_EXECUTED_NO_REPLAY", true);
    assert_eq!(calls(&log).len(), 1, "the call was repeated");
    Ok(())
}

#[tokio::test]
async fn mcp_gate_killed_mid_call_is_outcome_unknown_after_restart_and_not_repeated(
) -> anyhow::Result<()> {
    let Some(_node) = approval_e2e::node() else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    let (script, log) = hanging_server(&w)?;
    w.write_policy(
        "slow.call.toml",
        &mcp_policy("slow.call", &[&script, &log], "slow", "60s", ""),
    )?;
    let mut server = w.start()?;
    let mcp = server.mcp().await?;
    let (id, hash) = approved(&w, &server, &mcp, "slow.call", json!({"n": 2})).await?;
    let bg = {
        let (mcp, id, hash) = (mcp.clone(), id.clone(), hash.clone());
        tokio::spawn(async move { mcp.execute(&id, &hash).await })
    };
    poll_until(
        "the call to reach the downstream",
        Duration::from_secs(20),
        || async { Ok((!calls(&log).is_empty()).then_some(())) },
    )
    .await?;
    server.kill();
    assert!(bg.await?.is_err(), "execute survived a SIGKILL");

    let server = w.start()?;
    let mcp = server.mcp().await?;
    let st = mcp.status(&id).await?;
    st.expect("OUTCOME_UNKNOWN", false);
    let again = mcp.execute(&id, &hash).await?;
    again.expect("ALREADY_EXECUTED_NO_REPLAY", true);
    assert_eq!(
        calls(&log),
        vec![r#"{"n":2}"#.to_owned()],
        "the call was repeated"
    );
    Ok(())
}

#[tokio::test]
async fn import_tools_writes_one_policy_per_tool_and_never_overwrites() -> anyhow::Result<()> {
    let Some(index) = filesystem_server()? else {
        return Ok(());
    };
    let w = World::new(&["alice"])?;
    let allowed = w.path().join("allowed");
    std::fs::create_dir_all(&allowed)?;
    let out = w.path().join("imported");
    let run = || {
        approval_e2e::approval_server(&[
            "import-tools".as_ref(),
            "--out".as_ref(),
            out.as_os_str(),
            "--prefix".as_ref(),
            "fs".as_ref(),
            "--command".as_ref(),
            "node".as_ref(),
            index.as_os_str(),
            allowed.as_os_str(),
        ])
    };
    let first = run()?;
    assert!(first.status.success(), "{first}");
    let mut files: Vec<String> = std::fs::read_dir(&out)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    assert!(files
        .iter()
        .all(|f| f.starts_with("fs.") && f.ends_with(".toml")));
    assert!(
        files.contains(&"fs.write_file.toml".to_owned()),
        "{files:?}"
    );
    let write = out.join("fs.write_file.toml");
    let text = std::fs::read_to_string(&write)?;
    assert!(text.contains("tool = \"write_file\""), "{text}");
    assert!(text.contains("kind = \"fs.write_file\""), "{text}");

    // Filled in by a human, it loads and checks (fetching the tool's schema).
    let filled = text
        .replace("approvers = []", "approvers = [\"alice\"]")
        .replace("quorum = 0", "quorum = 1");
    std::fs::write(&write, &filled)?;
    let again = run()?;
    assert!(again.status.success(), "{again}");
    assert!(again.stdout.contains("0 new policies"), "{again}");
    assert_eq!(std::fs::read_to_string(&write)?, filled, "overwritten");
    let count = std::fs::read_dir(&out)?.count();
    assert_eq!(count, files.len());

    let only = w.path().join("only");
    std::fs::create_dir_all(&only)?;
    std::fs::write(only.join("fs.write_file.toml"), &filled)?;
    let check = approval_e2e::approval_server(&[
        "check".as_ref(),
        "--policies".as_ref(),
        only.as_os_str(),
        "--keys".as_ref(),
        w.keys.as_os_str(),
    ])?;
    assert!(check.status.success(), "{check}");
    Ok(())
}

#[tokio::test]
async fn mcp_url_downstream_gets_its_header_from_the_gate_environment() -> anyhow::Result<()> {
    // The downstream: another gate's Streamable HTTP /mcp, which wants a bearer token.
    let down = World::new(&["carol"])?;
    down.write_policy(
        "note.write.toml",
        "kind = \"note.write\"\nquorum = 1\napprovers = [\"carol\"]\n[executor]\ntype = \"note\"\n",
    )?;
    let agents = down.path().join("agents");
    let token = down.add_agent("robot", &agents)?;
    let downstream = down.start_with_agents(&agents)?;

    let w = World::new(&["alice", "bob"])?;
    let policy = |kind: &str, extra: &str| {
        format!(
            r#"
kind = "{kind}"
quorum = 2
approvers = ["alice", "bob"]
[executor]
type = "mcp"
url = "{}"
tool = "approval_list"
timeout = "20s"
{extra}
"#,
            downstream.mcp_url
        )
    };
    w.write_policy(
        "down.list.toml",
        &policy(
            "down.list",
            "headers_from = { Authorization = \"DOWN_AUTH\" }",
        ),
    )?;
    w.write_policy("down.anonymous.toml", &policy("down.anonymous", ""))?;
    // The secret lives in the gate's environment, never in the policy.
    let server = Server::start_via(
        &approval_e2e::ServerOptions {
            data: w.data.clone(),
            policies: w.policies.clone(),
            keys: w.keys.clone(),
            agents: None,
        },
        &[
            "/usr/bin/env".into(),
            format!("DOWN_AUTH=Bearer {token}").into(),
        ],
    )?;
    let mcp = server.mcp().await?;

    let (id, hash) = approved(&w, &server, &mcp, "down.list", json!({})).await?;
    let r = mcp.execute(&id, &hash).await?;
    r.expect("SUCCEEDED", false);
    let output = &r.structured["result"]["output"];
    assert_eq!(
        output["structuredContent"]["code"], "OK",
        "the downstream's own structured result: {output}"
    );

    // Without the header the downstream refuses the session: nothing was sent.
    let (id, hash) = approved(&w, &server, &mcp, "down.anonymous", json!({})).await?;
    let r = mcp.execute(&id, &hash).await?;
    assert_eq!(r.status(), "FAILED", "{}", r.structured);
    assert!(
        r.structured["result"]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("nothing was sent"),
        "{}",
        r.structured
    );
    Ok(())
}

#[tokio::test]
async fn mcp_schema_from_an_unreachable_tool_disables_the_kind_until_a_reload_reaches_it(
) -> anyhow::Result<()> {
    let Some(_node) = approval_e2e::node() else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    let (script, log) = hanging_server(&w)?;
    // The server's script is not there yet: the tool's inputSchema cannot be read.
    let later = w.path().join("later-mcp.js");
    w.write_policy(
        "slow.call.toml",
        &mcp_policy(
            "slow.call",
            &[&later, &log],
            "slow",
            "10s",
            "payload_schema_from_tool = true",
        ),
    )?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let refused = mcp.prepare("slow.call", json!({"n": 1}), "early").await?;
    refused.expect("KIND_DISABLED", true);
    assert!(
        refused
            .structured
            .to_string()
            .contains("payload_schema_from_tool"),
        "{}",
        refused.structured
    );

    std::fs::copy(&script, &later)?;
    server.sighup()?;
    let ok = poll_until(
        "the kind to be enabled by the reload",
        Duration::from_secs(20),
        || async {
            let r = mcp
                .prepare("slow.call", json!({"n": 2}), "after reload")
                .await?;
            Ok((r.code() != "KIND_DISABLED").then_some(r))
        },
    )
    .await?;
    ok.expect("PENDING_QUORUM", false);
    // The fetched schema is in the policy the approvers see and sign.
    let shown = w
        .signer("alice", &server)
        .ok(&["--json", "show", &ok.proposal_id()])
        .await?
        .json()?;
    assert_eq!(
        shown["policy"]["payload_schema"],
        json!({"type": "object"}),
        "{shown}"
    );
    // Not an object: refused at prepare, before anyone is asked to sign.
    mcp.prepare("slow.call", json!([1]), "array")
        .await?
        .expect("INVALID_PAYLOAD", true);
    assert!(
        calls(&log).is_empty(),
        "nothing may reach the tool at prepare"
    );
    Ok(())
}
