//! `pending`: the proposals waiting for a decision, one checked row each.

use super::{connect, out, outln};
use crate::client::now_unix;
use crate::config::Settings;
use crate::display::{cut, duration, table, to_json, truncate};
use crate::failure::{network, refused};
use crate::proposal::{check, expires_in};
use anyhow::Result;
use serde_json::{json, Value};

/// Longest summary shown in the table, in characters.
const SUMMARY_WIDTH: usize = 40;

/// `signer-cli pending`.
pub async fn pending(settings: &Settings) -> Result<()> {
    let client = connect(settings)?;
    let me = client.key().map(|k| k.name.clone());
    let server_id = client.server_id().await?;
    let v = client.get("/v1/proposals?status=pending").await?;
    let list = v
        .get("proposals")
        .and_then(Value::as_array)
        .ok_or_else(|| network("the server's answer has no `proposals` list"))?;
    let now = now_unix();
    let mut rows = Vec::new();
    let mut items = Vec::new();
    let mut bad = 0usize;
    for p in list {
        match check(p, None, &server_id) {
            Ok(c) => {
                let pr = &c.preview;
                let mine = me.as_ref().is_some_and(|m| c.has_decided(m, "approve"));
                rows.push(vec![
                    pr.proposal_id.to_string(),
                    pr.kind.to_string(),
                    truncate(&pr.summary, SUMMARY_WIDTH),
                    pr.requested_by.to_string(),
                    duration(now - pr.created_at.unix()),
                    format!(
                        "{}/{}{}",
                        c.quorum.have,
                        c.quorum.need,
                        if mine { " (you)" } else { "" }
                    ),
                    expires_in(pr, now),
                ]);
                items.push(json!({
                    "proposal_id": pr.proposal_id.as_str(),
                    "checked": true,
                    "kind": pr.kind.as_str(),
                    "summary": pr.summary,
                    "requested_by": pr.requested_by.as_str(),
                    "created_at": pr.created_at.to_rfc3339(),
                    "expires_at": pr.expires_at.to_rfc3339(),
                    "preview_sha256": c.hash.to_hex(),
                    "status": c.status.as_str(),
                    "approvals": {"have": c.quorum.have, "need": c.quorum.need},
                    "you_approved": mine,
                }));
            }
            Err(e) => {
                bad += 1;
                let id = p.get("proposal_id").and_then(Value::as_str).unwrap_or("?");
                rows.push(vec![
                    truncate(id, approval_core::ids::ID_MAX_LEN),
                    "!".into(),
                    cut(&format!("REFUSED: {e}"), 100),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]);
                items.push(json!({"proposal_id": id, "checked": false, "problem": e.to_string()}));
            }
        }
    }
    if settings.json {
        outln(&to_json(&json!({ "proposals": items })));
    } else if rows.is_empty() {
        outln("no pending proposals");
    } else {
        out(&table(
            &[
                "ID",
                "KIND",
                "SUMMARY",
                "REQUESTED BY",
                "AGE",
                "APPROVALS",
                "EXPIRES IN",
            ],
            &rows,
        ));
    }
    if bad > 0 {
        return Err(refused(format!(
            "{bad} proposal(s) failed the local checks (marked !): do not sign them; run `signer-cli show ID` for details"
        )));
    }
    Ok(())
}
