//! `subscriptions/listen` for task status: SEP-2663's `notifications/tasks`, pushed to a
//! client that asks for them so it need not wait for its next `tasks/get` (issue #33).
//!
//! rmcp's subscription filter has no `tasksStatus` member (it would drop it unread), so
//! the HTTP layer hands such a request here ([`ask`]) and streams what [`TaskListen`]
//! yields as SSE: the acknowledgement naming the task ids agreed to, each task's current
//! state, then one notification per change (the task exactly as `tasks/get` would answer
//! it at that moment), and at the end the listen request's own result.
//!
//! A listen is a wait like an `approval_status` long poll and counts against the same
//! per-agent limit ([`crate::service::long_poll::MAX_LONG_POLLS_PER_AGENT`]), so one
//! agent's listens never hold capacity another's requests need. It names at most
//! [`MAX_LISTENED_TASKS`] ids, only the agent's own tasks are accepted (another agent's
//! id is silently left out of the acknowledgement, as an unknown one is), and it ends
//! by itself: when every task it follows has finished, after [`LISTEN_FOR`], or when the
//! configuration reloads (an agent whose token was withdrawn must not keep a stream).
//! Notifications are a help, never the truth: the client still polls `tasks/get`.

use super::McpHandler;
use crate::service::long_poll::Slot;
use crate::service::Event;
use approval_core::ids::AgentName;
use rmcp::model::TaskStatus;
use rmcp::ErrorData as McpError;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::{broadcast, watch};

/// The most task ids one `subscriptions/listen` may name.
pub const MAX_LISTENED_TASKS: usize = 16;

/// How long one listen lasts at most before it ends with its result (the client listens
/// again): a stream must not outlive a token forever.
pub const LISTEN_FOR: Duration = Duration::from_secs(600);

/// How often a listen reads its tasks again with no announcement: a lagged broadcast,
/// or a change no event marks (a cooldown's end changes the status message).
const RECHECK: Duration = Duration::from_secs(5);

/// The key that ties a notification to the listen request that asked for it.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// A `subscriptions/listen` that asks for task status, as the HTTP layer read it.
#[derive(Clone)]
pub struct ListenAsk {
    /// The JSON-RPC id of the request, which is also the subscription's id.
    id: Value,
    /// `params.notifications.tasksStatus`, not yet checked.
    task_ids: Value,
    /// Whether the request declared the tasks extension in its client capabilities.
    declares_tasks: bool,
}

impl ListenAsk {
    /// The request's JSON-RPC id.
    pub fn id(&self) -> &Value {
        &self.id
    }
}

/// Reads `body` as a `subscriptions/listen` request naming `tasksStatus`; `None` for
/// anything else (rmcp serves it as before).
pub fn ask(body: &[u8]) -> Option<ListenAsk> {
    // Every `/mcp` POST passes here: most are not listens, and are not parsed twice.
    if !contains(body, b"subscriptions/listen") {
        return None;
    }
    let v: Value = serde_json::from_slice(body).ok()?;
    if v.get("method")?.as_str()? != "subscriptions/listen" {
        return None;
    }
    let id = v
        .get("id")
        .filter(|i| i.is_string() || i.is_i64() || i.is_u64())?;
    let params = v.get("params")?;
    let task_ids = params.get("notifications")?.get("tasksStatus")?.clone();
    let declares_tasks = params
        .get("_meta")
        .and_then(|m| m.get("io.modelcontextprotocol/clientCapabilities"))
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(rmcp::model::TASKS_EXTENSION_ID))
        .is_some();
    Some(ListenAsk {
        id: id.clone(),
        task_ids,
        declares_tasks,
    })
}

/// Whether `needle` occurs in `hay`.
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// What the stream is to send next.
enum Phase {
    /// The acknowledgement, then each accepted task's current state.
    Opening,
    /// Notifications as tasks change.
    Following,
    /// The listen request's result has been sent: the stream ends.
    Done,
}

/// One open listen: the tasks it follows and what it last told of each.
pub struct TaskListen {
    handler: McpHandler,
    agent: AgentName,
    id: Value,
    /// Each followed task's id and the last state sent for it (`None`: not yet).
    tasks: Vec<(String, Option<Value>)>,
    /// Messages ready to send, in order.
    queue: VecDeque<Value>,
    rx: broadcast::Receiver<Event>,
    reloads: watch::Receiver<u64>,
    until: tokio::time::Instant,
    phase: Phase,
    _slot: Slot,
}

