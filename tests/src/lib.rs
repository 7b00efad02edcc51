//! End-to-end test harness: the real `approval-server` and `signer-cli` binaries,
//! real HTTP, real stdio, real keys.
//!
//! - [`bin`] finds the binaries next to the test executable (`target/debug/`).
//! - [`World`] is one test's private folder: keys made by `signer-cli keygen`,
//!   a keyring, a policies folder and a data folder.
//! - [`Server`] runs `approval-server serve` on port 0 and kills it on drop.
//! - [`Mcp`] speaks MCP over HTTP; [`Stdio`] speaks it through
//!   `approval-server stdio --connect`; both implement [`McpClient`].
//! - [`Signer`] runs `signer-cli` as an approver would (`--yes` for scripts).
//! - [`require`] and [`require_var`]: a test that needs node, Chromium, Prometheus,
//!   python3 or PostgreSQL asks first, and skips in one line (or fails under
//!   `APPROVAL_TEST_REQUIRE_ALL`) when it is missing.
//!
//! Nothing here sleeps for a fixed time: waiting is [`poll_until`] with 50 ms steps
//! and a deadline.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio as PStdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

pub mod authenticator;
pub mod pg;

pub use approval_test_require::{require, require_var};

/// The MCP revision the clients negotiate.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// How long any single request or command may take before the test fails.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// A `note.write` policy: 2 of alice, bob and carol, one rejection vetoes. Shared by
/// the backup suites (embedded and PostgreSQL), which fill a store with proposals in
/// every state and check that a copy keeps them.
pub const NOTE_POLICY_TWO_OF_THREE: &str = r#"
kind = "note.write"
description = "Write a note"
quorum = 2
approvers = ["alice", "bob", "carol"]
vetoes = 1
ttl = "30m"
execute_within = "30m"
[executor]
type = "note"
"#;

/// A `note.write` policy that needs both alice and bob (payload `{"text": ...}`),
/// shared by the stdio suites (bridge and embedded) so they gate the same rules.
pub const NOTE_POLICY_ALICE_AND_BOB: &str = r#"
kind = "note.write"
description = "Write a note"
quorum = 2
approvers = ["alice", "bob"]
ttl = "30m"
execute_within = "10m"
[payload_schema]
type = "object"
required = ["text"]
[executor]
type = "note"
"#;

// ---------------------------------------------------------------------------
// Binaries
// ---------------------------------------------------------------------------

/// The folder of the workspace's binaries: the test executable lives in
/// `target/debug/deps/`, the binaries in `target/debug/`.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let deps = exe.parent().expect("the test executable is in a folder");
    match deps.file_name() {
        Some(n) if n == "deps" => deps.parent().unwrap_or(deps).to_path_buf(),
        _ => deps.to_path_buf(),
    }
}

/// The path of a workspace binary (`approval-server` or `signer-cli`); panics
/// with the command to run when it has not been built.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if !path.is_file() {
        panic!(
            "{} not found: these end-to-end tests run the real binaries. Build them first with \
             `cargo build -p approval-server -p signer-cli` (`cargo test --workspace` builds them too)",
            path.display()
        );
    }
    path
}

/// Runs `approval-server ARGS...` to completion (for `audit`, `check`, `agent`).
pub fn approval_server(args: &[&std::ffi::OsStr]) -> Result<CliOutput> {
    let out = Command::new(bin("approval-server"))
        .args(args)
        .stdin(PStdio::null())
        .output()
        .context("cannot run approval-server")?;
    Ok(out.into())
}

// ---------------------------------------------------------------------------
// Polling
// ---------------------------------------------------------------------------

/// Calls `f` every 50 ms until it returns `Some`, failing after `timeout`.
pub async fn poll_until<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------
// A test's world: folder, keys, keyring, policies, data
// ---------------------------------------------------------------------------

/// One test's private folder with approvers' keys, a keyring, policies and data.
pub struct World {
    /// The temporary folder (removed on drop).
    pub dir: TempDir,
    /// The keyring file the server loads.
    pub keys: PathBuf,
    /// The policies folder.
    pub policies: PathBuf,
    /// The server's data folder.
    pub data: PathBuf,
}

