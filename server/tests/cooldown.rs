//! Issue #31, items 1 and 10, in-process with a clock the tests move: a policy's
//! cooldown (execute refused until it ends, a revoke or a veto during it wins), the
//! per-agent cap on waiting `approval_status` calls, and a wait that answers as soon
//! as the agent can act.

mod common;

use approval_core::ids::AgentName;
use approval_core::message::Decision;
use approval_server::service::long_poll::{Waited, MAX_LONG_POLLS_PER_AGENT};
use common::*;
use serde_json::json;
use std::time::{Duration, Instant};

/// note.write with `cooldown = "60s"`: 2 of alice/bob/carol, carol required.
fn cooled_policy() -> String {
    NOTE_POLICY.replace(
        "execute_within = \"10m\"\n",
        "execute_within = \"10m\"\ncooldown = \"60s\"\n",
    )
}

/// A proposal under the cooled policy brought to quorum (alice and carol) at T0.
async fn approved_in_cooldown(s: &TestServer) -> (String, String) {
    let (id, hash) = s.prepare("cool").await;
    for who in ["alice", "carol"] {
        let (code, v) = s.decide(&id, &hash, who, Decision::Approve).await;
        assert_eq!(code, 200, "{v}");
    }
    (id, hash)
}

async fn execute(s: &TestServer, id: &str, hash: &str) -> (bool, serde_json::Value) {
    s.call(
        "approval_execute",
        json!({"proposal_id": id, "preview_sha256": hash}),
    )
    .await
}

#[tokio::test]
async fn an_execute_during_the_cooldown_is_refused_and_consumes_nothing() {
    let s = start_with(&[("note.write.toml", &cooled_policy())], None).await;
    let (id, hash) = approved_in_cooldown(&s).await;
    let from = approval_core::Timestamp::from_unix(T0 + 60).to_string();
    // The preview carries the cooldown, so the approvers signed it.
    let (_, prep) = s.call("approval_status", json!({"proposal_id": id})).await;
    assert_eq!(
        (
            prep["status"].as_str(),
            prep["code"].as_str(),
            prep["executable"].as_bool(),
            prep["executable_from"].as_str()
        ),
        (
            Some("APPROVED"),
            Some("COOLING_DOWN"),
            Some(false),
            Some(from.as_str())
        ),
        "{prep}"
    );
    assert!(prep["message"].as_str().unwrap().contains(&from), "{prep}");
    let (code, view) = s.get_signed("bob", &format!("/v1/proposals/{id}")).await;
    assert_eq!(code, 200, "{view}");
    assert_eq!(view["preview"]["cooldown"], "1m", "{view}");
    assert_eq!(view["executable_from"].as_str(), Some(from.as_str()));

    s.clock.advance(59);
    let (err, out) = execute(&s, &id, &hash).await;
    assert!(err, "{out}");
    assert_eq!(
        (
            out["code"].as_str(),
            out["status"].as_str(),
            out["retry_allowed"].as_bool()
        ),
        (Some("COOLING_DOWN"), Some("APPROVED"), Some(true)),
        "{out}"
    );
    assert!(out["message"].as_str().unwrap().contains(&from), "{out}");
    let note = s.dir.path().join("sandbox").join(format!("{id}.txt"));
    assert!(!note.exists(), "the effect ran during the cooldown");

    s.clock.advance(1);
    let (err, out) = execute(&s, &id, &hash).await;
    assert!(!err, "{out}");
    assert_eq!(out["code"], "SUCCEEDED", "{out}");
    assert_eq!(std::fs::read_to_string(note).unwrap(), "cool");
}

#[tokio::test]
async fn a_revoke_during_the_cooldown_wins_over_the_execute() {
    let s = start_with(&[("note.write.toml", &cooled_policy())], None).await;
    let (id, hash) = approved_in_cooldown(&s).await;
    s.clock.advance(30);
    assert_eq!(execute(&s, &id, &hash).await.1["code"], "COOLING_DOWN");
    // bob never approved; any approver of the policy may stop it.
    let (code, v) = s.decide(&id, &hash, "bob", Decision::Revoke).await;
    assert_eq!(
        (code, v["proposal"]["status"].as_str()),
        (200, Some("REVOKED")),
        "{v}"
    );
    s.clock.advance(30);
    let (err, out) = execute(&s, &id, &hash).await;
    assert!(err);
    assert_eq!(out["code"], "REVOKED", "{out}");
    assert!(!s
        .dir
        .path()
        .join("sandbox")
        .join(format!("{id}.txt"))
        .exists());
}

#[tokio::test]
async fn a_veto_during_the_cooldown_ends_it() {
    let s = start_with(&[("note.write.toml", &cooled_policy())], None).await;
    let (id, hash) = approved_in_cooldown(&s).await;
    s.clock.advance(10);
    let (code, v) = s.decide(&id, &hash, "bob", Decision::Reject).await;
    assert_eq!(
        (code, v["proposal"]["status"].as_str()),
        (200, Some("REJECTED")),
        "{v}"
    );
    s.clock.advance(60);
    let (err, out) = execute(&s, &id, &hash).await;
    assert!(err);
    assert_eq!(out["code"], "REJECTED", "{out}");

    // Once the cooldown is over a reject no longer applies (a revoke still does).
    let (id, hash) = approved_in_cooldown(&s).await;
    s.clock.advance(60);
    let (code, v) = s.decide(&id, &hash, "bob", Decision::Reject).await;
    assert_eq!(
        (code, v["code"].as_str()),
        (409, Some("INVALID_TRANSITION")),
        "{v}"
    );
    let (code, v) = s.decide(&id, &hash, "bob", Decision::Revoke).await;
    assert_eq!(
        (code, v["proposal"]["status"].as_str()),
        (200, Some("REVOKED")),
        "{v}"
    );
}

