//! Every way a proposal can end without running, and a restart in the middle of a
//! quorum: veto, expiry, withdraw, revoke, policy change on SIGHUP, restart.

use approval_e2e::{approval_server, poll_until, McpClient, World};
use serde_json::json;
use std::time::Duration;

/// A 2-of-3 note policy with a chosen ttl and a description (edit it to change the policy).
fn policy(ttl: &str, description: &str) -> String {
    format!(
        r#"
kind = "note.write"
description = "{description}"
quorum = 2
approvers = ["alice", "bob", "carol"]
vetoes = 1
ttl = "{ttl}"
execute_within = "10m"
[executor]
type = "note"
"#
    )
}

fn world(ttl: &str) -> anyhow::Result<World> {
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy("note.write.toml", &policy(ttl, "Write a note"))?;
    Ok(w)
}

fn note(text: &str) -> serde_json::Value {
    json!({"text": text})
}

fn sandbox_is_empty(w: &World) -> bool {
    std::fs::read_dir(w.data.join("sandbox"))
        .map(|d| d.count() == 0)
        .unwrap_or(true)
}

#[tokio::test]
async fn one_rejection_vetoes_and_execute_is_refused() -> anyhow::Result<()> {
    let w = world("30m")?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp.prepare("note.write", note("veto me"), "").await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());

    w.signer("alice", &server).approve(&id).await?;
    let r = w.signer("bob", &server).reject(&id, "not today").await?;
    assert_eq!(r["status"], "REJECTED", "{r}");

    let st = mcp.status(&id).await?;
    st.expect("REJECTED", false);
    assert_eq!(st.rejections(), vec!["bob"]);
    assert!(!st.executable());
    assert!(!st.retry_allowed());

    let ex = mcp.execute(&id, &hash).await?;
    ex.expect("REJECTED", true);
    assert!(!ex.retry_allowed(), "{}", ex.structured);

    // Approving a rejected proposal is refused by signer-cli and changes nothing.
    let late = w
        .signer("carol", &server)
        .run(&["approve", &id, "--yes"])
        .await?;
    assert!(
        !late.status.success(),
        "approve after veto succeeded: {late}"
    );
    let st = mcp.status(&id).await?;
    assert_eq!(st.status(), "REJECTED");
    assert_eq!(st.approvals(), vec!["alice"]);
    assert!(sandbox_is_empty(&w));
    Ok(())
}

#[tokio::test]
async fn ttl_expiry_ends_the_proposal() -> anyhow::Result<()> {
    let w = world("2s")?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp.prepare("note.write", note("too slow"), "").await?;
    prep.expect("PENDING_QUORUM", false);
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    // No approval before the deadline: with whole-second timestamps a 2 s ttl can
    // leave little more than 1 s, too tight for a signer-cli run on a loaded CI machine.

    let st = mcp
        .wait_status(&id, "EXPIRED", Duration::from_secs(8))
        .await?;
    st.expect("EXPIRED", false);
    assert!(!st.executable());
    assert!(!st.retry_allowed());

    let ex = mcp.execute(&id, &hash).await?;
    ex.expect("EXPIRED", true);
    assert!(!ex.retry_allowed());

    // An approval after expiry is refused and does not revive it.
    for name in ["alice", "bob"] {
        let late = w
            .signer(name, &server)
            .run(&["approve", &id, "--yes"])
            .await?;
        assert!(
            !late.status.success(),
            "approve after expiry succeeded: {late}"
        );
    }
    let st = mcp.status(&id).await?;
    assert_eq!(st.status(), "EXPIRED");
    assert!(st.approvals().is_empty(), "{}", st.structured);
    assert!(sandbox_is_empty(&w));
    Ok(())
}

