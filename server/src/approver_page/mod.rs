//! The approver page and the enrolment page, served by the gate (issue #34): an
//! approver with a passkey decides from a phone, from the link in a notification.
//!
//! A surface beside `approver_api`, over the same service. What it serves:
//!
//! - `GET /approve/<id>`: the page (the same HTML for every proposal); its script
//!   reads the view token from the URL fragment and polls `GET /approve/<id>/state`
//!   (header `X-Approval-View`), recomputes the preview hash in the browser, and
//!   posts a passkey decision to `POST /v1/proposals/<id>/decisions`, the one door
//!   every decision comes through (`service::decide` verifies it);
//! - `GET /enroll/<token>`, `GET /enroll/<token>/options`, `POST /enroll/<token>`:
//!   a new passkey, answered as a keyring line (`service::enrol`);
//! - `/approve/assets/*`: the scripts and the style sheet.
//!
//! Every answer carries a strict Content-Security-Policy (scripts and styles from
//! this origin only, no inline script, no framing, no forms posting elsewhere),
//! `no-referrer` (a link's path must not leak to other sites) and `no-store`.
//! Nothing here decides: a link or a page can only read, and every decision needs
//! the passkey ceremony, whose assertion names this origin and this proposal.

use crate::approver_api::{self, ApiError};
use crate::service::{Service, ServiceError};
use approval_core::api::{EnrolmentRequest, PageDecision, PagePasskey, PageQuorum, PageState};
use approval_core::message::Decision;
use approval_core::{Action, Code};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::Value;
use std::sync::Arc;

/// The Content-Security-Policy of every page and answer.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
/// The header the page sends its view token in.
pub const VIEW_HEADER: &str = "x-approval-view";
/// Largest enrolment body accepted.
const MAX_ENROL_BODY: usize = 64 * 1024;

/// The page routes, merged into the approver API's router.
pub fn router(svc: Arc<Service>) -> Router {
    Router::new()
        .route("/approve/assets/{file}", get(asset))
        .route("/approve/{id}", get(approve_page))
        .route("/approve/{id}/state", get(state))
        .route("/enroll/{token}", get(enrol_page).post(enrol))
        .route("/enroll/{token}/options", get(enrol_options))
        .with_state(svc)
}

/// The headers every answer here carries.
fn guarded(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    r
}

fn html(body: &'static str) -> Response {
    guarded(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response())
}

fn json_answer(r: Result<Value, ApiError>) -> Response {
    guarded(match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    })
}

async fn approve_page() -> Response {
    html(include_str!("assets/approve.html"))
}

async fn enrol_page() -> Response {
    html(include_str!("assets/enroll.html"))
}

async fn asset(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "approve.js" => (
            include_str!("assets/approve.js"),
            "text/javascript; charset=utf-8",
        ),
        "enroll.js" => (
            include_str!("assets/enroll.js"),
            "text/javascript; charset=utf-8",
        ),
        "jcs.js" => (
            include_str!("assets/jcs.js"),
            "text/javascript; charset=utf-8",
        ),
        "page.css" => (include_str!("assets/page.css"), "text/css; charset=utf-8"),
        _ => return guarded(StatusCode::NOT_FOUND.into_response()),
    };
    guarded(([(header::CONTENT_TYPE, kind)], body).into_response())
}

/// `GET /approve/<id>/state`.
async fn state(
    State(svc): State<Arc<Service>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let token = headers
        .get(VIEW_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let answer = page_state(&svc, &id, token);
    // What was read may still be waiting for its fsync: answer once it is durable.
    if let Err(e) = svc.settle().await {
        return json_answer(Err(ApiError(e)));
    }
    json_answer(answer.map(|s| serde_json::to_value(s).unwrap_or(Value::Null)))
}

/// Everything the page shows and acts on, read through the service.
fn page_state(svc: &Service, id: &str, token: &str) -> Result<PageState, ApiError> {
    let rec = svc.get_for_page(id, token)?;
    let view = approver_api::view(svc, &rec)?;
    let now = svc.now();
    let life = rec.lifecycle.at(now);
    let policy = svc.policy_of(&rec)?;
    let keyring = &svc.config().keyring;
    let passkeys = policy
        .spec()
        .approvers
        .iter()
        .flat_map(|a| {
            keyring.passkeys(a).map(|p| PagePasskey {
                approver: a.clone(),
                credential_id: approval_core::passkey::b64url(p.credential_id()),
                rp_id: p.rp_id().to_owned(),
            })
        })
        .collect();
    let actions = [Decision::Approve, Decision::Reject, Decision::Revoke]
        .into_iter()
        .filter(|d| life.permits(Action::of(*d), now))
        .collect();
    let rendered =
        render(&view, svc).map_err(|m| ApiError(ServiceError::new(Code::Internal, m)))?;
    Ok(PageState {
        proposal_id: rec.id().clone(),
        status: life.status,
        version: format!("{}-{}", rec.revision, life.status.as_str()),
        preview: rec.preview.to_value(),
        preview_sha256: rec.preview_sha256,
        rendered,
        accept: policy.spec().accept.clone(),
        passkeys,
        actions,
        decisions: rec
            .decisions
            .iter()
            .map(|d| PageDecision {
                approver: d.signed.approver.clone(),
                decision: d.signed.decision,
                at: d.at,
            })
            .collect(),
        quorum: PageQuorum {
            have: view.quorum.have,
            need: view.quorum.need,
        },
    })
}

/// The proposal as `signer-cli show` prints it, without colour.
fn render(view: &approval_core::api::ProposalView, svc: &Service) -> Result<String, String> {
    let v = serde_json::to_value(view).map_err(|e| e.to_string())?;
    approval_core::show::Checked::check(&v, Some(&view.proposal_id), svc.identity().server_id())
        .map(|c| c.render(svc.now().unix(), false))
        .map_err(|e| e.to_string())
}

/// `GET /enroll/<token>/options`.
async fn enrol_options(State(svc): State<Arc<Service>>, Path(token): Path<String>) -> Response {
    json_answer(
        svc.enrolment_options(&token)
            .map(|o| serde_json::to_value(o).unwrap_or(Value::Null))
            .map_err(ApiError),
    )
}

/// `POST /enroll/<token>`: JSON only, at most [`MAX_ENROL_BODY`] bytes.
async fn enrol(
    State(svc): State<Arc<Service>>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let bad = |m: String| ApiError(ServiceError::new(Code::BadRequest, m));
    let json_ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let r = async {
        if !json_ct {
            return Err(bad(
                "send the new passkey as Content-Type: application/json".into(),
            ));
        }
        let bytes = axum::body::to_bytes(body, MAX_ENROL_BODY)
            .await
            .map_err(|e| {
                bad(format!(
                    "cannot read the body ({e}): send at most {MAX_ENROL_BODY} bytes"
                ))
            })?;
        let req: EnrolmentRequest = serde_json::from_slice(&bytes).map_err(|e| {
            bad(format!(
                "body must be {{credential_id, attestation_object, client_data_json}}: {e}"
            ))
        })?;
        svc.enrol(&token, &req)
            .map(|d| serde_json::to_value(d).unwrap_or(Value::Null))
            .map_err(ApiError)
    }
    .await;
    json_answer(r)
}