impl World {
    /// A fresh world whose keyring holds a new `signer-cli keygen` key for each name.
    pub fn new(approvers: &[&str]) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("approval-e2e-").tempdir()?;
        let world = Self {
            keys: dir.path().join("keyring"),
            policies: dir.path().join("policies"),
            data: dir.path().join("data"),
            dir,
        };
        std::fs::create_dir_all(&world.policies)?;
        std::fs::create_dir_all(world.dir.path().join("signers"))?;
        std::fs::write(
            &world.keys,
            "# made by the e2e tests with signer-cli keygen\n",
        )?;
        for name in approvers {
            let line = world.keygen(name)?;
            world.add_to_keyring(&line)?;
        }
        Ok(world)
    }

    /// The folder's path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Where `name`'s secret key lives (the approver's "laptop").
    pub fn key_file(&self, name: &str) -> PathBuf {
        self.dir.path().join("signers").join(format!("{name}.key"))
    }

    /// Runs `signer-cli keygen --name NAME --out FILE`; returns the printed keyring line.
    /// The key is not added to the keyring.
    pub fn keygen(&self, name: &str) -> Result<String> {
        self.keygen_at(name, &self.key_file(name))
    }

    /// Runs `signer-cli keygen --name NAME --out FILE` for any FILE (a second key
    /// for the same name, say); returns the printed keyring line.
    pub fn keygen_at(&self, name: &str, file: &Path) -> Result<String> {
        let out = signer_command(self.dir.path())
            .args(["keygen", "--name", name, "--out"])
            .arg(file)
            .output()
            .context("cannot run signer-cli keygen")?;
        let out = CliOutput::from(out);
        if !out.status.success() {
            bail!("signer-cli keygen --name {name} failed: {out}");
        }
        let line = out.stdout.trim().to_owned();
        let mut f = line.split_whitespace();
        if f.next() != Some(name) || f.next() != Some("ed25519") || f.next().is_none() {
            bail!("signer-cli keygen printed {line:?}, not a keyring line for {name}");
        }
        Ok(line)
    }

    /// Reads `name`'s secret key file (made by `signer-cli keygen`), to sign in-process.
    pub fn secret_key(&self, name: &str) -> Result<approval_core::keyring::SecretKey> {
        let path = self.key_file(name);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        approval_core::keyring::SecretKey::parse(&text)
            .map_err(|e| anyhow!("{}: {e}", path.display()))
    }

    /// Appends a line to the keyring.
    pub fn add_to_keyring(&self, line: &str) -> Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&self.keys)?;
        writeln!(f, "{line}")?;
        Ok(())
    }

    /// Replaces the keyring's contents (atomically, for a reload).
    pub fn write_keyring(&self, text: &str) -> Result<()> {
        let tmp = self.dir.path().join(".keyring.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.keys)?;
        Ok(())
    }

    /// Writes (or replaces) `policies/<file>`.
    pub fn write_policy(&self, file: &str, toml: &str) -> Result<()> {
        let path = self.policies.join(file);
        // Write then rename, so a reload never sees half a file.
        let tmp = self.dir.path().join(format!(".{file}.tmp"));
        std::fs::write(&tmp, toml)?;
        std::fs::rename(&tmp, &path)?;
        Ok(())
    }

    /// Starts a server over this world's data, policies and keyring.
    pub fn start(&self) -> Result<Server> {
        Server::start(&self.data, &self.policies, &self.keys)
    }

    /// Starts a server that authenticates agents with an agents file.
    pub fn start_with_agents(&self, agents: &Path) -> Result<Server> {
        Server::start_with(&ServerOptions {
            data: self.data.clone(),
            policies: self.policies.clone(),
            keys: self.keys.clone(),
            agents: Some(agents.to_path_buf()),
        })
    }

    /// `name`'s signer-cli pointed at a server.
    pub fn signer(&self, name: &str, server: &Server) -> Signer {
        Signer {
            home: self.dir.path().to_path_buf(),
            server: server.api_url.clone(),
            key: self.key_file(name),
        }
    }

    /// `name`'s signer-cli pointed at an approver API URL.
    pub fn signer_at(&self, name: &str, api_url: &str) -> Signer {
        Signer {
            home: self.dir.path().to_path_buf(),
            server: api_url.to_owned(),
            key: self.key_file(name),
        }
    }

    /// Writes an executable `#!/bin/sh` script into the world; returns its absolute path.
    pub fn script(&self, name: &str, body: &str) -> Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let path = self.dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}"))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        Ok(path)
    }

    /// Runs `approval-server agent add NAME --agents FILE`; returns the printed token.
    pub fn add_agent(&self, name: &str, agents: &Path) -> Result<String> {
        let out = Command::new(bin("approval-server"))
            .args(["agent", "add", name, "--agents"])
            .arg(agents)
            .output()
            .context("cannot run approval-server agent add")?;
        let out = CliOutput::from(out);
        if !out.status.success() {
            bail!("approval-server agent add {name} failed: {out}");
        }
        let token = out.stdout.trim().to_owned();
        if token.is_empty() || token.contains(char::is_whitespace) {
            bail!("approval-server agent add printed {token:?}, not a token");
        }
        Ok(token)
    }
}

// ---------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------

/// How to start `approval-server serve`.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// `--data`.
    pub data: PathBuf,
    /// `--policies`.
    pub policies: PathBuf,
    /// `--keys`.
    pub keys: PathBuf,
    /// `--agents`.
    pub agents: Option<PathBuf>,
}

static SERVER_SEQ: AtomicU64 = AtomicU64::new(0);

/// A running `approval-server serve`, killed (SIGKILL) on drop.
pub struct Server {
    child: Option<Child>,
    /// The process id.
    pub pid: u32,
    /// `http://127.0.0.1:PORT/mcp`, as printed.
    pub mcp_url: String,
    /// `http://127.0.0.1:PORT`, as printed (what `signer-cli --server` takes).
    pub api_url: String,
    /// `http://127.0.0.1:PORT/metrics`, as printed when started with `--metrics-listen`.
    pub metrics_url: Option<String>,
    /// Where its stderr (the log) goes.
    pub log_path: PathBuf,
}

