//! The `/mcp` hot path: a plain tool call answered without rmcp's per-request service.
//!
//! For every POST, rmcp's stateless transport parses the body into its message
//! enum, builds a handler and a one-shot transport, spawns a task to serve that one
//! message, waits for its answer on a channel and serialises it. For a `tools/call`
//! of a revision before 2026-07-28, with no `_meta` and no input-required round
//! trip, all of that ends in [`McpHandler::call_as`] and a result with `resultType`
//! stripped. This module recognises exactly such a request and makes that call
//! itself; the stdio transport does the same (`stdio::session`'s `direct_call`).
//!
//! The rule is that the direct path is taken only for requests rmcp would accept
//! and route to `call_tool` unchanged: every check here is the same as rmcp's or
//! stricter, and anything it is not sure of (an `Origin` header, a quality value
//! in `Accept`, a session header, an unknown protocol version, a body that is not
//! exactly a call) goes to rmcp as before, which gives its own answer or refusal.
//! `tests::the_direct_path_answers_byte_for_byte_as_rmcp_does` holds the two side
//! by side.

use crate::mcp::{self, McpHandler};
use crate::service::Service;
use approval_core::ids::AgentName;
use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use rmcp::model::{CallToolRequestParams, RequestId};
use std::sync::Arc;

/// The header that names the request's protocol revision.
const VERSION_HEADER: &str = "mcp-protocol-version";

/// The revisions whose tool calls rmcp answers in the legacy shape and without
/// standard-header checks (those start at 2026-07-28). No header means 2025-03-26.
const LEGACY_VERSIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];

/// The tools that change nothing stored.
const READ_ONLY: [&str; 2] = ["approval_status", "approval_list"];

/// Which requests may skip rmcp: the Host values rmcp would accept.
#[derive(Debug, Clone)]
pub struct DirectCalls {
    allowed_hosts: Arc<[String]>,
}

impl DirectCalls {
    /// Direct calls for a `/mcp` whose rmcp service accepts `allowed_hosts`.
    pub fn new(allowed_hosts: &[String]) -> Self {
        Self {
            allowed_hosts: allowed_hosts.into(),
        }
    }

    /// The call's id and parameters when `parts`/`body` is a plain legacy tool call
    /// that rmcp would accept and hand to `call_tool` unchanged; `None` sends the
    /// request to rmcp.
    fn plain_call(&self, parts: &Parts, body: &[u8]) -> Option<(RequestId, CallToolRequestParams)> {
        if !self.headers_pass(parts) {
            return None;
        }
        mcp::direct::plain_call(body)
    }

