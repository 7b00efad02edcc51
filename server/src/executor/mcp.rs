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
//! bound and logged, and it is killed when the exchange ends or times out. What a
//! downstream can make the gate hold is bounded ([`super::mcp_bounds`]).
//!
//! The details of a failure (the command line, the URL, the transport's own error,
//! which may name either) are the operator's: they go to the log with the kind, and
//! the outcome the agent reads says what failed in general terms (issue #31, item 9).

use super::mcp_bounds::{self, BoundedLines, Overflow};
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
use rmcp::transport::StreamableHttpClientTransport;
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

/// An open session with a downstream: the client, the child process (killed when the
/// session is dropped) and why the transport was cut, if a message was over bounds.
struct Session {
    client: Client,
    _child: Option<tokio::process::Child>,
    overflow: Overflow,
}

impl Session {
    /// Stops the session; a child server is killed with it.
    async fn close(self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.client.cancel()).await;
    }
}

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
/// The error names the downstream: for the log, not for the agent.
async fn connect(d: &Downstream, kind_label: &str) -> Result<Session, String> {
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
            cmd.stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true);
            let mut child = cmd
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", argv[0]))?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(format!("cannot open the pipes of {}", argv[0]));
            };
            // Every line the child writes is bounded before rmcp parses it.
            let overflow = Overflow::default();
            let transport = (BoundedLines::new(stdout, overflow.clone()), stdin);
            if let Some(stderr) = child.stderr.take() {
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
            let client = client_info()
                .serve_with_lifecycle(transport, lifecycle)
                .await
                .map_err(|e| {
                    let why = overflow.get().unwrap_or_else(|| e.to_string());
                    format!("the MCP handshake with {} failed: {why}", argv[0])
                })?;
            Ok(Session {
                client,
                _child: Some(child),
                overflow,
            })
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
                .max_json_response_size(mcp_bounds::MAX_MESSAGE_BYTES)
                .max_sse_event_size(mcp_bounds::MAX_MESSAGE_BYTES)
                // A re-initialised session repeats the POST: never for a gated call.
                .reinit_on_expired_session(false);
            let transport = StreamableHttpClientTransport::from_config(config);
            let client = client_info()
                .serve_with_lifecycle(transport, lifecycle)
                .await
                .map_err(|e| format!("cannot open an MCP session with {url}: {e}"))?;
            Ok(Session {
                client,
                _child: None,
                overflow: Overflow::default(),
            })
        }
    }
}

