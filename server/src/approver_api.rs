//! The humans' side: the approver HTTP API under `/v1/` (see docs/approver-api.md).
//!
//! Reads are signed (`Authorization: Approval <name> <unix> <sig>`), decisions
//! are signed in their body, so even a client that can reach every endpoint can
//! neither read what it may not see nor forge an approval. Errors are JSON
//! `{code, message}` with a fitting HTTP status.

mod config;

use crate::record::ProposalRecord;
use crate::service::{Service, ServiceError};
use crate::throttle::ConnectionId;
use approval_core::api;
use approval_core::message::{ReadAuth, ReadAuthError, SignedDecision};
use approval_core::quorum::QuorumOutcome;
use approval_core::status::Status;
use approval_core::{ApproverName, Code, Timestamp};
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
        Code::InvalidSignature | Code::SignatureNotAccepted => StatusCode::FORBIDDEN,
        Code::UnknownProposal | Code::UnknownKind => StatusCode::NOT_FOUND,
        Code::LimitExceeded => StatusCode::TOO_MANY_REQUESTS,
        Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::CONFLICT,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let e = self.0;
        let body = api::ErrorBody {
            code: e.code,
            message: e.message,
            status: e.status,
        };
        (http_status(e.code), answer(&body)).into_response()
    }
}

/// Shared state of the approver API.
#[derive(Clone)]
pub struct ApiState {
    svc: Arc<Service>,
    watchers: Arc<Mutex<HashMap<ApproverName, usize>>>,
    /// The time a decision body has to arrive whole.
    body_read_timeout: std::time::Duration,
}

/// The `/v1` routes and `/healthz`.
pub fn router(svc: Arc<Service>) -> Router {
    router_with_deadline(svc, crate::body_budget::BODY_READ_TIMEOUT)
}

/// [`router`] with another deadline for a decision body (tests use a short one).
pub fn router_with_deadline(svc: Arc<Service>, body_read_timeout: std::time::Duration) -> Router {
    let state = ApiState {
        svc,
        watchers: Arc::default(),
        body_read_timeout,
    };
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/proposals", get(list))
        .route("/v1/proposals/{id}", get(show))
        .route("/v1/proposals/{id}/decisions", post(decide))
        .route("/v1/proposals/{id}/receipt", get(receipt))
        .route("/v1/events", get(events))
        .route("/v1/audit", get(audit_log))
        .merge(config::routes())
        .fallback(unknown_endpoint)
        .layer(axum::middleware::from_fn_with_state(state.clone(), settle))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_DECISION_BODY))
        .with_state(state)
}

/// The connection a request came on, when the listener numbered it: failed
/// signatures are charged to it (see [`crate::throttle`]).
pub struct Source(pub Option<ConnectionId>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Source {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Source(parts.extensions.get::<ConnectionId>().copied()))
    }
}

/// Verifies the `Authorization: Approval ...` header of a signed read over this
/// server's id, the method and the exact path and query, against the keyring in
/// force and the server's clock. Returns who reads and until when the signature is
/// inside the server's window. A failed signature is charged to the client's
/// connection, never to the name it claims: a signature that verifies is always
/// accepted, however many forgeries in that name came before.
async fn authenticate(
    parts: &axum::http::request::Parts,
    st: &ApiState,
) -> Result<(ApproverName, Timestamp), ApiError> {
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
    let source = parts.extensions.get::<ConnectionId>().copied();
    let forgeries = st.svc.forgeries();
    forgeries.admit(source, st.svc.now()).await;
    let who = auth
        .verify(
            &st.svc.config().keyring,
            st.svc.store().server_id(),
            parts.method.as_str(),
            path,
            st.svc.now(),
        )
        .map_err(|e| {
            if e == ReadAuthError::BadSignature {
                forgeries.failed(source, st.svc.now());
                st.svc.metrics().signature_failure("signed_read");
                return ApiError(ServiceError::new(
                    Code::Unauthorized,
                    with_held_key(e.to_string(), &st.svc, &auth.approver),
                ));
            }
            unauthorized(e)
        })?;
    // A connection in the listener's approver reserve is served once this is set.
    forgeries.passed(source, st.svc.now());
    Ok((who, auth.valid_until()))
}

