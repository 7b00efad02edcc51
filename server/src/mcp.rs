//! The agent's side: MCP tools over rmcp.
//!
//! Five tools and no more. There is deliberately no tool that approves anything:
//! approval is a signature made elsewhere. Every result carries
//! `structuredContent` matching the tool's `outputSchema` (mirrored as text) with
//! a stable `code`; refusals are `isError: true` results that carry the same
//! structure, so an agent can branch on the code. Malformed calls (unknown tool,
//! wrong argument types) are JSON-RPC errors.
//!
//! The agent's identity is never an argument: the HTTP layer authenticates the
//! bearer token (or the loopback peer) and puts an [`AgentName`] in the request's
//! extensions, which rmcp hands to us with the request parts.

pub mod direct;
mod gated;
pub mod listen;
mod tasks;
mod view;

pub use gated::APPROVAL_META;
pub use tasks::{DISPOSITION_META, POLL_INTERVAL_MS};

use crate::service::{Service, ServiceError, MAX_LIST};
use crate::store::Cursor;
use approval_core::api::tools::{ListItem, ToolOutput};
use approval_core::ids::AgentName;
use approval_core::status::Status;
use approval_core::Code;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, GetTaskParams,
    GetTaskResult, Implementation, InitializeResult, JsonObject, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, Tool, ToolAnnotations,
    UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;

/// Who the agent on the stdio transport is ([`crate::stdio`]). Without an agents file it is
/// `local` (the host launched us, as a loopback client is `local` over HTTP); with
/// one, the token must name an agent in it, checked at every call so that removing
/// the agent and reloading (SIGHUP) locks the session out.
#[derive(Clone)]
pub struct Identity {
    token: Option<Arc<str>>,
}

impl Identity {
    /// The identity a session presents.
    pub fn new(token: Option<String>) -> Self {
        Self {
            token: token.map(Arc::from),
        }
    }

    /// The agent this session acts as under `config`, or why it may not act.
    pub fn agent(&self, config: &crate::config::Config) -> Result<AgentName, McpError> {
        match (&config.agents, &self.token) {
            (Some(agents), Some(t)) => agents.authenticate(t.trim()).ok_or_else(|| {
                McpError::new(
                    rmcp::model::ErrorCode(-32001),
                    "unknown agent token: the agents file in force has no agent with this token; make one with `approval-server agent add NAME` and pass it with --token or APPROVAL_AGENT_TOKEN",
                    None,
                )
            }),
            (Some(_), None) => Err(McpError::new(
                rmcp::model::ErrorCode(-32001),
                "the service has an agents file, so this stdio session needs a token: pass --token or set APPROVAL_AGENT_TOKEN (from `approval-server agent add NAME`)",
                None,
            )),
            (None, _) => AgentName::parse("local").map_err(|e| {
                McpError::internal_error(format!("no local identity: {e}"), None)
            }),
        }
    }
}

/// The MCP handler; one is made per request (the HTTP transport is stateless).
#[derive(Clone)]
pub struct McpHandler {
    svc: Arc<Service>,
    /// Set on the embedded stdio transport, which has no HTTP request to carry an agent.
    stdio: Option<Identity>,
}

impl McpHandler {
    /// A handler over the service.
    pub fn new(svc: Arc<Service>) -> Self {
        Self { svc, stdio: None }
    }

    /// A handler for the embedded stdio transport: the agent is `identity`, checked
    /// against the agents file in force at every call.
    pub fn for_stdio(svc: Arc<Service>, identity: Identity) -> Self {
        Self {
            svc,
            stdio: Some(identity),
        }
    }
}

/// Arguments of `approval_prepare`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrepareArgs {
    /// The action kind, one of the configured kinds listed in the tool description.
    pub kind: String,
    /// The action's parameters, exactly as they should be executed. Must satisfy the kind's schema.
    pub payload: Value,
    /// One line describing the action for the human approvers (optional).
    #[serde(default)]
    pub summary: Option<String>,
}

/// Arguments of `approval_status`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusArgs {
    /// The id returned by approval_prepare.
    pub proposal_id: String,
    /// Wait up to this many seconds (at most 30) for the status to change before answering.
    #[serde(default)]
    pub wait_seconds: Option<u64>,
}

/// Arguments of `approval_execute`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteArgs {
    /// The id returned by approval_prepare.
    pub proposal_id: String,
    /// The preview_sha256 returned by approval_prepare: what the approvers signed.
    pub preview_sha256: String,
}

