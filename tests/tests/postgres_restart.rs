//! PostgreSQL stopped and started again under load (issue #15): during the gap every
//! request gets a clear INTERNAL "the store is unreachable … retry" answer, the
//! instance keeps running and serves again by itself once the database is back (no
//! restart), and every proposal it acknowledged is still there.
//!
//! A test binary of its own: it stops the machine's cluster (`pg_ctlcluster 15 main`,
//! or the version and name in `APPROVAL_TEST_PG_CLUSTER`), so no other suite runs
//! while it does, and it waits for the database to be back before it ends, even when
//! it fails.

use approval_e2e::pg::FreshDb;
use approval_e2e::{poll_until, McpClient, World};
use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};

fn cluster() -> Vec<String> {
    std::env::var("APPROVAL_TEST_PG_CLUSTER")
        .unwrap_or_else(|_| "15 main".into())
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn ctl(action: &str) -> anyhow::Result<()> {
    let st = Command::new("pg_ctlcluster")
        .args(cluster())
        .arg(action)
        .status()
        .map_err(|e| {
            anyhow::anyhow!("cannot run pg_ctlcluster (needed to stop PostgreSQL): {e}")
        })?;
    anyhow::ensure!(st.success(), "pg_ctlcluster {action} failed: {st}");
    Ok(())
}

fn ready() -> bool {
    Command::new("pg_isready")
        .args(["-q", "-h", "127.0.0.1", "-p", "5432"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Starts the cluster again if it is down and waits until it accepts connections.
struct BackOnDrop;

impl Drop for BackOnDrop {
    fn drop(&mut self) {
        if !ready() {
            let _ = ctl("start");
        }
        let until = Instant::now() + Duration::from_secs(60);
        while !ready() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

// The note policy the stdio suites use too: alice and bob both approve.
use approval_e2e::NOTE_POLICY_ALICE_AND_BOB as NOTE_POLICY;

#[tokio::test]
async fn postgres_restarted_under_load_clear_errors_then_service_nothing_lost() -> anyhow::Result<()>
{
    let Some(db) = FreshDb::new()? else {
        return Ok(());
    };
    for tool in ["pg_ctlcluster", "pg_isready"] {
        if approval_e2e::require(
            tool,
            "to stop the machine's PostgreSQL cluster and see it back",
            "apt-get install postgresql-common postgresql-client",
        )
        .is_none()
        {
            return Ok(());
        }
    }
    let _back = BackOnDrop;
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("note.write.toml", NOTE_POLICY)?;
    let mut server = db.start(&w, "a", &[])?;
    let mcp = server.mcp().await?;
    // Load: proposals one after another, each answer recorded.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let load = {
        let (mcp, stop, count) = (mcp.clone(), stop.clone(), count.clone());
        tokio::spawn(async move {
            let (mut acked, mut refused) = (Vec::new(), Vec::new());
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && i < 5_000 {
                i += 1;
                match mcp
                    .prepare("note.write", json!({"text": format!("n{i}")}), "load")
                    .await
                {
                    Ok(r) if r.code() == "PENDING_QUORUM" => {
                        acked.push(r.proposal_id());
                        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    Ok(r) => refused.push((r.code().to_owned(), r.str("message").to_owned())),
                    Err(e) => refused.push(("HTTP".into(), e.to_string())),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (acked, refused)
        })
    };
    poll_until(
        "some proposals before the stop",
        Duration::from_secs(10),
        || async { Ok((count.load(std::sync::atomic::Ordering::SeqCst) >= 5).then_some(())) },
    )
    .await?;
    ctl("stop")?;
    // The gap: the instance answers, clearly, and stays up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = mcp
        .prepare("note.write", json!({"text": "during"}), "during the gap")
        .await?;
    during.expect("INTERNAL", true);
    let msg = during.str("message").to_owned();
    assert!(msg.contains("the store is unreachable"), "{msg}");
    assert!(msg.contains("retry"), "{msg}");
    assert!(during.retry_allowed(), "{}", during.structured);
    assert!(
        server.is_running(),
        "the instance exited when the database went away"
    );
    // /healthz says so (503), for a load balancer to route around this instance.
    let h = server.healthz().await?;
    assert_eq!(h["status"], "failed", "{h}");
    assert!(
        h["why"]
            .as_str()
            .unwrap_or("")
            .contains("the store is unreachable"),
        "{h}"
    );
    ctl("start")?;
    // Service again by itself: no restart of the instance.
    poll_until(
        "service after PostgreSQL is back",
        Duration::from_secs(30),
        || async {
            let r = mcp
                .prepare("note.write", json!({"text": "after"}), "after the gap")
                .await?;
            Ok((r.code() == "PENDING_QUORUM").then_some(()))
        },
    )
    .await?;
    assert_eq!(server.healthz().await?["status"], "ok");
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (acked, refused) = load.await?;
    assert!(
        server.is_running(),
        "the instance did not survive the outage"
    );
    assert!(
        refused.iter().any(|(c, _)| c == "INTERNAL"),
        "no request was refused during the gap: {refused:?}"
    );
    for (code, message) in &refused {
        assert_eq!(code, "INTERNAL", "{message}");
        assert!(message.contains("the store is unreachable"), "{message}");
    }
    // Nothing acknowledged is lost.
    for id in &acked {
        mcp.status(id).await?.expect("PENDING_QUORUM", false);
    }
    println!(
        "{} acknowledged, {} refused during the gap",
        acked.len(),
        refused.len()
    );
    server.stop(Duration::from_secs(10))?;
    Ok(())
}
