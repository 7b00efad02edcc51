//! `watch`: follow the server's event stream and print each new proposal this
//! approver may sign, one escaped line each; reconnect with exponential back-off.
//!
//! On every (re)connection the pending list is read once too, so that nothing
//! proposed while disconnected is missed; each proposal is printed once.

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

    fn line(&mut self, line: String, events: &mut Vec<Event>) {
        if line.is_empty() {
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
}

impl Watcher<'_> {
    fn handle(&mut self, view: &Value) {
        let id = view
            .get("proposal_id")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        let Some(server_id) = &self.server_id else {
            return;
        };
        match check(view, None, server_id) {
            Ok(c) => self.announce(&c),
            Err(e) => {
                if self.printed.insert(format!("!{id}")) {
                    if self.json {
                        outln(&to_json(&json!({
                            "proposal_id": id, "checked": false, "problem": e.to_string()
                        })));
                    } else {
                        outln(&format!("REFUSED {}: {e}", truncate(&id, 40)));
                    }
                }
            }
        }
    }

    fn announce(&mut self, c: &Checked) {
        let p = &c.preview;
        let mine = c.has_decided(&self.me, "approve") || c.has_decided(&self.me, "reject");
        if c.status != Status::Pending || !c.may_decide(&self.me) || mine {
            return;
        }
        if !self.printed.insert(p.proposal_id.to_string()) {
            return;
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
    }

    /// Reads the pending list, so nothing proposed while not listening is missed.
    async fn catch_up(&mut self) -> Result<()> {
        let list = self.client.get("/v1/proposals?status=pending").await?;
        if let Some(ps) = list.get("proposals").and_then(Value::as_array) {
            for p in ps {
                self.handle(p);
            }
        }
        Ok(())
    }

    /// One connection: returns Ok when the server closed the stream.
    async fn session(&mut self, connected: &mut bool) -> Result<()> {
        self.server_id = Some(self.client.recheck_server_id().await?);
        let resp = self.client.events().await?;
        *connected = true;
        eprintln!(
            "signer-cli: watching {} as {} (Ctrl-C to stop)",
            self.client.base(),
            self.me
        );
        self.catch_up().await?;
        let mut parser = SseParser::default();
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| network(format!("event stream broken: {e}")))?;
            for ev in parser.push(&chunk)? {
                if ev.name == "lagged" {
                    // The server dropped events for us: read the pending list again.
                    self.catch_up().await?;
                    continue;
                }
                if ev.name != "proposal" {
                    continue;
                }
                match approval_core::json::parse_exact(&ev.data) {
                    Ok(v) => self.handle(&v),
                    Err(e) => eprintln!(
                        "signer-cli: ignored an event that is not exact JSON: {}",
                        crate::display::escape(&e.to_string())
                    ),
                }
            }
        }
        Ok(())
    }
}

/// `signer-cli watch`.
pub async fn watch(settings: &Settings) -> Result<()> {
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
    };
    let mut backoff = Duration::from_secs(1);
    loop {
        let mut connected = false;
        let why = match w.session(&mut connected).await {
            Ok(()) => "the server closed the event stream".to_owned(),
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
