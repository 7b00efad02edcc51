//! Clients of the service: MCP tools over Streamable HTTP, decisions and signed
//! reads on the approver API, and MCP through `approval-server stdio`.
//!
//! Responses are decoded into small typed structs that skip every field the
//! bench does not need: the generator shares the CPU with the server, so it
//! should spend as little as it can per call.

use anyhow::{anyhow, bail, Context, Result};
use approval_core::keyring::SecretKey;
use approval_core::message::{sign_read, Decision, SignedDecision};
use approval_core::Sha256Hex;
use serde::Deserialize;
use serde_json::{json, Value};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The MCP revision the bench speaks.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// Longest any single request may take before it counts as failed.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The structured content of a tool result (only what the bench reads).
#[derive(Debug, Deserialize, Default)]
pub struct ToolOut {
    /// Stable code.
    pub code: String,
    /// Proposal id (prepare).
    #[serde(default)]
    pub proposal_id: Option<String>,
    /// Preview hash (prepare).
    #[serde(default)]
    pub preview_sha256: Option<String>,
    /// Message, for error reports.
    #[serde(default)]
    pub message: Option<String>,
}

#[derive(Deserialize)]
struct CallResult {
    #[serde(rename = "isError", default)]
    is_error: bool,
    #[serde(rename = "structuredContent")]
    structured: Option<ToolOut>,
}

#[derive(Deserialize)]
struct RpcResponse {
    #[serde(default)]
    result: Option<CallResult>,
    #[serde(default)]
    error: Option<Value>,
}

/// A tool result: the structured content and whether it was a refusal.
#[derive(Debug)]
pub struct Called {
    /// `isError`.
    pub is_error: bool,
    /// `structuredContent`.
    pub out: ToolOut,
}

impl Called {
    /// Fails unless the call succeeded with one of `codes`.
    pub fn expect(self, codes: &[&str]) -> Result<ToolOut> {
        if self.is_error || !codes.contains(&self.out.code.as_str()) {
            bail!(
                "{}{}: {}",
                if self.is_error { "refused " } else { "" },
                self.out.code,
                self.out.message.as_deref().unwrap_or("")
            );
        }
        Ok(self.out)
    }
}

/// Decodes a JSON-RPC answer to `tools/call` (plain JSON, or SSE `data:` lines).
pub fn decode_call(body: &str) -> Result<Called> {
    let json = if body.trim_start().starts_with('{') {
        body.trim()
    } else {
        body.lines()
            .find_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .ok_or_else(|| anyhow!("answer is neither JSON nor SSE: {}", excerpt(body)))?
    };
    let r: RpcResponse = serde_json::from_str(json)
        .map_err(|e| anyhow!("bad JSON-RPC answer ({e}): {}", excerpt(json)))?;
    if let Some(e) = r.error {
        bail!("JSON-RPC error: {e}");
    }
    let res = r
        .result
        .ok_or_else(|| anyhow!("no result: {}", excerpt(json)))?;
    let out = res
        .structured
        .ok_or_else(|| anyhow!("no structuredContent: {}", excerpt(json)))?;
    Ok(Called {
        is_error: res.is_error,
        out,
    })
}

fn excerpt(s: &str) -> String {
    s.chars().take(300).collect()
}

/// The numeric id of a JSON-RPC answer line, if it has one.
fn answer_id(line: &str) -> Option<u64> {
    #[derive(Deserialize)]
    struct Id {
        id: Option<u64>,
    }
    serde_json::from_str::<Id>(line).ok()?.id
}

/// Fails on a JSON-RPC error or a tool result with `isError: true`.
pub fn check_plain(line: &str) -> Result<()> {
    #[derive(Deserialize)]
    struct Res {
        #[serde(rename = "isError", default)]
        is_error: bool,
    }
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        result: Option<Res>,
        #[serde(default)]
        error: Option<Value>,
    }
    let a: Answer = serde_json::from_str(line)
        .map_err(|e| anyhow!("bad JSON-RPC answer ({e}): {}", excerpt(line)))?;
    match (a.error, a.result) {
        (Some(e), _) => bail!("JSON-RPC error: {e}"),
        (None, Some(r)) if r.is_error => bail!("tool refused: {}", excerpt(line)),
        (None, Some(_)) => Ok(()),
        (None, None) => bail!("no result: {}", excerpt(line)),
    }
}

