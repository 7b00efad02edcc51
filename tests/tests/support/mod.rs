//! What the notification tests share: a real HTTP receiver (axum) that can be down,
//! slow or answer an error, a real SMTP server (aiosmtpd in a venv under target/), and
//! the server started with fast notification timings. Included by `notify.rs` and
//! `notify_fair.rs` (`mod support;`), so both attack the same real processes.
#![allow(dead_code)]

use approval_e2e::{bin_dir, Server, ServerOptions, World};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Retry timings for tests (ms): first back-off, longest, give-up age, time-out, poll.
pub const FAST: &str = "200,400,60000,1000,100";

/// What the receiver does with the next request.
#[derive(Clone, Copy, Debug)]
pub enum Answer {
    /// Answers this status.
    Status(u16),
    /// Answers 200 after longer than the server's time-out.
    Slow,
}

#[derive(Clone, Default)]
pub struct Receiver {
    pub seen: Arc<Mutex<Vec<(HeaderMap, Value, String)>>>,
    pub script: Arc<Mutex<VecDeque<Answer>>>,
}

impl Receiver {
    pub fn bodies(&self) -> Vec<Value> {
        self.seen
            .lock()
            .map(|s| s.iter().map(|(_, b, _)| b.clone()).collect())
            .unwrap_or_default()
    }
    pub fn requests(&self) -> Vec<(HeaderMap, Value, String)> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

pub async fn hook(State(r): State<Receiver>, headers: HeaderMap, body: String) -> StatusCode {
    let answer = r
        .script
        .lock()
        .ok()
        .and_then(|mut s| s.pop_front())
        .unwrap_or(Answer::Status(200));
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::String(body.clone()));
    match answer {
        Answer::Slow => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            StatusCode::OK
        }
        Answer::Status(s) => {
            if s == 200 {
                if let Ok(mut seen) = r.seen.lock() {
                    seen.push((headers, v, body));
                }
            }
            StatusCode::from_u16(s).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        }
    }
}

/// A receiver on `addr` (127.0.0.1:0 for a free port); records the bodies it answered 200 to.
pub async fn receiver_on(
    addr: SocketAddr,
    script: &[Answer],
) -> anyhow::Result<(String, Receiver)> {
    let r = Receiver::default();
    r.script
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .extend(script.iter().copied());
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/hook", post(hook))
        .with_state(r.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, r))
}

/// A loopback address nobody listens on (yet).
pub fn free_addr() -> anyhow::Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?)
}

pub fn policy(notify: &str) -> String {
    format!(
        r#"kind = "note.write"
quorum = 2
approvers = ["alice", "bob", "carol"]
ttl = "30m"
execute_within = "10m"
[executor]
type = "note"
{notify}
"#
    )
}

pub fn start(w: &World, extra: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Server> {
    let mut env = env.to_vec();
    if !env.iter().any(|(k, _)| *k == "APPROVAL_NOTIFY_TIMINGS_MS") {
        env.push(("APPROVAL_NOTIFY_TIMINGS_MS", FAST));
    }
    let extra: Vec<OsString> = extra.iter().map(OsString::from).collect();
    Server::start_full(
        &ServerOptions {
            data: w.data.clone(),
            policies: w.policies.clone(),
            keys: w.keys.clone(),
            agents: None,
        },
        &[],
        &extra,
        &env,
    )
}

pub async fn notifications(server: &Server) -> anyhow::Result<Value> {
    Ok(server.healthz().await?["notifications"].clone())
}

/// Bodies of one event for one proposal.
pub fn of(bodies: &[Value], id: &str, event: &str) -> Vec<Value> {
    bodies
        .iter()
        .filter(|b| b["proposal_id"] == id && b["event"] == event)
        .cloned()
        .collect()
}

// ---------------------------------------------------------------------------
// Mail through a real SMTP server
// ---------------------------------------------------------------------------

/// `target/notify-venv` with aiosmtpd, made once (reinstalled when the requirements
/// change); `Ok(None)` after the one `skipped:` line when python3 is missing (a
/// failure under `APPROVAL_TEST_REQUIRE_ALL`). Installs into `target/` only.
pub fn smtp_python() -> anyhow::Result<Option<PathBuf>> {
    let Some(python3) = approval_e2e::require(
        "python3",
        "to run a real SMTP server (aiosmtpd, installed into target/notify-venv)",
        "apt-get install python3 python3-venv",
    ) else {
        return Ok(None);
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("notify");
    let req = root.join("requirements.txt");
    let target = bin_dir()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(bin_dir);
    let venv = target.join("notify-venv");
    let py = venv.join("bin/python");
    let stamp = venv.join(".requirements.installed");
    let want = std::fs::read(&req)?;
    if py.is_file() && std::fs::read(&stamp).ok().as_deref() == Some(&want[..]) {
        return Ok(Some(py));
    }
    let run = |cmd: &mut std::process::Command, what: &str| -> anyhow::Result<()> {
        let out = cmd.output().map_err(|e| {
            anyhow::anyhow!("{what}: cannot run ({e}); install python3 and python3-venv")
        })?;
        anyhow::ensure!(
            out.status.success(),
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    let _ = std::fs::remove_dir_all(&venv);
    run(
        std::process::Command::new(python3)
            .args(["-m", "venv"])
            .arg(&venv),
        "python3 -m venv (the SMTP test needs python3 and python3-venv)",
    )?;
    run(
        std::process::Command::new(&py)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-input",
                "-r",
            ])
            .arg(&req),
        "pip install aiosmtpd",
    )?;
    std::fs::write(&stamp, want)?;
    Ok(Some(py))
}

/// A running aiosmtpd; killed on drop.
pub struct Smtp {
    child: std::process::Child,
    pub port: u16,
    out: PathBuf,
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Smtp {
    /// `Ok(None)` when python3 is missing (see [`smtp_python`]).
    pub fn start(dir: &Path) -> anyhow::Result<Option<Self>> {
        use std::io::BufRead;
        let Some(py) = smtp_python()? else {
            return Ok(None);
        };
        let out = dir.join("mail.jsonl");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("notify/smtp_sink.py");
        let mut child = std::process::Command::new(py)
            .arg(script)
            .arg(&out)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        let port = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("the SMTP server printed {line:?}, not its port"))?;
        Ok(Some(Self { child, port, out }))
    }

    pub fn mails(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// A receiver that answers every request with `status` (429: "too many requests")
/// and counts the requests: a channel that keeps failing.
pub async fn refusing_receiver(
    status: u16,
) -> anyhow::Result<(String, Arc<std::sync::atomic::AtomicUsize>)> {
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let counted = hits.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                StatusCode::from_u16(status).unwrap_or(StatusCode::TOO_MANY_REQUESTS)
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, hits))
}

/// A policy of `kind` (2 of alice, bob, carol; the note executor) with `notify`
/// tables and a `ttl`.
pub fn kind_policy(kind: &str, ttl: &str, notify: &str) -> String {
    format!(
        r#"kind = "{kind}"
quorum = 2
approvers = ["alice", "bob", "carol"]
ttl = "{ttl}"
execute_within = "10m"
[executor]
type = "note"
{notify}
"#
    )
}
