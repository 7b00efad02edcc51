//! The system under test: a private folder with a policy, approvers' keys and a
//! keyring, and the real `approval-server serve` process on a loopback port.
//!
//! Also the process probes the report needs: peak RSS (`VmHWM`), CPU time and the
//! store's size on disk.

use anyhow::{anyhow, bail, Context, Result};
use approval_core::keyring::SecretKey;
use approval_core::ApproverName;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// The action kind the bench proposes.
pub const KIND: &str = "bench.note";

/// Approvers in the keyring and the policy; quorum is 2 of these.
pub const APPROVERS: [&str; 3] = ["alice", "bob", "carol"];

/// How long the server may take to print its endpoints.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A private folder: keys, keyring, policy, data, server log.
pub struct World {
    dir: TempDir,
    /// The approvers' secret keys (deterministic seeds: this is a bench, not a deployment).
    pub keys: Vec<SecretKey>,
}

impl World {
    /// Makes the folder, the keys, the keyring and the policy. With `notes`, the note
    /// executor writes into a new folder under it, which outlives the run.
    pub fn new(notes: Option<&Path>) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("approval-bench-")
            .tempdir()
            .context("cannot make a temporary folder")?;
        let executor = match notes {
            None => "[executor]\ntype = \"note\"\n".to_owned(),
            Some(root) => {
                std::fs::create_dir_all(root)
                    .with_context(|| format!("cannot make {}", root.display()))?;
                let run = tempfile::Builder::new()
                    .prefix("run-")
                    .tempdir_in(root)
                    .with_context(|| format!("cannot make a folder in {}", root.display()))?
                    .keep();
                // TOML basic strings take JSON's escapes.
                let shown = serde_json::to_string(&run.display().to_string())?;
                format!("[executor]\ntype = \"note\"\ndir = {shown}\n")
            }
        };
        let mut keys = Vec::new();
        let mut keyring = String::from("# approval-bench keyring (deterministic bench keys)\n");
        for (i, name) in APPROVERS.iter().enumerate() {
            let name = ApproverName::parse(name).map_err(|e| anyhow!("{e}"))?;
            let key = SecretKey::from_seed(name, [i as u8 + 1; 32]);
            keyring.push_str(&key.keyring_line());
            keyring.push('\n');
            keys.push(key);
        }
        std::fs::write(dir.path().join("keyring"), keyring)?;
        std::fs::create_dir_all(dir.path().join("policies"))?;
        let approvers = APPROVERS
            .iter()
            .map(|a| format!("{a:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        std::fs::write(
            dir.path().join("policies").join("bench.note.toml"),
            format!(
                "# approval-bench: like note.write, 2 of {n}, no group requirement.\n\
                 kind = \"{KIND}\"\n\
                 description = \"Bench note\"\n\
                 quorum = 2\n\
                 approvers = [{approvers}]\n\
                 vetoes = 1\n\
                 ttl = \"1h\"\n\
                 execute_within = \"1h\"\n\
                 \n{executor}",
                n = APPROVERS.len()
            ),
        )?;
        Ok(Self { dir, keys })
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The server's data folder.
    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Starts `approval-server serve` over this world on a free loopback port.
    pub fn start(&self, bin: &Path, extra: &[String]) -> Result<Server> {
        Server::start(bin, self.path(), &self.data(), extra)
    }
}

/// A running `approval-server serve`; killed on drop.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT/mcp`.
    pub mcp_url: String,
    /// `http://127.0.0.1:PORT`.
    pub api_url: String,
}