/// The approver a signed read comes from (see [`authenticate`]).
pub struct Reader(pub ApproverName);

impl axum::extract::FromRequestParts<ApiState> for Reader {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        st: &ApiState,
    ) -> Result<Self, ApiError> {
        authenticate(parts, st).await.map(|(who, _)| Reader(who))
    }
}

/// A signed read that opens a stream: who, and the last second of the signature's
/// window, when the stream ends.
pub struct StreamReader {
    who: ApproverName,
    valid_until: Timestamp,
    last_event_id: Option<String>,
}

impl axum::extract::FromRequestParts<ApiState> for StreamReader {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        st: &ApiState,
    ) -> Result<Self, ApiError> {
        let (who, valid_until) = authenticate(parts, st).await?;
        let last_event_id = parts
            .headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .map(|s| s.chars().take(64).collect());
        Ok(StreamReader {
            who,
            valid_until,
            last_event_id,
        })
    }
}

/// A refusal for a signature that does not verify, naming the fingerprint of the key
/// the server holds for that name, so the approver can see a key mismatch.
pub fn with_held_key(message: String, svc: &Service, who: &ApproverName) -> String {
    match svc.config().keyring.key(who) {
        Some(k) => format!(
            "{message}; {}",
            approval_core::fingerprint::held_key_note(who, k)
        ),
        None => message,
    }
}

/// An answer's JSON, through a `Value` so that keys go out sorted, as they always have.
fn answer<T: serde::Serialize>(t: &T) -> Json<Value> {
    Json(serde_json::to_value(t).unwrap_or(Value::Null))
}

