//! The `[executor]` table: what `approval_execute` runs, and the checks that refuse
//! an executor that could not run or would leak a secret into a policy. Imports only
//! the leaf `time`.

use crate::time::Seconds;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The longest executor time-out a policy may set.
pub const MAX_EXECUTOR_TIMEOUT: Seconds = Seconds::new(3600);

fn default_webhook_timeout() -> Seconds {
    Seconds::new(10)
}
fn default_command_timeout() -> Seconds {
    Seconds::new(60)
}

/// What `approval_execute` does, set by the policy and never by the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum ExecutorConfig {
    /// Writes one new file with the payload and reads it back.
    Note {
        /// Folder for the notes; default `<data>/sandbox`.
        #[serde(default)]
        dir: Option<String>,
    },
    /// POSTs `{payload, receipt}` to a URL, once.
    Webhook {
        /// `http://` or `https://` URL.
        url: String,
        /// Time-out for the whole exchange (default 10s).
        #[serde(default = "default_webhook_timeout")]
        timeout: Seconds,
        /// Extra request headers. They are part of the signed policy, so approvers see them.
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
    /// Runs a program without a shell, payload JSON on stdin.
    Command {
        /// Absolute path of the program.
        program: String,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
        /// Time-out after which the process is killed (default 60s).
        #[serde(default = "default_command_timeout")]
        timeout: Seconds,
    },
    /// Calls one tool of a downstream MCP server, once, with the payload as its
    /// `arguments`. Exactly one of `command` (a stdio server the gate starts) and `url`
    /// (a Streamable HTTP server) is set.
    Mcp {
        /// The server's command line: program (an absolute path, or a name looked up
        /// in the gate's `PATH`) and arguments, run without a shell.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        command: Option<Vec<String>>,
        /// `http://` or `https://` URL of a Streamable HTTP MCP endpoint.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        /// The downstream tool's name.
        tool: String,
        /// Time-out for the whole exchange, start to result (default 60s).
        #[serde(default = "default_command_timeout")]
        timeout: Seconds,
        /// Child environment variables, each taken from the named variable of the gate's
        /// own environment (`{ CHILD_VAR = "GATE_VAR" }`): secrets stay out of policies,
        /// which approvers read. Only with `command`.
        #[serde(default)]
        env_from: BTreeMap<String, String>,
        /// Request headers, each taken from the named variable of the gate's own
        /// environment (`{ Authorization = "GATE_VAR" }`). Only with `url`.
        #[serde(default)]
        headers_from: BTreeMap<String, String>,
        /// Take the payload schema from the tool's `inputSchema` (fetched when the
        /// policies load; the fetched schema becomes the policy's `payload_schema`, so
        /// approvers sign it along with the rest).
        #[serde(default)]
        payload_schema_from_tool: bool,
    },
    /// The gate applies a configuration change itself (issue #35): only the built-in
    /// `gate.config` kind has it, in the policy the gate derives from `root.toml`
    /// ([`crate::governance`]). A policy file that names it is refused.
    Gate,
}

impl ExecutorConfig {
    /// Whether the payload schema is to be taken from a downstream MCP tool.
    pub fn schema_from_tool(&self) -> bool {
        matches!(
            self,
            ExecutorConfig::Mcp {
                payload_schema_from_tool: true,
                ..
            }
        )
    }

    /// The downstream MCP tool behind this executor, if any.
    pub fn mcp_tool(&self) -> Option<&str> {
        match self {
            ExecutorConfig::Mcp { tool, .. } => Some(tool),
            _ => None,
        }
    }
}