/// Arguments of `approval_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Only proposals in this status (e.g. PENDING, APPROVED, SUCCEEDED).
    #[serde(default)]
    pub status: Option<String>,
    /// Continue a listing: the next_cursor of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Page size, 1 to 100 (default 100).
    #[serde(default)]
    pub limit: Option<u64>,
}

/// Arguments of `approval_withdraw`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WithdrawArgs {
    /// The id of a PENDING proposal of yours.
    pub proposal_id: String,
}

fn schema_of<T: JsonSchema>() -> Arc<JsonObject> {
    let v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
    match v {
        Value::Object(mut m) => {
            m.remove("$schema");
            m.remove("title");
            Arc::new(m)
        }
        _ => Arc::new(JsonObject::new()),
    }
}

/// What the agent is told about a kind: the policy's description, and for a kind
/// backed by a downstream MCP tool, which tool (the payload is its `arguments`).
pub fn kind_description(spec: &approval_core::policy::PolicySpec) -> String {
    match spec.executor.mcp_tool() {
        Some(tool) => format!(
            "runs the downstream MCP tool `{tool}` once approved, the payload being its arguments: {}",
            spec.description
        ),
        None => spec.description.clone(),
    }
}

/// A tool's name: the one spelling of each is in [`TOOLS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolName {
    /// `approval_prepare`.
    Prepare,
    /// `approval_status`.
    Status,
    /// `approval_execute`.
    Execute,
    /// `approval_list`.
    List,
    /// `approval_withdraw`.
    Withdraw,
}

/// One row of the tool table.
pub struct ToolSpec {
    /// Which tool.
    pub name: ToolName,
    /// The name agents call it by.
    pub wire: &'static str,
    /// What the model is told, given the configured kinds (`` `kind` (description) ``,
    /// joined by `; `): what the tool does and what to do next.
    pub description: fn(&str) -> String,
    /// The JSON Schema of its arguments.
    pub input: fn() -> Arc<JsonObject>,
    /// Its annotations: read-only, destructive, idempotent.
    pub hints: (bool, bool, bool),
}

/// The tools, in the order `tools/list` gives them. Both transports' `tools/list`
/// (through rmcp) and every `tools/call` (rmcp's and the direct paths',
/// [`McpHandler::call_as`]) read this table; the handler of each is its arm in
/// `McpHandler::dispatch`, which matches [`ToolName`] exhaustively.
pub static TOOLS: [ToolSpec; 5] = [
    ToolSpec {
        name: ToolName::Prepare,
        wire: "approval_prepare",
        description: |kind_list| {
            format!(
            "Propose an action that needs human approval. Nothing runs now. Returns a proposal_id and a preview_sha256. \
             Then tell your human what is waiting (the kind, the summary and the first 8 characters of preview_sha256) and \
             that approvers must sign it with signer-cli; then poll approval_status with wait_seconds. Configured kinds: {kind_list}."
        )
        },
        input: schema_of::<PrepareArgs>,
        hints: (false, false, false),
    },
    ToolSpec {
        name: ToolName::Status,
        wire: "approval_status",
        description: |_| {
            "Status of one of your proposals: approvals and rejections so far, what quorum still needs, whether it is executable, \
             and the result if it ran. Pass wait_seconds (up to 30) to wait for a change instead of polling rapidly. \
             When executable is true, call approval_execute once.".to_owned()
        },
        input: schema_of::<StatusArgs>,
        hints: (true, false, true),
    },
    ToolSpec {
        name: ToolName::Execute,
        wire: "approval_execute",
        description: |_| {
            "Run an approved proposal, exactly once. Pass the proposal_id and the preview_sha256 from approval_prepare. \
             The action runs at most once whatever happens: never call this again after any result; a second call is refused \
             with ALREADY_EXECUTED_NO_REPLAY. If the code is terminal (REJECTED, EXPIRED, REVOKED, POLICY_CHANGED, FAILED, OUTCOME_UNKNOWN), stop and tell your human.".to_owned()
        },
        input: schema_of::<ExecuteArgs>,
        hints: (false, true, false),
    },
    ToolSpec {
        name: ToolName::List,
        wire: "approval_list",
        description: |_| {
            "List your proposals, newest first, optionally only those in one status (PENDING, APPROVED, SUCCEEDED, ...). \
             Answers one page (limit, at most and by default 100); when next_cursor is present, pass it as cursor for the next page.".to_owned()
        },
        input: schema_of::<ListArgs>,
        hints: (true, false, true),
    },
    ToolSpec {
        name: ToolName::Withdraw,
        wire: "approval_withdraw",
        description: |_| {
            "Withdraw one of your PENDING proposals, for instance when the human no longer wants it. It can then never run.".to_owned()
        },
        input: schema_of::<WithdrawArgs>,
        hints: (false, false, true),
    },
];

