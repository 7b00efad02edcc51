//! `approval-bench`: a load generator for `approval-server`.
//!
//! It writes its own policy (`bench.note`, 2 of 3 approvers, note executor) and
//! keyring into a temporary folder, starts the real server binary on a loopback
//! port (a fresh store per scenario), drives it with concurrent clients over one
//! HTTP connection pool, and reports per operation: throughput, latency
//! p50/p90/p99/max, the server's peak RSS (`VmHWM`) and the store's size on disk.
//! Only loopback traffic; every loop is bounded in count and time.
//!
//! ```text
//! approval-bench --scenario all --clients 32 --duration 10s
//! approval-bench --scenario all --smoke          # ~3 s per scenario, small counts (CI)
//! approval-bench --scenario peers                # vs the seed 000 server over stdio, alternately
//! approval-bench --scenario http-pair            # vs rmcp-ceiling over HTTP, alternately
//! ```

#![forbid(unsafe_code)]

mod client;
mod peers;
mod report;
mod scenarios;
mod server;

use anyhow::Result;
use clap::{Parser, ValueEnum};
use report::{markdown, parse_duration, ScenarioReport};
use scenarios::Settings;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// `approval_status` on pending proposals.
    Status,
    /// Durable `approval_prepare`.
    Prepare,
    /// Signed approvals on the approver API.
    Decide,
    /// prepare, two signed approvals, execute.
    RoundTrip,
    /// `approval_status` through `approval-server stdio`, sequentially.
    Stdio,
    /// A large store: status, pending listing, RSS and restart, empty vs full.
    Scale,
    /// Side by side over stdio, alternately: the seed 000 server (Python) vs our embedded stdio.
    Peers,
    /// Side by side over HTTP, alternately: our approval_status vs rmcp-ceiling's trivial tool.
    HttpPair,
    /// Every scenario in turn.
    All,
}

/// Load generator for approval-server.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// What to measure.
    #[arg(long, value_enum, default_value = "all")]
    scenario: Scenario,
    /// Concurrent clients.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Length of each measured phase (10s, 500ms, 2m).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// The approval-server binary.
    #[arg(long, default_value = "target/release/approval-server")]
    server_bin: PathBuf,
    /// Proposals to put in the store for `scale`.
    #[arg(long, default_value_t = 1_000_000)]
    scale_count: u64,
    /// Longest time `scale` spends filling the store.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    fill_time: Duration,
    /// Concurrent workers filling the store for `scale`.
    #[arg(long, default_value_t = 64)]
    fill_clients: usize,
    /// Sequential pending listings per measurement in `scale` (10 with --smoke). More
    /// gives a profiler (`perf record -p <server>`) time to sample the listing.
    #[arg(long, default_value_t = 100)]
    list_count: usize,
    /// Short phases and small counts (~3 s per scenario): a quick check that everything works.
    #[arg(long)]
    smoke: bool,
    /// Extra argument for `approval-server serve` (repeatable). Unless --keep-server-limits,
    /// the bench adds `--max-pending-per-agent 100000000 --max-pending 100000000`: every
    /// client is the one loopback agent `local`, and throughput must not stop at the
    /// server's default admission limit (10,000 pending per agent).
    #[arg(long, allow_hyphen_values = true)]
    server_arg: Vec<String>,
    /// Instances of the server for status, prepare, decide and round-trip, with the
    /// same arguments, clients spread round robin over them. They must share a store:
    /// `--server-arg=--store --server-arg=postgres://...`. CPU and RSS are the first's.
    #[arg(long, default_value_t = 1)]
    instances: usize,
    /// Run the server with its default pending limits.
    #[arg(long)]
    keep_server_limits: bool,
    /// Timed calls per run in `peers`, after 50 warm-up calls (as stdio_rate.py).
    #[arg(long, default_value_t = 2000)]
    peers_n: usize,
    /// Alternating rounds per pair in `peers` and `http-pair`.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The Python that runs the seed's server in `peers`.
    #[arg(long, default_value = "python3")]
    python: String,
    /// The rmcp-ceiling binary [default: next to approval-bench].
    #[arg(long)]
    ceiling_bin: Option<PathBuf>,
    /// Also write the Markdown results to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Keep the note executor's files under this folder (one folder per run) and leave
    /// them there, instead of in the run's own folder, which is deleted when it ends.
    /// On ext4 without a journal, creating a file costs more for minutes after many
    /// files of the same block group were deleted (the inode allocator skips each
    /// recently deleted inode), so a run that creates notes right after another run's
    /// cleanup measures that cleanup: pass one folder to a series of runs and delete it
    /// after the last (as `bench/scripts/final-run.sh` does).
    #[arg(long)]
    notes_dir: Option<PathBuf>,
}