    /// The headers of a request rmcp would serve statelessly with no check failing,
    /// judged strictly: one `Host` it allows and no `Origin` (its DNS-rebinding
    /// check), an `Accept` naming both JSON and SSE without parameters, a JSON
    /// `Content-Type`, at most one legacy `MCP-Protocol-Version`, and no other `Mcp-`
    /// header (session ids, SEP-2243 headers) for rmcp to weigh.
    fn headers_pass(&self, parts: &Parts) -> bool {
        let h = &parts.headers;
        if h.contains_key(header::ORIGIN) || parts.uri.authority().is_some() {
            return false;
        }
        let host_ok = only(h, header::HOST)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| axum::http::uri::Authority::try_from(v).ok())
            .is_some_and(|a| host_allowed(a.host(), a.port_u16(), &self.allowed_hosts));
        let accept_ok = only(h, header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(accepts_json_and_sse);
        let type_ok = only(h, header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                !v.contains('"')
                    && v.split(';')
                        .next()
                        .is_some_and(|e| e.trim().eq_ignore_ascii_case("application/json"))
            });
        // No header means 2025-03-26; more than one is rmcp's to judge.
        let version_ok = !h.contains_key(VERSION_HEADER)
            || only(h, header::HeaderName::from_static(VERSION_HEADER))
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| LEGACY_VERSIONS.contains(&v));
        let other_mcp = h.keys().any(|k| {
            let k = k.as_str();
            k.starts_with("mcp-") && k != VERSION_HEADER
        });
        host_ok && accept_ok && type_ok && version_ok && !other_mcp
    }

    /// Answers the request when it is a plain legacy tool call ([`Self::plain_call`]),
    /// as rmcp would; `None` when it is not, for rmcp to serve.
    pub async fn answer(&self, svc: &Arc<Service>, parts: &Parts, body: &[u8]) -> Option<Response> {
        let agent = parts.extensions.get::<AgentName>()?.clone();
        let (id, params) = self.plain_call(parts, body)?;
        let handler = McpHandler::new(svc.clone());
        let outcome = if READ_ONLY.contains(&params.name.as_ref()) {
            // A read changes nothing: if the client goes away, it may stop where it is
            // (a long poll then frees its slot at once).
            handler.call_direct(&agent, params).await
        } else {
            // A write runs to its end on a task of its own, as rmcp runs every call,
            // so a client that hangs up cannot cut it between two of its steps; it
            // keeps the request's charge until then (`capacity::Held`; attack test:
            // tests/tests/capacity_hangup.rs).
            let held = parts.extensions.get::<crate::capacity::Held>().cloned();
            tokio::spawn(async move {
                let _held = held;
                handler.call_direct(&agent, params).await
            })
            .await
            .unwrap_or_else(|e| {
                Err(rmcp::ErrorData::internal_error(
                    format!("the tool call's task failed: {e}"),
                    None,
                ))
            })
        };
        Some(match mcp::direct::legacy_line(outcome, id) {
            Ok(line) => {
                let mut r = Response::new(Body::from(line));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                r
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot serialise a tool result");
                let mut r = Response::new(Body::from("cannot serialise the tool result"));
                *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                r
            }
        })
    }
}

/// The header's value when it is given exactly once.
fn only(h: &HeaderMap, name: header::HeaderName) -> Option<&HeaderValue> {
    let mut all = h.get_all(name).iter();
    let first = all.next()?;
    all.next().is_none().then_some(first)
}

/// `Accept` lists both `application/json` and `text/event-stream`, and no entry has
/// parameters or quotes (a `q=0` would exclude one; rmcp weighs those).
fn accepts_json_and_sse(accept: &str) -> bool {
    if accept.contains(';') || accept.contains('"') {
        return false;
    }
    let mut json = false;
    let mut sse = false;
    for entry in accept.split(',') {
        let entry = entry.trim();
        json |= entry.eq_ignore_ascii_case("application/json");
        sse |= entry.eq_ignore_ascii_case("text/event-stream");
    }
    json && sse
}

