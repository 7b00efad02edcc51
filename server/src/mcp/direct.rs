//! The direct paths' part of the MCP surface: a plain tool call of a session before
//! 2026-07-28, read and answered without rmcp's session loop (`http::direct` for
//! `/mcp`, `stdio::session` for the embedded stdio transport).
//!
//! rmcp is still the reference for what such an answer is: [`legacy_answer`] shapes
//! a result as rmcp shapes it for such a peer. What this module adds is the answer to
//! a call of one of the gate's own tools that succeeded, by far the most frequent
//! (every `approval_status` poll), written as one line straight from the tool's
//! output ([`legacy_line`]). The rmcp way builds the output's JSON as a `Value`
//! tree, prints that tree for the text mirror, and then prints the tree again, and
//! escapes the mirror, inside the answer: four passes over the output, the full
//! preview included. Printed once, mirrored from the same text, it is two, and the
//! status call's server cost drops by about a quarter (BENCHMARKS round 15).
//! Both ways give the same bytes, because an output's fields are in the order a
//! `Value` prints its keys (`approval_core::api::tools`);
//! `a_direct_line_is_the_answer_rmcp_gives` holds the two side by side.

use super::{refusal, McpHandler, ToolName};
use approval_core::ids::AgentName;
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonRpcMessage, RequestId, ServerResult};
use rmcp::service::TxJsonRpcMessage;
use rmcp::{ErrorData as McpError, RoleServer};
use serde::Deserialize;
use serde_json::Value;

/// A JSON-RPC request that is a tool call and nothing more.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainCall {
    jsonrpc: String,
    id: RequestId,
    method: String,
    params: CallToolRequestParams,
}

/// The id and parameters of `body` when it is exactly a JSON-RPC `tools/call` with no
/// `_meta` and no input-required round trip: what rmcp would parse into the same
/// parameters (the same type, read the same way) and hand to `call_tool` unchanged.
/// Cheaper than rmcp's parse of any message, which buffers the whole request to
/// find out which message it is. `None` for anything else, which is rmcp's to read.
pub fn plain_call(body: &[u8]) -> Option<(RequestId, CallToolRequestParams)> {
    let call: PlainCall = serde_json::from_slice(body).ok()?;
    let p = &call.params;
    let plain = call.jsonrpc == "2.0"
        && call.method == "tools/call"
        && p.meta.is_none()
        && p.input_responses.is_none()
        && p.request_state.is_none();
    plain.then_some((call.id, call.params))
}

/// What a direct call answered, before it is written as a line.
pub enum Direct {
    /// One of the gate's own tools succeeded: its output, as JSON text (an object).
    Output(String),
    /// Anything else: a refusal, an exposed kind's or a passed-through tool's result.
    Result(CallToolResult),
}

impl McpHandler {
    /// One tool call by `agent`, as the direct paths run it: a call of the gate's own
    /// tools keeps its output as JSON text; every other call is
    /// [`McpHandler::call_as`]'s.
    pub async fn call_direct(
        &self,
        agent: &AgentName,
        request: CallToolRequestParams,
    ) -> Result<Direct, McpError> {
        if ToolName::parse(&request.name).is_none() {
            return self.call_as(agent, request).await.map(Direct::Result);
        }
        Ok(match self.run_plain(agent, request).await? {
            // Printing a `ToolOutput` cannot fail (string keys, no custom serialiser);
            // were it to, the answer is `call_plain`'s.
            Ok(out) => match serde_json::to_string(&out) {
                Ok(text) => Direct::Output(text),
                Err(_) => Direct::Result(CallToolResult::structured(
                    serde_json::to_value(out).unwrap_or(Value::Null),
                )),
            },
            Err(e) => Direct::Result(refusal(&e)),
        })
    }

    /// A direct tool call on the embedded stdio transport, by the session's agent.
    pub async fn call_stdio(&self, request: CallToolRequestParams) -> Result<Direct, McpError> {
        let Some(identity) = &self.stdio else {
            return Err(McpError::invalid_request(
                "no authenticated agent on this request",
                None,
            ));
        };
        let agent = identity.agent(&self.svc.config())?;
        self.call_direct(&agent, request).await
    }
}

