//! The scenarios. Each starts its own server over a fresh store (so peak RSS
//! and store size belong to that scenario alone), prepares what it needs
//! untimed, then runs `clients` concurrent workers until the duration ends.
//!
//! Every loop is bounded twice: by a deadline and by a count.

use crate::client::{self, decision_body, Http, StdioClient};
use crate::report::{fmt_bytes, fmt_dur, Fact, OpStats, Recorder, Row, ScenarioReport, Target};
use crate::server::{self, disk_usage, self_cpu_seconds, Server, World};
use anyhow::{bail, Result};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Hard cap on operations per worker in one measured phase.
const MAX_OPS_PER_WORKER: u64 = 10_000_000;
/// A worker gives up after this many failures in one phase (the server is probably gone).
const MAX_ERRORS_PER_WORKER: u64 = 1_000;

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
pub async fn timed<T>(
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

fn errors(rec: &Recorder) -> u64 {
    rec.ops.values().map(|s| s.errors).sum()
}

/// Runs `n` workers to completion and merges what they recorded.
async fn run_workers<F, Fut>(n: usize, f: F) -> Result<Recorder>
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
struct Phase {
    t0: Instant,
    server_cpu: Option<f64>,
    bench_cpu: Option<f64>,
}

impl Phase {
    fn start(server: &Server) -> Self {
        Self {
            t0: Instant::now(),
            server_cpu: server.cpu_seconds(),
            bench_cpu: self_cpu_seconds(),
        }
    }

    /// Wall time so far; fills the report's CPU fields.
    fn finish(&self, server: &Server, report: &mut ScenarioReport) -> Duration {
        let elapsed = self.t0.elapsed();
        report.server_cpu_s = server
            .cpu_seconds()
            .zip(self.server_cpu)
            .map(|(a, b)| a - b);
        report.bench_cpu_s = self_cpu_seconds().zip(self.bench_cpu).map(|(a, b)| a - b);
        elapsed
    }
}

fn rows(
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

fn finish_report(report: &mut ScenarioReport, server: &Server, world: &World) {
    report.server_peak_rss_kib = server.peak_rss_kib();
    report.store_bytes = Some(disk_usage(&world.data()));
}

/// The scenario's server and, with `--instances N`, `N - 1` more on the same
/// arguments. Resources (CPU, RSS) are reported for the first one.
fn start_instances(world: &World, s: &Settings) -> Result<(Server, Vec<Server>)> {
    let first = world.start(&s.server_bin, &s.server_args)?;
    let mut more = Vec::new();
    for _ in 1..s.instances.max(1) {
        more.push(world.start(&s.server_bin, &s.server_args)?);
    }
    Ok((first, more))
}

/// Clients spread over `first` and `more`.
fn http_for_all(first: &Server, more: &[Server], clients: usize) -> Result<Http> {
    let all = std::iter::once(first).chain(more.iter());
    let (mcp, api) = all.map(|v| (v.mcp_url.clone(), v.api_url.clone())).unzip();
    Ok(Http::spread(client::pool(clients.max(1) * 2)?, mcp, api))
}

fn http_for(server: &Server, clients: usize) -> Result<Http> {
    Ok(Http::new(
        client::pool(clients.max(1) * 2)?,
        &server.mcp_url,
        &server.api_url,
    ))
}

/// Prepares `n` proposals with `clients` concurrent workers (untimed set-up).
/// Returns (id, hash) pairs.
async fn prefill(http: &Http, n: usize, clients: usize) -> Result<Vec<(String, String)>> {
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

/// `approval_status` on pending proposals, `clients` at a time.
pub async fn status(s: &Settings) -> Result<ScenarioReport> {
    let world = World::new(s.notes_dir.as_deref())?;
    let (server, more) = start_instances(&world, s)?;
    let http = http_for_all(&server, &more, s.clients)?;
    let ids: Arc<Vec<String>> = Arc::new(
        prefill(&http, (s.clients * 4).max(16), s.clients)
            .await?
            .into_iter()
            .map(|(id, _)| id)
            .collect(),
    );
    let mut report = ScenarioReport {
        name: "status".into(),
        ..Default::default()
    };
    let phase = Phase::start(&server);
    let rec = status_load(&http, &ids, s.clients, s.duration).await?;
    let elapsed = phase.finish(&server, &mut report);
    report.rows = rows(
        "status",
        s.clients,
        elapsed,
        &rec,
        &[(
            "status",
            Target {
                min_rate: Some(20_000.0),
                max_p99: Some(Duration::from_millis(10)),
            },
        )],
    );
    finish_report(&mut report, &server, &world);
    Ok(report)
}

/// Ids of `4 × clients` (at least 16) pending proposals, made untimed.
pub async fn pending_ids(http: &Http, clients: usize) -> Result<Vec<String>> {
    Ok(prefill(http, (clients * 4).max(16), clients)
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .collect())
}

/// `clients` closed-loop workers calling `rmcp-ceiling`'s `noop` for `duration`.
pub async fn noop_load(http: &Http, clients: usize, duration: Duration) -> Result<Recorder> {
    let deadline = Instant::now() + duration;
    run_workers(clients, |_| {
        let http = http.clone();
        async move {
            let mut rec = Recorder::default();
            for _ in 0..MAX_OPS_PER_WORKER {
                if Instant::now() >= deadline || errors(&rec) > MAX_ERRORS_PER_WORKER {
                    break;
                }
                let call = async {
                    http.call("noop", serde_json::json!({}))
                        .await?
                        .expect(&["OK"])
                        .map(|_| ())
                };
                timed(&mut rec, "noop", call).await;
            }
            rec
        }
    })
    .await
}

/// `clients` closed-loop workers calling `approval_status` round robin over `ids` for `duration`.
pub async fn status_load(
    http: &Http,
    ids: &Arc<Vec<String>>,
    clients: usize,
    duration: Duration,
) -> Result<Recorder> {
    let deadline = Instant::now() + duration;
    run_workers(clients, |w| {
        let (http, ids) = (http.clone(), ids.clone());
        async move {
            let mut rec = Recorder::default();
            let mut i = w;
            for _ in 0..MAX_OPS_PER_WORKER {
                if Instant::now() >= deadline || errors(&rec) > MAX_ERRORS_PER_WORKER {
                    break;
                }
                let id = &ids[i % ids.len()];
                i = i.wrapping_add(clients.max(1));
                timed(&mut rec, "status", http.status(id)).await;
            }
            rec
        }
    })
    .await
}

/// Durable `approval_prepare`, `clients` at a time.
pub async fn prepare(s: &Settings) -> Result<ScenarioReport> {
    let world = World::new(s.notes_dir.as_deref())?;
    let (server, more) = start_instances(&world, s)?;
    let http = http_for_all(&server, &more, s.clients)?;
    prefill(&http, 4, 1).await?; // warm-up
    let mut report = ScenarioReport {
        name: "prepare".into(),
        ..Default::default()
    };
    let deadline = Instant::now() + s.duration;
    let phase = Phase::start(&server);
    let rec = run_workers(s.clients, |w| {
        let http = http.clone();
        async move {
            let mut rec = Recorder::default();
            for i in 0..MAX_OPS_PER_WORKER {
                if Instant::now() >= deadline || errors(&rec) > MAX_ERRORS_PER_WORKER {
                    break;
                }
                let text = format!("bench note {w}/{i}");
                timed(&mut rec, "prepare", http.prepare(&text)).await;
            }
            rec
        }
    })
    .await?;
    let elapsed = phase.finish(&server, &mut report);
    report.rows = rows(
        "prepare",
        s.clients,
        elapsed,
        &rec,
        &[(
            "prepare",
            Target {
                min_rate: Some(10_000.0),
                max_p99: Some(Duration::from_millis(20)),
            },
        )],
    );
    finish_report(&mut report, &server, &world);
    Ok(report)
}

/// Signed approvals posted to the approver API: a proposal's first approval
/// (stays PENDING) and its second (reaches quorum), signed before the clock starts.
pub async fn decide(s: &Settings) -> Result<ScenarioReport> {
    let world = World::new(s.notes_dir.as_deref())?;
    let (server, more) = start_instances(&world, s)?;
    let http = http_for_all(&server, &more, s.clients)?;
    let pool = if s.smoke {
        300
    } else {
        ((s.duration.as_secs_f64() * 2000.0) as usize).clamp(1000, 50_000)
    };
    eprintln!(
        "  decide: preparing {pool} proposals and signing {} approvals (untimed)",
        pool * 2
    );
    let props = prefill(&http, pool, s.clients).await?;
    // In blocks: the first approvals of a block of proposals, then their second
    // approvals, so both kinds are measured however far the run gets, and the two
    // approvals of one proposal are rarely in flight together.
    let block = (s.clients * 4).max(16);
    let mut tasks: Vec<(&'static str, String, String)> = Vec::with_capacity(pool * 2);
    for chunk in props.chunks(block) {
        for (k, op) in [
            (0usize, "decision (1st of 2)"),
            (1, "decision (2nd, reaches quorum)"),
        ] {
            for (id, hash) in chunk {
                tasks.push((op, id.clone(), decision_body(&world.keys[k], hash)?));
            }
        }
    }
    let tasks = Arc::new(tasks);
    let next = Arc::new(AtomicUsize::new(0));
    let mut report = ScenarioReport {
        name: "decide".into(),
        ..Default::default()
    };
    let deadline = Instant::now() + s.duration;
    let phase = Phase::start(&server);
    let rec = run_workers(s.clients, |_| {
        let (http, tasks, next) = (http.clone(), tasks.clone(), next.clone());
        async move {
            let mut rec = Recorder::default();
            let mut all = OpStats::default();
            for _ in 0..MAX_OPS_PER_WORKER {
                if Instant::now() >= deadline || errors(&rec) > MAX_ERRORS_PER_WORKER {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((op, id, body)) = tasks.get(i) else {
                    break;
                };
                let t = Instant::now();
                if timed(&mut rec, op, http.decide(id, body.clone()))
                    .await
                    .is_some()
                {
                    all.ok(t.elapsed());
                }
            }
            rec.op("decision (all)").merge(&all);
            rec
        }
    })
    .await?;
    let elapsed = phase.finish(&server, &mut report);
    if next.load(Ordering::Relaxed) >= tasks.len() {
        eprintln!(
            "  decide: all {} decisions were posted before the duration ended",
            tasks.len()
        );
    }
    report.rows = rows(
        "decide",
        s.clients,
        elapsed,
        &rec,
        &[
            (
                "decision (all)",
                Target {
                    min_rate: Some(8_000.0),
                    max_p99: None,
                },
            ),
            ("decision (1st of 2)", Target::default()),
            ("decision (2nd, reaches quorum)", Target::default()),
        ],
    );
    finish_report(&mut report, &server, &world);
    Ok(report)
}

/// The whole life of a proposal per iteration: prepare, two signed approvals, execute.
pub async fn round_trip(s: &Settings) -> Result<ScenarioReport> {
    let world = Arc::new(World::new(s.notes_dir.as_deref())?);
    let (server, more) = start_instances(&world, s)?;
    let http = http_for_all(&server, &more, s.clients)?;
    prefill(&http, 4, 1).await?; // warm-up
    let mut report = ScenarioReport {
        name: "round-trip".into(),
        ..Default::default()
    };
    let deadline = Instant::now() + s.duration;
    let phase = Phase::start(&server);
    let rec = run_workers(s.clients, |w| {
        let (http, world) = (http.clone(), world.clone());
        async move {
            let mut rec = Recorder::default();
            for i in 0..MAX_OPS_PER_WORKER {
                if Instant::now() >= deadline || errors(&rec) > MAX_ERRORS_PER_WORKER {
                    break;
                }
                let t = Instant::now();
                let one = async {
                    let Some((id, hash)) =
                        timed(&mut rec, "prepare", http.prepare(&format!("rt {w}/{i}"))).await
                    else {
                        bail!("prepare failed");
                    };
                    for (k, op) in [(0usize, "decision (1st)"), (1, "decision (2nd)")] {
                        let body = decision_body(&world.keys[k], &hash)?;
                        if timed(&mut rec, op, http.decide(&id, body)).await.is_none() {
                            bail!("decision failed");
                        }
                    }
                    if timed(&mut rec, "execute", http.execute(&id, &hash))
                        .await
                        .is_none()
                    {
                        bail!("execute failed");
                    }
                    Ok(())
                };
                match one.await {
                    Ok(()) => rec.op("round trip").ok(t.elapsed()),
                    Err(e) => rec.op("round trip").err(|| format!("{e:#}")),
                }
            }
            rec
        }
    })
    .await?;
    let elapsed = phase.finish(&server, &mut report);
    report.rows = rows(
        "round-trip",
        s.clients,
        elapsed,
        &rec,
        &[
            (
                "round trip",
                Target {
                    min_rate: Some(2_000.0),
                    max_p99: None,
                },
            ),
            ("prepare", Target::default()),
            ("decision (1st)", Target::default()),
            ("decision (2nd)", Target::default()),
            ("execute", Target::default()),
        ],
    );
    finish_report(&mut report, &server, &world);
    Ok(report)
}

/// `approval_status` through `approval-server stdio`, one call at a time.
pub async fn stdio(s: &Settings) -> Result<ScenarioReport> {
    let world = World::new(s.notes_dir.as_deref())?;
    let server = world.start(&s.server_bin, &s.server_args)?;
    let http = http_for(&server, 1)?;
    let (id, _) = http.prepare("stdio bench").await?;
    let mut bridge = StdioClient::start(&s.server_bin, &server.mcp_url).await?;
    let mut report = ScenarioReport {
        name: "stdio".into(),
        ..Default::default()
    };
    let args = serde_json::json!({"proposal_id": id});
    let mut rec = Recorder::default();
    let deadline = Instant::now() + s.duration;
    let phase = Phase::start(&server);
    for _ in 0..MAX_OPS_PER_WORKER {
        if Instant::now() >= deadline || errors(&rec) > MAX_ERRORS_PER_WORKER {
            break;
        }
        let call = async {
            bridge
                .call("approval_status", args.clone())
                .await?
                .expect(&["PENDING_QUORUM"])
                .map(|_| ())
        };
        timed(&mut rec, "status via stdio (sequential)", call).await;
    }
    let elapsed = phase.finish(&server, &mut report);
    bridge.stop().await;
    report.rows = rows(
        "stdio",
        1,
        elapsed,
        &rec,
        &[(
            "status via stdio (sequential)",
            Target {
                min_rate: Some(5_000.0),
                max_p99: None,
            },
        )],
    );
    finish_report(&mut report, &server, &world);
    Ok(report)
}

/// Pending listing latency: `n` sequential signed reads. `when` names the moment on
/// stderr, so a profiler can be attached to the server for just this phase.
async fn listing(http: &Http, world: &World, n: usize, when: &str) -> Result<(OpStats, usize)> {
    eprintln!("  scale: pending listing, {when}: {n} calls");
    let path = "/v1/proposals?status=pending&limit=100";
    let mut st = OpStats::default();
    let mut len = 0;
    for _ in 0..n {
        let t = Instant::now();
        match http.list(&world.keys[0], path).await {
            Ok(l) => {
                st.ok(t.elapsed());
                len = l;
            }
            Err(e) => st.err(|| format!("{e:#}")),
        }
    }
    Ok((st, len))
}

/// Kill, restart, and time until `/healthz` answers.
async fn restart(world: &World, server: Server, s: &Settings) -> Result<(Server, Duration)> {
    server.kill()?;
    let t0 = Instant::now();
    let server = tokio::task::block_in_place(|| world.start(&s.server_bin, &s.server_args))?;
    let probe = client::pool(1)?;
    let ready = server::wait_healthy(&probe, &server.api_url, t0, Duration::from_secs(600)).await?;
    Ok((server, ready))
}

/// A large store: status and listing latency, RSS and restart time, empty vs full.
pub async fn scale(s: &Settings) -> Result<ScenarioReport> {
    let world = World::new(s.notes_dir.as_deref())?;
    let mut server = world.start(&s.server_bin, &s.server_args)?;
    let mut http = http_for(&server, s.clients.max(s.fill_clients))?;
    let few_pending = if s.smoke { 20 } else { 200 };
    let probe_time = if s.smoke {
        Duration::from_secs(1)
    } else {
        s.duration.min(Duration::from_secs(5))
    };
    let list_n = s.list_count;
    let pending: Arc<Vec<String>> = Arc::new(
        prefill(&http, few_pending, s.clients)
            .await?
            .into_iter()
            .map(|(id, _)| id)
            .collect(),
    );
    let mut report = ScenarioReport {
        name: "scale".into(),
        ..Default::default()
    };
    // Baseline: a nearly empty store.
    eprintln!("  scale: baseline with {few_pending} pending proposals");
    let base_status = status_load(&http, &pending, s.clients, probe_time).await?;
    let (base_list, base_len) = listing(&http, &world, list_n, "few finished").await?;
    let base_rss = server.rss_kib();
    let base_store = disk_usage(&world.data());

    // Fill: prepare + withdraw, so the store holds many finished proposals.
    eprintln!(
        "  scale: filling up to {} finished proposals (at most {:?}, {} workers)",
        s.scale_count, s.fill_time, s.fill_clients
    );
    let made = Arc::new(AtomicU64::new(0));
    let claimed = Arc::new(AtomicU64::new(0));
    let fill_deadline = Instant::now() + s.fill_time;
    let fill_t0 = Instant::now();
    let fill_server_cpu = server.cpu_seconds();
    let target = s.scale_count;
    let progress = {
        let made = made.clone();
        tokio::spawn(async move {
            let every = Duration::from_secs(30);
            let mut last = Instant::now();
            while Instant::now() < fill_deadline + Duration::from_secs(60) {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if last.elapsed() >= every {
                    last = Instant::now();
                    eprintln!(
                        "  scale: {} filled after {:.0} s",
                        made.load(Ordering::Relaxed),
                        fill_t0.elapsed().as_secs_f64()
                    );
                }
            }
        })
    };
    let fill = run_workers(s.fill_clients, |w| {
        let (http, made, claimed) = (http.clone(), made.clone(), claimed.clone());
        async move {
            let mut rec = Recorder::default();
            for i in 0..MAX_OPS_PER_WORKER {
                if Instant::now() >= fill_deadline || errors(&rec) > MAX_ERRORS_PER_WORKER {
                    break;
                }
                if claimed.fetch_add(1, Ordering::Relaxed) >= target {
                    break;
                }
                let Some((id, _)) = timed(
                    &mut rec,
                    "fill: prepare",
                    http.prepare(&format!("fill {w}/{i}")),
                )
                .await
                else {
                    continue;
                };
                if timed(&mut rec, "fill: withdraw", http.withdraw(&id))
                    .await
                    .is_some()
                {
                    made.fetch_add(1, Ordering::Relaxed);
                }
            }
            rec
        }
    })
    .await?;
    progress.abort();
    let fill_elapsed = fill_t0.elapsed();
    let filled = made.load(Ordering::Relaxed);
    let fill_cpu = server
        .cpu_seconds()
        .zip(fill_server_cpu)
        .map(|(a, b)| a - b);
    report.rows = rows("scale (fill)", s.fill_clients, fill_elapsed, &fill, &[]);
    report.server_cpu_s = fill_cpu;

    // Full store.
    eprintln!(
        "  scale: {filled} finished proposals in {fill_elapsed:.1?}; measuring the full store"
    );
    let full_status = status_load(&http, &pending, s.clients, probe_time).await?;
    let (full_list, full_len) = listing(&http, &world, list_n, "right after the fill").await?;
    // The same listing after the server has sat idle: if the slow listing right after the
    // fill is work the burst left behind (sled's writes, the kernel's writeback, memory
    // the allocator has yet to hand back), it is gone here; the server's CPU over the
    // pause says whether the process itself was still busy.
    let idle = if s.smoke {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(30)
    };
    let idle_cpu0 = server.cpu_seconds();
    tokio::time::sleep(idle).await;
    let idle_cpu = server.cpu_seconds().zip(idle_cpu0).map(|(a, b)| a - b);
    let (idle_list, _) = listing(&http, &world, list_n, "after the idle pause").await?;
    let full_rss = server.rss_kib();
    let full_peak = server.peak_rss_kib();
    let full_store = disk_usage(&world.data());

    // Restart over the full store.
    let (srv, restart_full) = restart(&world, server, s).await?;
    server = srv;
    http = http_for(&server, s.clients)?;
    let after_restart_rss = server.rss_kib();
    let after_status = status_load(&http, &pending, s.clients, probe_time).await?;
    let (after_list, _) = listing(&http, &world, list_n, "after the restart").await?;
    let after_restart_peak = server.peak_rss_kib();

    // Restart once more, with nothing written since the last start. sled 0.34 writes its
    // recovery snapshot only when it opens, so a start replays every log segment written
    // since the previous start: the first restart replays the whole fill, this one almost
    // nothing. The two together say how much of a restart is that replay.
    let (srv, restart_again) = restart(&world, server, s).await?;
    server = srv;

    // A listing's "p50 / p99", as every listing fact below shows it.
    let p50_p99 = |st: &OpStats| {
        format!(
            "{} / {}",
            fmt_dur(st.quantile(0.5)),
            fmt_dur(st.quantile(0.99))
        )
    };
    let p50 = |r: &Recorder| {
        r.ops
            .get("status")
            .map(|s| s.quantile(0.5))
            .unwrap_or_default()
    };
    let n = |r: &Recorder| r.ops.get("status").map(|s| s.count()).unwrap_or_default();
    let ratio = |a: Duration, b: Duration| {
        if b.is_zero() {
            f64::NAN
        } else {
            a.as_secs_f64() / b.as_secs_f64()
        }
    };
    let kib = |k: Option<u64>| k.map(|k| fmt_bytes(k * 1024)).unwrap_or_else(|| "-".into());
    let mut facts = vec![
        Fact {
            what: format!("finished proposals filled (prepare + withdraw, target {}, fill time cap {:?})", s.scale_count, s.fill_time),
            value: format!("{filled} in {:.1} s ({:.0}/s)", fill_elapsed.as_secs_f64(), filled as f64 / fill_elapsed.as_secs_f64().max(1e-9)),
            target: format!("{} (1,000,000 for the full target)", s.scale_count),
            met: Some(filled >= s.scale_count),
        },
        Fact {
            what: format!("status p50, {} clients: {few_pending} pending vs + {filled} finished", s.clients),
            value: format!(
                "{} → {} (×{:.2}; {} / {} calls)",
                fmt_dur(p50(&base_status)),
                fmt_dur(p50(&full_status)),
                ratio(p50(&full_status), p50(&base_status)),
                n(&base_status),
                n(&full_status)
            ),
            target: "≤ 1.5× empty".into(),
            met: Some(ratio(p50(&full_status), p50(&base_status)) <= 1.5),
        },
        Fact {
            what: "status p50 after restart over the full store (cold cache)".into(),
            value: fmt_dur(p50(&after_status)),
            target: "-".into(),
            met: None,
        },
        Fact {
            what: format!("pending listing (limit 100, {base_len} shown) p50 / p99: few finished vs + {filled} finished"),
            value: format!(
                "{} → {} (×{:.2} p50; {full_len} shown)",
                p50_p99(&base_list),
                p50_p99(&full_list),
                ratio(full_list.quantile(0.5), base_list.quantile(0.5))
            ),
            target: "independent of finished count (×≤1.5)".into(),
            met: Some(ratio(full_list.quantile(0.5), base_list.quantile(0.5)) <= 1.5),
        },
        Fact {
            what: format!("pending listing p50 / p99, full store, after {} s idle (no restart)", idle.as_secs()),
            value: format!(
                "{} (×{:.2} p50 of few finished; server CPU over the pause {})",
                p50_p99(&idle_list),
                ratio(idle_list.quantile(0.5), base_list.quantile(0.5)),
                idle_cpu.map(|c| format!("{c:.2} s")).unwrap_or_else(|| "-".into())
            ),
            target: "-".into(),
            met: None,
        },
        Fact {
            // The same files as the two listings above, read by a process that did not
            // write them: what the fill left in the writing process (not leftover work,
            // which the idle listing rules out) is gone here.
            what: "pending listing p50 / p99 after restart over the full store".into(),
            value: format!(
                "{} (×{:.2} p50 of few finished)",
                p50_p99(&after_list),
                ratio(after_list.quantile(0.5), base_list.quantile(0.5))
            ),
            target: "independent of finished count (×≤1.5)".into(),
            met: Some(ratio(after_list.quantile(0.5), base_list.quantile(0.5)) <= 1.5),
        },
        Fact {
            what: "server RSS: empty → full (peak during fill)".into(),
            value: format!("{} → {} ({})", kib(base_rss), kib(full_rss), kib(full_peak)),
            target: "≤ 512 MiB".into(),
            met: full_peak.map(|k| k <= 512 * 1024),
        },
        Fact {
            what: "server RSS after restart over the full store: idle / peak after status load".into(),
            value: format!("{} / {}", kib(after_restart_rss), kib(after_restart_peak)),
            target: "≤ 512 MiB".into(),
            met: after_restart_peak.map(|k| k <= 512 * 1024),
        },
        Fact {
            what: "store on disk: empty → full".into(),
            value: format!(
                "{} → {} ({} per proposal)",
                fmt_bytes(base_store),
                fmt_bytes(full_store),
                fmt_bytes(full_store.saturating_sub(base_store) / filled.max(1))
            ),
            target: "-".into(),
            met: None,
        },
        Fact {
            what: "restart to ready (SIGKILL, start, /healthz 200), full store".into(),
            value: fmt_dur(restart_full),
            target: "≤ 3 s".into(),
            met: Some(restart_full <= Duration::from_secs(3)),
        },
        Fact {
            what: "restart to ready again, nothing written since the last start (sled replays only the log written since it last opened)".into(),
            value: fmt_dur(restart_again),
            target: "-".into(),
            met: None,
        },
    ];
    if let Some(c) = fill_cpu {
        facts.push(Fact {
            what: "server CPU during fill".into(),
            value: format!(
                "{c:.1} s ({:.0} µs per proposal)",
                c * 1e6 / filled.max(1) as f64
            ),
            target: "-".into(),
            met: None,
        });
    }
    for (name, st) in [
        ("baseline", &base_list),
        ("full", &full_list),
        ("full, after idle", &idle_list),
        ("after restart", &after_list),
    ] {
        if let Some(e) = &st.first_error {
            facts.push(Fact {
                what: format!("pending listing errors ({name})"),
                value: format!("{} (first: {e})", st.errors),
                target: "0".into(),
                met: Some(false),
            });
        }
    }
    for (name, r) in [
        ("baseline", &base_status),
        ("full", &full_status),
        ("after restart", &after_status),
    ] {
        if errors(r) > 0 {
            facts.push(Fact {
                what: format!("status errors ({name})"),
                value: errors(r).to_string(),
                target: "0".into(),
                met: Some(false),
            });
        }
    }
    report.facts = facts;
    finish_report(&mut report, &server, &world);
    report.store_bytes = Some(full_store);
    report.server_peak_rss_kib = full_peak;
    Ok(report)
}
