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

/// A running `approval-server` whose stdout and stderr lines arrive on channels;
/// killed on drop.
struct Running {
    child: std::process::Child,
    out: std::sync::mpsc::Receiver<String>,
    err: std::sync::mpsc::Receiver<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lines_of(r: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

fn spawn(dir: &Path, args: &[&str]) -> Running {
    let mut child = bin()
        .current_dir(dir)
        .args(args)
        .env_remove("APPROVAL_AGENT_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = lines_of(child.stdout.take().unwrap());
    let err = lines_of(child.stderr.take().unwrap());
    Running { child, out, err }
}

/// Waits (generously: a loaded CI machine) for a line satisfying `want`.
fn wait_line(rx: &std::sync::mpsc::Receiver<String>, want: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = rx.recv_timeout(left).expect("the expected line in time");
        if want(&line) {
            return line;
        }
    }
}

/// The endpoints a server printed: (MCP endpoint, approver API).
fn endpoints(r: &Running) -> (String, String) {
    let mcp = wait_line(&r.out, |l| l.starts_with("MCP endpoint: "));
    let api = wait_line(&r.out, |l| l.starts_with("Approver API: "));
    (
        mcp.trim_start_matches("MCP endpoint: ").to_owned(),
        api.trim_start_matches("Approver API: ").to_owned(),
    )
}

fn repo_policies() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies")
}

/// Issue 16: `check` on a fresh checkout (no ./keys) says how to make a keyring.
#[test]
fn check_without_a_keyring_says_how_to_make_one() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    std::fs::remove_file(dir.path().join("keys")).unwrap();
    let out = bin().current_dir(dir.path()).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "no keyring at ./keys: pass --keys FILE, a file of `<name> ed25519 <base64 key>` lines (keys.example in the repository shows the format; each approver prints their line with `signer-cli keygen --name NAME`; `approval-server demo` writes demo-keys/keyring)\n"
    );
    // The repository's own example files, as the README types them, pass.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = bin()
        .current_dir(&root)
        .args(["check", "--policies", "policies", "--keys", "keys.example"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok: 3 approver(s) in keys.example; 2 polic(ies) in policies: email.send (2 of 3), note.write (2 of 3)\n"
    );
}

/// Issue 16: a taken port names the flag that picks another, for `demo` and `serve`.
#[test]
fn listen_on_a_taken_port_names_the_listen_flag() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let want = |flag: &str| {
        format!(
            "error: cannot listen on {addr}: the address is already in use (another approval-server, or another program, has port {port}): stop it, or pick another address with {flag}, e.g. {flag} 127.0.0.1:{}\n",
            port.wrapping_add(1).max(1)
        )
    };
    for (args, flag) in [
        (vec!["demo", "--listen", &addr], "--listen"),
        (vec!["serve", "--listen", &addr], "--listen"),
        (
            vec![
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--approver-listen",
                &addr,
            ],
            "--approver-listen",
        ),
    ] {
        let out = bin().current_dir(dir.path()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.ends_with(&want(flag)), "{args:?}: {err}");
    }
}

/// Issue 16: the demo reads ./policies (editing it changes what runs, SIGHUP
/// reloads it), its banner carries the one command that makes a first proposal,
/// and the reload log names the proposals it ended.
#[tokio::test]
async fn demo_reads_policies_and_its_reload_names_the_proposals_it_ended() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("policies")).unwrap();
    for f in ["note.write.toml", "email.send.toml"] {
        std::fs::copy(repo_policies().join(f), dir.path().join("policies").join(f)).unwrap();
    }
    let r = spawn(dir.path(), &["demo", "--listen", "127.0.0.1:0"]);
    let (mcp, _) = endpoints(&r);
    let curl = wait_line(&r.out, |l| l.trim_start().starts_with("curl "));
    let pid = r.child.id();
    let policies = wait_line(&r.out, |l| l.starts_with("Policies: "));
    assert_eq!(
        policies,
        format!("Policies: ./policies/*.toml. Edit one, then `kill -HUP {pid}` reloads it (open proposals of a changed kind end POLICY_CHANGED).")
    );
    // The banner's command, as a user would paste it: its body, sent to its URL.
    assert!(curl.contains(&format!("curl -s {mcp} ")), "{curl}");
    let body = curl
        .split_once(" -d '")
        .and_then(|(_, b)| b.strip_suffix('\''))
        .expect("a -d '...' body");
    let v: serde_json::Value = reqwest::Client::new()
        .post(&mcp)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sc = &v["result"]["structuredContent"];
    assert_eq!(sc["code"], "PENDING_QUORUM", "{v}");
    let id = sc["proposal_id"].as_str().unwrap().to_owned();
    // The policy in ./policies is the one in force: editing it and SIGHUP end the
    // open proposal of that kind.
    let policy = dir.path().join("policies/note.write.toml");
    let text = std::fs::read_to_string(&policy).unwrap();
    std::fs::write(&policy, text.replace("ttl = \"30m\"", "ttl = \"20m\"")).unwrap();
    assert!(Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let line = wait_line(&r.err, |l| l.contains("configuration reloaded"));
    assert!(
        line.ends_with(&format!(
            "configuration reloaded; 1 open proposal ended POLICY_CHANGED: {id}"
        )),
        "{line}"
    );
}

