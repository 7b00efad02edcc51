//! Issue #11 items 3 and 7, over the real binaries: the server's identity key and
//! its execution attestations (a receipt re-assembled from a revoked proposal's
//! approvals does not verify with the server's key), and signer-cli pinning each
//! server's id and key on first use.

use approval_e2e::{CliOutput, McpClient, Server, World};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NOTE_POLICY: &str = r#"
kind = "note.write"
description = "Write a note"
quorum = 2
approvers = ["alice", "bob", "carol"]
ttl = "30m"
execute_within = "10m"
[executor]
type = "note"
"#;

/// `signer-cli --json verify FILE --keys KEYRING [--server-key KEY]` as alice.
async fn verify(
    w: &World,
    server: &Server,
    receipt: &Path,
    server_key: Option<&str>,
) -> anyhow::Result<CliOutput> {
    let (r, k) = (path_str(receipt)?, path_str(&w.keys)?);
    let mut args = vec!["--json", "verify", r.as_str(), "--keys", k.as_str()];
    if let Some(key) = server_key {
        args.extend(["--server-key", key]);
    }
    w.signer("alice", server).run(&args).await
}

fn path_str(p: &Path) -> anyhow::Result<String> {
    p.to_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("non-UTF-8 path {}", p.display()))
}

async fn server_key(server: &Server) -> anyhow::Result<String> {
    let h = server.healthz().await?;
    h["server_key"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("/healthz has no server_key: {h}"))
}

/// The approvals any approver can read, re-assembled into a receipt by hand: only
/// the four fields a quorum-only receipt has, nothing from the server but them.
fn reassemble(receipt_from_server: &Value) -> Value {
    json!({
        "preview": receipt_from_server["preview"],
        "preview_sha256": receipt_from_server["preview_sha256"],
        "policy": receipt_from_server["policy"],
        "decisions": receipt_from_server["decisions"],
    })
}

#[tokio::test]
async fn a_receipt_reassembled_after_a_revoke_is_refused_with_the_server_key() -> anyhow::Result<()>
{
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy("note.write.toml", NOTE_POLICY)?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp
        .prepare("note.write", json!({"text": "pay the invoice"}), "pay")
        .await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    w.signer("alice", &server).approve(&id).await?;
    w.signer("bob", &server).approve(&id).await?;
    mcp.wait_status(&id, "APPROVED", Duration::from_secs(10))
        .await?;
    // Carol reads the proposal and its receipt while it is approved ...
    let early = w.path().join("receipt-before-revoke.json");
    w.signer("carol", &server).receipt(&id, &early).await?;
    // ... then alice revokes, and the agent's execute is refused.
    w.signer("alice", &server).revoke(&id).await?;
    mcp.execute(&id, &hash).await?.expect("REVOKED", true);

    let from_server: Value = serde_json::from_str(&std::fs::read_to_string(&early)?)?;
    assert!(
        from_server.get("attestation").is_none(),
        "a receipt of a proposal never claimed has no attestation: {from_server}"
    );
    let rebuilt = reassemble(&from_server);
    let rebuilt_path = w.path().join("receipt-reassembled.json");
    std::fs::write(&rebuilt_path, serde_json::to_string(&rebuilt)?)?;
    let key = server_key(&server).await?;

    for receipt in [&early, &rebuilt_path] {
        // The approvals are genuine: quorum alone verifies, and says what it did not check.
        let q = verify(&w, &server, receipt, None).await?;
        assert!(q.status.success(), "{q}");
        let qj = q.json()?;
        assert_eq!(qj["approved_by"], json!(["alice", "bob"]), "{q}");
        assert_eq!(qj["revocation_checked"], json!(false), "{q}");
        assert_eq!(qj["note"], "quorum only: revocation not checked", "{q}");
        let text = w
            .signer("alice", &server)
            .ok(&["verify", &path_str(receipt)?, "--keys", &path_str(&w.keys)?])
            .await?;
        assert!(
            text.stdout.contains("quorum only: revocation not checked"),
            "{text}"
        );
        // With the server's key, the missing execution attestation refuses it.
        let k = verify(&w, &server, receipt, Some(&key)).await?;
        assert_eq!(k.status.code(), Some(1), "{k}");
        assert!(k.stderr.contains("no execution attestation"), "{k}");
    }
    // The server's own receipt after the revoke says the same.
    let late = w.path().join("receipt-after-revoke.json");
    w.signer("carol", &server).receipt(&id, &late).await?;
    let k = verify(&w, &server, &late, Some(&key)).await?;
    assert_eq!(k.status.code(), Some(1), "{k}");
    Ok(())
}