impl ToolName {
    /// The tool an agent names, if it is one of ours.
    pub fn parse(name: &str) -> Option<ToolName> {
        TOOLS.iter().find(|t| t.wire == name).map(|t| t.name)
    }
}

/// The tools as `tools/list` gives them, with descriptions that tell the model what
/// to do next.
pub fn tools(kinds: &[(String, String)]) -> Vec<Tool> {
    let kind_list = kinds
        .iter()
        .map(|(k, d)| format!("`{k}` ({d})"))
        .collect::<Vec<_>>()
        .join("; ");
    let out = schema_of::<ToolOutput>();
    TOOLS
        .iter()
        .map(|t| {
            let (read_only, destructive, idempotent) = t.hints;
            Tool::new(t.wire, (t.description)(&kind_list), (t.input)())
                .with_raw_output_schema(out.clone())
                .with_annotations(
                    ToolAnnotations::new()
                        .read_only(read_only)
                        .destructive(destructive)
                        .idempotent(idempotent),
                )
        })
        .collect()
}

/// A refusal as a tool result.
pub fn refusal(e: &ServiceError) -> CallToolResult {
    let out = ToolOutput {
        proposal_id: e.proposal_id.as_ref().map(|p| p.to_string()),
        status: e.status.map(|s| s.to_string()),
        ..ToolOutput::new(e.code, e.message.clone(), e.retry_allowed)
    };
    CallToolResult::structured_error(serde_json::to_value(out).unwrap_or(Value::Null))
}

impl McpHandler {
    async fn dispatch(
        &self,
        agent: &AgentName,
        name: &str,
        args: Value,
    ) -> Result<Result<ToolOutput, ServiceError>, McpError> {
        // Bad arguments are the agent's to correct, so they come back as a tool
        // result it can read (MCP 2025-11-25, SEP-1303), not as a protocol error.
        macro_rules! parse {
            ($t:ty) => {
                match serde_json::from_value::<$t>(args) {
                    Ok(a) => a,
                    Err(e) => {
                        return Ok(Err(ServiceError::new(
                            Code::InvalidArguments,
                            format!(
                                "invalid arguments for {name}: {e}; see the tool's inputSchema"
                            ),
                        )))
                    }
                }
            };
        }
        let Some(tool) = ToolName::parse(name) else {
            let mut all: Vec<String> = TOOLS.iter().map(|t| t.wire.to_owned()).collect();
            all.extend(gated::names(&self.svc.config()));
            return Err(McpError::invalid_params(
                format!("unknown tool {name:?}: the tools are {}", all.join(", ")),
                None,
            ));
        };
        Ok(match tool {
            ToolName::Prepare => {
                let a = parse!(PrepareArgs);
                match self.svc.prepare(agent, &a.kind, a.payload, a.summary).await {
                    Ok((rec, _)) => self.describe(&rec, None).map(|mut o| {
                        o.preview = Some(rec.preview.to_value());
                        o
                    }),
                    Err(e) => Err(e),
                }
            }
            ToolName::Status => {
                let a = parse!(StatusArgs);
                match self
                    .svc
                    .status_waiting(agent, &a.proposal_id, a.wait_seconds.unwrap_or(0))
                    .await
                {
                    Ok((rec, crate::service::long_poll::Waited::Busy)) => self.describe(&rec, None).map(|mut o| {
                        o.message = format!(
                            "{} (Answered without waiting: you already hold {} waiting approval_status calls; let one end before starting another.)",
                            o.message,
                            crate::service::long_poll::MAX_LONG_POLLS_PER_AGENT
                        );
                        o
                    }),
                    Ok((rec, _)) => self.describe(&rec, None),
                    Err(e) => Err(e),
                }
            }
            ToolName::Execute => {
                let a = parse!(ExecuteArgs);
                match self
                    .svc
                    .execute(agent, &a.proposal_id, &a.preview_sha256)
                    .await
                {
                    Ok(rec) => self.describe(&rec, None),
                    Err(e) => Err(e),
                }
            }
            ToolName::List => {
                let a = parse!(ListArgs);
                let status = match a.status.as_deref() {
                    None | Some("") => None,
                    Some(s) => match Status::parse(s) {
                        Some(st) => Some(st),
                        None => {
                            return Ok(Err(ServiceError::new(
                                Code::InvalidArguments,
                                format!(
                                    "unknown status {s:?}: use one of {}",
                                    Status::ALL.map(|s| s.as_str()).join(", ")
                                ),
                            )))
                        }
                    },
                };
                let cursor = match a.cursor.as_deref() {
                    None | Some("") => None,
                    Some(c) => match Cursor::parse(c) {
                        Some(c) => Some(c),
                        None => {
                            return Ok(Err(ServiceError::new(
                                Code::InvalidArguments,
                                format!(
                                    "cursor {c:?} is not one this server handed out: pass the next_cursor of the previous approval_list page unchanged, or omit it to start from the newest"
                                ),
                            )))
                        }
                    },
                };
                let limit = a.limit.unwrap_or(MAX_LIST as u64).clamp(1, MAX_LIST as u64) as usize;
                let now = self.svc.now();
                self.svc
                    .list_for_agent(agent, status, cursor.as_ref(), limit)
                    .map(|page| ToolOutput {
                        code: Code::Ok,
                        message: match &page.next {
                            Some(_) => format!(
                                "{} proposal(s); more remain: call approval_list again with cursor = next_cursor",
                                page.heads.len()
                            ),
                            None => format!("{} proposal(s)", page.heads.len()),
                        },
                        retry_allowed: true,
                        proposals: Some(
                            page.heads
                                .iter()
                                .map(|r| ListItem {
                                    proposal_id: r.preview.proposal_id.to_string(),
                                    kind: r.preview.kind.to_string(),
                                    status: r.lifecycle.at(now).status.to_string(),
                                    summary: r.preview.summary.clone(),
                                    preview_sha256: r.preview_sha256.to_string(),
                                    created_at: r.preview.created_at.to_string(),
                                    expires_at: r.preview.expires_at.to_string(),
                                })
                                .collect(),
                        ),
                        next_cursor: page.next.map(|c| c.to_string()),
                        ..ToolOutput::new(Code::Ok, String::new(), true)
                    })
            }
            ToolName::Withdraw => {
                let a = parse!(WithdrawArgs);
                match self.svc.withdraw(agent, &a.proposal_id).await {
                    Ok(rec) => self.describe(&rec, None),
                    Err(e) => Err(e),
                }
            }
        })
    }
}