/// Without a ./policies folder, the demo says it uses built-in copies, and how to
/// use a folder instead.
#[test]
fn demo_outside_the_checkout_says_it_uses_built_in_policies() {
    let dir = tempfile::tempdir().unwrap();
    let r = spawn(dir.path(), &["demo", "--listen", "127.0.0.1:0"]);
    let (_, api) = endpoints(&r);
    let line = wait_line(&r.out, |l| l.starts_with("Policies: "));
    assert_eq!(
        line,
        "Policies: <built-in copies of the example policies> (no ./policies folder here; start with --policies DIR to use and reload your own)."
    );
    // Issue #36: the banner says what signer-cli will do when `serve` takes over
    // the address with another data folder (and another identity).
    let moving = wait_line(&r.out, |l| l.starts_with("Moving on to `serve`"));
    assert!(
        moving.contains(&format!("at {api}?"))
            && moving.contains("another --data than ./data")
            && moving.contains("(./data/server.key)")
            && moving.contains("SERVER IDENTITY CHANGED")
            && moving.contains(&format!("`signer-cli --server {api} trust-server`")),
        "{moving}"
    );
    let out = bin()
        .current_dir(dir.path())
        .args(["demo", "--listen", "127.0.0.1:0", "--policies", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: --policies nope: no such folder: pass a folder of <kind>.toml policies (the repository's policies/ is an example)\n"
    );
}

/// Issue 16: `audit verify` and `audit export` against a running server (signed
/// read of /v1/audit), while the offline form says how to do that.
#[tokio::test]
async fn audit_verify_and_export_work_against_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let r = spawn(dir.path(), &["serve", "--listen", "127.0.0.1:0"]);
    let (mcp, api) = endpoints(&r);
    let http = reqwest::Client::new();
    let v: serde_json::Value = http
        .post(&mcp)
        .header("Accept", "application/json, text/event-stream")
        .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "approval_prepare", "arguments": {"kind": "note.write", "payload": {"text": "t"}}}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["result"]["structuredContent"]["code"], "PENDING_QUORUM");
    std::fs::write(
        dir.path().join("bob.key"),
        common::key("bob").to_file_text(),
    )
    .unwrap();
    let out = bin()
        .current_dir(dir.path())
        .args(["audit", "verify", "--server", &api, "--key", "bob.key"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("ok: 1 audit entries, chain intact, head "),
        "{stdout}"
    );
    let out = bin()
        .current_dir(dir.path())
        .args(["audit", "export", "--server", &api, "--key", "bob.key"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["kind"], "proposed");
    // A key the server does not hold is refused, naming the key it holds.
    let stranger = approval_core::keyring::SecretKey::from_seed(
        approval_core::ApproverName::parse("bob").unwrap(),
        [77; 32],
    );
    std::fs::write(dir.path().join("other.key"), stranger.to_file_text()).unwrap();
    let out = bin()
        .current_dir(dir.path())
        .args(["audit", "verify", "--server", &api, "--key", "other.key"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let fp = approval_core::fingerprint::fingerprint(&common::key("bob").public_key());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("error: {api}/v1/audit refused: UNAUTHORIZED: read signature does not verify for this approver, server id, time, method and path (reads are signed over the server_id of this server's GET /healthz: docs/PROTOCOL.md section 2.2); the server's key for bob is {fp}\n")
    );
    // The offline form, while the server runs, says what to do instead.
    let out = bin()
        .current_dir(dir.path())
        .args(["audit", "verify"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: cannot open the store in ./data (a running server locks it: stop it, or read the running server's log with --server URL --key FILE)"),
        "{err}"
    );
}

/// Issue 16: the stdio bridge says what to do for stdio when the service wants a
/// token (--token or APPROVAL_AGENT_TOKEN), and "connection refused ... is the
/// service running?" at a closed port.
#[test]
fn stdio_bridge_names_token_flag_and_a_closed_port() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let out = bin()
        .current_dir(dir.path())
        .args(["agent", "add", "ci-bot", "--agents", "agents"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "agent ci-bot added to agents. The token above is shown once: give it to the agent (Authorization: Bearer <token> over HTTP, --token or APPROVAL_AGENT_TOKEN for `approval-server stdio`); the file keeps only its hash. Start the server (serve or demo) with --agents agents, or send SIGHUP to one already started with it, to load it.\n"
    );
    let r = spawn(
        dir.path(),
        &["serve", "--listen", "127.0.0.1:0", "--agents", "agents"],
    );
    let (mcp, _) = endpoints(&r);
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}/mcp", l.local_addr().unwrap().port())
    };
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    for (url, want) in [
        (
            mcp.clone(),
            "the approval service needs an agent token: start the bridge with `approval-server stdio --connect URL --token agt_...` or set APPROVAL_AGENT_TOKEN (`approval-server agent add NAME` prints a token)".to_owned(),
        ),
        (
            closed.clone(),
            format!("connection refused at {closed}: is the service running? Start it with `approval-server serve` (or `demo`), or pass its MCP endpoint to --connect"),
        ),
    ] {
        let mut child = bin()
            .args(["stdio", "--connect", &url])
            .env_remove("APPROVAL_AGENT_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        {
            let mut si = child.stdin.take().unwrap();
            writeln!(si, "{init}").unwrap();
        }
        let out = child.wait_with_output().unwrap();
        let v: serde_json::Value =
            serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
        assert_eq!(v["id"], 1, "{v}");
        assert_eq!(v["error"]["message"], want, "{v}");
    }
}