/// A tiny HTTP receiver that keeps every request body and answers 200.
async fn receiver() -> anyhow::Result<(String, std::sync::Arc<std::sync::Mutex<Vec<String>>>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = bodies.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    let Ok(n) = s.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let len = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]);
                        if let Ok(mut l) = log.lock() {
                            l.push(body.into_owned());
                        }
                        let _ = s
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                            .await;
                        let _ = s.shutdown().await;
                        return;
                    }
                }
            });
        }
    });
    Ok((url, bodies))
}

/// Approves `kind` with alice and bob and executes it; returns (id, hash).
async fn approve_and_execute(
    w: &World,
    server: &Server,
    mcp: &approval_e2e::Mcp,
    kind: &str,
) -> anyhow::Result<(String, String)> {
    let prep = mcp.prepare(kind, json!({"n": 1}), "attested").await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    w.signer("alice", server).approve(&id).await?;
    w.signer("bob", server).approve(&id).await?;
    mcp.wait_status(&id, "APPROVED", Duration::from_secs(10))
        .await?;
    mcp.execute(&id, &hash).await?.expect("SUCCEEDED", false);
    Ok((id, hash))
}

#[tokio::test]
async fn the_webhook_and_command_executors_receive_an_attested_receipt() -> anyhow::Result<()> {
    let (url, bodies) = receiver().await?;
    let w = World::new(&["alice", "bob"])?;
    let copy = w.path().join("receipt-copy.json");
    let script = w.script("run.sh", "cp \"$APPROVAL_RECEIPT\" \"$1\"\n")?;
    w.write_policy(
        "hook.send.toml",
        &format!(
            "kind = \"hook.send\"\nquorum = 2\napprovers = [\"alice\", \"bob\"]\n[executor]\ntype = \"webhook\"\nurl = \"{url}\"\ntimeout = \"10s\"\n"
        ),
    )?;
    w.write_policy(
        "cmd.run.toml",
        &format!(
            "kind = \"cmd.run\"\nquorum = 2\napprovers = [\"alice\", \"bob\"]\n[executor]\ntype = \"command\"\nprogram = \"{}\"\nargs = [\"{}\"]\ntimeout = \"20s\"\n",
            script.display(),
            copy.display()
        ),
    )?;
    let server = w.start()?;
    let key = server_key(&server).await?;
    let mcp = server.mcp().await?;

    let (hook_id, hook_hash) = approve_and_execute(&w, &server, &mcp, "hook.send").await?;
    let body: Value = {
        let b = bodies.lock().map(|b| b.clone()).unwrap_or_default();
        assert_eq!(b.len(), 1, "{b:?}");
        serde_json::from_str(&b[0])?
    };
    let hooked = w.path().join("hook-receipt.json");
    std::fs::write(&hooked, serde_json::to_string(&body["receipt"])?)?;

    let (cmd_id, cmd_hash) = approve_and_execute(&w, &server, &mcp, "cmd.run").await?;

    for (received, id, hash) in [(&hooked, &hook_id, &hook_hash), (&copy, &cmd_id, &cmd_hash)] {
        let r: Value = serde_json::from_str(&std::fs::read_to_string(received)?)?;
        let a = &r["attestation"];
        assert_eq!(a["server_key"], json!(key), "{r}");
        assert_eq!(a["server_id"], r["preview"]["server_id"], "{r}");
        let v = verify(&w, &server, received, Some(&key)).await?;
        assert!(v.status.success(), "{v}");
        let vj = v.json()?;
        assert_eq!(vj["revocation_checked"], json!(true), "{v}");
        assert_eq!(vj["preview_sha256"], json!(hash), "{v}");
        assert_eq!(vj["attestation"]["claimed_at"], a["claimed_at"], "{v}");
        // The receipt read back later carries the same attestation (stored at the claim).
        let later = w.path().join(format!("later-{id}.json"));
        w.signer("alice", &server).receipt(id, &later).await?;
        let l: Value = serde_json::from_str(&std::fs::read_to_string(&later)?)?;
        assert_eq!(l["attestation"], r["attestation"], "{l}");
    }
    // A different key refuses it.
    let other = approval_core::PublicKey::from_signing_key(&ed25519_dalek::SigningKey::from_bytes(
        &[9; 32],
    ))
    .to_base64();
    let v = verify(&w, &server, &copy, Some(&other)).await?;
    assert_eq!(v.status.code(), Some(1), "{v}");
    Ok(())
}

