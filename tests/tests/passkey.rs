//! Passkey approvers against the real server, over raw HTTP (issue #34): enrolment
//! through a single-use link, a 2-of-2 quorum of a key (signer-cli) and a passkey
//! (a software authenticator, `approval_e2e::authenticator`), one execution, the
//! receipt verified offline by `signer-cli verify` and refused with the assertion
//! altered in any field; and each refusal a passkey decision must meet: a kind that
//! accepts only keys, a replayed assertion, a counter that goes back, an assertion
//! for another proposal, origin or RP ID, user presence or verification cleared, a
//! page link with a wrong token. The browser flow is `approve_page.rs`.

mod support;

use anyhow::{anyhow, Context, Result};
use approval_core::message::{passkey_challenge, Decision};
use approval_core::Sha256Hex;
use approval_e2e::authenticator::{SoftPasskey, UP, UV};
use approval_e2e::{bin, poll_until, McpClient, Server, World};
use serde_json::{json, Value};
use std::time::Duration;
use support::{receiver_on, start};

const RP: &str = "localhost";

fn policy(kind: &str, accept: &str, notify: &str) -> String {
    format!(
        r#"kind = "{kind}"
quorum = 2
approvers = ["alice", "dana"]
ttl = "30m"
execute_within = "10m"
accept = {accept}
[executor]
type = "note"
{notify}
"#
    )
}

/// `http://localhost:<port>` of the server (the origin its pages are on).
fn origin(server: &Server) -> String {
    server.api_url.replace("127.0.0.1", "localhost")
}

async fn get(url: &str, view: Option<&str>) -> Result<(u16, Value)> {
    let mut r = reqwest::Client::new().get(url);
    if let Some(v) = view {
        r = r.header("X-Approval-View", v);
    }
    let r = r.send().await?;
    let status = r.status().as_u16();
    Ok((status, r.json().await.unwrap_or(Value::Null)))
}

async fn post(url: &str, body: &Value) -> Result<(u16, Value)> {
    let r = reqwest::Client::new().post(url).json(body).send().await?;
    let status = r.status().as_u16();
    Ok((status, r.json().await.unwrap_or(Value::Null)))
}