/// The view of a proposal (docs/approver-api.md, `ProposalView`).
pub fn view(svc: &Service, rec: &ProposalRecord) -> Result<api::ProposalView, ServiceError> {
    let now = svc.now();
    let life = rec.lifecycle.at(now);
    let (tally, policy) = svc.tally(rec)?;
    let (have, need, missing) = match &tally.outcome {
        QuorumOutcome::Pending {
            have,
            need,
            missing_groups,
        } => (*have, *need, missing_groups.clone()),
        _ => (
            tally.approvals.len() as u32,
            policy.spec().quorum,
            Vec::new(),
        ),
    };
    Ok(api::ProposalView {
        proposal_id: rec.id().clone(),
        status: life.status,
        preview: rec.preview.to_value(),
        preview_sha256: rec.preview_sha256,
        policy: policy.canonical_json().clone(),
        quorum: api::QuorumView {
            have,
            need,
            missing_groups: missing,
            approvers: tally.approvals,
            rejections: tally.rejections,
        },
        decisions: rec
            .decisions
            .iter()
            .map(|d| api::DecisionView {
                signed: d.signed.clone(),
                at: d.at,
            })
            .collect(),
        executable_until: life.executable_until,
        // Only under a policy with a cooldown, so other views are as before.
        executable_from: life.executable_from,
        result: rec
            .result
            .as_ref()
            .map(|r| serde_json::to_value(r).unwrap_or(Value::Null)),
    })
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

/// `GET /healthz[?challenge=C]`: what the server is; with a challenge, also `proof`,
/// the identity key's signature over `approval-v1-hello\n<server_id>\n<C>`, so a client
/// can check that the server holds the key it publishes (the rest of the answer is
/// unsigned and could be replayed by anyone).
async fn healthz(
    State(st): State<ApiState>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let server_id = st.svc.store().server_id();
    // The key that signs execution attestations (`signer-cli verify --server-key`),
    // standard base64 of its 32 bytes like a keyring line; signer-cli pins it.
    let server_key = st.svc.identity().public_key();
    let proof = match q.get("challenge") {
        None => None,
        Some(c) if approval_core::attestation::valid_challenge(c) => {
            Some(st.svc.identity().prove(c).to_base64())
        }
        Some(_) => {
            return ApiError(ServiceError::new(
                Code::BadRequest,
                "challenge must be 16 to 128 characters of A-Z, a-z, 0-9, '-' or '_'",
            ))
            .into_response()
        }
    };
    // Disabled kinds: the server still serves, but nothing of these kinds can be
    // proposed. Anyone may read this: the kind and the cause, never the operator's
    // specifics (file paths, command lines, URLs), which are in the log.
    let disabled_kinds = st
        .svc
        .config()
        .policies
        .disabled()
        .map(|d| api::DisabledKindView {
            kind: d.kind().clone(),
            missing_approvers: d.missing().to_vec(),
            cause: crate::disabled_kind::cause(d).to_owned(),
            reason: crate::disabled_kind::public_reason(d),
        })
        .collect();
    let why = st.svc.store().failure();
    let body = api::Health {
        server_id: server_id.clone(),
        server_key: *server_key,
        disabled_kinds,
        notifications: crate::notify::counts(&st.svc),
        proof,
        status: match why {
            None => api::HealthStatus::Ok,
            Some(_) => api::HealthStatus::Failed,
        },
        why,
    };
    match body.status {
        api::HealthStatus::Ok => answer(&body).into_response(),
        api::HealthStatus::Failed => {
            (StatusCode::SERVICE_UNAVAILABLE, answer(&body)).into_response()
        }
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
    Ok(answer(&api::ProposalPage {
        proposals: views,
        next_cursor: next.map(|c| c.to_string()),
    }))
}

async fn show(
    State(st): State<ApiState>,
    Reader(who): Reader,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let rec = st.svc.get_for_approver(&who, &id)?;
    Ok(answer(&view(&st.svc, &rec)?))
}

/// Reads the decision body whole within the deadline: a deadline for the body, not
/// a pause between its pieces, so a body sent a byte at a time cannot hold its
/// connection (one of the listener's slots) for longer than that.
async fn decide(
    state: State<ApiState>,
    id: Path<String>,
    source: Source,
    body: axum::body::Body,
) -> Response {
    let deadline = state.body_read_timeout;
    let read = tokio::time::timeout(deadline, axum::body::to_bytes(body, MAX_DECISION_BODY));
    let why = match read.await {
        Ok(Ok(body)) => return decide_body(state, id, source, body).await.into_response(),
        Ok(Err(e)) => format!("cannot read the decision body ({e})"),
        Err(_) => format!(
            "the decision body did not arrive within {} s",
            deadline.as_secs_f64()
        ),
    };
    let body = api::ErrorBody {
        code: Code::LimitExceeded,
        message: format!("{why}: send at most {MAX_DECISION_BODY} bytes, all at once"),
        status: None,
    };
    (StatusCode::PAYLOAD_TOO_LARGE, answer(&body)).into_response()
}

async fn decide_body(
    State(st): State<ApiState>,
    Path(id): Path<String>,
    Source(source): Source,
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
            format!("body must be {{approver, decision, reason, signature}} (a key) or {{approver, decision, reason, passkey}} (a passkey): {e}"),
        ))
    })?;
    let decided = st.svc.decide(&id, d, source).await?;
    if decided.already_recorded {
        // A decision body is not a read signature: it carries no time and verifies
        // forever, so whoever captured one could replay it to read the proposal (its
        // payload and result) at any time. A repeat only learns that it was recorded.
        let rec = &decided.record;
        return Ok(answer(&api::AlreadyRecorded {
            recorded: false,
            already_recorded: true,
            proposal_id: rec.id().clone(),
            status: rec.lifecycle.at(st.svc.now()).status,
        }));
    }
    Ok(answer(&api::Decided {
        recorded: !decided.already_recorded,
        already_recorded: decided.already_recorded,
        proposal: view(&st.svc, &decided.record)?,
    }))
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

