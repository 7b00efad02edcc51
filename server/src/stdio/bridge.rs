//! `approval-server stdio --connect URL`: a stdio MCP server that forwards every
//! message to the running service over Streamable HTTP.
//!
//! Hosts that launch MCP servers as subprocesses get the same service, the same
//! store and the same rules as HTTP clients: the bridge holds no state of its own
//! beyond the negotiated protocol version, which it turns into the
//! `MCP-Protocol-Version` header that HTTP requires. stdout carries only protocol
//! messages; diagnostics go to stderr.

use anyhow::Context;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

#[derive(Default)]
struct Negotiated {
    version: Option<String>,
    session: Option<String>,
}

/// Runs the bridge until stdin closes and every forwarded request has its answer.
pub async fn run(url: String, token: Option<String>) -> anyhow::Result<()> {
    let client = crate::outbound::client_builder()
        .build()
        .context("cannot build the HTTP client")?;
    let state = Arc::new(Mutex::new(Negotiated::default()));
    let (tx, mut rx) = mpsc::channel::<String>(256);
    let writer = tokio::spawn(async move {
        let mut out = super::streams::stdout();
        while let Some(line) = rx.recv().await {
            if out.write_all(line.as_bytes()).await.is_err() || out.write_all(b"\n").await.is_err()
            {
                break;
            }
            let _ = out.flush().await;
        }
    });
    let mut lines = BufReader::new(super::streams::stdin()).lines();
    let mut inflight = tokio::task::JoinSet::new();
    while let Some(line) = lines.next_line().await.context("cannot read stdin")? {
        if line.trim().is_empty() {
            continue;
        }
        let (client, url, token, state, tx) = (
            client.clone(),
            url.clone(),
            token.clone(),
            state.clone(),
            tx.clone(),
        );
        // An initialize must be answered before later messages use its version.
        let is_init = serde_json::from_str::<Value>(&line)
            .ok()
            .and_then(|v| v.get("method").cloned())
            == Some(json!("initialize"));
        let task = async move { forward(&client, &url, token.as_deref(), &state, &tx, line).await };
        if is_init {
            task.await;
        } else {
            inflight.spawn(task);
        }
    }
    while inflight.join_next().await.is_some() {}
    drop(tx);
    let _ = writer.await;
    Ok(())
}

/// What the bridge says when the service cannot be reached: a refused connection is
/// named as such (is the service running?), other failures keep the cause.
pub fn unreachable(url: &str, e: &reqwest::Error) -> String {
    let mut root: &dyn std::error::Error = e;
    while let Some(s) = root.source() {
        root = s;
    }
    let refused = e.is_connect()
        && root
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
    if refused {
        format!(
            "connection refused at {url}: is the service running? Start it with `approval-server serve` (or `demo`), or pass its MCP endpoint to --connect"
        )
    } else if e.is_connect() {
        format!("cannot connect to {url}: {root}: is the service running, and is this its MCP endpoint?")
    } else {
        format!("approval service unreachable at {url}: {root}")
    }
}

/// What the bridge says when the service wants an agent token (HTTP 401): for
/// stdio the fix is the bridge's `--token` flag or `APPROVAL_AGENT_TOKEN`.
pub fn token_refused(token_given: bool) -> String {
    if token_given {
        "the approval service does not know this agent token: check the token given with --token or APPROVAL_AGENT_TOKEN (`approval-server agent add NAME` makes one; the server loads its agents file at start and on SIGHUP)".into()
    } else {
        "the approval service needs an agent token: start the bridge with `approval-server stdio --connect URL --token agt_...` or set APPROVAL_AGENT_TOKEN (`approval-server agent add NAME` prints a token)".into()
    }
}

/// A header value as the 2026-07-28 transport writes it: plain when it can be,
/// else `=?base64?...?=`.
fn header_value(v: &str) -> String {
    use base64::Engine;
    let plain = !v.is_empty()
        && v.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !v.starts_with(' ')
        && !v.ends_with(' ')
        && !v.starts_with("=?base64?");
    if plain {
        v.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(v)
        )
    }
}

