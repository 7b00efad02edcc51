//! `rmcp-ceiling`: the cheapest MCP server rmcp can be, for the HTTP ceiling.
//!
//! One trivial tool (`noop`, answers `{"code": "OK"}` as structured content) behind
//! rmcp's Streamable HTTP service configured as ours is (stateless, JSON answers, no
//! SSE keep-alive), served by `axum::serve`. No store, no authentication, no
//! exact-JSON check: what is left of a call is rmcp and HTTP. `approval-bench
//! --scenario http-pair` measures our `approval_status` against it, alternately, with
//! the same closed-loop client, so the ratio is measured in one run, not quoted.
//!
//! ```text
//! rmcp-ceiling --listen 127.0.0.1:0     # prints "MCP endpoint: http://127.0.0.1:PORT/mcp"
//! ```

#![forbid(unsafe_code)]

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, InitializeResult,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

/// The one tool.
#[derive(Clone, Default)]
struct Noop;

impl ServerHandler for Noop {
    fn get_info(&self) -> InitializeResult {
        let mut info = InitializeResult::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("rmcp-ceiling", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut schema = JsonObject::new();
        schema.insert("type".into(), "object".into());
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "noop",
            "Does nothing and answers OK.",
            schema,
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name != "noop" {
            return Err(McpError::invalid_params("the only tool is noop", None));
        }
        Ok(CallToolResult::structured(serde_json::json!({"code": "OK"})).into())
    }
}

fn listen_arg() -> Result<SocketAddr, String> {
    let mut args = std::env::args().skip(1);
    let mut listen = SocketAddr::from(([127, 0, 0, 1], 0));
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => {
                let v = args.next().ok_or("--listen needs an address")?;
                listen = v
                    .parse()
                    .map_err(|e| format!("--listen {v:?} is not an address: {e}"))?;
            }
            "--help" | "-h" => {
                return Err("usage: rmcp-ceiling [--listen 127.0.0.1:0]".into());
            }
            other => return Err(format!("unknown argument {other:?} (try --listen ADDR)")),
        }
    }
    Ok(listen)
}

#[tokio::main]
async fn main() -> ExitCode {
    let listen = match listen_arg() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rmcp-ceiling: {e}");
            return ExitCode::FAILURE;
        }
    };
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None);
    let service = StreamableHttpService::new(
        || Ok(Noop),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let app = axum::Router::new().route_service("/mcp", service);
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rmcp-ceiling: cannot listen on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    match listener.local_addr() {
        Ok(a) => println!("MCP endpoint: http://{a}/mcp"),
        Err(e) => {
            eprintln!("rmcp-ceiling: no local address: {e}");
            return ExitCode::FAILURE;
        }
    }
    if let Err(e) = axum::serve(listener, app).await {
        eprintln!("rmcp-ceiling: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