/// How often an event stream compares its signature's window with the server's clock.
pub const STREAM_CHECK: Duration = Duration::from_secs(1);

/// Why a signed event stream ended on purpose (the `reauth` event's `reason`).
fn reauth_event(reason: &str, message: &str, last_id: Option<&str>) -> SseEvent {
    let data = api::ReauthEvent {
        code: Code::Unauthorized,
        reason: reason.to_owned(),
        message: message.to_owned(),
    };
    let text = serde_json::to_value(&data)
        .unwrap_or(Value::Null)
        .to_string();
    let mut ev = SseEvent::default().event("reauth").data(text);
    if let Some(id) = last_id {
        ev = ev.id(id);
    }
    ev
}

/// One open `/v1/events` stream.
struct Watch {
    svc: Arc<Service>,
    who: ApproverName,
    rx: tokio::sync::broadcast::Receiver<crate::service::Event>,
    reloads: tokio::sync::watch::Receiver<u64>,
    tick: tokio::time::Interval,
    valid_until: Timestamp,
    /// Announcements missed before a resume, sent first.
    backlog: std::collections::VecDeque<crate::service::Event>,
    /// A resume could not be served from memory: say `lagged` first.
    resume_gap: bool,
    /// The last announcement sent (or the client's `Last-Event-ID`).
    last_seq: u64,
    last_id: Option<String>,
    done: bool,
    _slot: WatchSlot,
}

impl Watch {
    /// The view event for one announcement, if this approver may see it.
    async fn proposal(&mut self, ev: crate::service::Event) -> Option<SseEvent> {
        if ev.seq <= self.last_seq {
            return None;
        }
        self.last_seq = ev.seq;
        let id = self.svc.event_id(ev.seq);
        self.last_id = Some(id.clone());
        let rec = self.svc.get_for_approver(&self.who, ev.id.as_str()).ok()?;
        let v = view(&self.svc, &rec).ok()?;
        self.svc.settle().await.ok()?;
        Some(
            SseEvent::default()
                .event("proposal")
                .id(id)
                .data(answer(&v).0.to_string()),
        )
    }

