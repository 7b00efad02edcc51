//! `approve`, `reject`, `revoke`, `resolve`: show, confirm, sign the local hash, post.
//!
//! The order matters: the proposal is fetched and checked (hash recomputed here,
//! proposal, server and policy checked), shown in full, confirmed by the human typing
//! the first 8 characters of the hash, and only then signed. The signature covers
//! the hash computed here, never the one the server claimed.

use super::show::fetch;
use super::{connect, out, outln};
use crate::client::now_unix;
use crate::config::Settings;
use crate::display::{color, to_json};
use crate::failure::{kind_of, network, refused, usage, ExitKind};
use crate::proposal::{check, Checked};
use anyhow::Result;
use approval_core::message::check_reason;
use approval_core::{Decision, SignedDecision, Status};
use serde_json::{json, Value};
use std::io::BufRead;

/// The statuses in which a decision can be recorded, and how to say so.
fn allowed(decision: Decision) -> (Status, &'static str) {
    match decision {
        Decision::Approve | Decision::Reject => (Status::Pending, "PENDING"),
        Decision::Revoke => (Status::Approved, "APPROVED (before it runs)"),
        Decision::ResolveSucceeded | Decision::ResolveFailed => {
            (Status::OutcomeUnknown, "OUTCOME_UNKNOWN")
        }
    }
}

fn verb(decision: Decision) -> &'static str {
    match decision {
        Decision::Approve => "approve",
        Decision::Reject => "reject",
        Decision::Revoke => "revoke your approval of",
        Decision::ResolveSucceeded => "resolve as succeeded",
        Decision::ResolveFailed => "resolve as failed",
    }
}

/// Asks the human for the first 8 characters of the hash on stdin.
fn confirm(c: &Checked, decision: Decision) -> Result<()> {
    let prefix = c.hash.prefix(8);
    eprint!(
        "To {} proposal {}, type the first 8 characters of its preview hash: ",
        verb(decision),
        c.preview.proposal_id
    );
    let mut line = String::new();
    let n = std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| usage(format!("cannot read the confirmation from stdin: {e}")))?;
    if n == 0 {
        return Err(refused(
            "no confirmation typed (stdin is closed): nothing signed; scripts pass --yes",
        ));
    }
    let typed = line.trim().to_ascii_lowercase();
    if typed != prefix && typed != c.hash.to_hex() {
        return Err(refused(format!(
            "you typed {}, which is not the first 8 characters of the preview hash: nothing signed",
            crate::display::quote(line.trim())
        )));
    }
    Ok(())
}

/// The outcome line, e.g. `approved: 1 of 2, waiting for 1 more (and 1 of [carol])`.
pub fn outcome_line(decision: Decision, c: &Checked) -> String {
    match decision {
        Decision::Approve => format!("approved: {}", c.progress()),
        Decision::Reject => {
            let vetoes = c.policy.spec().vetoes;
            let have = c.quorum.rejections.len();
            if c.status == Status::Rejected {
                format!("rejected: proposal is REJECTED ({have} of {vetoes} vetoes)")
            } else {
                format!(
                    "rejected: {have} of {vetoes} vetoes, proposal is {}",
                    c.status.as_str()
                )
            }
        }
        Decision::Revoke => format!("revoked: proposal is {}", c.status.as_str()),
        Decision::ResolveSucceeded | Decision::ResolveFailed => {
            format!("resolved: proposal is {}", c.status.as_str())
        }
    }
}

