//! The stdio transport: MCP as newline-delimited JSON on stdin/stdout, served on a
//! thread of its own, with the same exact-JSON front as `/mcp` and the same direct
//! path for plain tool calls ([`crate::http`]'s `direct`).
//!
//! It may import the MCP surface ([`crate::mcp`]), the service and the HTTP front's
//! limits; what starts it (embedding or joining a server) is [`crate::stdio`].

use super::streams;
use crate::mcp::{Identity, McpHandler};
use crate::service::Service;
use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, ClientRequest, JsonRpcMessage, JsonRpcRequest, RequestId,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::RoleServer;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// Serves the session on a thread of its own, under a current-thread runtime that
/// drives its pipes and timers and nothing else. That thread may then block in a
/// flush of the session's own writes (`store::flush_inline_on_this_thread`): a
/// sequential agent waits for that flush anyway, and the hand-off to the blocking
/// pool and back, two thread wake-ups, was a tenth of a durable write's time. The
/// approver API and `/mcp` stay on the shared runtime, which no flush blocks, so
/// a disk that stalls the session never keeps a veto out. The future ends with the
/// session.
pub fn on_own_thread(
    svc: Arc<Service>,
    identity: Identity,
) -> anyhow::Result<impl Future<Output = anyhow::Result<()>>> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("stdio-session".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = done_tx
                        .send(Err(anyhow::Error::new(e)
                            .context("cannot start the stdio session's runtime")));
                    return;
                }
            };
            crate::store::flush_inline_on_this_thread();
            let r = rt.block_on(async move {
                let (reader, writer) = (streams::stdin(), streams::stdout());
                serve_lines(svc, identity, reader, writer).await
            });
            let _ = done_tx.send(r);
            // What the session left running (a call nobody waits for) ends here.
            rt.shutdown_background();
        })
        .context("cannot start the stdio session's thread")?;
    Ok(async move {
        done_rx
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the stdio session's thread ended early")))
    })
}

/// Requests handed to rmcp and not yet answered: stdin closing waits for them.
#[derive(Default)]
struct Pending {
    ids: Mutex<HashSet<String>>,
    changed: tokio::sync::Notify,
}

impl Pending {
    fn add(&self, id: String) {
        if let Ok(mut s) = self.ids.lock() {
            s.insert(id);
        }
    }
    fn done(&self, id: &str) {
        if let Ok(mut s) = self.ids.lock() {
            s.remove(id);
        }
        self.changed.notify_waiters();
    }
    async fn drained(&self) {
        loop {
            let notified = self.changed.notified();
            if self.ids.lock().map(|s| s.is_empty()).unwrap_or(true) {
                return;
            }
            notified.await;
        }
    }
}

/// Answers already queued are gathered into one write up to this many bytes.
const WRITE_BATCH: usize = 64 * 1024;

/// Largest line accepted on stdin: the same bound as an HTTP request body.
pub const MAX_LINE: usize = crate::http::MAX_MCP_BODY;

/// Reads one line of at most [`MAX_LINE`] bytes (without its newline). `Ok(None)` at
/// end of input; `Ok(Some(Err(n)))` for a longer line, which is skipped.
async fn next_line<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<Result<(), usize>>> {
    buf.clear();
    let n = (&mut *r)
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', buf)
        .await?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        return Ok(Some(Ok(())));
    }
    if buf.len() <= MAX_LINE {
        return Ok(Some(Ok(()))); // the last line, without a newline
    }
    // Too long: skip to the end of the line without keeping it.
    let mut skipped = buf.len();
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            break;
        }
        match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => {
                skipped += i;
                r.consume(i + 1);
                break;
            }
            None => {
                let l = chunk.len();
                skipped += l;
                r.consume(l);
            }
        }
    }
    buf.clear();
    Ok(Some(Err(skipped)))
}

