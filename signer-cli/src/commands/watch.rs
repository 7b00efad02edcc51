//! `watch`: follow the server's event stream and print each new proposal this
//! approver may sign, one escaped line each; reconnect with exponential back-off.
//!
//! On every (re)connection the pending list is read once too, so that nothing
//! proposed while disconnected is missed; each proposal is printed once.
//!
//! The server ends a stream when its read signature leaves the server's time window
//! and on every keyring reload, after a `reauth` event. watch then signs a new read
//! at once (no back-off) and resumes with `Last-Event-ID`, the id of the last event
//! it saw, so the server sends what happened in between first.

use super::outln;
use crate::client::{now_unix, Client};
use crate::config::Settings;
use crate::display::{to_json, truncate};
use crate::failure::{kind_of, network, ExitKind};
use crate::proposal::{check, expires_in, Checked};
use anyhow::Result;
use approval_core::{ApproverName, ServerId, Status};
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

/// The longest wait between reconnection attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Largest event accepted, so a hostile stream cannot exhaust memory.
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field (`message` when absent).
    pub name: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// An incremental `text/event-stream` parser (the WHATWG rules that matter here:
/// lines end in LF, CR or CRLF, even when CR and LF arrive in different chunks).
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    after_cr: bool,
    name: Option<String>,
    data: Option<String>,
    /// The `id:` field seen for the event being read.
    id: Option<String>,
    /// The id of the last dispatched event that had one (the WHATWG "last event ID").
    last_id: Option<String>,
}

impl SseParser {
    /// Feeds bytes; returns the events completed by them.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Event>> {
        self.buf.extend_from_slice(bytes);
        let mut events = Vec::new();
        loop {
            if self.after_cr {
                match self.buf.first() {
                    Some(b'\n') => {
                        self.buf.remove(0);
                        self.after_cr = false;
                    }
                    Some(_) => self.after_cr = false,
                    None => break,
                }
            }
            let Some(pos) = self.buf.iter().position(|&b| b == b'\n' || b == b'\r') else {
                break;
            };
            let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
            self.after_cr = line.pop() == Some(b'\r');
            let line = String::from_utf8(line)
                .map_err(|_| network("the event stream is not UTF-8 text"))?;
            self.line(line, &mut events);
        }
        let held = self.buf.len() + self.data.as_ref().map_or(0, String::len);
        if held > MAX_EVENT_BYTES {
            return Err(network("an event from the server is too large: refused"));
        }
        Ok(events)
    }

    /// The id to resume from (`Last-Event-ID`), once an event carried one.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    fn line(&mut self, line: String, events: &mut Vec<Event>) {
        if line.is_empty() {
            if let Some(id) = self.id.take() {
                self.last_id = Some(id);
            }
            if let Some(data) = self.data.take() {
                events.push(Event {
                    name: self.name.take().unwrap_or_else(|| "message".into()),
                    data,
                });
            }
            self.name = None;
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_str(), ""),
        };
        match field {
            "event" => self.name = Some(value.to_owned()),
            "id" if !value.contains('\0') && value.len() <= 256 => self.id = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
}

struct Watcher<'a> {
    client: &'a Client,
    me: ApproverName,
    server_id: Option<ServerId>,
    printed: BTreeSet<String>,
    json: bool,
    /// The id of the last event seen, sent as `Last-Event-ID` on reconnecting.
    last_event_id: Option<String>,
    /// `--notify`: the desktop's notification service, while it works.
    desktop: Option<crate::desktop::Desktop>,
    /// `ui`: instead of printing, count every proposal event here (the page re-reads
    /// the list when the count moves).
    changed: Option<tokio::sync::watch::Sender<u64>>,
}

/// How a stream ended without an error.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The server asked for a fresh signature (`reauth`): reconnect at once.
    Reauth(String),
    /// The server closed it.
    Closed,
}

