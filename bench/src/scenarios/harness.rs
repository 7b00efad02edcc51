//! What every scenario shares: the settings, the bounded worker loops, a measured
//! phase's CPU and wall clock, report rows, the servers under test and the untimed
//! prefill. Imports only the bench's leaf modules (client, report, server).

use crate::client::{self, Http};
use crate::report::{Recorder, Row, ScenarioReport, Target};
use crate::server::{disk_usage, self_cpu_seconds, Server, World};
use anyhow::{bail, Result};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Hard cap on operations per worker in one measured phase.
pub(super) const MAX_OPS_PER_WORKER: u64 = 10_000_000;
/// A worker gives up after this many failures in one phase (the server is probably gone).
pub(super) const MAX_ERRORS_PER_WORKER: u64 = 1_000;

/// What every scenario needs to know.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Concurrent clients.
    pub clients: usize,
    /// Length of each measured phase.
    pub duration: Duration,
    /// The `approval-server` binary.
    pub server_bin: PathBuf,
    /// Small counts and short phases.
    pub smoke: bool,
    /// Proposals to put in the store for `scale`.
    pub scale_count: u64,
    /// Longest time `scale` spends filling the store.
    pub fill_time: Duration,
    /// Concurrent workers filling the store.
    pub fill_clients: usize,
    /// Sequential pending listings per measurement in `scale`.
    pub list_count: usize,
    /// Extra arguments for `approval-server serve`.
    pub server_args: Vec<String>,
    /// Instances started for status, prepare, decide and round-trip, all with the
    /// same arguments (so they must share a store: `--store postgres://...`); the
    /// clients' requests go round robin over them.
    pub instances: usize,
    /// Timed calls per run in `peers` (after 50 warm-up calls).
    pub peers_n: usize,
    /// Alternating rounds in `peers` and `http-pair`.
    pub rounds: usize,
    /// The Python that runs the seed's server.
    pub python: String,
    /// The `rmcp-ceiling` binary.
    pub ceiling_bin: PathBuf,
    /// Where the note executor writes, one folder per run, left in place
    /// (`--notes-dir`); `None`: in the run's own folder.
    pub notes_dir: Option<PathBuf>,
}

/// Times `fut` into `rec` under `op`; `None` on failure (recorded).
pub(super) async fn timed<T>(
    rec: &mut Recorder,
    op: &'static str,
    fut: impl Future<Output = Result<T>>,
) -> Option<T> {
    let t = Instant::now();
    match fut.await {
        Ok(v) => {
            rec.op(op).ok(t.elapsed());
            Some(v)
        }
        Err(e) => {
            rec.op(op).err(|| format!("{e:#}"));
            None
        }
    }
}

pub(super) fn errors(rec: &Recorder) -> u64 {
    rec.ops.values().map(|s| s.errors).sum()
}

/// Runs `n` workers to completion and merges what they recorded.
pub(super) async fn run_workers<F, Fut>(n: usize, f: F) -> Result<Recorder>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Recorder> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        set.spawn(f(i));
    }
    let mut all = Recorder::default();
    while let Some(r) = set.join_next().await {
        all.merge(&r?);
    }
    Ok(all)
}

/// CPU and wall clock at the start of a measured phase.
pub(super) struct Phase {
    t0: Instant,
    server_cpu: Option<f64>,
    bench_cpu: Option<f64>,
}

impl Phase {
    pub(super) fn start(server: &Server) -> Self {
        Self {
            t0: Instant::now(),
            server_cpu: server.cpu_seconds(),
            bench_cpu: self_cpu_seconds(),
        }
    }

    /// Wall time so far; fills the report's CPU fields.
    pub(super) fn finish(&self, server: &Server, report: &mut ScenarioReport) -> Duration {
        let elapsed = self.t0.elapsed();
        report.server_cpu_s = server
            .cpu_seconds()
            .zip(self.server_cpu)
            .map(|(a, b)| a - b);
        report.bench_cpu_s = self_cpu_seconds().zip(self.bench_cpu).map(|(a, b)| a - b);
        elapsed
    }
}

pub(super) fn rows(
    scenario: &str,
    clients: usize,
    elapsed: Duration,
    rec: &Recorder,
    order: &[(&'static str, Target)],
) -> Vec<Row> {
    let mut out = Vec::new();
    for (op, target) in order {
        let stats = rec.ops.get(op).cloned().unwrap_or_default();
        out.push(Row {
            scenario: scenario.to_owned(),
            op: (*op).to_owned(),
            clients,
            stats,
            elapsed,
            target: *target,
        });
    }
    // Anything recorded that the order did not name.
    for (op, stats) in &rec.ops {
        if !order.iter().any(|(o, _)| o == op) {
            out.push(Row {
                scenario: scenario.to_owned(),
                op: (*op).to_owned(),
                clients,
                stats: stats.clone(),
                elapsed,
                target: Target::default(),
            });
        }
    }
    out
}

pub(super) fn finish_report(report: &mut ScenarioReport, server: &Server, world: &World) {
    report.server_peak_rss_kib = server.peak_rss_kib();
    report.store_bytes = Some(disk_usage(&world.data()));
}

/// The scenario's server and, with `--instances N`, `N - 1` more on the same
/// arguments. Resources (CPU, RSS) are reported for the first one.
pub(super) fn start_instances(world: &World, s: &Settings) -> Result<(Server, Vec<Server>)> {
    let first = world.start(&s.server_bin, &s.server_args)?;
    let mut more = Vec::new();
    for _ in 1..s.instances.max(1) {
        more.push(world.start(&s.server_bin, &s.server_args)?);
    }
    Ok((first, more))
}

/// Clients spread over `first` and `more`.
pub(super) fn http_for_all(first: &Server, more: &[Server], clients: usize) -> Result<Http> {
    let all = std::iter::once(first).chain(more.iter());
    let (mcp, api) = all.map(|v| (v.mcp_url.clone(), v.api_url.clone())).unzip();
    Ok(Http::spread(client::pool(clients.max(1) * 2)?, mcp, api))
}

pub(super) fn http_for(server: &Server, clients: usize) -> Result<Http> {
    Ok(Http::new(
        client::pool(clients.max(1) * 2)?,
        &server.mcp_url,
        &server.api_url,
    ))
}

/// Prepares `n` proposals with `clients` concurrent workers (untimed set-up).
/// Returns (id, hash) pairs.
pub(super) async fn prefill(
    http: &Http,
    n: usize,
    clients: usize,
) -> Result<Vec<(String, String)>> {
    let next = Arc::new(AtomicUsize::new(0));
    let out = Arc::new(std::sync::Mutex::new(Vec::with_capacity(n)));
    let fails = Arc::new(AtomicU64::new(0));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..clients.max(1) {
        let (http, next, out, fails) = (http.clone(), next.clone(), out.clone(), fails.clone());
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || fails.load(Ordering::Relaxed) > 100 {
                    break;
                }
                match http.prepare(&format!("prefill {i}")).await {
                    Ok(p) => out.lock().map(|mut v| v.push(p)).unwrap_or(()),
                    Err(e) => {
                        if fails.fetch_add(1, Ordering::Relaxed) == 0 {
                            eprintln!("  prefill: prepare failed: {e:#}");
                        }
                    }
                }
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r?;
    }
    let v = std::mem::take(&mut *out.lock().map_err(|_| anyhow::anyhow!("poisoned"))?);
    if v.len() < n {
        bail!("prefill made {} of {n} proposals", v.len());
    }
    Ok(v)
}
