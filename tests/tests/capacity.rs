//! Issue #31, item 1: the agent cannot crowd out a revoke by holding connections.
//!
//! The review held all 1,024 connection slots with pipelined long polls (and, on a
//! separate approver listener, with paced forgeries in carol's name); bob's revoke
//! waited in the kernel's backlog until the agent's queued `approval_execute` had
//! run. These tests attack the real binary the same way, over raw HTTP/1.1 sockets
//! on loopback (pipelining is what reqwest never does), with every loop bounded in
//! count and time.

use approval_core::keyring::SecretKey;
use approval_core::{Decision, Sha256Hex, SignedDecision};
use approval_e2e::{McpClient, ToolResult, World};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const POLICY: &str = r#"
kind = "note.write"
description = "Write a note"
quorum = 2
approvers = ["alice", "bob", "carol"]
ttl = "30m"
execute_within = "10m"
[executor]
type = "note"
"#;

/// Connections the agent opens, as in the review.
const AGENT_CONNECTIONS: usize = 1024;
/// Connections forging decisions: more than a listener's 1,024 slots, so that some
/// wait in the kernel's backlog ahead of bob, as in the review.
const FORGING_CONNECTIONS: usize = AGENT_CONNECTIONS + 100;
/// Requests each of them pipelines.
const PIPELINED: usize = 12;
/// What a genuine approver or a third party may wait, however busy the agent keeps us.
const PROMPT: Duration = Duration::from_secs(2);
/// Forged decisions each forging connection pipelines: paced to 4 a second, as before
/// issue #31, they would hold its slot for 20 s.
const FORGERIES_PIPELINED: usize = 80;
/// Longest time from the start of the flood to the measurements.
const SETTLE: Duration = Duration::from_secs(10);
/// No socket of these tests lives longer than this.
/// One test of this file at a time: each floods a server with thousands of
/// connections, and two floods at once on a 2-core machine measure the machine, not
/// the server (a parallel run saw `/healthz` take 4.3 s under two floods).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const LIFETIME: Duration = Duration::from_secs(45);

/// Raises this process's soft limit of open files (inherited by the server it
/// starts) to `want`, or as far as the hard limit allows; fails when that is short.
fn raise_fd_limit(want: u64) -> anyhow::Result<()> {
    let out = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &std::process::id().to_string(),
            "--nofile",
            "--output=SOFT,HARD",
            "--noheadings",
        ])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut it = text.split_whitespace();
    let parse = |s: Option<&str>| -> u64 {
        match s {
            Some("unlimited") => u64::MAX,
            Some(n) => n.parse().unwrap_or(0),
            None => 0,
        }
    };
    let (soft, hard) = (parse(it.next()), parse(it.next()));
    if soft >= want {
        return Ok(());
    }
    anyhow::ensure!(
        hard >= want,
        "these tests need {want} open files, the hard limit is {hard} (prlimit said {text:?})"
    );
    let st = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &std::process::id().to_string(),
            &format!("--nofile={want}:"),
        ])
        .status()?;
    anyhow::ensure!(
        st.success(),
        "prlimit could not raise the soft limit to {want}"
    );
    Ok(())
}

/// `host:port` of an `http://host:port[/...]` URL.
fn authority(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// One HTTP/1.1 `tools/call` to `/mcp`, kept alive (for pipelining).
fn mcp_call(host: &str, id: u64, tool: &str, arguments: Value) -> String {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": tool, "arguments": arguments}})
    .to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: {}\r\nContent-Length: {}\r\n\r\n{body}",
        approval_e2e::PROTOCOL_VERSION,
        body.len()
    )
}

