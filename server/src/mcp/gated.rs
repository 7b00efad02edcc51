//! Gated tools under their own names (issue #33).
//!
//! A policy with `expose = true` puts its kind in `tools/list` as a tool of its own.
//! A call to it is a proposal, with the call's arguments as the payload, exactly as
//! `approval_prepare` would make it, except that its signed preview says the gate
//! runs it on quorum ([`crate::service::on_quorum`]). The client then waits on an MCP
//! task ([`super::tasks`]) when it declared the tasks extension, or on
//! `approval_status` when it did not.
//!
//! A policy with an `mcp` executor may also list `pass_through` tools of the same
//! downstream server: those are listed as the downstream defines them and called
//! straight through, without a proposal. Every other downstream tool is not listed,
//! and a call to it is an unknown tool.

use super::McpHandler;
use crate::config::Config;
use approval_core::api::tools::ToolOutput;
use approval_core::ids::AgentName;
use approval_core::policy::Policy;
use approval_core::Kind;
use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, CreateTaskResult, JsonObject, MetaObject, Tool,
    ToolAnnotations,
};
use rmcp::ErrorData as McpError;
use serde_json::{json, Value};
use std::sync::Arc;

/// The `_meta` key under which an exposed tool says what approval it needs. Ours:
/// neither MCP nor the tool-approval draft (SEP-2848) defines a tool-level marker.
pub const APPROVAL_META: &str = "dev.approval-gate/approval";

/// A tool name that is not one of the gate's own.
pub(super) enum Gated {
    /// An exposed kind: a call is a proposal run on quorum.
    Kind(Arc<Policy>),
    /// A pass-through tool of this policy's downstream server.
    PassThrough(Arc<Policy>),
}

/// What `name` is, if the configuration in force lists it.
pub(super) fn lookup(config: &Config, name: &str) -> Option<Gated> {
    if let Some(p) = Kind::parse(name)
        .ok()
        .and_then(|k| config.policies.get(&k))
        .filter(|p| p.spec().expose)
    {
        return Some(Gated::Kind(p.clone()));
    }
    // Listed only once the downstream described it (fail closed).
    config
        .policies
        .passing_through(name)
        .filter(|_| config.downstream_tools.contains_key(name))
        .map(|p| Gated::PassThrough(p.clone()))
}

/// The names of the gated tools in force, for an error that lists what exists.
pub(super) fn names(config: &Config) -> Vec<String> {
    listed(config)
        .into_iter()
        .map(|t| t.name.to_string())
        .collect()
}

/// Who must approve, in words: "2 of alice, bob, carol (and 1 of carol)".
pub(super) fn quorum_words(policy: &Policy) -> String {
    let spec = policy.spec();
    let names = |v: &[approval_core::ApproverName]| {
        v.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
    };
    let mut s = format!("{} of {}", spec.quorum, names(&spec.approvers));
    for r in &spec.require {
        s.push_str(&format!(" (and {} of {})", r.count, names(&r.group)));
    }
    s
}

/// The exposed kinds and pass-through tools, as `tools/list` gives them after the
/// gate's own tools.
pub(super) fn listed(config: &Config) -> Vec<Tool> {
    let mut out = Vec::new();
    for p in config.policies.exposed() {
        let spec = p.spec();
        let kind = p.kind().as_str();
        let downstream = config.downstream_tools.get(kind);
        let description = downstream
            .and_then(|t| t.description.as_deref())
            .filter(|d| !d.trim().is_empty())
            .unwrap_or(&spec.description);
        let input = downstream
            .map(|t| t.input_schema.clone())
            .or_else(|| match &spec.payload_schema {
                Some(Value::Object(m)) if m.get("type") == Some(&json!("object")) => {
                    Some(Arc::new(m.clone()))
                }
                _ => None,
            })
            .unwrap_or_else(|| {
                let mut m = JsonObject::new();
                m.insert("type".into(), json!("object"));
                Arc::new(m)
            });
        let cooldown = spec
            .cooldown
            .map(|c| {
                format!(
                    ", then a cooldown of {} in which any approver can still stop it",
                    c.to_spec()
                )
            })
            .unwrap_or_default();
        let text = format!(
            "{description}\n\nNeeds approval: {} must sign this exact call{cooldown}; the gate then runs it once. \
             With the MCP tasks extension the call returns a task that completes with the result; without it, \
             the answer names the proposal to wait on with approval_status.",
            quorum_words(p)
        );
        let mut meta = MetaObject::new();
        meta.insert(
            APPROVAL_META.into(),
            json!({
                "required": true,
                "kind": kind,
                "quorum": spec.quorum,
                "approvers": spec.approvers,
                "execution": "on_quorum",
            }),
        );
        out.push(
            Tool::new(kind.to_owned(), text, input)
                .with_annotations(
                    ToolAnnotations::new()
                        .read_only(false)
                        .destructive(true)
                        .idempotent(false),
                )
                .with_meta(meta),
        );
    }
    for p in config.policies.iter() {
        for t in &p.spec().pass_through {
            if let Some(def) = config.downstream_tools.get(t) {
                out.push(def.clone());
            }
        }
    }
    out
}

