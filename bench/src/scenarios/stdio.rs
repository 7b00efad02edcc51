//! `stdio`: `approval_status` through `approval-server stdio`, one call at a time.

use super::harness::{
    errors, finish_report, http_for, rows, timed, Phase, Settings, MAX_ERRORS_PER_WORKER,
    MAX_OPS_PER_WORKER,
};
use crate::client::StdioClient;
use crate::report::{Recorder, ScenarioReport, Target};
use crate::server::World;
use anyhow::Result;
use std::time::Instant;

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
