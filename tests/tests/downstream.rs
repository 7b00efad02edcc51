//! Issue #31, items 2, 6 and 9: a downstream MCP server as the adversary, or as a
//! flaky dependency, and what the gate tells the agent and anyone about it.
//!
//! The downstream here is a small node script (as in `mcp_executor.rs`) in one of
//! three modes: `pages` answers every `tools/list` with a page of 400 tools (180 kB) and another
//! `nextCursor`, forever; `objects` answers `tools/call` with one 15 MB line of
//! `{},{},...`; `flaky` exits at once while a flag file exists (the downstream is
//! "down") and otherwise lists the tool `act` and answers calls to it (recording
//! each in a file). Memory is measured as in `memory_budget.rs`: the peak RSS
//! (`VmHWM`), reset through `/proc/PID/clear_refs` before the attack.

use approval_e2e::pg::FreshDb;
use approval_e2e::{poll_until, McpClient, Server, World};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MIB: u64 = 1024 * 1024;
/// Issue #31 item 2: the peak RSS may grow by less than this in each case.
const GROWTH_LIMIT: u64 = 200 * MIB;

const DOWNSTREAM: &str = r#"
const fs = require('fs');
const [mode, arg] = [process.argv[2], process.argv[3]];
if (mode === 'flaky' && fs.existsSync(arg + '.down')) process.exit(1);
let buf = '';
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
const tool = (name, description) => ({name, description, inputSchema: {type: 'object'}});
let page = null;
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
        capabilities: {tools: {}}, serverInfo: {name: 'downstream', version: '1'}}});
    } else if (m.method === 'tools/list' && mode === 'pages') {
      if (!page) {
        page = [];
        for (let k = 0; k < 400; k++) page.push(tool('t' + k, 'x'.repeat(400)));
      }
      const c = (m.params && m.params.cursor) ? Number(m.params.cursor) : 0;
      send({jsonrpc: '2.0', id: m.id, result: {tools: page, nextCursor: String(c + 1)}});
    } else if (m.method === 'tools/list') {
      send({jsonrpc: '2.0', id: m.id, result: {tools: [tool('act', 'Acts')]}});
    } else if (m.method === 'tools/call' && mode === 'objects') {
      process.stdout.write('{"jsonrpc":"2.0","id":' + JSON.stringify(m.id) +
        ',"result":{"content":[],"structuredContent":{"rows":[' + '{},'.repeat(5000000) + '{}]}}}\n');
    } else if (m.method === 'tools/call') {
      fs.appendFileSync(arg + '.calls', JSON.stringify(m.params.arguments) + '\n');
      send({jsonrpc: '2.0', id: m.id, result: {content: [{type: 'text', text: 'done'}]}});
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

/// Writes the downstream script into the world; returns its path.
fn downstream(w: &World) -> anyhow::Result<PathBuf> {
    let script = w.path().join("downstream.js");
    std::fs::write(&script, DOWNSTREAM)?;
    Ok(script)
}

/// An `mcp` policy running `node script mode arg`, tool `tool`.
fn policy(kind: &str, script: &Path, mode: &str, arg: &Path, tool: &str, extra: &str) -> String {
    policy_within(kind, script, mode, arg, tool, "5s", extra)
}

/// [`policy`] with another `timeout`.
fn policy_within(
    kind: &str,
    script: &Path,
    mode: &str,
    arg: &Path,
    tool: &str,
    timeout: &str,
    extra: &str,
) -> String {
    let argv = [
        "node".to_owned(),
        script.display().to_string(),
        mode.to_owned(),
        arg.display().to_string(),
    ]
    .iter()
    .map(|a| toml_str(a))
    .collect::<Vec<_>>()
    .join(", ");
    format!(
        "kind = \"{kind}\"\ndescription = \"Downstream tool {tool}\"\nquorum = 2\napprovers = [\"alice\", \"bob\"]\n\
         ttl = \"30m\"\nexecute_within = \"10m\"\n[executor]\ntype = \"mcp\"\ncommand = [{argv}]\ntool = \"{tool}\"\n\
         timeout = \"{timeout}\"\n{extra}\n"
    )
}

const NOTE_POLICY: &str = "kind = \"note.write\"\ndescription = \"Write a note\"\nquorum = 2\n\
approvers = [\"alice\", \"bob\"]\nttl = \"30m\"\nexecute_within = \"10m\"\n[executor]\ntype = \"note\"\n";

fn status_field(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .ok_or_else(|| anyhow::anyhow!("no {field} in /proc/{pid}/status"))?;
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("bad line {line:?}"))?
        .parse()?;
    Ok(kb * 1024)
}

