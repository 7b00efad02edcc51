//! PostgreSQL backups as the README says them (issue #36 part 2): `pg_dump` of a
//! database a running gate uses, while it runs; `pg_restore` into a fresh database
//! made with `psql`; `approval-server audit verify --store URL` on the copy; and an
//! instance started on the copy shows every proposal as it was.
//!
//! Runs when `APPROVAL_TEST_DATABASE_URL` is set (one line otherwise) and needs
//! `pg_dump`, `pg_restore` and `psql` (package postgresql-client): without them it
//! prints one line and passes, unless `APPROVAL_TEST_REQUIRE_ALL` is set.

use anyhow::{ensure, Context, Result};
use approval_e2e::pg::FreshDb;
use approval_e2e::{approval_server, McpClient, World, NOTE_POLICY_TWO_OF_THREE};
use serde_json::json;
use std::process::Command;

/// pg_dump, pg_restore and psql, each through the workspace's one rule for outside
/// tools (one `skipped:` line, or a failure under APPROVAL_TEST_REQUIRE_ALL).
fn tools_present() -> Result<bool> {
    let why = "dumps the gate's database and restores it into a new one";
    Ok(["pg_dump", "pg_restore", "psql"]
        .into_iter()
        .all(|t| approval_e2e::require(t, why, "apt-get install postgresql-client").is_some()))
}

fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    ensure!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn audit_verify(url: &str) -> Result<String> {
    let out = approval_server(&[
        "audit".as_ref(),
        "verify".as_ref(),
        "--store".as_ref(),
        url.as_ref(),
    ])?;
    ensure!(out.status.success(), "audit verify --store failed: {out}");
    Ok(out.stdout.trim().to_owned())
}

/// The database made for the copy, dropped at the end.
struct NewDb {
    base: String,
    name: String,
}

impl Drop for NewDb {
    fn drop(&mut self) {
        let _ = run(
            "psql",
            &[
                &self.base,
                "-c",
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            ],
        );
    }
}

#[tokio::test]
async fn pg_dump_of_a_running_gate_restores_into_a_fresh_database_whose_chain_verifies(
) -> Result<()> {
    let Some(db) = FreshDb::new()? else {
        return Ok(());
    };
    if !tools_present()? {
        return Ok(());
    }
    let base = std::env::var("APPROVAL_TEST_DATABASE_URL")?;
    let schema = db
        .url
        .split("search_path%3D")
        .nth(1)
        .context("the test URL names no schema")?
        .to_owned();
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy("note.write.toml", NOTE_POLICY_TWO_OF_THREE)?;
    let server = db.start(&w, "a", &[])?;
    let mcp = server.mcp().await?;
    let mut made = Vec::new();
    for (text, status) in [
        ("pending", "PENDING"),
        ("approved", "APPROVED"),
        ("run", "SUCCEEDED"),
        ("vetoed", "REJECTED"),
    ] {
        let p = mcp.prepare("note.write", json!({"text": text}), "").await?;
        let (id, hash) = (p.proposal_id(), p.preview_sha256());
        if matches!(status, "APPROVED" | "SUCCEEDED") {
            w.signer("alice", &server).approve(&id).await?;
            w.signer("bob", &server).approve(&id).await?;
        }
        if status == "REJECTED" {
            w.signer("carol", &server).reject(&id, "no").await?;
        }
        if status == "SUCCEEDED" {
            mcp.execute(&id, &hash).await?.expect("SUCCEEDED", false);
        }
        made.push((id, status));
    }
    let original = audit_verify(&db.url)?;

    // The README's commands, while the instance runs.
    let dump = w.path().join("gate.dump");
    let dump_s = dump.to_str().context("path")?;
    run(
        "pg_dump",
        &[
            "--format=custom",
            "--schema",
            &schema,
            "--file",
            dump_s,
            &base,
        ],
    )?;
    let name = format!("restore_{schema}");
    run("psql", &[&base, "-c", &format!("CREATE DATABASE {name}")])?;
    let new = NewDb {
        base: base.clone(),
        name: name.clone(),
    };
    let (prefix, _) = base
        .rsplit_once('/')
        .context("the test URL has no database")?;
    let new_base = format!("{prefix}/{}", new.name);
    run("pg_restore", &["--no-owner", "--dbname", &new_base, dump_s])?;
    let new_url = format!("{new_base}?options=-csearch_path%3D{schema}");
    let copied = audit_verify(&new_url)?;
    println!("original: {original}\ncopy:     {copied}");
    ensure!(
        copied == original,
        "the copy's chain differs: {copied} vs {original}"
    );

    // An instance on the copy shows every proposal as it was.
    let args: Vec<std::ffi::OsString> = vec!["--store".into(), new_url.clone().into()];
    let on_copy = approval_e2e::Server::start_full(
        &approval_e2e::ServerOptions {
            data: w.path().join("b"),
            policies: w.policies.clone(),
            keys: w.keys.clone(),
            agents: None,
        },
        &[],
        &args,
        &[],
    )?;
    let mcp = on_copy.mcp().await?;
    for (id, status) in &made {
        let st = mcp.status(id).await?;
        ensure!(
            st.status() == *status,
            "{id} is {} on the copy, not {status}",
            st.status()
        );
    }
    drop(on_copy);
    drop(server);
    drop(new);
    Ok(())
}
