//! The `note` executor: writes one new file with the payload and reads it back.

use super::ExecReport;
use approval_core::status::Outcome;
use approval_core::{ProposalId, Sha256Hex};
use serde_json::Value;
use std::path::Path;
use tokio::io::AsyncWriteExt;

/// Writes one new file and reads it back.
pub(super) async fn note(dir: &Path, id: &ProposalId, payload: &Value) -> ExecReport {
    let text = match payload.get("text").and_then(Value::as_str) {
        Some(t) => t.to_owned(),
        None => serde_json::to_string_pretty(payload).unwrap_or_default(),
    };
    if let Err(e) = tokio::fs::create_dir_all(dir).await {
        return ExecReport::new(
            Outcome::Failed,
            format!("cannot create {}: {e}", dir.display()),
        );
    }
    let path = dir.join(format!("{id}.txt"));
    let written = async {
        let mut f = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .await?;
        f.write_all(text.as_bytes()).await?;
        f.sync_all().await
    }
    .await;
    if let Err(e) = written {
        return ExecReport::new(
            Outcome::Failed,
            format!("cannot write {}: {e}", path.display()),
        );
    }
    match tokio::fs::read(&path).await {
        Ok(back) if back == text.as_bytes() => ExecReport {
            outcome: Outcome::Succeeded,
            detail: format!(
                "wrote {} ({} bytes), read back identical",
                path.display(),
                back.len()
            ),
            readback_sha256: Some(Sha256Hex::digest(&back)),
            output: None,
        },
        Ok(back) => ExecReport {
            outcome: Outcome::Failed,
            detail: format!(
                "read back {} bytes from {} that differ from what was written",
                back.len(),
                path.display()
            ),
            readback_sha256: Some(Sha256Hex::digest(&back)),
            output: None,
        },
        Err(e) => ExecReport::new(
            Outcome::Failed,
            format!("cannot read back {}: {e}", path.display()),
        ),
    }
}
