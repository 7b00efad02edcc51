//! Metrics and logs (issue #36), on the real binaries: `serve --metrics-listen`
//! serves `/metrics` on its own port only, an approval round trip moves the counters
//! it should, an agent's made-up kinds and paths add no series, and
//! `--log-format json` writes one object a line with no token and no payload.

use approval_core::message::Decision;
use approval_e2e::{McpClient, Server, ServerOptions, World};
use serde_json::{json, Value};
use std::ffi::OsString;

/// A 1-of-1 note: one approval, then one execution.
pub const NOTE_POLICY: &str = r#"
kind = "note.write"
description = "Write a note into the sandbox"
quorum = 1
approvers = ["alice"]
vetoes = 1
ttl = "30m"
execute_within = "10m"

[payload_schema]
type = "object"
required = ["text"]
additionalProperties = false
[payload_schema.properties.text]
type = "string"

[executor]
type = "note"
"#;

/// The value of the series written exactly as `series` (name and labels), if any.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Every series line (not a comment) of the text.
fn series(text: &str) -> usize {
    text.lines().filter(|l| !l.starts_with('#')).count()
}

async fn scrape(url: &str) -> anyhow::Result<String> {
    let r = reqwest::get(url).await?;
    anyhow::ensure!(r.status() == 200, "{url} answered {}", r.status());
    Ok(r.text().await?)
}

fn start(
    world: &World,
    agents: Option<&std::path::Path>,
    extra: &[&str],
) -> anyhow::Result<Server> {
    start_env(world, agents, extra, &[])
}

