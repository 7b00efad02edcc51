//! The HTTP front: `/mcp` (Streamable HTTP via rmcp) and the approver API, with
//! agent authentication, DNS-rebinding protection and the exact-JSON check.
//!
//! rmcp parses JSON-RPC with `serde_json`, which silently keeps the last of two
//! duplicate keys and rounds numbers. The payload is the thing humans sign, so
//! before rmcp sees a request we read the raw body with `approval-core`'s exact
//! parser: a payload that cannot be carried exactly gets an `INVALID_PAYLOAD` tool
//! result naming the JSON pointer; a duplicate key anywhere else in the request is
//! a JSON-RPC error (two readers must never see two different requests).
//!
//! A plain tool call of a revision before 2026-07-28 then skips rmcp's per-request
//! service and goes straight to the handler ([`direct`]); everything else is
//! rmcp's to serve.

mod direct;
mod listen;
pub mod scrape;

use crate::approver_api;
use crate::body_budget::BODY_READ_TIMEOUT;
use crate::mcp::{self, McpHandler};
use crate::service::Service;
use approval_core::ids::AgentName;
use approval_core::json::{self, Problem};
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;

/// Largest MCP request body: the largest payload a policy may allow, plus room.
pub const MAX_MCP_BODY: usize = 5 * 1024 * 1024;

/// How `/mcp` is exposed.
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// `Host` values accepted (names or `host:port`).
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted; empty means any request carrying `Origin` is refused.
    pub allowed_origins: Vec<String>,
    /// The time a client has to send a whole request body ([`BODY_READ_TIMEOUT`]).
    pub body_read_timeout: std::time::Duration,
    /// Answer plain legacy tool calls without rmcp's per-request service
    /// (see [`direct`]). Off only in the tests that compare the two paths.
    pub direct_calls: bool,
}

impl McpOptions {
    /// Accepts the server's own loopback origins on the port it listens on
    /// (`SCHEME://localhost:PORT`, `SCHEME://127.0.0.1:PORT`, `SCHEME://[::1]:PORT`, with
    /// `https` when the listener serves TLS): a page
    /// on another port or host is still refused, which is what stops DNS rebinding.
    pub fn allow_own_origins(mut self, scheme: &str, port: u16) -> Self {
        for host in ["localhost", "127.0.0.1", "[::1]"] {
            self.allowed_origins
                .push(format!("{scheme}://{host}:{port}"));
        }
        self
    }
}

impl Default for McpOptions {
    fn default() -> Self {
        Self {
            allowed_hosts: vec![
                "localhost".into(),
                "127.0.0.1".into(),
                "::1".into(),
                "[::1]".into(),
            ],
            allowed_origins: vec![],
            body_read_timeout: BODY_READ_TIMEOUT,
            direct_calls: true,
        }
    }
}

/// What `/mcp`'s one guard needs: who may call, and the parse budget.
#[derive(Clone)]
struct McpState {
    svc: Arc<Service>,
    budget: crate::body_budget::ParseBudget,
    body_read_timeout: std::time::Duration,
    direct: Option<direct::DirectCalls>,
    doors: listen::Doors,
}

