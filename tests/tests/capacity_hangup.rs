//! An agent's writes stay on its budget after its client hangs up (`capacity::Held`),
//! end to end, on both `/mcp` paths.
//!
//! A tool call that writes runs to its end on a task of its own, so a client that
//! hangs up cannot cut it between two steps. Before `capacity::Held`, the request's
//! charge came back the moment the client left, while its write still waited in the
//! store's queue: an agent that sent writes and hung up at once queued work without
//! bound ahead of an approver's revoke, and its budget bounded nothing.
//!
//! The attack, against the real binary on PostgreSQL: a transaction of the test's own
//! holds the audit head's row lock, which every write takes, so the agent's writes
//! wait. The agent opens as many connections as one identity may keep busy, sends a
//! prepare on each and hangs up. The budget must still count them: another request of
//! the agent's is refused with 429 `LIMIT_EXCEEDED` until they end. Then the lock goes,
//! every hung-up write commits, and the agent is served again.
//!
//! The two variants cover the two places a write's task keeps the charge: the direct
//! path (`http/direct.rs`, plain legacy calls) and rmcp's (`mcp.rs`, `call_tool`).
//! Checked by hand when the test was written (2026-12-07), each on a debug build:
//! without the listener's `Held` both variants fail; without `http/direct.rs`'s clone
//! the direct variant fails (the probe after the hang-up was served, 200). Without
//! `mcp.rs`'s clone the rmcp variant still passes: rmcp's request context carries the
//! request's parts, and with them their `Held`, to the end of the call, which the
//! clone there only makes explicit.

use approval_e2e::pg::FreshDb;
use approval_e2e::World;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connections one identity may keep busy (`capacity::MAX_BUSY_CONNECTIONS`).
const MAX_BUSY_CONNECTIONS: usize = 128;

/// One variant at a time: each fills a budget against a clock (the store's 10 s
/// time-out), and two servers in debug builds at once slow each other down.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Writers beyond the budget (see `the_agent_hangs_up_on_waiting_writes`).
const EXTRA_WRITERS: usize = 16;

/// The server's `host:port` from its `/mcp` URL.
fn authority(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// One HTTP/1.1 `tools/call` to `/mcp`. With `via_rmcp`, its `Accept` carries a
/// parameter, which the direct path leaves to rmcp (`DirectCalls::headers_pass`).
fn mcp_call(
    host: &str,
    id: u64,
    tool: &str,
    arguments: serde_json::Value,
    via_rmcp: bool,
) -> String {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": tool, "arguments": arguments}})
    .to_string();
    let accept = if via_rmcp {
        "application/json;q=1, text/event-stream"
    } else {
        "application/json, text/event-stream"
    };
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: {accept}\r\nMCP-Protocol-Version: {}\r\nContent-Length: {}\r\n\r\n{body}",
        approval_e2e::PROTOCOL_VERSION,
        body.len()
    )
}

/// The agent's `approval_status` of an id it does not have: answered at once.
fn status(host: &str, id: u64, via_rmcp: bool) -> String {
    mcp_call(
        host,
        id,
        "approval_status",
        json!({"proposal_id": "p_unknown"}),
        via_rmcp,
    )
}

/// Sends one request on a new connection and reads until the server closes it or
/// 3 s pass: the answer's status code and the text read.
async fn probe(host: &str, request: &str) -> anyhow::Result<(u16, String)> {
    let mut s = TcpStream::connect(host).await?;
    s.write_all(request.as_bytes()).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut chunk)).await {
            Ok(Ok(0)) | Err(_) => break,
            Ok(Ok(n)) => {
                buf.extend_from_slice(&chunk[..n]);
                // One whole answer is enough: its head and a body of the length it gives.
                let text = String::from_utf8_lossy(&buf);
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let len = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(usize::MAX);
                    if body.len() >= len {
                        break;
                    }
                }
            }
            Ok(Err(e)) => return Err(e.into()),
        }
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no HTTP answer to the probe: {text:?}"))?;
    Ok((status, text))
}

