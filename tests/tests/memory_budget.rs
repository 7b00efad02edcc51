//! Issue #11 item 6: one agent must not make the server allocate hundreds of MB.
//!
//! Each test spawns the real server, resets its peak RSS (`/proc/PID/clear_refs`,
//! "5"), runs the attack, and reads the peak (`VmHWM` in `/proc/PID/status`): the
//! growth must stay under 150 MiB. Linux only (as the server's deployment is).

use approval_e2e::{poll_until, McpClient, Server, World};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::{Duration, Instant};

const MIB: u64 = 1024 * 1024;
const GROWTH_LIMIT: u64 = 150 * MIB;

/// A `kind` note policy: 2 of alice and bob, payloads up to `max_payload` bytes.
fn policy(kind: &str, max_payload: u64) -> String {
    format!(
        "kind = \"{kind}\"\ndescription = \"Write a note\"\nquorum = 2\napprovers = [\"alice\", \"bob\"]\n\
         ttl = \"30m\"\nexecute_within = \"10m\"\nmax_payload_bytes = {max_payload}\n[executor]\ntype = \"note\"\n"
    )
}

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

/// Resets the peak RSS to the current RSS and returns it.
fn reset_peak(server: &Server) -> anyhow::Result<u64> {
    std::fs::write(format!("/proc/{}/clear_refs", server.pid), "5")?;
    status_field(server.pid, "VmHWM:")
}

fn peak(server: &Server) -> anyhow::Result<u64> {
    status_field(server.pid, "VmHWM:")
}

/// An `approval_prepare` request whose payload is `[{},{},...]`, `bytes` long in all.
fn empty_objects_request(kind: &str, bytes: usize) -> String {
    let head = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"approval_prepare","arguments":{{"kind":"{kind}","summary":"","payload":["#
    );
    let tail = "]}}}";
    let n = (bytes - head.len() - tail.len()) / 3;
    let mut body = String::with_capacity(bytes);
    body.push_str(&head);
    for i in 0..n {
        if i > 0 {
            body.push(',');
        }
        body.push_str("{}");
    }
    body.push_str(tail);
    body
}

/// Posts `body` to `/mcp` `n` times at once; the HTTP statuses and bodies.
async fn post_concurrently(server: &Server, body: String, n: usize) -> Vec<(u16, String)> {
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (client, url, body) = (client.clone(), server.mcp_url.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(url)
                .header("Content-Type", "application/json")
                .header("Accept", "application/json, text/event-stream")
                .header("MCP-Protocol-Version", "2025-06-18")
                .body(body)
                .timeout(Duration::from_secs(120))
                .send()
                .await;
            match r {
                Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
                Err(e) => (0, e.to_string()),
            }
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap_or((0, "task failed".into())));
    }
    out
}

#[tokio::test]
async fn eight_concurrent_5_mib_bodies_of_empty_objects_keep_rss_growth_under_150_mib(
) -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("note.write.toml", &policy("note.write", 4 * MIB))?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    mcp.prepare("note.write", json!({"text": "warm up"}), "")
        .await?
        .expect("PENDING_QUORUM", false);
    let before = reset_peak(&server)?;

    // The attack: eight bodies just under the 5 MiB body limit, all `{}`.
    let attack = empty_objects_request("note.write", 5 * 1024 * 1024 - 1024);
    let answers = post_concurrently(&server, attack, 8).await;
    let attack_growth = peak(&server)?.saturating_sub(before);
    assert!(
        attack_growth < GROWTH_LIMIT,
        "the attack grew peak RSS by {} MiB (limit {} MiB)",
        attack_growth / MIB,
        GROWTH_LIMIT / MIB
    );
    for (status, body) in &answers {
        assert_eq!(*status, 413, "{}", &body[..body.len().min(300)]);
        let v: Value = serde_json::from_str(body)?;
        assert_eq!(v["error"]["data"]["code"], "LIMIT_EXCEEDED", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("JSON values")),
            "{v}"
        );
    }

    // Bodies under the per-request limit are admitted, but only as many at a time as
    // the shared budget allows: eight at once of 180,000 empty objects each.
    let big = empty_objects_request("note.write", 540_000);
    let answers = post_concurrently(&server, big, 8).await;
    let mut admitted = 0;
    for (status, body) in &answers {
        let v: Value = serde_json::from_str(body)
            .map_err(|e| anyhow::anyhow!("HTTP {status}: {e}: {}", &body[..body.len().min(300)]))?;
        match status {
            200 => {
                assert_eq!(
                    v["result"]["structuredContent"]["code"],
                    "PENDING_QUORUM",
                    "{}",
                    &body[..body.len().min(300)]
                );
                admitted += 1;
            }
            503 => assert_eq!(v["error"]["data"]["code"], "LIMIT_EXCEEDED", "{v}"),
            _ => panic!("HTTP {status}: {}", &body[..body.len().min(300)]),
        }
    }
    assert!(admitted >= 1, "no request under the limit was admitted");
    let growth = peak(&server)?.saturating_sub(before);
    eprintln!(
        "VmHWM growth: {} MiB after the 8 x 5 MiB attack, {} MiB after 8 admitted bodies ({admitted} admitted)",
        attack_growth / MIB,
        growth / MIB
    );
    assert!(
        growth < GROWTH_LIMIT,
        "peak RSS grew by {} MiB (limit {} MiB)",
        growth / MIB,
        GROWTH_LIMIT / MIB
    );
    // And the server still answers.
    mcp.prepare("note.write", json!({"text": "after"}), "")
        .await?
        .expect("PENDING_QUORUM", false);
    Ok(())
}

