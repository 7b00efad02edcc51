//! The admin socket (`<data>/admin.sock`, PROTOCOL §16.1) attacked, on the real
//! server. Each test is named after what it refutes (THREAT_MODEL.md).
//!
//! - `the_admin_socket_answers_one_request_and_nothing_else`: 0600 in a 0700
//!   folder; a request other than `backup 1` (HTTP, a path, an option, a line too
//!   long, no line at all) gets one `error: BAD_REQUEST` line and nothing of the
//!   store.
//! - `idle_and_excess_connections_cannot_hold_the_server_or_the_backup`: 40
//!   connections that send nothing: past 8 they are closed at once, the 8 are
//!   dropped after 5 s, MCP answers meanwhile, and a backup works afterwards.
//! - `a_reader_that_stalls_holds_no_lock_and_a_second_backup_waits_its_turn`: a
//!   client asks for a backup larger than the socket's buffer and reads nothing:
//!   writes go on, a second backup meanwhile is refused `LIMIT_EXCEEDED` (one at a
//!   time), and once the staller goes, a backup works.
//! - `another_user_cannot_reach_the_socket` (as root, with `setpriv`).
//! - `a_path_at_admin_sock_that_is_not_ours_refuses_the_start`: a symbolic link, a
//!   regular file; a socket left by a killed server is replaced.

use anyhow::{ensure, Result};
use approval_e2e::{approval_server, CliOutput, McpClient, Server, World};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

const POLICY: &str = r#"
kind = "note.write"
description = "Write a note"
quorum = 2
approvers = ["alice", "bob"]
ttl = "30m"
execute_within = "10m"
max_payload_bytes = 1000000
[executor]
type = "note"
"#;

fn world() -> Result<World> {
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("note.write.toml", POLICY)?;
    Ok(w)
}

fn backup(data: &Path, out: &Path) -> Result<CliOutput> {
    approval_server(&[
        "backup".as_ref(),
        "--data".as_ref(),
        data.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
    ])
}

