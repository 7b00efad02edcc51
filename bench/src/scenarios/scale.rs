//! `scale`: a large store; status and listing latency, RSS and restart time, empty
//! against full.

use super::harness::{
    errors, finish_report, http_for, prefill, rows, run_workers, timed, Settings,
    MAX_ERRORS_PER_WORKER, MAX_OPS_PER_WORKER,
};
use super::status::status_load;
use crate::client::{self, Http};
use crate::report::{fmt_bytes, fmt_dur, Fact, OpStats, Recorder, ScenarioReport};
use crate::server::{self, disk_usage, Server, World};
use anyhow::Result;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
