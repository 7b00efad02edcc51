//! Several instances of the real server on one PostgreSQL database (issue #15): the
//! round trip, exactly one run of 100 concurrent executes spread over three
//! instances, a decision on one instance waking a long-poll on another (and a
//! proposal reaching a `signer-cli watch` stream on another), and an
//! instance killed mid-execution whose claim a survivor ends OUTCOME_UNKNOWN when
//! its lease runs out, the command having run once.
//!
//! Runs when `APPROVAL_TEST_DATABASE_URL` is set (`.ci/run` sets it); otherwise
//! each test prints one line saying how to run it. Each test has a schema of its own.

use approval_e2e::pg::FreshDb;
use approval_e2e::{approval_server, poll_until, McpClient, World};
use serde_json::json;
use std::time::{Duration, Instant};

// The note policy the stdio suites use too: alice and bob both approve.
use approval_e2e::NOTE_POLICY_ALICE_AND_BOB as NOTE_POLICY;

/// A `deploy.run` policy whose command runs `script` with `args`.
fn command_policy(script: &std::path::Path, args: &[&std::path::Path]) -> String {
    let args = args
        .iter()
        .map(|a| format!("{:?}", a.display().to_string()))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"
kind = "deploy.run"
description = "Deploy"
quorum = 2
approvers = ["alice", "bob"]
ttl = "30m"
execute_within = "10m"
[executor]
type = "command"
program = {:?}
args = [{args}]
timeout = "60s"
"#,
        script.display().to_string()
    )
}

/// Kills a process we started (an executor's `sleep`, orphaned by a SIGKILL) by pid.
struct KillOnDrop(std::path::PathBuf);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0) {
            let pid = pid.trim();
            if !pid.is_empty() && pid.chars().all(|c| c.is_ascii_digit()) {
                let _ = std::process::Command::new("/bin/kill")
                    .args(["-KILL", pid])
                    .status();
            }
        }
    }
}

fn audit_verify(db: &FreshDb) -> anyhow::Result<String> {
    let out = approval_server(&[
        "audit".as_ref(),
        "verify".as_ref(),
        "--store".as_ref(),
        db.url.as_ref(),
    ])?;
    anyhow::ensure!(out.status.success(), "audit verify failed: {out}");
    Ok(out.stdout)
}

#[tokio::test]
async fn round_trip_on_postgres() -> anyhow::Result<()> {
    let Some(db) = FreshDb::new()? else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("note.write.toml", NOTE_POLICY)?;
    let server = db.start(&w, "a", &[])?;
    let health = server.healthz().await?;
    assert_eq!(health["status"], "ok", "{health}");
    let mcp = server.mcp().await?;
    let prep = mcp
        .prepare(
            "note.write",
            json!({"text": "hello from PostgreSQL"}),
            "a note",
        )
        .await?;
    prep.expect("PENDING_QUORUM", false);
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    w.signer("alice", &server).approve(&id).await?;
    let b = w.signer("bob", &server).approve(&id).await?;
    assert_eq!(b["status"], "APPROVED", "{b}");
    let done = mcp.execute(&id, &hash).await?;
    done.expect("SUCCEEDED", false);
    let again = mcp.execute(&id, &hash).await?;
    again.expect("ALREADY_EXECUTED_NO_REPLAY", true);
    // The receipt verifies offline against the keyring, attestation included.
    let receipt = w.path().join("receipt.json");
    w.signer("alice", &server).receipt(&id, &receipt).await?;
    let v = w.signer("alice", &server).verify(&receipt, &w.keys).await?;
    assert!(v.status.success(), "{v}");
    // The audit log, read straight from the database while the server runs.
    let ok = audit_verify(&db)?;
    assert!(ok.starts_with("ok: 6 audit entries, chain intact"), "{ok}");
    let out = approval_server(&[
        "audit".as_ref(),
        "export".as_ref(),
        "--store".as_ref(),
        db.url.as_ref(),
    ])?;
    assert!(out.status.success(), "{out}");
    let kinds: Vec<String> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).map(|v| v["kind"].to_string()))
        .collect::<Result<_, _>>()?;
    assert_eq!(kinds.len(), 6, "{}", out.stdout);
    Ok(())
}

