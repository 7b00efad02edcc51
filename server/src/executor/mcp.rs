//! The `mcp` executor: calls one tool of a downstream MCP server, once.
//!
//! The approved payload is the tool's `arguments`, exactly: what the approvers signed
//! is what is sent. The exchange is start (spawn the child or open the HTTP session),
//! handshake (every protocol revision rmcp knows, newest first, falling back to
//! `initialize` for a server that does not answer `server/discover`), `tools/list` (the
//! tool must be listed), then one `tools/call`. Up to the moment the call is written,
//! nothing has reached the tool: any failure is FAILED and says "nothing was sent".
//! After it, a time-out or a broken transport is OUTCOME_UNKNOWN (the tool may have
//! acted), and nothing is retried: the HTTP transport's session re-initialisation,
//! which would repeat a POST, is switched off.
//!
//! A child server gets a clean environment (`PATH` and the variables `env_from` names,
//! their values read from the gate's own environment), its stderr is read with a
//! bound and logged, and it is killed when the exchange ends or times out.

use super::{ExecReport, DETAIL_LIMIT, READ_LIMIT};
use approval_core::policy::ExecutorConfig;
use approval_core::status::Outcome;
use approval_core::Sha256Hex;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, Implementation,
    InitializeRequestParams, ProtocolVersion, Tool,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::RoleClient;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use tokio::time::Instant;

/// The largest tool result (as JSON) kept whole with the outcome; a larger one is
/// kept as an excerpt with its size and digest.
pub const OUTPUT_LIMIT: usize = READ_LIMIT;

/// Where the downstream server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Downstream {
    /// A stdio server the gate starts: program and arguments, and the child's
    /// environment as `child variable -> gate variable`.
    Command {
        /// Program and arguments.
        argv: Vec<String>,
        /// `env_from`.
        env_from: BTreeMap<String, String>,
    },
    /// A Streamable HTTP server, with headers as `header -> gate variable`.
    Url {
        /// The endpoint.
        url: String,
        /// `headers_from`.
        headers_from: BTreeMap<String, String>,
    },
}

impl Downstream {
    /// The downstream named by an `mcp` executor table.
    pub fn of(cfg: &ExecutorConfig) -> Option<Self> {
        let ExecutorConfig::Mcp {
            command,
            url,
            env_from,
            headers_from,
            ..
        } = cfg
        else {
            return None;
        };
        match (command, url) {
            (Some(argv), _) => Some(Downstream::Command {
                argv: argv.clone(),
                env_from: env_from.clone(),
            }),
            (None, Some(url)) => Some(Downstream::Url {
                url: url.clone(),
                headers_from: headers_from.clone(),
            }),
            (None, None) => None,
        }
    }

    /// A short name for logs and messages.
    pub fn describe(&self) -> String {
        match self {
            Downstream::Command { argv, .. } => argv.join(" "),
            Downstream::Url { url, .. } => url.clone(),
        }
    }
}

type Client = RunningService<RoleClient, InitializeRequestParams>;

/// Every protocol revision rmcp speaks, newest first: the downstream picks.
fn revisions() -> Vec<ProtocolVersion> {
    ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .rev()
        .cloned()
        .collect()
}

fn client_info() -> InitializeRequestParams {
    InitializeRequestParams::new(
        ClientCapabilities::default(),
        Implementation::new("approval-server", env!("CARGO_PKG_VERSION")),
    )
}

fn gate_var(var: &str, what: &str) -> Result<String, String> {
    std::env::var(var).map_err(|_| {
        format!("the gate's environment has no {var} (named by {what}): set it where approval-server runs")
    })
}

/// Starts the downstream and completes the handshake. Nothing reaches a tool here.
async fn connect(d: &Downstream, kind_label: &str) -> Result<Client, String> {
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: revisions(),
        legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
    };
    match d {
        Downstream::Command { argv, env_from } => {
            let mut cmd = tokio::process::Command::new(&argv[0]);
            cmd.args(&argv[1..]).env_clear().env(
                "PATH",
                std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
            );
            for (child, gate) in env_from {
                cmd.env(child, gate_var(gate, &format!("env_from.{child}"))?);
            }
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", argv[0]))?;
            if let Some(stderr) = stderr {
                let label = kind_label.to_owned();
                tokio::spawn(async move {
                    let bytes = super::command::read_bounded(stderr).await;
                    if !bytes.is_empty() {
                        tracing::info!(
                            downstream = %label,
                            stderr = %super::excerpt(&String::from_utf8_lossy(&bytes)),
                            "downstream MCP server's stderr (bounded)"
                        );
                    }
                });
            }
            client_info()
                .serve_with_lifecycle(transport, lifecycle)
                .await
                .map_err(|e| format!("the MCP handshake with {} failed: {e}", argv[0]))
        }
        Downstream::Url { url, headers_from } => {
            let mut headers = HashMap::new();
            for (name, gate) in headers_from {
                let value = gate_var(gate, &format!("headers_from.{name}"))?;
                let n = axum::http::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|e| format!("header {name:?}: {e}"))?;
                let v = axum::http::HeaderValue::from_str(&value)
                    .map_err(|_| format!("the value of {gate} is not a valid header value"))?;
                headers.insert(n, v);
            }
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(headers)
                .max_json_response_size(4 * 1024 * 1024)
                // A re-initialised session repeats the POST: never for a gated call.
                .reinit_on_expired_session(false);
            let transport = StreamableHttpClientTransport::from_config(config);
            client_info()
                .serve_with_lifecycle(transport, lifecycle)
                .await
                .map_err(|e| format!("cannot open an MCP session with {url}: {e}"))
        }
    }
}