fn rpc_error(id: Value, code: i64, message: String) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// The protocol version a line asks for, per request (2026-07-28) or by `initialize`.
fn version_of(v: &Value) -> Option<String> {
    v.pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .or_else(|| {
            (v.get("method") == Some(&json!("initialize")))
                .then(|| v.pointer("/params/protocolVersion"))
                .flatten()
        })
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Serves MCP over newline-delimited JSON on `reader`/`writer` until the reader
/// ends and every request read has its answer. Each line gets the exact-JSON
/// check of the HTTP front ([`crate::http`]) before rmcp parses it, so a payload
/// is refused the same way on both transports.
pub async fn serve_lines<R, W>(
    svc: Arc<Service>,
    identity: Identity,
    reader: R,
    writer: W,
) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (out_tx, mut out_rx) = mpsc::channel::<String>(256);
    // Set when every request read has its answer queued: the writer then writes what
    // is queued and ends, even while a call nobody waits for any more (a cancelled
    // long poll on the direct path) still holds a sender.
    let (finish_tx, mut finish_rx) = tokio::sync::watch::channel(false);
    // Notified by the writer when stdout fails: the reader stops and the session ends.
    let broken = Arc::new(tokio::sync::Notify::new());
    let broken_tx = broken.clone();
    let write_task = tokio::spawn(async move {
        let mut w = writer;
        let mut buf = Vec::new();
        let mut finishing = false;
        loop {
            let line = if finishing {
                match out_rx.try_recv() {
                    Ok(l) => l,
                    Err(_) => break,
                }
            } else {
                tokio::select! {
                    l = out_rx.recv() => match l {
                        Some(l) => l,
                        None => break,
                    },
                    _ = finish_rx.changed() => {
                        finishing = true;
                        continue;
                    }
                }
            };
            // Answers ready together leave in one write (bounded, so memory is too).
            buf.clear();
            buf.extend_from_slice(line.as_bytes());
            buf.push(b'\n');
            while buf.len() < WRITE_BATCH {
                let Ok(more) = out_rx.try_recv() else { break };
                buf.extend_from_slice(more.as_bytes());
                buf.push(b'\n');
            }
            if let Err(e) = write_out(&mut w, &buf).await {
                // Answers can no longer reach the host: end the session (the reader is
                // stopped below) and say why, rather than read on and answer nobody.
                broken_tx.notify_one();
                return Some(e);
            }
        }
        None
    });
    let pending = Arc::new(Pending::default());
    let sink = {
        let state = (out_tx.clone(), pending.clone());
        Box::pin(futures::sink::unfold(
            state,
            |(tx, pending), msg: TxJsonRpcMessage<RoleServer>| async move {
                let id = match &msg {
                    JsonRpcMessage::Response(r) => Some(r.id.clone()),
                    JsonRpcMessage::Error(e) => e.id.clone(),
                    _ => None,
                };
                // Never an error: an unfold sink that returned one panics on rmcp's next
                // send ("start_send called without poll_ready"). A line that cannot be
                // serialised is logged; one the writer can no longer take is dropped,
                // because a failed writer ends the session itself (see `write_task`).
                match serde_json::to_string(&msg) {
                    Ok(line) => {
                        if tx.send(line).await.is_err() {
                            tracing::debug!("stdout is closed: an answer was dropped");
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "cannot serialise an answer"),
                }
                if let Some(id) = id {
                    pending.done(&serde_json::to_string(&id).unwrap_or_default());
                }
                Ok::<_, std::io::Error>((tx, pending))
            },
        ))
    };
    let (in_tx, in_rx) = mpsc::channel::<RxJsonRpcMessage<RoleServer>>(256);
    let handler = McpHandler::for_stdio(svc, identity);
    let read_task = tokio::spawn(read_lines(
        reader,
        in_tx,
        out_tx.clone(),
        pending.clone(),
        handler.clone(),
    ));
    drop(out_tx);
    let stop_reading = read_task.abort_handle();
    let watch_writer = tokio::spawn(async move {
        broken.notified().await;
        stop_reading.abort();
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(in_rx);
    match rmcp::serve_server(handler, (sink, stream)).await {
        Ok(running) => {
            if let Err(e) = running.waiting().await {
                tracing::warn!(error = %e, "the stdio session ended with an error");
            }
        }
        // stdin closed (or broke) before `initialize`: nothing to serve.
        Err(e) => tracing::info!(error = %e, "the stdio session ended before it began"),
    }
    let read = read_task.await;
    let _ = finish_tx.send(true);
    let write_failed = write_task.await.ok().flatten();
    watch_writer.abort();
    if let Some(e) = write_failed {
        return Err(anyhow::Error::new(e)
            .context("cannot write stdout: answers can no longer reach the host"));
    }
    read.context("the stdin reader failed")?
        .context("cannot read stdin")
}

/// Writes a batch of answers and flushes it.
async fn write_out<W: tokio::io::AsyncWrite + Unpin>(w: &mut W, buf: &[u8]) -> std::io::Result<()> {
    w.write_all(buf).await?;
    w.flush().await
}

/// The first protocol revision whose sessions rmcp shapes differently (inline
/// negotiation, `resultType`, input-required results): its tool calls stay on rmcp's path.
const MODERN: &str = "2026-07-28";

/// A `tools/call` the session may answer without rmcp's loop: the session was
/// initialized at a revision before [`MODERN`], and the call carries no `_meta` and
/// no input-required round trip, so rmcp would do nothing with it but call
/// [`McpHandler::call_tool`] and strip `resultType` (as [`answer_direct`] does).
/// Takes the call's id and parameters out of `msg` (which is then spent); `None`
/// leaves `msg` untouched, for rmcp.
fn direct_call(
    msg: &mut RxJsonRpcMessage<RoleServer>,
    legacy_session: bool,
) -> Option<(RequestId, CallToolRequestParams)> {
    if !legacy_session {
        return None;
    }
    match msg {
        JsonRpcMessage::Request(JsonRpcRequest {
            id,
            request: ClientRequest::CallToolRequest(r),
            ..
        }) if r.params.meta.is_none()
            && r.params.input_responses.is_none()
            && r.params.request_state.is_none() =>
        {
            Some((id.clone(), std::mem::take(&mut r.params)))
        }
        _ => None,
    }
}

/// Runs a direct tool call and queues its answer, shaped as rmcp shapes it for a
/// session before [`MODERN`].
async fn answer_direct(
    handler: McpHandler,
    id: RequestId,
    params: CallToolRequestParams,
    out: mpsc::Sender<String>,
) {
    match crate::mcp::direct::legacy_line(handler.call_stdio(params).await, id) {
        Ok(line) => {
            let _ = out.send(line).await;
        }
        Err(e) => tracing::error!(error = %e, "cannot serialise a tool result"),
    }
}

/// Runs a direct tool call. Most (a status, a listing) finish without waiting on
/// anything: they run right here, which saves a task and a wake-up per call (a lone
/// durable write too: its flush runs inline on the session's thread). A call that
/// waits (for another writer's flush, an effect, a long poll, a full output queue)
/// goes on a task of its own from where it stopped, so the reader never waits for it.
async fn run_direct(
    handler: &McpHandler,
    out: &mpsc::Sender<String>,
    pending: &Arc<Pending>,
    id: RequestId,
    params: CallToolRequestParams,
) {
    let key = serde_json::to_string(&id).unwrap_or_default();
    pending.add(key.clone());
    let (handler, out, pending) = (handler.clone(), out.clone(), pending.clone());
    let mut call = Box::pin(async move {
        answer_direct(handler, id, params, out).await;
        pending.done(&key);
    });
    let waiting = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx).is_pending())).await;
    if waiting {
        tokio::spawn(call);
    }
}