/// One HTTP/1.1 decision POST, kept alive.
fn decision_post(host: &str, id: &str, body: &Value) -> String {
    let body = body.to_string();
    format!(
        "POST /v1/proposals/{id}/decisions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Reads one HTTP/1.1 response (Content-Length or chunked): its status and body.
/// `None` at a clean end of stream before a status line.
async fn read_response(r: &mut BufReader<TcpStream>) -> anyhow::Result<Option<(u16, String)>> {
    let mut line = String::new();
    if r.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no status line in {line:?}"))?;
    let (mut length, mut chunked) = (0usize, false);
    loop {
        line.clear();
        anyhow::ensure!(
            r.read_line(&mut line).await? > 0,
            "end of stream in headers"
        );
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap_or((l, ""));
        if k.eq_ignore_ascii_case("content-length") {
            length = v.trim().parse()?;
        } else if k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked") {
            chunked = true;
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line).await?;
            let n = usize::from_str_radix(line.trim(), 16)?;
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        body.resize(length, 0);
        r.read_exact(&mut body).await?;
    }
    Ok(Some((status, String::from_utf8_lossy(&body).into_owned())))
}

/// A decision signed with `key`, as JSON.
fn signed(key: &SecretKey, decision: Decision, hash: &str) -> anyhow::Result<Value> {
    let hash = Sha256Hex::parse(hash).map_err(|e| anyhow::anyhow!("{e}"))?;
    let d = SignedDecision::sign(&key.key, key.name.clone(), decision, &hash, "")
        .map_err(|e| anyhow::anyhow!("cannot sign: {e}"))?;
    Ok(serde_json::to_value(d)?)
}

/// A client that opens a new connection for every request, as a third party or a
/// fresh `signer-cli` run would, with a time-out of [`LIFETIME`].
fn fresh_client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(LIFETIME)
        .build()?)
}

/// A forged decision in carol's name on `id` (an all-zero signature).
fn forged(decision: &str) -> Value {
    use base64::Engine;
    let zeros = base64::engine::general_purpose::STANDARD.encode([0u8; 64]);
    json!({"approver": "carol", "decision": decision, "reason": "", "signature": zeros})
}

/// `/healthz`, then `decision` posted on proposal `id`, each on a new connection, timed
/// from a thread and runtime of their own so that the flood's tasks in this process
/// do not delay them: (health status, its time, decision status, body, its time).
async fn measure(
    api_url: &str,
    id: &str,
    decision: Value,
) -> anyhow::Result<(u16, Duration, u16, String, Duration)> {
    let api_url = api_url.to_owned();
    let decisions = format!("{api_url}/v1/proposals/{id}/decisions");
    let measured = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let client = fresh_client()?;
            let t = Instant::now();
            let health = client.get(format!("{api_url}/healthz")).send().await;
            let health_took = t.elapsed();
            let health_status = match health {
                Ok(r) => r.status().as_u16(),
                Err(e) => {
                    eprintln!("/healthz: {e}");
                    0
                }
            };
            let t = Instant::now();
            let answer = client.post(decisions).json(&decision).send().await;
            let took = t.elapsed();
            let (status, body) = match answer {
                Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
                Err(e) => (0, e.to_string()),
            };
            Ok::<_, anyhow::Error>((health_status, health_took, status, body, took))
        })
    });
    tokio::task::spawn_blocking(move || {
        measured
            .join()
            .map_err(|_| anyhow::anyhow!("the measuring thread panicked"))?
    })
    .await?
}

/// What the agent's flood saw.
#[derive(Default)]
struct Seen {
    /// Agent connections whose first answer was 429 `LIMIT_EXCEEDED`.
    agent_refused: AtomicUsize,
    /// Agent long polls answered at once because it already held its 32 waits
    /// (`long_poll::MAX_LONG_POLLS_PER_AGENT`).
    agent_unheld: AtomicUsize,
    /// Forging connections opened, and the most answers any one of them got.
    forging_connections: AtomicUsize,
    most_forgery_answers: AtomicUsize,
    /// Forging connections the server has closed.
    forgers_closed: AtomicUsize,
}

