//! The page's JSON: the same fetch, checks, rendering and signing as the terminal
//! commands (`pending`, `show`, `approve`, ...), called from here, never copied.
//!
//! Every string the page shows was made safe here by the CLI's own escaping
//! ([`crate::display`]); the page only ever sets `textContent`. The JSON itself is
//! written with [`crate::display::json_safe`], so no raw control, bidi or invisible
//! character reaches the browser at all.

use super::UiState;
use crate::client::now_unix;
use crate::commands::decide::{check_confirmation, fitting, may_make, sign_and_send};
use crate::commands::show::fetch;
use crate::display::{escape, json_safe, truncate};
use crate::failure::{kind_of, network, refused, usage, ExitKind};
use crate::proposal::{check, Checked};
use approval_core::message::check_reason;
use approval_core::{Decision, ProposalId};
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// Longest summary in a card's title, in characters (the full text is in the preview).
const TITLE_SUMMARY: usize = 80;

/// A JSON answer, terminal- and browser-safe.
fn reply(status: StatusCode, v: &Value) -> Response {
    let text = serde_json::to_string(v).unwrap_or_else(|_| "null".into());
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json_safe(&text),
    )
        .into_response()
}

/// An error as the CLI would print it, with the exit kind as a stable code:
/// `REFUSED` (nothing signed, the checks or the server said no), `USAGE` (bad input),
/// `NETWORK` (the approval server could not be reached or answered nonsense).
fn failed(e: &anyhow::Error) -> Response {
    let (code, status) = match kind_of(e) {
        ExitKind::Refused => ("REFUSED", StatusCode::CONFLICT),
        ExitKind::Usage => ("USAGE", StatusCode::BAD_REQUEST),
        ExitKind::Network => ("NETWORK", StatusCode::BAD_GATEWAY),
    };
    reply(status, &json!({"code": code, "message": format!("{e:#}")}))
}

/// One proposal as the page shows it: the exact text `signer-cli show` prints
/// (`text`), and the decisions this approver may make on it now.
fn item(st: &UiState, c: &Checked) -> Value {
    let p = &c.preview;
    let decisions: Vec<&str> = if c.may_decide(&st.me) {
        fitting(c.status)
            .into_iter()
            .map(Decision::as_str)
            .collect()
    } else {
        vec![]
    };
    json!({
        "proposal_id": p.proposal_id.as_str(),
        "checked": true,
        "status": c.status.as_str(),
        "kind": p.kind.as_str(),
        "summary": truncate(&p.summary, TITLE_SUMMARY),
        "approvals": {"have": c.quorum.have, "need": c.quorum.need},
        // What the page sends back as `shown_sha256`: a decision is signed only on
        // the very preview the human was shown (see `decide`).
        "preview_sha256": c.hash.to_hex(),
        "text": c.render(now_unix(), false),
        "decisions": decisions,
        // Whether it can still change (core's word): the page re-reads every card
        // that can, on every change the server announces, so that no card stays
        // actionable after a decision made elsewhere.
        "final": c.status.is_final(),
    })
}

/// A proposal that failed the local checks: the CLI's refusal, and nothing to sign.
fn refused_item(view: &Value, e: &anyhow::Error) -> Value {
    let id = view
        .get("proposal_id")
        .and_then(Value::as_str)
        .unwrap_or("?");
    json!({"proposal_id": truncate(id, approval_core::ids::ID_MAX_LEN), "checked": false, "problem": e.to_string()})
}

/// `GET /api/state`: who and where, and the pending proposals, each checked
/// (what `signer-cli pending` lists, in full).
pub async fn state(State(st): State<Arc<UiState>>) -> Response {
    match pending(&st).await {
        Ok(list) => {
            let live = st.live_problem.lock().ok().and_then(|p| p.clone());
            reply(
                StatusCode::OK,
                &json!({
                    "me": st.me.as_str(),
                    "server": escape(st.client.base()),
                    "server_id": st.client.server_id().await.map(|s| s.to_string()).unwrap_or_default(),
                    "proposals": list,
                    "live_problem": live,
                }),
            )
        }
        Err(e) => failed(&e),
    }
}

async fn pending(st: &UiState) -> anyhow::Result<Vec<Value>> {
    let server_id = st.client.server_id().await?;
    let v = st.client.get("/v1/proposals?status=pending").await?;
    let list = v
        .get("proposals")
        .and_then(Value::as_array)
        .ok_or_else(|| network("the server's answer has no `proposals` list"))?;
    Ok(list
        .iter()
        .map(|p| match check(p, None, &server_id) {
            Ok(c) => item(st, &c),
            Err(e) => refused_item(p, &e),
        })
        .collect())
}

/// The query of `GET /api/proposal`.
#[derive(Deserialize)]
pub struct Which {
    /// A proposal id or a unique prefix, as `signer-cli show` takes it.
    id: Option<String>,
}

/// `GET /api/proposal?id=ID`: one proposal of any status, as `signer-cli show ID`.
pub async fn proposal(State(st): State<Arc<UiState>>, Query(q): Query<Which>) -> Response {
    let got = async {
        let typed =
            q.id.filter(|i| !i.trim().is_empty())
                .ok_or_else(|| usage("give a proposal id, or a unique prefix of it (?id=...)"))?;
        let id = crate::commands::pick::pick(&st.client, Some(&typed), None).await?;
        let (c, _) = fetch(&st.client, &id).await?;
        anyhow::Ok(item(&st, &c))
    }
    .await;
    match got {
        Ok(v) => reply(StatusCode::OK, &v),
        Err(e) => failed(&e),
    }
}