/// The `_meta` of an answer that leaves a proposal waiting for people (SEP-2643's
/// structured denial, remediation by a task; SEP-2848's immediate response).
pub(super) fn waiting_meta(words: &str) -> MetaObject {
    let mut meta = MetaObject::new();
    meta.insert(
        "io.modelcontextprotocol/authorization".into(),
        json!({
            "reason": "insufficient_authorization",
            "remediation": "available",
            "remediationHints": [{"type": "task"}],
        }),
    );
    meta.insert(
        "io.modelcontextprotocol/model-immediate-response".into(),
        json!(words),
    );
    meta
}

impl McpHandler {
    /// A call to an exposed kind: the proposal, then a task handle (`tasks`) or the
    /// proposal's view with what to do next.
    pub(super) async fn call_exposed(
        &self,
        agent: &AgentName,
        policy: &Policy,
        arguments: JsonObject,
        tasks: bool,
    ) -> Result<CallToolResponse, McpError> {
        let proposed = self
            .svc
            .propose_on_quorum(agent, policy.kind().as_str(), Value::Object(arguments))
            .await;
        // Never report a proposal whose fsync is still pending.
        let settled = self.svc.settle().await;
        let rec = match (proposed, settled) {
            (Ok((rec, _)), Ok(())) => rec,
            (Err(e), _) | (_, Err(e)) => return Ok(super::refusal(&e).into()),
        };
        if tasks {
            let task = match self.task_of(&rec) {
                Ok(t) => t,
                Err(e) => return Ok(super::refusal(&e).into()),
            };
            let words = task.task.status_message.clone().unwrap_or_default();
            return Ok(CallToolResponse::Task(
                CreateTaskResult::new(task.task).with_meta(waiting_meta(&words)),
            ));
        }
        let out = match self.describe(&rec, None) {
            Ok(o) => o,
            Err(e) => return Ok(super::refusal(&e).into()),
        };
        let next = format!(
            "Nothing ran yet: proposal {} waits for {}. Tell your human (the preview hash starts {}; approvers run `signer-cli approve {}`). \
             Then call approval_status with this proposal_id and wait_seconds: once quorum is reached the gate runs it by itself, \
             and approval_status shows the result. Do not call approval_execute.",
            rec.id(),
            quorum_words(policy),
            rec.preview_sha256.prefix(8),
            rec.id()
        );
        let out = ToolOutput {
            next: Some(next),
            ..out
        };
        let mut result =
            CallToolResult::structured(serde_json::to_value(out).unwrap_or(Value::Null));
        result.meta = Some(waiting_meta("Pending human approval: nothing ran yet."));
        Ok(result.into())
    }

    /// A call to a pass-through tool: straight to the downstream, answered as it
    /// answers; a failure to reach it is a tool error the agent can read.
    pub(super) async fn call_pass_through(
        &self,
        policy: &Policy,
        name: &str,
        arguments: JsonObject,
    ) -> CallToolResult {
        tracing::info!(tool = name, kind = %policy.kind(), "pass-through call");
        let mut result = match crate::executor::mcp::pass_through(
            &policy.spec().executor,
            name,
            arguments,
        )
        .await
        {
            Ok(r) => r,
            Err(why) => CallToolResult::error(vec![ContentBlock::text(format!(
                "the pass-through tool {name:?} could not be called: {why}"
            ))]),
        };
        // 2026-07-28 results carry their kind; older peers have it stripped on the way out.
        result.result_type = Some(rmcp::model::ResultType::COMPLETE);
        result
    }
}