/// Item 10: the README's loop waits on approval_status; once quorum is reached the
/// wait must end at once, not after its whole length.
#[tokio::test]
async fn a_wait_at_quorum_answers_at_once() {
    let s = start().await;
    let (id, hash) = s.prepare("now").await;
    for who in ["alice", "carol"] {
        s.decide(&id, &hash, who, Decision::Approve).await;
    }
    let started = Instant::now();
    let (_, st) = s
        .call(
            "approval_status",
            json!({"proposal_id": id, "wait_seconds": 10}),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(
        (st["code"].as_str(), st["executable"].as_bool()),
        (Some("QUORUM_REACHED"), Some(true))
    );
    assert!(
        took < Duration::from_secs(1),
        "waited {took:?} on an executable proposal"
    );
    // A final proposal answers at once too.
    s.decide(&id, &hash, "bob", Decision::Revoke).await;
    let started = Instant::now();
    s.call(
        "approval_status",
        json!({"proposal_id": id, "wait_seconds": 10}),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(1));
}

async fn until_held(s: &TestServer, agent: &AgentName, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.svc.long_polls_held(agent) != n {
        assert!(
            Instant::now() < deadline,
            "{agent} holds {} waits, not {n}",
            s.svc.long_polls_held(agent)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Item 1: an agent cannot pin more than a few dozen waits; the rest answer at once
/// and say so. The count is per agent: holding every slot of its own does not make
/// another agent's waits answer early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_holding_its_long_polls_gets_answers_at_once_but_not_another_agent() {
    let s = start().await;
    let me = AgentName::parse("local").unwrap();
    let other = AgentName::parse("other-agent").unwrap();
    let (mine, _) = s.prepare("mine").await;
    let (theirs, _) = s
        .svc
        .prepare(&other, "note.write", json!({"text": "theirs"}), None)
        .await
        .unwrap();
    let theirs = theirs.id().to_string();
    let waits: Vec<_> = (0..MAX_LONG_POLLS_PER_AGENT)
        .map(|_| {
            let (svc, me, id) = (s.svc.clone(), me.clone(), mine.clone());
            tokio::spawn(async move { svc.status_waiting(&me, &id, 30).await })
        })
        .collect();
    until_held(&s, &me, MAX_LONG_POLLS_PER_AGENT).await;

    let started = Instant::now();
    let (rec, waited) = s.svc.status_waiting(&me, &mine, 30).await.unwrap();
    assert_eq!((waited, rec.status().as_str()), (Waited::Busy, "PENDING"));
    assert!(started.elapsed() < Duration::from_secs(1));
    let (_, st) = s
        .call(
            "approval_status",
            json!({"proposal_id": mine, "wait_seconds": 30}),
        )
        .await;
    assert_eq!(st["code"], "PENDING_QUORUM");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("Answered without waiting"),
        "{st}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));

    // The other agent still waits its whole (short) wait.
    let started = Instant::now();
    let (_, waited) = s.svc.status_waiting(&other, &theirs, 2).await.unwrap();
    assert_eq!(waited, Waited::Waited);
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        started.elapsed()
    );
    for w in waits {
        w.abort();
    }
}

/// A wait whose client went away gives its slot back: a cancelled call (its future
/// dropped, as a transport drops it) and a client that hangs up over HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_long_poll_gives_its_slot_back() {
    let s = start().await;
    let me = AgentName::parse("local").unwrap();
    let (mine, _) = s.prepare("mine").await;
    let waits: Vec<_> = (0..MAX_LONG_POLLS_PER_AGENT)
        .map(|_| {
            let (svc, me, id) = (s.svc.clone(), me.clone(), mine.clone());
            tokio::spawn(async move { svc.status_waiting(&me, &id, 30).await })
        })
        .collect();
    until_held(&s, &me, MAX_LONG_POLLS_PER_AGENT).await;
    for w in &waits {
        w.abort();
    }
    until_held(&s, &me, 0).await;
    let started = Instant::now();
    let (_, waited) = s.svc.status_waiting(&me, &mine, 1).await.unwrap();
    assert_eq!(waited, Waited::Waited);
    assert!(started.elapsed() >= Duration::from_millis(900));

    // Over HTTP: each client gives up after half a second and closes its connection.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "approval_status", "arguments": {"proposal_id": mine, "wait_seconds": 30}}})
    .to_string();
    let hangups: Vec<_> = (0..MAX_LONG_POLLS_PER_AGENT)
        .map(|_| {
            let (url, body) = (s.mcp_url(), body.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let _ = client
                    .post(url)
                    .header("Content-Type", "application/json")
                    .header("Accept", "application/json, text/event-stream")
                    .header("MCP-Protocol-Version", "2025-06-18")
                    .body(body)
                    .timeout(Duration::from_millis(500))
                    .send()
                    .await;
            })
        })
        .collect();
    for h in hangups {
        h.await.unwrap();
    }
    until_held(&s, &me, 0).await;
}