#[tokio::test]
async fn withdraw_ends_a_pending_proposal() -> anyhow::Result<()> {
    let w = world("30m")?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp.prepare("note.write", note("never mind"), "").await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    w.signer("alice", &server).approve(&id).await?;

    let wd = mcp.withdraw(&id).await?;
    wd.expect("WITHDRAWN", false);
    assert_eq!(wd.status(), "WITHDRAWN");

    let again = mcp.withdraw(&id).await?;
    again.expect("WITHDRAWN", true);

    let late = w
        .signer("carol", &server)
        .run(&["approve", &id, "--yes"])
        .await?;
    assert!(
        !late.status.success(),
        "approve after withdraw succeeded: {late}"
    );
    let st = mcp.status(&id).await?;
    st.expect("WITHDRAWN", false);
    let ex = mcp.execute(&id, &hash).await?;
    ex.expect("WITHDRAWN", true);

    // Withdraw is for PENDING only: an approved proposal stays approved.
    let p2 = mcp.prepare("note.write", note("keep me"), "").await?;
    let id2 = p2.proposal_id();
    w.signer("alice", &server).approve(&id2).await?;
    w.signer("bob", &server).approve(&id2).await?;
    let refused = mcp.withdraw(&id2).await?;
    assert!(
        refused.is_error,
        "withdraw of an APPROVED proposal: {}",
        refused.structured
    );
    assert_eq!(mcp.status(&id2).await?.status(), "APPROVED");

    let unknown = mcp.withdraw("p-00000000000000000000000000000000").await?;
    unknown.expect("UNKNOWN_PROPOSAL", true);
    assert!(sandbox_is_empty(&w));
    Ok(())
}

#[tokio::test]
async fn revoke_after_quorum_blocks_execute() -> anyhow::Result<()> {
    let w = world("30m")?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp.prepare("note.write", note("revoke me"), "").await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    w.signer("alice", &server).approve(&id).await?;
    let b = w.signer("bob", &server).approve(&id).await?;
    assert_eq!(b["status"], "APPROVED", "{b}");
    assert!(mcp.status(&id).await?.executable());

    let r = w.signer("alice", &server).revoke(&id).await?;
    assert_eq!(r["status"], "REVOKED", "{r}");
    let st = mcp.status(&id).await?;
    st.expect("REVOKED", false);
    assert!(!st.executable());

    let ex = mcp.execute(&id, &hash).await?;
    ex.expect("REVOKED", true);
    assert!(!ex.retry_allowed());
    assert!(sandbox_is_empty(&w));
    Ok(())
}

#[tokio::test]
async fn policy_edit_and_sighup_void_open_proposals() -> anyhow::Result<()> {
    let w = world("30m")?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let pending = mcp.prepare("note.write", note("pending"), "").await?;
    let approved = mcp.prepare("note.write", note("approved"), "").await?;
    w.signer("alice", &server)
        .approve(&approved.proposal_id())
        .await?;
    w.signer("bob", &server)
        .approve(&approved.proposal_id())
        .await?;
    assert_eq!(
        mcp.status(&approved.proposal_id()).await?.status(),
        "APPROVED"
    );

    // The same kind, a different policy (the description is part of it).
    w.write_policy("note.write.toml", &policy("30m", "Write a note (edited)"))?;
    server.sighup()?;

    let st = mcp
        .wait_status(
            &pending.proposal_id(),
            "POLICY_CHANGED",
            Duration::from_secs(10),
        )
        .await?;
    st.expect("POLICY_CHANGED", false);
    assert!(!st.executable());
    let st = mcp
        .wait_status(
            &approved.proposal_id(),
            "POLICY_CHANGED",
            Duration::from_secs(10),
        )
        .await?;
    assert!(!st.executable());

    let ex = mcp
        .execute(&approved.proposal_id(), &approved.preview_sha256())
        .await?;
    ex.expect("POLICY_CHANGED", true);
    assert!(!ex.retry_allowed());
    let ex = mcp
        .execute(&pending.proposal_id(), &pending.preview_sha256())
        .await?;
    ex.expect("POLICY_CHANGED", true);

    let late = w
        .signer("carol", &server)
        .run(&["approve", &pending.proposal_id(), "--yes"])
        .await?;
    assert!(
        !late.status.success(),
        "approve under an old policy succeeded: {late}"
    );
    assert_eq!(
        mcp.status(&pending.proposal_id()).await?.status(),
        "POLICY_CHANGED"
    );

    // New proposals are governed by the new policy and work.
    let fresh = mcp.prepare("note.write", note("fresh"), "").await?;
    fresh.expect("PENDING_QUORUM", false);
    assert_ne!(
        fresh.structured["preview"]["policy_sha256"],
        pending.structured["preview"]["policy_sha256"]
    );
    w.signer("alice", &server)
        .approve(&fresh.proposal_id())
        .await?;
    w.signer("carol", &server)
        .approve(&fresh.proposal_id())
        .await?;
    mcp.execute(&fresh.proposal_id(), &fresh.preview_sha256())
        .await?
        .expect("SUCCEEDED", false);
    Ok(())
}

