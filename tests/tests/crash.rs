//! The server dies while the action runs. On restart the proposal is
//! OUTCOME_UNKNOWN, the action is never run again, and a human settles it with a
//! signed `signer-cli resolve`.

use approval_e2e::{poll_until, McpClient, World};
use serde_json::json;
use std::time::Duration;

/// Kills a process we started (the executor's `sleep`, orphaned by the crash) by pid.
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

#[tokio::test]
async fn crash_during_execution_is_outcome_unknown_and_never_rerun() -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob"])?;
    let witness = w.path().join("witness.txt");
    let pidfile = w.path().join("effect.pid");
    // Records its pid (so the test can clean up the orphan), leaves one line of
    // evidence that the effect happened, then hangs as a slow action would.
    let script = w.script(
        "slow-effect.sh",
        "echo $$ > \"$2\"\necho \"effect of $APPROVAL_PROPOSAL_ID\" >> \"$1\"\nexec sleep 30\n",
    )?;
    let _cleanup = KillOnDrop(pidfile.clone());
    w.write_policy(
        "deploy.run.toml",
        &format!(
            r#"
kind = "deploy.run"
description = "Deploy (slow)"
quorum = 2
approvers = ["alice", "bob"]
ttl = "30m"
execute_within = "10m"
[executor]
type = "command"
program = "{}"
args = ["{}", "{}"]
timeout = "60s"
"#,
            script.display(),
            witness.display(),
            pidfile.display()
        ),
    )?;

    let mut server = w.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp
        .prepare("deploy.run", json!({"tag": "v2"}), "deploy v2")
        .await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    w.signer("alice", &server).approve(&id).await?;
    w.signer("bob", &server).approve(&id).await?;
    mcp.wait_status(&id, "APPROVED", Duration::from_secs(5))
        .await?;

    // Execute in the background: it will never get its answer.
    let bg = {
        let (mcp, id, hash) = (mcp.clone(), id.clone(), hash.clone());
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
    let st = mcp.status(&id).await?;
    st.expect("EXECUTION_IN_PROGRESS", false);
    assert_eq!(st.status(), "EXECUTING");
    let during = mcp.execute(&id, &hash).await?;
    during.expect("EXECUTION_IN_PROGRESS", true);

    server.kill();
    let lost = bg.await?;
    assert!(
        lost.is_err(),
        "the execute call survived a SIGKILL: {lost:?}"
    );

    let server = w.start()?;
    let mcp = server.mcp().await?;
    let st = mcp.status(&id).await?;
    st.expect("OUTCOME_UNKNOWN", false);
    assert_eq!(st.status(), "OUTCOME_UNKNOWN");
    assert!(!st.executable());
    assert!(!st.retry_allowed());
    assert_eq!(
        st.structured["result"]["outcome"], "UNKNOWN",
        "{}",
        st.structured
    );
    let expected = format!("effect of {id}\n");
    assert_eq!(std::fs::read_to_string(&witness)?, expected);

    let again = mcp.execute(&id, &hash).await?;
    again.expect("ALREADY_EXECUTED_NO_REPLAY", true);
    assert!(!again.retry_allowed());
    assert_eq!(again.status(), "OUTCOME_UNKNOWN");
    assert_eq!(
        std::fs::read_to_string(&witness)?,
        expected,
        "the effect ran again after the restart"
    );

    // A human checks what happened and signs the outcome.
    let r = w.signer("bob", &server).resolve(&id, "succeeded").await?;
    assert_eq!(r["status"], "SUCCEEDED", "{r}");
    let st = mcp.status(&id).await?;
    st.expect("SUCCEEDED", false);
    let after = mcp.execute(&id, &hash).await?;
    after.expect("ALREADY_EXECUTED_NO_REPLAY", true);
    assert_eq!(std::fs::read_to_string(&witness)?, expected);

    // A second resolve is refused: the outcome is settled.
    let twice = w
        .signer("alice", &server)
        .run(&["resolve", &id, "--outcome", "failed", "--yes"])
        .await?;
    assert!(
        !twice.status.success(),
        "a settled outcome was resolved again: {twice}"
    );
    assert_eq!(mcp.status(&id).await?.status(), "SUCCEEDED");
    Ok(())
}