/// Sends `bytes` and reads the whole answer (up to 10 s).
async fn ask(data: &Path, bytes: &[u8]) -> Result<String> {
    let mut s = UnixStream::connect(data.join("admin.sock")).await?;
    let _ = s.write_all(bytes).await;
    // Read until the end; a reset (the server closed with our bytes unread) ends
    // it too, keeping what came before.
    let mut out = Vec::new();
    let read = async {
        let mut b = [0u8; 4096];
        while let Ok(n @ 1..) = s.read(&mut b).await {
            out.extend_from_slice(&b[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read).await?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test]
async fn the_admin_socket_answers_one_request_and_nothing_else() -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let w = world()?;
    let server = w.start()?;
    let sock = w.data.join("admin.sock");
    let mode = std::fs::metadata(&sock)?.permissions().mode() & 0o777;
    ensure!(mode == 0o600, "admin.sock is mode {mode:o}");
    let dir = std::fs::metadata(&w.data)?.permissions().mode() & 0o777;
    ensure!(dir == 0o700, "the data folder is mode {dir:o}");

    let long = vec![b'a'; 4096];
    for (what, req) in [
        ("HTTP", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".as_slice()),
        ("a path", b"backup 1 /etc/passwd\n".as_slice()),
        ("another version", b"backup 2\n".as_slice()),
        ("a write", b"restore 1\n".as_slice()),
        ("a long line", long.as_slice()),
        ("NUL bytes", b"backup\x001\n".as_slice()),
    ] {
        let t = Instant::now();
        let answer = ask(&w.data, req).await?;
        ensure!(
            answer.starts_with("error: BAD_REQUEST: ") && answer.lines().count() == 1,
            "{what}: {answer:?}"
        );
        ensure!(!answer.contains("APPROVAL-BACKUP"), "{what} got a backup");
        ensure!(t.elapsed() < Duration::from_secs(3), "{what} was slow");
    }
    // No request line at all: dropped at the deadline.
    let t = Instant::now();
    let answer = ask(&w.data, b"").await?;
    ensure!(answer.contains("no request line"), "{answer:?}");
    ensure!(t.elapsed() >= Duration::from_secs(4), "dropped too early");
    // And the one request works.
    let answer = ask(&w.data, b"backup 1\n").await?;
    ensure!(
        answer.starts_with("APPROVAL-BACKUP\n"),
        "{}",
        &answer[..40.min(answer.len())]
    );
    ensure!(server.healthz().await?["status"] == "ok");
    Ok(())
}

#[tokio::test]
async fn idle_and_excess_connections_cannot_hold_the_server_or_the_backup() -> Result<()> {
    let w = world()?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let sock = w.data.join("admin.sock");
    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(UnixStream::connect(&sock).await?);
    }
    // Past the 8 served, each is closed at once (read sees the end).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut closed = 0;
    for s in idle.iter_mut() {
        let mut b = [0u8; 64];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(50), s.read(&mut b)).await {
            closed += 1;
        }
    }
    ensure!(
        closed >= 32,
        "only {closed} of the 32 excess connections were closed"
    );
    // The gate answers meanwhile.
    mcp.prepare("note.write", json!({"text": "still here"}), "")
        .await?
        .expect("PENDING_QUORUM", false);
    // The 8 idle ones are dropped after the request deadline; then a backup works.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let out = backup(&w.data, &w.path().join("after.backup"))?;
    ensure!(out.status.success(), "{out}");
    ensure!(out.stdout.contains("running server"), "{out}");
    Ok(())
}

#[tokio::test]
async fn a_reader_that_stalls_holds_no_lock_and_a_second_backup_waits_its_turn() -> Result<()> {
    let w = world()?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    // About 2 MiB of notes: more than a Unix socket buffers.
    let text = "x".repeat(200_000);
    for _ in 0..10 {
        mcp.prepare("note.write", json!({"text": text}), "")
            .await?
            .expect("PENDING_QUORUM", false);
    }
    let mut staller = UnixStream::connect(w.data.join("admin.sock")).await?;
    staller.write_all(b"backup 1\n").await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The store is not locked: writes go on.
    let t = Instant::now();
    mcp.prepare("note.write", json!({"text": "while stalled"}), "")
        .await?
        .expect("PENDING_QUORUM", false);
    ensure!(
        t.elapsed() < Duration::from_secs(5),
        "a write waited on the staller"
    );
    // One backup at a time.
    let out = backup(&w.data, &w.path().join("second.backup"))?;
    ensure!(
        !out.status.success() && out.stderr.contains("LIMIT_EXCEEDED"),
        "{out}"
    );
    ensure!(!w.path().join("second.backup").exists());
    drop(staller);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let out = backup(&w.data, &w.path().join("third.backup"))?;
    ensure!(out.status.success(), "{out}");
    ensure!(out.stdout.contains("11 proposals"), "{out}");
    Ok(())
}

#[tokio::test]
async fn another_user_cannot_reach_the_socket() -> Result<()> {
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    let setpriv = std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok();
    if !root || !setpriv {
        let why = if root {
            "install util-linux for setpriv"
        } else {
            "run as root"
        };
        if std::env::var_os("APPROVAL_TEST_REQUIRE_ALL").is_some() {
            anyhow::bail!("another_user_cannot_reach_the_socket needs root and setpriv ({why})");
        }
        eprintln!("skipped: another_user_cannot_reach_the_socket ({why})");
        return Ok(());
    }
    let w = world()?;
    let _server = w.start()?;
    // The test's folder is reachable by nobody, as a shared /tmp would be.
    let out_dir = tempfile::Builder::new()
        .prefix("approval-nobody-")
        .tempdir()?;
    std::process::Command::new("chmod")
        .args(["1777"])
        .arg(out_dir.path())
        .status()?;
    std::process::Command::new("chmod")
        .args(["755"])
        .arg(w.path())
        .status()?;
    let out: CliOutput = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(approval_e2e::bin("approval-server"))
        .arg("backup")
        .arg("--data")
        .arg(&w.data)
        .arg("--out")
        .arg(out_dir.path().join("stolen.backup"))
        .output()?
        .into();
    ensure!(!out.status.success(), "nobody took a backup: {out}");
    ensure!(out.stderr.contains("Permission denied"), "{out}");
    ensure!(!out_dir.path().join("stolen.backup").exists());
    Ok(())
}

#[tokio::test]
async fn a_path_at_admin_sock_that_is_not_ours_refuses_the_start() -> Result<()> {
    let w = world()?;
    std::fs::create_dir_all(&w.data)?;
    let sock = w.data.join("admin.sock");
    let elsewhere = w.path().join("elsewhere");
    std::os::unix::fs::symlink(&elsewhere, &sock)?;
    let refused = Server::start(&w.data, &w.policies, &w.keys);
    let e = format!(
        "{:#}",
        refused.err().map(|e| e.to_string()).unwrap_or_default()
    );
    ensure!(
        e.contains("admin.sock") && e.contains("symbolic link"),
        "{e}"
    );
    ensure!(!elsewhere.exists(), "something was made through the link");
    std::fs::remove_file(&sock)?;

    std::fs::write(&sock, "not a socket")?;
    let refused = Server::start(&w.data, &w.policies, &w.keys);
    let e = refused.err().map(|e| e.to_string()).unwrap_or_default();
    ensure!(e.contains("regular file"), "{e}");
    ensure!(std::fs::read_to_string(&sock)? == "not a socket");
    std::fs::remove_file(&sock)?;

    // A socket left by a server killed with SIGKILL is replaced.
    let mut first = w.start()?;
    first.kill();
    ensure!(sock.exists(), "a killed server removed its socket");
    let second = w.start()?;
    let out = backup(&w.data, &w.path().join("b"))?;
    ensure!(
        out.status.success() && out.stdout.contains("running server"),
        "{out}"
    );
    drop(second);
    Ok(())
}
