//! What `approval_execute` really does with the webhook and command executors:
//! one request (with `Idempotency-Key` and a receipt the receiver can verify), the
//! payload on stdin, and FAILED / OUTCOME_UNKNOWN where the design says so. Never a
//! second attempt.

use approval_e2e::{McpClient, Server, World};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
struct Seen {
    head: String,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
}

/// A tiny HTTP receiver on 127.0.0.1:0 that records each request and answers
/// `status` (or never answers when `status` is 0).
async fn receiver(status: u16) -> anyhow::Result<(String, Arc<Mutex<Vec<Seen>>>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                let (head, need) = loop {
                    let Ok(n) = s.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        let len = head
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.trim()
                                    .eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        break (head, end + 4 + len);
                    }
                };
                while buf.len() < need {
                    let Ok(n) = s.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let body = String::from_utf8_lossy(&buf[head.len() + 4..]).into_owned();
                if let Ok(mut l) = log.lock() {
                    l.push(Seen { head, body });
                }
                if status == 0 {
                    // Took the request, never answers: the sender cannot know what happened.
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    return;
                }
                let text = format!("receiver says {status}");
                let resp = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    Ok((url, seen))
}

fn webhook_policy(url: &str, timeout: &str) -> String {
    format!(
        r#"
kind = "email.send"
description = "Send through the relay"
quorum = 2
approvers = ["alice", "bob"]
ttl = "30m"
execute_within = "10m"
[executor]
type = "webhook"
url = "{url}"
timeout = "{timeout}"
[executor.headers]
X-Team = "ops"
"#
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
    let prep = mcp.prepare(kind, payload, "executor test").await?;
    prep.expect("PENDING_QUORUM", false);
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    w.signer("alice", server).approve(&id).await?;
    w.signer("bob", server).approve(&id).await?;
    mcp.wait_status(&id, "APPROVED", Duration::from_secs(5))
        .await?;
    Ok((id, hash))
}

#[tokio::test]
async fn webhook_posts_once_with_a_verifiable_receipt() -> anyhow::Result<()> {
    let (url, seen) = receiver(200).await?;
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("email.send.toml", &webhook_policy(&url, "5s"))?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let payload = json!({"to": "ops@example.com", "subject": "hi", "body": "two humans said yes"});
    let (id, hash) = approved(&w, &server, &mcp, "email.send", payload.clone()).await?;

    let done = mcp.execute(&id, &hash).await?;
    done.expect("SUCCEEDED", false);
    assert!(
        done.structured["result"]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("200"),
        "{}",
        done.structured
    );
    mcp.execute(&id, &hash)
        .await?
        .expect("ALREADY_EXECUTED_NO_REPLAY", true);

    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(
        seen.len(),
        1,
        "the webhook must be called exactly once: {seen:?}"
    );
    let req = &seen[0];
    assert!(req.head.starts_with("POST /hook "), "{}", req.head);
    assert_eq!(req.header("idempotency-key").as_deref(), Some(id.as_str()));
    assert_eq!(req.header("x-team").as_deref(), Some("ops"));
    let body: Value = serde_json::from_str(&req.body)?;
    assert_eq!(body["payload"], payload);
    assert_eq!(body["receipt"]["preview_sha256"], json!(hash));

    // The receiver needs no trust in the server: the receipt verifies offline.
    let receipt_path = w.path().join("received-receipt.json");
    std::fs::write(&receipt_path, serde_json::to_string(&body["receipt"])?)?;
    let v = w
        .signer("alice", &server)
        .verify(&receipt_path, &w.keys)
        .await?;
    assert!(v.status.success(), "{v}");
    let receipt = approval_core::Receipt::from_json_text(&body["receipt"].to_string())?;
    let keyring = approval_core::Keyring::parse(&std::fs::read_to_string(&w.keys)?)?;
    let verified = approval_core::verify_receipt(&receipt, &keyring, None)?;
    assert_eq!(verified.preview_sha256().to_hex(), hash);
    Ok(())
}

#[tokio::test]
async fn webhook_refusal_is_failed_and_silence_is_outcome_unknown() -> anyhow::Result<()> {
    // A 500: the receiver refused, so FAILED, and never retried.
    let (url, seen) = receiver(500).await?;
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("email.send.toml", &webhook_policy(&url, "5s"))?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let (id, hash) = approved(&w, &server, &mcp, "email.send", json!({"n": 1})).await?;
    let r = mcp.execute(&id, &hash).await?;
    assert_eq!(r.status(), "FAILED", "{}", r.structured);
    assert_eq!(r.code(), "FAILED");
    assert!(!r.retry_allowed());
    mcp.execute(&id, &hash)
        .await?
        .expect("ALREADY_EXECUTED_NO_REPLAY", true);
    assert_eq!(seen.lock().map(|s| s.len()).unwrap_or(0), 1);
    drop(server);

    // Sent, then no answer within the time-out: the effect may have happened.
    let (url, seen) = receiver(0).await?;
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("email.send.toml", &webhook_policy(&url, "1s"))?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let (id, hash) = approved(&w, &server, &mcp, "email.send", json!({"n": 2})).await?;
    let r = mcp.execute(&id, &hash).await?;
    assert_eq!(r.status(), "OUTCOME_UNKNOWN", "{}", r.structured);
    assert!(!r.retry_allowed());
    mcp.execute(&id, &hash)
        .await?
        .expect("ALREADY_EXECUTED_NO_REPLAY", true);
    assert_eq!(seen.lock().map(|s| s.len()).unwrap_or(0), 1);
    let resolved = w.signer("alice", &server).resolve(&id, "failed").await?;
    assert_eq!(resolved["status"], "FAILED", "{resolved}");

    // Nothing listening at all: not sent, so FAILED, not unknown.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let w = World::new(&["alice", "bob"])?;
    w.write_policy(
        "email.send.toml",
        &webhook_policy(&format!("http://127.0.0.1:{port}/hook"), "2s"),
    )?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let (id, hash) = approved(&w, &server, &mcp, "email.send", json!({"n": 3})).await?;
    let r = mcp.execute(&id, &hash).await?;
    assert_eq!(r.status(), "FAILED", "{}", r.structured);
    Ok(())
}

#[tokio::test]
async fn command_gets_the_payload_and_the_receipt() -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob"])?;
    let out = w.path().join("stdin-copy.json");
    let receipt_copy = w.path().join("receipt-copy.json");
    let script = w.script(
        "run.sh",
        "cat > \"$1\"\ncp \"$APPROVAL_RECEIPT\" \"$2\"\necho done-stdout\n",
    )?;
    let fail = w.script("fail.sh", "echo broken >&2\nexit 3\n")?;
    w.write_policy(
        "deploy.run.toml",
        &format!(
            r#"
kind = "deploy.run"
quorum = 2
approvers = ["alice", "bob"]
[executor]
type = "command"
program = "{}"
args = ["{}", "{}"]
timeout = "20s"
"#,
            script.display(),
            out.display(),
            receipt_copy.display()
        ),
    )?;
    w.write_policy(
        "deploy.fail.toml",
        &format!(
            r#"
kind = "deploy.fail"
quorum = 2
approvers = ["alice", "bob"]
[executor]
type = "command"
program = "{}"
timeout = "20s"
"#,
            fail.display()
        ),
    )?;
    let server = w.start()?;
    let mcp = server.mcp().await?;

    let payload = json!({"tag": "v3", "unicode": "\u{e9}\u{202e}", "n": 12.5});
    let (id, hash) = approved(&w, &server, &mcp, "deploy.run", payload.clone()).await?;
    let r = mcp.execute(&id, &hash).await?;
    r.expect("SUCCEEDED", false);
    assert!(
        r.structured["result"]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("done-stdout"),
        "{}",
        r.structured
    );
    let got: Value = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
    assert_eq!(got, payload, "the program got another payload on stdin");
    let v = w
        .signer("bob", &server)
        .verify(&receipt_copy, &w.keys)
        .await?;
    assert!(v.status.success(), "APPROVAL_RECEIPT does not verify: {v}");
    assert_eq!(v.json()?["preview_sha256"], json!(hash));

    let (id, hash) = approved(&w, &server, &mcp, "deploy.fail", json!({})).await?;
    let r = mcp.execute(&id, &hash).await?;
    assert_eq!(r.status(), "FAILED", "{}", r.structured);
    assert!(
        r.structured["result"]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("broken"),
        "{}",
        r.structured
    );
    mcp.execute(&id, &hash)
        .await?
        .expect("ALREADY_EXECUTED_NO_REPLAY", true);
    Ok(())
}