fn error_for(msg: &Value, code: i64, message: String) -> Option<String> {
    let id = msg.get("id")?.clone();
    Some(
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
            .to_string(),
    )
}

async fn forward(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    state: &Mutex<Negotiated>,
    tx: &mpsc::Sender<String>,
    line: String,
) {
    let msg: Value = match serde_json::from_str(&line) {
        Ok(v) => v,
        Err(e) => {
            let _ = tx
                .send(json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": format!("parse error: {e}")}}).to_string())
                .await;
            return;
        }
    };
    let per_request = msg
        .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let (version, session) = match state.lock() {
        Ok(s) => (per_request.or_else(|| s.version.clone()), s.session.clone()),
        Err(_) => (per_request, None),
    };
    let mut req = client
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(line);
    if let Some(v) = &version {
        req = req.header("MCP-Protocol-Version", v);
    }
    // Routing headers of the 2026-07-28 transport (harmless for older revisions).
    if let Some(method) = msg.get("method").and_then(Value::as_str) {
        req = req.header("Mcp-Method", method);
        let key = match method {
            "tools/call" | "prompts/get" => Some("name"),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => Some("uri"),
            _ => None,
        };
        if let Some(name) = key
            .and_then(|k| msg.pointer(&format!("/params/{k}")))
            .and_then(Value::as_str)
        {
            req = req.header("Mcp-Name", header_value(name));
        }
    }
    if let Some(s) = &session {
        req = req.header("Mcp-Session-Id", s);
    }
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            if let Some(m) = error_for(&msg, -32603, unreachable(url, &e)) {
                let _ = tx.send(m).await;
            }
            return;
        }
    };
    if let Some(s) = resp
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    {
        if let Ok(mut st) = state.lock() {
            st.session = Some(s.to_owned());
        }
    }
    let status = resp.status();
    let is_sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"));
    let body = match resp.text().await {
        Ok(b) => b,
        Err(e) => {
            if let Some(m) = error_for(&msg, -32603, format!("broken answer from {url}: {e}")) {
                let _ = tx.send(m).await;
            }
            return;
        }
    };
    let mut messages = Vec::new();
    if is_sse {
        for event in body.split("\n\n") {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if !data.is_empty() {
                messages.push(data.join("\n"));
            }
        }
    } else if !body.trim().is_empty() {
        messages.push(body.trim().to_owned());
    }
    if messages.is_empty() && !status.is_success() {
        if let Some(m) = error_for(
            &msg,
            -32603,
            format!("HTTP {status} from the approval service"),
        ) {
            messages.push(m);
        }
    }
    let initialize = msg.get("method") == Some(&json!("initialize"));
    for m in messages {
        // The common case passes through as sent: a successful answer that is one line
        // of JSON with its id needs no rewriting, and `IgnoredAny` checks it is JSON
        // without building a value.
        if status.is_success()
            && !initialize
            && !m.contains('\n')
            && !m.contains("\"id\":null")
            && serde_json::from_str::<serde::de::IgnoredAny>(&m).is_ok()
        {
            let _ = tx.send(m).await;
            continue;
        }
        match serde_json::from_str::<Value>(&m) {
            Ok(mut v) => {
                // An HTTP-level refusal (401, 403) has no request id; give it ours so the
                // host can match the answer to its request.
                if v.get("id") == Some(&Value::Null) && v.get("error").is_some() {
                    if let Some(id) = msg.get("id") {
                        v["id"] = id.clone();
                    }
                    if status == reqwest::StatusCode::UNAUTHORIZED {
                        v["error"]["message"] = json!(token_refused(token.is_some()));
                    }
                }
                if initialize {
                    if let Some(pv) = v.pointer("/result/protocolVersion").and_then(Value::as_str) {
                        if let Ok(mut st) = state.lock() {
                            st.version = Some(pv.to_owned());
                        }
                    }
                }
                let _ = tx.send(v.to_string()).await;
            }
            Err(_) => {
                if let Some(e) = error_for(
                    &msg,
                    -32603,
                    format!(
                        "HTTP {status}: not JSON-RPC: {}",
                        m.chars().take(200).collect::<String>()
                    ),
                ) {
                    let _ = tx.send(e).await;
                }
            }
        }
    }
}