impl Server {
    /// `approval-server serve --data DIR --policies DIR --keys FILE --listen 127.0.0.1:0`.
    pub fn start(data: &Path, policies: &Path, keys: &Path) -> Result<Self> {
        Self::start_with(&ServerOptions {
            data: data.to_path_buf(),
            policies: policies.to_path_buf(),
            keys: keys.to_path_buf(),
            agents: None,
        })
    }

    /// Starts with options; waits for the two lines it prints once listening.
    pub fn start_with(opts: &ServerOptions) -> Result<Self> {
        Self::start_via(opts, &[])
    }

    /// Starts `approval-server serve` through a launcher: `launcher[0]` is run with
    /// the rest of `launcher`, then the server binary's path, then `serve` and its
    /// flags (for example `/bin/sh -c 'ulimit -S -f 64; exec "$0" "$@"'`, which
    /// must `exec` so that [`Server::pid`] is the server's). Empty: the server itself.
    pub fn start_via(opts: &ServerOptions, launcher: &[std::ffi::OsString]) -> Result<Self> {
        Self::start_full(opts, launcher, &[], &[])
    }

    /// Starts with extra `serve` flags and environment variables (`--listen` among
    /// them replaces the default `127.0.0.1:0`).
    pub fn start_full(
        opts: &ServerOptions,
        launcher: &[std::ffi::OsString],
        extra: &[std::ffi::OsString],
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let n = SERVER_SEQ.fetch_add(1, Ordering::SeqCst);
        let log_dir = opts.data.parent().unwrap_or(&opts.data).to_path_buf();
        let log_path = log_dir.join(format!("server-{}-{n}.log", std::process::id()));
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?;
        let mut cmd = match launcher.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin("approval-server"));
                c
            }
            None => Command::new(bin("approval-server")),
        };
        cmd.arg("serve")
            .arg("--data")
            .arg(&opts.data)
            .arg("--policies")
            .arg(&opts.policies)
            .arg("--keys")
            .arg(&opts.keys);
        // A test that needs a known port (a page origin fixed before the server
        // starts) passes its own `--listen`; otherwise any free port.
        if !extra.iter().any(|a| a == "--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        if let Some(a) = &opts.agents {
            cmd.arg("--agents").arg(a);
        }
        cmd.args(extra).envs(env.iter().copied());
        cmd.env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(PStdio::null())
            .stdout(PStdio::piped())
            .stderr(PStdio::from(log));
        let mut child = cmd.spawn().context("cannot start approval-server")?;
        let pid = child.id();
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        // Reads every line (so the pipe never fills) and forwards them.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    // Nobody listens any more: keep draining.
                    continue;
                }
            }
        });
        let mut server = Self {
            child: Some(child),
            pid,
            mcp_url: String::new(),
            api_url: String::new(),
            metrics_url: None,
            log_path,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        let want_metrics = extra.iter().any(|a| a == "--metrics-listen");
        while server.mcp_url.is_empty()
            || server.api_url.is_empty()
            || (want_metrics && server.metrics_url.is_none())
        {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(u) = line.strip_prefix("MCP endpoint: ") {
                        server.mcp_url = u.trim().to_owned();
                    } else if let Some(u) = line.strip_prefix("Approver API: ") {
                        server.api_url = u.trim().to_owned();
                    } else if let Some(u) = line.strip_prefix("Metrics: ") {
                        server.metrics_url = Some(u.trim().to_owned());
                    }
                }
                Err(_) => {
                    let status = server
                        .child
                        .as_mut()
                        .and_then(|c| c.try_wait().ok().flatten());
                    bail!(
                        "approval-server did not print its addresses (exit status: {status:?}); its log:\n{}",
                        server.log()
                    );
                }
            }
        }
        let local = ["http://127.0.0.1:", "https://127.0.0.1:"];
        if !local.iter().any(|p| server.mcp_url.starts_with(p)) || !server.mcp_url.ends_with("/mcp")
        {
            bail!("unexpected MCP endpoint line: {:?}", server.mcp_url);
        }
        Ok(server)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Sends SIGHUP (reload policies, keys and agents) with `/bin/kill`.
    pub fn sighup(&self) -> Result<()> {
        let st = Command::new("/bin/kill")
            .args(["-HUP", &self.pid.to_string()])
            .status()
            .context("cannot run /bin/kill")?;
        if !st.success() {
            bail!("/bin/kill -HUP {} failed: {st}", self.pid);
        }
        Ok(())
    }

    /// SIGKILLs the process and waits for it: a crash, nothing is flushed on the way out.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM through `/bin/kill` (a graceful stop: in-flight requests finish, the
    /// store is flushed), then waits up to `timeout` for the exit; SIGKILLs it if it
    /// is still running then. Returns the exit status, `None` when it had to be killed.
    pub fn stop(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let Some(mut c) = self.child.take() else {
            return Ok(None);
        };
        let st = Command::new("/bin/kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .context("cannot run /bin/kill")?;
        if !st.success() {
            if let Ok(Some(exited)) = c.try_wait() {
                return Ok(Some(exited));
            }
            bail!("/bin/kill -TERM {} failed: {st}", self.pid);
        }
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(exited) = c.try_wait()? {
                return Ok(Some(exited));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
        Ok(None)
    }

    /// Waits up to `timeout` for the process to exit by itself (no signal is sent).
    /// Returns its exit status, or `None` if it is still running then (it is left
    /// running). Once it has exited, [`Server::stop`] and [`Server::kill`] do nothing.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let Some(c) = self.child.as_mut() else {
            bail!("the server was already stopped or reaped");
        };
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(exited) = c.try_wait()? {
                // Reaped: its pid may be reused, so never signal it again.
                self.child = None;
                return Ok(Some(exited));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Posts a decision signed in-process with `key` (as `signer-cli` would sign it,
    /// without its prompts or a process per call) to `POST /v1/proposals/{id}/decisions`.
    /// Returns the HTTP status and the JSON body (`Value::Null` when it is not JSON).
    pub async fn post_decision(
        &self,
        key: &approval_core::keyring::SecretKey,
        id: &str,
        preview_sha256: &str,
        decision: approval_core::message::Decision,
        reason: &str,
    ) -> Result<(u16, Value)> {
        let hash = approval_core::Sha256Hex::parse(preview_sha256)
            .map_err(|e| anyhow!("not a preview hash {preview_sha256:?}: {e}"))?;
        let signed = approval_core::message::SignedDecision::sign(
            &key.key,
            key.name.clone(),
            decision,
            &hash,
            reason,
        )
        .map_err(|e| anyhow!("cannot sign: {e}"))?;
        let r = http_client()
            .post(format!("{}/v1/proposals/{id}/decisions", self.api_url))
            .json(&signed)
            .send()
            .await?;
        let status = r.status().as_u16();
        let text = r.text().await?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// An MCP client on this server (initialized), without a token.
    pub async fn mcp(&self) -> Result<Mcp> {
        Mcp::connect(&self.mcp_url, None).await
    }

    /// `GET /healthz`.
    pub async fn healthz(&self) -> Result<Value> {
        let r = http_client()
            .get(format!("{}/healthz", self.api_url))
            .send()
            .await?;
        Ok(r.json().await?)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        // As the project's own clients: a request is never written on a connection
        // the server is closing for idling (PROTOCOL.md, "Connections").
        .pool_idle_timeout(Duration::from_secs(
            approval_core::time::CLIENT_POOL_IDLE_SECS,
        ))
        .timeout(STEP_TIMEOUT)
        .build()
        .expect("an HTTP client")
}

// ---------------------------------------------------------------------------
// MCP clients
// ---------------------------------------------------------------------------

/// The result of `tools/call`.
#[derive(Debug, Clone)]
pub struct ToolResult {
    /// `isError`.
    pub is_error: bool,
    /// `structuredContent`.
    pub structured: Value,
    /// The whole `result`.
    pub raw: Value,
}

impl ToolResult {
    /// Reads a `tools/call` JSON-RPC response.
    pub fn from_response(resp: &Value) -> Result<Self> {
        if let Some(e) = resp.get("error") {
            bail!("JSON-RPC error instead of a tool result: {e}");
        }
        let raw = resp
            .get("result")
            .cloned()
            .ok_or_else(|| anyhow!("no result in {resp}"))?;
        let structured = raw
            .get("structuredContent")
            .cloned()
            .ok_or_else(|| anyhow!("no structuredContent in {raw}"))?;
        let is_error = raw.get("isError").and_then(Value::as_bool).unwrap_or(false);
        Ok(Self {
            is_error,
            structured,
            raw,
        })
    }

    /// `structuredContent.code`.
    pub fn code(&self) -> &str {
        self.str("code")
    }

    /// `structuredContent.status` ("" when absent).
    pub fn status(&self) -> &str {
        self.str("status")
    }

    /// A string field of `structuredContent` ("" when absent).
    pub fn str(&self, key: &str) -> &str {
        self.structured
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `proposal_id`.
    pub fn proposal_id(&self) -> String {
        self.str("proposal_id").to_owned()
    }

    /// `preview_sha256`.
    pub fn preview_sha256(&self) -> String {
        self.str("preview_sha256").to_owned()
    }

    /// `executable` (false when absent).
    pub fn executable(&self) -> bool {
        self.structured
            .get("executable")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// `retry_allowed` (false when absent).
    pub fn retry_allowed(&self) -> bool {
        self.structured
            .get("retry_allowed")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// Names of the approvers in `approvals`.
    pub fn approvals(&self) -> Vec<String> {
        self.names("approvals")
    }

    /// Names of the approvers in `rejections`.
    pub fn rejections(&self) -> Vec<String> {
        self.names("rejections")
    }

    fn names(&self, key: &str) -> Vec<String> {
        self.structured
            .get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|d| d.get("approver").and_then(Value::as_str))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Asserts the code and isError in one go, with the whole result in the message.
    #[track_caller]
    pub fn expect(&self, code: &str, is_error: bool) -> &Self {
        assert_eq!(
            (self.code(), self.is_error),
            (code, is_error),
            "unexpected tool result: {}",
            self.structured
        );
        self
    }
}

/// What both MCP transports offer; the tool helpers are written once on top.
#[allow(async_fn_in_trait)]
pub trait McpClient {
    /// Sends one JSON-RPC request; returns the whole response object.
    async fn rpc(&self, method: &str, params: Value) -> Result<Value>;

    /// `tools/list` → the tools.
    async fn list_tools(&self) -> Result<Vec<Value>> {
        let r = self.rpc("tools/list", json!({})).await?;
        r.pointer("/result/tools")
            .and_then(Value::as_array)
            .cloned()
            .ok_or_else(|| anyhow!("no tools in {r}"))
    }

    /// `tools/call`.
    async fn call_tool(&self, name: &str, arguments: Value) -> Result<ToolResult> {
        let r = self
            .rpc("tools/call", json!({"name": name, "arguments": arguments}))
            .await?;
        ToolResult::from_response(&r).with_context(|| format!("calling {name}"))
    }

    /// `approval_prepare {kind, payload, summary}`.
    async fn prepare(&self, kind: &str, payload: Value, summary: &str) -> Result<ToolResult> {
        self.call_tool(
            "approval_prepare",
            json!({"kind": kind, "payload": payload, "summary": summary}),
        )
        .await
    }

    /// `approval_status {proposal_id}`.
    async fn status(&self, id: &str) -> Result<ToolResult> {
        self.call_tool("approval_status", json!({"proposal_id": id}))
            .await
    }

    /// `approval_execute {proposal_id, preview_sha256}`.
    async fn execute(&self, id: &str, preview_sha256: &str) -> Result<ToolResult> {
        self.call_tool(
            "approval_execute",
            json!({"proposal_id": id, "preview_sha256": preview_sha256}),
        )
        .await
    }

    /// `approval_withdraw {proposal_id}`.
    async fn withdraw(&self, id: &str) -> Result<ToolResult> {
        self.call_tool("approval_withdraw", json!({"proposal_id": id}))
            .await
    }

    /// `approval_list {status?}`.
    async fn list(&self, status: Option<&str>) -> Result<ToolResult> {
        let args = match status {
            Some(s) => json!({"status": s}),
            None => json!({}),
        };
        self.call_tool("approval_list", args).await
    }

    /// Polls `approval_status` until `status` is `want` (50 ms steps, bounded).
    async fn wait_status(&self, id: &str, want: &str, timeout: Duration) -> Result<ToolResult> {
        let last = std::sync::Mutex::new(String::new());
        let r = poll_until(&format!("{id} to become {want}"), timeout, || async {
            let r = self.status(id).await?;
            if let Ok(mut l) = last.lock() {
                *l = r.structured.to_string();
            }
            Ok((r.status() == want).then_some(r))
        })
        .await;
        let last = last.lock().map(|l| l.clone()).unwrap_or_default();
        r.with_context(|| format!("last status: {last}"))
    }
}

static RPC_ID: AtomicU64 = AtomicU64::new(1);

fn next_id() -> u64 {
    RPC_ID.fetch_add(1, Ordering::SeqCst)
}

/// `initialize` params for this harness's clients.
pub fn initialize_params() -> Value {
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "approval-e2e", "version": "0.1.0"}
    })
}

/// MCP over Streamable HTTP (the server is stateless and answers plain JSON).
#[derive(Clone)]
pub struct Mcp {
    http: reqwest::Client,
    /// The `/mcp` URL.
    pub url: String,
    token: Option<String>,
    version: String,
}

impl Mcp {
    /// Connects and initializes (`initialize`, then `notifications/initialized`).
    pub async fn connect(url: &str, token: Option<&str>) -> Result<Self> {
        Self::connect_with(http_client(), url, token).await
    }

    /// [`Mcp::connect`] with a client of the caller's (one that trusts a test CA).
    pub async fn connect_with(
        http: reqwest::Client,
        url: &str,
        token: Option<&str>,
    ) -> Result<Self> {
        let mut c = Self {
            http,
            url: url.to_owned(),
            token: token.map(str::to_owned),
            version: String::new(),
        };
        let init = c.rpc("initialize", initialize_params()).await?;
        let v = init
            .pointer("/result/protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| anyhow!("initialize answered {init}"))?;
        c.version = v.to_owned();
        let r = c
            .post_raw(
                &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                &[],
            )
            .await?;
        if !r.status().is_success() {
            bail!("notifications/initialized answered HTTP {}", r.status());
        }
        Ok(c)
    }

    /// The negotiated protocol version.
    pub fn protocol_version(&self) -> &str {
        &self.version
    }

    /// POSTs a JSON body to `/mcp` with the standard headers (and the token, and
    /// `MCP-Protocol-Version` once negotiated) plus `extra` headers; the raw response.
    pub async fn post_raw(
        &self,
        body: &Value,
        extra: &[(&str, &str)],
    ) -> Result<reqwest::Response> {
        let mut req = self
            .http
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(body.to_string());
        if !self.version.is_empty() {
            req = req.header("MCP-Protocol-Version", &self.version);
        }
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        Ok(req.send().await?)
    }
}

impl McpClient for Mcp {
    async fn rpc(&self, method: &str, params: Value) -> Result<Value> {
        let id = next_id();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let resp = self.post_raw(&body, &[]).await?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            bail!("{method}: HTTP {status}: {text}");
        }
        let v: Value =
            serde_json::from_str(&text).with_context(|| format!("{method}: not JSON: {text}"))?;
        if v.get("id") != Some(&json!(id)) {
            bail!("{method}: answer with another id: {v}");
        }
        Ok(v)
    }
}

/// An MCP client speaking to `approval-server stdio` over its stdin/stdout.
pub struct Stdio {
    child: tokio::process::Child,
    io: tokio::sync::Mutex<StdioIo>,
    stderr: Option<StderrLog>,
}

/// The stderr of a child, line by line, read as it comes (so the pipe never fills).
#[derive(Clone, Default)]
pub struct StderrLog {
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    more: std::sync::Arc<tokio::sync::Notify>,
}

impl StderrLog {
    fn follow(stderr: tokio::process::ChildStderr) -> Self {
        let log = Self::default();
        let l = log.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(mut v) = l.lines.lock() {
                    v.push(line);
                }
                l.more.notify_waiters();
            }
            l.more.notify_waiters();
        });
        log
    }

    /// Everything read so far.
    pub fn text(&self) -> String {
        self.lines.lock().map(|v| v.join("\n")).unwrap_or_default()
    }

    /// Waits for a line that starts with `prefix`; returns the rest of it.
    pub async fn wait_for(&self, prefix: &str, timeout: Duration) -> Result<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.more.notified();
            if let Some(rest) = self.lines.lock().ok().and_then(|v| {
                v.iter()
                    .find_map(|l| l.strip_prefix(prefix).map(|r| r.trim().to_owned()))
            }) {
                return Ok(rest);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                bail!(
                    "no stderr line starting with {prefix:?} within {timeout:?}; stderr:\n{}",
                    self.text()
                );
            }
        }
    }
}

