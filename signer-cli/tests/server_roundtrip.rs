//! Round trips against the real `approval-server`: an agent proposes over MCP, humans
//! decide with the real `signer-cli`, and the agent sees the outcome over MCP.
//!
//! The server binary is `<target>/debug/approval-server`, built once per run with
//! `cargo build -p approval-server` (a no-op when it is fresh; `env!` cannot name
//! another package's binary); each test runs its own server on 127.0.0.1:0 with its
//! own data, policies and keyring.

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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
[executor]
type = "note"
"#;

/// A command that outlives its time-out, so the outcome is unknown.
fn slow_policy() -> String {
    let sleep = ["/bin/sleep", "/usr/bin/sleep"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("a sleep program");
    format!(
        r#"
kind = "slow.run"
quorum = 1
approvers = ["alice", "bob"]
[executor]
type = "command"
program = "{sleep}"
args = ["30"]
timeout = "1s"
"#
    )
}

fn server_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root")
            .to_path_buf();
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        let bin = target.join("debug").join("approval-server");
        // `cargo test --workspace` builds the server before any test runs; only a
        // lone `cargo test -p signer-cli` needs it built here. (Building it again
        // when present would rebuild it with this package's feature set, slowly, in CI.)
        if bin.exists() {
            return bin;
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "-p", "approval-server"])
            .current_dir(&root)
            .status()
            .expect("run cargo build -p approval-server");
        assert!(st.success(), "cargo build -p approval-server failed");
        assert!(bin.exists(), "no server binary at {}", bin.display());
        bin
    })
    .clone()
}

/// A running server, killed on drop.
struct Server {
    child: Child,
    api: String,
    mcp: String,
    env: Env,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start() -> Self {
        let env = Env::new();
        std::fs::create_dir_all(env.path("policies")).expect("mkdir");
        std::fs::write(env.path("policies/note.write.toml"), NOTE_POLICY).expect("policy");
        std::fs::write(env.path("policies/slow.run.toml"), slow_policy()).expect("policy");
        std::fs::write(env.path("keys"), keyring_text(&["alice", "bob", "carol"])).expect("keys");
        for n in ["alice", "bob", "carol"] {
            env.key(n);
        }
        let mut child = Command::new(server_binary())
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(env.path("data"))
            .arg("--policies")
            .arg(env.path("policies"))
            .arg("--keys")
            .arg(env.path("keys"))
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(env.path("server.log")).expect("server.log"))
            .spawn()
            .expect("start approval-server");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (mut api, mut mcp) = (None, None);
        let deadline = Instant::now() + Duration::from_secs(30);
        while api.is_none() || mcp.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).expect("server printed its endpoints");
            if let Some(u) = line.strip_prefix("Approver API: ") {
                api = Some(u.trim().to_owned());
            }
            if let Some(u) = line.strip_prefix("MCP endpoint: ") {
                mcp = Some(u.trim().to_owned());
            }
        }
        Self {
            child,
            api: api.unwrap_or_default(),
            mcp: mcp.unwrap_or_default(),
            env,
        }
    }

    /// Runs signer-cli as `who` against this server.
    fn cli(&self, who: &str, args: &[&str]) -> Run {
        let key = self.env.path(&format!("{who}.key"));
        let mut a: Vec<&str> = args.to_vec();
        let key = key.to_str().unwrap_or("").to_owned();
        a.extend(["--server", &self.api, "--key", &key]);
        self.env.run(&a)
    }

    fn agent(&self) -> Mcp {
        Mcp::connect(&self.mcp)
    }
}

/// A minimal MCP client over Streamable HTTP (JSON or SSE answers).
struct Mcp {
    url: String,
    http: reqwest::Client,
    session: Option<String>,
    rt: tokio::runtime::Runtime,
    next_id: u64,
}

