//! A frozen leader on PostgreSQL (issue #31, item 5): the instance leading the sweeps
//! and notification delivery is stopped with SIGSTOP (its TCP connections stay open,
//! as with a paused VM) while it runs an execution of its own and a notification is
//! waiting. Another instance takes over its leadership lease once it expires on the
//! database's clock, ends the claim OUTCOME_UNKNOWN and delivers the notification;
//! the old leader, continued (SIGCONT), does not act as leader again.
//!
//! Runs when `APPROVAL_TEST_DATABASE_URL` is set; otherwise it prints one line saying
//! how to run it.

use approval_e2e::pg::FreshDb;
use approval_e2e::{poll_until, McpClient, Server, ServerOptions, World};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{json, Value};
use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the webhook receiver was sent: (delivery id, event, proposal id), in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(String, String, String)>>>);

impl Seen {
    fn all(&self) -> Vec<(String, String, String)> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
    fn of(&self, id: &str) -> Vec<(String, String, String)> {
        self.all().into_iter().filter(|(_, _, p)| p == id).collect()
    }
}

async fn hook(State(seen): State<Seen>, headers: HeaderMap, body: String) -> StatusCode {
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let delivery = headers
        .get("x-approval-delivery")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let event = v["event"].as_str().unwrap_or("").to_owned();
    let id = v["proposal_id"].as_str().unwrap_or("").to_owned();
    if let Ok(mut s) = seen.0.lock() {
        s.push((delivery, event, id));
    }
    StatusCode::OK
}

/// Sends a signal to a process we started, with `/bin/kill`.
fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let st = std::process::Command::new("/bin/kill")
        .args([sig, &pid.to_string()])
        .status()?;
    anyhow::ensure!(st.success(), "/bin/kill {sig} {pid} failed: {st}");
    Ok(())
}

/// Continues a stopped server on drop (a failing test must not leave it stopped: its
/// drop SIGKILLs it, which works on a stopped process too, but be tidy), and kills
/// the executor's `sleep` by the pid it wrote.
struct Cleanup {
    server: u32,
    effect_pid: std::path::PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = signal(self.server, "-CONT");
        if let Ok(pid) = std::fs::read_to_string(&self.effect_pid) {
            let pid = pid.trim();
            if !pid.is_empty() && pid.chars().all(|c| c.is_ascii_digit()) {
                let _ = std::process::Command::new("/bin/kill")
                    .args(["-KILL", pid])
                    .status();
            }
        }
    }
}

fn start(db: &FreshDb, w: &World, name: &str) -> anyhow::Result<Server> {
    let extra: Vec<OsString> = ["--store", db.url.as_str(), "--claim-lease", "5"]
        .iter()
        .map(OsString::from)
        .collect();
    Server::start_full(
        &ServerOptions {
            data: w.path().join(name),
            policies: w.policies.clone(),
            keys: w.keys.clone(),
            agents: None,
        },
        &[],
        &extra,
        &[],
    )
}

