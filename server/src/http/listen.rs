//! `subscriptions/listen` for task status over Streamable HTTP: the request's answer
//! is an SSE stream of what [`crate::mcp::listen::TaskListen`] yields (see there).
//!
//! Taken here, before rmcp, only for a 2026-07-28 request that names
//! `notifications.tasksStatus` and passes the checks rmcp would make of it (an allowed
//! `Host`, an allowed `Origin` or none, an `Accept` naming SSE, no contradicting
//! `Mcp-Method`); anything else goes to rmcp as before.

use super::direct::host_allowed;
use crate::mcp::listen::{self, TaskListen};
use crate::mcp::McpHandler;
use crate::service::Service;
use approval_core::ids::AgentName;
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Duration;

/// The `Host` and `Origin` values `/mcp` accepts, as rmcp is configured with them.
#[derive(Clone)]
pub struct Doors {
    hosts: Arc<[String]>,
    origins: Arc<[String]>,
}

impl Doors {
    pub fn new(hosts: &[String], origins: &[String]) -> Self {
        Self {
            hosts: hosts.into(),
            origins: origins.into(),
        }
    }

    /// Whether rmcp's own checks of these headers would pass.
    fn pass(&self, parts: &Parts) -> bool {
        let h = &parts.headers;
        let host_ok = h
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| axum::http::uri::Authority::try_from(v).ok())
            .is_some_and(|a| host_allowed(a.host(), a.port_u16(), &self.hosts));
        let origin_ok = match h.get(header::ORIGIN) {
            None => true,
            Some(o) => o
                .to_str()
                .is_ok_and(|o| self.origins.iter().any(|a| a == o)),
        };
        let sse_ok = h
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
        let method_ok = h
            .get("mcp-method")
            .is_none_or(|m| m.as_bytes() == b"subscriptions/listen");
        let modern = h
            .get("mcp-protocol-version")
            .is_some_and(|v| v.as_bytes() >= b"2026-07-28".as_slice());
        host_ok && origin_ok && sse_ok && method_ok && modern
    }
}

/// The answer to a task listen, or `None` when `body` is not one (or the headers are
/// for rmcp to judge).
pub fn answer(svc: &Arc<Service>, doors: &Doors, parts: &Parts, body: &[u8]) -> Option<Response> {
    let ask = listen::ask(body)?;
    if !doors.pass(parts) {
        return None;
    }
    let agent = parts.extensions.get::<AgentName>()?.clone();
    let handler = McpHandler::new(svc.clone());
    let open: TaskListen = match handler.listen_tasks(agent, ask.clone()) {
        Ok(l) => l,
        Err(e) => {
            let body = serde_json::json!({"jsonrpc": "2.0", "id": ask.id(), "error": e});
            return Some((StatusCode::OK, axum::Json(body)).into_response());
        }
    };
    let stream = futures::stream::unfold(open, |mut l| async move {
        let msg = l.next().await?;
        let ev = SseEvent::default().event("message").data(msg.to_string());
        Some((Ok::<_, std::convert::Infallible>(ev), l))
    });
    Some(
        Sse::new(stream)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response(),
    )
}
