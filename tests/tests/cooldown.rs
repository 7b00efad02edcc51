//! Issue #31, items 1 and 10, against the real binaries: a policy with
//! `cooldown = "3s"`. During the cooldown the agent's execute is refused
//! COOLING_DOWN (and consumes nothing), a revoke or a veto by signer-cli wins, a wait
//! started in it answers when it ends, and the execute after it runs once.

use approval_e2e::{McpClient, World};
use serde_json::json;
use std::time::{Duration, Instant};

const COOLED_POLICY: &str = r#"
kind = "note.write"
description = "Write a note into the sandbox"
quorum = 2
approvers = ["alice", "bob", "carol"]
vetoes = 1
ttl = "30m"
execute_within = "10m"
cooldown = "3s"

[payload_schema]
type = "object"
required = ["text"]

[executor]
type = "note"
"#;

#[tokio::test]
async fn a_cooldown_refuses_the_execute_until_it_ends_and_a_revoke_during_it_wins(
) -> anyhow::Result<()> {
    let world = World::new(&["alice", "bob", "carol"])?;
    world.write_policy("note.write.toml", COOLED_POLICY)?;
    let server = world.start()?;
    let mcp = server.mcp().await?;
    let (alice, bob, carol) = (
        world.signer("alice", &server),
        world.signer("bob", &server),
        world.signer("carol", &server),
    );
    let approved = |text: &'static str| {
        let (mcp, alice, carol) = (mcp.clone(), alice.clone(), carol.clone());
        async move {
            let prep = mcp.prepare("note.write", json!({"text": text}), "").await?;
            assert_eq!(
                prep.structured["preview"]["cooldown"], "3s",
                "{}",
                prep.structured
            );
            let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
            alice.approve(&id).await?;
            carol.approve(&id).await?;
            anyhow::Ok((id, hash))
        }
    };

    // 1. Refused during the cooldown; a wait started in it answers when it ends;
    //    the execute after it runs, once.
    let (id, hash) = approved("after the cooldown").await?;
    let shown = bob.ok(&["show", &id]).await?;
    assert!(
        shown.stdout.contains("cooldown") && shown.stdout.contains("cooling down until"),
        "{shown}"
    );
    let refused = mcp.execute(&id, &hash).await?;
    refused.expect("COOLING_DOWN", true);
    assert!(refused.retry_allowed(), "{}", refused.structured);
    assert_eq!(refused.status(), "APPROVED");
    let started = Instant::now();
    let woke = mcp
        .call_tool(
            "approval_status",
            json!({"proposal_id": id, "wait_seconds": 30}),
        )
        .await?;
    let waited = started.elapsed();
    woke.expect("QUORUM_REACHED", false);
    assert!(woke.executable(), "{}", woke.structured);
    assert!(
        waited < Duration::from_secs(5),
        "the wait did not end with the cooldown: {waited:?}"
    );
    mcp.execute(&id, &hash).await?.expect("SUCCEEDED", false);
    mcp.execute(&id, &hash)
        .await?
        .expect("ALREADY_EXECUTED_NO_REPLAY", true);

    // 2. A revoke during the cooldown wins over an execute after it.
    let (id, hash) = approved("revoked in the cooldown").await?;
    mcp.execute(&id, &hash).await?.expect("COOLING_DOWN", true);
    let revoked = bob.revoke(&id).await?;
    assert_eq!(revoked["status"], "REVOKED", "{revoked}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    mcp.execute(&id, &hash).await?.expect("REVOKED", true);

    // 3. A veto during the cooldown ends it too.
    let (id, hash) = approved("vetoed in the cooldown").await?;
    let rejected = bob.reject(&id, "not this one").await?;
    assert_eq!(rejected["status"], "REJECTED", "{rejected}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    mcp.execute(&id, &hash).await?.expect("REJECTED", true);
    Ok(())
}