impl Mcp {
    fn connect(url: &str) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let mut m = Self {
            url: url.to_owned(),
            http: reqwest::Client::new(),
            session: None,
            rt,
            next_id: 1,
        };
        let init = m.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "signer-cli-tests", "version": "1"}}),
        );
        assert!(init.get("result").is_some(), "initialize: {init}");
        m.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        m
    }

    fn send(&mut self, body: Value) -> (Option<String>, String) {
        let mut req = self
            .http
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-06-18")
            .timeout(Duration::from_secs(60))
            .body(body.to_string());
        if let Some(s) = &self.session {
            req = req.header("Mcp-Session-Id", s);
        }
        self.rt.block_on(async {
            let resp = req.send().await.expect("MCP request");
            let session = resp
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            (session, resp.text().await.expect("MCP body"))
        })
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let (session, text) =
            self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        if session.is_some() {
            self.session = session;
        }
        let t = text.trim_start();
        if t.starts_with('{') {
            return serde_json::from_str(t).expect("JSON-RPC answer");
        }
        // text/event-stream: the message with our id.
        for line in text.lines() {
            if let Some(data) = line.strip_prefix("data:") {
                if let Ok(v) = serde_json::from_str::<Value>(data.trim()) {
                    if v.get("id") == Some(&json!(id)) {
                        return v;
                    }
                }
            }
        }
        panic!("no answer to {method} in {text}");
    }

    /// Calls a tool; returns (structuredContent, isError).
    fn tool(&mut self, name: &str, args: Value) -> (Value, bool) {
        let v = self.request("tools/call", json!({"name": name, "arguments": args}));
        let r = v.get("result").unwrap_or_else(|| panic!("{name}: {v}"));
        (
            r.get("structuredContent").cloned().unwrap_or(Value::Null),
            r.get("isError").and_then(Value::as_bool).unwrap_or(false),
        )
    }

    fn prepare(&mut self, kind: &str, payload: Value, summary: &str) -> (String, String) {
        let (sc, err) = self.tool(
            "approval_prepare",
            json!({"kind": kind, "payload": payload, "summary": summary}),
        );
        assert!(!err, "prepare: {sc}");
        (
            sc["proposal_id"].as_str().expect("proposal_id").to_owned(),
            sc["preview_sha256"]
                .as_str()
                .expect("preview_sha256")
                .to_owned(),
        )
    }

    fn status(&mut self, id: &str) -> Value {
        self.tool("approval_status", json!({"proposal_id": id})).0
    }
}

