//! Resolving tool schemas: the one step of loading the configuration that talks to
//! downstream servers. [`crate::config`] reads and checks files only; the service
//! runs this step (at start-up, on `check`, on every reload), asking each downstream
//! MCP server a policy takes its payload schema from (`payload_schema_from_tool =
//! true`) for the tool's `inputSchema`.
//!
//! May import the configuration and the MCP executor.

use crate::config::{Config, ConfigError, ConfigSource};

/// [`ConfigSource::load`], then the input schemas of the downstream MCP tools that
/// policies with `payload_schema_from_tool = true` take their payload schema from
/// (a kind whose tool cannot be read stays disabled, with the reason), and the
/// definitions of the downstream tools `tools/list` shows (exposed kinds and
/// pass-through tools).
pub async fn load_config(source: &ConfigSource) -> Result<Config, ConfigError> {
    Ok(resolve(source.load()?).await)
}

/// The tool step alone, for a configuration loaded otherwise (a version under quorum).
pub async fn resolve(config: Config) -> Config {
    let config = crate::executor::mcp::resolve_tool_schemas(config).await;
    crate::executor::mcp::resolve_downstream_tools(config).await
}