#[tokio::test]
async fn healthz_publishes_server_id_and_server_key() -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob"])?;
    w.write_policy(
        "note.write.toml",
        NOTE_POLICY.replace(", \"carol\"", "").as_str(),
    )?;
    let server = w.start()?;
    let h = server.healthz().await?;
    assert_eq!(h["status"], "ok", "{h}");
    assert!(
        h["server_id"]
            .as_str()
            .is_some_and(|s| s.starts_with("srv-")),
        "{h}"
    );
    let key = h["server_key"].as_str().unwrap_or_default();
    // Standard base64 of 32 raw bytes, like a keyring line.
    let parsed = approval_core::PublicKey::parse(key)?;
    assert_eq!(parsed.to_base64(), key);
    Ok(())
}

fn key_file(w: &World) -> PathBuf {
    w.data.join("server.key")
}

#[tokio::test]
async fn the_server_identity_key_is_made_once_and_never_overwritten() -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new(&["alice", "bob"])?;
    w.write_policy(
        "note.write.toml",
        NOTE_POLICY.replace(", \"carol\"", "").as_str(),
    )?;
    let mut server = w.start()?;
    let first = server.healthz().await?;
    let mode = std::fs::metadata(key_file(&w))?.permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "server.key must be private");
    let secret = std::fs::read_to_string(key_file(&w))?;
    let secret_line = secret.lines().nth(1).unwrap_or_default().to_owned();
    assert!(!secret_line.is_empty(), "{secret:?}");
    server.stop(Duration::from_secs(20))?;
    assert!(
        !server.log().contains(&secret_line),
        "the secret key reached the log"
    );

    // Restart: the same id and key, the file unchanged.
    let mut server = w.start()?;
    let again = server.healthz().await?;
    assert_eq!(again["server_id"], first["server_id"]);
    assert_eq!(again["server_key"], first["server_key"]);
    assert_eq!(std::fs::read_to_string(key_file(&w))?, secret);
    server.stop(Duration::from_secs(20))?;

    // Another server's key in this data folder: refused, nothing overwritten.
    let other = World::new(&["alice", "bob"])?;
    other.write_policy(
        "note.write.toml",
        NOTE_POLICY.replace(", \"carol\"", "").as_str(),
    )?;
    let mut o = other.start()?;
    o.stop(Duration::from_secs(20))?;
    let foreign = std::fs::read_to_string(key_file(&other))?;
    std::fs::write(key_file(&w), &foreign)?;
    let e = match w.start() {
        Ok(_) => anyhow::bail!("a server started with another server's key"),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains("is bound to key"), "{e}");
    assert_eq!(std::fs::read_to_string(key_file(&w))?, foreign);

    // The key file gone: refused, and no new key is made in its place.
    std::fs::remove_file(key_file(&w))?;
    let e = match w.start() {
        Ok(_) => anyhow::bail!("a server started without its key"),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains("is missing"), "{e}");
    assert!(!key_file(&w).exists());

    // Restored from backup: back to the same identity.
    std::fs::write(key_file(&w), &secret)?;
    std::fs::set_permissions(key_file(&w), std::fs::Permissions::from_mode(0o600))?;
    let server = w.start()?;
    assert_eq!(server.healthz().await?["server_key"], first["server_key"]);
    Ok(())
}