impl Server {
    fn start(bin: &Path, world: &Path, data: &Path, extra: &[String]) -> Result<Self> {
        if !bin.is_file() {
            bail!(
                "{} not found: build it with `cargo build --release -p approval-server` or pass --server-bin",
                bin.display()
            );
        }
        // The server logs every operation at info level; keep that realistic but off our pipes.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(world.join("server.log"))?;
        let mut child = Command::new(bin)
            .arg("serve")
            .arg("--data")
            .arg(data)
            .arg("--policies")
            .arg(world.join("policies"))
            .arg("--keys")
            .arg(world.join("keyring"))
            .arg("--listen")
            .arg("127.0.0.1:0")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let stdout = child.stdout.take().context("no stdout")?;
        // Read the two endpoint lines on a thread so a silent server cannot hang us.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let (mut mcp, mut api) = (None, None);
            for line in lines.by_ref().take(50) {
                let Ok(line) = line else { break };
                if let Some(u) = line.strip_prefix("MCP endpoint: ") {
                    mcp = Some(u.trim().to_owned());
                } else if let Some(u) = line.strip_prefix("Approver API: ") {
                    api = Some(u.trim().to_owned());
                }
                if mcp.is_some() && api.is_some() {
                    break;
                }
            }
            let _ = tx.send((mcp, api));
            // Keep draining so the server never blocks on a full pipe.
            for _ in lines {}
        });
        let (mcp, api) = match rx.recv_timeout(START_TIMEOUT) {
            Ok(v) => v,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "the server printed no endpoints within {START_TIMEOUT:?}; see {}/server.log",
                    world.display()
                );
            }
        };
        match (mcp, api) {
            (Some(mcp_url), Some(api_url)) => Ok(Self {
                child,
                mcp_url,
                api_url,
            }),
            _ => {
                let _ = child.kill();
                let status = child.wait()?;
                let log = std::fs::read_to_string(world.join("server.log")).unwrap_or_default();
                bail!(
                    "the server exited ({status}) before printing its endpoints:\n{}",
                    log.lines()
                        .rev()
                        .take(20)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect::<Vec<_>>()
                        .join("\n")
                )
            }
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Peak resident set (VmHWM), KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        proc_status_kib(self.pid(), "VmHWM:")
    }

    /// Current resident set (VmRSS), KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        proc_status_kib(self.pid(), "VmRSS:")
    }

    /// User + system CPU seconds so far.
    pub fn cpu_seconds(&self) -> Option<f64> {
        cpu_seconds(&format!("/proc/{}/stat", self.pid()))
    }

    /// SIGKILL, as a crash would, and reap.
    pub fn kill(mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for Server {
    /// SIGTERM (so the server flushes and a profiler wrapping it writes its
    /// output), then SIGKILL if it has not exited within 20 s.
    fn drop(&mut self) {
        // Already exited (or reaped by `kill`): the pid may belong to someone else now.
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let term = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if term.is_ok_and(|s| s.success()) {
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_status_kib(&s, field)
}

/// Reads `VmHWM:   12345 kB` style fields.
pub fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// User + system CPU seconds from a `/proc/<pid>/stat` file (USER_HZ = 100 on Linux).
pub fn cpu_seconds(stat_path: &str) -> Option<f64> {
    let s = std::fs::read_to_string(stat_path).ok()?;
    parse_stat_cpu(&s)
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line, in seconds.
pub fn parse_stat_cpu(stat: &str) -> Option<f64> {
    // The command name may hold spaces; fields are counted after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state), so field n is f[n - 3].
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// This process's CPU seconds.
pub fn self_cpu_seconds() -> Option<f64> {
    cpu_seconds("/proc/self/stat")
}

/// Bytes a folder takes on disk (allocated blocks, like `du`).
pub fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    // Bounded: the store has a handful of files; stop after 100k entries anyway.
    let mut seen = 0usize;
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            if seen > 100_000 {
                return total;
            }
            let Ok(m) = e.metadata() else { continue };
            total += m.blocks() * 512;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}

/// Waits until `GET /healthz` answers 200; returns how long it took from `since`.
pub async fn wait_healthy(
    http: &reqwest::Client,
    api_url: &str,
    since: Instant,
    timeout: Duration,
) -> Result<Duration> {
    let deadline = Instant::now() + timeout;
    let url = format!("{api_url}/healthz");
    while Instant::now() < deadline {
        if let Ok(r) = http.get(&url).send().await {
            if r.status().is_success() {
                return Ok(since.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    bail!("/healthz did not answer within {timeout:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_fields() {
        let status =
            "Name:\tapproval-server\nVmPeak:\t  999 kB\nVmHWM:\t   12345 kB\nVmRSS:\t 100 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM:"), Some(12345));
        assert_eq!(parse_status_kib(status, "VmRSS:"), Some(100));
        assert_eq!(parse_status_kib(status, "VmSwap:"), None);
        let stat = "42 (approval server) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(parse_stat_cpu(stat), Some(3.0));
    }
}