#[tokio::test]
async fn a_frozen_postgres_leader_is_replaced_and_does_not_act_after_waking() -> anyhow::Result<()>
{
    let Some(db) = FreshDb::new()? else {
        return Ok(());
    };
    let seen = Seen::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hook_url = format!("http://{}/hook", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .with_state(seen.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let w = World::new(&["alice", "bob"])?;
    let witness = w.path().join("witness.txt");
    let effect_pid = w.path().join("effect.pid");
    let script = w.script(
        "slow-effect.sh",
        "echo $$ > \"$2\"\necho \"effect of $APPROVAL_PROPOSAL_ID\" >> \"$1\"\nexec sleep 120\n",
    )?;
    w.write_policy(
        "deploy.run.toml",
        &format!(
            r#"kind = "deploy.run"
description = "Deploy"
quorum = 2
approvers = ["alice", "bob"]
ttl = "30m"
execute_within = "10m"
[executor]
type = "command"
program = {:?}
args = [{:?}, {:?}]
timeout = "300s"
[[notify]]
type = "webhook"
url = "{hook_url}"
"#,
            script.display().to_string(),
            witness.display().to_string(),
            effect_pid.display().to_string(),
        ),
    )?;

    // A starts first and leads the sweep and the delivery; B joins.
    let a = start(&db, &w, "a")?;
    let _cleanup = Cleanup {
        server: a.pid,
        effect_pid: effect_pid.clone(),
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let b = start(&db, &w, "b")?;
    let (mcp_a, mcp_b) = (a.mcp().await?, b.mcp().await?);

    let prep = mcp_b
        .prepare("deploy.run", json!({"tag": "v1"}), "deploy v1")
        .await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    w.signer("alice", &b).approve(&id).await?;
    w.signer("bob", &b).approve(&id).await?;
    // A, the leader, delivers what is queued.
    poll_until(
        "A delivering a notification",
        Duration::from_secs(15),
        || async {
            Ok(
                (!seen.of(&id).is_empty() && a.log().contains("notification delivered"))
                    .then_some(()),
            )
        },
    )
    .await?;
    assert!(
        !b.log().contains("notification delivered"),
        "B delivered while A led"
    );

    // A claims the execution and runs it (the command sleeps).
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
    assert_eq!(mcp_b.status(&id).await?.status(), "EXECUTING");

    // Freeze A: its process stops, its connections stay open.
    signal(a.pid, "-STOP")?;
    let frozen = Instant::now();
    // A notification that only a leader delivers.
    let second = mcp_b
        .prepare("deploy.run", json!({"tag": "v2"}), "deploy v2")
        .await?
        .proposal_id();

    // Within 30 s: A's claim ended OUTCOME_UNKNOWN, the notification delivered by B.
    let st = mcp_b
        .wait_status(&id, "OUTCOME_UNKNOWN", Duration::from_secs(30))
        .await?;
    assert_eq!(
        st.structured["result"]["outcome"], "UNKNOWN",
        "{}",
        st.structured
    );
    let ended = frozen.elapsed();
    let left = Duration::from_secs(30).saturating_sub(ended);
    poll_until("the waiting notification", left, || async {
        Ok((!seen.of(&second).is_empty()).then_some(()))
    })
    .await?;
    let delivered = frozen.elapsed();
    eprintln!(
        "frozen leader: claim ended after {ended:?}, notification delivered after {delivered:?}"
    );
    assert!(b
        .log()
        .contains("execution lease expired: now OUTCOME_UNKNOWN"));

    // Continue A: it finds its lead gone and does not act as leader.
    let log_before = a.log().len();
    let more = mcp_b
        .prepare("deploy.run", json!({"tag": "v3"}), "deploy v3")
        .await?
        .proposal_id();
    signal(a.pid, "-CONT")?;
    poll_until(
        "A to see its lead gone",
        Duration::from_secs(10),
        || async {
            Ok(a.log()[log_before..]
                .contains("no longer acting as leader")
                .then_some(()))
        },
    )
    .await?;
    poll_until(
        "the third proposal's notification",
        Duration::from_secs(15),
        || async { Ok((!seen.of(&more).is_empty()).then_some(())) },
    )
    .await?;
    // Several of A's ticks (sweep and delivery) after it woke.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = a.log()[log_before..].to_owned();
    assert!(
        !after.contains("notification delivered"),
        "the old leader delivered after waking:\n{after}"
    );
    assert!(
        !after.contains("execution lease expired") && !after.contains("expiry sweep"),
        "the old leader swept after waking:\n{after}"
    );
    // Nothing was delivered twice, whichever instance sent it.
    let all = seen.all();
    let mut ids: Vec<&String> = all.iter().map(|(d, _, _)| d).collect();
    ids.sort();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "a delivery was sent twice: {all:#?}");
    for p in [&second, &more] {
        let waiting: Vec<_> = seen
            .of(p)
            .into_iter()
            .filter(|(_, e, _)| e == "waiting")
            .collect();
        assert_eq!(waiting.len(), 1, "{p}: {all:#?}");
    }
    // The claim was never run again, and stays ended.
    assert_eq!(
        std::fs::read_to_string(&witness)?,
        format!("effect of {id}\n"),
        "the command ran again"
    );
    assert_eq!(mcp_b.status(&id).await?.status(), "OUTCOME_UNKNOWN");
    bg.abort();
    Ok(())
}