    /// The next event, or `None` when the stream ends.
    async fn next(&mut self) -> Option<SseEvent> {
        if self.done {
            return None;
        }
        if self.resume_gap {
            self.resume_gap = false;
            return Some(
                SseEvent::default()
                    .event("lagged")
                    .data(json!({"missed": null, "resume": "Last-Event-ID is not known any more: read the lists again"}).to_string()),
            );
        }
        while let Some(ev) = self.backlog.pop_front() {
            if let Some(e) = self.proposal(ev).await {
                return Some(e);
            }
        }
        loop {
            tokio::select! {
                r = self.rx.recv() => match r {
                    Ok(ev) => {
                        if let Some(e) = self.proposal(ev).await {
                            return Some(e);
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        return Some(SseEvent::default()
                            .event("lagged")
                            .data(json!({"missed": n}).to_string()));
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                },
                changed = self.reloads.changed() => {
                    self.done = true;
                    if changed.is_err() {
                        return None;
                    }
                    return Some(reauth_event(
                        "keyring_reload",
                        "the server reloaded its keyring: sign a new read of /v1/events and reconnect with Last-Event-ID",
                        self.last_id.as_deref(),
                    ));
                }
                _ = self.tick.tick() => {
                    if self.svc.now() > self.valid_until {
                        self.done = true;
                        return Some(reauth_event(
                            "signature_window",
                            &format!(
                                "this stream's read signature left the server's ±{} s window at {}: sign a new read of /v1/events and reconnect with Last-Event-ID",
                                approval_core::message::READ_WINDOW_SECS, self.valid_until
                            ),
                            self.last_id.as_deref(),
                        ));
                    }
                }
            }
        }
    }
}

/// `GET /v1/events`: a stream of proposal views, each with an SSE id. It ends (after a
/// `reauth` event) when its read signature leaves the server's window and on every
/// keyring reload: a signature must not outlive the window or the key it was checked
/// with. The client signs again and reconnects with `Last-Event-ID`; the changes it
/// missed are sent first (or `lagged` when the server no longer knows them).
async fn events(State(st): State<ApiState>, r: StreamReader) -> Result<Response, ApiError> {
    let who = r.who;
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
    // Subscribe before reading the backlog, so nothing falls between the two;
    // announcements seen twice are skipped by their number.
    let rx = st.svc.subscribe();
    let mut reloads = st.svc.reloads();
    reloads.mark_unchanged();
    let (backlog, resume_gap, last_seq) = match &r.last_event_id {
        None => (Default::default(), false, 0),
        Some(id) => match st.svc.events_after(id) {
            Some(evs) => {
                // `events_after` knew the id, so its number parses.
                let last = id
                    .rsplit_once('-')
                    .and_then(|(_, n)| n.parse().ok())
                    .unwrap_or(0);
                (evs.into(), false, last)
            }
            None => (Default::default(), true, 0),
        },
    };
    let mut tick = tokio::time::interval(STREAM_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let watch = Watch {
        svc: st.svc.clone(),
        who,
        rx,
        reloads,
        tick,
        valid_until: r.valid_until,
        backlog,
        resume_gap,
        last_seq,
        last_id: r.last_event_id,
        done: false,
        _slot: slot,
    };
    let stream = futures::stream::unfold(watch, |mut w| async move {
        let ev = w.next().await?;
        Some((Ok::<_, std::convert::Infallible>(ev), w))
    });
    Ok(Sse::new(stream)
        .keep_alive(
            KeepAlive::new()
                .interval(Duration::from_secs(15))
                .text("keep-alive"),
        )
        .into_response())
}

/// `GET /v1/audit` (signed read, any approver in the keyring): the whole audit log
/// as JSON lines, exactly as `approval-server audit export` writes it, with the
/// store's head in `Audit-Head: <seq> <sha256>` (`Audit-Head: none` when empty),
/// so an operator can verify the chain of a running server (the offline form
/// needs the store, which the running server locks). The log holds ids, kinds,
/// agents, approvers, times and outcomes, never payloads or summaries.
async fn audit_log(State(st): State<ApiState>, Reader(_who): Reader) -> Result<Response, ApiError> {
    // One audit read at a time: it holds the whole log in memory, and any approver
    // may ask for it.
    static ONE_AT_A_TIME: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
    let _permit = ONE_AT_A_TIME.try_acquire().map_err(|_| {
        ApiError(ServiceError::new(
            Code::LimitExceeded,
            "another audit read is running: try again when it has finished",
        ))
    })?;
    let store = st.svc.store().clone();
    let read = tokio::task::spawn_blocking(move || {
        let (entries, head) = store.audit()?;
        let mut body = String::new();
        for e in &entries {
            let line = serde_json::to_string(e).map_err(|e| {
                ServiceError::new(Code::Internal, format!("cannot encode an audit entry: {e}"))
            })?;
            body.push_str(&line);
            body.push('\n');
        }
        Ok::<_, ServiceError>((body, head))
    })
    .await
    .map_err(|e| {
        ApiError(ServiceError::new(
            Code::Internal,
            format!("the audit read stopped: {e}"),
        ))
    })?;
    let (body, head) = read?;
    let head = match head {
        Some((seq, hash)) => format!("{seq} {hash}"),
        None => "none".to_owned(),
    };
    Ok((
        [
            (
                axum::http::header::CONTENT_TYPE,
                "application/x-ndjson".to_owned(),
            ),
            (axum::http::HeaderName::from_static("audit-head"), head),
        ],
        body,
    )
        .into_response())
}