/// The `/mcp` route with its guards.
pub fn mcp_router(svc: Arc<Service>, opts: &McpOptions) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_allowed_hosts(opts.allowed_hosts.clone())
        .with_allowed_origins(opts.allowed_origins.clone())
        .enforce_origin_validation()
        .with_max_request_body_bytes(MAX_MCP_BODY)
        .with_sse_keep_alive(None);
    let handler_svc = svc.clone();
    let service = StreamableHttpService::new(
        move || Ok(McpHandler::new(handler_svc.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    // Called by reference: mounting the service with `nest_service` made axum clone
    // it (and its host and origin lists) for every request.
    let service = Arc::new(service);
    let mcp = move |req: Request| {
        let service = service.clone();
        async move { service.handle(req).await.map(Body::new) }
    };
    let state = McpState {
        svc,
        budget: crate::body_budget::ParseBudget::default(),
        body_read_timeout: opts.body_read_timeout,
        direct: opts
            .direct_calls
            .then(|| direct::DirectCalls::new(&opts.allowed_hosts)),
        doors: listen::Doors::new(&opts.allowed_hosts, &opts.allowed_origins),
    };
    // One layer for the three checks (they were three axum layers, each cloning the
    // route and boxing a future on every request).
    Router::new()
        .route("/mcp", axum::routing::any(mcp))
        .layer(middleware::from_fn_with_state(state, guard))
}

/// Every `/mcp` request: the agent is identified first ([`authenticate`]); then a
/// POST's body is read under the parse budget and the body deadline, and checked
/// exactly ([`exact_json`]) before rmcp sees it.
async fn guard(State(st): State<McpState>, mut req: Request, next: Next) -> Response {
    match authenticate(&st.svc, &req) {
        Ok(agent) => {
            req.extensions_mut().insert(agent);
        }
        Err(refusal) => return refusal,
    }
    exact_json(&st, req, next).await
}

/// Everything on one listener.
pub fn app(svc: Arc<Service>, opts: &McpOptions) -> Router {
    mcp_router(svc.clone(), opts).merge(approver_routes(svc))
}

/// The humans' side: the approver API and the gate's approver and enrolment pages.
pub fn approver_routes(svc: Arc<Service>) -> Router {
    approver_api::router(svc.clone()).merge(crate::approver_page::router(svc))
}

fn rpc_error(status: StatusCode, code: i64, message: String) -> Response {
    let body =
        json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": code, "message": message}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Identifies the agent: a bearer token from the agents file, or, without one,
/// a loopback peer as `local`.
#[allow(clippy::result_large_err)] // the refusal is the response itself
fn authenticate(svc: &Service, req: &Request) -> Result<AgentName, Response> {
    let config = svc.config();
    // Admission already found the token's agent (crate::capacity): one hash a request.
    if let (Some(_), Some(a)) = (
        &config.agents,
        req.extensions().get::<crate::capacity::AdmittedAgent>(),
    ) {
        return Ok(a.0.clone());
    }
    match &config.agents {
        Some(agents) => {
            let token = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            match token.and_then(|t| agents.authenticate(t)) {
                Some(a) => Ok(a),
                None => {
                    let mut r = rpc_error(
                        StatusCode::UNAUTHORIZED,
                        -32001,
                        "missing or unknown agent token: send `Authorization: Bearer <token>` from `approval-server agent add NAME`".into(),
                    );
                    r.headers_mut()
                        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                    Err(r)
                }
            }
        }
        None => {
            let loopback = req
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .is_some_and(|c| c.0.ip().is_loopback());
            if !loopback {
                return Err(rpc_error(
                    StatusCode::FORBIDDEN,
                    -32001,
                    "without an agents file only loopback clients are served: start the server with --agents FILE".into(),
                ));
            }
            AgentName::parse("local").map_err(|_| {
                rpc_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    -32603,
                    "no local identity".into(),
                )
            })
        }
    }
}

/// A JSON-RPC error for a body refused by the parse budget, with the stable code in
/// `error.data.code` (and at the start of the message).
fn budget_refusal(refusal: &crate::body_budget::Refusal) -> Response {
    use crate::body_budget::Refusal;
    let status = match refusal {
        Refusal::TooManyValues { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        Refusal::Busy => StatusCode::SERVICE_UNAVAILABLE,
    };
    let body = json!({"jsonrpc": "2.0", "id": Value::Null, "error": {
        "code": -32600,
        "message": refusal.message(),
        "data": {"code": approval_core::Code::LimitExceeded},
    }});
    let mut r = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    if matches!(refusal, Refusal::Busy) {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
    }
    r
}

/// Reads the raw body exactly before rmcp does (see the module comment), under the
/// parse budget (see `body_budget`): the share is held until the response is ready.
async fn exact_json(st: &McpState, req: Request, next: Next) -> Response {
    let budget = &st.budget;
    if req.method() != axum::http::Method::POST {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    // The body's bytes count against the parse budget from before they are read.
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(MAX_MCP_BODY)
        .min(MAX_MCP_BODY);
    let reserved = match budget.reserve(declared).await {
        Ok(p) => p,
        Err(refusal) => return budget_refusal(&refusal),
    };
    let read = tokio::time::timeout(
        st.body_read_timeout,
        axum::body::to_bytes(body, MAX_MCP_BODY),
    );
    let bytes: Bytes = match read.await {
        Ok(Ok(b)) => b,
        Ok(Err(_)) | Err(_) => {
            return rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                -32600,
                format!(
                    "request body over {MAX_MCP_BODY} bytes, or not sent within {} s",
                    st.body_read_timeout.as_secs_f64()
                ),
            );
        }
    };
    let _share = match budget.admit(&bytes, reserved).await {
        Ok(p) => p,
        Err(refusal) => return budget_refusal(&refusal),
    };
    let modern = parts
        .headers
        .get("mcp-protocol-version")
        .is_some_and(|v| v.as_bytes() >= b"2026-07-28".as_slice());
    if let Some(resp) = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|t| check_request(t, modern))
    {
        return resp;
    }
    name_the_task(&mut parts.headers, &bytes);
    if let Some(resp) = listen::answer(&st.svc, &st.doors, &parts, &bytes) {
        return resp;
    }
    if let Some(direct) = &st.direct {
        if let Some(resp) = direct.answer(&st.svc, &parts, &bytes).await {
            return resp;
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// rmcp refuses a `tasks/*` request without an `Mcp-Name` header (-32020), but the Tasks
/// extension's clients (FastMCP's among them) do not send one: the task id in the body is the
/// name. When the header is absent it is filled in from `params.taskId`; a header that is sent
/// and disagrees with the body is left for rmcp to refuse.
fn name_the_task(headers: &mut axum::http::HeaderMap, bytes: &[u8]) {
    if headers.contains_key("mcp-name") || !mcp::listen::contains(bytes, b"\"tasks/") {
        return;
    }
    #[derive(serde::Deserialize)]
    struct Probe<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
        params: Option<ProbeParams>,
    }
    #[derive(serde::Deserialize)]
    struct ProbeParams {
        #[serde(rename = "taskId")]
        task_id: Option<String>,
    }
    let Ok(probe) = serde_json::from_slice::<Probe>(bytes) else {
        return;
    };
    if !probe.method.is_some_and(|m| m.starts_with("tasks/")) {
        return;
    }
    let Some(id) = probe.params.and_then(|p| p.task_id) else {
        return;
    };
    if let Ok(v) = axum::http::HeaderValue::from_str(&id) {
        headers.insert("mcp-name", v);
    }
}

/// The deepest nesting of arrays and objects serde_json (inside rmcp) accepts.
pub const MAX_REQUEST_NESTING: usize = 127;

/// How many arrays and objects deep `v` goes. Bounded by the parser's own depth
/// limit, so the recursion is too. Allocates nothing: every request is measured,
/// and only one nested too deep pays for its pointer ([`nesting`]).
fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Finds the deepest array or object: `(levels, pointer)`. Bounded by the parser's
/// own depth limit, so the recursion is too.
fn nesting(v: &Value, ptr: &mut String, depth: usize, deepest: &mut (usize, String)) {
    let children: Box<dyn Iterator<Item = (String, &Value)>> = match v {
        Value::Array(a) => Box::new(a.iter().enumerate().map(|(i, x)| (i.to_string(), x))),
        Value::Object(m) => Box::new(m.iter().map(|(k, x)| (k.clone(), x))),
        _ => return,
    };
    if depth > deepest.0 {
        *deepest = (depth, ptr.clone());
    }
    for (key, child) in children {
        let len = ptr.len();
        *ptr = json::pointer_push(ptr, &key);
        nesting(child, ptr, depth + 1, deepest);
        ptr.truncate(len);
    }
}

/// Returns a response when the request must not reach rmcp as it is.
pub(crate) fn check_request(text: &str, modern: bool) -> Option<Response> {
    let parsed = match json::parse_collecting(text) {
        Ok(p) => p,
        Err(e) => {
            return Some(rpc_error(
                StatusCode::BAD_REQUEST,
                -32700,
                format!("parse error: {e}"),
            ))
        }
    };
    let mut parsed = parsed;
    // serde_json inside rmcp refuses a request nested more than 127 arrays/objects
    // deep; find such nesting here, so that a deep payload gets INVALID_PAYLOAD with
    // its pointer rather than an opaque transport error.
    let mut deepest = (0usize, String::new());
    if depth(&parsed.value) > MAX_REQUEST_NESTING {
        nesting(&parsed.value, &mut String::new(), 1, &mut deepest);
    }
    if deepest.0 > MAX_REQUEST_NESTING
        && !parsed
            .problems
            .iter()
            .any(|p| p.problem == Problem::TooDeep)
    {
        parsed.problems.push(json::PayloadError {
            pointer: deepest.1,
            problem: Problem::TooDeep,
        });
    }
    if parsed.problems.is_empty() {
        return None;
    }
    let v = &parsed.value;
    // Where the payload is: `approval_prepare`'s `payload`, or the whole arguments of
    // a call to any other tool (an exposed kind's arguments are its payload, issue #33).
    let payload_at = match (
        v.get("method").and_then(Value::as_str),
        v.pointer("/params/name").and_then(Value::as_str),
    ) {
        (Some("tools/call"), Some("approval_prepare")) => Some("/params/arguments/payload"),
        (Some("tools/call"), Some(name)) if mcp::ToolName::parse(name).is_none() => {
            Some("/params/arguments")
        }
        _ => None,
    };
    if let Some(at) = payload_at {
        if let Some(p) = parsed
            .problems
            .iter()
            .find(|p| p.pointer == at || p.pointer.starts_with(&format!("{at}/")))
        {
            let mut result =
                serde_json::to_value(mcp::invalid_payload_result(p, at)).unwrap_or(Value::Null);
            if !modern {
                // `resultType` exists from 2026-07-28 on; older clients get the older shape.
                if let Some(o) = result.as_object_mut() {
                    o.remove("resultType");
                }
            }
            let body = json!({"jsonrpc": "2.0", "id": v.get("id").cloned().unwrap_or(Value::Null), "result": result});
            return Some(
                (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, "application/json")],
                    body.to_string(),
                )
                    .into_response(),
            );
        }
    }
    if let Some(p) = parsed.problems.iter().find(|p| {
        matches!(
            p.problem,
            Problem::DuplicateKey(_) | Problem::LoneSurrogate | Problem::TooDeep
        )
    }) {
        return Some(rpc_error(
            StatusCode::BAD_REQUEST,
            -32600,
            format!("invalid request: {p}"),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `tools/call` whose arguments hold `levels` arrays nested in one another.
    fn call_nested(levels: usize) -> String {
        let inner = format!("{}{}", "[".repeat(levels), "]".repeat(levels));
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"approval_status","arguments":{{"x":{inner}}}}}}}"#
        )
    }

    #[test]
    fn nesting_past_what_rmcp_parses_is_refused_with_its_pointer_and_the_rest_passes() {
        // The envelope is 3 objects deep (request, params, arguments).
        assert!(check_request(&call_nested(MAX_REQUEST_NESTING - 3), false).is_none());
        let refused = check_request(&call_nested(MAX_REQUEST_NESTING - 2), false)
            .expect("one level more than rmcp parses is refused");
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        let mut deepest = (0, String::new());
        // serde_json itself refuses this depth: our own parser reads it.
        let v = json::parse_collecting(&call_nested(MAX_REQUEST_NESTING - 2))
            .expect("our parser reads one level past rmcp's")
            .value;
        nesting(&v, &mut String::new(), 1, &mut deepest);
        assert_eq!(deepest.0, MAX_REQUEST_NESTING + 1);
        assert_eq!(depth(&v), deepest.0, "the cheap count agrees with the walk");
        assert!(deepest.1.starts_with("/params/arguments/x/0/0"));
    }
}