impl Watcher<'_> {
    async fn handle(&mut self, view: &Value) {
        if let Some(tx) = &self.changed {
            tx.send_modify(|n| *n = n.wrapping_add(1));
            return;
        }
        let id = view
            .get("proposal_id")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        let Some(server_id) = &self.server_id else {
            return;
        };
        match check(view, None, server_id) {
            Ok(c) => {
                if self.announce(&c) {
                    self.notify(&c).await;
                }
            }
            Err(e) => {
                if self.printed.insert(format!("!{id}")) {
                    if self.json {
                        outln(&to_json(&json!({
                            "proposal_id": id, "checked": false, "problem": e.to_string()
                        })));
                    } else {
                        outln(&format!(
                            "REFUSED {}: {e}",
                            truncate(&id, approval_core::ids::ID_MAX_LEN)
                        ));
                    }
                }
            }
        }
    }

    /// A desktop notification for a new proposal (`--notify`); when the service
    /// fails, one line says so and watch goes on printing.
    async fn notify(&mut self, c: &Checked) {
        let Some(d) = &self.desktop else { return };
        let (title, body) = crate::desktop::content(
            &c.preview,
            &c.hash.prefix(8),
            c.quorum.have,
            c.quorum.need,
            d.markup(),
        );
        if let Err(e) = d.show(title, body).await {
            eprintln!(
                "signer-cli: desktop notifications are off: the notification service failed ({}); watch goes on printing",
                crate::display::escape(&e)
            );
            self.desktop = None;
        }
    }

    fn announce(&mut self, c: &Checked) -> bool {
        let p = &c.preview;
        let mine = c.has_decided(&self.me, "approve") || c.has_decided(&self.me, "reject");
        if c.status != Status::Pending || !c.may_decide(&self.me) || mine {
            return false;
        }
        if !self.printed.insert(p.proposal_id.to_string()) {
            return false;
        }
        let now = now_unix();
        if self.json {
            outln(
                &serde_json::to_string(&json!({
                    "proposal_id": p.proposal_id.as_str(),
                    "checked": true,
                    "kind": p.kind.as_str(),
                    "summary": p.summary,
                    "requested_by": p.requested_by.as_str(),
                    "created_at": p.created_at.to_rfc3339(),
                    "expires_at": p.expires_at.to_rfc3339(),
                    "preview_sha256": c.hash.to_hex(),
                    "approvals": {"have": c.quorum.have, "need": c.quorum.need},
                }))
                .map(|s| crate::display::json_safe(&s))
                .unwrap_or_default(),
            );
        } else {
            outln(&format!(
                "NEW {}  {}  \"{}\"  by {}  approvals {}/{}  expires in {}  hash {}  (signer-cli show {})",
                p.proposal_id,
                p.kind,
                truncate(&p.summary, 60),
                p.requested_by,
                c.quorum.have,
                c.quorum.need,
                expires_in(p, now),
                c.hash.prefix(8),
                p.proposal_id
            ));
        }
        true
    }

    /// Reads the pending list, so nothing proposed while not listening is missed.
    async fn catch_up(&mut self) -> Result<()> {
        let list = self.client.get("/v1/proposals?status=pending").await?;
        if let Some(ps) = list.get("proposals").and_then(Value::as_array) {
            for p in ps {
                self.handle(p).await;
            }
        }
        // `ui`: what changed while not listening (a proposal decided elsewhere leaves
        // the list without any event here) is re-read by the page too.
        if let Some(tx) = &self.changed {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
        Ok(())
    }

    /// One connection: returns how the stream ended when the server closed it.
    async fn session(&mut self, connected: &mut bool) -> Result<Ended> {
        self.server_id = Some(self.client.recheck_server_id().await?);
        let resp = self.client.events(self.last_event_id.as_deref()).await?;
        *connected = true;
        eprintln!(
            "signer-cli: watching {} as {} (Ctrl-C to stop)",
            self.client.base(),
            self.me
        );
        self.catch_up().await?;
        let mut parser = SseParser::default();
        let mut stream = resp.bytes_stream();
        let mut reauth = None;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| network(format!("event stream broken: {e}")))?;
            let events = parser.push(&chunk)?;
            if let Some(id) = parser.last_event_id() {
                self.last_event_id = Some(id.to_owned());
            }
            for ev in events {
                if ev.name == "reauth" {
                    let why = approval_core::json::parse_exact(&ev.data)
                        .ok()
                        .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
                        .unwrap_or_else(|| "the server asked for a new signature".to_owned());
                    reauth = Some(crate::display::escape(&why));
                    continue;
                }
                if ev.name == "lagged" {
                    // The server dropped events for us: read the pending list again.
                    self.catch_up().await?;
                    continue;
                }
                if ev.name != "proposal" {
                    continue;
                }
                match approval_core::json::parse_exact(&ev.data) {
                    Ok(v) => self.handle(&v).await,
                    Err(e) => eprintln!(
                        "signer-cli: ignored an event that is not exact JSON: {}",
                        crate::display::escape(&e.to_string())
                    ),
                }
            }
        }
        Ok(reauth.map_or(Ended::Closed, Ended::Reauth))
    }
}

