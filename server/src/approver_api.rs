//! The humans' side: the approver HTTP API under `/v1/` (see docs/approver-api.md).
//!
//! Reads are signed (`Authorization: Approval <name> <unix> <sig>`), decisions
//! are signed in their body, so even a client that can reach every endpoint can
//! neither read what it may not see nor forge an approval. Errors are JSON
//! `{code, message}` with a fitting HTTP status.

use crate::record::ProposalRecord;
use crate::service::{Service, ServiceError};
use approval_core::message::{ReadAuth, ReadAuthError, SignedDecision};
use approval_core::quorum::QuorumOutcome;
use approval_core::status::Status;
use approval_core::{ApproverName, Code};
use axum::body::Bytes;
use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Largest decision body accepted.
pub const MAX_DECISION_BODY: usize = 16 * 1024;
/// Concurrent `/v1/events` streams per approver.
pub const MAX_WATCHERS_PER_APPROVER: usize = 4;

/// An API error: a code, a message, and the HTTP status that fits.
#[derive(Debug)]
pub struct ApiError(pub ServiceError);

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        ApiError(e)
    }
}

fn http_status(code: Code) -> StatusCode {
    match code {
        Code::BadRequest | Code::InvalidPayload | Code::InvalidArguments => StatusCode::BAD_REQUEST,
        Code::Unauthorized => StatusCode::UNAUTHORIZED,
        Code::InvalidSignature => StatusCode::FORBIDDEN,
        Code::UnknownProposal | Code::UnknownKind => StatusCode::NOT_FOUND,
        Code::LimitExceeded => StatusCode::TOO_MANY_REQUESTS,
        Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::CONFLICT,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let e = self.0;
        let mut body = json!({"code": e.code, "message": e.message});
        if let Some(s) = e.status {
            body["status"] = json!(s);
        }
        (http_status(e.code), Json(body)).into_response()
    }
}

/// Shared state of the approver API.
#[derive(Clone)]
pub struct ApiState {
    svc: Arc<Service>,
    watchers: Arc<Mutex<HashMap<ApproverName, usize>>>,
}

/// The `/v1` routes and `/healthz`.
pub fn router(svc: Arc<Service>) -> Router {
    let state = ApiState {
        svc,
        watchers: Arc::default(),
    };
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/proposals", get(list))
        .route("/v1/proposals/{id}", get(show))
        .route("/v1/proposals/{id}/decisions", post(decide))
        .route("/v1/proposals/{id}/receipt", get(receipt))
        .route("/v1/events", get(events))
        .fallback(unknown_endpoint)
        .layer(axum::middleware::from_fn_with_state(state.clone(), settle))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_DECISION_BODY))
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            crate::http::BODY_READ_TIMEOUT,
        ))
        .with_state(state)
}

/// The approver a signed read comes from: extracting it verifies the
/// `Authorization: Approval ...` header over the method and the exact path and query,
/// against the keyring in force and the server's clock.
pub struct Reader(pub ApproverName);

impl axum::extract::FromRequestParts<ApiState> for Reader {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        st: &ApiState,
    ) -> Result<Self, ApiError> {
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        // The path as the client sent it, even when this router is nested.
        let uri = parts
            .extensions
            .get::<OriginalUri>()
            .map(|u| &u.0)
            .unwrap_or(&parts.uri);
        let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let unauthorized =
            |e: ReadAuthError| ApiError(ServiceError::new(Code::Unauthorized, e.to_string()));
        let auth = ReadAuth::parse(header).map_err(unauthorized)?;
        // Meter failed checks per claimed approver before spending a verification.
        let budget = st.svc.bad_signatures();
        budget
            .check(&auth.approver, st.svc.now())
            .map_err(ApiError)?;
        auth.verify(
            &st.svc.config().keyring,
            parts.method.as_str(),
            path,
            st.svc.now(),
        )
        .map(Reader)
        .map_err(|e| {
            if e == ReadAuthError::BadSignature {
                budget.failed(&auth.approver, st.svc.now());
            }
            unauthorized(e)
        })
    }
}