/// The review's attack, then bob's revoke: see the two tests below.
async fn revoke_under_a_connection_flood(separate_approver_listener: bool) -> anyhow::Result<()> {
    raise_fd_limit(8192)?;
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy("note.write.toml", POLICY)?;
    let server = if separate_approver_listener {
        approval_e2e::Server::start_full(
            &approval_e2e::ServerOptions {
                data: w.data.clone(),
                policies: w.policies.clone(),
                keys: w.keys.clone(),
                agents: None,
            },
            &[],
            &["--approver-listen".into(), "127.0.0.1:0".into()],
            &[],
        )?
    } else {
        w.start()?
    };
    anyhow::ensure!(
        (authority(&server.mcp_url) != authority(&server.api_url)) == separate_approver_listener,
        "listeners: {} and {}",
        server.mcp_url,
        server.api_url
    );
    let mcp = server.mcp().await?;
    // A: approved, the one the agent wants to run. B: pending, what it long-polls.
    let a = mcp
        .prepare("note.write", json!({"text": "run me"}), "")
        .await?;
    let (a_id, a_hash) = (a.proposal_id(), a.preview_sha256());
    let b = mcp
        .prepare("note.write", json!({"text": "poll me"}), "")
        .await?;
    let b_id = b.proposal_id();
    for who in ["alice", "bob"] {
        let (status, v) = server
            .post_decision(&w.secret_key(who)?, &a_id, &a_hash, Decision::Approve, "")
            .await?;
        anyhow::ensure!(status == 200, "{who} approves: {v}");
    }
    mcp.wait_status(&a_id, "APPROVED", approval_e2e::STEP_TIMEOUT)
        .await?;
    drop(mcp);

    // The same two requests without the flood, for scale (carol approves B).
    let b_hash = b.preview_sha256();
    let carol = signed(&w.secret_key("carol")?, Decision::Approve, &b_hash)?;
    let (hs, ht, rs, rb, rt) = measure(&server.api_url, &b_id, carol).await?;
    anyhow::ensure!(hs == 200 && rs == 200, "before the flood: {hs}, {rs} {rb}");
    eprintln!("without the flood: /healthz in {ht:?}, a decision in {rt:?}");

    let (mcp_host, api_host) = (authority(&server.mcp_url), authority(&server.api_url));
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Seen::default());
    let started = Instant::now();

    // The agent's first connection: a 20 s poll, then the execute queued behind it.
    let mut first = BufReader::new(TcpStream::connect(&mcp_host).await?);
    let queued = format!(
        "{}{}",
        mcp_call(
            &mcp_host,
            1,
            "approval_status",
            json!({"proposal_id": b_id, "wait_seconds": 20})
        ),
        mcp_call(
            &mcp_host,
            2,
            "approval_execute",
            json!({"proposal_id": a_id, "preview_sha256": a_hash})
        )
    );
    first.get_mut().write_all(queued.as_bytes()).await?;
    let execute = tokio::spawn(async move {
        let poll = tokio::time::timeout(LIFETIME, read_response(&mut first)).await??;
        let exec = tokio::time::timeout(LIFETIME, read_response(&mut first)).await??;
        Ok::<_, anyhow::Error>((poll, exec))
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut flood = tokio::task::JoinSet::new();
    // The rest of the agent's connections, each pipelining 30 s long polls.
    let polls: String = (0..PIPELINED)
        .map(|i| {
            mcp_call(
                &mcp_host,
                100 + i as u64,
                "approval_status",
                json!({"proposal_id": b_id, "wait_seconds": 30}),
            )
        })
        .collect();
    for _ in 1..AGENT_CONNECTIONS {
        let (host, polls, stop, seen) =
            (mcp_host.clone(), polls.clone(), stop.clone(), seen.clone());
        flood.spawn(async move {
            let until = tokio::time::Instant::now() + LIFETIME;
            let Ok(Ok(s)) = tokio::time::timeout_at(until, TcpStream::connect(&host)).await else {
                return;
            };
            let mut s = BufReader::new(s);
            if s.get_mut().write_all(polls.as_bytes()).await.is_err() {
                return;
            }
            // Holds the connection until the test is done, noting the first answer.
            let mut firsts = true;
            while !stop.load(Ordering::SeqCst) {
                let next = tokio::time::timeout(Duration::from_millis(500), read_response(&mut s));
                match tokio::time::timeout_at(until, next).await {
                    Ok(Ok(Ok(Some((status, body))))) => {
                        if firsts && status == 429 && body.contains("LIMIT_EXCEEDED") {
                            seen.agent_refused.fetch_add(1, Ordering::SeqCst);
                        }
                        if body.contains("Answered without waiting") {
                            seen.agent_unheld.fetch_add(1, Ordering::SeqCst);
                        }
                        firsts = false;
                    }
                    Ok(Ok(_)) | Err(_) => return,
                    Ok(Err(_)) => {} // nothing yet: look at `stop` again
                }
            }
        });
    }
    // Forged decisions in carol's name on FORGING_CONNECTIONS connections, each
    // pipelining FORGERIES_PIPELINED of them (paced to 4 a second, such connections
    // held a listener for 37 s in the review). One round: what is measured is whether
    // they can hold the listener, not how fast a loaded debug build verifies.
    let forgeries: String = (0..FORGERIES_PIPELINED)
        .map(|_| decision_post(&api_host, &a_id, &forged("reject")))
        .collect();
    for _ in 0..FORGING_CONNECTIONS {
        let (host, forgeries, stop, seen) = (
            api_host.clone(),
            forgeries.clone(),
            stop.clone(),
            seen.clone(),
        );
        flood.spawn(async move {
            let until = tokio::time::Instant::now() + LIFETIME;
            {
                let Ok(Ok(s)) = tokio::time::timeout_at(until, TcpStream::connect(&host)).await
                else {
                    return;
                };
                seen.forging_connections.fetch_add(1, Ordering::SeqCst);
                let mut s = BufReader::new(s);
                if s.get_mut().write_all(forgeries.as_bytes()).await.is_err() {
                    return;
                }
                let mut answers = 0;
                while !stop.load(Ordering::SeqCst) {
                    let next =
                        tokio::time::timeout(Duration::from_millis(500), read_response(&mut s));
                    match tokio::time::timeout_at(until, next).await {
                        Ok(Ok(Ok(Some(_)))) => answers += 1,
                        Ok(Ok(_)) | Err(_) => break,
                        Ok(Err(_)) => {}
                    }
                }
                seen.most_forgery_answers
                    .fetch_max(answers, Ordering::SeqCst);
                seen.forgers_closed.fetch_add(1, Ordering::SeqCst);
            }
        });
    }
    // Let the flood take hold: until the server has dealt with the first burst of
    // forging connections (closed them all), at most SETTLE. Before issue #31 they held
    // their slots for 20 s, so this waited the whole SETTLE and measured with the
    // listener full. What is measured is whether the agent can hold capacity, not how
    // fast a debug build on a loaded machine verifies 3,072 forged signatures.
    let settle = tokio::time::Instant::now() + SETTLE;
    while seen.forgers_closed.load(Ordering::SeqCst) < FORGING_CONNECTIONS
        && tokio::time::Instant::now() < settle
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    eprintln!(
        "{} of {FORGING_CONNECTIONS} forging connections closed by the server {:?} after the flood began",
        seen.forgers_closed.load(Ordering::SeqCst),
        started.elapsed()
    );

    // A third party's /healthz, and bob's revoke, each on a new connection.
    let revoke = signed(&w.secret_key("bob")?, Decision::Revoke, &a_hash)?;
    let (health_status, health_took, revoke_status, revoke_body, revoke_took) =
        measure(&server.api_url, &a_id, revoke).await?;
    eprintln!(
        "under the flood ({:?} after it began): /healthz {health_status} in {health_took:?}; bob's revoke {revoke_status} in {revoke_took:?}: {revoke_body}",
        started.elapsed()
    );

    // The agent's execute, queued behind its 20 s poll.
    let (poll, exec) = execute.await??;
    stop.store(true, Ordering::SeqCst);
    while flood.join_next().await.is_some() {}
    eprintln!(
        "agent connections refused at once: {}; agent polls answered without waiting: {}; \
         forging connections opened: {}, most answers on one: {}",
        seen.agent_refused.load(Ordering::SeqCst),
        seen.agent_unheld.load(Ordering::SeqCst),
        seen.forging_connections.load(Ordering::SeqCst),
        seen.most_forgery_answers.load(Ordering::SeqCst),
    );
    assert_eq!(health_status, 200, "/healthz under the flood");
    assert!(health_took < PROMPT, "/healthz took {health_took:?}");
    assert_eq!(revoke_status, 200, "bob's revoke: {revoke_body}");
    assert!(revoke_body.contains("\"recorded\":true"), "{revoke_body}");
    assert!(revoke_took < PROMPT, "bob's revoke took {revoke_took:?}");
    let (poll_status, _) = poll.ok_or_else(|| anyhow::anyhow!("no answer to the poll"))?;
    assert_eq!(poll_status, 200, "the agent's first connection is served");
    let (exec_status, exec_body) =
        exec.ok_or_else(|| anyhow::anyhow!("no answer to the queued execute"))?;
    assert_eq!(exec_status, 200, "{exec_body}");
    let exec: Value = serde_json::from_str(&exec_body)?;
    ToolResult::from_response(&exec)?.expect("REVOKED", true);
    // The flood was really refused, not merely outlasted: its connections over the
    // agent's budget got 429, or its polls over the agent's 32 waits were answered at
    // once (which one depends on which the server reaches first).
    assert!(
        seen.agent_refused.load(Ordering::SeqCst) + seen.agent_unheld.load(Ordering::SeqCst) > 0,
        "no agent connection was refused and every poll was held"
    );
    assert!(
        seen.most_forgery_answers.load(Ordering::SeqCst) <= 3,
        "a forging connection was answered {} times before it was closed",
        seen.most_forgery_answers.load(Ordering::SeqCst)
    );
    Ok(())
}

/// Issue #31, item 1, on one listener: the agent's 1,024 connections of pipelined
/// long polls and forged decisions leave room for `/healthz` and bob's revoke, and the
/// execute it queued behind a 20 s poll is refused REVOKED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_held_connections_do_not_delay_a_revoke_until_the_agent_has_executed(
) -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    revoke_under_a_connection_flood(false).await
}