#[test]
fn approve_round_trip() {
    let s = Server::start();
    let mut agent = s.agent();
    let (id, hash) = agent.prepare(
        "note.write",
        json!({"text": "hello from the agent"}),
        "say hello",
    );

    // The approvers see it, with the same hash the agent was given.
    let r = s.cli("alice", &["pending"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&id) && r.stdout.contains("say hello"),
        "{}",
        r.stdout
    );
    let r = s.cli("alice", &["show", &id]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&hash), "{}", r.stdout);
    assert!(
        r.stdout.contains("\"text\": \"hello from the agent\""),
        "{}",
        r.stdout
    );

    // Alice confirms by typing the prefix; carol with --yes.
    let key = s.env.path("alice.key").display().to_string();
    let r = s.env.run_stdin(
        &[
            "approve", &id, "--reason", "fine", "--server", &s.api, "--key", &key,
        ],
        &format!("{}\n", &hash[..8]),
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("approved: 1 of 2, waiting for 1 more (and 1 of [carol])"),
        "{}",
        r.stdout
    );
    assert_eq!(agent.status(&id)["status"], json!("PENDING"));
    let r = s.cli("carol", &["approve", &id, "--yes", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).expect("--json output");
    assert_eq!(v["status"], json!("APPROVED"), "{v}");
    assert_eq!(v["preview_sha256"], json!(hash));
    assert!(
        v["outcome"]
            .as_str()
            .unwrap_or("")
            .starts_with("approved: 2 of 2, executable until "),
        "{v}"
    );
    // In --json mode the human view goes to stderr, so stdout stays JSON.
    assert!(r.stderr.contains("preview_sha256"), "{}", r.stderr);
    // The same signed decision again is harmless.
    let r = s.cli("carol", &["approve", &id, "--yes"]);
    assert_eq!(r.code, 1, "not PENDING any more: {r:?}");

    let st = agent.status(&id);
    assert_eq!(st["executable"], json!(true), "{st}");
    let (ex, err) = agent.tool(
        "approval_execute",
        json!({"proposal_id": id, "preview_sha256": hash}),
    );
    assert!(!err, "{ex}");
    assert_eq!(ex["code"], json!("SUCCEEDED"), "{ex}");

    // The receipt verifies offline with the approvers' keyring.
    let out = s.env.path("receipt.json");
    let r = s.cli(
        "alice",
        &["receipt", &id, "--out", out.to_str().unwrap_or("")],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let keys = s.env.path("keys");
    let r = s.env.run(&[
        "verify",
        out.to_str().unwrap_or(""),
        "--keys",
        keys.to_str().unwrap_or(""),
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.starts_with(&format!(
            "receipt OK: alice, carol approved {id} (2 of 2 required)"
        )),
        "{}",
        r.stdout
    );
    let r = s.env.run(&["hash", out.to_str().unwrap_or("")]);
    assert_eq!(r.stdout.trim(), hash);
    // Printed, it is the same JSON as the file (kept byte for byte there).
    let r = s.cli("bob", &["receipt", &id]);
    assert_eq!(r.code, 0, "{r:?}");
    let printed: Value = serde_json::from_str(&r.stdout).expect("receipt JSON");
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("read")).expect("JSON");
    assert_eq!(printed, saved);
    assert_eq!(saved["preview_sha256"], json!(hash));
    // Nothing pending any more.
    let r = s.cli("bob", &["pending"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stdout.contains(&id), "{}", r.stdout);
}

#[test]
fn reject_round_trip() {
    let s = Server::start();
    let mut agent = s.agent();
    let (id, _) = agent.prepare("note.write", json!({"text": "rm -rf /"}), "cleanup");
    let r = s.cli("bob", &["reject", &id, "--reason", "no way", "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("rejected: proposal is REJECTED (1 of 1 vetoes)"),
        "{}",
        r.stdout
    );
    let st = agent.status(&id);
    assert_eq!(st["status"], json!("REJECTED"), "{st}");
    // Nobody can approve it now: refused before anything is signed.
    let r = s.cli("alice", &["approve", &id, "--yes"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("is REJECTED"), "{}", r.stderr);
    // Its receipt does not exist: the server's refusal is shown as it said it.
    let r = s.cli("alice", &["receipt", &id]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("INVALID_TRANSITION: "), "{}", r.stderr);
}

/// The server answers a decision it already recorded without the proposal view
/// (issue #11, item 5: a replayed decision body must not read the proposal);
/// signer-cli then reads the view with a signed GET and still reports the outcome.
#[test]
fn repeating_a_decision_reports_it_was_already_recorded() {
    let s = Server::start();
    let mut agent = s.agent();
    let (id, _) = agent.prepare("note.write", json!({"text": "twice"}), "twice");
    let r = s.cli("alice", &["approve", &id, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = s.cli("alice", &["approve", &id, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("(this decision was already recorded)"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("PENDING"), "{}", r.stdout);
}

#[test]
fn revoke_round_trip() {
    let s = Server::start();
    let mut agent = s.agent();
    let (id, hash) = agent.prepare("note.write", json!({"text": "deploy"}), "deploy");
    for who in ["alice", "carol"] {
        let r = s.cli(who, &["approve", &id, "--yes"]);
        assert_eq!(r.code, 0, "{r:?}");
    }
    let r = s.cli(
        "carol",
        &["revoke", &id, "--reason", "wrong branch", "--yes"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("revoked: proposal is REVOKED"),
        "{}",
        r.stdout
    );
    let (ex, err) = agent.tool(
        "approval_execute",
        json!({"proposal_id": id, "preview_sha256": hash}),
    );
    assert!(err, "execute after revoke must be refused: {ex}");
    assert_eq!(ex["code"], json!("REVOKED"), "{ex}");
}

#[test]
fn resolve_round_trip() {
    let s = Server::start();
    let mut agent = s.agent();
    let (id, hash) = agent.prepare("slow.run", json!({"job": "backup"}), "run the backup");
    let r = s.cli("alice", &["approve", &id, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("approved: 1 of 1, executable until "),
        "{}",
        r.stdout
    );
    // The command outlives its 1 s time-out: killed, outcome unknown.
    let (ex, _) = agent.tool(
        "approval_execute",
        json!({"proposal_id": id, "preview_sha256": hash}),
    );
    assert_eq!(ex["code"], json!("OUTCOME_UNKNOWN"), "{ex}");
    let r = s.cli("bob", &["show", &id]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("(OUTCOME_UNKNOWN)"), "{}", r.stdout);
    let r = s.cli(
        "bob",
        &[
            "resolve",
            &id,
            "--outcome",
            "failed",
            "--reason",
            "backup log is empty",
            "--yes",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("resolved: proposal is FAILED"),
        "{}",
        r.stdout
    );
    assert_eq!(agent.status(&id)["status"], json!("FAILED"));
    // Settled for good.
    let r = s.cli(
        "alice",
        &["resolve", &id, "--outcome", "succeeded", "--yes"],
    );
    assert_eq!(r.code, 1, "{r:?}");
}

#[test]
fn hostile_payload_from_a_real_agent_is_shown_escaped() {
    let s = Server::start();
    let mut agent = s.agent();
    let (id, hash) = agent.prepare(
        "note.write",
        json!({"text": "ok\u{1b}[2J\u{202e}gnp.exe\u{200d}\u{0}\u{2028}é😀"}),
        "innocent\u{202e}",
    );
    let r = s.cli("alice", &["show", &id]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&hash));
    assert!(
        r.stdout
            .contains(r#""text": "ok\u{1b}[2J\u{202e}gnp.exe\u{200d}\u{0}\u{2028}é😀""#),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(r#"summary         "innocent\u{202e}""#),
        "{}",
        r.stdout
    );
    for raw in ['\u{1b}', '\u{202e}', '\u{200d}', '\u{0}', '\u{2028}'] {
        assert!(!r.stdout.contains(raw), "raw {raw:?}");
    }
}

#[test]
fn watch_sees_a_new_proposal() {
    let s = Server::start();
    let key = s.env.path("carol.key").display().to_string();
    let mut child = s
        .env
        .cmd()
        .args(["watch", "--server", &s.api, "--key", &key])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn watch");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Give watch time to connect, then propose.
    std::thread::sleep(Duration::from_millis(1500));
    let mut agent = s.agent();
    let (id, hash) = agent.prepare("note.write", json!({"text": "watched"}), "watch me");
    let line = rx.recv_timeout(Duration::from_secs(20));
    let _ = child.kill();
    let _ = child.wait();
    let line = line.expect("watch printed a line");
    assert!(
        line.starts_with(&format!(
            "NEW {id}  note.write  \"watch me\"  by local  approvals 0/2"
        )),
        "{line}"
    );
    assert!(line.contains(&format!("hash {}", &hash[..8])), "{line}");
}

/// Issue 16: a newcomer who makes their own key for a name the server holds another
/// key for is told exactly that, with both fingerprints, instead of a bare
/// "read signature does not verify".
#[test]
fn a_key_the_server_does_not_hold_for_your_name_is_named_with_both_fingerprints() {
    use approval_core::fingerprint::fingerprint;
    let s = Server::start();
    let mine = approval_core::keyring::SecretKey::from_seed(name("alice"), [42; 32]);
    let path = s.env.path("my-alice.key");
    write_mode(&path, &mine.to_file_text(), 0o600);
    let key = path.display().to_string();
    let r = s.env.run(&["pending", "--server", &s.api, "--key", &key]);
    assert_eq!(r.code, 1, "{r:?}");
    let theirs = fingerprint(&secret("alice").public_key());
    let ours = fingerprint(&mine.public_key());
    assert_eq!(
        without_first_use_pin(&r.stderr),
        format!(
            "signer-cli: the server has another key for alice: {theirs} ; yours is {ours} ; send your keyring line (`signer-cli pubkey`) to whoever runs the server, or use the key file the server knows (the server said: UNAUTHORIZED: read signature does not verify for this approver, server id, time, method and path (reads are signed over the server_id of this server's GET /healthz: docs/PROTOCOL.md section 2.2); the server's key for alice is {theirs})\n"
        )
    );
    // With the key the server knows, the same command works.
    assert_eq!(s.cli("alice", &["pending"]).code, 0);
}

/// Issue 16: signer-cli pointed at the MCP endpoint (or any address without the
/// approver API) says so and names the address, instead of a bare HTTP status.
#[test]
fn an_address_that_is_not_the_approver_api_says_so_with_the_address_tried() {
    let s = Server::start();
    let key = s.env.path("alice.key").display().to_string();
    let r = s.env.run(&["pending", "--server", &s.mcp, "--key", &key]);
    assert_eq!(r.code, 3, "{r:?}");
    let want = format!(
        "signer-cli: {mcp} is not an approval gate's approver API (no /healthz answer at {mcp}/healthz: ",
        mcp = s.mcp
    );
    assert!(r.stderr.starts_with(&want), "{}", r.stderr);
    assert!(
        r.stderr.ends_with("): pass the \"Approver API:\" address that `approval-server serve` or `demo` prints, e.g. --server http://127.0.0.1:4800\n"),
        "{}",
        r.stderr
    );
}

/// Issue 16: `show`/`approve` take a unique id prefix, and with no id the one
/// pending proposal waiting for this approver, still shown whole and confirmed by
/// the hash prefix; an ambiguous or unknown prefix is refused, naming the ids.
#[test]
fn show_and_approve_take_a_unique_prefix_or_the_one_pending_proposal() {
    let s = Server::start();
    let mut agent = s.agent();
    let (id, hash) = agent.prepare("note.write", json!({"text": "one"}), "first");
    let r = s.cli("alice", &["show"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        without_first_use_pin(&r.stderr),
        format!("signer-cli: one pending proposal waits for you (alice): {id}\n")
    );
    assert!(r.stdout.contains(&hash), "{}", r.stdout);
    // No id, no --yes: the whole preview and the hash-prefix question, as with an id.
    let key = s.env.path("alice.key").display().to_string();
    let r = s.env.run_stdin(
        &["approve", "--server", &s.api, "--key", &key],
        &format!("{}\n", &hash[..8]),
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("\"text\": \"one\""), "{}", r.stdout);
    assert!(
        r.stderr.contains(&format!(
            "To approve proposal {id}, type the first 8 characters of its preview hash: "
        )),
        "{}",
        r.stderr
    );
    assert!(r.stdout.contains("approved: 1 of 2"), "{}", r.stdout);
    // Alice has decided: nothing waits for her any more.
    let r = s.cli("alice", &["approve"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        r.stderr,
        "signer-cli: no pending proposal waits for you (alice): nothing to do; give an id to look at another one\n"
    );
    // A unique prefix, with or without `p-`.
    let carol = s.env.path("carol.key").display().to_string();
    let r = s.env.run_stdin(
        &["approve", &id[..10], "--server", &s.api, "--key", &carol],
        &format!("{}\n", &hash[..8]),
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("approved: 2 of 2"), "{}", r.stdout);
    let r = s.cli("bob", &["show", &id[2..12]]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&hash), "{}", r.stdout);
    // Two pending for bob: no id is ambiguous, and the ids are named.
    let (a, _) = agent.prepare("note.write", json!({"text": "a"}), "second");
    let (b, _) = agent.prepare("note.write", json!({"text": "b"}), "third");
    let r = s.cli("bob", &["approve"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.starts_with(
            "signer-cli: 2 pending proposals wait for you: give the id, or a unique prefix of it: "
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(&a) && r.stderr.contains(&b),
        "{}",
        r.stderr
    );
    let r = s.cli("bob", &["approve", "p-zz"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        r.stderr,
        "signer-cli: no PENDING proposal you may see has an id starting with p-zz: `signer-cli pending` lists them\n"
    );
    // --yes signs without asking: only a whole id, never a prefix or none.
    for args in [vec!["approve", "--yes"], vec!["approve", &a[..8], "--yes"]] {
        let r = s.cli("bob", &args);
        assert_ne!(r.code, 0, "{args:?}: {r:?}");
    }
    let r = s.cli("bob", &["approve", "--yes"]);
    assert_eq!(
        r.stderr,
        "signer-cli: --yes signs without asking, so it needs the whole proposal id: a script names exactly what it signs\n"
    );
    assert_eq!(
        agent.status(&a)["approvals"],
        json!([]),
        "nothing was signed for bob"
    );
}

/// stderr without the line signer-cli prints when it pins a server on first use
/// (each test's configuration folder is new, so its first command pins).
fn without_first_use_pin(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| !(l.starts_with("signer-cli: pinned server ") && l.ends_with("(first use)")))
        .map(|l| format!("{l}\n"))
        .collect()
}
