//! The `note` executor: writes one new file with the payload and reads it back.
//!
//! The file work runs as one blocking job: creating the folder, creating the file,
//! writing, fsyncing and reading back are each a blocking call, and handing each to
//! tokio's blocking pool separately (`tokio::fs`) cost five thread hand-offs per
//! execution where one does.

use super::ExecReport;
use approval_core::status::Outcome;
use approval_core::{ProposalId, Sha256Hex};
use serde_json::Value;
use std::io::Write;
use std::path::Path;

/// Writes one new file and reads it back.
pub(super) async fn note(dir: &Path, id: &ProposalId, payload: &Value) -> ExecReport {
    let text = match payload.get("text").and_then(Value::as_str) {
        Some(t) => t.to_owned(),
        None => serde_json::to_string_pretty(payload).unwrap_or_default(),
    };
    let dir = dir.to_path_buf();
    let path = dir.join(format!("{id}.txt"));
    let shown = path.display().to_string();
    match tokio::task::spawn_blocking(move || write_and_read_back(&dir, &path, &text)).await {
        Ok(report) => report,
        Err(e) => ExecReport::new(
            Outcome::Failed,
            format!("the write of {shown} did not finish: {e}"),
        ),
    }
}

fn write_and_read_back(dir: &Path, path: &Path, text: &str) -> ExecReport {
    if let Err(e) = std::fs::create_dir_all(dir) {
        return ExecReport::new(
            Outcome::Failed,
            format!("cannot create {}: {e}", dir.display()),
        );
    }
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.sync_all()
        });
    if let Err(e) = written {
        return ExecReport::new(
            Outcome::Failed,
            format!("cannot write {}: {e}", path.display()),
        );
    }
    match std::fs::read(path) {
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
