//! `status`: `approval_status` on pending proposals, and the loads `peers` reuses
//! (a status load on ours, a no-op load on theirs).

use super::harness::{
    errors, finish_report, http_for_all, prefill, rows, run_workers, start_instances, timed, Phase,
    Settings, MAX_ERRORS_PER_WORKER, MAX_OPS_PER_WORKER,
};
use crate::client::Http;
use crate::report::{Recorder, ScenarioReport, Target};
use crate::server::World;
use anyhow::Result;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
