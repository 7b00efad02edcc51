//! Crash harness: the real `approval-server` binary is SIGKILLed at random moments
//! under mixed load, restarted on the same data folder, and checked each time.
//!
//! Each round starts the server (port 0) on the same `--data`, runs prepares over
//! MCP, signed decisions on the approver API (keys made here with approval-core)
//! and executes of a `command` executor (a /bin/sh script that appends
//! `$APPROVAL_PROPOSAL_ID` to a witness file) for a random short time, then
//! SIGKILLs it while requests are in flight. After each restart:
//!
//! - the store opens (the server starts and answers);
//! - every proposal whose prepare was acknowledged (a result was received) is
//!   there, with every decision whose POST was acknowledged (HTTP 200);
//! - nothing acknowledged as APPROVED (or later) went back: APPROVED never
//!   becomes PENDING, REJECTED or WITHDRAWN again, a finished outcome never
//!   changes, and nothing is left EXECUTING (start-up turns it into
//!   OUTCOME_UNKNOWN);
//! - no proposal id appears twice in the witness file (no effect ran twice), and
//!   every id in it belongs to a proposal that was durably claimed (EXECUTING or
//!   later), never one still PENDING or APPROVED.
//!
//! At the end the server is stopped and `approval-server audit verify` must exit 0.
//!
//! On sled the server checkpoints its recovery snapshot whenever anything became
//! durable (`APPROVAL_SLED_CHECKPOINT_BYTES=1`; vendor/sled/PATCHES.md §7) instead of
//! every 256 MiB, so SIGKILLs land before, during and after checkpoints and restarts
//! recover from them; the summary counts the rounds that saw one, and a run of 10
//! rounds or more with none fails.
//!
//! The same harness runs on two instances sharing one PostgreSQL database (issue
//! #15), when `APPROVAL_TEST_DATABASE_URL` is set: each round starts whichever
//! instance is down, spreads the load over both, and SIGKILLs one of them while the
//! other keeps serving. A claim left by the killed instance stays EXECUTING until
//! its lease runs out (`--claim-lease 1`) and a survivor ends it OUTCOME_UNKNOWN, so
//! EXECUTING is an allowed state between rounds, never a re-run; the final check
//! waits out the lease and then requires every effect's proposal to be finished.
//!
//! `CRASH_ROUNDS` (default 20) sets the number of rounds; `CRASH_SEED` replays a
//! run (the seed is printed). Self-contained: it does not use the e2e library
//! (except for the PostgreSQL schema, made and dropped by `approval_e2e::pg`).

use approval_core::keyring::SecretKey;
use approval_core::message::{sign_read, Decision, SignedDecision};
use approval_core::{ApproverName, Sha256Hex};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const APPROVERS: [&str; 3] = ["alice", "bob", "carol"];
const KIND: &str = "crash.run";

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

/// xorshift64*: deterministic from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        if v.is_empty() {
            None
        } else {
            v.get(self.below(v.len() as u64) as usize)
        }
    }
}

fn server_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let mut dir = exe.parent().expect("a folder").to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let bin = dir.join(format!("approval-server{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} not found: the crash harness runs the real server binary. Build it first with \
         `cargo build -p approval-server`",
        bin.display()
    );
    bin
}

fn secret(name: &str) -> SecretKey {
    let seed = Sha256Hex::digest(format!("crash harness key {name}").as_bytes());
    SecretKey::from_seed(ApproverName::parse(name).unwrap(), *seed.as_bytes())
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The recovery snapshots in the server's sled folder (`<data>/store/snap.<lsn>`), by name.
fn snapshots(data: &Path) -> BTreeSet<String> {
    std::fs::read_dir(data)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with("snap.") && !n.ends_with(".in___motion"))
                .collect()
        })
        .unwrap_or_default()
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---------------------------------------------------------------------------
// The server process
// ---------------------------------------------------------------------------