/// One shared HTTP client (a connection pool) for MCP and the approver API.
#[derive(Clone)]
pub struct Http {
    client: reqwest::Client,
    /// One `/mcp` URL per server instance; calls go round robin.
    mcp_urls: std::sync::Arc<Vec<String>>,
    /// One approver API base URL per instance, in the same order.
    api_urls: std::sync::Arc<Vec<String>>,
    /// Picks the instance of the next request.
    turn: std::sync::Arc<AtomicU64>,
    ids: std::sync::Arc<AtomicU64>,
    /// The server's id from `/healthz`, read once: signed reads cover it.
    server_id: std::sync::Arc<tokio::sync::OnceCell<approval_core::ServerId>>,
}

/// The HTTP connection pool the clients share.
pub fn pool(max_idle: usize) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(max_idle)
        .pool_idle_timeout(Duration::from_secs(
            // Dropped before the server closes an idle connection (PROTOCOL.md,
            // "Connections"), so a pause between phases never loses a request.
            approval_core::time::CLIENT_POOL_IDLE_SECS,
        ))
        .tcp_nodelay(true)
        .timeout(REQUEST_TIMEOUT)
        .no_proxy()
        .build()
        .context("cannot build the HTTP client")
}

impl Http {
    /// Clients of one server.
    pub fn new(client: reqwest::Client, mcp_url: &str, api_url: &str) -> Self {
        Self::spread(client, vec![mcp_url.to_owned()], vec![api_url.to_owned()])
    }

    /// Requests spread round robin over several instances of one deployment (one
    /// store, one `server_id`): `mcp_urls[i]` and `api_urls[i]` are instance `i`.
    pub fn spread(client: reqwest::Client, mcp_urls: Vec<String>, api_urls: Vec<String>) -> Self {
        Self {
            client,
            mcp_urls: std::sync::Arc::new(mcp_urls),
            api_urls: std::sync::Arc::new(api_urls),
            turn: std::sync::Arc::new(AtomicU64::new(0)),
            ids: std::sync::Arc::new(AtomicU64::new(1)),
            server_id: Default::default(),
        }
    }

    /// The instance for the next request: `(mcp_url, api_url)`.
    fn next(&self) -> (&str, &str) {
        let n = self.mcp_urls.len().max(1) as u64;
        let i = (self.turn.fetch_add(1, Ordering::Relaxed) % n) as usize;
        (&self.mcp_urls[i], &self.api_urls[i])
    }

    /// `tools/call`.
    pub async fn call(&self, tool: &str, args: Value) -> Result<Called> {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": tool, "arguments": args}})
        .to_string();
        let r = self
            .client
            .post(self.next().0)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", PROTOCOL_VERSION)
            .body(body)
            .send()
            .await?;
        let status = r.status();
        let text = r.text().await?;
        if !status.is_success() {
            bail!("HTTP {status}: {}", excerpt(&text));
        }
        decode_call(&text)
    }

    /// `approval_prepare` of a small note; returns (proposal id, preview hash).
    pub async fn prepare(&self, text: &str) -> Result<(String, String)> {
        let out = self
            .call(
                "approval_prepare",
                json!({"kind": crate::server::KIND, "payload": {"text": text}, "summary": "bench"}),
            )
            .await?
            .expect(&["PENDING_QUORUM"])?;
        match (out.proposal_id, out.preview_sha256) {
            (Some(p), Some(h)) => Ok((p, h)),
            _ => bail!("prepare answered without proposal_id or preview_sha256"),
        }
    }

    /// `approval_status`; returns the code.
    pub async fn status(&self, id: &str) -> Result<String> {
        let out = self
            .call("approval_status", json!({"proposal_id": id}))
            .await?
            .expect(&["PENDING_QUORUM", "QUORUM_REACHED", "SUCCEEDED", "WITHDRAWN"])?;
        Ok(out.code)
    }