fn start_env(
    world: &World,
    agents: Option<&std::path::Path>,
    extra: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<Server> {
    let mut flags: Vec<OsString> = vec!["--metrics-listen".into(), "127.0.0.1:0".into()];
    flags.extend(extra.iter().map(OsString::from));
    Server::start_full(
        &ServerOptions {
            data: world.data.clone(),
            policies: world.policies.clone(),
            keys: world.keys.clone(),
            agents: agents.map(|a| a.to_path_buf()),
        },
        &[],
        &flags,
        env,
    )
}

#[tokio::test]
async fn a_round_trip_moves_the_counters_on_the_metrics_port_only() -> anyhow::Result<()> {
    let world = World::new(&["alice"])?;
    world.write_policy("note.write.toml", NOTE_POLICY)?;
    let server = start(&world, None, &[])?;
    let metrics_url = server.metrics_url.clone().expect("a Metrics: line");
    assert!(
        metrics_url.starts_with("http://127.0.0.1:"),
        "{metrics_url}"
    );
    assert!(
        !metrics_url.starts_with(&format!("{}/", server.api_url)),
        "{metrics_url} shares the approver port"
    );

    // Not on the agent's or the approvers' listener.
    for base in [server.api_url.clone(), server.mcp_url.replace("/mcp", "")] {
        let r = reqwest::get(format!("{base}/metrics")).await?;
        assert_eq!(r.status(), 400, "{base}/metrics is served");
        let body = r.text().await?;
        assert!(!body.contains("approval_"), "{base}/metrics: {body}");
    }

    let mcp = server.mcp().await?;
    let prep = mcp
        .prepare("note.write", json!({"text": "ship it"}), "a note")
        .await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    let mid = scrape(&metrics_url).await?;
    assert_eq!(
        value(&mid, "approval_pending_proposals"),
        Some(1.0),
        "{mid}"
    );
    // A decision forged in alice's name: refused, and counted as such.
    let forged = approval_core::keyring::SecretKey::from_seed(
        approval_core::ApproverName::parse("alice")?,
        [7; 32],
    );
    let (status, _) = server
        .post_decision(&forged, &id, &hash, Decision::Approve, "forged")
        .await?;
    assert_eq!(status, 403);
    world.signer("alice", &server).approve(&id).await?;
    mcp.execute(&id, &hash).await?.expect("SUCCEEDED", false);

    let text = scrape(&metrics_url).await?;
    for (series, want) in [
        ("approval_signature_failures_total{on=\"decision\"}", 1.0),
        (
            "approval_decisions_total{decision=\"approve\",outcome=\"INVALID_SIGNATURE\"}",
            1.0,
        ),
        (
            "approval_proposals_total{kind=\"note.write\",status=\"PENDING\"}",
            1.0,
        ),
        (
            "approval_proposals_total{kind=\"note.write\",status=\"APPROVED\"}",
            1.0,
        ),
        (
            "approval_proposals_total{kind=\"note.write\",status=\"EXECUTING\"}",
            1.0,
        ),
        (
            "approval_proposals_total{kind=\"note.write\",status=\"SUCCEEDED\"}",
            1.0,
        ),
        (
            "approval_decisions_total{decision=\"approve\",outcome=\"recorded\"}",
            1.0,
        ),
        (
            "approval_executions_total{executor=\"note\",outcome=\"succeeded\"}",
            1.0,
        ),
        (
            "approval_execution_duration_seconds_count{executor=\"note\"}",
            1.0,
        ),
        ("approval_pending_proposals", 0.0),
        ("approval_fail_stop", 0.0),
        ("approval_outbox_depth", 0.0),
    ] {
        assert_eq!(value(&text, series), Some(want), "{series} in:\n{text}");
    }
    let decisions = "approval_http_requests_total{surface=\"approver\",route=\"/v1/proposals/{id}/decisions\",code=\"200\"}";
    assert_eq!(value(&text, decisions), Some(1.0), "{text}");
    let mcp_calls = "approval_http_requests_total{surface=\"agent\",route=\"/mcp\",code=\"200\"}";
    assert!(value(&text, mcp_calls).is_some_and(|n| n >= 3.0), "{text}");
    let commits = value(&text, "approval_store_commit_seconds_count").unwrap_or(0.0);
    assert!(commits >= 4.0, "{commits} commits for 4 changes:\n{text}");
    assert!(!text.contains(&id), "a proposal id is a label:\n{text}");
    Ok(())
}

/// The attack: an agent sends 1,000 made-up kinds (and tool names) and calls 1,000
/// made-up paths. Every one is answered, and the series count stays bounded.
#[tokio::test]
async fn an_agent_with_1000_made_up_kinds_and_paths_grows_no_series() -> anyhow::Result<()> {
    let world = World::new(&["alice"])?;
    world.write_policy("note.write.toml", NOTE_POLICY)?;
    let server = start(&world, None, &[])?;
    let metrics_url = server.metrics_url.clone().expect("a Metrics: line");
    let mcp = server.mcp().await?;
    // Once each, so that the `other` and `/mcp` series exist before counting.
    mcp.prepare("made.up", json!({"text": "x"}), "warm up")
        .await?;
    let r = reqwest::get(format!("{}/v1/nothing", server.api_url)).await?;
    assert_eq!(r.status(), 400);
    let before = series(&scrape(&metrics_url).await?);
    let client = reqwest::Client::new();
    for i in 0..1000 {
        let r = mcp
            .prepare(&format!("made.up{i}"), json!({"text": "x"}), "made up")
            .await?;
        assert!(r.is_error, "made.up{i} was accepted: {}", r.structured);
        let r = client
            .get(format!("{}/v1/proposals/p-{i}/made-up-{i}", server.api_url))
            .send()
            .await?;
        assert_eq!(r.status(), 400);
    }
    let text = scrape(&metrics_url).await?;
    assert_eq!(series(&text), before, "the series grew:\n{text}");
    assert!(!text.contains("made"), "{text}");
    let other = "approval_http_requests_total{surface=\"approver\",route=\"other\",code=\"400\"}";
    assert_eq!(value(&text, other), Some(1001.0), "{text}");
    Ok(())
}

#[tokio::test]
async fn json_logs_are_one_object_a_line_without_token_or_payload() -> anyhow::Result<()> {
    let world = World::new(&["alice"])?;
    world.write_policy("note.write.toml", NOTE_POLICY)?;
    let agents = world.path().join("agents");
    let token = world.add_agent("deployer", &agents)?;
    let mut server = start(&world, Some(&agents), &["--log-format", "json"])?;
    let mcp = approval_e2e::Mcp::connect(&server.mcp_url, Some(&token)).await?;
    let secret_text = "payload-text-that-must-not-be-logged";
    let prep = mcp
        .prepare("note.write", json!({"text": secret_text}), "a note")
        .await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    world.signer("alice", &server).approve(&id).await?;
    mcp.execute(&id, &hash).await?.expect("SUCCEEDED", false);
    server.stop(std::time::Duration::from_secs(10))?;

    let log = server.log();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 4, "too few log lines:\n{log}");
    let mut messages = vec![];
    for line in &lines {
        let v: Value = serde_json::from_str(line)
            .map_err(|e| anyhow::anyhow!("not one JSON object: {e}: {line}"))?;
        for field in ["timestamp", "level", "target", "message"] {
            assert!(v.get(field).is_some(), "no {field:?} in {line}");
        }
        messages.push(v["message"].as_str().unwrap_or("").to_owned());
    }
    for m in ["proposed", "decision", "executed"] {
        assert!(messages.iter().any(|x| x == m), "no {m:?} line:\n{log}");
    }
    let proposed = lines
        .iter()
        .find(|l| l.contains("\"message\":\"proposed\""))
        .map(|l| serde_json::from_str::<Value>(l))
        .transpose()?
        .unwrap_or_default();
    assert_eq!(proposed["id"], json!(id), "{proposed}");
    assert_eq!(proposed["kind"], "note.write", "{proposed}");
    assert_eq!(proposed["agent"], "deployer", "{proposed}");
    assert!(
        !log.contains(&token),
        "the agent's token is in the log:\n{log}"
    );
    assert!(
        !log.contains(secret_text),
        "the payload is in the log:\n{log}"
    );
    Ok(())
}

