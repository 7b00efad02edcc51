//! The real `approval-server` binary: check, agent add, serve/SIGTERM, audit verify and export.

use approval_core::message::Decision;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

mod common;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_approval-server"))
}

fn setup(dir: &Path) {
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::write(dir.join("policies/note.write.toml"), common::NOTE_POLICY).unwrap();
    std::fs::write(
        dir.join("keys"),
        common::keyring_text(&["alice", "bob", "carol"]),
    )
    .unwrap();
}

#[test]
fn check_accepts_good_config_and_names_file_and_line_of_bad_ones() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let out = bin().current_dir(dir.path()).arg("check").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("note.write (2 of 3)"));
    std::fs::write(
        dir.path().join("policies/note.write.toml"),
        common::NOTE_POLICY.replace("quorum = 2", "quorum = 5"),
    )
    .unwrap();
    let out = bin().current_dir(dir.path()).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("note.write.toml:3: quorum = 5 cannot be met with 3 approvers"),
        "{err}"
    );
    std::fs::write(dir.path().join("keys"), "alice ed25519 AAAA\n").unwrap();
    let out = bin().current_dir(dir.path()).arg("check").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains("keys:1: public key is not standard base64"),
        "{err}"
    );
}

#[test]
fn agent_add_prints_a_token_once_and_keeps_only_its_hash() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agents");
    let out = bin()
        .args(["agent", "add", "ci-bot", "--agents"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(token.starts_with("agt_") && token.len() > 60, "{token}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains(&token));
    let agents = approval_server::agents::Agents::parse(&text).unwrap();
    assert_eq!(
        agents.authenticate(&token).map(|a| a.to_string()),
        Some("ci-bot".into())
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let again = bin()
        .args(["agent", "add", "ci-bot", "--agents"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
}

#[tokio::test]
async fn serve_prints_endpoints_stops_on_sigterm_and_the_audit_log_verifies() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let mut child = bin()
        .current_dir(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mcp = lines.next().unwrap().unwrap();
    let api = lines.next().unwrap().unwrap();
    let mcp_url = mcp.strip_prefix("MCP endpoint: ").unwrap().to_owned();
    let api_url = api.strip_prefix("Approver API: ").unwrap().to_owned();
    assert!(
        mcp_url.starts_with("http://127.0.0.1:") && mcp_url.ends_with("/mcp"),
        "{mcp}"
    );
    assert_eq!(format!("{api_url}/mcp"), mcp_url);
    let http = reqwest::Client::new();
    let v: serde_json::Value = http
        .post(&mcp_url)
        .header("Accept", "application/json, text/event-stream")
        .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "approval_prepare", "arguments": {"kind": "note.write", "payload": {"text": "t"}}}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let out = &v["result"]["structuredContent"];
    let (id, hash) = (
        out["proposal_id"].as_str().unwrap(),
        out["preview_sha256"].as_str().unwrap(),
    );
    let k = common::key("alice");
    let d = approval_core::SignedDecision::sign(
        &k.key,
        k.name.clone(),
        Decision::Approve,
        &approval_core::Sha256Hex::parse(hash).unwrap(),
        "",
    )
    .unwrap();
    let r = http
        .post(format!("{api_url}/v1/proposals/{id}/decisions"))
        .json(&d)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // SIGTERM: in-flight work finishes, the store is flushed, the process exits 0.
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    assert!(child.wait().unwrap().success());
    let out = bin()
        .current_dir(dir.path())
        .args(["audit", "verify"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok: 2 audit entries"));
    let out = bin()
        .current_dir(dir.path())
        .args(["audit", "export"])
        .output()
        .unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (lines[0]["kind"].as_str(), lines[1]["kind"].as_str()),
        (Some("proposed"), Some("decision"))
    );
    // Edit one entry behind the server's back: verify fails.
    {
        let store =
            approval_server::store::SledStore::open(&dir.path().join("data/store")).unwrap();
        let mut e: approval_server::audit::AuditEntry =
            serde_json::from_value(lines[1].clone()).unwrap();
        e.event.detail = serde_json::json!({"approver": "mallory"});
        store.tamper_audit_entry(2, &e).unwrap();
    }
    let out = bin()
        .current_dir(dir.path())
        .args(["audit", "verify"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("entry 2 was edited"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