fn peak(server: &Server) -> anyhow::Result<u64> {
    status_field(server.pid, "VmHWM:")
}

/// Resets the peak RSS to the current RSS and returns it.
fn reset_peak(server: &Server) -> anyhow::Result<u64> {
    std::fs::write(format!("/proc/{}/clear_refs", server.pid), "5")?;
    peak(server)
}

/// Prepares and gets alice and bob to approve; returns (id, hash).
async fn approved(
    w: &World,
    server: &Server,
    kind: &str,
    payload: Value,
) -> anyhow::Result<(String, String)> {
    let mcp = server.mcp().await?;
    let prep = mcp.prepare(kind, payload, "downstream test").await?;
    prep.expect("PENDING_QUORUM", false);
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    w.signer("alice", server).approve(&id).await?;
    w.signer("bob", server).approve(&id).await?;
    mcp.wait_status(&id, "APPROVED", Duration::from_secs(10))
        .await?;
    Ok((id, hash))
}

/// Issue #31 item 2: `tools/list` pages without end, at start (for
/// `payload_schema_from_tool`), on SIGHUP and at execute.
#[tokio::test]
async fn a_downstream_paging_tools_list_forever_cannot_exhaust_the_gates_memory(
) -> anyhow::Result<()> {
    let Some(_node) = approval_e2e::node() else {
        return Ok(());
    };
    // The same gate without the hostile downstream, for the baseline peak at start.
    let control = World::new(&["alice", "bob"])?;
    control.write_policy("note.write.toml", NOTE_POLICY)?;
    let began = Instant::now();
    let control_server = control.start()?;
    let control_started = began.elapsed();
    let baseline = peak(&control_server)?;

    let w = World::new(&["alice", "bob"])?;
    let script = downstream(&w)?;
    let tag = w.path().join("pages");
    w.write_policy("note.write.toml", NOTE_POLICY)?;
    // At start and on reload: the schema of a tool the endless pages never list.
    w.write_policy(
        "endless.schema.toml",
        // 20 s: unbounded, the listing would go on that long.
        &policy_within(
            "endless.schema",
            &script,
            "pages",
            &tag,
            "wanted",
            "20s",
            "payload_schema_from_tool = true",
        ),
    )?;
    // At execute: the tool must be listed before it is called.
    w.write_policy(
        "endless.exec.toml",
        &policy("endless.exec", &script, "pages", &tag, "wanted", ""),
    )?;
    let began = Instant::now();
    let server = w.start()?;
    let started = began.elapsed();
    let at_start = peak(&server)?;
    eprintln!(
        "start: peak RSS {} MiB ({} MiB without the downstream), listening after {started:?} ({control_started:?} without)",
        at_start / MIB,
        baseline / MIB
    );
    assert!(
        at_start < baseline + GROWTH_LIMIT,
        "peak RSS at start {} MiB against {} MiB without the downstream",
        at_start / MIB,
        baseline / MIB
    );
    // Unbounded, the listener opened only when the 20 s listing timed out.
    assert!(
        started < control_started + Duration::from_secs(5),
        "listening took {started:?} ({control_started:?} without the downstream)"
    );
    let log = server.log();
    assert!(log.contains("more than 20 pages"), "{log}");

    // The kind is disabled; everything else is served.
    let mcp = server.mcp().await?;
    mcp.prepare("endless.schema", json!({}), "s")
        .await?
        .expect("KIND_DISABLED", true);
    let (note, note_hash) = approved(&w, &server, "note.write", json!({"text": "hi"})).await?;
    assert_eq!(mcp.execute(&note, &note_hash).await?.status(), "SUCCEEDED");

    // On SIGHUP.
    let before = reset_peak(&server)?;
    let reloads = log.matches("more than 20 pages").count();
    server.sighup()?;
    poll_until(
        "the reload to give up on the pages",
        Duration::from_secs(20),
        || async {
            Ok((server.log().matches("more than 20 pages").count() > reloads).then_some(()))
        },
    )
    .await?;
    let grown = peak(&server)?.saturating_sub(before);
    eprintln!("reload: peak RSS grew {} MiB", grown / MIB);
    assert!(
        grown < GROWTH_LIMIT,
        "peak RSS grew {} MiB on reload",
        grown / MIB
    );

    // At execute: refused before anything is sent, within the bounds.
    let (id, hash) = approved(&w, &server, "endless.exec", json!({"n": 1})).await?;
    let before = reset_peak(&server)?;
    let r = tokio::time::timeout(Duration::from_secs(25), mcp.execute(&id, &hash)).await;
    let grown = peak(&server)?.saturating_sub(before);
    eprintln!("execute: peak RSS grew {} MiB", grown / MIB);
    assert!(
        grown < GROWTH_LIMIT,
        "peak RSS grew {} MiB at execute",
        grown / MIB
    );
    let r = r??;
    assert_eq!(r.status(), "FAILED", "{}", r.structured);
    let detail = r.structured["result"]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(
        detail.starts_with("nothing was sent") && detail.contains("more than 20 pages"),
        "{detail}"
    );
    Ok(())
}