/// The same with `--approver-listen`: the forgeries go to the approver listener,
/// where bob's revoke and `/healthz` go too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_decisions_holding_the_approver_listener_do_not_delay_a_revoke() -> anyhow::Result<()>
{
    let _one = ONE_AT_A_TIME.lock().await;
    revoke_under_a_connection_flood(true).await
}

/// A connection that pipelines forged decisions is answered for its budget of
/// failed signatures (3), then closed; it is no longer paced forever.
#[tokio::test]
async fn a_connection_over_its_forgery_budget_is_closed_not_paced() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy("note.write.toml", POLICY)?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let p = mcp.prepare("note.write", json!({"text": "x"}), "").await?;
    let host = authority(&server.api_url);
    let forgeries: String = (0..PIPELINED)
        .map(|_| decision_post(&host, &p.proposal_id(), &forged("reject")))
        .collect();
    let mut s = BufReader::new(TcpStream::connect(&host).await?);
    s.get_mut().write_all(forgeries.as_bytes()).await?;
    let t = Instant::now();
    let mut answers = Vec::new();
    while let Some(r) = tokio::time::timeout(PROMPT, read_response(&mut s)).await?? {
        answers.push(r);
    }
    let took = t.elapsed();
    assert_eq!(answers.len(), 3, "answers before the close: {answers:?}");
    for (status, body) in &answers {
        assert_eq!(*status, 403, "{body}");
        assert!(body.contains("INVALID_SIGNATURE"), "{body}");
    }
    assert!(took < PROMPT, "closed after {took:?}");
    // Carol's genuine veto, on a connection of her own, is recorded.
    let (status, v) = server
        .post_decision(
            &w.secret_key("carol")?,
            &p.proposal_id(),
            &p.preview_sha256(),
            Decision::Reject,
            "",
        )
        .await?;
    assert_eq!(status, 200, "{v}");
    Ok(())
}

