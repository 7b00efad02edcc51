//! Policies: who must approve an action kind, for how long, and what runs.
//!
//! One TOML file per kind. A policy that cannot be met, that names an approver the
//! keyring does not know, or that has a schema that does not compile refuses to
//! load, with the file, the line and the fix: the service fails closed rather than
//! guessing. Each loaded policy has a canonical form (JSON, defaults filled in) whose
//! SHA-256 goes into every preview, so approvers sign the rules along with the action.

use crate::ids::{ApproverName, Kind};
use crate::json::{self, PayloadError};
use crate::keyring::Keyring;
use crate::time::Seconds;
use crate::Sha256Hex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use thiserror::Error;

/// Default size limit of a payload's canonical form: 64 KiB.
pub const DEFAULT_MAX_PAYLOAD_BYTES: u64 = 64 * 1024;
/// The largest payload limit a policy may set: 4 MiB.
pub const MAX_MAX_PAYLOAD_BYTES: u64 = 4 * 1024 * 1024;
/// The longest executor time-out a policy may set.
pub const MAX_EXECUTOR_TIMEOUT: Seconds = Seconds::new(3600);

fn default_vetoes() -> u32 {
    1
}
fn default_ttl() -> Seconds {
    Seconds::new(30 * 60)
}
fn default_execute_within() -> Seconds {
    Seconds::new(10 * 60)
}
fn default_max_payload() -> u64 {
    DEFAULT_MAX_PAYLOAD_BYTES
}
fn default_webhook_timeout() -> Seconds {
    Seconds::new(10)
}
fn default_command_timeout() -> Seconds {
    Seconds::new(60)
}

/// A group requirement: at least `count` of `group` must be among the approvers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    /// The approvers of the group.
    pub group: Vec<ApproverName>,
    /// How many of them must approve.
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
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

/// A policy's data in canonical form: what the file says, with defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    /// The action kind it governs.
    pub kind: Kind,
    /// A human description.
    #[serde(default)]
    pub description: String,
    /// Distinct approvers needed.
    pub quorum: u32,
    /// Who may approve.
    pub approvers: Vec<ApproverName>,
    /// Rejections that end the proposal for good.
    #[serde(default = "default_vetoes")]
    pub vetoes: u32,
    /// How long a proposal may wait for quorum.
    #[serde(default = "default_ttl")]
    pub ttl: Seconds,
    /// How long an approval stays executable.
    #[serde(default = "default_execute_within")]
    pub execute_within: Seconds,
    /// How long after quorum the proposal is not yet executable (`cooldown = "60s"`),
    /// so that any approver can still revoke or veto it: defence in depth against an
    /// agent that races a revoke (Safe's delay modules). The cooldown is the first part
    /// of `execute_within`, so it must be shorter. Left out of the canonical form when
    /// unset, so a policy without it keeps its hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown: Option<Seconds>,
    /// Limit on the payload's canonical size in bytes.
    #[serde(default = "default_max_payload")]
    pub max_payload_bytes: u64,
    /// Group requirements.
    #[serde(default)]
    pub require: Vec<Requirement>,
    /// Optional JSON Schema the payload must satisfy.
    #[serde(default)]
    pub payload_schema: Option<Value>,
    /// What execute does.
    pub executor: ExecutorConfig,
    /// Where to tell approvers about its proposals (`[[notify]]`; none: the server's
    /// default channels). Left out of the canonical form when empty, so a policy
    /// without it keeps its hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<crate::notify::NotifyChannel>,
}

/// A loaded, validated policy.
#[derive(Clone)]
pub struct Policy {
    spec: PolicySpec,
    canonical: Value,
    sha256: Sha256Hex,
    schema: Option<Arc<jsonschema::Validator>>,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("spec", &self.spec)
            .field("sha256", &self.sha256)
            .finish()
    }
}

impl PartialEq for Policy {
    fn eq(&self, other: &Self) -> bool {
        self.sha256 == other.sha256
    }
}

/// A policy that was refused: where, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub struct PolicyError {
    /// The file (or `<receipt>` for a policy carried in a receipt).
    pub file: String,
    /// 1-based line, where known.
    pub line: Option<usize>,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file, l, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// The deepest nesting of arrays and objects a payload may have (the payload itself
/// counts as one). Responses wrap the payload in a few more levels, and common JSON
/// readers (serde_json, for one) stop at 128, so a payload must stay well below that for
/// agents and approvers to be able to read it back.
pub const MAX_PAYLOAD_NESTING: usize = 64;

/// The children of an array or object, with their pointer tokens.
type Children<'a> = Box<dyn Iterator<Item = (String, &'a Value)> + 'a>;

fn children(v: &Value) -> Option<Children<'_>> {
    match v {
        Value::Array(a) => Some(Box::new(
            a.iter().enumerate().map(|(i, x)| (i.to_string(), x)),
        )),
        Value::Object(m) => Some(Box::new(m.iter().map(|(k, x)| (k.clone(), x)))),
        _ => None,
    }
}