/// `approval-server enroll NAME` for the running server: the link it prints.
fn enroll(w: &World, name: &str) -> Result<String> {
    let out = std::process::Command::new(bin("approval-server"))
        .args(["enroll", name, "--data"])
        .arg(&w.data)
        .output()?;
    if !out.status.success() {
        return Err(anyhow!(
            "enroll failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

/// Enrols `pk` as `name` through the link; answers the keyring line.
async fn enrol_with(link: &str, pk: &SoftPasskey) -> Result<(u16, Value)> {
    let (s, options) = get(&format!("{link}/options"), None).await?;
    if s != 200 {
        return Ok((s, options));
    }
    let challenge =
        approval_core::passkey::from_b64url(options["challenge"].as_str().unwrap_or(""))
            .map_err(|e| anyhow!("{e}"))?;
    let body = pk.register(
        options["rp_id"].as_str().unwrap_or(""),
        options["origin"].as_str().unwrap_or(""),
        &challenge,
    );
    post(link, &body).await
}

/// dana's decision body, signed by `pk` for `hash` (with the given origin, RP, flags).
fn passkey_body(
    pk: &SoftPasskey,
    decision: Decision,
    hash: &str,
    origin: &str,
    rp: &str,
    flags: u8,
) -> Result<Value> {
    let h = Sha256Hex::parse(hash).map_err(|e| anyhow!("{e}"))?;
    let challenge = passkey_challenge(decision, &h, "").map_err(|e| anyhow!("{e}"))?;
    let a = pk.assert(rp, origin, &challenge, flags);
    Ok(json!({"approver": "dana", "decision": decision.as_str(), "reason": "", "passkey": a}))
}

async fn decide(server: &Server, id: &str, body: &Value) -> Result<(u16, Value)> {
    post(
        &format!("{}/v1/proposals/{id}/decisions", server.api_url),
        body,
    )
    .await
}

#[tokio::test]
async fn a_passkey_and_a_key_reach_quorum_and_the_receipt_verifies_offline() -> Result<()> {
    let (hook, rx) = receiver_on("127.0.0.1:0".parse()?, &[]).await?;
    let w = World::new(&["alice"])?;
    let notify = format!("[[notify]]\ntype = \"webhook\"\nurl = \"{hook}\"\n");
    w.write_policy(
        "note.write.toml",
        &policy("note.write", r#"["key", "passkey"]"#, &notify),
    )?;
    w.write_policy("keys.only.toml", &policy("keys.only", r#"["key"]"#, ""))?;
    // dana needs a line before the policies load: first her key (for keys.only),
    // then her passkey beside it.
    let dana_key = w.keygen("dana")?;
    w.add_to_keyring(&dana_key)?;
    let server = start(&w, &[], &[])?;
    let origin = origin(&server);

    // Enrolment: the link makes one passkey line, once.
    let pk = SoftPasskey::es256(7);
    let link = enroll(&w, "dana")?;
    assert!(link.starts_with(&format!("{origin}/enroll/")), "{link}");
    let (s, page) = get(&link, None).await.map(|(s, _)| (s, ()))?;
    assert_eq!((s, page), (200, ()));
    let (s, enrolled) = enrol_with(&link, &pk).await?;
    assert_eq!(s, 200, "{enrolled}");
    let line = enrolled["keyring_line"]
        .as_str()
        .context("keyring_line")?
        .to_owned();
    assert_eq!(line, pk.keyring_line("dana", RP, &origin));
    let (s, again) = enrol_with(&link, &SoftPasskey::es256(8)).await?;
    assert_eq!(
        (s, again["code"].as_str()),
        (409, Some("ALREADY_RECORDED")),
        "{again}"
    );
    let forged = link.replace("/enroll/", "/enroll/x");
    let (s, bad) = get(&format!("{forged}/options"), None).await?;
    assert!(s >= 400, "{bad}");
    w.add_to_keyring(&line)?;
    server.sighup()?;
    poll_until("the reload", Duration::from_secs(10), || async {
        Ok(server
            .log()
            .contains("configuration reloaded")
            .then_some(()))
    })
    .await?;

    // A proposal; its notification carries the page link.
    let mcp = server.mcp().await?;
    let prep = mcp
        .prepare("note.write", json!({"text": "hello"}), "s")
        .await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    let url = poll_until(
        "a notification with the page link",
        Duration::from_secs(20),
        || async {
            Ok(rx
                .bodies()
                .iter()
                .find(|b| b["proposal_id"] == json!(id))
                .and_then(|b| b["approve_url"].as_str().map(str::to_owned)))
        },
    )
    .await?;
    let (page_url, view) = url.split_once("#v=").context("a #v= fragment")?;
    assert_eq!(page_url, format!("{origin}/approve/{id}"));
    let state_url = format!("{page_url}/state");
    let (s, st) = get(&state_url, Some(view)).await?;
    assert_eq!(s, 200, "{st}");
    assert_eq!(st["status"], "PENDING");
    assert_eq!(st["preview_sha256"], json!(hash));
    assert_eq!(st["actions"], json!(["approve", "reject"]));
    assert_eq!(st["passkeys"][0]["approver"], "dana");
    assert!(
        st["rendered"].as_str().unwrap_or("").contains(&hash[..8]),
        "{st}"
    );
    for bad in [None, Some("AAAA"), Some(&view[1..])] {
        let (s, e) = get(&state_url, bad).await?;
        assert_eq!(
            (s, e["code"].as_str()),
            (401, Some("UNAUTHORIZED")),
            "{bad:?}"
        );
    }
    let (s, page) = reqwest::get(page_url)
        .await
        .map(|r| (r.status().as_u16(), r.headers().clone()))?;
    assert_eq!(s, 200);
    let csp = page
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );

    // What must be refused, each on its own.
    let refusals: Vec<(Value, &str)> = vec![
        (
            passkey_body(
                &pk,
                Decision::Approve,
                &hash,
                "http://localhost:1",
                RP,
                UP | UV,
            )?,
            "origin",
        ),
        (
            passkey_body(
                &pk,
                Decision::Approve,
                &hash,
                &origin,
                "example.org",
                UP | UV,
            )?,
            "RP ID",
        ),
        (
            passkey_body(&pk, Decision::Approve, &hash, &origin, RP, UP)?,
            "verif",
        ),
        (
            passkey_body(&pk, Decision::Approve, &hash, &origin, RP, UV)?,
            "present",
        ),
        (
            passkey_body(
                &pk,
                Decision::Approve,
                &"0".repeat(64),
                &origin,
                RP,
                UP | UV,
            )?,
            "challenge",
        ),
    ];
    for (body, why) in &refusals {
        let (s, e) = decide(&server, &id, body).await?;
        assert_eq!(
            (s, e["code"].as_str()),
            (403, Some("INVALID_SIGNATURE")),
            "{why}: {e}"
        );
        assert!(
            e["message"].as_str().unwrap_or("").contains(why),
            "{why}: {e}"
        );
    }

    // alice by key, dana by passkey: quorum.
    w.signer("alice", &server).approve(&id).await?;
    let good = passkey_body(&pk, Decision::Approve, &hash, &origin, RP, UP | UV)?;
    let (s, d) = decide(&server, &id, &good).await?;
    assert_eq!(s, 200, "{d}");
    assert_eq!(d["proposal"]["status"], "APPROVED", "{d}");
    // The same assertion again changes nothing.
    let (s, d) = decide(&server, &id, &good).await?;
    assert_eq!(
        (s, d["already_recorded"].as_bool()),
        (200, Some(true)),
        "{d}"
    );
    let st = poll_until(
        "the page to show APPROVED",
        Duration::from_secs(2),
        || async {
            let (_, st) = get(&state_url, Some(view)).await?;
            Ok((st["status"] == "APPROVED").then_some(st))
        },
    )
    .await?;
    assert_eq!(st["actions"], json!(["revoke"]), "{st}");
    mcp.execute(&id, &hash).await?.expect("SUCCEEDED", false);
    mcp.execute(&id, &hash)
        .await?
        .expect("ALREADY_EXECUTED_NO_REPLAY", true);
    let (_, st) = get(&state_url, Some(view)).await?;
    assert_eq!(st["actions"], json!([]), "{st}");

    // The receipt verifies offline, and not with the assertion altered.
    let receipt = w.path().join("receipt.json");
    w.signer("alice", &server)
        .ok(&["receipt", &id, "--out", receipt.to_str().unwrap_or("")])
        .await?;
    let server_key = server.healthz().await?["server_key"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let verify = |file: &std::path::Path| {
        std::process::Command::new(bin("signer-cli"))
            .arg("verify")
            .arg(file)
            .arg("--keys")
            .arg(&w.keys)
            .args(["--server-key", &server_key])
            .output()
    };
    let ok = verify(&receipt)?;
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&receipt)?)?;
    let i = r["decisions"]
        .as_array()
        .and_then(|d| d.iter().position(|d| d["approver"] == "dana"))
        .context("dana's decision in the receipt")?;
    for field in [
        "credential_id",
        "authenticator_data",
        "client_data_json",
        "signature",
    ] {
        let mut altered = r.clone();
        let s = altered["decisions"][i]["passkey"][field]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let mut b = approval_core::passkey::from_b64url(&s).map_err(|e| anyhow!("{e}"))?;
        let mid = b.len() / 2;
        b[mid] ^= 0x01;
        altered["decisions"][i]["passkey"][field] = json!(approval_core::passkey::b64url(&b));
        let f = w.path().join(format!("receipt-{field}.json"));
        std::fs::write(&f, altered.to_string())?;
        let out = verify(&f)?;
        assert!(!out.status.success(), "{field} altered was accepted");
    }

    // A second proposal: the old assertion is for another proposal; a counter that
    // goes back is refused; a kind that accepts only keys refuses a passkey.
    let prep2 = mcp
        .prepare("note.write", json!({"text": "two"}), "s")
        .await?;
    let (id2, hash2) = (prep2.proposal_id(), prep2.preview_sha256());
    let (s, e) = decide(&server, &id2, &good).await?;
    assert_eq!(
        (s, e["code"].as_str()),
        (403, Some("INVALID_SIGNATURE")),
        "{e}"
    );
    let h2 = Sha256Hex::parse(&hash2).map_err(|e| anyhow!("{e}"))?;
    let stale = pk.assert_with_counter(
        RP,
        &origin,
        &passkey_challenge(Decision::Approve, &h2, "").map_err(|e| anyhow!("{e}"))?,
        UP | UV,
        1,
    );
    let (s, e) = decide(
        &server,
        &id2,
        &json!({"approver": "dana", "decision": "approve", "passkey": stale}),
    )
    .await?;
    assert_eq!(
        (s, e["code"].as_str()),
        (403, Some("INVALID_SIGNATURE")),
        "{e}"
    );
    assert!(
        e["message"].as_str().unwrap_or("").contains("counter"),
        "{e}"
    );
    let prep3 = mcp
        .prepare("keys.only", json!({"text": "three"}), "s")
        .await?;
    let body = passkey_body(
        &pk,
        Decision::Approve,
        &prep3.preview_sha256(),
        &origin,
        RP,
        UP | UV,
    )?;
    let (s, e) = decide(&server, &prep3.proposal_id(), &body).await?;
    assert_eq!(
        (s, e["code"].as_str()),
        (403, Some("SIGNATURE_NOT_ACCEPTED")),
        "{e}"
    );
    // dana's key still decides that kind.
    w.signer("dana", &server)
        .approve(&prep3.proposal_id())
        .await?;
    Ok(())
}