/// The JSON view of a proposal (docs/approver-api.md, `ProposalView`).
pub fn view(svc: &Service, rec: &ProposalRecord) -> Result<Value, ServiceError> {
    let now = svc.now();
    let life = rec.lifecycle.at(now);
    let (tally, policy) = svc.tally(rec)?;
    let (have, need, missing) = match &tally.outcome {
        QuorumOutcome::Pending {
            have,
            need,
            missing_groups,
        } => (*have, *need, json!(missing_groups)),
        _ => (
            tally.approvals.len() as u32,
            policy.spec().quorum,
            json!([]),
        ),
    };
    Ok(json!({
        "proposal_id": rec.id(),
        "status": life.status,
        "preview": rec.preview.to_value(),
        "preview_sha256": rec.preview_sha256,
        "policy": policy.canonical_json(),
        "quorum": {
            "have": have, "need": need, "missing_groups": missing,
            "approvers": tally.approvals, "rejections": tally.rejections,
        },
        "decisions": rec.decisions,
        "executable_until": life.executable_until,
        "result": rec.result,
    }))
}

/// Holds every answer until nothing it may report is still waiting for its fsync.
async fn settle(
    State(st): State<ApiState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let resp = next.run(req).await;
    match st.svc.settle().await {
        Ok(()) => resp,
        Err(e) => ApiError(e).into_response(),
    }
}

async fn unknown_endpoint(method: Method, uri: OriginalUri) -> ApiError {
    ApiError(ServiceError::new(
        Code::BadRequest,
        format!(
            "no endpoint {method} {}: see docs/approver-api.md",
            uri.0.path()
        ),
    ))
}

async fn healthz(State(st): State<ApiState>) -> Response {
    let server_id = st.svc.store().server_id();
    // Kinds disabled because their policy names an approver the keyring lacks: the
    // server still serves, but nothing of these kinds can be proposed.
    let disabled: Vec<Value> = st
        .svc
        .config()
        .policies
        .disabled()
        .map(|d| json!({"kind": d.kind(), "missing_approvers": d.missing(), "reason": d.reason()}))
        .collect();
    match st.svc.store().failure() {
        None => Json(json!({"status": "ok", "server_id": server_id, "disabled_kinds": disabled}))
            .into_response(),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "failed", "server_id": server_id, "why": why, "disabled_kinds": disabled})),
        )
            .into_response(),
    }
}

#[derive(Deserialize)]
struct ListQuery {
    status: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

async fn list(
    State(st): State<ApiState>,
    Reader(who): Reader,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let status = match q.status.as_deref() {
        None | Some("") | Some("all") => None,
        Some(s) => Some(Status::parse(s).ok_or_else(|| {
            ApiError(ServiceError::new(
                Code::BadRequest,
                format!(
                    "unknown status {s:?}: use one of {}",
                    Status::ALL.map(|s| s.as_str()).join(", ")
                ),
            ))
        })?),
    };
    let cursor = match q.cursor.as_deref() {
        None | Some("") => None,
        Some(c) => Some(crate::store::Cursor::parse(c).ok_or_else(|| {
            ApiError(ServiceError::new(
                Code::BadRequest,
                format!("cursor {c:?} is not one this server handed out: pass the next_cursor of the previous page unchanged, or omit it to start from the newest"),
            ))
        })?),
    };
    let (recs, next) = st.svc.list_for_approver(
        &who,
        status,
        cursor.as_ref(),
        q.limit.unwrap_or(crate::service::MAX_LIST),
    )?;
    let views = recs
        .iter()
        .map(|r| view(&st.svc, r))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Json(
        json!({ "proposals": views, "next_cursor": next.map(|c| c.to_string()) }),
    ))
}