/// Lists the downstream server's tools (for `payload_schema_from_tool` and
/// `import-tools`), within `timeout` and [`super::mcp_bounds`]; with `want`, stops at
/// the page that lists that tool.
pub async fn list_tools(
    d: &Downstream,
    want: Option<&str>,
    timeout: Duration,
) -> Result<Vec<Tool>, String> {
    let work = async {
        let session = connect(d, &d.describe()).await?;
        let tools = mcp_bounds::list_tools(session.client.peer(), want)
            .await
            .map_err(|e| match session.overflow.get() {
                Some(why) => format!("tools/list failed: {why}"),
                None => e.to_string(),
            });
        session.close().await;
        tools
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {}s", timeout.as_secs())))
}

/// The input schema of one tool, for `payload_schema_from_tool`.
pub async fn tool_schema(d: &Downstream, tool: &str, timeout: Duration) -> Result<Value, String> {
    let tools = list_tools(d, Some(tool), timeout).await?;
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

/// Reads, from each downstream server that an exposed kind or a pass-through list
/// names, the definitions of those tools (issue #33): `tools/list` shows a pass-through
/// tool as the downstream defines it, and an exposed kind with the downstream tool's
/// own description. One listing per server, all at once, each within the schema
/// fetch limit. A server that cannot be read is logged and its tools are not listed
/// (fail closed: a pass-through tool nobody could describe is not offered).
pub async fn resolve_downstream_tools(mut config: crate::config::Config) -> crate::config::Config {
    // Per downstream: (key in the catalogue, the downstream's tool name). A
    // pass-through tool is keyed by its name, an exposed kind by the kind (two
    // servers may have tools of one name; pass-through names are unique by the
    // policy set's check, and never a kind's).
    type Wanted = (Downstream, Duration, Vec<(String, String)>);
    let mut wanted: Vec<Wanted> = Vec::new();
    for p in config.policies.iter() {
        let cfg = &p.spec().executor;
        let (Some(d), Some(tool), ExecutorConfig::Mcp { timeout, .. }) =
            (Downstream::of(cfg), cfg.mcp_tool(), cfg)
        else {
            continue;
        };
        let mut names: Vec<(String, String)> = p
            .spec()
            .pass_through
            .iter()
            .map(|t| (t.clone(), t.clone()))
            .collect();
        if p.spec().expose {
            names.push((p.kind().to_string(), tool.to_owned()));
        }
        if names.is_empty() {
            continue;
        }
        let limit = Duration::from_secs(timeout.get()).min(SCHEMA_FETCH_LIMIT);
        match wanted.iter_mut().find(|(x, _, _)| *x == d) {
            Some((_, l, n)) => {
                n.extend(names);
                *l = (*l).max(limit);
            }
            None => wanted.push((d, limit, names)),
        }
    }
    if wanted.is_empty() {
        return config;
    }
    let listed =
        futures::future::join_all(wanted.into_iter().map(|(d, limit, names)| async move {
            let tools = list_tools(&d, None, limit).await;
            (d, names, tools)
        }))
        .await;
    let mut found = BTreeMap::new();
    for (d, names, tools) in listed {
        let tools = match tools {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(downstream = %d.describe(), error = %e, "cannot list the downstream's tools: its pass-through tools are not offered");
                continue;
            }
        };
        for (key, tool) in names {
            match tools.iter().find(|t| t.name == tool) {
                Some(t) => {
                    found.insert(key, t.clone());
                }
                None => {
                    tracing::warn!(tool = %tool, downstream = %d.describe(), "the downstream lists no such tool: not offered")
                }
            }
        }
    }
    config.downstream_tools = std::sync::Arc::new(found);
    config
}

/// Calls a pass-through tool (issue #33): no proposal, no approval, the arguments as
/// the agent sent them, and the downstream's answer as it is. Used only for the tools
/// a policy's `pass_through` names. `Err` is the agent's to read (the operator's
/// details are logged).
pub async fn pass_through(
    cfg: &ExecutorConfig,
    tool: &str,
    arguments: serde_json::Map<String, Value>,
) -> Result<rmcp::model::CallToolResult, String> {
    let (Some(d), ExecutorConfig::Mcp { timeout, .. }) = (Downstream::of(cfg), cfg) else {
        return Err("this tool's policy has no mcp executor".into());
    };
    let limit = Duration::from_secs(timeout.get());
    let work = async {
        let session = connect(&d, tool).await.map_err(|e| {
            logged(tool, &d, &e);
            "the downstream MCP server could not be started or reached (the gate's log has the details)".to_owned()
        })?;
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let answer = session.client.call_tool_once(params).await;
        let overflow = session.overflow.get();
        session.close().await;
        match answer {
            Ok(CallToolResponse::Complete(r)) => Ok(r),
            Ok(_) => Err("the downstream answered with a result the gate cannot pass on (a task or an input request)".into()),
            Err(rmcp::ServiceError::McpError(e)) => Err(format!(
                "the downstream refused the call with error {}: {}",
                e.code.0, e.message
            )),
            Err(e) => {
                let why = overflow.unwrap_or_else(|| {
                    logged(tool, &d, &e.to_string());
                    "the connection to the downstream failed (the gate's log has the details)".into()
                });
                Err(why)
            }
        }
    };
    tokio::time::timeout(limit, work)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {}s", limit.as_secs())))
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

/// Logs a failure's specifics (downstream, transport error) for the operator; the
/// outcome carries only `outward`.
fn logged(tool: &str, d: &Downstream, specifics: &str) {
    tracing::warn!(
        tool,
        downstream = %d.describe(),
        error = %specifics,
        "mcp executor: the downstream failed"
    );
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
    const SEE_LOG: &str = "the gate's log has the details";
    let session = match tokio::time::timeout_at(deadline, connect(&d, tool)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            logged(tool, &d, &e);
            return not_sent(
                tool,
                format!("the downstream MCP server could not be started or reached, or its handshake failed ({SEE_LOG})"),
            );
        }
        Err(_) => {
            logged(tool, &d, "no handshake within the timeout");
            return not_sent(
                tool,
                format!(
                    "the downstream MCP server did not complete the handshake within {}s",
                    limit.as_secs()
                ),
            );
        }
    };
    // The tool must be listed: a call to a tool the server does not offer is refused
    // here rather than sent.
    let listing = tokio::time::timeout_at(
        deadline,
        mcp_bounds::list_tools(session.client.peer(), Some(tool)),
    )
    .await;
    let listed = match listing {
        Ok(Ok(tools)) => tools.iter().any(|t| t.name == tool),
        Ok(Err(e)) => {
            // The bounds are the gate's own, not configuration: said as they are.
            let why = match (session.overflow.get(), e) {
                (Some(over), _) | (None, mcp_bounds::ListFailure::OverBound(over)) => over,
                (None, mcp_bounds::ListFailure::Failed(e)) => {
                    logged(tool, &d, &e);
                    format!("tools/list failed ({SEE_LOG})")
                }
            };
            session.close().await;
            return not_sent(tool, why);
        }
        Err(_) => {
            session.close().await;
            return not_sent(
                tool,
                format!("tools/list got no answer within {}s", limit.as_secs()),
            );
        }
    };
    if !listed {
        session.close().await;
        return not_sent(tool, "the downstream MCP server does not list this tool");
    }
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    // From here on the call may have reached the tool.
    let answer = tokio::time::timeout_at(deadline, session.client.call_tool_once(params)).await;
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
        Ok(Err(e)) => {
            let why = match session.overflow.get() {
                // Over the gate's own bounds: said as it is (it names no configuration).
                Some(over) => over,
                None => {
                    logged(tool, &d, &e.to_string());
                    format!("the connection to the downstream failed ({SEE_LOG})")
                }
            };
            ExecReport::new(
                Outcome::Unknown,
                format!("tools/call {tool:?} was sent, then {why}: the tool may have acted; it is not retried"),
            )
        }
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
    session.close().await;
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
        // The agent reads the outcome: no command line (the log has it).
        assert!(!r.detail.contains("/nonexistent/server"), "{}", r.detail);
        let unset = cfg(
            "/bin/cat",
            &[("TOKEN", "APPROVAL_TEST_SURELY_UNSET_VARIABLE")],
        );
        let r = call(&unset, &p).await;
        assert_eq!(r.outcome, Outcome::Failed);
        assert!(r.detail.starts_with("nothing was sent"), "{}", r.detail);
        assert!(
            !r.detail.contains("APPROVAL_TEST_SURELY_UNSET_VARIABLE"),
            "{}",
            r.detail
        );
        // The operator's words (logged) name the variable.
        let Err(logged) = connect(&Downstream::of(&unset).unwrap(), "t").await else {
            panic!("connected without the variable")
        };
        assert!(
            logged.contains("APPROVAL_TEST_SURELY_UNSET_VARIABLE"),
            "{logged}"
        );
        // Arguments must be an object.
        let r = call(&cfg("/bin/cat", &[]), &serde_json::json!([1])).await;
        assert!(r.detail.starts_with("nothing was sent"), "{}", r.detail);
    }
}