/// With every write held by the test's lock: fills the agent's budget with prepares,
/// hangs up on all of them, and checks that its next request is still refused.
async fn the_agent_hangs_up_on_waiting_writes(
    host: &str,
    via_rmcp: bool,
    held_since: Instant,
) -> anyhow::Result<()> {
    // More writers than the budget: a probe below may take a slot for the moment it
    // is served, and the writer read then is refused; the others fill the budget.
    let mut writers = Vec::with_capacity(MAX_BUSY_CONNECTIONS + EXTRA_WRITERS);
    for i in 0..MAX_BUSY_CONNECTIONS + EXTRA_WRITERS {
        let mut s = TcpStream::connect(host).await?;
        let prepare = mcp_call(
            host,
            i as u64,
            "approval_prepare",
            json!({"kind": "note.write", "payload": {"text": format!("hung up {i}")}, "summary": ""}),
            via_rmcp,
        );
        s.write_all(prepare.as_bytes()).await?;
        writers.push(s);
    }
    // The budget fills as the server reads the writes: then the agent's next request
    // is refused.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let deadline = Instant::now() + Duration::from_secs(4);
    loop {
        let (code, text) = probe(host, &status(host, 2, via_rmcp)).await?;
        if refused_as_busy(code, &text) {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "with {MAX_BUSY_CONNECTIONS} writes sent and waiting, the agent's next request was still served: {text}"
        );

        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every write's head has been read; let each reach its task, then hang up on all.
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(writers);
    // The server sees each end of stream at once; give it time to act on them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (code, text) = probe(host, &status(host, 3, via_rmcp)).await?;
    anyhow::ensure!(
        refused_as_busy(code, &text),
        "after the agent hung up on {MAX_BUSY_CONNECTIONS} waiting writes, its next request \
         must still be refused (the writes still hold its budget), got: {text}"
    );
    // The store's own time-out (10 s) must not have ended the writes first: then
    // they were still waiting when the probe was refused.
    anyhow::ensure!(
        held_since.elapsed() < Duration::from_secs(8),
        "the lock was held {:?}, too close to the store's time-out for this test to mean anything",
        held_since.elapsed()
    );
    Ok(())
}

/// A 429 `LIMIT_EXCEEDED` for the agent's busy connections.
fn refused_as_busy(code: u16, text: &str) -> bool {
    code == 429 && text.contains("LIMIT_EXCEEDED") && text.contains("connections busy")
}

async fn hung_up_writes_stay_on_the_budget(via_rmcp: bool) -> anyhow::Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(db) = FreshDb::new()? else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("note.write.toml", approval_e2e::NOTE_POLICY_ALICE_AND_BOB)?;
    let server = db.start(&w, "a", &[])?;
    let host = authority(&server.mcp_url);
    let (code, text) = probe(&host, &status(&host, 1, via_rmcp)).await?;
    anyhow::ensure!(code == 200, "a status before the attack: {text}");

    // Every write takes the audit head's row lock: while this transaction holds it,
    // the agent's writes wait in the store.
    let (holder, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls).await?;
    let conn = tokio::spawn(conn);
    holder
        .batch_execute("BEGIN; SELECT seq FROM audit_head FOR UPDATE")
        .await?;
    let held_since = Instant::now();
    let attack = the_agent_hangs_up_on_waiting_writes(&host, via_rmcp, held_since).await;
    // The lock goes on every path, before anything can wait on it (dropping the
    // schema at the end of the test does).
    let _ = holder.batch_execute("ROLLBACK").await;
    drop(holder);
    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
    attack?;

    // Every hung-up write commits, and then the agent is served again.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, text) = probe(&host, &status(&host, 4, via_rmcp)).await?;
        if code == 200 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the agent's budget never came back after its writes ended: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (reader, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls).await?;
    let conn = tokio::spawn(conn);
    let n: i64 = reader
        .query_one("SELECT count(*) FROM records", &[])
        .await?
        .get(0);
    conn.abort();
    anyhow::ensure!(
        n == MAX_BUSY_CONNECTIONS as i64,
        "{n} records stored, expected the {MAX_BUSY_CONNECTIONS} hung-up prepares the budget \
         admitted (the {EXTRA_WRITERS} over it were refused at the door)"
    );
    Ok(())
}

#[tokio::test]
async fn hung_up_writes_on_the_direct_path_stay_on_the_agents_budget() -> anyhow::Result<()> {
    hung_up_writes_stay_on_the_budget(false).await
}

#[tokio::test]
async fn hung_up_writes_through_rmcp_stay_on_the_agents_budget() -> anyhow::Result<()> {
    hung_up_writes_stay_on_the_budget(true).await
}