/// The protocol revisions served.
pub fn protocol_versions() -> Vec<ProtocolVersion> {
    vec![
        ProtocolVersion::V_2025_03_26,
        ProtocolVersion::V_2025_06_18,
        ProtocolVersion::V_2025_11_25,
        ProtocolVersion::V_2026_07_28,
    ]
}

impl ServerHandler for McpHandler {
    fn get_info(&self) -> InitializeResult {
        let mut caps = ServerCapabilities::builder().enable_tools().build();
        // MCP tasks (SEP-2663) for calls to exposed kinds, and the tool-approval
        // draft (SEP-2848) they follow: see PROTOCOL §6.
        let ext = caps.extensions.get_or_insert_with(Default::default);
        ext.insert(rmcp::model::TASKS_EXTENSION_ID.into(), JsonObject::new());
        ext.insert(
            "io.modelcontextprotocol/tool-approval".into(),
            JsonObject::new(),
        );
        let mut info = InitializeResult::new(caps);
        info.protocol_version = ProtocolVersion::V_2025_11_25;
        info.server_info = Implementation::new("approval-server", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(
            "An approval gate: actions with real effects need a quorum of human signatures before they run. \
             Call approval_prepare, tell your human what is waiting (kind, summary, first 8 characters of preview_sha256), \
             poll approval_status with wait_seconds, call approval_execute exactly once when executable, and never retry after a terminal code. \
             Tools whose annotations say they need approval are gated the same way without that protocol: calling one is a proposal; \
             with the tasks extension you get a task to poll with tasks/get, without it a proposal_id to follow with approval_status; \
             the gate runs the call itself once the quorum has signed."
                .into(),
        );
        info
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Owned(protocol_versions())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let config = self.svc.config();
        let kinds: Vec<(String, String)> = config
            .policies
            .iter()
            .map(|p| (p.kind().to_string(), kind_description(p.spec())))
            .collect();
        let mut all = tools(&kinds);
        all.extend(gated::listed(&config));
        Ok(ListToolsResult::with_all_items(all))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let agent = self.agent_of(&context)?;
        // rmcp runs the call on a task of its own, to its end even when the client
        // hung up: it keeps the request's charge until then (`capacity::Held`). The
        // context's copy of the request's parts holds it too, until the context is
        // dropped; this clone does not depend on when that is. Attack test:
        // tests/tests/capacity_hangup.rs.
        let _held = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<crate::capacity::Held>().cloned());
        // SEP-2663: a task only for a request that declared the extension.
        let tasks = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        self.call_with(&agent, request, tasks).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let agent = self.agent_of(&context)?;
        let answer = self.get_task_for(&agent, &request.task_id);
        // Never report a state whose fsync is still pending.
        self.svc
            .settle()
            .await
            .map_err(|e| McpError::internal_error(e.message, None))?;
        answer
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let agent = self.agent_of(&context)?;
        self.cancel_task_for(&agent, &request.task_id).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let agent = self.agent_of(&context)?;
        // Known or not, our tasks never ask the client for input.
        self.get_task_for(&agent, &request.task_id)?;
        Err(McpError::invalid_params(
            "this task asks for no input: it waits for human approvers, who sign elsewhere; poll tasks/get",
            None,
        ))
    }
}