/// The first array or object nested deeper than `limit`, as a JSON pointer.
///
/// Iterative, so a hostile value cannot exhaust the stack here either, and its memory
/// is bounded by the nesting (one iterator and one pointer per open level), never by
/// the number of values: a wide array of a million members costs no more than a
/// short one.
fn too_deep(v: &Value, limit: usize) -> Option<String> {
    let root = children(v)?;
    if limit == 0 {
        return Some(String::new());
    }
    let mut open: Vec<(String, Children<'_>)> = vec![(String::new(), root)];
    while let Some((ptr, it)) = open.last_mut() {
        let Some((token, child)) = it.next() else {
            open.pop();
            continue;
        };
        if let Some(grand) = children(child) {
            let child_ptr = json::pointer_push(ptr, &token);
            if open.len() + 1 > limit {
                return Some(child_ptr);
            }
            open.push((child_ptr, grand));
        }
    }
    None
}

/// A payload the policy refuses.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PayloadRefusal {
    /// JCS cannot carry it exactly.
    #[error(transparent)]
    Inexact(#[from] PayloadError),
    /// Larger than the policy's `max_payload_bytes`.
    #[error(
        "payload is {size} bytes in canonical form, over this kind's limit of {limit}: send less"
    )]
    TooLarge {
        /// Canonical size.
        size: usize,
        /// The policy's limit.
        limit: u64,
    },
    /// Nested deeper than [`MAX_PAYLOAD_NESTING`] arrays and objects.
    #[error("payload nests more than {limit} arrays/objects deep at {pointer}: flatten it")]
    TooDeep {
        /// JSON pointer of the first value past the limit.
        pointer: String,
        /// The limit.
        limit: usize,
    },
    /// Breaks the policy's `payload_schema`.
    #[error("payload does not match this kind's schema at {pointer}: {message}")]
    Schema {
        /// JSON pointer of the first failing value.
        pointer: String,
        /// The validator's message.
        message: String,
    },
}

impl PayloadRefusal {
    /// The JSON pointer of the offending value (`""` for the whole payload).
    pub fn pointer(&self) -> &str {
        match self {
            PayloadRefusal::Inexact(e) => &e.pointer,
            PayloadRefusal::TooLarge { .. } => "",
            PayloadRefusal::TooDeep { pointer, .. } | PayloadRefusal::Schema { pointer, .. } => {
                pointer
            }
        }
    }
}