    /// `approval_execute`; expects SUCCEEDED.
    pub async fn execute(&self, id: &str, hash: &str) -> Result<()> {
        self.call(
            "approval_execute",
            json!({"proposal_id": id, "preview_sha256": hash}),
        )
        .await?
        .expect(&["SUCCEEDED"])?;
        Ok(())
    }

    /// `approval_withdraw`; expects WITHDRAWN.
    pub async fn withdraw(&self, id: &str) -> Result<()> {
        self.call("approval_withdraw", json!({"proposal_id": id}))
            .await?
            .expect(&["WITHDRAWN"])?;
        Ok(())
    }

    /// Posts a signed decision (body made by [`decision_body`]); returns the proposal's status after it.
    pub async fn decide(&self, id: &str, body: String) -> Result<String> {
        #[derive(Deserialize)]
        struct P {
            status: String,
        }
        #[derive(Deserialize)]
        struct Answer {
            recorded: bool,
            proposal: P,
        }
        let r = self
            .client
            .post(format!("{}/v1/proposals/{id}/decisions", self.next().1))
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .await?;
        let status = r.status();
        let text = r.text().await?;
        if !status.is_success() {
            bail!("HTTP {status}: {}", excerpt(&text));
        }
        let a: Answer = serde_json::from_str(&text)
            .map_err(|e| anyhow!("bad decision answer ({e}): {}", excerpt(&text)))?;
        if !a.recorded {
            bail!("decision not recorded (already recorded)");
        }
        Ok(a.proposal.status)
    }