/// rmcp's rule for `Host`: an allowed entry names the host, and its port if it has
/// one; the comparison ignores case and IPv6 brackets. An empty list allows any.
pub(super) fn host_allowed(host: &str, port: Option<u16>, allowed: &[String]) -> bool {
    fn bare(h: &str) -> String {
        h.trim_matches('[').trim_matches(']').to_ascii_lowercase()
    }
    if allowed.is_empty() {
        return true;
    }
    let host = bare(host);
    allowed.iter().any(|entry| {
        let entry = entry.trim();
        if entry.is_empty() {
            return false;
        }
        let (h, p) = match axum::http::uri::Authority::try_from(entry) {
            Ok(a) => (bare(a.host()), a.port_u16()),
            Err(_) => (bare(entry), None),
        };
        h == host && p.is_none_or(|p| port == Some(p))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut b = axum::http::Request::builder().method("POST").uri("/mcp");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    pub(super) const PLAIN: [(&str, &str); 4] = [
        ("host", "127.0.0.1:4800"),
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("mcp-protocol-version", "2025-06-18"),
    ];

    fn with(extra: &[(&str, &str)], without: &str) -> Parts {
        let mut h: Vec<(&str, &str)> = PLAIN
            .iter()
            .copied()
            .filter(|(k, _)| *k != without)
            .collect();
        h.extend_from_slice(extra);
        parts(&h)
    }

    const CALL: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"approval_status","arguments":{"proposal_id":"x"}}}"#;

    fn gate() -> DirectCalls {
        DirectCalls::new(&["localhost".into(), "127.0.0.1".into(), "[::1]".into()])
    }

    #[test]
    fn a_plain_legacy_call_is_taken() {
        let g = gate();
        assert!(g.plain_call(&parts(&PLAIN), CALL.as_bytes()).is_some());
        // No version header means 2025-03-26, a legacy revision.
        assert!(g
            .plain_call(&with(&[], "mcp-protocol-version"), CALL.as_bytes())
            .is_some());
        assert!(
            g.plain_call(&with(&[("host", "LOCALHOST")], ""), CALL.as_bytes())
                .is_none(),
            "two Host headers"
        );
        let upper = [("host", "LOCALHOST:1"), PLAIN[1], PLAIN[2], PLAIN[3]];
        assert!(g.plain_call(&parts(&upper), CALL.as_bytes()).is_some());
    }

    /// Everything rmcp weighs differently, or refuses, stays with rmcp.
    #[test]
    fn anything_rmcp_might_weigh_or_refuse_goes_to_rmcp() {
        let g = gate();
        let refused: Vec<(&str, Parts)> = vec![
            (
                "an Origin header",
                with(&[("origin", "http://127.0.0.1:4800")], ""),
            ),
            (
                "a Host not allowed",
                with(&[("host", "evil.example")], "host"),
            ),
            ("no Host", with(&[], "host")),
            (
                "a q-value in Accept",
                with(
                    &[("accept", "application/json;q=0, text/event-stream")],
                    "accept",
                ),
            ),
            (
                "Accept without SSE",
                with(&[("accept", "application/json")], "accept"),
            ),
            ("no Accept", with(&[], "accept")),
            (
                "a form body",
                with(&[("content-type", "text/plain")], "content-type"),
            ),
            (
                "the 2026-07-28 revision",
                with(
                    &[("mcp-protocol-version", "2026-07-28")],
                    "mcp-protocol-version",
                ),
            ),
            (
                "an unknown revision",
                with(
                    &[("mcp-protocol-version", "1999-01-01")],
                    "mcp-protocol-version",
                ),
            ),
            ("a session id", with(&[("mcp-session-id", "abc")], "")),
            (
                "an Mcp-Method header",
                with(&[("mcp-method", "tools/call")], ""),
            ),
        ];
        for (what, p) in refused {
            assert!(
                g.plain_call(&p, CALL.as_bytes()).is_none(),
                "{what} was taken directly"
            );
        }
        for body in [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"approval_status"}}"#,
            r#"{"jsonrpc":"1.0","id":7,"method":"tools/call","params":{"name":"approval_status"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"approval_status","_meta":{}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"approval_status"},"extra":1}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"approval_status"}}"#,
            r#"[{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"approval_status"}}]"#,
        ] {
            assert!(
                g.plain_call(&parts(&PLAIN), body.as_bytes()).is_none(),
                "{body} was taken directly"
            );
        }
    }

    #[test]
    fn hosts_follow_rmcps_rule() {
        let allowed = vec![
            "localhost".to_string(),
            "example.com:8080".into(),
            "[::1]".into(),
        ];
        assert!(host_allowed("LocalHost", Some(1), &allowed));
        assert!(host_allowed("example.com", Some(8080), &allowed));
        assert!(!host_allowed("example.com", Some(8081), &allowed));
        assert!(!host_allowed("example.com", None, &allowed));
        assert!(host_allowed("[::1]", Some(4800), &allowed));
        assert!(!host_allowed("127.0.0.1", Some(4800), &allowed));
        assert!(host_allowed("anything", None, &[]));
    }
}