/// Lists the downstream server's tools (for `payload_schema_from_tool` and
/// `import-tools`), within `timeout`.
pub async fn list_tools(d: &Downstream, timeout: Duration) -> Result<Vec<Tool>, String> {
    let work = async {
        let client = connect(d, &d.describe()).await?;
        let tools = client
            .list_all_tools()
            .await
            .map_err(|e| format!("tools/list failed: {e}"));
        let _ = client.cancel().await;
        tools
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {}s", timeout.as_secs())))
}

/// The input schema of one tool, for `payload_schema_from_tool`.
pub async fn tool_schema(d: &Downstream, tool: &str, timeout: Duration) -> Result<Value, String> {
    let tools = list_tools(d, timeout).await?;
    let found = tools
        .into_iter()
        .find(|t| t.name == tool)
        .ok_or_else(|| format!("{} lists no tool {tool:?}", d.describe()))?;
    Ok(Value::Object((*found.input_schema).clone()))
}

/// The longest a policy load waits for a downstream's `tools/list`.
pub const SCHEMA_FETCH_LIMIT: Duration = Duration::from_secs(30);

/// Fetches the `inputSchema` of every tool a policy takes its payload schema from
/// (`payload_schema_from_tool = true`), all at once, and enables the kinds whose schema
/// arrived. A kind whose downstream cannot be started, reached or does not list the
/// tool stays disabled with the reason (logged by the caller, refused at prepare as
/// KIND_DISABLED): fail closed, and the rest of the gate still serves.
pub async fn resolve_tool_schemas(mut config: crate::config::Config) -> crate::config::Config {
    let pending: Vec<_> = config
        .policies
        .awaiting_tool_schema()
        .filter_map(|p| {
            let cfg = &p.spec().executor;
            let ExecutorConfig::Mcp { timeout, .. } = cfg else {
                return None;
            };
            let limit = Duration::from_secs(timeout.get()).min(SCHEMA_FETCH_LIMIT);
            Some((
                p.kind().clone(),
                Downstream::of(cfg)?,
                cfg.mcp_tool()?.to_owned(),
                limit,
            ))
        })
        .collect();
    if pending.is_empty() {
        return config;
    }
    let answers = futures::future::join_all(
        pending
            .into_iter()
            .map(
                |(kind, d, tool, limit)| async move { (kind, tool_schema(&d, &tool, limit).await) },
            ),
    )
    .await;
    config.policies = config
        .policies
        .with_tool_schemas(answers.into_iter().collect());
    config
}

/// The tool result as stored: whole when small, else an excerpt with its size.
fn bounded_output(result: &Value) -> Value {
    let text = serde_json::to_string(result).unwrap_or_default();
    if text.len() <= OUTPUT_LIMIT {
        return result.clone();
    }
    serde_json::json!({
        "truncated": true,
        "bytes": text.len(),
        "sha256": Sha256Hex::digest(text.as_bytes()).to_string(),
        "isError": result.get("isError").cloned().unwrap_or(Value::Bool(false)),
        "excerpt": super::excerpt(&text),
    })
}

/// The text blocks of a result, joined, for the one-line detail.
fn text_of(result: &Value) -> String {
    let mut out = String::new();
    for block in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(t) = block.get("text").and_then(Value::as_str) {
            if !out.is_empty() {
                out.push_str(" | ");
            }
            out.push_str(t);
            if out.len() > DETAIL_LIMIT {
                break;
            }
        }
    }
    out
}

fn not_sent(tool: &str, why: impl std::fmt::Display) -> ExecReport {
    ExecReport::new(
        Outcome::Failed,
        format!("nothing was sent to tool {tool:?}: {why}"),
    )
}