async fn read_lines<R: AsyncRead + Unpin>(
    reader: R,
    to_rmcp: mpsc::Sender<RxJsonRpcMessage<RoleServer>>,
    out: mpsc::Sender<String>,
    pending: Arc<Pending>,
    handler: McpHandler,
) -> std::io::Result<()> {
    let mut r = BufReader::new(reader);
    let mut buf = Vec::new();
    let mut negotiated: Option<String> = None;
    // Set once the client confirmed the handshake (`notifications/initialized`):
    // from then on, tool calls of a pre-MODERN session skip rmcp's loop.
    let mut initialized = false;
    while let Some(line) = next_line(&mut r, &mut buf).await? {
        if let Err(n) = line {
            let _ = out
                .send(rpc_error(
                    Value::Null,
                    -32600,
                    format!("message of {n} bytes, over the {MAX_LINE}-byte limit"),
                ))
                .await;
            continue;
        }
        let Ok(text) = std::str::from_utf8(&buf) else {
            let _ = out
                .send(rpc_error(
                    Value::Null,
                    -32700,
                    "parse error: the line is not UTF-8".into(),
                ))
                .await;
            continue;
        };
        if text.trim().is_empty() {
            continue;
        }
        let loose: Option<Value> = if text.contains("\"initialize\"") {
            serde_json::from_str(text).ok()
        } else {
            None
        };
        if let Some(v) = loose.as_ref().and_then(version_of) {
            negotiated = Some(v);
        }
        if let Some(resp) = crate::http::check_request(text, false) {
            // Refused before rmcp: answer here, with the request's id when it has one.
            let v: Option<Value> = serde_json::from_str(text).ok();
            let modern = v
                .as_ref()
                .and_then(version_of)
                .or_else(|| negotiated.clone())
                .is_some_and(|ver| ver.as_str() >= "2026-07-28");
            let resp = if modern {
                crate::http::check_request(text, true).unwrap_or(resp)
            } else {
                resp
            };
            let body = axum::body::to_bytes(resp.into_body(), MAX_LINE)
                .await
                .unwrap_or_default();
            let mut answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            if answer.get("id") == Some(&Value::Null) {
                if let Some(id) = v.as_ref().and_then(|v| v.get("id")) {
                    answer["id"] = id.clone();
                }
            }
            let _ = out.send(answer.to_string()).await;
            continue;
        }
        // The hot path: a tool call goes straight to the handler (a long poll on a
        // task of its own, so it does not hold the reader), and its answer straight
        // to the writer: no hop through rmcp's session loop and its per-answer send
        // task. A plain call is read as just that ([`crate::mcp::direct::plain_call`]);
        // anything else gets rmcp's parse, which may still find a direct call.
        let legacy = initialized && negotiated.as_deref().is_some_and(|v| v < MODERN);
        let plain = if legacy {
            crate::mcp::direct::plain_call(text.as_bytes())
        } else {
            None
        };
        if let Some((id, params)) = plain {
            run_direct(&handler, &out, &pending, id, params).await;
            continue;
        }
        match serde_json::from_str::<RxJsonRpcMessage<RoleServer>>(text) {
            Ok(mut msg) => {
                if let Some((id, params)) = direct_call(&mut msg, legacy) {
                    run_direct(&handler, &out, &pending, id, params).await;
                    continue;
                }
                if matches!(&msg, JsonRpcMessage::Notification(_))
                    && text.contains("notifications/initialized")
                {
                    initialized = true;
                }
                match &msg {
                    JsonRpcMessage::Request(r) => {
                        pending.add(serde_json::to_string(&r.id).unwrap_or_default())
                    }
                    // rmcp answers nothing to a cancelled request: stop waiting for it.
                    JsonRpcMessage::Notification(_) if text.contains("notifications/cancelled") => {
                        if let Some(id) = serde_json::from_str::<Value>(text)
                            .ok()
                            .and_then(|v| v.pointer("/params/requestId").cloned())
                        {
                            pending.done(&id.to_string());
                        }
                    }
                    _ => {}
                }
                if to_rmcp.send(msg).await.is_err() {
                    break; // the session ended
                }
            }
            Err(e) => {
                let id = serde_json::from_str::<Value>(text)
                    .ok()
                    .and_then(|v| v.get("id").cloned())
                    .unwrap_or(Value::Null);
                let _ = out
                    .send(rpc_error(id, -32600, format!("invalid request: {e}")))
                    .await;
            }
        }
    }
    // stdin closed: answer what was asked before ending the session.
    pending.drained().await;
    drop(to_rmcp);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protocol_version_comes_from_meta_or_initialize() {
        let init = json!({"method": "initialize", "params": {"protocolVersion": "2025-06-18"}});
        assert_eq!(version_of(&init).as_deref(), Some("2025-06-18"));
        let call = json!({"method": "tools/call", "params": {"protocolVersion": "x", "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
        assert_eq!(version_of(&call).as_deref(), Some("2026-07-28"));
        assert_eq!(version_of(&json!({"method": "tools/call"})), None);
    }
}