/// The direct path against rmcp's, on one service: every request is sent to a
/// `/mcp` with direct calls and to one without, and the two answers must agree
/// byte for byte (status, content type and body).
#[cfg(test)]
mod side_by_side {
    use crate::http::testing::{listen, service};
    use crate::http::{mcp_router, McpOptions};
    use serde_json::{json, Value};
    use std::net::SocketAddr;

    async fn post(
        client: &reqwest::Client,
        addr: SocketAddr,
        version: Option<&str>,
        body: &Value,
    ) -> (u16, String, String) {
        let mut req = client
            .post(format!("http://{addr}/mcp"))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(v) = version {
            req = req.header("MCP-Protocol-Version", v);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let ctype = r
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (status, ctype, r.text().await.unwrap())
    }

    fn call(id: Value, name: &str, args: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": name, "arguments": args}})
    }

    #[tokio::test]
    async fn the_direct_path_answers_byte_for_byte_as_rmcp_does() {
        let (svc, _dir) = service(None).await;
        let direct = listen(mcp_router(svc.clone(), &McpOptions::default())).await;
        let via_rmcp = listen(mcp_router(
            svc.clone(),
            &McpOptions {
                direct_calls: false,
                ..Default::default()
            },
        ))
        .await;
        let client = reqwest::Client::new();

        // A proposal to read back (made through rmcp, so the direct path reads what
        // the other wrote).
        let (_, _, made) = post(
            &client,
            via_rmcp,
            Some("2025-06-18"),
            &call(
                json!(1),
                "approval_prepare",
                json!({"kind": "note.write", "payload": {"text": "hi"}, "summary": "s"}),
            ),
        )
        .await;
        let made: Value = serde_json::from_str(&made).unwrap();
        let id = made["result"]["structuredContent"]["proposal_id"]
            .as_str()
            .expect("a proposal id")
            .to_owned();

        let requests = [
            call(json!(2), "approval_status", json!({"proposal_id": id})),
            call(
                json!("two"),
                "approval_status",
                json!({"proposal_id": id, "wait_seconds": 0}),
            ),
            call(json!(3), "approval_status", json!({"proposal_id": "nope"})),
            call(json!(4), "approval_status", json!({"proposal_id": 5})),
            call(
                json!(5),
                "approval_status",
                json!({"proposal_id": id, "extra": true}),
            ),
            call(json!(6), "approval_list", json!({})),
            call(
                json!(7),
                "approval_list",
                json!({"status": "PENDING", "limit": 1}),
            ),
            call(json!(8), "approval_list", json!({"status": "NOT_A_STATUS"})),
            call(
                json!(9),
                "approval_execute",
                json!({"proposal_id": id, "preview_sha256": "00"}),
            ),
            call(
                json!(10),
                "approval_execute",
                json!({"proposal_id": "nope", "preview_sha256": "00"}),
            ),
            call(
                json!(11),
                "approval_withdraw",
                json!({"proposal_id": "nope"}),
            ),
            call(
                json!(12),
                "approval_prepare",
                json!({"kind": "no.such.kind", "payload": {}}),
            ),
            call(
                json!(13),
                "approval_prepare",
                json!({"kind": "note.write", "payload": {"text": 5}}),
            ),
            call(json!(14), "approval_prepare", json!({"kind": "note.write"})),
            call(json!(15), "no_such_tool", json!({})),
            json!({"jsonrpc": "2.0", "id": 16, "method": "tools/call", "params": {"name": "approval_list"}}),
            json!({"jsonrpc": "2.0", "id": 17, "method": "tools/call", "params": {"name": "approval_status", "arguments": {"proposal_id": id}, "unknown": 1}}),
        ];
        let gate = super::DirectCalls::new(&McpOptions::default().allowed_hosts);
        let agent = approval_core::ids::AgentName::parse("local").unwrap();
        for version in [
            None,
            Some("2025-03-26"),
            Some("2025-06-18"),
            Some("2025-11-25"),
        ] {
            let mut headers = super::tests::PLAIN.to_vec();
            headers.retain(|(k, _)| *k != "mcp-protocol-version");
            headers.extend(version.map(|v| ("mcp-protocol-version", v)));
            let mut parts = super::tests::parts(&headers);
            parts.extensions.insert(agent.clone());
            for body in &requests {
                let a = post(&client, direct, version, body).await;
                let b = post(&client, via_rmcp, version, body).await;
                assert_eq!(a, b, "version {version:?}, request {body}");
                // And the answer did come from the direct path.
                let answer = gate
                    .answer(&svc, &parts, body.to_string().as_bytes())
                    .await
                    .unwrap_or_else(|| panic!("not taken directly: {body}"));
                let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX)
                    .await
                    .unwrap();
                assert_eq!(String::from_utf8_lossy(&bytes), b.2, "{body}");
            }
        }
        // The proposal is still there and pending: nothing above changed it.
        let (_, _, after) = post(&client, direct, None, &requests[0]).await;
        assert!(after.contains("\"PENDING_QUORUM\""), "{after}");
    }