/// Issue #31 item 2: one 15 MB stdio line of `{},{},...` as the tool's result.
#[tokio::test]
async fn a_downstream_answering_with_a_huge_line_cannot_exhaust_the_gates_memory(
) -> anyhow::Result<()> {
    let Some(_node) = approval_e2e::node() else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    let script = downstream(&w)?;
    let tag = w.path().join("objects");
    w.write_policy(
        "huge.result.toml",
        &policy("huge.result", &script, "objects", &tag, "act", ""),
    )?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let (id, hash) = approved(&w, &server, "huge.result", json!({"n": 1})).await?;
    let before = reset_peak(&server)?;
    let began = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(25), mcp.execute(&id, &hash)).await;
    let took = began.elapsed();
    let grown = peak(&server)?.saturating_sub(before);
    eprintln!("huge line: peak RSS grew {} MiB in {took:?}", grown / MIB);
    assert!(grown < GROWTH_LIMIT, "peak RSS grew {} MiB", grown / MIB);
    let r = r??;
    // The call was sent and answered, but the answer was refused unread: the tool
    // may have acted, so OUTCOME_UNKNOWN, said at once rather than at the time-out.
    assert_eq!(r.status(), "OUTCOME_UNKNOWN", "{}", r.structured);
    let detail = r.structured["result"]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(detail.contains("JSON values"), "{detail}");
    assert!(took < Duration::from_secs(4), "took {took:?}");
    // The gate still serves.
    assert!(server.healthz().await?["status"] == "ok");
    Ok(())
}

/// Prepares `kind` twice: one stays PENDING, one is APPROVED. Returns
/// ((pending id), (approved id, hash)).
async fn one_pending_one_approved(
    w: &World,
    server: &Server,
    kind: &str,
) -> anyhow::Result<(String, (String, String))> {
    let mcp = server.mcp().await?;
    let pending = mcp.prepare(kind, json!({"n": 1}), "stays pending").await?;
    pending.expect("PENDING_QUORUM", false);
    let approved = approved(w, server, kind, json!({"n": 2})).await?;
    Ok((pending.proposal_id(), approved))
}