/// `signer-cli watch [--notify]`.
pub async fn watch(settings: &Settings, notify: bool) -> Result<()> {
    let client = super::connect(settings)?;
    let me = client
        .key()
        .map(|k| k.name.clone())
        .ok_or_else(|| crate::failure::usage("watch needs your key (--key FILE)"))?;
    let mut w = Watcher {
        client: &client,
        me,
        server_id: None,
        printed: BTreeSet::new(),
        json: settings.json,
        last_event_id: None,
        desktop: None,
        changed: None,
    };
    if notify {
        match tokio::task::spawn_blocking(crate::desktop::Desktop::probe).await {
            Ok(Ok(d)) => w.desktop = Some(d),
            Ok(Err(why)) => eprintln!(
                "signer-cli: desktop notifications are off: this desktop has no notification service ({}); watch goes on printing",
                crate::display::escape(&why)
            ),
            Err(e) => eprintln!(
                "signer-cli: desktop notifications are off ({e}); watch goes on printing"
            ),
        }
    }
    follow_loop(&mut w).await
}

/// Follows the stream until a failure that is not worth retrying: reconnects with
/// back-off after network trouble, at once after `reauth`.
async fn follow_loop(w: &mut Watcher<'_>) -> Result<()> {
    let mut backoff = Duration::from_secs(1);
    loop {
        let mut connected = false;
        let why = match w.session(&mut connected).await {
            Ok(Ended::Reauth(why)) => {
                // Not a failure: sign again and resume where the stream ended.
                eprintln!("signer-cli: {why}; signing again and resuming");
                backoff = Duration::from_secs(1);
                continue;
            }
            Ok(Ended::Closed) => "the server closed the event stream".to_owned(),
            Err(e) => {
                let retry =
                    kind_of(&e) == ExitKind::Network || e.to_string().starts_with("LIMIT_EXCEEDED");
                if !retry {
                    return Err(e);
                }
                e.to_string()
            }
        };
        if connected {
            backoff = Duration::from_secs(1);
        }
        eprintln!("signer-cli: {why}; reconnecting in {}s", backoff.as_secs());
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// What `ui` runs: the same signed stream, reconnection and re-authentication as
/// `watch`, with every proposal event (and every catch-up after a reconnection)
/// counted on `changed` instead of printed.
pub async fn follow_changes(
    client: &Client,
    me: ApproverName,
    changed: tokio::sync::watch::Sender<u64>,
) -> Result<()> {
    let mut w = Watcher {
        client,
        me,
        server_id: None,
        printed: BTreeSet::new(),
        json: false,
        last_event_id: None,
        desktop: None,
        changed: Some(changed),
    };
    follow_loop(&mut w).await
}