/// Checks an executor table. A refusal names the table and the key at fault (for
/// the line number) and says what to do.
pub(super) fn check_executor(e: &ExecutorConfig) -> Result<(), (&'static str, String, String)> {
    const T: &str = "executor";
    let at = |key: &str, m: String| (T, key.to_owned(), m);
    match e {
        ExecutorConfig::Note { dir } => {
            if dir
                .as_deref()
                .is_some_and(|d| d.is_empty() || d.contains('\0'))
            {
                return Err(at("dir", "executor.dir must be a non-empty path".into()));
            }
        }
        ExecutorConfig::Webhook {
            url,
            timeout,
            headers,
        } => {
            if !is_http_url(url) {
                return Err(at(
                    "url",
                    format!("executor.url {url:?} must be an http:// or https:// URL"),
                ));
            }
            if *timeout > MAX_EXECUTOR_TIMEOUT {
                return Err(at(
                    "timeout",
                    format!("executor.timeout {timeout} is over the limit of 1h"),
                ));
            }
            for (k, v) in headers {
                let header = |m: String| ("executor.headers", k.clone(), m);
                if !is_header_name(k) || v.chars().any(|c| c.is_control()) {
                    return Err(header(format!(
                        "executor.headers entry {k:?} is not a valid HTTP header"
                    )));
                }
                if k.eq_ignore_ascii_case("idempotency-key")
                    || k.eq_ignore_ascii_case("content-type")
                {
                    return Err(header(format!(
                        "executor.headers may not set {k:?}: the server sets it"
                    )));
                }
            }
        }
        ExecutorConfig::Command {
            program,
            args,
            timeout,
        } => {
            if !program.starts_with('/') || program.contains('\0') {
                return Err(at("program", format!("executor.program {program:?} must be an absolute path (no shell, no PATH lookup)")));
            }
            if args.iter().any(|a| a.contains('\0')) {
                return Err(at("args", "executor.args may not contain NUL".into()));
            }
            if *timeout > MAX_EXECUTOR_TIMEOUT {
                return Err(at(
                    "timeout",
                    format!("executor.timeout {timeout} is over the limit of 1h"),
                ));
            }
        }
        // Refused in files by `Policy::parse_toml`; the gate's own policy has it.
        ExecutorConfig::Gate => {}
        ExecutorConfig::Mcp {
            command,
            url,
            tool,
            timeout,
            env_from,
            headers_from,
            payload_schema_from_tool: _,
        } => {
            match (command, url) {
                (Some(_), Some(_)) | (None, None) => {
                    return Err(at(
                        "command",
                        "an mcp executor needs exactly one of command = [\"program\", \"arg\", ...] (a stdio server) and url = \"https://...\" (a Streamable HTTP server)".into(),
                    ))
                }
                (Some(c), None) => {
                    if c.is_empty() || c[0].is_empty() {
                        return Err(at(
                            "command",
                            "executor.command is empty: give the program and its arguments".into(),
                        ));
                    }
                    if c.iter().any(|a| a.contains('\0')) {
                        return Err(at("command", "executor.command may not contain NUL".into()));
                    }
                    if !headers_from.is_empty() {
                        return Err(at(
                            "headers_from",
                            "executor.headers_from is for url servers: a command server gets env_from".into(),
                        ));
                    }
                }
                (None, Some(u)) => {
                    if !is_http_url(u) {
                        return Err(at(
                            "url",
                            format!("executor.url {u:?} must be an http:// or https:// URL"),
                        ));
                    }
                    if !env_from.is_empty() {
                        return Err(at(
                            "env_from",
                            "executor.env_from is for command servers: a url server gets headers_from".into(),
                        ));
                    }
                }
            }
            if tool.is_empty() || tool.chars().any(|c| c.is_control()) {
                return Err(at(
                    "tool",
                    "executor.tool must name the downstream tool (see `approval-server import-tools`)".into(),
                ));
            }
            if *timeout > MAX_EXECUTOR_TIMEOUT || timeout.get() == 0 {
                return Err(at(
                    "timeout",
                    format!("executor.timeout {timeout} must be between 1s and 1h"),
                ));
            }
            for (k, v) in env_from {
                if !is_env_name(k) || !is_env_name(v) {
                    return Err(at(
                        "env_from",
                        format!("executor.env_from entry {k:?} = {v:?}: both sides must be environment variable names (letters, digits, _), the value naming a variable of the gate's environment, never a secret itself"),
                    ));
                }
            }
            for (k, v) in headers_from {
                if !is_header_name(k) || !is_env_name(v) {
                    return Err(at(
                        "headers_from",
                        format!("executor.headers_from entry {k:?} = {v:?}: the key must be an HTTP header name and the value the name of an environment variable of the gate, never a secret itself"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// An `http://` or `https://` URL with a host part and no blank or control character.
fn is_http_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    rest.is_some_and(|r| {
        !r.is_empty()
            && !r.starts_with('/')
            && !url.chars().any(|c| c.is_whitespace() || c.is_control())
    })
}

/// An HTTP header name: one or more token characters (RFC 9110).
fn is_header_name(k: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// An environment variable name: letters, digits and `_`, not starting with a digit.
fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}
