//! `verify RECEIPT --keys FILE` and `hash PREVIEW_FILE`: checks that need no server.

use super::outln;
use crate::client::now_unix;
use crate::config::Settings;
use crate::display::{escape, quote, to_json};
use crate::failure::{refused, usage};
use anyhow::Result;
use approval_core::{
    verify_receipt, verify_receipt_attested, Keyring, Preview, PublicKey, Receipt, Sha256Hex,
    Timestamp,
};
use serde_json::{json, Value};
use std::path::Path;

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| usage(format!("cannot read {}: {e}", path.display())))
}

/// What a verification without `--server-key` cannot say, printed with its result.
pub const QUORUM_ONLY: &str = "quorum only: revocation not checked";

/// `signer-cli verify RECEIPT --keys FILE [--server-key KEY] [--check-expiry]`.
///
/// With `--server-key` (exactly as the server's `/healthz` publishes `server_key`)
/// the receipt must carry the server's execution attestation for this proposal and
/// hash, claimed within `approved_at + execute_within`; without it only the quorum
/// is verified, and the output says so.
pub fn verify(
    settings: &Settings,
    receipt: &Path,
    keys: &Path,
    server_key: Option<&str>,
    check_expiry: bool,
) -> Result<()> {
    let text = read(receipt)?;
    let keyring =
        Keyring::parse(&read(keys)?).map_err(|e| usage(format!("{}: {e}", keys.display())))?;
    let server_key = server_key
        .map(|k| {
            PublicKey::parse(k).map_err(|e| {
                usage(format!(
                    "--server-key {}: {} (pass the server_key its /healthz publishes: standard base64 of 32 bytes)",
                    quote(k),
                    escape(&e.to_string())
                ))
            })
        })
        .transpose()?;
    let r = Receipt::from_json_text(&text)
        .map_err(|e| refused(format!("receipt refused: {}", escape(&e.to_string()))))?;
    let now = check_expiry.then(|| Timestamp::from_unix(now_unix()));
    let v = match &server_key {
        Some(k) => verify_receipt_attested(&r, &keyring, k, now),
        None => verify_receipt(&r, &keyring, now),
    }
    .map_err(|e| refused(format!("receipt refused: {}", escape(&e.to_string()))))?;
    let p = v.preview();
    let spec = v.policy().spec();
    let attested = v.attestation().map(|a| {
        json!({
            "server_id": a.server_id.as_str(),
            "server_key": a.server_key.to_base64(),
            "approved_at": a.approved_at.to_rfc3339(),
            "claimed_at": a.claimed_at.to_rfc3339(),
        })
    });
    if settings.json {
        let decisions: Vec<Value> = r
            .decisions
            .iter()
            .map(|d| {
                json!({"approver": d.approver.as_str(), "decision": d.decision.as_str(), "reason": d.reason})
            })
            .collect();
        outln(&to_json(&json!({
            "ok": true,
            "proposal_id": p.proposal_id.as_str(),
            "server_id": p.server_id.as_str(),
            "kind": p.kind.as_str(),
            "preview_sha256": v.preview_sha256().to_hex(),
            "policy_sha256": v.policy_sha256().to_hex(),
            "quorum": spec.quorum,
            "policy_approvers": spec.approvers.iter().map(|a| a.as_str()).collect::<Vec<_>>(),
            "approved_by": v.approvers().iter().map(|a| a.as_str()).collect::<Vec<_>>(),
            "decisions": decisions,
            "revocation_checked": attested.is_some(),
            "attestation": attested,
            "note": if attested.is_some() { Value::Null } else { Value::from(QUORUM_ONLY) },
        })));
        return Ok(());
    }
    let approvers: Vec<&str> = v.approvers().iter().map(|a| a.as_str()).collect();
    let mut o = String::new();
    o.push_str(&format!(
        "receipt OK: {} approved {} ({} of {} required)\n",
        approvers.join(", "),
        p.proposal_id,
        approvers.len(),
        spec.quorum
    ));
    o.push_str(&format!("{:<15} {}\n", "kind", p.kind));
    o.push_str(&format!("{:<15} {}\n", "summary", quote(&p.summary)));
    o.push_str(&format!(
        "{:<15} {}\n",
        "preview_sha256",
        v.preview_sha256()
    ));
    o.push_str(&format!("{:<15} {}\n", "server", p.server_id));
    o.push_str(&format!(
        "{:<15} quorum {} of [{}], policy_sha256 {}\n",
        "policy",
        spec.quorum,
        spec.approvers
            .iter()
            .map(|a| a.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        v.policy_sha256()
    ));
    o.push_str("decisions:\n");
    for d in &r.decisions {
        o.push_str(&format!(
            "  {}  {}  {}\n",
            d.approver,
            d.decision,
            quote(&d.reason)
        ));
    }
    match v.attestation() {
        Some(a) => o.push_str(&format!(
            "{:<15} server {} claimed it at {} (quorum at {}), attested with key {}\n",
            "executed",
            a.server_id,
            a.claimed_at,
            a.approved_at,
            a.server_key
        )),
        None => o.push_str(&format!(
            "{QUORUM_ONLY} (pass --server-key KEY, the server_key its /healthz publishes, to require the server's execution attestation)\n"
        )),
    }
    super::out(&o);
    Ok(())
}

/// `signer-cli hash FILE`: the `preview_sha256` of a preview, a ProposalView or a receipt.
pub fn hash(settings: &Settings, file: &Path) -> Result<()> {
    let text = read(file)?;
    let v = approval_core::json::parse_exact(&text)
        .map_err(|e| refused(format!("{}: {}", file.display(), escape(&e.to_string()))))?;
    let preview_value = v.get("preview").unwrap_or(&v);
    let preview = Preview::from_value(preview_value).map_err(|e| {
        refused(format!(
            "{}: not a preview ({})",
            file.display(),
            escape(&e.to_string())
        ))
    })?;
    let h = preview.sha256();
    let claimed = v
        .get("preview")
        .and(v.get("preview_sha256"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    if settings.json {
        outln(&to_json(&json!({
            "preview_sha256": h.to_hex(),
            "claimed": claimed,
            "matches_claim": claimed.as_deref().map(|c| c == h.to_hex()),
        })));
    } else {
        outln(&h.to_hex());
    }
    if let Some(c) = claimed {
        if Sha256Hex::parse(&c).ok() != Some(h) {
            return Err(refused(format!(
                "PREVIEW HASH MISMATCH: the file claims preview_sha256 {} but its preview hashes to {h}",
                quote(&c)
            )));
        }
    }
    Ok(())
}