/// Runs one approved call.
pub(super) async fn call(cfg: &ExecutorConfig, payload: &Value) -> ExecReport {
    let (Some(d), Some(tool), ExecutorConfig::Mcp { timeout, .. }) =
        (Downstream::of(cfg), cfg.mcp_tool(), cfg)
    else {
        return ExecReport::new(Outcome::Failed, "not an mcp executor: nothing was sent");
    };
    let limit = Duration::from_secs(timeout.get());
    let deadline = Instant::now() + limit;
    let Some(arguments) = payload.as_object().cloned() else {
        return not_sent(
            tool,
            "the payload is not a JSON object, and a tool's arguments must be one",
        );
    };
    let client = match tokio::time::timeout_at(deadline, connect(&d, tool)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return not_sent(tool, e),
        Err(_) => {
            return not_sent(
                tool,
                format!(
                    "{} did not complete the handshake within {}s",
                    d.describe(),
                    limit.as_secs()
                ),
            )
        }
    };
    // The tool must be listed: a call to a tool the server does not offer is refused
    // here rather than sent.
    let listed = match tokio::time::timeout_at(deadline, client.list_all_tools()).await {
        Ok(Ok(tools)) => tools.iter().any(|t| t.name == tool),
        Ok(Err(e)) => {
            let _ = client.cancel().await;
            return not_sent(tool, format!("tools/list failed: {e}"));
        }
        Err(_) => {
            let _ = client.cancel().await;
            return not_sent(
                tool,
                format!("tools/list got no answer within {}s", limit.as_secs()),
            );
        }
    };
    if !listed {
        let _ = client.cancel().await;
        return not_sent(tool, format!("{} does not list this tool", d.describe()));
    }
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    // From here on the call may have reached the tool.
    let answer = tokio::time::timeout_at(deadline, client.call_tool_once(params)).await;
    let report = match answer {
        Err(_) => ExecReport::new(
            Outcome::Unknown,
            format!(
                "tools/call {tool:?} was sent and got no answer within {}s: the tool may have acted; it is not retried",
                limit.as_secs()
            ),
        ),
        Ok(Err(rmcp::ServiceError::McpError(e))) => ExecReport::new(
            Outcome::Failed,
            format!("the downstream refused tools/call {tool:?} with error {}: {}", e.code.0, e.message),
        ),
        Ok(Err(e)) => ExecReport::new(
            Outcome::Unknown,
            format!("tools/call {tool:?} was sent, then {e}: the tool may have acted; it is not retried"),
        ),
        Ok(Ok(CallToolResponse::Complete(result))) => {
            let full = serde_json::to_value(&result).unwrap_or(Value::Null);
            let is_error = result.is_error == Some(true);
            let text = text_of(&full);
            ExecReport {
                outcome: if is_error { Outcome::Failed } else { Outcome::Succeeded },
                detail: super::excerpt(&format!(
                    "tool {tool:?} {}: {text}",
                    if is_error { "returned isError: true" } else { "returned" }
                )),
                readback_sha256: Some(Sha256Hex::digest(
                    &approval_core::json::canonical_bytes(&full),
                )),
                output: Some(bounded_output(&full)),
            }
        }
        Ok(Ok(other)) => ExecReport::new(
            Outcome::Unknown,
            format!(
                "tools/call {tool:?} answered with an incomplete result ({}) the gate cannot follow up: the tool may act; it is not retried",
                match other {
                    CallToolResponse::InputRequired(_) => "input required",
                    CallToolResponse::Task(_) => "a task",
                    _ => "other",
                }
            ),
        ),
    };
    // Stops the session; a child server is killed with it.
    let _ = tokio::time::timeout(Duration::from_secs(5), client.cancel()).await;
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use approval_core::Seconds;

    #[test]
    fn large_results_are_kept_as_an_excerpt_with_size_and_digest() {
        let small = serde_json::json!({"content": [{"type": "text", "text": "ok"}]});
        assert_eq!(bounded_output(&small), small);
        assert_eq!(text_of(&small), "ok");
        let big = serde_json::json!({
            "content": [{"type": "text", "text": "x".repeat(OUTPUT_LIMIT)}],
            "isError": true
        });
        let kept = bounded_output(&big);
        assert_eq!(kept["truncated"], true);
        assert_eq!(kept["isError"], true);
        let full = serde_json::to_string(&big).unwrap();
        assert_eq!(kept["bytes"], full.len());
        assert_eq!(
            kept["sha256"],
            Sha256Hex::digest(full.as_bytes()).to_string()
        );
        assert!(serde_json::to_string(&kept).unwrap().len() < DETAIL_LIMIT + 400);
    }

    #[tokio::test]
    async fn nothing_is_sent_when_the_server_cannot_start_or_a_variable_is_missing() {
        let cfg = |program: &str, env_from: &[(&str, &str)]| ExecutorConfig::Mcp {
            command: Some(vec![program.to_owned()]),
            url: None,
            tool: "t".into(),
            timeout: Seconds::new(5),
            env_from: env_from
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            headers_from: Default::default(),
            payload_schema_from_tool: false,
        };
        let p = serde_json::json!({});
        let r = call(&cfg("/nonexistent/server", &[]), &p).await;
        assert_eq!(r.outcome, Outcome::Failed);
        assert!(r.detail.starts_with("nothing was sent"), "{}", r.detail);
        let r = call(
            &cfg(
                "/bin/cat",
                &[("TOKEN", "APPROVAL_TEST_SURELY_UNSET_VARIABLE")],
            ),
            &p,
        )
        .await;
        assert_eq!(r.outcome, Outcome::Failed);
        assert!(
            r.detail.contains("APPROVAL_TEST_SURELY_UNSET_VARIABLE"),
            "{}",
            r.detail
        );
        // Arguments must be an object.
        let r = call(&cfg("/bin/cat", &[]), &serde_json::json!([1])).await;
        assert!(r.detail.starts_with("nothing was sent"), "{}", r.detail);
    }
}