/// The body of `POST /api/decide`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Decide {
    /// The whole proposal id (the page only offers decisions on proposals it shows).
    proposal_id: String,
    /// `approve`, `reject`, `revoke`, `resolve-succeeded` or `resolve-failed`.
    decision: String,
    /// What the human typed: the first 8 characters of the preview hash.
    confirm: String,
    /// The whole preview hash of the card the human read (the page's own copy).
    shown_sha256: String,
    /// The status on the card the human read (`PENDING`, ...): a decision is not
    /// signed over a proposal that changed since (another approver decided, it
    /// expired, ran or was withdrawn). Absent: only the checks of `may_make`.
    #[serde(default)]
    shown_status: String,
    /// Why (signed along with the decision).
    #[serde(default)]
    reason: String,
}

/// `POST /api/decide`: fetches and checks the proposal again (never trusting what
/// the page showed earlier), refuses unless its recomputed hash is the one of the
/// card the human read, its status is still the one that card showed, and the human
/// typed its first 8 characters, then signs and sends exactly as `signer-cli approve`.
pub async fn decide(State(st): State<Arc<UiState>>, body: String) -> Response {
    let done = async {
        let d: Decide = serde_json::from_str(&body)
            .map_err(|e| usage(format!("not a decision: {}", escape(&e.to_string()))))?;
        let decision: Decision = d.decision.parse().map_err(|_| {
            usage(format!(
                "{} is not a decision (approve, reject, revoke, resolve-succeeded, resolve-failed)",
                crate::display::quote(&d.decision)
            ))
        })?;
        check_reason(&d.reason).map_err(|e| usage(e.to_string()))?;
        let id = ProposalId::parse(&d.proposal_id).map_err(|e| usage(escape(&e.to_string())))?;
        let (checked, server_id) = fetch(&st.client, &id).await?;
        // The page showed one preview and this fetch got another one, each
        // consistent with its own hash: a server (or a man in the middle) that
        // answers the list and the single proposal differently, with a second
        // preview ground to share the first 8 characters of the hash, would pass
        // the typed check. Only the preview the human read is signed.
        if checked.hash.to_hex() != d.shown_sha256 {
            return Err(refused(format!(
                "the proposal changed since the page showed it: shown {}, now {}; \
                 nothing signed. Read it again before deciding",
                escape(&truncate(&d.shown_sha256, 64)),
                checked.hash.to_hex()
            )));
        }
        if !d.shown_status.is_empty() && d.shown_status != checked.status.as_str() {
            return Err(refused(format!(
                "proposal {id} changed since the page showed it: it was {}, it is now {}; \
                 nothing signed. Read it again before deciding",
                truncate(&d.shown_status, 20),
                checked.status.as_str()
            )));
        }
        may_make(&checked, &st.me, decision)?;
        check_confirmation(&checked, &d.confirm)?;
        let sent = sign_and_send(&st.client, &checked, &server_id, decision, &d.reason).await?;
        let outcome = if sent.already {
            format!("{} (this decision was already recorded)", sent.line)
        } else {
            sent.line.clone()
        };
        anyhow::Ok(json!({
            "outcome": outcome,
            "decision": decision.as_str(),
            "proposal": item(&st, &sent.after),
        }))
    }
    .await;
    match done {
        Ok(v) => reply(StatusCode::OK, &v),
        Err(e) => failed(&e),
    }
}

/// `GET /events`: one `changed` event whenever the server's signed event stream
/// announced something (the page then re-reads `/api/state`).
pub async fn events(State(st): State<Arc<UiState>>) -> impl IntoResponse {
    let stream = tokio_stream::wrappers::WatchStream::from_changes(st.changed.clone())
        .map(|n| Ok::<_, Infallible>(Event::default().event("changed").data(n.to_string())));
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page finds a card by its proposal's id: a refused proposal must keep
    /// every id a server can mint whole (46 characters since ids end in their time;
    /// a cut at 40 hid every refused card), while text longer than any id is cut.
    #[test]
    fn a_refused_item_keeps_any_valid_id_whole() {
        let why = anyhow::anyhow!("PREVIEW HASH MISMATCH");
        let minted = approval_core::ProposalId::mint([0xab; 16], 1_764_000_000_000);
        let longest = "p".repeat(approval_core::ids::ID_MAX_LEN);
        for id in [minted.as_str(), longest.as_str()] {
            let item = refused_item(&json!({ "proposal_id": id }), &why);
            assert_eq!(item["proposal_id"], id);
            assert_eq!(item["checked"], false);
        }
        let too_long = "p".repeat(approval_core::ids::ID_MAX_LEN + 1);
        let item = refused_item(&json!({ "proposal_id": too_long }), &why);
        let shown = item["proposal_id"].as_str().unwrap_or("");
        assert_eq!(shown.chars().count(), approval_core::ids::ID_MAX_LEN);
        assert!(shown.ends_with('…'), "{shown}");
    }
}
