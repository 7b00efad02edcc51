//! Backups of the embedded store (issue #36 part 2), on the real binaries.
//!
//! - `a_backup_taken_under_load_restores_every_proposal_and_the_chain`: proposals in
//!   four states (pending, approved, executed, rejected); `approval-server backup`
//!   while the server runs and while prepares and decisions are in flight, then once
//!   more when they are done; each restored into a new folder, `audit verify` on the
//!   copy, and a server started on the quiet copy shows every proposal as it was,
//!   with the same identity, and executes the approved one.
//! - `a_backup_with_no_server_running_opens_the_store_itself`.
//! - `restore_refuses_a_non_empty_folder_and_a_damaged_file_and_leaves_nothing`, and
//!   `backup` never writes over a file.
//!
//! The admin socket's attacks are in `backup_socket.rs`.

use anyhow::{ensure, Context, Result};
use approval_e2e::{
    approval_server, CliOutput, McpClient, Server, World, NOTE_POLICY_TWO_OF_THREE,
};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn world() -> Result<World> {
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy("note.write.toml", NOTE_POLICY_TWO_OF_THREE)?;
    Ok(w)
}

/// One proposal made by [`populate`]: its id, hash and the status it must keep.
struct Made {
    id: String,
    hash: String,
    status: &'static str,
}

/// A pending, an approved, an executed and a rejected proposal.
async fn populate(w: &World, server: &Server) -> Result<Vec<Made>> {
    let mcp = server.mcp().await?;
    let mut made = Vec::new();
    for (text, status) in [
        ("left pending", "PENDING"),
        ("approved, not run", "APPROVED"),
        ("approved and run", "SUCCEEDED"),
        ("vetoed", "REJECTED"),
    ] {
        let p = mcp.prepare("note.write", json!({"text": text}), "").await?;
        let (id, hash) = (p.proposal_id(), p.preview_sha256());
        match status {
            "APPROVED" | "SUCCEEDED" => {
                w.signer("alice", server).approve(&id).await?;
                w.signer("bob", server).approve(&id).await?;
            }
            "REJECTED" => {
                w.signer("carol", server).reject(&id, "no").await?;
            }
            _ => {}
        }
        if status == "SUCCEEDED" {
            mcp.execute(&id, &hash).await?.expect("SUCCEEDED", false);
        }
        made.push(Made { id, hash, status });
    }
    Ok(made)
}

fn run(args: &[&str]) -> Result<CliOutput> {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    approval_server(&args)
}

fn backup(data: &Path, out: &Path) -> Result<CliOutput> {
    run(&["backup", "--data", s(data), "--out", s(out)])
}

fn restore(file: &Path, data: &Path) -> Result<CliOutput> {
    run(&["restore", s(file), "--data", s(data)])
}