#[tokio::test]
async fn concurrent_listings_over_2000_large_pending_proposals_keep_rss_growth_under_150_mib(
) -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("note.write.toml", &policy("note.write", 64 * 1024))?;
    let server = w.start()?;
    let mcp = std::sync::Arc::new(server.mcp().await?);

    // 2,000 pending proposals of 60 KB each, 25 at a time (concurrent prepares share
    // their fsyncs).
    let started = Instant::now();
    let text = "x".repeat(60_000);
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for t in 0..25 {
        let (client, url, text) = (client.clone(), server.mcp_url.clone(), text.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..80 {
                // Written out rather than built with json!: the client's own JSON work
                // in a debug build doubled the fill time.
                let body = format!(
                    r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"approval_prepare","arguments":{{"kind":"note.write","summary":"","payload":{{"n":{},"text":"{text}"}}}}}}}}"#,
                    t * 1000 + i
                );
                let r = client
                    .post(&url)
                    .header("Content-Type", "application/json")
                    .header("Accept", "application/json, text/event-stream")
                    .header("MCP-Protocol-Version", "2025-06-18")
                    .body(body)
                    .timeout(Duration::from_secs(60))
                    .send()
                    .await?;
                let answer = r.text().await?;
                if !answer.contains(r#""code":"PENDING_QUORUM""#) {
                    anyhow::bail!("prepare: {}", &answer[..answer.len().min(300)]);
                }
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    eprintln!("filled 2000 x 60 KB in {:?}", started.elapsed());

    // The attack: four concurrent listings by the agent and four by approvers.
    let before = reset_peak(&server)?;
    let mut agent_lists = Vec::new();
    for _ in 0..4 {
        let mcp = mcp.clone();
        agent_lists.push(tokio::spawn(async move {
            mcp.call_tool("approval_list", json!({"status": "PENDING"}))
                .await
        }));
    }
    let mut approver_lists = Vec::new();
    for name in ["alice", "bob", "alice", "bob"] {
        let signer = w.signer(name, &server);
        approver_lists.push(tokio::spawn(async move {
            signer.run(&["--json", "pending"]).await
        }));
    }
    for t in agent_lists {
        let r = t.await??;
        assert_eq!(r.code(), "OK", "{}", r.structured);
        assert_eq!(
            r.structured["proposals"].as_array().map(Vec::len),
            Some(100)
        );
    }
    for t in approver_lists {
        let out = t.await??;
        assert!(out.status.success(), "{out}");
    }
    let listing_growth = peak(&server)?.saturating_sub(before);
    eprintln!(
        "VmHWM growth: {} MiB for 8 concurrent listings",
        listing_growth / MIB
    );
    assert!(
        listing_growth < GROWTH_LIMIT,
        "listings grew peak RSS by {} MiB (limit {} MiB)",
        listing_growth / MIB,
        GROWTH_LIMIT / MIB
    );

    // Cursor pagination walks all of them, once each, 100 at a time by default.
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut args = json!({"status": "PENDING"});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let r = mcp.call_tool("approval_list", args).await?;
        assert_eq!(r.code(), "OK", "{}", r.structured);
        let items = r.structured["proposals"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(items.len() <= 100);
        for it in &items {
            assert!(
                seen.insert(it["proposal_id"].as_str().unwrap_or_default().to_owned()),
                "listed twice: {it}"
            );
        }
        pages += 1;
        match r.structured["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
        assert!(pages <= 40, "pagination does not end");
    }
    assert_eq!(seen.len(), 2000);
    let bad = mcp
        .call_tool("approval_list", json!({"cursor": "not-a-cursor"}))
        .await?;
    bad.expect("INVALID_ARGUMENTS", true);

    // A reload re-checks every open proposal; it must not load them all at once.
    let before_reload = reset_peak(&server)?;
    let log_lines = server.log().lines().count();
    w.write_policy("note.write.toml", &policy("note.write", 65 * 1024))?;
    server.sighup()?;
    poll_until("the reload", Duration::from_secs(60), || async {
        Ok(server
            .log()
            .lines()
            .skip(log_lines)
            .any(|l| l.contains("configuration reloaded"))
            .then_some(()))
    })
    .await?;
    let reload_growth = peak(&server)?.saturating_sub(before_reload);
    eprintln!(
        "VmHWM growth: {} MiB for a reload voiding 2000",
        reload_growth / MIB
    );
    assert!(
        reload_growth < GROWTH_LIMIT,
        "the reload grew peak RSS by {} MiB",
        reload_growth / MIB
    );
    let voided = mcp
        .call_tool(
            "approval_list",
            json!({"status": "POLICY_CHANGED", "limit": 5}),
        )
        .await?;
    assert_eq!(
        voided.structured["proposals"].as_array().map(Vec::len),
        Some(5),
        "{}",
        voided.structured
    );
    Ok(())
}