#[tokio::test]
async fn hundred_concurrent_executes_over_three_instances_run_once() -> anyhow::Result<()> {
    let Some(db) = FreshDb::new()? else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    let witness = w.path().join("witness.txt");
    let script = w.script(
        "effect.sh",
        "echo \"effect of $APPROVAL_PROPOSAL_ID\" >> \"$1\"\nsleep 0.3\n",
    )?;
    w.write_policy("deploy.run.toml", &command_policy(&script, &[&witness]))?;
    let servers = [
        db.start(&w, "a", &[])?,
        db.start(&w, "b", &[])?,
        db.start(&w, "c", &[])?,
    ];
    // One deployment: one server_id and one identity key on every instance.
    let mut ids = Vec::new();
    for s in &servers {
        let h = s.healthz().await?;
        ids.push((h["server_id"].clone(), h["server_key"].clone()));
    }
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    let mcps = [
        servers[0].mcp().await?,
        servers[1].mcp().await?,
        servers[2].mcp().await?,
    ];
    let prep = mcps[0]
        .prepare("deploy.run", json!({"tag": "v1"}), "deploy v1")
        .await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    // Decisions on two other instances.
    w.signer("alice", &servers[1]).approve(&id).await?;
    w.signer("bob", &servers[2]).approve(&id).await?;
    let mut calls = Vec::new();
    for i in 0..100 {
        let (mcp, id, hash) = (mcps[i % 3].clone(), id.clone(), hash.clone());
        calls.push(tokio::spawn(async move { mcp.execute(&id, &hash).await }));
    }
    let mut codes = std::collections::BTreeMap::<String, usize>::new();
    for c in calls {
        let r = c.await??;
        *codes.entry(r.code().to_owned()).or_default() += 1;
    }
    assert_eq!(codes.get("SUCCEEDED"), Some(&1), "{codes:?}");
    assert_eq!(
        codes.get("SUCCEEDED").copied().unwrap_or(0)
            + codes.get("EXECUTION_IN_PROGRESS").copied().unwrap_or(0)
            + codes
                .get("ALREADY_EXECUTED_NO_REPLAY")
                .copied()
                .unwrap_or(0),
        100,
        "{codes:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&witness)?,
        format!("effect of {id}\n"),
        "the command ran other than once"
    );
    // Every instance sees the one outcome; the chain has no gap or fork.
    for m in &mcps {
        m.status(&id).await?.expect("SUCCEEDED", false);
    }
    let ok = audit_verify(&db)?;
    assert!(ok.starts_with("ok: "), "{ok}");
    Ok(())
}

#[tokio::test]
async fn a_decision_on_one_instance_wakes_a_long_poll_on_another() -> anyhow::Result<()> {
    let Some(db) = FreshDb::new()? else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("note.write.toml", NOTE_POLICY)?;
    let a = db.start(&w, "a", &[])?;
    let b = db.start(&w, "b", &[])?;
    let mcp_b = b.mcp().await?;
    let prep = mcp_b
        .prepare("note.write", json!({"text": "wake me"}), "a note")
        .await?;
    let id = prep.proposal_id();
    // The long-poll on B waits up to 20 s; the decision on A must end it within 1 s.
    // (No earlier change to this proposal was made on A, whose late event could end
    // the long-poll first.)
    let poll = {
        let (mcp, id) = (mcp_b.clone(), id.clone());
        tokio::spawn(async move {
            let r = mcp
                .call_tool(
                    "approval_status",
                    json!({"proposal_id": id, "wait_seconds": 20}),
                )
                .await;
            (r, Instant::now())
        })
    };
    // Give the long-poll time to be waiting before deciding.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!poll.is_finished(), "the long-poll ended before any change");
    let decided = Instant::now();
    let d = w.signer("alice", &a).approve(&id).await?;
    assert_eq!(d["status"], "PENDING", "{d}");
    let (r, woke) = poll.await?;
    let r = r?;
    assert_eq!(r.approvals(), vec!["alice".to_owned()], "{}", r.structured);
    let late = woke.saturating_duration_since(decided);
    assert!(
        late < Duration::from_secs(1),
        "woke {late:?} after the decision"
    );
    Ok(())
}