/// The JSON-RPC answer to a tool call of a revision before 2026-07-28, shaped as
/// rmcp shapes it for such a peer (no `resultType`, no non-object output).
pub fn legacy_answer(
    outcome: Result<CallToolResult, McpError>,
    id: RequestId,
) -> TxJsonRpcMessage<RoleServer> {
    match outcome {
        Ok(r) => {
            let mut result = ServerResult::CallToolResult(r);
            result.strip_result_type_for_legacy_peer();
            result.strip_non_object_output_for_legacy_peer();
            JsonRpcMessage::response(result, id)
        }
        Err(e) => JsonRpcMessage::error(e, Some(id)),
    }
}

/// The answer to a direct call, as one line of JSON (no newline): [`legacy_answer`]'s,
/// printed straight from the output's text for [`Direct::Output`] (the text mirror
/// and `structuredContent` are that same text).
pub fn legacy_line(outcome: Result<Direct, McpError>, id: RequestId) -> serde_json::Result<String> {
    let text = match outcome {
        Ok(Direct::Output(text)) => text,
        Ok(Direct::Result(r)) => return serde_json::to_string(&legacy_answer(Ok(r), id)),
        Err(e) => return serde_json::to_string(&legacy_answer(Err(e), id)),
    };
    let id = serde_json::to_string(&id)?;
    let mirror = serde_json::to_string(&text)?;
    let mut line = String::with_capacity(text.len() + mirror.len() + id.len() + 120);
    line.push_str(r#"{"jsonrpc":"2.0","id":"#);
    line.push_str(&id);
    line.push_str(r#","result":{"content":[{"type":"text","text":"#);
    line.push_str(&mirror);
    line.push_str(r#"}],"structuredContent":"#);
    line.push_str(&text);
    line.push_str(r#","isError":false}}"#);
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use approval_core::api::tools::ToolOutput;
    use approval_core::Code;
    use rmcp::model::NumberOrString;
    use serde_json::json;

    /// Outputs as the tools give them: the fields every answer has, and a full one
    /// with a preview holding strings that need escaping.
    fn outputs() -> Vec<ToolOutput> {
        let full = ToolOutput {
            proposal_id: Some("p_0123".into()),
            status: Some("PENDING".into()),
            preview_sha256: Some("ab".repeat(32)),
            preview: Some(json!({
                "kind": "shell.exec",
                "payload": {"cmd": "echo \"hi\"\n\ttab \\ back \u{1F600} \u{0007}", "n": 1.5, "z": [1, null, true]},
                "a": {}
            })),
            expires_at: Some("2026-12-07T23:00:00Z".into()),
            ..ToolOutput::new(Code::PendingQuorum, "waiting for 2 of 2 approvers", true)
        };
        vec![ToolOutput::new(Code::Succeeded, "done", false), full]
    }

    #[test]
    fn a_direct_line_is_the_answer_rmcp_gives() {
        for out in outputs() {
            for id in [
                RequestId::Number(7),
                RequestId::String("id-\"q\"".into()),
                NumberOrString::Number(-1),
                RequestId::String("".into()),
            ] {
                let text = serde_json::to_string(&out).expect("output");
                let line = legacy_line(Ok(Direct::Output(text)), id.clone()).expect("line");
                let rmcp = legacy_answer(
                    Ok(CallToolResult::structured(
                        serde_json::to_value(&out).expect("value"),
                    )),
                    id,
                );
                assert_eq!(line, serde_json::to_string(&rmcp).expect("rmcp's answer"));
            }
        }
    }

    #[test]
    fn other_outcomes_are_rmcps_lines() {
        let e = McpError::invalid_params("no such tool", None);
        let line = legacy_line(Err(e.clone()), RequestId::Number(3)).expect("line");
        let rmcp =
            serde_json::to_string(&legacy_answer(Err(e), RequestId::Number(3))).expect("rmcp");
        assert_eq!(line, rmcp);
        let refused = CallToolResult::structured_error(json!({"code": "DENIED"}));
        let line =
            legacy_line(Ok(Direct::Result(refused.clone())), RequestId::Number(4)).expect("line");
        let rmcp =
            serde_json::to_string(&legacy_answer(Ok(refused), RequestId::Number(4))).expect("rmcp");
        assert_eq!(line, rmcp);
    }
}
