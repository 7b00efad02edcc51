//! The whole path, as a team would use it: keys from `signer-cli keygen`, a 2-of-3
//! policy that also requires carol, a proposal over MCP, three signatures from
//! signer-cli, one execution, a refused replay, and a receipt verified offline.

use approval_e2e::{approval_server, McpClient, World};
use serde_json::{json, Value};
use std::time::Duration;

const NOTE_POLICY: &str = r#"
kind = "note.write"
description = "Write a note into the sandbox"
quorum = 2
approvers = ["alice", "bob", "carol"]
vetoes = 1
ttl = "30m"
execute_within = "10m"

[[require]]
group = ["carol"]
count = 1

[payload_schema]
type = "object"
required = ["text"]
additionalProperties = false
[payload_schema.properties.text]
type = "string"

[executor]
type = "note"
"#;

#[tokio::test]
async fn full_round_trip_two_of_three_with_carol_required() -> anyhow::Result<()> {
    let world = World::new(&["alice", "bob", "carol"])?;
    world.write_policy("note.write.toml", NOTE_POLICY)?;
    let server = world.start()?;
    let health = server.healthz().await?;
    assert_eq!(health["status"], "ok", "{health}");
    let mcp = server.mcp().await?;

    let text = "Ship it: release 1.2.3 \u{2014} signed by humans";
    let prep = mcp
        .prepare(
            "note.write",
            json!({"text": text}),
            "write the release note",
        )
        .await?;
    prep.expect("PENDING_QUORUM", false);
    assert_eq!(prep.status(), "PENDING");
    assert!(!prep.executable());
    let id = prep.proposal_id();
    let hash = prep.preview_sha256();
    assert!(id.starts_with("p-"), "{}", prep.structured);
    assert_eq!(hash.len(), 64, "{}", prep.structured);
    let preview = &prep.structured["preview"];
    assert_eq!(preview["proposal_id"], json!(id));
    assert_eq!(preview["payload"], json!({"text": text}));
    assert_eq!(preview["requested_by"], "local");
    assert_eq!(preview["kind"], "note.write");

    // Execute before quorum is refused and changes nothing.
    let early = mcp.execute(&id, &hash).await?;
    early.expect("PENDING_QUORUM", true);
    assert!(early.retry_allowed(), "{}", early.structured);

    let alice = world.signer("alice", &server);
    let bob = world.signer("bob", &server);
    let carol = world.signer("carol", &server);

    let a = alice.approve(&id).await?;
    assert_eq!(a["status"], "PENDING", "{a}");
    assert_eq!(
        a["preview_sha256"],
        json!(hash),
        "signer-cli signed another hash: {a}"
    );
    let st = mcp.status(&id).await?;
    st.expect("PENDING_QUORUM", false);
    assert_eq!(st.approvals(), vec!["alice"]);

    // Two approvals reach the count, but the carol group is still missing.
    let b = bob.approve(&id).await?;
    assert_eq!(b["status"], "PENDING", "{b}");
    let st = mcp.status(&id).await?;
    st.expect("PENDING_QUORUM", false);
    assert!(!st.executable());
    let mut have = st.approvals();
    have.sort();
    assert_eq!(have, vec!["alice", "bob"]);
    let missing = &st.structured["required"]["missing_groups"];
    assert_eq!(missing[0]["group"], json!(["carol"]), "{}", st.structured);
    let still = mcp.execute(&id, &hash).await?;
    still.expect("PENDING_QUORUM", true);

    let c = carol.approve(&id).await?;
    assert_eq!(c["status"], "APPROVED", "{c}");
    let st = mcp.status(&id).await?;
    st.expect("QUORUM_REACHED", false);
    assert_eq!(st.status(), "APPROVED");
    assert!(st.executable(), "{}", st.structured);

    // A wrong hash is refused without using up the approval.
    let wrong = mcp.execute(&id, &"0".repeat(64)).await?;
    wrong.expect("PREVIEW_MISMATCH", true);
    assert_eq!(mcp.status(&id).await?.status(), "APPROVED");

    let done = mcp.execute(&id, &hash).await?;
    done.expect("SUCCEEDED", false);
    assert_eq!(done.status(), "SUCCEEDED");
    assert_eq!(done.structured["result"]["outcome"], "SUCCEEDED");
    let note = world.data.join("sandbox").join(format!("{id}.txt"));
    assert_eq!(
        std::fs::read_to_string(&note).map_err(|e| anyhow::anyhow!("{}: {e}", note.display()))?,
        text
    );

    let again = mcp.execute(&id, &hash).await?;
    again.expect("ALREADY_EXECUTED_NO_REPLAY", true);
    assert!(!again.retry_allowed(), "{}", again.structured);
    assert_eq!(again.status(), "SUCCEEDED");
    // Still exactly one note.
    let notes = std::fs::read_dir(world.data.join("sandbox"))?.count();
    assert_eq!(notes, 1);

    let listed = mcp.list(Some("SUCCEEDED")).await?;
    let ids: Vec<&str> = listed.structured["proposals"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["proposal_id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, vec![id.as_str()], "{}", listed.structured);

    // The receipt, fetched by signer-cli and verified offline against the keyring.
    let receipt_path = world.path().join("receipt.json");
    carol.receipt(&id, &receipt_path).await?;
    let receipt: Value = serde_json::from_str(&std::fs::read_to_string(&receipt_path)?)?;
    assert_eq!(receipt["preview_sha256"], json!(hash));
    let verified = carol.verify(&receipt_path, &world.keys).await?;
    assert!(verified.status.success(), "verify failed: {verified}");
    let v = verified.json()?;
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["proposal_id"], json!(id));
    let mut by: Vec<String> = serde_json::from_value(v["approved_by"].clone())?;
    by.sort();
    assert_eq!(by, vec!["alice", "bob", "carol"]);

    // The same receipt against a keyring where carol's key is someone else's must fail.
    let other = World::new(&["alice", "bob", "carol"])?;
    let refused = carol.verify(&receipt_path, &other.keys).await?;
    assert!(
        !refused.status.success(),
        "a receipt verified against the wrong keys: {refused}"
    );

    // The audit log tells the same story, chain intact (the store is free once the server is gone).
    drop(server);
    let data = world.data.as_os_str();
    let verify = approval_server(&["audit".as_ref(), "verify".as_ref(), "--data".as_ref(), data])?;
    assert!(verify.status.success(), "audit verify: {verify}");
    let export = approval_server(&["audit".as_ref(), "export".as_ref(), "--data".as_ref(), data])?;
    assert!(export.status.success(), "audit export: {export}");
    let mut kinds = Vec::new();
    for line in export.stdout.lines() {
        let e: Value = serde_json::from_str(line)?;
        if e["proposal_id"] == json!(id) {
            kinds.push(e["kind"].as_str().unwrap_or_default().to_owned());
        }
    }
    assert_eq!(
        kinds,
        vec![
            "proposed",
            "decision",
            "decision",
            "decision",
            "approved",
            "executing",
            "finished"
        ],
        "{}",
        export.stdout
    );
    Ok(())
}

#[tokio::test]
async fn concurrent_executes_run_the_effect_once() -> anyhow::Result<()> {
    let world = World::new(&["alice", "bob"])?;
    let witness = world.path().join("witness.txt");
    let script = world.script(
        "effect.sh",
        "echo \"ran $APPROVAL_PROPOSAL_ID\" >> \"$1\"\n",
    )?;
    world.write_policy(
        "deploy.run.toml",
        &format!(
            r#"
kind = "deploy.run"
quorum = 2
approvers = ["alice", "bob"]
ttl = "30m"
execute_within = "10m"
[executor]
type = "command"
program = "{}"
args = ["{}"]
timeout = "20s"
"#,
            script.display(),
            witness.display()
        ),
    )?;
    let server = world.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp.prepare("deploy.run", json!({"tag": "v1"}), "").await?;
    prep.expect("PENDING_QUORUM", false);
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    world.signer("alice", &server).approve(&id).await?;
    world.signer("bob", &server).approve(&id).await?;
    mcp.wait_status(&id, "APPROVED", Duration::from_secs(5))
        .await?;

    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (mcp, id, hash) = (mcp.clone(), id.clone(), hash.clone());
        tasks.spawn(async move { mcp.execute(&id, &hash).await });
    }
    let mut codes = Vec::new();
    while let Some(r) = tasks.join_next().await {
        codes.push(r??.code().to_owned());
    }
    codes.sort();
    let succeeded = codes.iter().filter(|c| *c == "SUCCEEDED").count();
    assert_eq!(succeeded, 1, "exactly one execute must run: {codes:?}");
    assert!(
        codes.iter().all(|c| c == "SUCCEEDED"
            || c == "ALREADY_EXECUTED_NO_REPLAY"
            || c == "EXECUTION_IN_PROGRESS"),
        "{codes:?}"
    );
    let lines = std::fs::read_to_string(&witness)?;
    assert_eq!(
        lines,
        format!("ran {id}\n"),
        "the effect ran more than once"
    );
    mcp.wait_status(&id, "SUCCEEDED", Duration::from_secs(5))
        .await?;
    Ok(())
}

#[tokio::test]
async fn status_long_poll_wakes_on_a_decision() -> anyhow::Result<()> {
    let world = World::new(&["alice", "bob", "carol"])?;
    world.write_policy("note.write.toml", NOTE_POLICY)?;
    let server = world.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp
        .prepare("note.write", json!({"text": "wait for me"}), "")
        .await?;
    let id = prep.proposal_id();

    let started = std::time::Instant::now();
    let waiter = {
        let (mcp, id) = (mcp.clone(), id.clone());
        tokio::spawn(async move {
            mcp.call_tool(
                "approval_status",
                json!({"proposal_id": id, "wait_seconds": 25}),
            )
            .await
        })
    };
    // Give the long-poll a head start so it is waiting before the decision lands
    // (otherwise it would wait for a *further* change and the test would be racy).
    tokio::time::sleep(Duration::from_millis(300)).await;
    world.signer("carol", &server).approve(&id).await?;
    let woke = waiter.await??;
    let waited = started.elapsed();
    woke.expect("PENDING_QUORUM", false);
    assert_eq!(woke.approvals(), vec!["carol"], "{}", woke.structured);
    assert!(
        waited < Duration::from_secs(20),
        "the long-poll did not wake on the decision: {waited:?}"
    );
    Ok(())
}
