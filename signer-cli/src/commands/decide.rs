//! `approve`, `reject`, `revoke`, `resolve`: show, confirm, sign the local hash, post.
//!
//! The order matters: the proposal is fetched and checked (hash recomputed here,
//! proposal, server and policy checked), shown in full, confirmed by the human typing
//! the first 8 characters of the hash, and only then signed. The signature covers
//! the hash computed here, never the one the server claimed.

use super::show::fetch;
use super::{connect, out, outln};
use crate::client::now_unix;
use crate::client::Client;
use crate::config::Settings;
use crate::display::{color, to_json};
use crate::failure::{kind_of, network, refused, usage, ExitKind};
use crate::proposal::{check, Checked};
use anyhow::Result;
use approval_core::message::check_reason;
use approval_core::{Action, ApproverName, Decision, ServerId, SignedDecision, Status};
use serde_json::{json, Value};
use std::io::BufRead;

/// The status a decision needs outside any cooldown, from core's state table (the one
/// the server applies), and how to say so.
fn allowed(decision: Decision) -> (Status, &'static str) {
    let action = Action::of(decision);
    let needed = Status::ALL
        .into_iter()
        .find(|s| action.allowed_in(*s, false))
        .unwrap_or(Status::Pending);
    let text = match needed {
        Status::Approved => "APPROVED (before it runs)",
        other => other.as_str(),
    };
    (needed, text)
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
    check_confirmation(c, &line)
}

/// Whether what the human typed is the first 8 characters (or all) of the hash
/// recomputed here: the one comparison both the terminal and `ui` make.
pub fn check_confirmation(c: &Checked, typed: &str) -> Result<()> {
    let t = typed.trim().to_ascii_lowercase();
    if t != c.hash.prefix(8) && t != c.hash.to_hex() {
        return Err(refused(format!(
            "you typed {}, which is not the first 8 characters of the preview hash: nothing signed",
            crate::display::quote(typed.trim())
        )));
    }
    Ok(())
}

/// Refuses a decision this approver may not make on this proposal now: not named
/// by its policy, or the proposal is not in the status the decision needs.
pub fn may_make(checked: &Checked, me: &ApproverName, decision: Decision) -> Result<()> {
    let id = &checked.preview.proposal_id;
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
    let (_, needed_text) = allowed(decision);
    // Core's table: a veto still lands during a policy's cooldown (the server is the
    // judge of when it ends).
    let cooling = checked.cooling_until(now_unix()).is_some();
    if !Action::of(decision).allowed_in(checked.status, cooling) {
        return Err(refused(format!(
            "proposal {id} is {}: {decision} is only possible while it is {needed_text}; nothing signed",
            checked.status.as_str()
        )));
    }
    Ok(())
}

/// The decisions that fit a proposal's status now (what `ui` offers).
pub fn fitting(status: Status) -> Vec<Decision> {
    Decision::ALL
        .into_iter()
        .filter(|d| Action::of(*d).allowed_in(status, false))
        .collect()
}

/// What the server recorded for a decision, checked again here.
pub struct Sent {
    /// The proposal after the decision, checked like before it.
    pub after: Checked,
    /// The server's `recorded`.
    pub recorded: bool,
    /// The server had this decision already (a resend).
    pub already: bool,
    /// The outcome line (see [`outcome_line`]).
    pub line: String,
}

/// Signs `decision` over the hash recomputed here and sends it; checks the answer
/// (same proposal, same preview). Called only after [`may_make`] and the human's
/// confirmation.
pub async fn sign_and_send(
    client: &Client,
    checked: &Checked,
    server_id: &ServerId,
    decision: Decision,
    reason: &str,
) -> Result<Sent> {
    let id = &checked.preview.proposal_id;
    let key = client
        .key()
        .ok_or_else(|| usage("this command needs your key (--key FILE)"))?;
    let signed = match client.ssh_agent() {
        Some(ssh_key) => {
            let sock = std::env::var_os("SSH_AUTH_SOCK").ok_or_else(|| {
                usage("--ssh-agent needs a running ssh-agent: SSH_AUTH_SOCK is not set")
            })?;
            // The agent may wait for a token's touch: off the async workers.
            let (ssh_key, name, hash, reason) = (
                ssh_key.clone(),
                key.name.clone(),
                checked.hash,
                reason.to_owned(),
            );
            tokio::task::spawn_blocking(move || {
                crate::ssh_agent::sign_decision(
                    std::path::Path::new(&sock),
                    &ssh_key,
                    name,
                    decision,
                    &hash,
                    &reason,
                )
            })
            .await
            .map_err(|e| refused(format!("signing through ssh-agent stopped: {e}")))?
            .map_err(refused)?
        }
        None => SignedDecision::sign(&key.key, key.name.clone(), decision, &checked.hash, reason)
            .map_err(|e| usage(e.to_string()))?,
    };
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
    let after = check(view, Some(id), server_id).map_err(|e| {
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
    let line = outcome_line(decision, &after);
    Ok(Sent {
        recorded: resp
            .get("recorded")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        already: resp.get("already_recorded").and_then(Value::as_bool) == Some(true),
        after,
        line,
    })
}

/// The outcome line, e.g. `approved: 1 of 2, waiting for 1 more (and 1 of [carol])`.
pub fn outcome_line(decision: Decision, c: &Checked) -> String {
    match decision {
        Decision::Approve => format!("approved: {}", c.progress(now_unix())),
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
    let me = client
        .key()
        .map(|k| k.name.clone())
        .ok_or_else(|| usage("this command needs your key (--key FILE)"))?;
    may_make(&checked, &me, decision)?;
    if !yes {
        confirm(&checked, decision)?;
    }
    let sent = sign_and_send(&client, &checked, &server_id, decision, reason).await?;
    if settings.json {
        outln(&to_json(&json!({
            "recorded": sent.recorded,
            "already_recorded": sent.already,
            "approver": me.as_str(),
            "decision": decision.as_str(),
            "reason": reason,
            "preview_sha256": checked.hash.to_hex(),
            "status": sent.after.status.as_str(),
            "outcome": sent.line,
            "proposal": sent.after.to_json(),
        })));
    } else {
        outln(&if sent.already {
            format!("{} (this decision was already recorded)", sent.line)
        } else {
            sent.line
        });
    }
    Ok(())
}