#[tokio::test]
async fn sigkill_mid_execution_ends_outcome_unknown_by_lease_on_a_survivor() -> anyhow::Result<()> {
    let Some(db) = FreshDb::new()? else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    let witness = w.path().join("witness.txt");
    let pidfile = w.path().join("effect.pid");
    let script = w.script(
        "slow-effect.sh",
        "echo $$ > \"$2\"\necho \"effect of $APPROVAL_PROPOSAL_ID\" >> \"$1\"\nexec sleep 30\n",
    )?;
    let _cleanup = KillOnDrop(pidfile.clone());
    w.write_policy(
        "deploy.run.toml",
        &command_policy(&script, &[&witness, &pidfile]),
    )?;
    let lease = ["--claim-lease", "2"];
    let mut a = db.start(&w, "a", &lease)?;
    let b = db.start(&w, "b", &lease)?;
    let (mcp_a, mcp_b) = (a.mcp().await?, b.mcp().await?);
    let prep = mcp_b
        .prepare("deploy.run", json!({"tag": "v2"}), "deploy v2")
        .await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    w.signer("alice", &b).approve(&id).await?;
    w.signer("bob", &b).approve(&id).await?;
    let bg = {
        let (mcp, id, hash) = (mcp_a.clone(), id.clone(), hash.clone());
        tokio::spawn(async move { mcp.execute(&id, &hash).await })
    };
    poll_until(
        "the effect's witness line",
        Duration::from_secs(10),
        || async {
            Ok(std::fs::read_to_string(&witness)
                .ok()
                .filter(|t| t.ends_with('\n'))
                .map(|_| ()))
        },
    )
    .await?;
    // The lease is renewed while A runs it: well past one lease, B leaves it alone,
    // and an instance starting now (whose start-up on sled would end every EXECUTING
    // record) leaves A's live claim alone too.
    let c = db.start(&w, "c", &lease)?;
    let mcp_c = c.mcp().await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let st = mcp_b.status(&id).await?;
    assert_eq!(st.status(), "EXECUTING", "{}", st.structured);
    let st = mcp_c.status(&id).await?;
    assert_eq!(
        st.status(),
        "EXECUTING",
        "an instance that started during the execution ended it: {}",
        st.structured
    );
    drop(mcp_c);
    drop(c);
    mcp_b
        .execute(&id, &hash)
        .await?
        .expect("EXECUTION_IN_PROGRESS", true);
    let killed = Instant::now();
    a.kill();
    assert!(bg.await?.is_err(), "the execute call survived a SIGKILL");
    let st = mcp_b
        .wait_status(&id, "OUTCOME_UNKNOWN", Duration::from_secs(15))
        .await?;
    assert_eq!(
        st.structured["result"]["outcome"], "UNKNOWN",
        "{}",
        st.structured
    );
    let took = killed.elapsed();
    assert!(
        took >= Duration::from_millis(500),
        "ended before the lease could run out: {took:?}"
    );
    let again = mcp_b.execute(&id, &hash).await?;
    again.expect("ALREADY_EXECUTED_NO_REPLAY", true);
    assert_eq!(
        std::fs::read_to_string(&witness)?,
        format!("effect of {id}\n"),
        "the command ran again"
    );
    // A human resolves it.
    let r = w.signer("bob", &b).resolve(&id, "succeeded").await?;
    assert_eq!(r["status"], "SUCCEEDED", "{r}");
    let ok = audit_verify(&db)?;
    assert!(ok.starts_with("ok: "), "{ok}");
    Ok(())
}

/// Lines a child process prints, each with when it arrived.
fn lines_of(
    r: impl std::io::Read + Send + 'static,
) -> std::sync::mpsc::Receiver<(String, Instant)> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if tx.send((line, Instant::now())).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for a line containing `needle`; returns when it arrived.
fn wait_line(
    rx: &std::sync::mpsc::Receiver<(String, Instant)>,
    needle: &str,
    timeout: Duration,
) -> anyhow::Result<Instant> {
    let until = Instant::now() + timeout;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((line, at)) if line.contains(needle) => return Ok(at),
            Ok(_) => continue,
            Err(_) => anyhow::bail!("no line with {needle:?} within {timeout:?}"),
        }
    }
}

#[tokio::test]
async fn a_proposal_on_one_instance_reaches_a_watch_stream_on_another() -> anyhow::Result<()> {
    let Some(db) = FreshDb::new()? else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("note.write.toml", NOTE_POLICY)?;
    let a = db.start(&w, "a", &[])?;
    let b = db.start(&w, "b", &[])?;
    let mut watch = std::process::Command::new(approval_e2e::bin("signer-cli"))
        .env("XDG_CONFIG_HOME", w.path().join("xdg-config"))
        .env_remove("SIGNER_SERVER")
        .env_remove("SIGNER_KEY")
        .arg("--server")
        .arg(&b.api_url)
        .arg("--key")
        .arg(w.key_file("alice"))
        .arg("watch")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let out = lines_of(watch.stdout.take().expect("piped"));
    let err = lines_of(watch.stderr.take().expect("piped"));
    let _reap = Reap(watch);
    wait_line(&err, "signer-cli: watching", Duration::from_secs(20))?;
    // A first proposal on B: once printed, watch has read its pending list and
    // is on the stream.
    let first = b
        .mcp()
        .await?
        .prepare("note.write", json!({"text": "first"}), "first")
        .await?;
    wait_line(&out, &first.proposal_id(), Duration::from_secs(10))?;
    // Proposed on A: it reaches B's stream only through the database's NOTIFY.
    let second = a
        .mcp()
        .await?
        .prepare("note.write", json!({"text": "second"}), "second")
        .await?;
    let proposed = Instant::now();
    let seen = wait_line(&out, &second.proposal_id(), Duration::from_secs(10))?;
    let late = seen.saturating_duration_since(proposed);
    assert!(
        late < Duration::from_secs(1),
        "printed {late:?} after the proposal"
    );
    Ok(())
}