#[tokio::test]
async fn broken_policy_on_sighup_keeps_the_old_one() -> anyhow::Result<()> {
    let w = world("30m")?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp.prepare("note.write", note("survives"), "").await?;
    let id = prep.proposal_id();

    w.write_policy(
        "note.write.toml",
        "kind = \"note.write\"\nquorum = \"two\"\n",
    )?;
    server.sighup()?;
    // Wait until the server has logged its refusal, then check nothing changed.
    poll_until(
        "the reload refusal in the log",
        Duration::from_secs(10),
        || async { Ok(server.log().contains("reload refused").then_some(())) },
    )
    .await?;
    assert_eq!(mcp.status(&id).await?.status(), "PENDING");
    w.signer("alice", &server).approve(&id).await?;
    w.signer("bob", &server).approve(&id).await?;
    mcp.execute(&id, &prep.preview_sha256())
        .await?
        .expect("SUCCEEDED", false);
    Ok(())
}

#[tokio::test]
async fn signatures_before_a_restart_still_count() -> anyhow::Result<()> {
    let w = world("30m")?;
    let mut server = w.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp
        .prepare("note.write", note("across a restart"), "")
        .await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    let a = w.signer("alice", &server).approve(&id).await?;
    assert_eq!(a["status"], "PENDING");

    // A crash, not a clean stop: the approval must already be on disk.
    server.kill();
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let st = mcp.status(&id).await?;
    st.expect("PENDING_QUORUM", false);
    assert_eq!(st.approvals(), vec!["alice"]);
    assert_eq!(
        st.preview_sha256(),
        hash,
        "the preview changed across a restart"
    );

    let b = w.signer("bob", &server).approve(&id).await?;
    assert_eq!(b["status"], "APPROVED", "{b}");
    let st = mcp.status(&id).await?;
    st.expect("QUORUM_REACHED", false);
    let mut have = st.approvals();
    have.sort();
    assert_eq!(have, vec!["alice", "bob"]);
    mcp.execute(&id, &hash).await?.expect("SUCCEEDED", false);
    Ok(())
}

#[tokio::test]
async fn approval_window_expiry_ends_an_approved_proposal() -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy(
        "note.write.toml",
        &policy("30m", "Write a note")
            .replace("execute_within = \"10m\"", "execute_within = \"2s\""),
    )?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let prep = mcp.prepare("note.write", note("run me soon"), "").await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    w.signer("alice", &server).approve(&id).await?;
    w.signer("bob", &server).approve(&id).await?;
    let st = mcp.status(&id).await?;
    assert!(
        st.status() == "APPROVED" || st.status() == "EXPIRED",
        "{}",
        st.structured
    );
    let st = mcp
        .wait_status(&id, "EXPIRED", Duration::from_secs(8))
        .await?;
    assert!(!st.executable());
    mcp.execute(&id, &hash).await?.expect("EXPIRED", true);
    // Too late to revoke, too: the window is closed.
    let late = w
        .signer("alice", &server)
        .run(&["revoke", &id, "--yes"])
        .await?;
    assert!(
        !late.status.success(),
        "revoke after expiry succeeded: {late}"
    );
    assert!(sandbox_is_empty(&w));
    Ok(())
}

/// An APPROVED proposal (alice and bob) whose alice key is then replaced in the
/// keyring (lost laptop) and reloaded with SIGHUP. Returns the new key's file.
async fn approved_then_alice_rekeyed(
    w: &World,
    server: &approval_e2e::Server,
    mcp: &approval_e2e::Mcp,
) -> anyhow::Result<(String, String, std::path::PathBuf)> {
    let prep = mcp.prepare("note.write", note("old keys"), "").await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    w.signer("alice", server).approve(&id).await?;
    w.signer("bob", server).approve(&id).await?;
    assert!(mcp.status(&id).await?.executable());

    let new_key = w.path().join("signers/alice-new.key");
    let new_alice = w.keygen_at("alice", &new_key)?;
    let keyring = std::fs::read_to_string(&w.keys)?;
    let rotated: Vec<String> = keyring
        .lines()
        .map(|l| {
            if l.starts_with("alice ") {
                new_alice.clone()
            } else {
                l.to_owned()
            }
        })
        .collect();
    w.write_keyring(&(rotated.join("\n") + "\n"))?;
    server.sighup()?;
    poll_until("the reload in the log", Duration::from_secs(10), || async {
        Ok(server
            .log()
            .contains("configuration reloaded")
            .then_some(()))
    })
    .await?;
    Ok((id, hash, new_key))
}