async fn show(
    State(st): State<ApiState>,
    Reader(who): Reader,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let rec = st.svc.get_for_approver(&who, &id)?;
    Ok(Json(view(&st.svc, &rec)?))
}

async fn decide(
    state: State<ApiState>,
    id: Path<String>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    match body {
        Ok(body) => decide_body(state, id, body).await.into_response(),
        Err(e) => {
            let body = json!({
                "code": Code::LimitExceeded,
                "message": format!("cannot read the decision body ({e}): send at most {MAX_DECISION_BODY} bytes"),
            });
            (StatusCode::PAYLOAD_TOO_LARGE, Json(body)).into_response()
        }
    }
}

async fn decide_body(
    State(st): State<ApiState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let text = std::str::from_utf8(&body).map_err(|_| {
        ApiError(ServiceError::new(
            Code::BadRequest,
            "body is not UTF-8 JSON",
        ))
    })?;
    let value = approval_core::json::parse_exact(text)
        .map_err(|e| ApiError(ServiceError::new(Code::BadRequest, format!("body: {e}"))))?;
    let d: SignedDecision = serde_json::from_value(value).map_err(|e| {
        ApiError(ServiceError::new(
            Code::BadRequest,
            format!("body must be {{approver, decision, reason, signature}}: {e}"),
        ))
    })?;
    let decided = st.svc.decide(&id, d).await?;
    Ok(Json(json!({
        "recorded": !decided.already_recorded,
        "already_recorded": decided.already_recorded,
        "proposal": view(&st.svc, &decided.record)?,
    })))
}

async fn receipt(
    State(st): State<ApiState>,
    Reader(who): Reader,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let r = st.svc.receipt(&who, &id)?;
    Ok(Json(serde_json::to_value(r).unwrap_or(Value::Null)))
}

/// Releases a watcher slot when the stream ends.
struct WatchSlot {
    who: ApproverName,
    watchers: Arc<Mutex<HashMap<ApproverName, usize>>>,
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        if let Ok(mut w) = self.watchers.lock() {
            if let Some(n) = w.get_mut(&self.who) {
                *n = n.saturating_sub(1);
            }
        }
    }
}

async fn events(State(st): State<ApiState>, Reader(who): Reader) -> Result<Response, ApiError> {
    {
        let mut w = st
            .watchers
            .lock()
            .map_err(|_| ApiError(ServiceError::new(Code::Internal, "watcher table poisoned")))?;
        let n = w.entry(who.clone()).or_insert(0);
        if *n >= MAX_WATCHERS_PER_APPROVER {
            return Err(ApiError(ServiceError::new(
                Code::LimitExceeded,
                format!(
                    "{who} already has {MAX_WATCHERS_PER_APPROVER} watchers open: close one first"
                ),
            )));
        }
        *n += 1;
    }
    let slot = WatchSlot {
        who: who.clone(),
        watchers: st.watchers.clone(),
    };
    let rx = st.svc.subscribe();
    let svc = st.svc.clone();
    let stream = futures::stream::unfold(
        (rx, svc, who, slot),
        |(mut rx, svc, who, slot)| async move {
            loop {
                match rx.recv().await {
                    Ok(ev) => {
                        let Ok(rec) = svc.get_for_approver(&who, ev.id.as_str()) else {
                            continue;
                        };
                        let Ok(v) = view(&svc, &rec) else { continue };
                        if svc.settle().await.is_err() {
                            continue;
                        }
                        let event = SseEvent::default().event("proposal").data(v.to_string());
                        return Some((
                            Ok::<_, std::convert::Infallible>(event),
                            (rx, svc, who, slot),
                        ));
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        let event = SseEvent::default()
                            .event("lagged")
                            .data(json!({"missed": n}).to_string());
                        return Some((Ok(event), (rx, svc, who, slot)));
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    );
    Ok(Sse::new(stream)
        .keep_alive(
            KeepAlive::new()
                .interval(Duration::from_secs(15))
                .text("keep-alive"),
        )
        .into_response())
}