struct StdioIo {
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Stdio {
    /// Spawns the bridge and initializes.
    pub async fn connect(mcp_url: &str, token: Option<&str>) -> Result<Self> {
        let c = Self::spawn(mcp_url, token)?;
        let init = c.rpc("initialize", initialize_params()).await?;
        if init.pointer("/result/protocolVersion").is_none() {
            bail!("initialize through stdio answered {init}");
        }
        c.send_line(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(c)
    }

    /// Spawns the bridge without initializing (to send raw lines).
    pub fn spawn(mcp_url: &str, token: Option<&str>) -> Result<Self> {
        let mut cmd = tokio::process::Command::new(bin("approval-server"));
        cmd.args(["stdio", "--connect", mcp_url])
            .env_remove("APPROVAL_AGENT_TOKEN")
            .stdin(PStdio::piped())
            .stdout(PStdio::piped())
            .stderr(PStdio::inherit())
            .kill_on_drop(true);
        if let Some(t) = token {
            cmd.args(["--token", t]);
        }
        let mut child = cmd.spawn().context("cannot start approval-server stdio")?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        Ok(Self {
            child,
            io: tokio::sync::Mutex::new(StdioIo {
                stdin,
                lines: tokio::io::BufReader::new(stdout).lines(),
            }),
            stderr: None,
        })
    }

    /// Spawns `approval-server stdio ARGS...` (no `--connect` unless in `args`) with
    /// its stderr captured in [`Stdio::stderr`], and `RUST_LOG=info` so that any log
    /// line that reached stdout would break the protocol the tests read there.
    pub fn spawn_args(args: &[std::ffi::OsString], env: &[(&str, &str)]) -> Result<Self> {
        let mut cmd = tokio::process::Command::new(bin("approval-server"));
        cmd.arg("stdio")
            .args(args)
            .env_remove("APPROVAL_AGENT_TOKEN")
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(PStdio::piped())
            .stdout(PStdio::piped())
            .stderr(PStdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().context("cannot start approval-server stdio")?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let stderr = child.stderr.take().context("no stderr")?;
        Ok(Self {
            child,
            io: tokio::sync::Mutex::new(StdioIo {
                stdin,
                lines: tokio::io::BufReader::new(stdout).lines(),
            }),
            stderr: Some(StderrLog::follow(stderr)),
        })
    }

    /// Initializes a session opened with [`Stdio::spawn_args`].
    pub async fn initialize(&self) -> Result<Value> {
        let init = self.rpc("initialize", initialize_params()).await?;
        if init.pointer("/result/protocolVersion").is_none() {
            bail!("initialize through stdio answered {init}");
        }
        self.send_line(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(init)
    }

    /// The captured stderr (only for [`Stdio::spawn_args`]).
    pub fn stderr(&self) -> &StderrLog {
        static NONE: std::sync::OnceLock<StderrLog> = std::sync::OnceLock::new();
        self.stderr
            .as_ref()
            .unwrap_or_else(|| NONE.get_or_init(StderrLog::default))
    }

    /// The child's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Writes `msgs`, closes stdin at once, and reads stdout to its end: every line
    /// printed after the close, and the exit status.
    pub async fn send_then_close(self, msgs: &[Value]) -> Result<(Vec<Value>, ExitStatus)> {
        let Self { mut child, io, .. } = self;
        let StdioIo {
            mut stdin,
            mut lines,
        } = io.into_inner();
        for msg in msgs {
            let mut line = msg.to_string();
            line.push('\n');
            stdin.write_all(line.as_bytes()).await?;
        }
        stdin.flush().await?;
        drop(stdin);
        let mut out = Vec::new();
        loop {
            let next = tokio::time::timeout(STEP_TIMEOUT, lines.next_line())
                .await
                .context("stdout did not end after stdin closed")??;
            let Some(l) = next else { break };
            out.push(serde_json::from_str(&l).with_context(|| format!("not JSON: {l}"))?);
        }
        let status = tokio::time::timeout(STEP_TIMEOUT, child.wait()).await??;
        Ok((out, status))
    }

    /// The next line the bridge prints, as JSON; `None` when stdout closed.
    pub async fn read_line(&self, timeout: Duration) -> Result<Option<Value>> {
        let mut io = self.io.lock().await;
        let next = tokio::time::timeout(timeout, io.lines.next_line())
            .await
            .with_context(|| format!("no line on the bridge's stdout within {timeout:?}"))??;
        match next {
            None => Ok(None),
            Some(l) => Ok(Some(
                serde_json::from_str(&l).with_context(|| format!("not JSON: {l}"))?,
            )),
        }
    }

    /// Writes one message as one line.
    pub async fn send_line(&self, msg: &Value) -> Result<()> {
        let mut io = self.io.lock().await;
        let mut line = msg.to_string();
        line.push('\n');
        io.stdin.write_all(line.as_bytes()).await?;
        io.stdin.flush().await?;
        Ok(())
    }

    /// Closes stdin and waits for the bridge to exit.
    pub async fn close(mut self) -> Result<ExitStatus> {
        drop(self.io);
        Ok(tokio::time::timeout(STEP_TIMEOUT, self.child.wait()).await??)
    }
}

impl McpClient for Stdio {
    async fn rpc(&self, method: &str, params: Value) -> Result<Value> {
        let id = next_id();
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut io = self.io.lock().await;
        let mut line = msg.to_string();
        line.push('\n');
        io.stdin.write_all(line.as_bytes()).await?;
        io.stdin.flush().await?;
        loop {
            let next = tokio::time::timeout(STEP_TIMEOUT, io.lines.next_line())
                .await
                .with_context(|| {
                    format!("{method}: no answer on stdout within {STEP_TIMEOUT:?}")
                })??;
            let Some(line) = next else {
                bail!("{method}: the stdio bridge closed stdout");
            };
            let v: Value = serde_json::from_str(&line)
                .with_context(|| format!("{method}: stdout line is not JSON: {line}"))?;
            if v.get("id") == Some(&json!(id)) {
                return Ok(v);
            }
            if v.get("id") == Some(&Value::Null) && v.get("error").is_some() {
                // Only one request is in flight, so this can only be its answer, but
                // without its id a host could not match it: say so rather than hang.
                bail!("{method}: the stdio bridge answered request {id} with an error whose id is null: {line}");
            }
            // A notification or an answer to a notification: not ours.
        }
    }
}

// ---------------------------------------------------------------------------
// signer-cli
// ---------------------------------------------------------------------------

/// What a command printed and how it exited.
#[derive(Debug, Clone)]
pub struct CliOutput {
    /// Exit status.
    pub status: ExitStatus,
    /// stdout.
    pub stdout: String,
    /// stderr.
    pub stderr: String,
}

impl From<std::process::Output> for CliOutput {
    fn from(o: std::process::Output) -> Self {
        Self {
            status: o.status,
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl std::fmt::Display for CliOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

impl CliOutput {
    /// stdout as JSON (for `--json` commands).
    pub fn json(&self) -> Result<Value> {
        serde_json::from_str(&self.stdout).with_context(|| format!("not JSON: {self}"))
    }
}

fn signer_command(home: &Path) -> Command {
    let mut cmd = Command::new(bin("signer-cli"));
    // Never pick up a developer's own configuration or key.
    cmd.env("XDG_CONFIG_HOME", home.join("xdg-config"))
        .env_remove("SIGNER_SERVER")
        .env_remove("SIGNER_KEY")
        .stdin(PStdio::null());
    cmd
}

/// One approver's `signer-cli`, with `--server` and `--key` set.
#[derive(Debug, Clone)]
pub struct Signer {
    home: PathBuf,
    /// `--server`.
    pub server: String,
    /// `--key`.
    pub key: PathBuf,
}

impl Signer {
    /// Runs `signer-cli --server URL --key FILE ARGS...` (stdin closed).
    pub async fn run(&self, args: &[&str]) -> Result<CliOutput> {
        let mut cmd = tokio::process::Command::from(signer_command(&self.home));
        cmd.arg("--server")
            .arg(&self.server)
            .arg("--key")
            .arg(&self.key)
            .args(args)
            .kill_on_drop(true);
        let out = tokio::time::timeout(STEP_TIMEOUT, cmd.output())
            .await
            .with_context(|| format!("signer-cli {args:?} did not finish"))??;
        Ok(out.into())
    }

    /// Runs a command that must succeed; returns its output.
    pub async fn ok(&self, args: &[&str]) -> Result<CliOutput> {
        let out = self.run(args).await?;
        if !out.status.success() {
            bail!("signer-cli {} failed: {out}", args.join(" "));
        }
        Ok(out)
    }

    /// `approve ID --yes --json`; the printed JSON.
    pub async fn approve(&self, id: &str) -> Result<Value> {
        self.ok(&["--json", "approve", id, "--yes"]).await?.json()
    }

    /// `reject ID --reason R --yes --json`.
    pub async fn reject(&self, id: &str, reason: &str) -> Result<Value> {
        self.ok(&["--json", "reject", id, "--reason", reason, "--yes"])
            .await?
            .json()
    }

    /// `revoke ID --yes --json`.
    pub async fn revoke(&self, id: &str) -> Result<Value> {
        self.ok(&["--json", "revoke", id, "--yes"]).await?.json()
    }

    /// `resolve ID --outcome succeeded|failed --yes --json`.
    pub async fn resolve(&self, id: &str, outcome: &str) -> Result<Value> {
        self.ok(&["--json", "resolve", id, "--outcome", outcome, "--yes"])
            .await?
            .json()
    }

    /// `receipt ID --out FILE`.
    pub async fn receipt(&self, id: &str, out: &Path) -> Result<CliOutput> {
        let out = out.to_str().context("non-UTF-8 path")?.to_owned();
        self.ok(&["receipt", id, "--out", &out]).await
    }

    /// `verify FILE --keys KEYRING` (offline; no server or key needed).
    pub async fn verify(&self, receipt: &Path, keyring: &Path) -> Result<CliOutput> {
        let mut cmd = tokio::process::Command::from(signer_command(&self.home));
        cmd.arg("--json")
            .arg("verify")
            .arg(receipt)
            .arg("--keys")
            .arg(keyring)
            .kill_on_drop(true);
        let out = tokio::time::timeout(STEP_TIMEOUT, cmd.output()).await??;
        Ok(out.into())
    }
}

// ---------------------------------------------------------------------------
// A real third-party MCP server, installed from npm
// ---------------------------------------------------------------------------

/// The reference filesystem MCP server the `mcp` executor is tested against, pinned.
pub const FILESYSTEM_SERVER: &str = "@modelcontextprotocol/server-filesystem";
/// Its exact version.
pub const FILESYSTEM_SERVER_VERSION: &str = "2026.8.31";

/// The `dist/index.js` of [`FILESYSTEM_SERVER`], installed with npm into
/// `<checkout>/target/npm-downstream` on first use: once per process (under a mutex),
/// and across processes by installing into a private folder that is renamed into place
/// (a rename onto a folder another process already put there fails, and that one is
/// used). Run it as `node <path> <allowed dir>`: no npx and no network at run time.
/// `Ok(None)` after the one `skipped:` line when node or npm is missing (a failure
/// under `APPROVAL_TEST_REQUIRE_ALL`); fails, naming the command, when the install
/// fails.
pub fn filesystem_server() -> Result<Option<PathBuf>> {
    if node().is_none() {
        return Ok(None);
    }
    let Some(npm) = require(
        "npm",
        "to install the reference filesystem MCP server into target/npm-downstream",
        NODE_INSTALL,
    ) else {
        return Ok(None);
    };
    static ONCE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _in_process = ONCE.lock().unwrap_or_else(|p| p.into_inner());
    let target = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target");
    let prefix = target.join("npm-downstream");
    let index_in = |prefix: &Path| {
        prefix
            .join("node_modules")
            .join(FILESYSTEM_SERVER)
            .join("dist")
            .join("index.js")
    };
    let installed = |prefix: &Path| -> bool {
        let package = prefix.join("node_modules").join(FILESYSTEM_SERVER);
        std::fs::read_to_string(package.join("package.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| v["version"] == FILESYSTEM_SERVER_VERSION)
            && index_in(prefix).is_file()
    };
    if installed(&prefix) {
        return Ok(Some(index_in(&prefix)));
    }
    let private = target.join(format!("npm-downstream.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&private);
    std::fs::create_dir_all(&private)
        .with_context(|| format!("cannot create {}", private.display()))?;
    let spec = format!("{FILESYSTEM_SERVER}@{FILESYSTEM_SERVER_VERSION}");
    let shown = format!(
        "npm install --no-audit --no-fund --prefix {} {spec}",
        private.display()
    );
    let out = Command::new(npm)
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(&private)
        .arg(&spec)
        .output()
        .with_context(|| {
            format!("cannot run `{shown}`: the mcp executor tests need node and npm on PATH")
        })?;
    if !out.status.success() || !installed(&private) {
        bail!(
            "`{shown}` failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A stale, incomplete install is replaced; a complete one put there meanwhile wins.
    if prefix.exists() && !installed(&prefix) {
        let _ = std::fs::remove_dir_all(&prefix);
    }
    if std::fs::rename(&private, &prefix).is_err() {
        let _ = std::fs::remove_dir_all(&private);
    }
    if !installed(&prefix) {
        bail!(
            "{} holds no {spec} after `{shown}` and a rename into place",
            prefix.display()
        );
    }
    Ok(Some(index_in(&prefix)))
}

/// How to get node and npm (Debian's packages; any Node.js 18 or later will do).
const NODE_INSTALL: &str = "apt-get install nodejs npm";

/// `node` on the PATH, or `None` after the one `skipped:` line (a failure under
/// `APPROVAL_TEST_REQUIRE_ALL`): the MCP executor's downstream servers in these
/// tests are JavaScript, run by the gate as `node SCRIPT`.
pub fn node() -> Option<PathBuf> {
    require(
        "node",
        "to run the downstream MCP servers the gate calls (`node SCRIPT`)",
        NODE_INSTALL,
    )
}
