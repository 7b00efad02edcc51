//! The configuration under quorum on the approver API (issue #35): `GET /v1/config`
//! (any approver: the version in force, its files and hash, what `config pull`
//! writes) and `POST /v1/config/proposals` (an administrator: the next version,
//! which becomes a `gate.config` proposal the administrators then approve with
//! signer-cli like any other). Both are signed reads: the agent has no key, so it
//! can neither read the files through here nor flood the administrators.

use super::{answer, ApiError, ApiState, Reader};
use crate::service::ServiceError;
use approval_core::api::{ConfigProposed, ProposeConfig};
use approval_core::governance::MAX_BUNDLE_BYTES;
use approval_core::Code;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

/// The routes, merged into the approver API's router.
pub(super) fn routes() -> Router<ApiState> {
    Router::new().route("/v1/config", get(current)).route(
        "/v1/config/proposals",
        post(propose).layer(axum::extract::DefaultBodyLimit::max(
            MAX_BUNDLE_BYTES * 2 + 64 * 1024,
        )),
    )
}

/// `GET /v1/config`: the version in force (a `ConfigHead`).
async fn current(State(st): State<ApiState>, Reader(_who): Reader) -> Result<Response, ApiError> {
    match &st.svc.config().governed {
        Some(g) => Ok(answer(&g.head).into_response()),
        None => Err(ApiError(ServiceError::new(
            Code::BadRequest,
            "the configuration is not under quorum: start the server once with --root root.toml",
        ))),
    }
}

/// `POST /v1/config/proposals?bundle_sha256=H`: `{"bundle": {...}}` from an
/// administrator, whose signed path names the bundle's hash.
async fn propose(
    State(st): State<ApiState>,
    Reader(who): Reader,
    // The bundle's hash rides in the query, inside what the read signature covers, so
    // a seen `Authorization` header cannot carry another bundle.
    axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let bad = |m: String| ApiError(ServiceError::new(Code::BadRequest, m));
    let req: ProposeConfig = serde_json::from_slice(&body).map_err(|e| {
        bad(format!(
            "the body is not {{\"bundle\": {{root, keyring, agents?, policies}}}}: {e}"
        ))
    })?;
    let named = query.get("bundle_sha256").cloned().unwrap_or_default();
    let actual = req.bundle.sha256();
    if named != actual.to_string() {
        return Err(bad(format!(
            "the signed path must name the body's bundle: ?bundle_sha256={actual} (it named {named:?}); approval-server config propose does this"
        )));
    }
    let (rec, change, policy) = st.svc.propose_config(&who, req.bundle).await?;
    let out = ConfigProposed {
        proposal_id: rec.id().clone(),
        preview_sha256: rec.preview_sha256,
        from_version: change.from_version,
        to_version: change.to_version,
        emergency_removal: change.emergency_removal,
        diff: change.diff,
        need: policy.spec().quorum,
        approvers: policy.spec().approvers.clone(),
    };
    Ok((StatusCode::CREATED, answer(&out)).into_response())
}
