//! A loaded policy: parsed, validated (quorum, vetoes, groups, executor, notify
//! channels, schema), with its canonical form and `policy_sha256`. Imports
//! `toml_lines`, `executor`, `spec` and `payload`.

use super::executor::check_executor;
#[cfg(feature = "payload-schema")]
use super::payload::{self, PayloadRefusal};
use super::spec::{PolicySpec, MAX_MAX_PAYLOAD_BYTES};
use super::toml_lines::{byte_to_line, line_in_table, line_of_key, line_of_require, line_of_table};
use crate::ids::{ApproverName, Kind, Sha256Hex};
use crate::json;
use crate::keyring::Keyring;
use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt;
#[cfg(feature = "payload-schema")]
use std::sync::Arc;
use thiserror::Error;

/// A loaded, validated policy.
///
/// Without the `payload-schema` feature (signer-cli's build) `payload_schema` is
/// carried and hashed like every other field but not compiled, and there is no
/// [`Policy::check_payload`]: such a build reads policies to show, hash and count,
/// and can never admit a payload it did not check.
#[derive(Clone)]
pub struct Policy {
    spec: PolicySpec,
    canonical: Value,
    sha256: Sha256Hex,
    #[cfg(feature = "payload-schema")]
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
        // The gate's own kinds (`gate.config`) and its own executor come only from
        // `root.toml` (crate::governance), never from a file an operator can edit.
        if spec.kind.as_str().starts_with(super::RESERVED_KIND_PREFIX)
            || spec.executor == super::ExecutorConfig::Gate
        {
            return Err(PolicyError {
                file: file.to_owned(),
                line: line_of_key(src, "kind").or_else(|| line_in_table(src, "executor", "type")),
                message: format!(
                    "kinds starting with {:?} and executor type \"gate\" are the gate's own (configuration changes, set by root.toml): choose another kind and executor",
                    super::RESERVED_KIND_PREFIX
                ),
            });
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
                "approvers is empty: name at least one approver from the keyring, e.g. approvers = [\"alice\", \"bob\"] (each approver runs `signer-cli keygen --name NAME` and sends you the line for the keys file), and set quorum".into(),
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
        if spec.accept.is_empty() || spec.accept.windows(2).any(|w| w[0] >= w[1]) {
            return Err(err(
                at("accept"),
                "accept must list \"key\", \"passkey\" or both, each once, in that order: e.g. accept = [\"key\", \"passkey\"]".into(),
            ));
        }
        check_tools(&spec).map_err(|(key, m)| err(at(key), m))?;
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
        #[cfg(feature = "payload-schema")]
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
            #[cfg(feature = "payload-schema")]
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
            let creds = keyring.credentials(a);
            if creds.is_empty() {
                return Err(PolicyError {
                    file: file.to_owned(),
                    line: src.and_then(|s| line_of_key(s, "approvers")),
                    message: format!("approver \"{a}\" is not in the keyring: add their line from `signer-cli keygen` or remove them"),
                });
            }
            if let Some(key) = creds
                .first()
                .filter(|_| !creds.iter().any(|k| self.accepts(k.kind())))
            {
                return Err(PolicyError {
                    file: file.to_owned(),
                    line: src.and_then(|s| line_of_key(s, "accept").or_else(|| line_of_key(s, "approvers"))),
                    message: format!(
                        "approver \"{a}\" signs with a {}, which this policy does not accept (accept = {:?}): add \"{}\" to accept, or give them a line of a kind it accepts",
                        key.kind(),
                        self.spec.accept.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
                        key.kind()
                    ),
                });
            }
            let touchable = |k: &crate::approver_key::ApproverKey| {
                self.accepts(k.kind())
                    && (k.as_passkey().is_some() || k.as_ssh().is_some_and(|s| s.is_sk()))
            };
            if (self.spec.require_touch || self.spec.require_verify) && !creds.iter().any(touchable)
            {
                let which = if self.spec.require_verify {
                    "require_verify"
                } else {
                    "require_touch"
                };
                return Err(PolicyError {
                    file: file.to_owned(),
                    line: src.and_then(|s| line_of_key(s, which).or_else(|| line_of_key(s, "approvers"))),
                    message: format!(
                        "approver \"{a}\" holds no security key (sk-ssh-ed25519@openssh.com) or accepted passkey, and this policy has {which} = true, so they could never count: give them such a line, or remove {which}"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Why `require_touch` / `require_verify` refuse a proof, or `None` when they take
    /// it (or are off). Read from the proof before it is verified; it counts only
    /// once it verified, so the flags are the token's.
    pub fn presence_refusal(&self, proof: &crate::approver_key::Proof) -> Option<&'static str> {
        let p = proof.presence();
        if self.spec.require_verify && !(p.touched && p.verified) {
            return Some("require_verify: count only a security key (sk-ssh-ed25519@openssh.com) signature with touch and PIN (flags 0x01 and 0x04), or a passkey");
        }
        if self.spec.require_touch && !p.touched {
            return Some("require_touch: count only a security key (sk-ssh-ed25519@openssh.com) signature made with a touch (flag 0x01), or a passkey");
        }
        None
    }

    /// Whether this kind of signature counts under the policy (`accept`).
    pub fn accepts(&self, kind: crate::approver_key::SignatureKind) -> bool {
        self.spec.accept.contains(&kind)
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
    #[cfg(feature = "payload-schema")]
    pub fn check_payload(&self, payload: &Value) -> Result<(), PayloadRefusal> {
        payload::check(payload, &self.spec, self.schema.as_deref())
    }
}

/// Checks `expose` and `pass_through`: the names they put in `tools/list` must be
/// valid tool names that cannot be taken for the gate's own tools, and only a policy
/// that runs a downstream MCP tool can let that server's other tools through.
fn check_tools(spec: &PolicySpec) -> Result<(), (&'static str, String)> {
    use super::spec::{is_tool_name, RESERVED_TOOL_PREFIX};
    if spec.expose && spec.kind.as_str().starts_with(RESERVED_TOOL_PREFIX) {
        return Err((
            "expose",
            format!(
                "kind {:?} cannot be exposed as a tool: names starting with {RESERVED_TOOL_PREFIX:?} are the gate's own tools; rename the kind",
                spec.kind.as_str()
            ),
        ));
    }
    if spec.pass_through.is_empty() {
        return Ok(());
    }
    let Some(own) = spec.executor.mcp_tool() else {
        return Err((
            "pass_through",
            "pass_through lists tools of the downstream MCP server this policy runs, so it needs an executor of type \"mcp\": remove it, or set the executor".into(),
        ));
    };
    let mut seen = BTreeSet::new();
    for t in &spec.pass_through {
        if !is_tool_name(t) || t.starts_with(RESERVED_TOOL_PREFIX) {
            return Err((
                "pass_through",
                format!(
                    "pass_through names {t:?}, which is not a tool name this gate can list: use the downstream tool's name (1-128 letters, digits, '_', '-' or '.', not starting with {RESERVED_TOOL_PREFIX:?})"
                ),
            ));
        }
        if t == own {
            return Err((
                "pass_through",
                format!(
                    "pass_through names {t:?}, the tool this policy gates: a tool is either gated or passed through; remove it from pass_through"
                ),
            ));
        }
        if !seen.insert(t) {
            return Err((
                "pass_through",
                format!("pass_through lists {t:?} twice: list each once"),
            ));
        }
    }
    Ok(())
}