/// After the blip: both proposals as they were; the approved one refused
/// KIND_DISABLED while the schema is unknown, then run once it is back.
async fn blip_leaves_both_and_the_approved_one_runs(
    watcher: &Server,
    blipped: &Server,
    flag: &Path,
    pending: &str,
    (id, hash): (&str, &str),
) -> anyhow::Result<()> {
    let watch = watcher.mcp().await?;
    let mcp = blipped.mcp().await?;
    // The blipped instance has the kind disabled.
    mcp.prepare("flaky.act", json!({"n": 3}), "during the blip")
        .await?
        .expect("KIND_DISABLED", true);
    assert_eq!(watch.status(pending).await?.status(), "PENDING");
    assert_eq!(watch.status(id).await?.status(), "APPROVED");
    let refused = mcp.execute(id, hash).await?;
    refused.expect("KIND_DISABLED", true);
    assert!(refused.retry_allowed(), "{}", refused.structured);
    assert_eq!(watch.status(id).await?.status(), "APPROVED");
    assert!(!flag.with_extension("calls").exists());

    // The downstream is back; the reload reads the schema and enables the kind.
    std::fs::remove_file(flag.with_extension("down"))?;
    blipped.sighup()?;
    let ran = poll_until(
        "the kind to be enabled again",
        Duration::from_secs(20),
        || async {
            let r = mcp.execute(id, hash).await?;
            Ok((r.code() != "KIND_DISABLED").then_some(r))
        },
    )
    .await?;
    assert_eq!(ran.status(), "SUCCEEDED", "{}", ran.structured);
    assert_eq!(
        std::fs::read_to_string(flag.with_extension("calls"))?,
        "{\"n\":2}\n"
    );
    assert_eq!(watch.status(pending).await?.status(), "PENDING");
    Ok(())
}

/// Issue #31 item 6, on sled: the gate restarts while the downstream is briefly
/// unreachable.
#[tokio::test]
async fn a_downstream_blip_at_start_voids_no_proposal_and_the_approved_one_runs_on_sled(
) -> anyhow::Result<()> {
    let Some(_node) = approval_e2e::node() else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    let script = downstream(&w)?;
    let flag = w.path().join("flaky");
    w.write_policy(
        "flaky.act.toml",
        &policy(
            "flaky.act",
            &script,
            "flaky",
            &flag,
            "act",
            "payload_schema_from_tool = true",
        ),
    )?;
    let mut first = w.start()?;
    let (pending, (id, hash)) = one_pending_one_approved(&w, &first, "flaky.act").await?;
    first.stop(Duration::from_secs(10))?;
    std::fs::write(flag.with_extension("down"), "")?;
    let second = w.start()?;
    blip_leaves_both_and_the_approved_one_runs(&second, &second, &flag, &pending, (&id, &hash))
        .await
}

/// Issue #31 item 6, on PostgreSQL: a second instance starts during the blip while
/// the first, which never lost the downstream, serves the same database.
#[tokio::test]
async fn a_downstream_blip_at_one_instances_start_voids_nothing_on_postgres() -> anyhow::Result<()>
{
    let Some(_node) = approval_e2e::node() else {
        return Ok(());
    };
    let Some(db) = FreshDb::new()? else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    let script = downstream(&w)?;
    let flag = w.path().join("flaky");
    w.write_policy(
        "flaky.act.toml",
        &policy(
            "flaky.act",
            &script,
            "flaky",
            &flag,
            "act",
            "payload_schema_from_tool = true",
        ),
    )?;
    let a = db.start(&w, "a", &[])?;
    let (pending, (id, hash)) = one_pending_one_approved(&w, &a, "flaky.act").await?;
    std::fs::write(flag.with_extension("down"), "")?;
    let b = db.start(&w, "b", &[])?;
    blip_leaves_both_and_the_approved_one_runs(&a, &b, &flag, &pending, (&id, &hash)).await
}

