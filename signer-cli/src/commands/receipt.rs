//! `receipt ID [--out FILE]`: the proof of approval, kept byte for byte as the server sent it.

use super::{connect, outln, parse_id};
use crate::config::Settings;
use crate::display::json_safe;
use crate::failure::{refused, usage};
use anyhow::Result;
use approval_core::json::canonical_bytes;
use approval_core::{Preview, Receipt, Sha256Hex};
use std::path::Path;

/// `signer-cli receipt ID [--out FILE]`.
pub async fn receipt(settings: &Settings, id: &str, out: Option<&Path>) -> Result<()> {
    let id = parse_id(id)?;
    let client = connect(settings)?;
    let server_id = client.server_id().await?;
    let text = client
        .get_text(&format!("/v1/proposals/{id}/receipt"))
        .await?;
    let r = Receipt::from_json_text(&text).map_err(|e| {
        refused(format!(
            "the server's receipt is not a receipt: {}",
            crate::display::escape(&e.to_string())
        ))
    })?;
    // The signatures need the approvers' keyring (`verify`); what can be checked
    // without it is checked here.
    let preview = Preview::from_value(&r.preview)
        .map_err(|e| refused(format!("the receipt's preview is invalid: {e}")))?;
    let computed = Sha256Hex::digest(&canonical_bytes(&r.preview));
    if computed != r.preview_sha256 {
        return Err(refused(format!(
            "PREVIEW HASH MISMATCH: the receipt claims {} but its preview hashes to {computed}",
            r.preview_sha256
        )));
    }
    if preview.proposal_id != id || preview.server_id != server_id {
        return Err(refused(format!(
            "the receipt is for proposal {} on server {}, not {id} on {server_id}",
            preview.proposal_id, preview.server_id
        )));
    }
    match out {
        Some(path) => {
            std::fs::write(path, text.as_bytes())
                .map_err(|e| usage(format!("cannot write {}: {e}", path.display())))?;
            eprintln!(
                "signer-cli: receipt of {id} written to {} ({} decisions); check it with `signer-cli verify {} --keys KEYRING --server-key KEY` (KEY: the server_key its /healthz publishes)",
                path.display(),
                r.decisions.len(),
                path.display()
            );
        }
        None => outln(json_safe(text.trim_end()).as_str()),
    }
    Ok(())
}
