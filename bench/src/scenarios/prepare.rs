//! `prepare`: durable `approval_prepare`, `clients` at a time.

use super::harness::{
    errors, finish_report, http_for_all, prefill, rows, run_workers, start_instances, timed, Phase,
    Settings, MAX_ERRORS_PER_WORKER, MAX_OPS_PER_WORKER,
};
use crate::report::{Recorder, ScenarioReport, Target};
use crate::server::World;
use anyhow::Result;
use std::time::{Duration, Instant};

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
