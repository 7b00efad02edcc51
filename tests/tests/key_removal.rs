//! Issue #11 item 4: removing a compromised key takes effect, even while a policy
//! still names its owner (fail closed). The kind whose policy names the missing
//! approver is disabled (KIND_DISABLED, naming the kind and the approver), its open
//! proposals end POLICY_CHANGED, `/healthz` and `approval-server check` name it, and
//! fixing the policy enables it again. Real binaries, real SIGHUP.

use approval_core::message::Decision;
use approval_e2e::{approval_server, poll_until, McpClient, World};
use serde_json::{json, Value};
use std::time::Duration;

/// A 2-of-N note policy for `kind` with these approvers.
fn policy(kind: &str, approvers: &[&str]) -> String {
    let list = approvers
        .iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "kind = \"{kind}\"\ndescription = \"Write a note\"\nquorum = 2\napprovers = [{list}]\n\
         ttl = \"30m\"\nexecute_within = \"10m\"\n[executor]\ntype = \"note\"\n"
    )
}

/// The kinds `/healthz` lists as disabled, with their missing approvers.
fn disabled_kinds(health: &Value) -> Vec<(String, Vec<String>)> {
    health["disabled_kinds"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| {
                    let missing = d["missing_approvers"]
                        .as_array()
                        .map(|m| {
                            m.iter()
                                .filter_map(|x| x.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default();
                    (d["kind"].as_str().unwrap_or_default().to_owned(), missing)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The keyring without `name`'s line.
fn keyring_without(w: &World, name: &str) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(&w.keys)?;
    Ok(text
        .lines()
        .filter(|l| !l.starts_with(&format!("{name} ")))
        .map(|l| format!("{l}\n"))
        .collect())
}

#[tokio::test]
async fn removing_a_compromised_key_takes_it_out_even_when_a_policy_still_names_it(
) -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy(
        "note.write.toml",
        &policy("note.write", &["alice", "bob", "carol"]),
    )?;
    // A kind that does not name carol must keep working throughout.
    w.write_policy("memo.write.toml", &policy("memo.write", &["alice", "bob"]))?;
    let server = w.start()?;
    let mcp = server.mcp().await?;
    assert_eq!(disabled_kinds(&server.healthz().await?), vec![]);

    // Carol's key is stolen; the thief approves the agent's proposal with it.
    let counted = mcp
        .prepare("note.write", json!({"text": "carol approved"}), "")
        .await?;
    let (id, hash) = (counted.proposal_id(), counted.preview_sha256());
    w.signer("carol", &server).approve(&id).await?;
    let untouched = mcp
        .prepare("note.write", json!({"text": "nobody yet"}), "")
        .await?;
    let memo = mcp
        .prepare("memo.write", json!({"text": "memo"}), "")
        .await?;

    // The operator deletes carol's line and reloads, leaving the policy as it is.
    let carol = w.secret_key("carol")?;
    w.write_keyring(&keyring_without(&w, "carol")?)?;
    server.sighup()?;
    let health = poll_until(
        "/healthz to name the disabled kind",
        Duration::from_secs(15),
        || async {
            let h = server.healthz().await?;
            Ok((!disabled_kinds(&h).is_empty()).then_some(h))
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; server log:\n{}", server.log()))?;
    assert_eq!(
        disabled_kinds(&health),
        vec![("note.write".to_owned(), vec!["carol".to_owned()])],
        "{health}"
    );

    // Open proposals that counted on carol's key end POLICY_CHANGED.
    for open in [&id, &untouched.proposal_id()] {
        mcp.wait_status(open, "POLICY_CHANGED", Duration::from_secs(10))
            .await?;
    }
    // Her key no longer counts: her decision is refused, and alice's approval cannot
    // complete a quorum with it.
    let (st, body) = server
        .post_decision(&carol, &id, &hash, Decision::Approve, "")
        .await?;
    assert_ne!(st, 200, "carol's removed key was accepted: {body}");
    assert_eq!(body["code"], "INVALID_SIGNATURE", "{body}");
    let alice = w.secret_key("alice")?;
    let (st, body) = server
        .post_decision(&alice, &id, &hash, Decision::Approve, "")
        .await?;
    assert_ne!(
        st, 200,
        "a decision on a voided proposal was accepted: {body}"
    );
    let ex = mcp.execute(&id, &hash).await?;
    ex.expect("POLICY_CHANGED", true);
    assert!(!ex.retry_allowed());

    // The kind is disabled, with a refusal naming the kind and the missing approver.
    let refused = mcp
        .prepare("note.write", json!({"text": "after removal"}), "")
        .await?;
    refused.expect("KIND_DISABLED", true);
    let message = refused.str("message").to_owned();
    assert!(
        message.contains("note.write") && message.contains("carol"),
        "{message}"
    );
    assert!(!refused.retry_allowed());
    // Other kinds are untouched.
    assert_eq!(
        mcp.status(&memo.proposal_id()).await?.status(),
        "PENDING",
        "a kind that never named carol was voided"
    );
    mcp.prepare("memo.write", json!({"text": "still works"}), "")
        .await?
        .expect("PENDING_QUORUM", false);

    // Fixing the policy enables the kind again, under the new policy.
    w.write_policy("note.write.toml", &policy("note.write", &["alice", "bob"]))?;
    server.sighup()?;
    poll_until(
        "/healthz to list no disabled kind",
        Duration::from_secs(15),
        || async {
            let h = server.healthz().await?;
            Ok(disabled_kinds(&h).is_empty().then_some(()))
        },
    )
    .await?;
    let fresh = mcp
        .prepare("note.write", json!({"text": "fixed"}), "")
        .await?;
    fresh.expect("PENDING_QUORUM", false);
    w.signer("alice", &server)
        .approve(&fresh.proposal_id())
        .await?;
    w.signer("bob", &server)
        .approve(&fresh.proposal_id())
        .await?;
    mcp.execute(&fresh.proposal_id(), &fresh.preview_sha256())
        .await?
        .expect("SUCCEEDED", false);
    Ok(())
}

#[tokio::test]
async fn check_names_kinds_disabled_by_a_missing_approver() -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob"])?;
    w.write_policy(
        "note.write.toml",
        &policy("note.write", &["alice", "bob", "carol"]),
    )?;
    w.write_policy("memo.write.toml", &policy("memo.write", &["alice", "bob"]))?;
    let check = || {
        approval_server(&[
            "check".as_ref(),
            "--policies".as_ref(),
            w.policies.as_os_str(),
            "--keys".as_ref(),
            w.keys.as_os_str(),
        ])
    };
    let out = check()?;
    assert!(
        !out.status.success(),
        "check passed with a disabled kind: {out}"
    );
    assert!(
        out.stderr.contains("kind note.write is disabled"),
        "check does not name the disabled kind: {out}"
    );
    assert!(out.stderr.contains("\"carol\""), "{out}");
    assert!(out.stderr.contains("note.write.toml:4"), "{out}");
    assert!(!out.stderr.contains("kind memo.write is disabled"), "{out}");

    // The server starts the same way it reloads: with that kind disabled, loudly.
    let server = w.start()?;
    assert!(
        server.log().contains("kind note.write is disabled"),
        "{}",
        server.log()
    );
    assert_eq!(
        disabled_kinds(&server.healthz().await?),
        vec![("note.write".to_owned(), vec!["carol".to_owned()])]
    );
    let mcp = server.mcp().await?;
    mcp.prepare("note.write", json!({"text": "x"}), "")
        .await?
        .expect("KIND_DISABLED", true);
    mcp.prepare("memo.write", json!({"text": "x"}), "")
        .await?
        .expect("PENDING_QUORUM", false);

    // Fixed, check passes.
    w.write_policy("note.write.toml", &policy("note.write", &["alice", "bob"]))?;
    let out = check()?;
    assert!(out.status.success(), "{out}");
    Ok(())
}