impl McpHandler {
    /// Opens a listen for `agent`: refuses a request that did not declare the tasks
    /// extension (-32021, as for `tasks/get`), a malformed or too long id list
    /// (-32602), and an agent that holds its most waits already; otherwise keeps the
    /// ids that are the agent's own tasks.
    pub fn listen_tasks(&self, agent: AgentName, ask: ListenAsk) -> Result<TaskListen, McpError> {
        if !ask.declares_tasks {
            return Err(McpError::new(
                rmcp::model::ErrorCode(-32021),
                "task status notifications need the io.modelcontextprotocol/tasks extension: declare it in the request's client capabilities",
                Some(json!({"requiredCapabilities": {"extensions": {rmcp::model::TASKS_EXTENSION_ID: {}}}})),
            ));
        }
        let ids: Vec<String> = match &ask.task_ids {
            Value::Array(a) if a.len() <= MAX_LISTENED_TASKS => a
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    McpError::invalid_params(
                        "notifications.tasksStatus must be a list of task ids (strings)",
                        None,
                    )
                })?,
            _ => {
                return Err(McpError::invalid_params(
                    format!(
                        "notifications.tasksStatus must be a list of at most {MAX_LISTENED_TASKS} task ids"
                    ),
                    None,
                ))
            }
        };
        let slot = self.svc.hold_wait(&agent).ok_or_else(|| {
            McpError::invalid_request(
                format!(
                    "you already hold {} waits (approval_status waits and listens): end one, or poll tasks/get",
                    crate::service::long_poll::MAX_LONG_POLLS_PER_AGENT
                ),
                None,
            )
        })?;
        // Subscribed before the first read, so no change falls between the two.
        let rx = self.svc.subscribe();
        let mut reloads = self.svc.reloads();
        reloads.mark_unchanged();
        let mut accepted: Vec<(String, Option<Value>)> = Vec::new();
        for id in ids {
            let known = self.task_record(&agent, &id).is_ok();
            if known && !accepted.iter().any(|(a, _)| *a == id) {
                accepted.push((id, None));
            }
        }
        let mut ack = json!({
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {
                "notifications": {"tasksStatus": accepted.iter().map(|(i, _)| i).collect::<Vec<_>>()},
            },
        });
        ack["params"]["_meta"] = json!({ SUBSCRIPTION_ID: ask.id });
        Ok(TaskListen {
            handler: self.clone(),
            agent,
            id: ask.id,
            tasks: accepted,
            queue: VecDeque::from([ack]),
            rx,
            reloads,
            until: tokio::time::Instant::now() + LISTEN_FOR,
            phase: Phase::Opening,
            _slot: slot,
        })
    }
}

impl TaskListen {
    /// The next message to send, or `None` when the stream has ended.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(m) = self.queue.pop_front() {
                return Some(m);
            }
            match self.phase {
                Phase::Done => return None,
                Phase::Opening => {
                    self.phase = Phase::Following;
                    self.read_all();
                }
                Phase::Following => {
                    if self.tasks.is_empty() {
                        self.finish();
                        continue;
                    }
                    tokio::select! {
                        ev = self.rx.recv() => match ev {
                            Ok(ev) => {
                                if let Some(i) = self.tasks.iter().position(|(t, _)| t == ev.id.as_str()) {
                                    self.read(i);
                                }
                            }
                            // Lagged or closed: read everything again.
                            Err(_) => self.read_all(),
                        },
                        _ = tokio::time::sleep(RECHECK) => self.read_all(),
                        _ = self.reloads.changed() => self.finish(),
                        _ = tokio::time::sleep_until(self.until) => self.finish(),
                    }
                }
            }
        }
    }

    /// Reads every followed task, queueing a notification for each that changed.
    fn read_all(&mut self) {
        for i in (0..self.tasks.len()).rev() {
            self.read(i);
        }
    }

    /// Reads task `i`, queues a notification when it changed, and stops following it
    /// once it has finished (or can no longer be read as this agent's).
    fn read(&mut self, i: usize) {
        let Ok(rec) = self.handler.task_record(&self.agent, &self.tasks[i].0) else {
            self.tasks.remove(i);
            return;
        };
        let Ok(task) = self.handler.task_of(&rec) else {
            return;
        };
        let finished = !matches!(task.task.status, TaskStatus::Working);
        let Ok(mut params) = serde_json::to_value(&task) else {
            return;
        };
        if self.tasks[i].1.as_ref() != Some(&params) {
            self.tasks[i].1 = Some(params.clone());
            params["_meta"] = json!({ SUBSCRIPTION_ID: self.id });
            self.queue.push_back(json!({
                "jsonrpc": "2.0",
                "method": "notifications/tasks",
                "params": params,
            }));
        }
        if finished {
            self.tasks.remove(i);
        }
    }

    /// Queues the listen request's result, which ends the stream.
    fn finish(&mut self) {
        self.phase = Phase::Done;
        self.queue.push_back(json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "result": {"resultType": "complete", "_meta": { SUBSCRIPTION_ID: self.id }},
        }));
    }
}