struct World {
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// A PostgreSQL store URL shared by the instances; `None`: one sled instance.
    store: Option<String>,
}

/// The execution lease on PostgreSQL, in seconds (`--claim-lease`).
const LEASE_SECS: u64 = 1;

impl World {
    fn new(store: Option<String>) -> Self {
        let built = server_bin();
        let dir = tempfile::Builder::new()
            .prefix("crash-harness-")
            .tempdir()
            .unwrap();
        // Run a private link (or copy) of the binary: a `cargo build` elsewhere that
        // replaces target/debug/approval-server mid-run must not change what restarts.
        let bin = dir.path().join("approval-server");
        if std::fs::hard_link(&built, &bin).is_err() {
            std::fs::copy(&built, &bin).unwrap();
        }
        let w = Self { dir, bin, store };
        std::fs::create_dir_all(w.policies()).unwrap();
        let keyring: String = APPROVERS
            .iter()
            .map(|n| secret(n).keyring_line() + "\n")
            .collect();
        std::fs::write(w.keys(), keyring).unwrap();
        let script = w.path().join("effect.sh");
        std::fs::write(
            &script,
            "#!/bin/sh\necho \"$APPROVAL_PROPOSAL_ID\" >> \"$1\"\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let policy = format!(
            r#"kind = "{KIND}"
description = "Append the proposal id to a witness file"
quorum = 2
approvers = ["alice", "bob", "carol"]
vetoes = 1
ttl = "30m"
execute_within = "30m"
[executor]
type = "command"
program = "{}"
args = ["{}"]
timeout = "20s"
"#,
            script.display(),
            w.witness().display()
        );
        std::fs::write(w.policies().join(format!("{KIND}.toml")), policy).unwrap();
        w
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn data(&self) -> PathBuf {
        self.path().join("data")
    }
    fn policies(&self) -> PathBuf {
        self.path().join("policies")
    }
    fn keys(&self) -> PathBuf {
        self.path().join("keyring")
    }
    fn witness(&self) -> PathBuf {
        self.path().join("witness.txt")
    }
    fn log(&self) -> PathBuf {
        self.path().join("server.log")
    }

    /// Whether claims carry leases (several instances on PostgreSQL).
    fn leased(&self) -> bool {
        self.store.is_some()
    }

    /// Starts instance `i` (on sled there is one, on the data folder).
    fn start(&self, i: usize) -> Server {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())
            .unwrap();
        let mut cmd = Command::new(&self.bin);
        cmd.arg("serve");
        match &self.store {
            None => cmd.arg("--data").arg(self.data()),
            Some(url) => cmd
                .arg("--data")
                .arg(self.path().join(format!("data-{i}")))
                .args(["--store", url, "--claim-lease", &LEASE_SECS.to_string()]),
        };
        let mut child = cmd
            .arg("--policies")
            .arg(self.policies())
            .arg("--keys")
            .arg(self.keys())
            .args(["--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            // sled checkpoints its recovery snapshot whenever anything became
            // durable since the last (every 500 ms under load) instead of every
            // 256 MiB, so SIGKILLs land before, during and after checkpoints,
            // and restarts recover from them (vendor/sled/PATCHES.md §7).
            .env("APPROVAL_SLED_CHECKPOINT_BYTES", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.display()));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.strip_prefix("MCP endpoint: ") {
                    let _ = tx.send(url.trim_end_matches("/mcp").to_owned());
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(base) => Server { child, base },
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().ok();
                panic!(
                    "the server did not start on the data folder (exit {status:?}); its log ends:\n{}",
                    tail(&self.log(), 30)
                );
            }
        }
    }
}

struct Server {
    child: Child,
    base: String,
}

