//! `decide` (signed approvals) and `round-trip` (a proposal's whole life per
//! iteration).

use super::harness::{
    errors, finish_report, http_for_all, prefill, rows, run_workers, start_instances, timed, Phase,
    Settings, MAX_ERRORS_PER_WORKER, MAX_OPS_PER_WORKER,
};
use crate::client::decision_body;
use crate::report::{OpStats, Recorder, ScenarioReport, Target};
use crate::server::World;
use anyhow::{bail, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

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