/// A real service over a fresh store, and a listener for a router over it.
#[cfg(test)]
pub(crate) mod testing {
    use crate::config::ConfigSource;
    use crate::run::{self, ServeOptions};
    use crate::service::Service;
    use std::net::SocketAddr;
    use std::path::Path;
    use std::sync::Arc;

    /// The repository's policies, with `keys` for a keyring (`keys.example` without).
    pub async fn service(keys: Option<&Path>) -> (Arc<Service>, tempfile::TempDir) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let dir = tempfile::tempdir().unwrap();
        let source = ConfigSource {
            policies: root.join("policies"),
            keys: keys.map_or_else(|| root.join("keys.example"), Path::to_path_buf),
            agents: None,
            root: None,
            embedded_policies: None,
        };
        let listen = "127.0.0.1:0".parse().unwrap();
        let opts = ServeOptions::local(dir.path().join("data"), source, listen);
        (run::start(&opts).await.unwrap(), dir)
    }

    /// Serves `router` on a free loopback port (with the peer address, which `/mcp`'s
    /// loopback check reads).
    pub async fn listen(router: axum::Router) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(
                listener,
                router.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
        });
        addr
    }
}

#[cfg(test)]
mod body_deadline {
    use super::*;
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const DEADLINE: Duration = Duration::from_millis(400);