/// `signer-cli approve|reject|revoke|resolve [ID]`: a full id, a unique prefix of
/// one in the status the decision needs, or (approve, reject) none: the one pending
/// proposal waiting for this approver, still shown in full and confirmed. With
/// `--yes` (no confirmation) the id is taken exactly as typed.
pub async fn decide(
    settings: &Settings,
    id: Option<&str>,
    decision: Decision,
    reason: &str,
    yes: bool,
) -> Result<()> {
    check_reason(reason).map_err(|e| usage(e.to_string()))?;
    let (needed, _) = allowed(decision);
    if id.is_none() && needed != Status::Pending {
        return Err(usage(format!(
            "{decision} needs the proposal id (or a unique prefix of it)"
        )));
    }
    let client = connect(settings)?;
    // Signing without asking names exactly what it signs: a prefix or no id would let
    // whoever can propose (or withdraw) steer which proposal a script approves.
    let id = match (yes, id) {
        (true, Some(id)) => super::parse_id(id)?,
        (true, None) => {
            return Err(usage(
                "--yes signs without asking, so it needs the whole proposal id: a script names exactly what it signs",
            ))
        }
        (false, id) => super::pick::pick(&client, id, Some(needed)).await?,
    };
    let (checked, server_id) = fetch(&client, &id).await?;
    let shown = checked.render(now_unix(), !settings.json && color());
    if settings.json {
        eprint!("{shown}");
    } else {
        out(&shown);
    }
    let key = client
        .key()
        .ok_or_else(|| usage("this command needs your key (--key FILE)"))?;
    let me = &key.name;
    if !checked.may_decide(me) {
        return Err(refused(format!(
            "you ({me}) are not an approver in the policy of kind {} (approvers: {}): nothing signed",
            checked.preview.kind,
            checked
                .policy
                .spec()
                .approvers
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let (needed, needed_text) = allowed(decision);
    if checked.status != needed {
        return Err(refused(format!(
            "proposal {id} is {}: {decision} is only possible while it is {needed_text}; nothing signed",
            checked.status.as_str()
        )));
    }
    if !yes {
        confirm(&checked, decision)?;
    }
    let signed = SignedDecision::sign(&key.key, me.clone(), decision, &checked.hash, reason)
        .map_err(|e| usage(e.to_string()))?;
    let body = serde_json::to_value(&signed)
        .map_err(|e| network(format!("cannot encode the decision: {e}")))?;
    let resp = client
        .post(&format!("/v1/proposals/{id}/decisions"), &body)
        .await
        .map_err(|e| {
            if kind_of(&e) == ExitKind::Network {
                // Signatures are deterministic: sending the same decision again is harmless.
                network(format!(
                    "{e}; the decision may or may not have been recorded: check with `signer-cli show {id}`, or run the same command again"
                ))
            } else {
                e
            }
        })?;
    // A decision the server already had is answered without the proposal view (a
    // replayed decision body must not read the proposal); read it with a signed GET.
    let reread;
    let view = match resp.get("proposal") {
        Some(v) => v,
        None if resp.get("already_recorded").and_then(Value::as_bool) == Some(true) => {
            reread = client.get(&format!("/v1/proposals/{id}")).await?;
            &reread
        }
        None => {
            return Err(network(
                "the server's answer to the decision has no `proposal`",
            ))
        }
    };
    let after = check(view, Some(&id), &server_id).map_err(|e| {
        refused(format!(
            "the decision was sent, but the server's answer does not check: {e}"
        ))
    })?;
    if after.hash != checked.hash {
        return Err(refused(format!(
            "the decision was sent, but the server now shows preview {} instead of the {} you signed",
            after.hash, checked.hash
        )));
    }
    let already = resp.get("already_recorded").and_then(Value::as_bool) == Some(true);
    let line = outcome_line(decision, &after);
    if settings.json {
        outln(&to_json(&json!({
            "recorded": resp.get("recorded").and_then(Value::as_bool).unwrap_or(false),
            "already_recorded": already,
            "approver": me.as_str(),
            "decision": decision.as_str(),
            "reason": reason,
            "preview_sha256": checked.hash.to_hex(),
            "status": after.status.as_str(),
            "outcome": line,
            "proposal": after.to_json(),
        })));
    } else {
        outln(&if already {
            format!("{line} (this decision was already recorded)")
        } else {
            line
        });
    }
    Ok(())
}