/// Issue #31 item 9: KIND_DISABLED and the open `/healthz` name the kind and the
/// cause, never the downstream's command line or a policy file's path; the log does.
#[tokio::test]
async fn kind_disabled_and_healthz_name_no_command_line_or_policy_path_but_the_log_does(
) -> anyhow::Result<()> {
    let Some(_node) = approval_e2e::node() else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    w.write_policy(
        "secret.call.toml",
        "kind = \"secret.call\"\nquorum = 1\napprovers = [\"alice\"]\n[executor]\ntype = \"mcp\"\n\
         command = [\"/nonexistent/secret-mcp-7f3a\", \"--token-file\", \"/srv/private-token-91c2\"]\n\
         tool = \"x\"\npayload_schema_from_tool = true\n",
    )?;
    // A policy naming an approver the keyring lacks.
    w.write_policy(
        "keyless.call.toml",
        "kind = \"keyless.call\"\nquorum = 1\napprovers = [\"carol\"]\n[executor]\ntype = \"note\"\n",
    )?;
    let server = w.start()?;
    let secrets = [
        "/nonexistent/secret-mcp-7f3a".to_owned(),
        "private-token-91c2".to_owned(),
        w.policies.display().to_string(),
    ];
    let mcp = server.mcp().await?;
    for kind in ["secret.call", "keyless.call"] {
        let r = mcp.prepare(kind, json!({}), "x").await?;
        r.expect("KIND_DISABLED", true);
        let text = r.structured.to_string();
        assert!(text.contains(kind), "{text}");
        for s in &secrets {
            assert!(
                !text.contains(s.as_str()),
                "{kind}'s KIND_DISABLED names {s}: {text}"
            );
        }
    }
    let health = server.healthz().await?;
    let text = health.to_string();
    for s in &secrets {
        assert!(!text.contains(s.as_str()), "/healthz names {s}: {text}");
    }
    let causes: Vec<(&str, &str)> = health["disabled_kinds"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or(""),
                d["cause"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        causes,
        vec![
            ("keyless.call", "approvers_missing_from_keyring"),
            ("secret.call", "downstream_schema_unavailable")
        ]
    );
    // The operator's log has the specifics: the program that would not start, the file.
    let log = server.log();
    for s in [&secrets[0], &secrets[2]] {
        assert!(log.contains(s.as_str()), "the log lacks {s}: {log}");
    }
    Ok(())
}

/// Issue #31 item 9: a transport error puts no downstream URL into the result the
/// agent reads; the log has it.
#[tokio::test]
async fn a_transport_error_puts_no_downstream_url_in_the_agents_result_but_the_log_does(
) -> anyhow::Result<()> {
    let Some(_node) = approval_e2e::node() else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    // Nothing listens on port 9 of loopback: the connection is refused.
    let url = "http://127.0.0.1:9/private-endpoint-5c1e/mcp";
    w.write_policy(
        "remote.call.toml",
        &format!(
            "kind = \"remote.call\"\nquorum = 2\napprovers = [\"alice\", \"bob\"]\n[executor]\ntype = \"mcp\"\n\
             url = \"{url}\"\ntool = \"act\"\ntimeout = \"5s\"\n"
        ),
    )?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let (id, hash) = approved(&w, &server, "remote.call", json!({"n": 1})).await?;
    let r = mcp.execute(&id, &hash).await?;
    assert_eq!(r.status(), "FAILED", "{}", r.structured);
    let text = r.structured.to_string();
    assert!(text.contains("nothing was sent"), "{text}");
    for s in ["private-endpoint-5c1e", "127.0.0.1:9"] {
        assert!(!text.contains(s), "the result names {s}: {text}");
    }
    // Nor does the status the agent reads later.
    let later = mcp.status(&id).await?.structured.to_string();
    assert!(!later.contains("private-endpoint-5c1e"), "{later}");
    assert!(
        server.log().contains("private-endpoint-5c1e"),
        "{}",
        server.log()
    );
    Ok(())
}