    /// The attack on the direct path's one shortcut: an agent asks to execute and
    /// hangs up as soon as the claim is made. rmcp runs every call on a task of its
    /// own; run in the request's own future, the execute would stop after its claim,
    /// leaving the proposal EXECUTING with no effect and no outcome. The future is
    /// dropped after its first poll here, as hyper drops it when the client goes.
    #[tokio::test]
    async fn an_execute_dropped_after_its_first_step_still_runs_to_its_end() {
        use approval_core::ids::{AgentName, ApproverName};
        use approval_core::keyring::PublicKey;
        use approval_core::message::{Decision, SignedDecision};
        use approval_core::status::Status;
        use ed25519_dalek::SigningKey;
        let dir = tempfile::tempdir().unwrap();
        let signers: Vec<(&str, SigningKey)> = [("alice", 1u8), ("bob", 2), ("carol", 3)]
            .into_iter()
            .map(|(n, seed)| (n, SigningKey::from_bytes(&[seed; 32])))
            .collect();
        let keyring: String = signers
            .iter()
            .map(|(n, k)| format!("{n} ed25519 {}\n", PublicKey::from_signing_key(k)))
            .collect();
        std::fs::write(dir.path().join("keys"), keyring).unwrap();
        let (svc, _data) = service(Some(&dir.path().join("keys"))).await;
        let agent = AgentName::parse("local").unwrap();
        let (rec, _) = svc
            .prepare(&agent, "note.write", json!({"text": "once"}), None)
            .await
            .unwrap();
        let id = rec.id().to_string();
        for (name, key) in signers.iter().filter(|(n, _)| *n != "bob") {
            let d = SignedDecision::sign(
                key,
                ApproverName::parse(name).unwrap(),
                Decision::Approve,
                &rec.preview_sha256,
                "",
            )
            .unwrap();
            svc.decide(&id, d, None).await.unwrap();
        }
        assert_eq!(
            svc.status(&agent, &id, 0).await.unwrap().status(),
            Status::Approved
        );

        let gate = super::DirectCalls::new(&["127.0.0.1".into()]);
        let mut parts = super::tests::parts(&super::tests::PLAIN);
        parts.extensions.insert(agent.clone());
        let body = call(
            json!(1),
            "approval_execute",
            json!({"proposal_id": id, "preview_sha256": rec.preview_sha256.to_string()}),
        )
        .to_string();
        let mut answer = Box::pin(gate.answer(&svc, &parts, body.as_bytes()));
        assert!(
            futures::poll!(answer.as_mut()).is_pending(),
            "the execute finished within one poll, so dropping it proves nothing"
        );
        drop(answer);

        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let status = svc.status(&agent, &id, 0).await.unwrap().status();
            if status == Status::Succeeded {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the execute was cut short: the proposal is {status:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}