impl Server {
    /// SIGKILL (std's `Child::kill` on Unix), and reap it.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM through /bin/kill, waiting for the graceful stop; SIGKILL after 20 s.
    fn stop(&mut self) {
        let _ = Command::new("/bin/kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------
// What the server acknowledged
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Acked {
    hash: String,
    /// (approver, decision) pairs whose POST got a 200, with which response.
    decisions: BTreeMap<(String, String), String>,
    /// The latest status the server reported in a successful response.
    status: String,
    /// Which response acknowledged `status` (for the failure message).
    how: String,
}

#[derive(Default)]
struct Model {
    props: BTreeMap<String, Acked>,
    /// Ids touched since the last check (to check them first after a crash).
    touched: BTreeSet<String>,
    violations: Vec<String>,
}

#[derive(Default)]
struct Stats {
    prepares: AtomicU64,
    decisions: AtomicU64,
    executes: AtomicU64,
    refused_replays: AtomicU64,
    resolves: AtomicU64,
}

/// Whether `now` may follow a status the server acknowledged, after a restart.
fn may_follow(acked: &str, now: &str, leased: bool) -> bool {
    // Several instances: a claim may be running on the survivor, or left by the
    // killed instance until its lease runs out; never claimed twice either way.
    if leased && now == "EXECUTING" {
        return matches!(acked, "PENDING" | "APPROVED" | "EXECUTING");
    }
    match acked {
        "PENDING" => now != "EXECUTING",
        "APPROVED" => matches!(
            now,
            "APPROVED"
                | "SUCCEEDED"
                | "FAILED"
                | "OUTCOME_UNKNOWN"
                | "REVOKED"
                | "EXPIRED"
                | "POLICY_CHANGED"
        ),
        "EXECUTING" => matches!(now, "SUCCEEDED" | "FAILED" | "OUTCOME_UNKNOWN"),
        "OUTCOME_UNKNOWN" => matches!(now, "OUTCOME_UNKNOWN" | "SUCCEEDED" | "FAILED"),
        other => now == other,
    }
}

struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    fn new(base: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            base: base.to_owned(),
        }
    }

    /// A tool call; `Ok((isError, structuredContent))` only when a result arrived.
    async fn call(&self, tool: &str, args: Value) -> Result<(bool, Value), String> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": tool, "arguments": args}});
        let r = self
            .http
            .post(format!("{}/mcp", self.base))
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-06-18")
            .json(&body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let v: Value = r.json().await.map_err(|e| e.to_string())?;
        let res = &v["result"];
        if !res.is_object() {
            return Err(format!("no result: {v}"));
        }
        Ok((
            res["isError"].as_bool().unwrap_or(false),
            res["structuredContent"].clone(),
        ))
    }

    /// Posts a signed decision; `Ok((status, body))` only when a response arrived.
    async fn decide(
        &self,
        id: &str,
        who: &str,
        d: Decision,
        hash: &str,
    ) -> Result<(u16, Value), String> {
        let k = secret(who);
        let signed = SignedDecision::sign(
            &k.key,
            k.name.clone(),
            d,
            &Sha256Hex::parse(hash).unwrap(),
            "crash harness",
        )
        .unwrap();
        let r = self
            .http
            .post(format!("{}/v1/proposals/{id}/decisions", self.base))
            .json(&signed)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = r.status().as_u16();
        let v: Value = r.json().await.map_err(|e| e.to_string())?;
        Ok((status, v))
    }

    async fn show(&self, id: &str) -> Result<(u16, Value), String> {
        let path = format!("/v1/proposals/{id}");
        let k = secret("alice");
        // Signed reads cover the server's id, from its unsigned /healthz.
        let health: Value = self
            .http
            .get(format!("{}/healthz", self.base))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        let server_id = approval_core::ServerId::parse(health["server_id"].as_str().unwrap_or(""))
            .map_err(|e| format!("/healthz: {e}"))?;
        let auth = sign_read(&k.key, &k.name, &server_id, unix_now(), "GET", &path);
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .header("Authorization", auth)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = r.status().as_u16();
        Ok((status, r.json().await.map_err(|e| e.to_string())?))
    }
}

// ---------------------------------------------------------------------------
// Load
// ---------------------------------------------------------------------------

/// How far along a status is; acknowledged statuses only move forward in the model
/// (responses to concurrent requests can arrive out of order).
fn rank(status: &str) -> u8 {
    match status {
        "PENDING" => 0,
        "APPROVED" => 1,
        "EXECUTING" => 2,
        "OUTCOME_UNKNOWN" => 3,
        "" => 0,
        _ => 4,
    }
}

fn raise(a: &mut Acked, seen: &str, how: String) {
    if rank(seen) >= rank(&a.status) && !seen.is_empty() {
        a.status = seen.to_owned();
        a.how = how;
    }
}

fn candidates(model: &Mutex<Model>, status: &str) -> Vec<(String, String)> {
    let m = model.lock().unwrap();
    m.props
        .iter()
        .filter(|(_, a)| a.status == status)
        .map(|(id, a)| (id.clone(), a.hash.clone()))
        .collect()
}

fn record_status(model: &Mutex<Model>, id: &str, status: &str, how: String) {
    let mut m = model.lock().unwrap();
    if let Some(a) = m.props.get_mut(id) {
        raise(a, status, how);
    }
    m.touched.insert(id.to_owned());
}

async fn preparer(
    c: Arc<Client>,
    model: Arc<Mutex<Model>>,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = Rng(seed | 1);
    while !stop.load(Ordering::SeqCst) {
        let n = rng.next();
        let Ok((err, out)) = c
            .call(
                "approval_prepare",
                json!({"kind": KIND, "payload": {"n": n % 1_000_000, "note": "crash"}, "summary": "crash harness"}),
            )
            .await
        else {
            continue;
        };
        if err {
            model
                .lock()
                .unwrap()
                .violations
                .push(format!("prepare refused: {out}"));
            continue;
        }
        let (Some(id), Some(hash)) = (out["proposal_id"].as_str(), out["preview_sha256"].as_str())
        else {
            model
                .lock()
                .unwrap()
                .violations
                .push(format!("prepare result without id or hash: {out}"));
            continue;
        };
        let mut m = model.lock().unwrap();
        m.props.insert(
            id.to_owned(),
            Acked {
                hash: hash.to_owned(),
                decisions: BTreeMap::new(),
                status: "PENDING".into(),
                how: "the prepare result".into(),
            },
        );
        m.touched.insert(id.to_owned());
        stats.prepares.fetch_add(1, Ordering::Relaxed);
    }
}

async fn decider(
    c: Arc<Client>,
    model: Arc<Mutex<Model>>,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = Rng(seed | 1);
    while !stop.load(Ordering::SeqCst) {
        // Settle an unknown outcome now and then; otherwise decide on a pending one.
        let unknown = candidates(&model, "OUTCOME_UNKNOWN");
        let (id, hash, who, d) = if !unknown.is_empty() && rng.below(4) == 0 {
            let (id, hash) = rng.pick(&unknown).unwrap().clone();
            (
                id,
                hash,
                *rng.pick(&APPROVERS).unwrap(),
                Decision::ResolveSucceeded,
            )
        } else {
            let pending = candidates(&model, "PENDING");
            let Some((id, hash)) = rng.pick(&pending).cloned() else {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            };
            let d = if rng.below(12) == 0 {
                Decision::Reject
            } else {
                Decision::Approve
            };
            (id, hash, *rng.pick(&APPROVERS).unwrap(), d)
        };
        let Ok((code, v)) = c.decide(&id, who, d, &hash).await else {
            continue;
        };
        if code == 200 {
            // A repeat (already_recorded) answers its status without the view.
            let status = v["proposal"]["status"]
                .as_str()
                .or(v["status"].as_str())
                .unwrap_or("")
                .to_owned();
            let mut m = model.lock().unwrap();
            if let Some(a) = m.props.get_mut(&id) {
                let how = format!(
                    "HTTP 200 to {who}'s {d} (already_recorded: {}, status {status})",
                    v["already_recorded"]
                );
                a.decisions
                    .entry((who.to_owned(), d.to_string()))
                    .or_insert_with(|| how.clone());
                raise(a, &status, how);
            }
            m.touched.insert(id.clone());
            drop(m);
            stats.decisions.fetch_add(1, Ordering::Relaxed);
            if d == Decision::ResolveSucceeded {
                stats.resolves.fetch_add(1, Ordering::Relaxed);
            }
        } else if !matches!(code, 409) {
            model
                .lock()
                .unwrap()
                .violations
                .push(format!("decision {d} by {who} on {id}: HTTP {code} {v}"));
        }
    }
}

async fn executor(
    c: Arc<Client>,
    model: Arc<Mutex<Model>>,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = Rng(seed | 1);
    while !stop.load(Ordering::SeqCst) {
        // Mostly approved ones; now and then a finished one, which must be refused.
        let replay = rng.below(5) == 0;
        let pool = if replay {
            candidates(&model, "SUCCEEDED")
        } else {
            candidates(&model, "APPROVED")
        };
        let Some((id, hash)) = rng.pick(&pool).cloned() else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        let Ok((err, out)) = c
            .call(
                "approval_execute",
                json!({"proposal_id": id, "preview_sha256": hash}),
            )
            .await
        else {
            continue;
        };
        let code = out["code"].as_str().unwrap_or("").to_owned();
        if replay {
            if !(err && code == "ALREADY_EXECUTED_NO_REPLAY") {
                model.lock().unwrap().violations.push(format!(
                    "a finished proposal {id} was executed again: {out}"
                ));
            }
            stats.refused_replays.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        match (err, code.as_str()) {
            (false, "SUCCEEDED" | "FAILED" | "OUTCOME_UNKNOWN") => {
                record_status(
                    &model,
                    &id,
                    &code,
                    format!("approval_execute result {code}"),
                );
                stats.executes.fetch_add(1, Ordering::Relaxed);
            }
            (true, "ALREADY_EXECUTED_NO_REPLAY") | (true, "EXECUTION_IN_PROGRESS") => {
                if let Some(s) = out["status"].as_str() {
                    if s != "EXECUTING" {
                        record_status(&model, &id, s, format!("approval_execute refusal {code}"));
                    }
                }
            }
            _ => model
                .lock()
                .unwrap()
                .violations
                .push(format!("execute {id}: {out}")),
        }
    }
}

// ---------------------------------------------------------------------------
// Checks after a restart
// ---------------------------------------------------------------------------

/// Checks one acknowledged proposal against the restarted server and folds
/// what the server now shows back into the model.
/// Checks one acknowledged proposal against the restarted server, pushing what
/// does not hold to `errors`, then folds what the server now shows back into
/// the model (so a violation is reported once). `Err` only when it cannot be read.
async fn check_one(
    c: &Client,
    model: &Mutex<Model>,
    id: &str,
    round: u64,
    errors: &mut Vec<String>,
    leased: bool,
) -> Result<String, String> {
    let acked = model
        .lock()
        .unwrap()
        .props
        .get(id)
        .cloned()
        .ok_or_else(|| format!("{id} is not in the model"))?;
    let (code, v) = c.show(id).await.map_err(|e| format!("reading {id}: {e}"))?;
    if code != 200 {
        errors.push(format!(
            "round {round}: acknowledged proposal {id} is gone after the restart: HTTP {code} {v}"
        ));
        model.lock().unwrap().props.remove(id);
        return Ok(String::new());
    }
    if v["preview_sha256"].as_str() != Some(acked.hash.as_str()) {
        errors.push(format!("round {round}: {id} changed its preview hash: {v}"));
    }
    let now = v["status"].as_str().unwrap_or("").to_owned();
    if !may_follow(&acked.status, &now, leased) {
        errors.push(format!(
            "round {round}: {id} was acknowledged as {} ({}) and is {now} after the restart",
            acked.status, acked.how
        ));
    }
    let stored: BTreeSet<(String, String)> = v["decisions"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| {
                    (
                        d["approver"].as_str().unwrap_or("").to_owned(),
                        d["decision"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    for (lost, how) in acked.decisions.iter().filter(|(k, _)| !stored.contains(*k)) {
        errors.push(format!(
            "round {round}: acknowledged decision {lost:?} on {id} ({how}) is gone after the restart (stored: {stored:?})"
        ));
    }
    let mut m = model.lock().unwrap();
    if let Some(a) = m.props.get_mut(id) {
        if a.status != now {
            a.status = now.clone();
            a.how = format!("a signed read after restart {round}");
        }
        a.decisions.retain(|k, _| stored.contains(k));
        for k in stored {
            a.decisions
                .entry(k)
                .or_insert_with(|| format!("a signed read after restart {round}"));
        }
    }
    Ok(now)
}

/// What the checks carry from one restart to the next.
#[derive(Default)]
struct Progress {
    /// Lines of the witness file already checked.
    witness_seen: usize,
    /// Violations found by the current check.
    errors: Vec<String>,
}

async fn check_after_restart(
    c: &Client,
    w: &World,
    model: &Mutex<Model>,
    rng: &mut Rng,
    progress: &mut Progress,
    round: u64,
    all: bool,
) -> Result<usize, String> {
    let Progress {
        witness_seen,
        errors,
    } = progress;
    let mut ids: BTreeSet<String> = {
        let mut m = model.lock().unwrap();
        let mut ids = std::mem::take(&mut m.touched);
        let keys: Vec<&String> = m.props.keys().collect();
        if all {
            ids.extend(keys.into_iter().cloned());
        } else {
            for _ in 0..5 {
                if let Some(k) = rng.pick(&keys) {
                    ids.insert((*k).clone());
                }
            }
        }
        ids
    };
    // The witness: no id twice; every id in it was durably claimed.
    let text = std::fs::read_to_string(w.witness()).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    let mut seen = BTreeSet::new();
    for (i, l) in lines.iter().enumerate() {
        // Each duplicate is reported once: when its second line is new.
        if !seen.insert(*l) && i >= *witness_seen {
            errors.push(format!("round {round}: the effect of {l} ran twice"));
        }
    }
    let fresh: Vec<String> = if all {
        lines.iter().map(|s| s.to_string()).collect()
    } else {
        lines[(*witness_seen).min(lines.len())..]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    *witness_seen = lines.len();
    for id in &fresh {
        if !model.lock().unwrap().props.contains_key(id) {
            errors.push(format!(
                "round {round}: the effect ran for {id}, whose prepare was never acknowledged"
            ));
            continue;
        }
        ids.insert(id.clone());
    }
    let fresh: BTreeSet<String> = fresh.into_iter().collect();
    let n = ids.len();
    for id in ids {
        let now = check_one(c, model, &id, round, errors, w.leased()).await?;
        // Between rounds on PostgreSQL a killed instance's claim may still be leased.
        let settled = matches!(now.as_str(), "SUCCEEDED" | "FAILED" | "OUTCOME_UNKNOWN")
            || (w.leased() && !all && now == "EXECUTING");
        if fresh.contains(&id) && !settled {
            errors.push(format!(
                "round {round}: the effect of {id} ran but the proposal is {now}: it could run again"
            ));
        }
    }
    Ok(n)
}

async fn wait_healthy(c: &Client) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(r) = c.http.get(format!("{}/healthz", c.base)).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err("the restarted server never answered /healthz".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_under_load_loses_nothing_acknowledged_and_never_runs_an_effect_twice() {
    run(World::new(None)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_postgres_instances_sigkilled_under_load_lose_nothing_and_never_run_twice() {
    let db = match approval_e2e::pg::FreshDb::new() {
        Ok(Some(db)) => db,
        Ok(None) => return,
        Err(e) => panic!("{e:#}"),
    };
    run(World::new(Some(db.url.clone()))).await;
}

async fn run(w: World) {
    let rounds: u64 = std::env::var("CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("crash harness: {rounds} rounds, CRASH_SEED={seed}");
    let started = Instant::now();
    let instances = if w.leased() { 2 } else { 1 };
    let mut servers: Vec<Option<Server>> = (0..instances).map(|_| None).collect();
    let model = Arc::new(Mutex::new(Model::default()));
    let stats = Arc::new(Stats::default());
    let mut rng = Rng(seed | 1);
    let mut progress = Progress::default();
    let mut kills = 0u64;
    let mut checked = 0usize;
    // On sled: rounds in which the server wrote a checkpoint of its recovery
    // snapshot while serving (a snapshot other than the one it started with).
    let mut checkpointed = 0u64;
    // CRASH_KEEP_GOING=1: report every violation at the end instead of stopping at
    // the first (for long runs by hand: how often, not only whether).
    let keep_going = std::env::var("CRASH_KEEP_GOING").is_ok_and(|v| v == "1");
    let mut found: Vec<String> = Vec::new();
    let fail = |w: &World, msg: String| -> ! {
        panic!(
            "{msg}\nreplay with CRASH_SEED={seed}; the server's log ends:\n{}",
            tail(&w.log(), 20)
        )
    };
    for round in 0..rounds {
        // Start whichever instance is down; check through the one just started.
        let mut c = None;
        for (i, s) in servers.iter_mut().enumerate() {
            if s.is_none() {
                let started = w.start(i);
                c = Some(Arc::new(Client::new(&started.base)));
                *s = Some(started);
            }
        }
        let clients: Vec<Arc<Client>> = servers
            .iter()
            .flatten()
            .map(|s| Arc::new(Client::new(&s.base)))
            .collect();
        let c = c.unwrap_or_else(|| clients[0].clone());
        if let Err(e) = wait_healthy(&c).await {
            fail(&w, format!("round {round}: {e}"));
        }
        match check_after_restart(&c, &w, &model, &mut rng, &mut progress, round, false).await {
            Ok(n) => checked += n,
            Err(e) => fail(&w, e),
        }
        let errors = std::mem::take(&mut progress.errors);
        if !errors.is_empty() {
            if !keep_going {
                fail(&w, errors.join("\n"));
            }
            for e in &errors {
                eprintln!("VIOLATION {e}");
            }
            found.extend(errors);
        }
        let snaps_at_start = snapshots(&w.data().join("store"));
        // Mixed load for a random short time, then SIGKILL while it is in flight.
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = vec![];
        // One preparer, two deciders, two executors (racing on the same approved
        // proposals now and then): proposals move on about as fast as they are made.
        // Spread over the instances: task k talks to instance k mod n.
        let on = |k: usize| clients[k % clients.len()].clone();
        tasks.push(tokio::spawn(preparer(
            on(0),
            model.clone(),
            stats.clone(),
            stop.clone(),
            rng.next(),
        )));
        for k in 0..2 {
            tasks.push(tokio::spawn(decider(
                on(k + 1),
                model.clone(),
                stats.clone(),
                stop.clone(),
                rng.next(),
            )));
        }
        for k in 0..2 {
            tasks.push(tokio::spawn(executor(
                on(k),
                model.clone(),
                stats.clone(),
                stop.clone(),
                rng.next(),
            )));
        }
        let run_for = Duration::from_millis(100 + rng.below(1100));
        tokio::time::sleep(run_for).await;
        // SIGKILL one instance (the other, on PostgreSQL, keeps serving).
        let victim = if instances > 1 {
            rng.below(instances as u64) as usize
        } else {
            0
        };
        if !w.leased() && snapshots(&w.data().join("store")) != snaps_at_start {
            checkpointed += 1;
        }
        if let Some(mut s) = servers[victim].take() {
            s.kill();
        }
        kills += 1;
        stop.store(true, Ordering::SeqCst);
        for t in tasks {
            if let Err(e) = t.await {
                fail(&w, format!("round {round}: a load task panicked: {e}"));
            }
        }
        let v = std::mem::take(&mut model.lock().unwrap().violations);
        if !v.is_empty() {
            if !keep_going {
                fail(&w, format!("round {round}: {}", v.join("\n")));
            }
            for e in &v {
                eprintln!("VIOLATION round {round}: {e}");
            }
            found.extend(v.into_iter().map(|e| format!("round {round}: {e}")));
        }
    }
    // A last restart: check everything, then stop it and verify the audit chain.
    for (i, s) in servers.iter_mut().enumerate() {
        if s.is_none() {
            *s = Some(w.start(i));
        }
    }
    let c = Client::new(&servers.iter().flatten().next().expect("an instance").base);
    if w.leased() {
        // Claims the killed instances left end OUTCOME_UNKNOWN once their lease runs
        // out (a sweep runs every half lease).
        tokio::time::sleep(Duration::from_secs(3 * LEASE_SECS + 1)).await;
    }
    if let Err(e) = wait_healthy(&c).await {
        fail(&w, format!("final start: {e}"));
    }
    match check_after_restart(&c, &w, &model, &mut rng, &mut progress, rounds, true).await {
        Ok(n) => checked += n,
        Err(e) => fail(&w, e),
    }
    let errors = std::mem::take(&mut progress.errors);
    if !errors.is_empty() && !keep_going {
        fail(&w, errors.join("\n"));
    }
    found.extend(errors);
    for s in servers.iter_mut().flatten() {
        s.stop();
    }
    let mut verify = Command::new(&w.bin);
    verify.args(["audit", "verify"]);
    match &w.store {
        None => verify.arg("--data").arg(w.data()),
        Some(url) => verify.args(["--store", url]),
    };
    let out = verify.output().unwrap();
    assert!(
        out.status.success(),
        "audit verify failed after {kills} SIGKILLs (CRASH_SEED={seed}): {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let m = model.lock().unwrap();
    let by_status = m.props.values().fold(BTreeMap::new(), |mut acc, a| {
        *acc.entry(a.status.clone()).or_insert(0u32) += 1;
        acc
    });
    eprintln!(
        "crash harness: {kills} SIGKILLs ({checkpointed} of them after a checkpoint of sled's recovery snapshot in the same round) in {:?}; acknowledged {} prepares, {} decisions ({} resolves), {} executions, {} replays refused; {} effects in the witness, none twice; {checked} proposal checks; final statuses {by_status:?}; audit verify: {}",
        started.elapsed(),
        stats.prepares.load(Ordering::Relaxed),
        stats.decisions.load(Ordering::Relaxed),
        stats.resolves.load(Ordering::Relaxed),
        stats.executes.load(Ordering::Relaxed),
        stats.refused_replays.load(Ordering::Relaxed),
        progress.witness_seen,
        String::from_utf8_lossy(&out.stdout).trim()
    );
    assert!(
        found.is_empty(),
        "{} violations in {kills} rounds (CRASH_SEED={seed}):\n{}",
        found.len(),
        found.join("\n")
    );
    assert_eq!(kills, rounds);
    if !w.leased() && rounds >= 10 {
        // The server runs with a checkpoint whenever anything became durable, and a
        // round lasts up to 1.2 s against sled's 500 ms flush tick: if none of them
        // wrote one, the harness is not testing recovery from checkpoints.
        assert!(
            checkpointed > 0,
            "no round saw a checkpoint of sled's recovery snapshot (CRASH_SEED={seed})"
        );
    }
    assert!(
        stats.prepares.load(Ordering::Relaxed) > 0,
        "no prepare was ever acknowledged: the harness tested nothing"
    );
}