fn audit_verify(data: &Path) -> Result<CliOutput> {
    run(&["audit", "verify", "--data", s(data)])
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

#[tokio::test]
async fn a_backup_taken_under_load_restores_every_proposal_and_the_chain() -> Result<()> {
    let w = world()?;
    let server = w.start()?;
    let made = populate(&w, &server).await?;
    let identity = server.healthz().await?["server_key"].clone();

    // Prepares and approvals in flight while the first backup is taken.
    let load = {
        let (url, alice) = (server.mcp_url.clone(), w.signer("alice", &server));
        tokio::spawn(async move { load(&url, &alice).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let busy = w.path().join("under-load.backup");
    let out = backup(&w.data, &busy)?;
    ensure!(out.status.success(), "backup under load failed: {out}");
    ensure!(
        out.stdout.contains("taken from the running server"),
        "the backup did not come from the server: {out}"
    );
    let during = load.await??;
    ensure!(during > 0, "no request ran during the backup");

    let quiet = w.path().join("quiet.backup");
    let out = backup(&w.data, &quiet)?;
    ensure!(out.status.success(), "second backup failed: {out}");
    println!("{}", out.stdout.trim());
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&quiet)?.permissions());
    ensure!(mode & 0o077 == 0, "the backup file is mode {mode:o}");

    // The copy taken under load: consistent (its chain verifies) once restored.
    let r1 = w.path().join("restored-under-load");
    let out = restore(&busy, &r1)?;
    ensure!(out.status.success(), "restore failed: {out}");
    let v = audit_verify(&r1)?;
    ensure!(
        v.status.success() && v.stdout.contains("chain intact"),
        "{v}"
    );

    // The quiet copy, restored and served.
    let r2 = w.path().join("restored");
    let out = restore(&quiet, &r2)?;
    ensure!(out.status.success(), "restore failed: {out}");
    println!("{}", out.stdout.trim());
    ensure!(out.stdout.contains("chain intact"), "{out}");
    let v = audit_verify(&r2)?;
    ensure!(v.status.success(), "{v}");
    let original = audit_count(&server, &w)?;
    drop(server);
    let copy = Server::start(&r2, &w.policies, &w.keys)?;
    ensure!(
        copy.healthz().await?["server_key"] == identity,
        "the restored server has another identity"
    );
    let mcp = copy.mcp().await?;
    for m in &made {
        let st = mcp.status(&m.id).await?;
        ensure!(
            st.status() == m.status,
            "{} is {} after restore, not {}",
            m.id,
            st.status(),
            m.status
        );
    }
    let approved = made
        .iter()
        .find(|m| m.status == "APPROVED")
        .context("none")?;
    mcp.execute(&approved.id, &approved.hash)
        .await?
        .expect("SUCCEEDED", false);
    drop(copy);
    let v = audit_verify(&r2)?;
    ensure!(v.status.success(), "{v}");
    ensure!(
        entries(&v.stdout) > original,
        "the copy's chain did not grow: {v}"
    );
    Ok(())
}

/// The number in `ok: N audit entries, …`.
fn entries(line: &str) -> u64 {
    line.trim()
        .strip_prefix("ok: ")
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The running server's chain length, read over its signed audit API.
fn audit_count(server: &Server, w: &World) -> Result<u64> {
    let key = w.key_file("alice");
    let out = run(&[
        "audit",
        "verify",
        "--server",
        &server.api_url,
        "--key",
        s(&key),
    ])?;
    ensure!(out.status.success(), "{out}");
    Ok(entries(&out.stdout))
}

/// Prepares and approvals for about two seconds; returns how many completed.
async fn load(mcp_url: &str, alice: &approval_e2e::Signer) -> Result<u64> {
    let mcp = approval_e2e::Mcp::connect(mcp_url, None).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let mut n = 0u64;
    while std::time::Instant::now() < deadline {
        let p = mcp
            .prepare("note.write", json!({"text": format!("load {n}")}), "")
            .await?;
        if n.is_multiple_of(3) {
            alice.approve(&p.proposal_id()).await?;
        }
        n += 1;
    }
    Ok(n)
}

#[tokio::test]
async fn a_backup_with_no_server_running_opens_the_store_itself() -> Result<()> {
    let w = world()?;
    let server = w.start()?;
    let made = populate(&w, &server).await?;
    drop(server);
    let file = w.path().join("offline.backup");
    let out = backup(&w.data, &file)?;
    ensure!(out.status.success(), "{out}");
    ensure!(out.stdout.contains("no server running"), "{out}");
    ensure!(out.stdout.contains("4 proposals"), "{out}");
    let r = w.path().join("r");
    let out = restore(&file, &r)?;
    ensure!(out.status.success(), "{out}");
    let copy = Server::start(&r, &w.policies, &w.keys)?;
    let mcp = copy.mcp().await?;
    for m in &made {
        ensure!(mcp.status(&m.id).await?.status() == m.status, "{}", m.id);
    }
    // A mistyped --data: refused by name, and no store is made there.
    let wrong = w.path().join("no-such-data");
    let out = backup(&wrong, &w.path().join("wrong.backup"))?;
    ensure!(!out.status.success(), "{out}");
    ensure!(out.stderr.contains("no store in"), "{out}");
    ensure!(!wrong.exists(), "a store was made in the mistyped folder");
    ensure!(!w.path().join("wrong.backup").exists(), "{out}");
    Ok(())
}

#[tokio::test]
async fn restore_refuses_a_non_empty_folder_and_a_damaged_file_and_leaves_nothing() -> Result<()> {
    let w = world()?;
    let server = w.start()?;
    populate(&w, &server).await?;
    let good = w.path().join("good.backup");
    ensure!(backup(&w.data, &good)?.status.success());

    // backup never writes over a file.
    let out = backup(&w.data, &good)?;
    ensure!(
        !out.status.success() && out.stderr.contains("exists"),
        "{out}"
    );

    // A non-empty target: refused, untouched.
    let busy = w.path().join("busy");
    std::fs::create_dir_all(&busy)?;
    std::fs::write(busy.join("keep.txt"), "mine")?;
    let out = restore(&good, &busy)?;
    ensure!(
        !out.status.success() && out.stderr.contains("not empty"),
        "{out}"
    );
    ensure!(
        std::fs::read_dir(&busy)?.count() == 1,
        "the folder was touched"
    );

    // One flipped byte, or a cut: refused by the checksum, nothing left behind.
    let bytes = std::fs::read(&good)?;
    let mut flipped = bytes.clone();
    let at = bytes.len() / 2;
    flipped[at] ^= 0x20;
    let cut = &bytes[..bytes.len() - 40];
    for (name, b) in [("flipped", flipped.as_slice()), ("cut", cut)] {
        let file = w.path().join(format!("{name}.backup"));
        std::fs::write(&file, b)?;
        let target = w.path().join(format!("from-{name}"));
        let out = restore(&file, &target)?;
        ensure!(!out.status.success(), "a {name} backup was restored: {out}");
        ensure!(
            out.stderr.contains("checksum")
                || out.stderr.contains("truncated")
                || out.stderr.contains("not a usable backup"),
            "{name}: {out}"
        );
        ensure!(!target.exists(), "{name}: {} was made", target.display());
    }
    let left: Vec<PathBuf> = std::fs::read_dir(w.path())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().contains(".approval-"))
        .collect();
    ensure!(left.is_empty(), "temporary files left: {left:?}");

    // An empty folder is fine.
    let empty = w.path().join("empty");
    std::fs::create_dir_all(&empty)?;
    let out = restore(&good, &empty)?;
    ensure!(out.status.success(), "{out}");
    Ok(())
}