    /// `/mcp` of a real service over a fresh store, with a short body deadline.
    async fn serve() -> (SocketAddr, tempfile::TempDir) {
        let (svc, dir) = testing::service(None).await;
        let router = mcp_router(
            svc.clone(),
            &McpOptions {
                body_read_timeout: DEADLINE,
                ..Default::default()
            },
        )
        .merge(approver_api::router_with_deadline(svc, DEADLINE));
        (testing::listen(router).await, dir)
    }

    /// Sends a POST announcing `body.len()` bytes, then the body one byte every
    /// `every`; returns the status line and when it came.
    async fn dribble(addr: SocketAddr, body: &[u8], every: Duration) -> (String, Duration) {
        dribble_to(addr, "/mcp", body, every).await
    }

    /// [`dribble`] to another path.
    async fn dribble_to(
        addr: SocketAddr,
        path: &str,
        body: &[u8],
        every: Duration,
    ) -> (String, Duration) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await.unwrap();
        let started = Instant::now();
        let (mut r, mut w) = s.into_split();
        let body = body.to_vec();
        let writer = tokio::spawn(async move {
            for b in body {
                if w.write_all(&[b]).await.is_err() {
                    break;
                }
                tokio::time::sleep(every).await;
            }
        });
        let mut buf = vec![0u8; 256];
        let n = r.read(&mut buf).await.unwrap();
        let took = started.elapsed();
        writer.abort();
        let text = String::from_utf8_lossy(&buf[..n]).to_string();
        (text.lines().next().unwrap_or_default().to_owned(), took)
    }

    /// The attack: keep a body coming, a byte at a time, each well inside any
    /// pause limit, so that it holds its share of the parse budget indefinitely. A
    /// deadline for the whole body ends it; a quick body on the same server is
    /// answered as usual.
    #[tokio::test]
    async fn a_body_dribbled_byte_by_byte_is_cut_off_at_the_deadline() {
        let (addr, _dir) = serve().await;
        let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"approval_status","arguments":{"id":"nope"}}}"#;
        // 100 ms a byte: the whole body would take ~11 s.
        let (status, took) = dribble(addr, call, Duration::from_millis(100)).await;
        assert!(status.contains(" 413 "), "{status}");
        assert!(took >= DEADLINE, "cut before the deadline: {took:?}");
        assert!(
            took < DEADLINE * 5,
            "not cut near the deadline ({DEADLINE:?}): {took:?}"
        );
        let (status, _) = dribble(addr, call, Duration::ZERO).await;
        assert!(status.contains(" 200 "), "{status}");
    }

    /// The same attack on the approver API: a decision body sent a byte at a time
    /// holds a connection, one of the listener's slots, that approvers need. It is cut
    /// at the deadline; an oversized one is refused; a quick one reaches the checks.
    #[tokio::test]
    async fn a_decision_body_dribbled_byte_by_byte_is_cut_off_at_the_deadline() {
        let (addr, _dir) = serve().await;
        let path = "/v1/proposals/nope/decisions";
        let body = br#"{"decision":"approve","approver":"alice","signature":"AAAA"}"#;
        let (status, took) = dribble_to(addr, path, body, Duration::from_millis(100)).await;
        assert!(status.contains(" 413 "), "{status}");
        assert!(took >= DEADLINE, "cut before the deadline: {took:?}");
        assert!(
            took < DEADLINE * 5,
            "not cut near the deadline ({DEADLINE:?}): {took:?}"
        );
        let big = vec![b' '; approver_api::MAX_DECISION_BODY + 1];
        let (status, _) = dribble_to(addr, path, &big, Duration::ZERO).await;
        assert!(status.contains(" 413 "), "{status}");
        let (status, _) = dribble_to(addr, path, body, Duration::ZERO).await;
        assert!(
            !status.contains(" 413 ") && status.contains(" 4"),
            "a quick body is read and refused on its merits: {status}"
        );
    }
}