#[tokio::test]
async fn a_replaced_key_no_longer_counts_at_execute() -> anyhow::Result<()> {
    let w = world("30m")?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let (id, hash, _) = approved_then_alice_rekeyed(&w, &server, &mcp).await?;

    // The reload ended it: the approvals it was given no longer reach quorum under the
    // keyring in force, and there is no way back to PENDING in the state machine.
    let st = mcp.status(&id).await?;
    assert_eq!(st.code(), "POLICY_CHANGED", "{}", st.structured);
    let ex = mcp.execute(&id, &hash).await?;
    assert!(
        ex.is_error,
        "executed on a signature from a replaced key: {}",
        ex.structured
    );
    assert_eq!(ex.code(), "POLICY_CHANGED", "{}", ex.structured);
    assert!(!ex.retry_allowed(), "{}", ex.structured);
    assert!(sandbox_is_empty(&w));
    // `executable` ("whether approval_execute would run it now") must agree with
    // what execute just did.
    let st = mcp.status(&id).await?;
    assert!(
        !st.executable(),
        "approval_status says executable although approval_execute refuses: {}",
        st.structured
    );
    Ok(())
}

/// The refusal above tells the agent to retry and its humans to "sign again". Either
/// that works (alice's new key can approve and the action runs), or the refusal must
/// not promise it: an agent must never be sent round a loop that cannot end.
#[tokio::test]
async fn after_a_key_is_replaced_the_refusal_leads_somewhere() -> anyhow::Result<()> {
    let w = world("30m")?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let (id, hash, new_key) = approved_then_alice_rekeyed(&w, &server, &mcp).await?;
    let ex = mcp.execute(&id, &hash).await?;
    assert!(ex.is_error, "{}", ex.structured);

    let mut alice = w.signer("alice", &server);
    alice.key = new_key;
    let again = alice.run(&["--json", "approve", &id, "--yes"]).await?;
    if again.status.success() {
        mcp.execute(&id, &hash).await?.expect("SUCCEEDED", false);
    } else {
        assert!(
            !ex.retry_allowed() && !ex.str("message").contains("sign again"),
            "approval_execute answered {} (retry_allowed {}, \"{}\"), but approvers cannot sign again: \
             signer-cli with alice's new key said: {}",
            ex.code(),
            ex.retry_allowed(),
            ex.str("message"),
            again.stderr.lines().last().unwrap_or_default()
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_policy_naming_unknown_approvers_is_refused_with_file_and_line() -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob"])?;
    w.write_policy(
        "note.write.toml",
        "kind = \"note.write\"\nquorum = 2\napprovers = [\"alice\", \"zed\"]\n[executor]\ntype = \"note\"\n",
    )?;
    let check = approval_server(&[
        "check".as_ref(),
        "--policies".as_ref(),
        w.policies.as_os_str(),
        "--keys".as_ref(),
        w.keys.as_os_str(),
    ])?;
    assert!(!check.status.success(), "check accepted it: {check}");
    assert!(check.stderr.contains("note.write.toml"), "{check}");
    assert!(check.stderr.contains("zed"), "{check}");
    // The server starts as it reloads: with that kind disabled rather than refused
    // (see key_removal.rs), and says why.
    {
        let server = w.start()?;
        let mcp = server.mcp().await?;
        let r = mcp.prepare("note.write", note("x"), "").await?;
        r.expect("KIND_DISABLED", true);
        assert!(r.str("message").contains("zed"), "{}", r.structured);
    }

    // Fixed, it starts.
    w.write_policy(
        "note.write.toml",
        &policy("30m", "ok").replace(", \"carol\"", ""),
    )?;
    let check = approval_server(&[
        "check".as_ref(),
        "--policies".as_ref(),
        w.policies.as_os_str(),
        "--keys".as_ref(),
        w.keys.as_os_str(),
    ])?;
    assert!(check.status.success(), "{check}");
    let server = w.start()?;
    let mcp = server.mcp().await?;
    mcp.prepare("no.such.kind", note("x"), "")
        .await?
        .expect("UNKNOWN_KIND", true);
    Ok(())
}