fn known_servers(w: &World) -> PathBuf {
    w.path()
        .join("xdg-config")
        .join("approval-signer")
        .join("known_servers")
}

#[tokio::test]
async fn signer_cli_refuses_a_server_whose_key_changed_and_signs_nothing() -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy("note.write.toml", NOTE_POLICY)?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp.prepare("note.write", json!({"text": "x"}), "x").await?;
    let id = prep.proposal_id();
    let h = server.healthz().await?;

    // First use pins the server's id and key, and says so.
    let first = w.signer("alice", &server).ok(&["pending"]).await?;
    assert!(first.stderr.contains("pinned server"), "{first}");
    let pinned = std::fs::read_to_string(known_servers(&w))?;
    let line = format!(
        "{} {} {}",
        server.api_url,
        h["server_id"].as_str().unwrap_or_default(),
        h["server_key"].as_str().unwrap_or_default()
    );
    assert!(pinned.contains(&line), "{pinned}");

    // The pin says another key (as if this were an impersonator of the pinned server).
    let other = approval_core::PublicKey::from_signing_key(&ed25519_dalek::SigningKey::from_bytes(
        &[7; 32],
    ))
    .to_base64();
    let forged = pinned.replace(h["server_key"].as_str().unwrap_or_default(), &other);
    std::fs::write(known_servers(&w), &forged)?;
    let r = w
        .signer("alice", &server)
        .run(&["approve", &id, "--yes"])
        .await?;
    assert_eq!(r.status.code(), Some(1), "{r}");
    assert!(r.stderr.contains("SERVER IDENTITY CHANGED"), "{r}");
    assert!(r.stderr.contains(&other), "{r}");
    assert!(r.stderr.contains("trust-server"), "{r}");
    let st = mcp.status(&id).await?;
    assert!(st.approvals().is_empty(), "{}", st.structured);
    assert_eq!(std::fs::read_to_string(known_servers(&w))?, forged);

    // A changed server_id is refused the same way.
    let srv = h["server_id"].as_str().unwrap_or_default();
    std::fs::write(
        known_servers(&w),
        pinned.replace(srv, "srv-0000000000000000"),
    )?;
    let r = w
        .signer("alice", &server)
        .run(&["approve", &id, "--yes"])
        .await?;
    assert_eq!(r.status.code(), Some(1), "{r}");
    assert!(r.stderr.contains("srv-0000000000000000"), "{r}");
    assert!(mcp.status(&id).await?.approvals().is_empty());
    Ok(())
}

#[tokio::test]
async fn trust_server_repins_after_an_intended_change() -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy("note.write.toml", NOTE_POLICY)?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp.prepare("note.write", json!({"text": "y"}), "y").await?;
    let id = prep.proposal_id();
    let h = server.healthz().await?;
    let key = h["server_key"].as_str().unwrap_or_default().to_owned();
    let old = approval_core::PublicKey::from_signing_key(&ed25519_dalek::SigningKey::from_bytes(
        &[8; 32],
    ))
    .to_base64();
    std::fs::create_dir_all(known_servers(&w).parent().unwrap_or(w.path()))?;
    std::fs::write(
        known_servers(&w),
        format!(
            "{} {} {old}\n",
            server.api_url,
            h["server_id"].as_str().unwrap_or_default()
        ),
    )?;
    let refused = w
        .signer("alice", &server)
        .run(&["approve", &id, "--yes"])
        .await?;
    assert_eq!(refused.status.code(), Some(1), "{refused}");

    // The one explicit command shows old and new and re-pins.
    let t = w.signer("alice", &server).ok(&["trust-server"]).await?;
    assert!(t.stdout.contains(&old) && t.stdout.contains(&key), "{t}");
    let pins = std::fs::read_to_string(known_servers(&w))?;
    assert!(pins.contains(&key) && !pins.contains(&old), "{pins}");
    let a = w.signer("alice", &server).approve(&id).await?;
    assert_eq!(a["status"], "PENDING", "{a}");
    assert_eq!(mcp.status(&id).await?.approvals(), vec!["alice"]);
    Ok(())
}
