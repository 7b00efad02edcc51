//! What the service refuses: unknown agents, foreign origins and hosts (DNS
//! rebinding), other agents' proposals, unsigned reads, and signatures from keys
//! that the policy does not name. Every refusal leaves the proposal unchanged.

use approval_core::keyring::SecretKey;
use approval_core::{ApproverName, Decision, Sha256Hex, SignedDecision};
use approval_e2e::{Mcp, McpClient, Stdio, World};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": approval_e2e::PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "approval-e2e", "version": "0.1.0"}
    }})
}

/// One raw HTTP/1.1 POST, so that the Host header is exactly what we say.
/// Returns the status code and the body.
async fn raw_post(
    mcp_url: &str,
    host: &str,
    extra: &[(&str, &str)],
    body: &str,
) -> anyhow::Result<(u16, String)> {
    let rest = mcp_url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("not http: {mcp_url}"))?;
    let (addr, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let mut req = format!(
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await?;
    let mut resp = Vec::new();
    tokio::time::timeout(approval_e2e::STEP_TIMEOUT, s.read_to_end(&mut resp)).await??;
    let text = String::from_utf8_lossy(&resp).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no status line in {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_owned();
    Ok((code, body))
}

#[tokio::test]
async fn agent_tokens_are_required_and_name_the_requester() -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy("note.write.toml", POLICY)?;
    let agents = w.path().join("agents");
    let token = w.add_agent("ci-bot", &agents)?;
    let other_token = w.add_agent("other-bot", &agents)?;
    assert_ne!(token, other_token);
    let on_disk = std::fs::read_to_string(&agents)?;
    assert!(
        !on_disk.contains(&token),
        "the agents file holds a token, not its hash"
    );
    let server = w.start_with_agents(&agents)?;

    // No token at all.
    let http = reqwest::Client::new();
    let resp = http
        .post(&server.mcp_url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(initialize().to_string())
        .send()
        .await?;
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(
        resp.headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer")
    );
    // A wrong token, and a right token in the wrong scheme.
    for auth in [
        format!("Bearer {}x", token),
        "Bearer not-a-token".to_owned(),
        format!("Basic {token}"),
    ] {
        let resp = http
            .post(&server.mcp_url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("Authorization", &auth)
            .body(initialize().to_string())
            .send()
            .await?;
        assert_eq!(resp.status().as_u16(), 401, "Authorization: {auth}");
    }
    assert!(Mcp::connect(&server.mcp_url, None).await.is_err());

    // The right token works, and the identity is the token's, not an argument.
    let bot = Mcp::connect(&server.mcp_url, Some(&token)).await?;
    let prep = bot
        .prepare("note.write", json!({"text": "from the bot"}), "bot note")
        .await?;
    prep.expect("PENDING_QUORUM", false);
    assert_eq!(prep.structured["preview"]["requested_by"], "ci-bot");
    let id = prep.proposal_id();
    let sneaky = bot
        .call_tool(
            "approval_prepare",
            json!({"kind": "note.write", "payload": {"text": "x"}, "requested_by": "other-bot"}),
        )
        .await;
    // Refused either as a protocol fault or as an isError result; never a proposal.
    if let Ok(r) = &sneaky {
        assert!(
            r.is_error,
            "an unknown argument was accepted: {}",
            r.structured
        );
        assert!(
            r.structured.get("proposal_id").is_none(),
            "{}",
            r.structured
        );
    }
    let mine = bot.list(None).await?;
    assert_eq!(
        mine.structured["proposals"].as_array().map(Vec::len),
        Some(1),
        "{}",
        mine.structured
    );

    // Another agent cannot see, run or withdraw it.
    let other = Mcp::connect(&server.mcp_url, Some(&other_token)).await?;
    other.status(&id).await?.expect("UNKNOWN_PROPOSAL", true);
    other
        .execute(&id, &prep.preview_sha256())
        .await?
        .expect("UNKNOWN_PROPOSAL", true);
    other.withdraw(&id).await?.expect("UNKNOWN_PROPOSAL", true);
    let listed = other.list(None).await?;
    assert_eq!(
        listed.structured["proposals"],
        json!([]),
        "{}",
        listed.structured
    );
    bot.status(&id).await?.expect("PENDING_QUORUM", false);

    // The stdio bridge passes the token on.
    let stdio = Stdio::connect(&server.mcp_url, Some(&token)).await?;
    stdio.status(&id).await?.expect("PENDING_QUORUM", false);
    drop(stdio);
    assert!(Stdio::connect(&server.mcp_url, None).await.is_err());
    assert!(Stdio::connect(&server.mcp_url, Some("wrong"))
        .await
        .is_err());
    Ok(())
}

#[tokio::test]
async fn stdio_without_a_valid_token_answers_the_request_with_an_error() -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy("note.write.toml", POLICY)?;
    let agents = w.path().join("agents");
    w.add_agent("ci-bot", &agents)?;
    let server = w.start_with_agents(&agents)?;
    for token in [None, Some("wrong-token")] {
        let stdio = Stdio::spawn(&server.mcp_url, token)?;
        let mut init = initialize();
        init["id"] = json!(4242);
        stdio.send_line(&init).await?;
        let answer = stdio
            .read_line(std::time::Duration::from_secs(10))
            .await?
            .ok_or_else(|| anyhow::anyhow!("the bridge closed stdout without answering"))?;
        assert!(answer.get("error").is_some(), "token {token:?}: {answer}");
        // A stdio host matches answers by id: an error with `id: null` leaves its
        // initialize unanswered for ever.
        assert_eq!(
            answer["id"],
            json!(4242),
            "token {token:?}: the bridge's error does not answer request 4242: {answer}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn foreign_origin_and_host_are_refused() -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy("note.write.toml", POLICY)?;
    let server = w.start()?;
    let port = server
        .mcp_url
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/mcp")
        .to_owned();
    let body = initialize().to_string();
    let good_host = format!("127.0.0.1:{port}");

    let (ok, _) = raw_post(&server.mcp_url, &good_host, &[], &body).await?;
    assert_eq!(ok, 200, "a plain loopback request must work");
    let (ok, _) = raw_post(&server.mcp_url, &format!("localhost:{port}"), &[], &body).await?;
    assert_eq!(ok, 200, "Host: localhost must work");

    let (origin, text) = raw_post(
        &server.mcp_url,
        &good_host,
        &[("Origin", "http://evil.example")],
        &body,
    )
    .await?;
    assert_eq!(origin, 403, "Origin: http://evil.example answered {text}");

    let (host, text) = raw_post(&server.mcp_url, "evil.example", &[], &body).await?;
    assert_eq!(host, 403, "Host: evil.example answered {text}");
    let (host, text) =
        raw_post(&server.mcp_url, &format!("evil.example:{port}"), &[], &body).await?;
    assert_eq!(host, 403, "Host: evil.example:{port} answered {text}");

    // Nothing slipped through: no proposal was made by any refused request.
    let prep_body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "approval_prepare", "arguments": {"kind": "note.write", "payload": {"text": "rebound"}}}})
    .to_string();
    let pv = [("MCP-Protocol-Version", approval_e2e::PROTOCOL_VERSION)];
    let (code, _) = raw_post(&server.mcp_url, "evil.example", &pv, &prep_body).await?;
    assert_eq!(code, 403);
    let (code, _) = raw_post(
        &server.mcp_url,
        &good_host,
        &[pv[0], ("Origin", "http://evil.example")],
        &prep_body,
    )
    .await?;
    assert_eq!(code, 403);
    let mcp = server.mcp().await?;
    let listed = mcp.list(None).await?;
    assert_eq!(
        listed.structured["proposals"],
        json!([]),
        "{}",
        listed.structured
    );

    // The approver API's reads are signed: no signature, no data.
    let resp = reqwest::get(format!("{}/v1/proposals", server.api_url)).await?;
    assert_eq!(resp.status().as_u16(), 401);
    let err: Value = resp.json().await?;
    assert_eq!(err["code"], "UNAUTHORIZED", "{err}");
    Ok(())
}

#[tokio::test]
async fn keys_outside_the_policy_cannot_sign() -> anyhow::Result<()> {
    // dave is in the keyring but not in the policy; mallory is in neither.
    let w = World::new(&["alice", "bob", "carol", "dave"])?;
    w.keygen("mallory")?;
    w.write_policy("note.write.toml", POLICY)?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp
        .prepare("note.write", json!({"text": "guarded"}), "")
        .await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    w.signer("alice", &server).approve(&id).await?;

    let unchanged = |r: &approval_e2e::ToolResult| {
        assert_eq!(r.status(), "PENDING", "{}", r.structured);
        assert_eq!(r.approvals(), vec!["alice"], "{}", r.structured);
        assert!(r.rejections().is_empty(), "{}", r.structured);
    };

    for name in ["dave", "mallory"] {
        let signer = w.signer(name, &server);
        for args in [
            vec!["approve", id.as_str(), "--yes"],
            vec!["reject", id.as_str(), "--yes"],
        ] {
            let out = signer.run(&args).await?;
            assert!(
                !out.status.success(),
                "{name} {args:?} succeeded though {name} is not in the policy: {out}"
            );
            unchanged(&mcp.status(&id).await?);
        }
    }

    // Past signer-cli: decisions posted straight to the API are refused by the server.
    let decisions_url = format!("{}/v1/proposals/{id}/decisions", server.api_url);
    let key = |name: &str| -> anyhow::Result<SecretKey> {
        Ok(SecretKey::parse(&std::fs::read_to_string(
            w.key_file(name),
        )?)?)
    };
    let preview_hash = Sha256Hex::parse(&hash)?;
    let sign = |k: &SecretKey, as_name: &str, d: Decision| -> anyhow::Result<Value> {
        let s = SignedDecision::sign(&k.key, ApproverName::parse(as_name)?, d, &preview_hash, "")?;
        Ok(serde_json::to_value(s)?)
    };
    let http = reqwest::Client::new();
    let dave = key("dave")?;
    let mallory = key("mallory")?;
    let bob = key("bob")?;
    let mut swapped = sign(&bob, "bob", Decision::Approve)?;
    swapped["decision"] = json!("reject");
    let mut other_hash = sign(&bob, "bob", Decision::Approve)?;
    other_hash["signature"] = SignedDecision::sign(
        &bob.key,
        ApproverName::parse("bob")?,
        Decision::Approve,
        &Sha256Hex::digest(b"another proposal"),
        "",
    )
    .map(|s| serde_json::to_value(s).map(|v| v["signature"].clone()))??;
    // dave signing as dave is refused too; its exact status is checked in
    // `decision_by_a_keyring_member_outside_the_policy_is_invalid_signature`.
    let resp = http
        .post(&decisions_url)
        .json(&sign(&dave, "dave", Decision::Approve)?)
        .send()
        .await?;
    let status = resp.status();
    assert!(status.is_client_error(), "dave signs as dave: {status}");
    unchanged(&mcp.status(&id).await?);

    let cases: Vec<(&str, Value, u16)> = vec![
        (
            "dave's key signs as carol",
            sign(&dave, "carol", Decision::Approve)?,
            403,
        ),
        (
            "mallory signs as mallory",
            sign(&mallory, "mallory", Decision::Approve)?,
            403,
        ),
        ("bob's approve replayed as a reject", swapped, 403),
        ("bob's signature on another hash", other_hash, 403),
    ];
    for (what, body, want) in cases {
        let resp = http.post(&decisions_url).json(&body).send().await?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        assert_eq!(status, want, "{what}: {text}");
        let err: Value = serde_json::from_str(&text)?;
        assert_eq!(err["code"], "INVALID_SIGNATURE", "{what}: {text}");
        unchanged(&mcp.status(&id).await?);
    }
    mcp.execute(&id, &hash)
        .await?
        .expect("PENDING_QUORUM", true);

    // The real approvers still can.
    let c = w.signer("carol", &server).approve(&id).await?;
    assert_eq!(c["status"], "APPROVED", "{c}");
    mcp.execute(&id, &hash).await?.expect("SUCCEEDED", false);
    Ok(())
}

/// docs/approver-api.md: `403 INVALID_SIGNATURE` when the "approver [is] unknown or
/// not in the policy".
#[tokio::test]
async fn decision_by_a_keyring_member_outside_the_policy_is_invalid_signature() -> anyhow::Result<()>
{
    let w = World::new(&["alice", "bob", "carol", "dave"])?;
    w.write_policy("note.write.toml", POLICY)?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp
        .prepare("note.write", json!({"text": "guarded"}), "")
        .await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    let dave = SecretKey::parse(&std::fs::read_to_string(w.key_file("dave"))?)?;
    let signed = SignedDecision::sign(
        &dave.key,
        ApproverName::parse("dave")?,
        Decision::Approve,
        &Sha256Hex::parse(&hash)?,
        "",
    )?;
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/proposals/{id}/decisions", server.api_url))
        .json(&signed)
        .send()
        .await?;
    let status = resp.status().as_u16();
    let text = resp.text().await?;
    assert_eq!(mcp.status(&id).await?.approvals(), Vec::<String>::new());
    assert_eq!(
        status, 403,
        "POST /v1/proposals/{id}/decisions signed by dave (in the keyring, not in the policy): {text}"
    );
    let err: Value = serde_json::from_str(&text)?;
    assert_eq!(err["code"], "INVALID_SIGNATURE", "{text}");
    Ok(())
}

/// Issue #11, item 1. The agent learns the approvers' names from `approval_status`
/// and floods the approver API, from the same loopback address the approvers use,
/// with 1,000 forged reads and decisions in carol's name (64 zero bytes for a
/// signature). A failed-signature budget per claimed name used to lock carol out
/// (429 LIMIT_EXCEEDED on her genuine reject), so alice and bob approved and the agent
/// executed: the veto never counted. Now carol's genuine reject, sent in the middle of
/// the flood, answers within 1 s and is recorded; the proposal is REJECTED and
/// execute is refused.
#[tokio::test]
async fn forged_signatures_in_an_approvers_name_cannot_silence_their_veto() -> anyhow::Result<()> {
    use base64::Engine;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    const FORGERIES: usize = 1_000;
    const WORKERS: usize = 8;

    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy("note.write.toml", POLICY)?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp
        .prepare("note.write", json!({"text": "guarded"}), "")
        .await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    w.signer("alice", &server).approve(&id).await?;

    let zeros = base64::engine::general_purpose::STANDARD.encode([0u8; 64]);
    let forged_decision = json!({
        "approver": "carol", "decision": "reject", "reason": "", "signature": zeros,
    });
    let sent = Arc::new(AtomicUsize::new(0));
    // The flood goes on until carol has her answer (and at least FORGERIES were sent),
    // so her decision always meets it, however fast the machine.
    let carol_answered = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut flood = tokio::task::JoinSet::new();
    // Three kinds of forger: half the workers keep one connection each (paced once over
    // budget), half open a new connection for every forgery (never paced, verified at
    // once), and an HTTP/2 client keeps many streams of forged reads in flight and
    // cancels them (the attack on the earlier, address-wide queue: dropped waiters
    // pushed later turns back until a genuine veto timed out).
    let pooled = reqwest::Client::builder()
        .timeout(approval_e2e::STEP_TIMEOUT)
        .build()?;
    let fresh = reqwest::Client::builder()
        .timeout(approval_e2e::STEP_TIMEOUT)
        .pool_max_idle_per_host(0)
        .build()?;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(std::time::Duration::from_millis(100))
        .build()?;
    let cancelled = Arc::new(AtomicUsize::new(0));
    {
        let (h2, api, id, zeros, carol_answered, cancelled) = (
            h2.clone(),
            server.api_url.clone(),
            id.clone(),
            zeros.clone(),
            carol_answered.clone(),
            cancelled.clone(),
        );
        flood.spawn(async move {
            while !carol_answered.load(Ordering::SeqCst) {
                let mut burst = tokio::task::JoinSet::new();
                for _ in 0..200 {
                    let (h2, url) = (h2.clone(), format!("{api}/v1/proposals/{id}"));
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)?
                        .as_secs();
                    let auth = format!("Approval carol {now} {zeros}");
                    burst.spawn(
                        async move { h2.get(url).header("Authorization", auth).send().await },
                    );
                }
                while let Some(r) = burst.join_next().await {
                    match r? {
                        Ok(resp) => anyhow::ensure!(
                            (400..500).contains(&resp.status().as_u16()),
                            "an HTTP/2 forgery answered {}",
                            resp.status()
                        ),
                        Err(_) => {
                            cancelled.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            }
            Ok::<_, anyhow::Error>(0)
        });
    }
    for worker in 0..WORKERS {
        let (http, sent, api, id, carol_answered) = (
            if worker % 2 == 0 {
                pooled.clone()
            } else {
                fresh.clone()
            },
            sent.clone(),
            server.api_url.clone(),
            id.clone(),
            carol_answered.clone(),
        );
        let (body, zeros) = (forged_decision.clone(), zeros.clone());
        flood.spawn(async move {
            let mut refused = 0usize;
            loop {
                if sent.load(Ordering::SeqCst) >= FORGERIES && carol_answered.load(Ordering::SeqCst)
                {
                    return Ok::<_, anyhow::Error>(refused);
                }
                let n = sent.fetch_add(1, Ordering::SeqCst);
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .as_secs();
                let resp = if n % 2 == 0 {
                    http.get(format!("{api}/v1/proposals/{id}"))
                        .header("Authorization", format!("Approval carol {now} {zeros}"))
                        .send()
                        .await?
                } else {
                    http.post(format!("{api}/v1/proposals/{id}/decisions"))
                        .json(&body)
                        .send()
                        .await?
                };
                let status = resp.status().as_u16();
                anyhow::ensure!(
                    (400..500).contains(&status),
                    "forgery {n} answered {status}: {}",
                    resp.text().await?
                );
                refused += 1;
            }
        });
    }
    // Well past the old budget of 30 a minute, carol vetoes for real, mid-flood.
    approval_e2e::poll_until("200 forgeries sent", approval_e2e::STEP_TIMEOUT, || async {
        Ok((sent.load(Ordering::SeqCst) >= 200).then_some(()))
    })
    .await?;
    let carol = w.secret_key("carol")?;
    let started = std::time::Instant::now();
    let (status, v) = server
        .post_decision(&carol, &id, &hash, Decision::Reject, "not this one")
        .await?;
    let took = started.elapsed();
    carol_answered.store(true, Ordering::SeqCst);
    eprintln!(
        "carol's genuine reject during the flood answered in {took:?} ({} HTTP/2 forgeries cancelled so far)",
        cancelled.load(Ordering::SeqCst)
    );
    assert_eq!(status, 200, "carol's genuine reject during the flood: {v}");
    assert_eq!(v["recorded"], true, "{v}");
    assert!(
        took < std::time::Duration::from_secs(1),
        "carol's genuine reject took {took:?} during the flood"
    );
    let mut refused = 0;
    while let Some(r) = flood.join_next().await {
        refused += r??;
    }
    let total = sent.load(Ordering::SeqCst);
    assert!(total >= FORGERIES, "{total}");
    assert_eq!(refused, total, "every forgery is refused");

    // After the flood carol still reads and her veto holds.
    let shown = w
        .signer("carol", &server)
        .ok(&["--json", "show", &id])
        .await?;
    assert!(shown.stdout.contains("REJECTED"), "{shown}");
    let st = mcp.status(&id).await?;
    assert_eq!(st.status(), "REJECTED", "{}", st.structured);
    assert_eq!(st.rejections(), vec!["carol"], "{}", st.structured);
    let (status, v) = server
        .post_decision(&w.secret_key("bob")?, &id, &hash, Decision::Approve, "")
        .await?;
    assert_eq!(status, 409, "bob approves after the veto: {v}");
    mcp.execute(&id, &hash).await?.expect("REJECTED", true);
    Ok(())
}

/// Issue #11, item 5, against the real binary: `/v1/events` used to check its
/// signature once and stream forever, past a key rotation. A SIGHUP that reloads the
/// keyring now ends every open stream with a `reauth` event (reason `keyring_reload`),
/// so the client must sign again with the key now in force.
#[tokio::test]
async fn an_event_stream_ends_on_sighup_keyring_reload() -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy("note.write.toml", POLICY)?;
    let server = w.start()?;
    let health = server.healthz().await?;
    let server_id = approval_core::ServerId::parse(health["server_id"].as_str().unwrap_or(""))?;
    let alice = w.secret_key("alice")?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs() as i64;
    let auth = approval_core::message::sign_read(
        &alice.key,
        &alice.name,
        &server_id,
        now,
        "GET",
        "/v1/events",
    );
    let mut resp = reqwest::Client::new()
        .get(format!("{}/v1/events", server.api_url))
        .header("Authorization", auth)
        .send()
        .await?;
    assert_eq!(resp.status().as_u16(), 200);
    server.sighup()?;
    let mut seen = String::new();
    let ended = tokio::time::timeout(approval_e2e::STEP_TIMEOUT, async {
        while let Some(chunk) = resp.chunk().await? {
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        Ok::<_, anyhow::Error>(())
    })
    .await;
    assert!(
        ended.is_ok(),
        "the stream did not end after SIGHUP: {seen:?}"
    );
    ended??;
    assert!(seen.contains("event: reauth"), "{seen:?}");
    assert!(seen.contains("keyring_reload"), "{seen:?}");
    Ok(())
}