/// Two instances on one PostgreSQL database: one leads the sweep and counts its
/// lease sweeps, and both report the shared store's pending proposals exactly.
#[tokio::test]
async fn on_postgres_one_instance_leads_and_both_see_the_shared_pending_count() -> anyhow::Result<()>
{
    let Some(db) = approval_e2e::pg::FreshDb::new()? else {
        return Ok(());
    };
    let world = World::new(&["alice"])?;
    world.write_policy("note.write.toml", NOTE_POLICY)?;
    let flags = ["--claim-lease", "2", "--metrics-listen", "127.0.0.1:0"];
    let a = db.start(&world, "a", &flags)?;
    let b = db.start(&world, "b", &flags)?;
    let urls = [a.metrics_url.clone(), b.metrics_url.clone()].map(|u| u.expect("a Metrics: line"));
    a.mcp()
        .await?
        .prepare("note.write", json!({"text": "shared"}), "a note")
        .await?;
    let leader = "approval_leader{task=\"sweep\"}";
    let urls = &urls;
    let texts = approval_e2e::poll_until(
        "one leader that has swept",
        std::time::Duration::from_secs(30),
        || async move {
            let texts = [scrape(&urls[0]).await?, scrape(&urls[1]).await?];
            let leads: Vec<Option<f64>> = texts.iter().map(|t| value(t, leader)).collect();
            let swept = texts.iter().any(|t| {
                value(t, leader) == Some(1.0)
                    && value(t, "approval_lease_sweeps_total{outcome=\"ok\"}")
                        .is_some_and(|n| n >= 1.0)
            });
            let one = leads.iter().filter(|l| **l == Some(1.0)).count() == 1
                && leads.iter().all(Option::is_some);
            Ok((one && swept).then_some(texts))
        },
    )
    .await?;
    for t in &texts {
        assert_eq!(value(t, "approval_pending_proposals"), Some(1.0), "{t}");
    }
    Ok(())
}

/// A webhook channel nobody answers: its failed deliveries are counted by channel
/// type, and the entry waiting for its retry is the outbox's depth.
#[tokio::test]
async fn failed_deliveries_are_counted_and_the_outbox_depth_shows_the_wait() -> anyhow::Result<()> {
    let down = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let world = World::new(&["alice"])?;
    world.write_policy(
        "note.write.toml",
        &format!("{NOTE_POLICY}\n[[notify]]\ntype = \"webhook\"\nurl = \"http://{down}/hook\"\n"),
    )?;
    let server = start_env(
        &world,
        None,
        &[],
        &[("APPROVAL_NOTIFY_TIMINGS_MS", "100,200,60000,500,50")],
    )?;
    let url = server.metrics_url.clone().expect("a Metrics: line");
    server
        .mcp()
        .await?
        .prepare("note.write", json!({"text": "x"}), "a note")
        .await?;
    let failed = "approval_notify_deliveries_total{channel=\"webhook\",outcome=\"failed\"}";
    let url = &url;
    let text = approval_e2e::poll_until(
        "a failed delivery",
        std::time::Duration::from_secs(20),
        || async move {
            let t = scrape(url).await?;
            Ok(value(&t, failed).is_some_and(|n| n >= 2.0).then_some(t))
        },
    )
    .await?;
    assert_eq!(value(&text, "approval_outbox_depth"), Some(1.0), "{text}");
    assert!(!text.contains("outcome=\"delivered\""), "{text}");
    Ok(())
}
