//! The `command` executor: runs a program without a shell, the payload JSON on stdin.

use super::{ExecContext, ExecReport, READ_LIMIT};
use approval_core::receipt::Receipt;
use approval_core::status::Outcome;
use approval_core::ProposalId;
use serde_json::Value;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub(super) async fn read_bounded<R: tokio::io::AsyncRead + Unpin>(mut r: R) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                // Keep draining past the limit so the child never blocks on a full pipe.
                let room = READ_LIMIT.saturating_sub(out.len());
                out.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
    out
}

/// Runs a program without a shell.
pub(super) async fn command(
    ctx: &ExecContext,
    program: &str,
    args: &[String],
    timeout: Duration,
    id: &ProposalId,
    payload: &Value,
    receipt: &Receipt,
) -> ExecReport {
    let receipts = ctx.data_dir.join("receipts");
    let receipt_path = receipts.join(format!("{id}.json"));
    let wrote = async {
        tokio::fs::create_dir_all(&receipts).await?;
        let text = serde_json::to_vec_pretty(receipt).map_err(std::io::Error::other)?;
        tokio::fs::write(&receipt_path, text).await
    }
    .await;
    if let Err(e) = wrote {
        return ExecReport::new(
            Outcome::Failed,
            format!("not run: cannot write the receipt: {e}"),
        );
    }
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("APPROVAL_RECEIPT", &receipt_path)
        .env("APPROVAL_PROPOSAL_ID", id.as_str())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return ExecReport::new(
                Outcome::Failed,
                format!("not run: cannot start {program}: {e}"),
            )
        }
    };
    let input = serde_json::to_vec(payload).unwrap_or_default();
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let feed = async move {
        if let Some(mut s) = stdin {
            // A program that does not read its input is not an error.
            let _ = s.write_all(&input).await;
        }
    };
    let out = async move {
        match stdout {
            Some(s) => read_bounded(s).await,
            None => Vec::new(),
        }
    };
    let err = async move {
        match stderr {
            Some(s) => read_bounded(s).await,
            None => Vec::new(),
        }
    };
    let run = async {
        let (_, o, e, status) = tokio::join!(feed, out, err, child.wait());
        (o, e, status)
    };
    match tokio::time::timeout(timeout, run).await {
        Ok((o, e, Ok(status))) => {
            let text = format!(
                "exit {}; stdout: {}; stderr: {}",
                status
                    .code()
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "by signal".into()),
                String::from_utf8_lossy(&o),
                String::from_utf8_lossy(&e)
            );
            let outcome = if status.success() {
                Outcome::Succeeded
            } else {
                Outcome::Failed
            };
            ExecReport::new(outcome, text)
        }
        Ok((_, _, Err(e))) => {
            ExecReport::new(Outcome::Unknown, format!("lost track of {program}: {e}"))
        }
        Err(_) => {
            let _ = child.kill().await;
            ExecReport::new(
                Outcome::Unknown,
                format!(
                    "{program} did not finish within {}s and was killed",
                    timeout.as_secs()
                ),
            )
        }
    }
}