impl Cli {
    fn settings(&self) -> Settings {
        let mut s = Settings {
            clients: self.clients.clamp(1, 4096),
            duration: self.duration,
            server_bin: self.server_bin.clone(),
            smoke: self.smoke,
            scale_count: self.scale_count,
            fill_time: self.fill_time,
            fill_clients: self.fill_clients.clamp(1, 4096),
            list_count: self.list_count.clamp(1, 1_000_000),
            server_args: self.server_arg.clone(),
            notes_dir: self.notes_dir.clone(),
            instances: self.instances.clamp(1, 8),
            // Our prepare pair must stay under the default 10,000 pending per agent.
            peers_n: self.peers_n.clamp(1, 9_000),
            rounds: self.rounds.clamp(1, 50),
            python: self.python.clone(),
            ceiling_bin: self.ceiling_bin.clone().unwrap_or_else(|| {
                std::env::current_exe()
                    .ok()
                    .and_then(|p| p.parent().map(|d| d.join("rmcp-ceiling")))
                    .unwrap_or_else(|| PathBuf::from("target/release/rmcp-ceiling"))
            }),
        };
        if !self.keep_server_limits {
            s.server_args.extend(
                [
                    "--max-pending-per-agent",
                    "100000000",
                    "--max-pending",
                    "100000000",
                ]
                .map(String::from),
            );
        }
        if self.smoke {
            s.clients = s.clients.min(8);
            s.duration = s.duration.min(Duration::from_secs(3));
            s.scale_count = s.scale_count.min(2_000);
            s.fill_time = s.fill_time.min(Duration::from_secs(5));
            s.fill_clients = s.fill_clients.min(16);
            s.list_count = s.list_count.min(10);
            s.peers_n = s.peers_n.min(100);
            s.rounds = 1;
        }
        s
    }
}

async fn run(cli: &Cli) -> Result<Vec<ScenarioReport>> {
    let s = cli.settings();
    let list: Vec<Scenario> = match cli.scenario {
        Scenario::All => vec![
            Scenario::Status,
            Scenario::Prepare,
            Scenario::Decide,
            Scenario::RoundTrip,
            Scenario::Stdio,
            Scenario::Scale,
            Scenario::Peers,
            Scenario::HttpPair,
        ],
        one => vec![one],
    };
    let mut out = Vec::new();
    for sc in list {
        let t = Instant::now();
        eprintln!(
            "== {sc:?}: {} clients, {:?} per phase",
            s.clients, s.duration
        );
        let r = match sc {
            Scenario::Status => scenarios::status(&s).await?,
            Scenario::Prepare => scenarios::prepare(&s).await?,
            Scenario::Decide => scenarios::decide(&s).await?,
            Scenario::RoundTrip => scenarios::round_trip(&s).await?,
            Scenario::Stdio => scenarios::stdio(&s).await?,
            Scenario::Scale => scenarios::scale(&s).await?,
            Scenario::Peers => peers::peers(&s).await?,
            Scenario::HttpPair => peers::http_pair(&s).await?,
            Scenario::All => anyhow::bail!("`all` is expanded into the scenarios above"),
        };
        for row in &r.rows {
            eprintln!(
                "   {:<32} {:>8} ok {:>5} err {:>9.0}/s  p50 {:>9}  p99 {:>9}  max {:>9}",
                row.op,
                row.stats.count(),
                row.stats.errors,
                row.rate(),
                report::fmt_dur(row.stats.quantile(0.5)),
                report::fmt_dur(row.stats.quantile(0.99)),
                report::fmt_dur(row.stats.max()),
            );
        }
        for f in &r.facts {
            eprintln!("   {}: {}", f.what, f.value);
        }
        eprintln!("   ({:.1} s)", t.elapsed().as_secs_f64());
        out.push(r);
    }
    Ok(out)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("approval-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let t0 = Instant::now();
    let reports = match rt.block_on(run(&cli)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("approval-bench: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let md = markdown(&reports);
    println!("{md}");
    eprintln!("total {:.1} s", t0.elapsed().as_secs_f64());
    if let Some(path) = &cli.out {
        if let Err(e) = std::fs::write(path, &md) {
            eprintln!("approval-bench: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    let failed: Vec<String> = reports
        .iter()
        .flat_map(|r| r.rows.iter())
        .filter(|row| row.stats.errors > 0 || row.stats.count() == 0)
        .map(|row| format!("{} / {}", row.scenario, row.op))
        .collect();
    if !failed.is_empty() {
        eprintln!(
            "approval-bench: operations with errors or no successful call: {}",
            failed.join(", ")
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