/// When the general pool is full (here: 1,024 decision bodies that never finish, which
/// no identity budget covers), a new connection lands in the approvers' reserve: the
/// agent's `/mcp`, a forged signature and a silent socket get nothing from it but a
/// refusal and a close, `/healthz` an answer and a close, and bob's genuine decision is
/// recorded at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approvers_reserve_serves_only_a_signature_that_verifies() -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    raise_fd_limit(8192)?;
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy("note.write.toml", POLICY)?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let p = mcp.prepare("note.write", json!({"text": "x"}), "").await?;
    let (id, hash) = (p.proposal_id(), p.preview_sha256());
    drop(mcp);
    let host = authority(&server.api_url);

    // Fill the general pool with decision bodies sent in part, held until the end.
    let head = format!(
        "POST /v1/proposals/{id}/decisions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
    );
    let mut holders = Vec::new();
    for _ in 0..AGENT_CONNECTIONS {
        let mut s = TcpStream::connect(&host).await?;
        s.write_all(head.as_bytes()).await?;
        holders.push(s);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    /// Sends `req` on a new connection; the first answer and whether the server then
    /// closed the connection, each within PROMPT.
    async fn probe(host: &str, req: &str) -> anyhow::Result<(Option<(u16, String)>, bool)> {
        let mut s = BufReader::new(TcpStream::connect(host).await?);
        s.get_mut().write_all(req.as_bytes()).await?;
        let first = tokio::time::timeout(PROMPT, read_response(&mut s)).await??;
        let mut rest = Vec::new();
        let closed = matches!(
            tokio::time::timeout(PROMPT, s.read_to_end(&mut rest)).await,
            Ok(Ok(_))
        );
        Ok((first, closed))
    }
    let t = Instant::now();
    // `/healthz` is answered (signer-cli checks the server's identity there before it
    // signs), then the connection is closed.
    let healthz = format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let (first, closed) = probe(&host, &healthz).await?;
    let (status, body) = first.ok_or_else(|| anyhow::anyhow!("/healthz: no answer"))?;
    assert_eq!(status, 200, "{body}");
    assert!(closed, "the reserve connection of /healthz was not closed");

    let call = mcp_call(&host, 7, "approval_status", json!({"proposal_id": id}));
    let (first, closed) = probe(&host, &call).await?;
    let (status, body) = first.ok_or_else(|| anyhow::anyhow!("/mcp: no answer"))?;
    assert_eq!(status, 503, "the agent on the reserve: {body}");
    assert!(body.contains("reserve"), "{body}");
    let v: Value = serde_json::from_str(&body)?;
    assert_eq!(v["error"]["data"]["code"], "LIMIT_EXCEEDED", "{v}");
    assert!(closed, "the agent's reserve connection was not closed");

    let forgery = decision_post(&host, &id, &forged("reject"));
    let (first, closed) = probe(&host, &format!("{forgery}{forgery}")).await?;
    let (status, body) = first.ok_or_else(|| anyhow::anyhow!("forgery: no answer"))?;
    assert_eq!(status, 403, "{body}");
    assert!(
        closed,
        "a reserve connection with a forged signature was not closed"
    );

    let mut silent = TcpStream::connect(&host).await?;
    let mut buf = [0u8; 64];
    let t_silent = Instant::now();
    let n = tokio::time::timeout(PROMPT, silent.read(&mut buf)).await??;
    assert_eq!(n, 0, "a silent reserve connection got bytes");
    eprintln!(
        "silent reserve connection closed after {:?}",
        t_silent.elapsed()
    );

    let genuine = decision_post(
        &host,
        &id,
        &signed(&w.secret_key("bob")?, Decision::Approve, &hash)?,
    );
    let t_bob = Instant::now();
    let (first, _) = probe(&host, &genuine).await?;
    let took = t_bob.elapsed();
    let (status, body) = first.ok_or_else(|| anyhow::anyhow!("bob: no answer"))?;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"recorded\":true"), "{body}");
    assert!(took < PROMPT, "bob's approval took {took:?}");
    eprintln!(
        "every probe answered within {:?} of the pool being full",
        t.elapsed()
    );
    drop(holders);
    Ok(())
}

/// Queued work has a bound: a connection that pipelines more than 32 requests gets 32
/// answers, the last with `Connection: close`, and nothing more is read from it.
#[tokio::test]
async fn pipelining_more_than_32_requests_on_one_connection_gets_32_answers_then_a_close(
) -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy("note.write.toml", POLICY)?;
    let server = w.start()?;
    let host = authority(&server.api_url);
    let one = format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let mut s = BufReader::new(TcpStream::connect(&host).await?);
    s.get_mut().write_all(one.repeat(40).as_bytes()).await?;
    let mut answers = 0;
    while let Some((status, body)) = tokio::time::timeout(PROMPT, read_response(&mut s)).await?? {
        assert_eq!(status, 200, "{body}");
        answers += 1;
    }
    assert_eq!(
        answers, 32,
        "answers on one connection before it was closed"
    );
    Ok(())
}