impl McpHandler {
    /// The agent a request acts as: from the HTTP layer's authentication, or the
    /// stdio session's identity.
    fn agent_of(&self, context: &RequestContext<RoleServer>) -> Result<AgentName, McpError> {
        let from_http = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<AgentName>().cloned());
        match (from_http, &self.stdio) {
            (Some(a), _) => Ok(a),
            (None, Some(id)) => id.agent(&self.svc.config()),
            (None, None) => Err(McpError::invalid_request(
                "no authenticated agent on this request",
                None,
            )),
        }
    }

    /// One tool call by `agent`, with a task for an exposed kind when the request
    /// declared the tasks extension (`tasks`).
    pub async fn call_with(
        &self,
        agent: &AgentName,
        request: CallToolRequestParams,
        tasks: bool,
    ) -> Result<CallToolResponse, McpError> {
        if ToolName::parse(&request.name).is_none() {
            let config = self.svc.config();
            match gated::lookup(&config, &request.name) {
                Some(gated::Gated::Kind(p)) => {
                    let args = request.arguments.unwrap_or_default();
                    return self.call_exposed(agent, &p, args, tasks).await;
                }
                Some(gated::Gated::PassThrough(p)) => {
                    let args = request.arguments.unwrap_or_default();
                    return Ok(self.call_pass_through(&p, &request.name, args).await.into());
                }
                None => {}
            }
        }
        Ok(self.call_plain(agent, request).await?.into())
    }
}

impl McpHandler {
    /// One tool call by `agent` without the tasks extension: what the direct paths
    /// run (`http::direct`, and the embedded stdio transport without rmcp's session
    /// loop, see `stdio::session::serve_lines`).
    pub async fn call_as(
        &self,
        agent: &AgentName,
        request: CallToolRequestParams,
    ) -> Result<CallToolResult, McpError> {
        match self.call_with(agent, request, false).await? {
            CallToolResponse::Complete(r) => Ok(r),
            _ => Err(McpError::internal_error(
                "a call without the tasks extension made a task",
                None,
            )),
        }
    }

    /// One call to one of the gate's own tools.
    async fn call_plain(
        &self,
        agent: &AgentName,
        request: CallToolRequestParams,
    ) -> Result<CallToolResult, McpError> {
        Ok(match self.run_plain(agent, request).await? {
            Ok(out) => CallToolResult::structured(serde_json::to_value(out).unwrap_or(Value::Null)),
            Err(e) => refusal(&e),
        })
    }

    /// [`McpHandler::call_plain`]'s outcome before it is shaped as a result: the
    /// direct paths shape it themselves ([`direct`]).
    async fn run_plain(
        &self,
        agent: &AgentName,
        request: CallToolRequestParams,
    ) -> Result<Result<ToolOutput, ServiceError>, McpError> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        let outcome = self.dispatch(agent, &request.name, args).await?;
        // Never report a state whose fsync is still pending.
        if let Err(e) = self.svc.settle().await {
            return Ok(Err(e));
        }
        Ok(outcome)
    }
}

/// The refusal for a payload the exact-JSON check caught before rmcp parsed the request.
/// `at` is where the payload is in the request: its pointer is made relative to it.
pub fn invalid_payload_result(err: &approval_core::json::PayloadError, at: &str) -> CallToolResult {
    let mut e = err.clone();
    e.pointer = e.pointer.strip_prefix(at).unwrap_or(&e.pointer).to_owned();
    refusal(&ServiceError::new(
        Code::InvalidPayload,
        format!("payload {e}"),
    ))
}
