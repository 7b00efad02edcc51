//! A real Prometheus (Debian's `prometheus`) scrapes a running gate every second;
//! after an approval round trip, its query API shows the counters moved (issue #36).
//!
//! Without `prometheus` on the PATH the test says so in one line and passes, unless
//! `APPROVAL_TEST_REQUIRE_ALL` is set (as `.ci/run` does, after installing it): then
//! a missing Prometheus is a failure ([`approval_e2e::require`]). The test installs
//! nothing.

use approval_e2e::{McpClient, Server, ServerOptions, World};
use serde_json::{json, Value};
use std::ffi::OsString;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NOTE_POLICY: &str = r#"
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

/// Kills the Prometheus it started when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `/api/v1/query?query=QUERY`: the first sample's value, if any.
async fn query(prom: &str, q: &str) -> anyhow::Result<Option<f64>> {
    let encoded: String = q
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    let v: Value = reqwest::Client::new()
        .get(format!("{prom}/api/v1/query?query={encoded}"))
        .send()
        .await?
        .json()
        .await?;
    Ok(v.pointer("/data/result/0/value/1")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok()))
}

/// Polls `q` until it equals `want` (60 s at most).
async fn until(prom: &str, q: &str, want: f64, log: &std::path::Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    while Instant::now() < deadline {
        last = query(prom, q).await.ok().flatten();
        if last == Some(want) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    anyhow::bail!(
        "Prometheus says {q} = {last:?}, not {want}; its log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    )
}

#[tokio::test]
async fn a_real_prometheus_sees_the_round_trip() -> anyhow::Result<()> {
    let Some(bin) = approval_e2e::require(
        "prometheus",
        "to scrape the gate's /metrics",
        "apt-get install prometheus",
    ) else {
        return Ok(());
    };
    let world = World::new(&["alice"])?;
    world.write_policy("note.write.toml", NOTE_POLICY)?;
    let server = Server::start_full(
        &ServerOptions {
            data: world.data.clone(),
            policies: world.policies.clone(),
            keys: world.keys.clone(),
            agents: None,
        },
        &[],
        &[OsString::from("--metrics-listen"), "127.0.0.1:0".into()],
        &[],
    )?;
    let metrics = server.metrics_url.clone().expect("a Metrics: line");
    let target = metrics
        .strip_prefix("http://")
        .and_then(|t| t.strip_suffix("/metrics"))
        .expect("http://HOST:PORT/metrics");

    let dir = tempfile::tempdir()?;
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: approval\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )?;
    let port = free_port()?;
    let log = dir.path().join("prometheus.log");
    let prom = Killed(
        Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?,
    );
    let url = format!("http://127.0.0.1:{port}");
    until(&url, "up{job=\"approval\"}", 1.0, &log).await?;

    let mcp = server.mcp().await?;
    let prep = mcp
        .prepare("note.write", json!({"text": "scraped"}), "a note")
        .await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    until(&url, "approval_pending_proposals", 1.0, &log).await?;
    world.signer("alice", &server).approve(&id).await?;
    mcp.execute(&id, &hash).await?.expect("SUCCEEDED", false);

    for (q, want) in [
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
        ("approval_pending_proposals", 0.0),
        (
            "sum(approval_http_requests_total{route=\"/v1/proposals/{id}/decisions\"})",
            1.0,
        ),
        ("approval_fail_stop", 0.0),
    ] {
        until(&url, q, want, &log).await?;
    }
    drop(prom);
    Ok(())
}