    /// `GET path_and_query` as a signed read; returns how many proposals the listing held.
    pub async fn list(&self, key: &SecretKey, path_and_query: &str) -> Result<usize> {
        #[derive(Deserialize)]
        struct Listing {
            proposals: Vec<serde::de::IgnoredAny>,
        }
        let server_id = self
            .server_id
            .get_or_try_init(|| async {
                let v: serde_json::Value = self
                    .client
                    .get(format!("{}/healthz", self.api_urls[0]))
                    .send()
                    .await?
                    .json()
                    .await?;
                let id = v["server_id"].as_str().unwrap_or_default();
                approval_core::ServerId::parse(id)
                    .map_err(|e| anyhow!("/healthz has no usable server_id ({e}): {v}"))
            })
            .await?;
        let auth = sign_read(
            &key.key,
            &key.name,
            server_id,
            unix_now(),
            "GET",
            path_and_query,
        );
        let r = self
            .client
            .get(format!("{}{path_and_query}", self.next().1))
            .header("Authorization", auth)
            .send()
            .await?;
        let status = r.status();
        let text = r.text().await?;
        if !status.is_success() {
            bail!("HTTP {status}: {}", excerpt(&text));
        }
        let l: Listing = serde_json::from_str(&text)
            .map_err(|e| anyhow!("bad listing ({e}): {}", excerpt(&text)))?;
        Ok(l.proposals.len())
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The JSON body of an approval by `key` of the proposal with this preview hash.
pub fn decision_body(key: &SecretKey, preview_sha256: &str) -> Result<String> {
    let hash = Sha256Hex::parse(preview_sha256).map_err(|e| anyhow!("bad hash: {e}"))?;
    let d = SignedDecision::sign(&key.key, key.name.clone(), Decision::Approve, &hash, "")
        .map_err(|e| anyhow!("cannot sign: {e}"))?;
    Ok(serde_json::to_string(&d)?)
}

/// A sequential MCP client over a child's stdin/stdout: newline-delimited JSON-RPC,
/// one request at a time (the bridge, the embedded `approval-server stdio`, or a peer).
pub struct StdioClient {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl StdioClient {
    /// Spawns the bridge `approval-server stdio --connect URL` and initializes.
    pub async fn start(bin: &std::path::Path, mcp_url: &str) -> Result<Self> {
        let mut cmd = Command::new(bin);
        cmd.arg("stdio").arg("--connect").arg(mcp_url);
        Self::spawn(cmd).await
    }

    /// Spawns `cmd` (stdin and stdout piped, stderr discarded), sends `initialize`
    /// and `notifications/initialized`.
    pub async fn spawn(mut cmd: Command) -> Result<Self> {
        let what = format!("{:?}", cmd.as_std().get_program());
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {what}"))?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut c = Self {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            next_id: 1,
        };
        let init = c
            .rpc(
                "initialize",
                json!({"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                       "clientInfo": {"name": "approval-bench", "version": env!("CARGO_PKG_VERSION")}}),
            )
            .await?;
        if !init.contains("\"result\"") {
            bail!("initialize through stdio answered {}", excerpt(&init));
        }
        c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string())
            .await?;
        Ok(c)
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    async fn send(&mut self, line: &str) -> Result<()> {
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.write_all(b"\n").await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// Sends one request and waits for the answer with its id; returns the raw line.
    pub async fn rpc(&mut self, method: &str, params: Value) -> Result<String> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        )
        .await?;
        // Bounded: a handful of unrelated lines at most (notifications), each within the timeout.
        for _ in 0..64 {
            let line = tokio::time::timeout(REQUEST_TIMEOUT, self.lines.next_line())
                .await
                .context("the stdio server did not answer in time")??
                .ok_or_else(|| anyhow!("the stdio server closed its stdout"))?;
            // Matched on the parsed id: peers write `"id": 5` as well as `"id":5`.
            if answer_id(&line) == Some(id) {
                return Ok(line);
            }
        }
        bail!("no answer with id {id} from the stdio server")
    }

    /// `tools/call` without decoding the result beyond its envelope: fails on a
    /// JSON-RPC error or an `isError` result. What a peer without our structured
    /// content can be checked by, at the same client cost on both sides.
    pub async fn call_plain(&mut self, tool: &str, args: &Value) -> Result<()> {
        let line = self
            .rpc("tools/call", json!({"name": tool, "arguments": args}))
            .await?;
        check_plain(&line)
    }

    /// `tools/call`.
    pub async fn call(&mut self, tool: &str, args: Value) -> Result<Called> {
        let line = self
            .rpc("tools/call", json!({"name": tool, "arguments": args}))
            .await?;
        decode_call(&line)
    }

    /// Closes stdin and waits (bounded) for the bridge to exit.
    pub async fn stop(mut self) {
        drop(self.stdin);
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_results_refusals_and_errors() {
        let ok = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"structuredContent":{"code":"PENDING_QUORUM","proposal_id":"p-1","preview_sha256":"ab","retry_allowed":true}}}"#;
        let c = decode_call(ok).unwrap();
        assert!(!c.is_error);
        assert_eq!(c.out.proposal_id.as_deref(), Some("p-1"));
        let sse = format!("event: message\ndata: {ok}\n\n");
        assert_eq!(decode_call(&sse).unwrap().out.code, "PENDING_QUORUM");
        let refused = r#"{"jsonrpc":"2.0","id":2,"result":{"isError":true,"structuredContent":{"code":"UNKNOWN_KIND","message":"no"}}}"#;
        let c = decode_call(refused).unwrap();
        assert!(c.is_error);
        assert!(c.expect(&["UNKNOWN_KIND"]).is_err());
        let err = r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"bad"}}"#;
        assert!(decode_call(err).is_err());
        assert!(check_plain(err).is_err());
        assert!(check_plain(refused).is_err());
        assert!(check_plain(ok).is_ok());
        assert!(check_plain(r#"{"jsonrpc":"2.0","id":4}"#).is_err());
        // The seed writes Python's json.dumps: spaces after the separators.
        let seed = r#"{"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "Queue is empty."}]}}"#;
        assert!(check_plain(seed).is_ok());
        assert_eq!(answer_id(seed), Some(7));
        assert_eq!(answer_id(ok), Some(1));
        assert_eq!(
            answer_id(r#"{"jsonrpc":"2.0","method":"notifications/x"}"#),
            None
        );
    }
}