/// The 1-based line of the first `key = ...` in TOML text, for error messages.
fn line_of_key(src: &str, key: &str) -> Option<usize> {
    src.lines()
        .position(|l| {
            let l = l.trim_start();
            l.strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
}

/// The 1-based line of `key = ...` inside the table `[table]` (or `[[table]]`).
///
/// [`line_of_key`] finds the first `key =` anywhere, which for a key that is not
/// top-level (`type`, `timeout`) may be the same key inside another table, such as
/// `type = "object"` in `[payload_schema]`.
fn line_in_table(src: &str, table: &str, key: &str) -> Option<usize> {
    let mut current = String::new();
    for (i, l) in src.lines().enumerate() {
        let t = l.trim();
        if t.starts_with('[') {
            current = t
                .trim_start_matches('[')
                .split(']')
                .next()
                .unwrap_or("")
                .trim()
                .to_owned();
            continue;
        }
        if current == table
            && t.strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        {
            return Some(i + 1);
        }
    }
    None
}

/// The 1-based line of the `[table]` header.
fn line_of_table(src: &str, table: &str) -> Option<usize> {
    src.lines()
        .position(|l| {
            l.trim()
                .strip_prefix('[')
                .and_then(|r| r.strip_suffix(']'))
                .is_some_and(|name| name.trim() == table)
        })
        .map(|i| i + 1)
}

/// The 1-based line of the `n`th `[[require]]` header.
fn line_of_require(src: &str, n: usize) -> Option<usize> {
    src.lines()
        .enumerate()
        .filter(|(_, l)| l.trim() == "[[require]]")
        .nth(n)
        .map(|(i, _)| i + 1)
}

fn byte_to_line(src: &str, offset: usize) -> usize {
    src.as_bytes()[..offset.min(src.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

impl Policy {
    /// Parses and validates a policy file's text. `file` names it in errors; when it
    /// ends in `.toml`, its stem must equal the kind (one file per kind, no surprises).
    /// The keyring check is separate ([`Policy::check_keyring`]).
    pub fn parse_toml(file: &str, src: &str) -> Result<Self, PolicyError> {
        let spec: PolicySpec = toml::from_str(src).map_err(|e| PolicyError {
            file: file.to_owned(),
            line: e.span().map(|s| byte_to_line(src, s.start)),
            message: format!("{}; see policies/ for examples", e.message()),
        })?;
        let stem = std::path::Path::new(file)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(file);
        if let Some(stem) = stem.strip_suffix(".toml") {
            if stem != spec.kind.as_str() {
                return Err(PolicyError {
                    file: file.to_owned(),
                    line: line_of_key(src, "kind"),
                    message: format!(
                        "kind {:?} does not match the file name: name the file {}.toml",
                        spec.kind.as_str(),
                        spec.kind
                    ),
                });
            }
        }
        if spec.executor.schema_from_tool() && spec.payload_schema.is_some() {
            return Err(PolicyError {
                file: file.to_owned(),
                line: line_in_table(src, "executor", "payload_schema_from_tool")
                    .or_else(|| line_of_table(src, "payload_schema")),
                message: "payload_schema and executor.payload_schema_from_tool = true are both set: keep one (the tool's inputSchema, or your own schema)".into(),
            });
        }
        Self::from_spec_inner(spec, file, Some(src))
    }

    /// Whether this policy waits for its payload schema from a downstream tool
    /// (`payload_schema_from_tool = true`, not fetched yet): such a policy is never
    /// enabled, so no payload goes unchecked.
    pub fn needs_tool_schema(&self) -> bool {
        self.spec.executor.schema_from_tool() && self.spec.payload_schema.is_none()
    }

    /// This policy with the payload schema fetched from its downstream tool.
    pub fn with_tool_schema(&self, schema: Value) -> Result<Self, PolicyError> {
        let mut spec = self.spec.clone();
        spec.payload_schema = Some(schema);
        Self::from_spec_inner(spec, "<tool inputSchema>", None)
    }

    /// Validates a policy given in canonical JSON form (as carried by a receipt).
    pub fn from_canonical_json(v: &Value) -> Result<Self, PolicyError> {
        let spec: PolicySpec = serde_json::from_value(v.clone()).map_err(|e| PolicyError {
            file: "<receipt>".into(),
            line: None,
            message: format!("invalid policy: {e}"),
        })?;
        Self::from_spec_inner(spec, "<receipt>", None)
    }

    /// Validates a spec.
    pub fn from_spec(spec: PolicySpec) -> Result<Self, PolicyError> {
        Self::from_spec_inner(spec, "<policy>", None)
    }

    fn from_spec_inner(
        spec: PolicySpec,
        file: &str,
        src: Option<&str>,
    ) -> Result<Self, PolicyError> {
        let at = |key: &str| src.and_then(|s| line_of_key(s, key));
        let err = |line: Option<usize>, message: String| PolicyError {
            file: file.to_owned(),
            line,
            message,
        };
        let n = spec.approvers.len() as u32;
        if spec.approvers.is_empty() {
            return Err(err(
                at("approvers"),
                "approvers is empty: name at least one approver from the keyring".into(),
            ));
        }
        let mut seen = BTreeSet::new();
        for a in &spec.approvers {
            if !seen.insert(a) {
                return Err(err(
                    at("approvers"),
                    format!("approver \"{a}\" is listed twice: list each once"),
                ));
            }
        }
        if spec.quorum < 1 || spec.quorum > n {
            return Err(err(
                at("quorum"),
                format!(
                    "quorum = {} cannot be met with {n} approvers: set 1 ≤ quorum ≤ {n}",
                    spec.quorum
                ),
            ));
        }
        if spec.vetoes < 1 || spec.vetoes > n {
            return Err(err(
                at("vetoes"),
                format!(
                    "vetoes = {} must be between 1 and the number of approvers ({n})",
                    spec.vetoes
                ),
            ));
        }
        if let Some(c) = spec.cooldown {
            if c >= spec.execute_within {
                return Err(err(
                    at("cooldown"),
                    format!(
                        "cooldown = \"{c}\" must be shorter than execute_within = \"{}\": the execution window counts from quorum and the cooldown is its first part; shorten the cooldown or lengthen execute_within",
                        spec.execute_within
                    ),
                ));
            }
        }
        if spec.max_payload_bytes < 2 || spec.max_payload_bytes > MAX_MAX_PAYLOAD_BYTES {
            return Err(err(
                at("max_payload_bytes"),
                format!(
                    "max_payload_bytes = {} must be between 2 and {MAX_MAX_PAYLOAD_BYTES}",
                    spec.max_payload_bytes
                ),
            ));
        }
        for (i, r) in spec.require.iter().enumerate() {
            let line = src.and_then(|s| line_of_require(s, i));
            if r.group.is_empty() {
                return Err(err(
                    line,
                    "require.group is empty: name at least one approver".into(),
                ));
            }
            let mut g = BTreeSet::new();
            for m in &r.group {
                if !spec.approvers.contains(m) {
                    return Err(err(line, format!("require.group names \"{m}\", who is not in approvers: add them to approvers")));
                }
                if !g.insert(m) {
                    return Err(err(line, format!("require.group lists \"{m}\" twice")));
                }
            }
            if r.count < 1 || r.count as usize > r.group.len() {
                return Err(err(
                    line,
                    format!(
                        "require.count = {} cannot be met by a group of {}: set 1 ≤ count ≤ {}",
                        r.count,
                        r.group.len(),
                        r.group.len()
                    ),
                ));
            }
        }
        check_executor(&spec.executor).map_err(|(table, key, m)| {
            let line = src.and_then(|s| {
                line_in_table(s, table, &key)
                    .or_else(|| line_in_table(s, table, &format!("{key:?}")))
                    .or_else(|| line_of_table(s, table))
                    .or_else(|| line_in_table(s, "executor", table.trim_start_matches("executor.")))
                    .or_else(|| line_of_table(s, "executor"))
                    .or_else(|| line_of_key(s, "executor"))
            });
            err(line, m)
        })?;
        for n in &spec.notify {
            n.check().map_err(|m| {
                err(
                    src.and_then(|s| {
                        line_of_table(s, "[notify]").or_else(|| line_of_key(s, "notify"))
                    }),
                    m,
                )
            })?;
        }
        let schema = match &spec.payload_schema {
            None => None,
            Some(s) => Some(Arc::new(jsonschema::validator_for(s).map_err(|e| {
                err(
                    src.and_then(|s| {
                        line_of_table(s, "payload_schema")
                            .or_else(|| line_of_key(s, "payload_schema"))
                    }),
                    format!("payload_schema does not compile: {e}"),
                )
            })?)),
        };
        let canonical = serde_json::to_value(&spec)
            .map_err(|e| err(None, format!("policy cannot be serialised: {e}")))?;
        json::check_value(&canonical).map_err(|e| {
            err(
                None,
                format!("policy holds a value JSON cannot carry exactly: {e}"),
            )
        })?;
        let sha256 = Sha256Hex::digest(&json::canonical_bytes(&canonical));
        Ok(Self {
            spec,
            canonical,
            sha256,
            schema,
        })
    }

    /// Refuses a policy whose approvers are not all in the keyring.
    pub fn check_keyring(
        &self,
        keyring: &Keyring,
        file: &str,
        src: Option<&str>,
    ) -> Result<(), PolicyError> {
        for a in &self.spec.approvers {
            if !keyring.contains(a) {
                return Err(PolicyError {
                    file: file.to_owned(),
                    line: src.and_then(|s| line_of_key(s, "approvers")),
                    message: format!("approver \"{a}\" is not in the keyring: add their line from `signer-cli keygen` or remove them"),
                });
            }
        }
        Ok(())
    }

    /// The policy's data.
    pub fn spec(&self) -> &PolicySpec {
        &self.spec
    }

    /// The kind it governs.
    pub fn kind(&self) -> &Kind {
        &self.spec.kind
    }

    /// The canonical JSON form (what receipts carry and the hash covers).
    pub fn canonical_json(&self) -> &Value {
        &self.canonical
    }

    /// `policy_sha256`.
    pub fn sha256(&self) -> Sha256Hex {
        self.sha256
    }

    /// Whether `name` may decide on this kind.
    pub fn is_approver(&self, name: &ApproverName) -> bool {
        self.spec.approvers.contains(name)
    }

    /// Checks a payload: exact JSON, size of its canonical form, schema.
    pub fn check_payload(&self, payload: &Value) -> Result<(), PayloadRefusal> {
        json::check_value(payload)?;
        if let Some(pointer) = too_deep(payload, MAX_PAYLOAD_NESTING) {
            return Err(PayloadRefusal::TooDeep {
                pointer,
                limit: MAX_PAYLOAD_NESTING,
            });
        }
        let size = json::canonical_bytes(payload).len();
        if size as u64 > self.spec.max_payload_bytes {
            return Err(PayloadRefusal::TooLarge {
                size,
                limit: self.spec.max_payload_bytes,
            });
        }
        if self.spec.executor.mcp_tool().is_some() && !payload.is_object() {
            return Err(PayloadRefusal::Schema {
                pointer: String::new(),
                message: "this kind calls a downstream MCP tool, whose arguments are a JSON object: send an object".into(),
            });
        }
        if let Some(schema) = &self.schema {
            if let Some(e) = schema.iter_errors(payload).next() {
                return Err(PayloadRefusal::Schema {
                    pointer: e.instance_path().to_string(),
                    message: e.to_string(),
                });
            }
        }
        Ok(())
    }
}

/// Checks an executor table. A refusal names the table and the key at fault (for
/// the line number) and says what to do.
fn check_executor(e: &ExecutorConfig) -> Result<(), (&'static str, String, String)> {
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
            let rest = url
                .strip_prefix("https://")
                .or_else(|| url.strip_prefix("http://"));
            if !rest.is_some_and(|r| {
                !r.is_empty()
                    && !r.starts_with('/')
                    && !url.chars().any(|c| c.is_whitespace() || c.is_control())
            }) {
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
                let name_ok = !k.is_empty()
                    && k.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                if !name_ok || v.chars().any(|c| c.is_control()) {
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
                let name_ok = !k.is_empty()
                    && k.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                if !name_ok || !is_env_name(v) {
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

fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A kind whose policy names approvers the keyring does not hold: it cannot be
/// prepared until its policy or the keyring is fixed.
///
/// Removing a compromised key must take effect at once, so a keyring that lacks one
/// of a policy's approvers does not keep the old keyring in force (failing open, the
/// removed key still approving); it disables that one kind instead (failing closed).
/// The policy itself is kept private: a disabled kind has no [`Policy`] anyone can
/// prepare or count under, so the state "disabled but preparable" cannot be built.
#[derive(Debug, Clone)]
pub struct DisabledKind {
    policy: Arc<Policy>,
    file: String,
    line: Option<usize>,
    missing: Vec<ApproverName>,
    /// Set when the kind waits for its payload schema from a downstream MCP tool
    /// (`payload_schema_from_tool = true`) that could not be fetched: why.
    downstream: Option<String>,
}

impl DisabledKind {
    /// The kind.
    pub fn kind(&self) -> &Kind {
        self.policy.kind()
    }

    /// The policy file that names the missing approvers.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The approvers the policy names that are not in the keyring, in policy order.
    pub fn missing(&self) -> &[ApproverName] {
        &self.missing
    }

    /// Why the downstream tool's schema could not be had, when that is what disables
    /// the kind.
    pub fn downstream(&self) -> Option<&str> {
        self.downstream.as_deref()
    }

    /// Why the kind is disabled and how to enable it again, in one sentence.
    pub fn reason(&self) -> String {
        if let (Some(why), true) = (&self.downstream, self.missing.is_empty()) {
            return format!(
                "kind {} is disabled: its policy takes the payload schema from the downstream tool {:?} (payload_schema_from_tool = true), which could not be read: {why}; \
                 make the downstream server reachable (or set payload_schema yourself in {}), then reload",
                self.kind(),
                self.policy.spec().executor.mcp_tool().unwrap_or(""),
                self.file
            );
        }
        let names = self
            .missing
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "kind {} is disabled: its policy names approver(s) {names} who are not in the keyring; \
             remove them from approvers (and require groups) in {} or add their key back, then reload",
            self.kind(),
            self.file
        )
    }

    /// The same as a policy error with the file and the `approvers` line, for a strict
    /// check (`approval-server check`) that must fail while any kind is disabled.
    pub fn to_error(&self) -> PolicyError {
        if self.missing.is_empty() {
            return PolicyError {
                file: self.file.clone(),
                line: None,
                message: self.reason(),
            };
        }
        let names = self
            .missing
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ");
        PolicyError {
            file: self.file.clone(),
            line: self.line,
            message: format!(
                "approver {names} is not in the keyring: add their line from `signer-cli keygen` or remove them (until then kind {} is disabled)",
                self.kind()
            ),
        }
    }
}

/// Where a policy was loaded from, kept so a later keyring can disable it by name.
#[derive(Debug, Clone)]
struct Source {
    file: String,
    approvers_line: Option<usize>,
}

/// Every policy in force, by kind, and the kinds disabled because their policy names
/// an approver the keyring lacks ([`DisabledKind`]).
#[derive(Debug, Clone, Default)]
pub struct PolicySet {
    by_kind: BTreeMap<Kind, Arc<Policy>>,
    disabled: BTreeMap<Kind, DisabledKind>,
    sources: BTreeMap<Kind, Source>,
}

/// What a kind is under a [`PolicySet`].
#[derive(Debug, Clone, Copy)]
pub enum KindState<'a> {
    /// Its policy is in force.
    Enabled(&'a Arc<Policy>),
    /// It has a policy, but the keyring lacks some of its approvers.
    Disabled(&'a DisabledKind),
    /// No policy names it.
    Unknown,
}

impl PolicySet {
    /// Loads policies from `(file name, text)` pairs and checks them against the
    /// keyring. Every error is returned, so `approval-server check` can list them all.
    /// Strict: a policy naming an approver the keyring lacks is an error here (see
    /// [`PolicySet::load_disabling`] for what the server does instead).
    pub fn load(files: &[(String, String)], keyring: &Keyring) -> Result<Self, Vec<PolicyError>> {
        let (set, errors) = Self::load_inner(files, keyring);
        if errors.is_empty() {
            Ok(set)
        } else {
            Err(errors.into_iter().map(|(e, _)| e).collect())
        }
    }

    /// Loads what it can: a policy that does not parse or validate, or a second file
    /// for one kind, is still an error (the whole load is refused, as with
    /// [`PolicySet::load`]), but a policy whose approvers are not all in the keyring
    /// loads as a [`DisabledKind`] instead of failing the load. This is what the server
    /// runs at start and on reload, so that a key removed from the keyring stops
    /// counting at once even while a policy still names it.
    pub fn load_disabling(
        files: &[(String, String)],
        keyring: &Keyring,
    ) -> Result<Self, Vec<PolicyError>> {
        let (set, errors) = Self::load_inner(files, keyring);
        let fatal: Vec<PolicyError> = errors
            .into_iter()
            .filter(|(_, fatal)| *fatal)
            .map(|(e, _)| e)
            .collect();
        if fatal.is_empty() {
            Ok(set)
        } else {
            Err(fatal)
        }
    }

    /// The set, and every error in file order, each marked fatal (the file is refused)
    /// or not (its kind is only disabled for lack of keys).
    fn load_inner(
        files: &[(String, String)],
        keyring: &Keyring,
    ) -> (Self, Vec<(PolicyError, bool)>) {
        let mut all: BTreeMap<Kind, (Arc<Policy>, Source)> = BTreeMap::new();
        let mut errors = Vec::new();
        for (file, src) in files {
            let p = match Policy::parse_toml(file, src) {
                Ok(p) => p,
                Err(e) => {
                    errors.push((e, true));
                    continue;
                }
            };
            if let Err(e) = p.check_keyring(keyring, file, Some(src)) {
                errors.push((e, false));
            }
            if let Some((_, first)) = all.get(p.kind()) {
                errors.push((
                    PolicyError {
                        file: file.clone(),
                        line: line_of_key(src, "kind"),
                        message: format!(
                            "kind {:?} is already defined in {}: one file per kind",
                            p.kind().as_str(),
                            first.file
                        ),
                    },
                    true,
                ));
                continue;
            }
            let source = Source {
                file: file.clone(),
                approvers_line: line_of_key(src, "approvers"),
            };
            all.insert(p.kind().clone(), (Arc::new(p), source));
        }
        (Self::partition(all, keyring), errors)
    }

    /// Splits policies into enabled and disabled under `keyring`.
    fn partition(all: BTreeMap<Kind, (Arc<Policy>, Source)>, keyring: &Keyring) -> Self {
        let mut set = Self::default();
        for (kind, (policy, source)) in all {
            let missing: Vec<ApproverName> = policy
                .spec()
                .approvers
                .iter()
                .filter(|a| !keyring.contains(a))
                .cloned()
                .collect();
            if missing.is_empty() && policy.needs_tool_schema() {
                // Never enabled without the schema it was written to enforce.
                set.disabled.insert(
                    kind.clone(),
                    DisabledKind {
                        policy,
                        file: source.file.clone(),
                        line: source.approvers_line,
                        missing,
                        downstream: Some("its inputSchema has not been fetched yet".into()),
                    },
                );
            } else if missing.is_empty() {
                set.by_kind.insert(kind.clone(), policy);
            } else {
                set.disabled.insert(
                    kind.clone(),
                    DisabledKind {
                        policy,
                        file: source.file.clone(),
                        line: source.approvers_line,
                        missing,
                        downstream: None,
                    },
                );
            }
            set.sources.insert(kind, source);
        }
        set
    }

    /// The same policies checked against another keyring: kinds whose approvers are
    /// now missing become disabled, disabled kinds whose approvers are all back become
    /// enabled. For a reload whose keyring is readable but whose policies are not: the
    /// new keyring still takes effect, over the policies already in force.
    pub fn rechecked(&self, keyring: &Keyring) -> Self {
        let mut all = BTreeMap::new();
        for (kind, p) in &self.by_kind {
            if let Some(src) = self.sources.get(kind) {
                all.insert(kind.clone(), (p.clone(), src.clone()));
            }
        }
        for (kind, d) in &self.disabled {
            if let Some(src) = self.sources.get(kind) {
                all.insert(kind.clone(), (d.policy.clone(), src.clone()));
            }
        }
        Self::partition(all, keyring)
    }

    /// The policies that wait for their payload schema from a downstream MCP tool
    /// (`payload_schema_from_tool = true`) and have all their approvers: the server
    /// fetches each tool's `inputSchema` and passes the answers to
    /// [`PolicySet::with_tool_schemas`].
    pub fn awaiting_tool_schema(&self) -> impl Iterator<Item = &Policy> {
        self.disabled
            .values()
            .filter(|d| d.missing.is_empty() && d.policy.needs_tool_schema())
            .map(|d| d.policy.as_ref())
    }

    /// This set with the downstream tools' input schemas: a kind whose schema arrived
    /// (and compiles) is enabled under a policy whose `payload_schema` is that schema;
    /// one whose fetch failed stays disabled with the reason. Kinds not named are
    /// unchanged.
    pub fn with_tool_schemas(&self, fetched: BTreeMap<Kind, Result<Value, String>>) -> Self {
        let mut set = self.clone();
        for (kind, answer) in fetched {
            let Some(d) = set.disabled.get_mut(&kind) else {
                continue;
            };
            if !d.missing.is_empty() || !d.policy.needs_tool_schema() {
                continue;
            }
            match answer.and_then(|schema| {
                d.policy.with_tool_schema(schema).map_err(|e| {
                    format!(
                        "the tool's inputSchema is not a usable JSON Schema: {}",
                        e.message
                    )
                })
            }) {
                Ok(p) => {
                    set.disabled.remove(&kind);
                    set.by_kind.insert(kind, Arc::new(p));
                }
                Err(why) => d.downstream = Some(why),
            }
        }
        set
    }

    /// The policy for a kind, if it is enabled. A disabled kind has none.
    pub fn get(&self, kind: &Kind) -> Option<&Arc<Policy>> {
        self.by_kind.get(kind)
    }

    /// Whether a kind is enabled, disabled (and why) or unknown.
    pub fn state(&self, kind: &Kind) -> KindState<'_> {
        match (self.by_kind.get(kind), self.disabled.get(kind)) {
            (Some(p), _) => KindState::Enabled(p),
            (None, Some(d)) => KindState::Disabled(d),
            (None, None) => KindState::Unknown,
        }
    }

    /// All enabled policies, sorted by kind.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Policy>> {
        self.by_kind.values()
    }

    /// The disabled kinds, sorted by kind.
    pub fn disabled(&self) -> impl Iterator<Item = &DisabledKind> {
        self.disabled.values()
    }

    /// Number of enabled kinds.
    pub fn len(&self) -> usize {
        self.by_kind.len()
    }

    /// Whether no kind is enabled.
    pub fn is_empty(&self) -> bool {
        self.by_kind.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyring::PublicKey;
    use ed25519_dalek::SigningKey;
    use serde_json::json;

    pub(crate) fn keyring() -> Keyring {
        let mut text = String::new();
        for (i, n) in ["alice", "bob", "carol"].iter().enumerate() {
            let pk = PublicKey::from_signing_key(&SigningKey::from_bytes(&[i as u8 + 1; 32]));
            text.push_str(&format!("{n} ed25519 {pk}\n"));
        }
        Keyring::parse(&text).unwrap()
    }

    const GOOD: &str = r#"kind = "email.send"
description = "Send an email"
quorum = 2
approvers = ["alice", "bob", "carol"]
ttl = "30m"
execute_within = "10m"
[[require]]
group = ["carol"]
count = 1
[payload_schema]
type = "object"
required = ["to", "subject"]
[executor]
type = "note"
"#;

    fn parse(src: &str) -> Result<Policy, PolicyError> {
        Policy::parse_toml("email.send.toml", src)
    }

    #[test]
    fn good_policy_loads_with_defaults() {
        let p = parse(GOOD).unwrap();
        assert_eq!(p.spec().vetoes, 1);
        assert_eq!(p.spec().max_payload_bytes, 65536);
        assert_eq!(p.canonical_json()["ttl"], json!("30m"));
        assert_eq!(
            p.canonical_json()["executor"],
            json!({"type": "note", "dir": null})
        );
        let back = Policy::from_canonical_json(p.canonical_json()).unwrap();
        assert_eq!(back.sha256(), p.sha256());
        assert!(p.check_keyring(&keyring(), "f", None).is_ok());
    }

    #[test]
    fn hash_ignores_formatting_but_not_content() {
        let reformatted = GOOD
            .replace("quorum = 2", "quorum=2   # two")
            .replace("ttl = \"30m\"", "ttl = \"1800s\"");
        assert_eq!(
            parse(&reformatted).unwrap().sha256(),
            parse(GOOD).unwrap().sha256()
        );
        assert_ne!(
            parse(&GOOD.replace("quorum = 2", "quorum = 3"))
                .unwrap()
                .sha256(),
            parse(GOOD).unwrap().sha256()
        );
    }

    fn err_of(src: &str) -> PolicyError {
        parse(src).unwrap_err()
    }

    #[test]
    fn refusals_name_line_and_fix() {
        let e = err_of(&GOOD.replace("quorum = 2", "quorum = 4"));
        assert_eq!(e.line, Some(3));
        assert!(e.message.contains("cannot be met with 3 approvers"), "{e}");
        assert_eq!(
            err_of(&GOOD.replace("quorum = 2", "quorum = 0")).line,
            Some(3)
        );
        let e = err_of(&GOOD.replace("count = 1", "count = 2"));
        assert_eq!(
            (e.line, e.message.contains("cannot be met by a group of 1")),
            (Some(7), true),
            "{e}"
        );
        let e = err_of(&GOOD.replace("group = [\"carol\"]", "group = [\"dave\"]"));
        assert!(e.message.contains("not in approvers"), "{e}");
        let e = err_of(&GOOD.replace("ttl = \"30m\"", "ttl = \"30 minutes\""));
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.message.contains("invalid duration"), "{e}");
        let e = err_of(&GOOD.replace("quorum = 2", "quorum = 2\nquorom = 2"));
        assert_eq!(e.line, Some(4), "{e}");
        let e = err_of(&GOOD.replace("type = \"object\"", "type = \"objekt\""));
        assert!(e.message.contains("payload_schema does not compile"), "{e}");
        assert_eq!(e.line, Some(10));
        let e = err_of(&GOOD.replace("type = \"note\"", "type = \"shell\""));
        assert!(e.message.contains("shell"), "{e}");
        let e = err_of(&GOOD.replace("type = \"note\"", "type = \"command\"\nprogram = \"ls\""));
        assert!(e.message.contains("absolute path"), "{e}");
        let e = err_of(&GOOD.replace("type = \"note\"", "type = \"webhook\"\nurl = \"ftp://x\""));
        assert!(e.message.contains("http:// or https://"), "{e}");
        let e = err_of(&GOOD.replace("\"alice\", \"bob\"", "\"alice\", \"alice\""));
        assert!(e.message.contains("listed twice"), "{e}");
        let e = Policy::parse_toml("other.toml", GOOD).unwrap_err();
        assert!(e.message.contains("name the file email.send.toml"), "{e}");
        let e = err_of(&GOOD.replace("[executor]\ntype = \"note\"\n", ""));
        assert!(e.message.contains("executor"), "{e}");
    }

    #[test]
    fn keyring_membership_and_duplicate_kinds() {
        let kr = Keyring::parse(
            &keyring()
                .iter()
                .take(2)
                .map(|(n, k)| Keyring::line(n, k) + "\n")
                .collect::<String>(),
        )
        .unwrap();
        let errs = PolicySet::load(&[("email.send.toml".into(), GOOD.into())], &kr).unwrap_err();
        assert!(
            errs[0].message.contains("\"carol\" is not in the keyring"),
            "{}",
            errs[0]
        );
        assert_eq!(errs[0].line, Some(4));
        let errs = PolicySet::load(
            &[
                ("email.send.toml".into(), GOOD.into()),
                ("x/email.send.toml".into(), GOOD.into()),
            ],
            &keyring(),
        )
        .unwrap_err();
        assert!(errs[0].message.contains("already defined"), "{}", errs[0]);
        let set = PolicySet::load(&[("email.send.toml".into(), GOOD.into())], &keyring()).unwrap();
        assert!(set.get(&Kind::parse("email.send").unwrap()).is_some());
        assert!(set.get(&Kind::parse("email.sned").unwrap()).is_none());
    }

    #[test]
    fn a_missing_approver_disables_only_that_kind() {
        let two = Keyring::parse(
            &keyring()
                .iter()
                .take(2)
                .map(|(n, k)| Keyring::line(n, k) + "\n")
                .collect::<String>(),
        )
        .unwrap();
        let other = GOOD
            .replace("email.send", "note.write")
            .replace("\"alice\", \"bob\", \"carol\"", "\"alice\", \"bob\"")
            .replace("[[require]]\ngroup = [\"carol\"]\ncount = 1\n", "");
        let files = [
            ("email.send.toml".to_owned(), GOOD.to_owned()),
            ("note.write.toml".to_owned(), other),
        ];
        let set = PolicySet::load_disabling(&files, &two).unwrap();
        let email = Kind::parse("email.send").unwrap();
        let note = Kind::parse("note.write").unwrap();
        assert!(
            set.get(&email).is_none(),
            "a disabled kind has no policy to prepare under"
        );
        assert!(matches!(set.state(&note), KindState::Enabled(_)));
        let KindState::Disabled(d) = set.state(&email) else {
            panic!("email.send should be disabled");
        };
        assert_eq!(d.missing(), [ApproverName::parse("carol").unwrap()]);
        assert!(
            d.reason().contains("kind email.send is disabled"),
            "{}",
            d.reason()
        );
        assert!(d.reason().contains("\"carol\""), "{}", d.reason());
        assert_eq!(set.disabled().count(), 1);
        assert_eq!(set.len(), 1);
        // The strict load still refuses, naming the file, the line and the approver.
        let errs = PolicySet::load(&files, &two).unwrap_err();
        assert_eq!(
            (errs[0].file.as_str(), errs[0].line),
            ("email.send.toml", Some(4))
        );
        // Parse errors still refuse the whole load.
        assert!(PolicySet::load_disabling(&[("x.toml".into(), "kind = ".into())], &two).is_err());
        // The key coming back re-enables the kind; going again disables it.
        let back = set.rechecked(&keyring());
        assert!(back.get(&email).is_some() && back.disabled().count() == 0);
        let again = back.rechecked(&two);
        assert!(again.get(&email).is_none());
        assert_eq!(
            again.disabled().next().map(|d| d.file()),
            Some("email.send.toml")
        );
    }

    #[test]
    fn payload_checks() {
        let p = parse(GOOD).unwrap();
        assert!(p.check_payload(&json!({"to": "a", "subject": "b"})).is_ok());
        let e = p.check_payload(&json!({"to": "a"})).unwrap_err();
        assert!(matches!(e, PayloadRefusal::Schema { .. }), "{e}");
        let small = parse(&GOOD.replace("ttl =", "max_payload_bytes = 40\nttl =")).unwrap();
        let e = small
            .check_payload(&json!({"to": "a", "subject": "x".repeat(40)}))
            .unwrap_err();
        assert!(
            matches!(e, PayloadRefusal::TooLarge { limit: 40, .. }),
            "{e}"
        );
        let e = p
            .check_payload(&json!({"to": 9007199254740993u64, "subject": "b"}))
            .unwrap_err();
        assert_eq!(e.pointer(), "/to");
    }

    #[test]
    fn payload_nesting_is_limited_so_answers_stay_readable() {
        let p = parse(GOOD).unwrap();
        let nest = |n: usize| -> Value {
            let mut v = json!(1);
            for _ in 0..n {
                v = json!([v]);
            }
            json!({"to": "a", "subject": "b", "deep": v})
        };
        assert!(p.check_payload(&nest(MAX_PAYLOAD_NESTING - 1)).is_ok());
        let e = p.check_payload(&nest(MAX_PAYLOAD_NESTING)).unwrap_err();
        assert!(
            matches!(
                e,
                PayloadRefusal::TooDeep {
                    limit: MAX_PAYLOAD_NESTING,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            e.pointer(),
            format!("/deep{}", "/0".repeat(MAX_PAYLOAD_NESTING - 1))
        );
    }

    fn mcp_policy(executor: &str) -> String {
        format!(
            "kind = \"fs.write\"\nquorum = 1\napprovers = [\"alice\"]\n[executor]\ntype = \"mcp\"\n{executor}"
        )
    }

    #[test]
    fn mcp_executor_loads_and_refuses_what_cannot_run() {
        let ok = Policy::parse_toml(
            "fs.write.toml",
            &mcp_policy("command = [\"node\", \"server.js\", \"/srv\"]\ntool = \"write_file\"\nenv_from = { API_TOKEN = \"FS_TOKEN\" }\n"),
        )
        .unwrap();
        assert_eq!(ok.spec().executor.mcp_tool(), Some("write_file"));
        assert_eq!(ok.canonical_json()["executor"]["timeout"], json!("1m"));
        assert!(ok.canonical_json()["executor"].get("url").is_none());
        let refused = |exec: &str, needle: &str| {
            let e = Policy::parse_toml("fs.write.toml", &mcp_policy(exec)).unwrap_err();
            assert!(e.message.contains(needle), "{exec}: {e}");
            assert!(e.line.is_some(), "{exec}: {e}");
        };
        refused("tool = \"t\"\n", "exactly one of command");
        refused(
            "command = [\"x\"]\nurl = \"http://h/mcp\"\ntool = \"t\"\n",
            "exactly one of command",
        );
        refused("command = []\ntool = \"t\"\n", "command is empty");
        refused("url = \"ftp://h\"\ntool = \"t\"\n", "http:// or https://");
        refused("command = [\"x\"]\ntool = \"\"\n", "executor.tool");
        // A secret written into a policy (which approvers read) is refused: only names.
        refused(
            "command = [\"x\"]\ntool = \"t\"\nenv_from = { API_TOKEN = \"sk-live 123\" }\n",
            "never a secret",
        );
        refused(
            "url = \"https://h/mcp\"\ntool = \"t\"\nheaders_from = { Authorization = \"Bearer abc\" }\n",
            "never a secret",
        );
        refused(
            "url = \"https://h/mcp\"\ntool = \"t\"\nenv_from = { A = \"B\" }\n",
            "env_from is for command servers",
        );
        refused("command = [\"x\"]\ntool = \"t\"\ntimeout = \"2h\"\n", "1h");
        let both = format!(
            "{}payload_schema_from_tool = true\n[payload_schema]\ntype = \"object\"\n",
            mcp_policy("command = [\"x\"]\ntool = \"t\"\n")
        );
        let e = Policy::parse_toml("fs.write.toml", &both).unwrap_err();
        assert!(e.message.contains("keep one"), "{e}");
    }

    #[test]
    fn payload_schema_from_tool_is_disabled_until_the_schema_arrives() {
        let src = mcp_policy(
            "command = [\"x\"]\ntool = \"write_file\"\npayload_schema_from_tool = true\n",
        );
        let files = vec![("fs.write.toml".to_owned(), src)];
        let set = PolicySet::load_disabling(&files, &keyring()).unwrap();
        let kind = Kind::parse("fs.write").unwrap();
        // Never enabled without its schema: no payload goes unchecked.
        assert!(set.get(&kind).is_none());
        assert_eq!(set.awaiting_tool_schema().count(), 1);
        let failed = set.with_tool_schemas(BTreeMap::from([(
            kind.clone(),
            Err("cannot start x: not found".to_owned()),
        )]));
        let KindState::Disabled(d) = failed.state(&kind) else {
            panic!("should stay disabled")
        };
        assert!(d.reason().contains("cannot start x"), "{}", d.reason());
        assert!(d.reason().contains("write_file"), "{}", d.reason());
        let schema = json!({"type": "object", "required": ["path"], "properties": {"path": {"type": "string"}}});
        let ok = set.with_tool_schemas(BTreeMap::from([(kind.clone(), Ok(schema.clone()))]));
        let p = ok.get(&kind).expect("enabled once the schema arrived");
        assert_eq!(p.canonical_json()["payload_schema"], schema);
        assert!(p.check_payload(&json!({"path": "a"})).is_ok());
        assert!(matches!(
            p.check_payload(&json!({"content": "a"})),
            Err(PayloadRefusal::Schema { .. })
        ));
        // A tool's arguments are an object, whatever the schema says.
        assert!(matches!(
            p.check_payload(&json!(["a"])),
            Err(PayloadRefusal::Schema { .. })
        ));
        // The policy carried in a receipt (schema filled in) still validates.
        assert!(Policy::from_canonical_json(p.canonical_json()).is_ok());
        // A keyring reload keeps the fetched schema.
        assert!(ok.rechecked(&keyring()).get(&kind).is_some());
        let bad = set.with_tool_schemas(BTreeMap::from([(kind.clone(), Ok(json!({"type": 7})))]));
        assert!(bad.get(&kind).is_none());
    }
}
