//! Upgrades (issue #36 part 2): a data folder written by the previous landed build
//! opens under this one, every proposal and the audit chain intact (PROTOCOL §18).
//!
//! `tests/fixtures/data-layout3/` was written by the server of commit 29a8cf9 (store
//! layout 3); its README says how. The test copies it to a temporary folder and:
//! checks the chain with this build's `audit verify`; serves it and reads every
//! proposal's status and hash as the old build left them; approves the pending one
//! and executes the approved ones with the fixture's approver keys; checks the chain
//! again; takes a backup of it and restores it.
//!
//! The fixture's `make.sh` wrote it (its README says with which binaries).

use anyhow::{ensure, Context, Result};
use approval_e2e::{approval_server, CliOutput, McpClient, World};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

const FIXTURE: &str = "data-layout3";

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(FIXTURE)
}

fn run(args: &[&std::ffi::OsStr]) -> Result<CliOutput> {
    approval_server(args)
}

fn audit_verify(data: &Path) -> Result<u64> {
    let out = run(&[
        "audit".as_ref(),
        "verify".as_ref(),
        "--data".as_ref(),
        data.as_os_str(),
    ])?;
    ensure!(out.status.success(), "audit verify failed: {out}");
    out.stdout
        .trim()
        .strip_prefix("ok: ")
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("unexpected audit verify output: {out}"))
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type()?.is_dir() {
            copy_dir(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

/// A world whose keyring, approver keys, policies and data are the fixture's.
fn world_from_fixture() -> Result<(World, Value)> {
    use std::os::unix::fs::PermissionsExt;
    let fx = fixture_dir();
    ensure!(fx.is_dir(), "{} is missing", fx.display());
    let w = World::new(&[])?;
    std::fs::copy(fx.join("keyring"), &w.keys)?;
    copy_dir(&fx.join("policies"), &w.policies)?;
    copy_dir(&fx.join("signers"), &w.path().join("signers"))?;
    copy_dir(&fx.join("data"), &w.data)?;
    // git keeps no modes: the server wants its key and folder owner-only.
    std::fs::set_permissions(&w.data, std::fs::Permissions::from_mode(0o700))?;
    std::fs::set_permissions(
        w.data.join("server.key"),
        std::fs::Permissions::from_mode(0o600),
    )?;
    for e in std::fs::read_dir(w.path().join("signers"))? {
        std::fs::set_permissions(e?.path(), std::fs::Permissions::from_mode(0o600))?;
    }
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fx.join("expected.json"))?)?;
    Ok((w, expected))
}

#[tokio::test]
async fn a_layout3_data_folder_of_the_previous_build_opens_with_every_proposal_and_its_chain(
) -> Result<()> {
    let (w, expected) = world_from_fixture()?;
    let want_entries = expected["audit_entries"]
        .as_u64()
        .context("audit_entries")?;
    ensure!(
        audit_verify(&w.data)? == want_entries,
        "the fixture's chain is not the one the old build wrote"
    );
    let server = w.start()?;
    ensure!(
        server.healthz().await?["server_key"] == expected["server_key"],
        "the identity changed"
    );
    let mcp = server.mcp().await?;
    let proposals = expected["proposals"].as_array().context("proposals")?;
    ensure!(proposals.len() >= 4, "the fixture holds too few proposals");
    for p in proposals {
        let (id, status) = (
            p["id"].as_str().unwrap_or(""),
            p["status"].as_str().unwrap_or(""),
        );
        let st = mcp.status(id).await?;
        ensure!(
            st.status() == status,
            "{id} is {}, the old build left it {status}",
            st.status()
        );
        ensure!(
            st.preview_sha256() == p["preview_sha256"].as_str().unwrap_or(""),
            "{id}'s preview hash changed"
        );
    }
    // Life goes on: the pending one is approved and both approved ones run.
    let by = |s: &str| {
        proposals
            .iter()
            .filter(|p| p["status"] == s)
            .map(|p| {
                (
                    p["id"].as_str().unwrap_or("").to_owned(),
                    p["preview_sha256"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect::<Vec<_>>()
    };
    let mut to_run = by("APPROVED");
    for (id, hash) in by("PENDING") {
        w.signer("alice", &server).approve(&id).await?;
        w.signer("bob", &server).approve(&id).await?;
        to_run.push((id, hash));
    }
    for (id, hash) in &to_run {
        mcp.execute(id, hash).await?.expect("SUCCEEDED", false);
    }
    let mut server = server;
    server.stop(Duration::from_secs(20))?;
    let after = audit_verify(&w.data)?;
    ensure!(after > want_entries, "the chain did not grow: {after}");

    // And the upgraded folder backs up and restores.
    let file = w.path().join("upgraded.backup");
    let out = run(&[
        "backup".as_ref(),
        "--data".as_ref(),
        w.data.as_os_str(),
        "--out".as_ref(),
        file.as_os_str(),
    ])?;
    ensure!(out.status.success(), "{out}");
    let r = w.path().join("restored");
    let out = run(&[
        "restore".as_ref(),
        file.as_os_str(),
        "--data".as_ref(),
        r.as_os_str(),
    ])?;
    ensure!(out.status.success(), "{out}");
    ensure!(audit_verify(&r)? == after);
    Ok(())
}
