//! Notifications: the `[[notify]]` channels a policy names, and what a notification
//! says. Pure: the server's `notify` module delivers what these functions build.
//!
//! A notification only tells that something happened and how to look at it: the
//! proposal id, kind, summary and requester (escaped by [`crate::escape`], the same
//! policy `signer-cli` shows them with, look-alike words named in warnings), the
//! first 8 characters of the preview hash, the approvals so far, and the
//! `signer-cli` commands to run. It never says a proposal waits, nor offers the
//! `approve` command, once the proposal can no longer be approved: every end
//! (revoked, withdrawn, expired, policy changed, ...) is its own event, and a
//! `waiting` notice sent after such an end says so instead.
//! It never carries a link or a token that approves (approving is a signature made
//! on the approver's own machine), and never the payload unless the channel sets
//! `include_payload = true` (chat and mail are less trusted than the approver API).

use crate::escape::{escape, lookalike_warnings};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// How a webhook body is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    /// Our own JSON document (see docs/PROTOCOL.md, Notifications).
    #[default]
    Json,
    /// Slack-compatible `{text, blocks}` with mrkdwn escaped.
    Slack,
}

impl WebhookFormat {
    fn is_json(&self) -> bool {
        *self == WebhookFormat::Json
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One `[[notify]]` entry. Secrets and the mail relay never live here: policies
/// are shown to approvers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum NotifyChannel {
    /// POST to a URL.
    Webhook {
        /// `http://` or `https://` URL.
        url: String,
        /// `json` (default) or `slack`.
        #[serde(default, skip_serializing_if = "WebhookFormat::is_json")]
        format: WebhookFormat,
        /// Name of an environment variable of the server holding the HMAC-SHA256 key
        /// for the `X-Approval-Signature` header.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secret_from: Option<String>,
        /// Carry the payload (default false).
        #[serde(default, skip_serializing_if = "is_false")]
        include_payload: bool,
    },
    /// Mail through the server's SMTP relay (`--smtp`).
    Email {
        /// Recipients.
        to: Vec<String>,
        /// Carry the payload (default false).
        #[serde(default, skip_serializing_if = "is_false")]
        include_payload: bool,
    },
}

impl NotifyChannel {
    /// Whether this channel carries the payload.
    pub fn include_payload(&self) -> bool {
        match self {
            NotifyChannel::Webhook {
                include_payload, ..
            }
            | NotifyChannel::Email {
                include_payload, ..
            } => *include_payload,
        }
    }

    /// Checks the entry; a refusal names the key at fault and what to write.
    pub fn check(&self) -> Result<(), String> {
        match self {
            NotifyChannel::Webhook {
                url, secret_from, ..
            } => {
                let rest = url
                    .strip_prefix("https://")
                    .or_else(|| url.strip_prefix("http://"));
                if rest.is_none_or(|r| r.is_empty())
                    || url.chars().any(|c| c.is_whitespace() || c.is_control())
                {
                    return Err(format!(
                        "notify.url {url:?} must be an http:// or https:// URL"
                    ));
                }
                if let Some(s) = secret_from {
                    let ok = !s.is_empty()
                        && s.bytes()
                            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
                    if !ok {
                        return Err(format!(
                            "notify.secret_from {s:?} must name an environment variable of the server (A-Z, 0-9, _), never hold the secret itself"
                        ));
                    }
                }
            }
            NotifyChannel::Email { to, .. } => {
                if to.is_empty() {
                    return Err("notify.to is empty: name at least one mail address".into());
                }
                for a in to {
                    let bad = a.chars().any(|c| {
                        c.is_control() || c.is_whitespace() || c == ',' || c == '<' || c == '>'
                    });
                    let parts: Vec<&str> = a.split('@').collect();
                    if bad || parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
                        return Err(format!(
                            "notify.to entry {a:?} is not a plain mail address like approvers@example.com"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// What happened to a proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyEvent {
    /// It waits for approvals.
    Waiting,
    /// Quorum was reached; the agent may execute it.
    QuorumReached,
    /// It was executed (the outcome says how it went).
    Executed,
    /// The outcome is unknown: a human must resolve it.
    OutcomeUnknown,
    /// Vetoed.
    Rejected,
    /// Its deadline passed.
    Expired,
    /// An approver revoked it after quorum: it will not run.
    Revoked,
    /// The agent withdrew it.
    Withdrawn,
    /// Its kind's policy (or a key its approvals need) changed: it ended unrun.
    PolicyChanged,
    /// A human resolved an unknown outcome.
    Resolved,
}

impl NotifyEvent {
    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            NotifyEvent::Waiting => "waiting",
            NotifyEvent::QuorumReached => "quorum_reached",
            NotifyEvent::Executed => "executed",
            NotifyEvent::OutcomeUnknown => "outcome_unknown",
            NotifyEvent::Rejected => "rejected",
            NotifyEvent::Expired => "expired",
            NotifyEvent::Revoked => "revoked",
            NotifyEvent::Withdrawn => "withdrawn",
            NotifyEvent::PolicyChanged => "policy_changed",
            NotifyEvent::Resolved => "resolved",
        }
    }
}

/// Everything a notification may say, gathered by the server. Text fields here are
/// raw (as the agent wrote them); the builders escape them.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// The event.
    pub event: NotifyEvent,
    /// The server's id.
    pub server_id: String,
    /// The proposal id.
    pub proposal_id: String,
    /// The kind.
    pub kind: String,
    /// The agent's summary (untrusted).
    pub summary: String,
    /// The authenticated requester.
    pub requested_by: String,
    /// The full preview hash (only its first 8 characters are sent).
    pub preview_sha256: String,
    /// Approvers who approved so far.
    pub approvals: Vec<String>,
    /// The quorum.
    pub quorum: u32,
    /// Approvers who have not decided yet.
    pub undecided: Vec<String>,
    /// The executor's outcome, for `executed`.
    pub outcome: Option<String>,
    /// When it happened (RFC 3339).
    pub at: String,
    /// The payload, only when the channel sets `include_payload`.
    pub payload: Option<Value>,
    /// The proposal's status when the notification is sent (`PENDING`, `REVOKED`,
    /// ...): a `waiting` notice sent late must not invite an approval that fails.
    pub status: String,
    /// The approver who revoked or resolved it (`revoked`, `resolved`).
    pub by: Option<String>,
    /// The gate's approver page for this proposal, when its kind accepts passkeys
    /// (issue #34). It lets its holder read the proposal; deciding there still needs
    /// the passkey ceremony, so the link acts on nothing by itself.
    pub approve_url: Option<String>,
}

/// Escapes text for Slack mrkdwn: `&`, `<`, `>` as Slack asks, so no `<url|label>`
/// link, `<!channel>` or `<@user>` mention can be formed.
pub fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Untrusted text for Slack: escaped as [`crate::escape::escape`], backticks shown as `\u{60}`, and
/// set in an inline code span, where Slack makes no links from bare URLs or
/// formatting from `*`/`_`.
fn slack_code(s: &str) -> String {
    let e = escape(s).replace('`', "\\u{60}");
    if e.is_empty() {
        "(none)".into()
    } else {
        format!("`{}`", slack_escape(&e))
    }
}

impl Notice {
    fn hash8(&self) -> &str {
        self.preview_sha256.get(..8).unwrap_or(&self.preview_sha256)
    }

    /// The one-line title (also the mail subject, after a `[approval-gate] ` prefix).
    pub fn title(&self) -> String {
        let (id, kind) = (&self.proposal_id, escape(&self.kind));
        let by = escape(self.by.as_deref().unwrap_or("an approver"));
        match self.event {
            NotifyEvent::Waiting if !self.approvable() => format!(
                "{id} ({kind}) no longer waits for approval: it is {}",
                escape(&self.status)
            ),
            NotifyEvent::Waiting => format!(
                "{id} ({kind}) waits for approval: {}/{} approvals",
                self.approvals.len(),
                self.quorum
            ),
            NotifyEvent::QuorumReached => {
                format!("{id} ({kind}) reached quorum: the agent may execute it")
            }
            NotifyEvent::Executed => format!(
                "{id} ({kind}) was executed: {}",
                escape(self.outcome.as_deref().unwrap_or("unknown"))
            ),
            NotifyEvent::OutcomeUnknown => {
                format!("{id} ({kind}) OUTCOME_UNKNOWN: a human must resolve it")
            }
            NotifyEvent::Rejected => format!("{id} ({kind}) was rejected"),
            NotifyEvent::Expired => format!("{id} ({kind}) expired"),
            NotifyEvent::Revoked => format!("{id} ({kind}) was revoked by {by}: it will not run"),
            NotifyEvent::Withdrawn => {
                format!("{id} ({kind}) was withdrawn by the agent: it will not run")
            }
            NotifyEvent::PolicyChanged => format!(
                "{id} ({kind}) ended POLICY_CHANGED: its policy or an approver's key changed, it will not run"
            ),
            NotifyEvent::Resolved => format!(
                "{id} ({kind}) was resolved by {by}: {}",
                escape(&self.status)
            ),
        }
    }

    /// Whether an approver can still approve: a `waiting` event of a proposal that
    /// is still PENDING when the notice is sent. Only then is `approve` offered.
    pub fn approvable(&self) -> bool {
        self.event == NotifyEvent::Waiting && self.status == "PENDING"
    }

    /// Who is still needed, in words (only while [`Notice::approvable`]).
    pub fn still_needed(&self) -> Option<String> {
        if !self.approvable() {
            return None;
        }
        let more = (self.quorum as usize).saturating_sub(self.approvals.len());
        Some(format!(
            "{more} more approval(s) from {}",
            if self.undecided.is_empty() {
                "(nobody left)".to_string()
            } else {
                self.undecided.join(", ")
            }
        ))
    }

    /// The commands an approver runs: `show` always, `approve` only while it can
    /// be approved ([`Notice::approvable`]), `resolve` when the outcome is unknown
    /// (and still unresolved).
    pub fn commands(&self) -> Vec<(&'static str, String)> {
        let id = &self.proposal_id;
        let mut out = vec![("show", format!("signer-cli show {id}"))];
        match self.event {
            NotifyEvent::Waiting if self.approvable() => {
                out.push(("approve", format!("signer-cli approve {id}")))
            }
            NotifyEvent::OutcomeUnknown if self.status == "OUTCOME_UNKNOWN" => out.push((
                "resolve",
                format!("signer-cli resolve {id} --outcome succeeded|failed"),
            )),
            _ => {}
        }
        out
    }

    /// One line per word of the agent's text (kind, summary, requester, and the
    /// payload when carried) that mixes scripts or only looks Latin, as `signer-cli`
    /// warns (e.g. `WARNING: "аdmin" in summary mixes Cyrillic and Latin letters`).
    pub fn warnings(&self) -> Vec<String> {
        lookalike_warnings(
            &[
                ("kind", &self.kind),
                ("summary", &self.summary),
                ("requested by", &self.requested_by),
            ],
            self.payload.as_ref().unwrap_or(&Value::Null),
        )
    }

    fn approvals_text(&self) -> String {
        if self.approvals.is_empty() {
            format!("0/{} (none yet)", self.quorum)
        } else {
            format!(
                "{}/{} ({})",
                self.approvals.len(),
                self.quorum,
                self.approvals.join(", ")
            )
        }
    }

    /// The plain-text body (mail).
    pub fn text(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "{}", self.title());
        let _ = writeln!(t);
        let _ = writeln!(t, "proposal:     {}", self.proposal_id);
        let _ = writeln!(t, "kind:         {}", escape(&self.kind));
        let _ = writeln!(t, "summary:      \"{}\"", escape(&self.summary));
        let _ = writeln!(t, "requested by: {}", escape(&self.requested_by));
        for w in self.warnings() {
            let _ = writeln!(t, "{w}");
        }
        let _ = writeln!(t, "status now:   {}", escape(&self.status));
        let _ = writeln!(t, "preview hash: {} (first 8 characters)", self.hash8());
        let _ = writeln!(t, "approvals:    {}", self.approvals_text());
        if let Some(n) = self.still_needed() {
            let _ = writeln!(t, "still needed: {n}");
        }
        if let Some(o) = &self.outcome {
            let _ = writeln!(t, "outcome:      {}", escape(o));
        }
        let _ = writeln!(t, "at:           {}", self.at);
        let _ = writeln!(t);
        for (what, cmd) in self.commands() {
            let _ = writeln!(t, "{what:<8}      {cmd}");
        }
        if let Some(u) = &self.approve_url {
            let _ = writeln!(t, "page          {u}");
        }
        let _ = writeln!(t);
        let _ = writeln!(
            t,
            "Check that signer-cli (or the page) shows a preview hash starting with the one above."
        );
        let _ = writeln!(
            t,
            "Nothing in this message can approve: approving is a signature made"
        );
        if self.approve_url.is_some() {
            let _ = writeln!(
                t,
                "with signer-cli on your own machine, or with your passkey on the page."
            );
        } else {
            let _ = writeln!(t, "with signer-cli on your own machine.");
        }
        if let Some(p) = &self.payload {
            let _ = writeln!(t);
            let _ = writeln!(
                t,
                "payload (untrusted, escaped): {}",
                escape(&p.to_string())
            );
        }
        t
    }

    /// The `json` webhook body.
    pub fn json(&self) -> Value {
        let mut v = json!({
            "type": "approval-gate.notification.v1",
            "event": self.event.as_str(),
            "server_id": self.server_id,
            "proposal_id": self.proposal_id,
            "kind": escape(&self.kind),
            "summary": escape(&self.summary),
            "requested_by": escape(&self.requested_by),
            "preview_sha256_prefix": self.hash8(),
            "approvals": self.approvals,
            "quorum": self.quorum,
            "still_needed": self.still_needed(),
            "status": escape(&self.status),
            "by": self.by.as_deref().map(escape),
            "warnings": self.warnings(),
            "outcome": self.outcome,
            "at": self.at,
            "title": self.title(),
            "commands": self.commands().into_iter().map(|(k, v)| (k.to_string(), Value::String(v))).collect::<serde_json::Map<_, _>>(),
        });
        if let Some(u) = &self.approve_url {
            v["approve_url"] = Value::String(u.clone());
        }
        if let Some(p) = &self.payload {
            v["payload"] = p.clone();
        }
        v
    }

    /// The `slack` webhook body: `text` (the fallback) and one mrkdwn section.
    /// Agent text is escaped and set in code spans; `&`, `<`, `>` are escaped
    /// everywhere, so the message holds no link, mention or formatting of the agent's.
    pub fn slack(&self) -> Value {
        let title = slack_escape(&self.title());
        let mut m = String::new();
        let _ = writeln!(m, "*{title}*");
        let _ = writeln!(m, "summary: {}", slack_code(&self.summary));
        let _ = writeln!(m, "requested by: {}", slack_code(&self.requested_by));
        for w in self.warnings() {
            let _ = writeln!(m, "{}", slack_escape(&w.replace('`', "\\u{60}")));
        }
        let _ = writeln!(m, "status now: `{}`", slack_escape(&escape(&self.status)));
        let _ = writeln!(m, "preview hash: `{}`", slack_escape(self.hash8()));
        let _ = writeln!(m, "approvals: {}", slack_escape(&self.approvals_text()));
        if let Some(n) = self.still_needed() {
            let _ = writeln!(m, "still needed: {}", slack_escape(&n));
        }
        if let Some(o) = &self.outcome {
            let _ = writeln!(m, "outcome: {}", slack_code(o));
        }
        for (what, cmd) in self.commands() {
            let _ = writeln!(m, "{what}: `{}`", slack_escape(&cmd));
        }
        if let Some(u) = &self.approve_url {
            // The server's own link (its id and token are base64url): the only link
            // in the message; nothing of the agent's can form one.
            let _ = writeln!(m, "<{}|Open the approver page>", slack_escape(u));
        }
        if let Some(p) = &self.payload {
            let _ = writeln!(m, "payload: {}", slack_code(&p.to_string()));
        }
        json!({
            "text": title,
            "unfurl_links": false,
            "unfurl_media": false,
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": m.trim_end()}}],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(summary: &str) -> Notice {
        Notice {
            event: NotifyEvent::Waiting,
            server_id: "srv-1".into(),
            proposal_id: "p-1".into(),
            kind: "note.write".into(),
            summary: summary.into(),
            requested_by: "agent".into(),
            preview_sha256: "d4e470e9aaaaaaaaaaaaaaaa".into(),
            approvals: vec!["alice".into()],
            quorum: 2,
            undecided: vec!["bob".into(), "carol".into()],
            outcome: None,
            at: "2026-01-01T00:00:00Z".into(),
            payload: None,
            status: "PENDING".into(),
            by: None,
            approve_url: None,
        }
    }

    #[test]
    fn the_page_link_is_in_every_body_only_when_given() {
        let mut n = notice("x");
        assert!(!n.text().contains("/approve/") && n.json().get("approve_url").is_none());
        n.approve_url = Some("https://gate.example/approve/p-1#v=abc_-".into());
        assert!(n.text().contains("page          https://gate.example/approve/p-1#v=abc_-"));
        assert!(n.text().contains("or with your passkey on the page"));
        assert_eq!(n.json()["approve_url"], "https://gate.example/approve/p-1#v=abc_-");
        let slack = n.slack().to_string();
        assert!(slack.contains("<https://gate.example/approve/p-1#v=abc_-|Open the approver page>"));
        // The agent's text still forms no link.
        let mut evil = notice("<https://evil.example|click>");
        evil.approve_url = n.approve_url.clone();
        assert!(!evil.slack().to_string().contains("<https://evil"));
    }

    #[test]
    fn escape_leaves_no_line_break_or_bidi() {
        let e = escape("a\r\nBcc: x@y\u{202E}gnp.exe\\");
        assert_eq!(e, "a\\r\\nBcc: x@y\\u{202e}gnp.exe\\\\");
        assert!(!e.contains('\n') && !e.contains('\r'));
    }

    #[test]
    fn text_has_commands_hash8_and_who_is_needed() {
        let t = notice("say hi").text();
        assert!(t.contains("signer-cli show p-1"), "{t}");
        assert!(t.contains("signer-cli approve p-1"), "{t}");
        assert!(
            t.contains("preview hash: d4e470e9 (first 8 characters)") && !t.contains("d4e470e9a"),
            "{t}"
        );
        assert!(t.contains("1 more approval(s) from bob, carol"), "{t}");
        assert!(t.contains("1/2 (alice)"), "{t}");
    }

    #[test]
    fn slack_body_forms_no_link_or_mention() {
        let v =
            notice("<https://evil.example|click to approve> <!channel> & `x` https://evil.example")
                .slack();
        let m = v["blocks"][0]["text"]["text"].as_str().unwrap_or_default();
        assert!(!m.contains('<') && !m.contains('>'), "{m}");
        assert!(
            m.contains("&lt;https://evil.example|click to approve&gt; &lt;!channel&gt; &amp;"),
            "{m}"
        );
        assert!(m.contains("\\u{60}x\\u{60}"), "{m}");
        assert!(m.contains("summary: `"), "{m}");
    }

    #[test]
    fn a_waiting_notice_sent_after_a_revoke_offers_no_approval() {
        let mut n = notice("s");
        n.status = "REVOKED".into();
        assert!(n.commands().iter().all(|(c, _)| *c != "approve"));
        assert_eq!(n.still_needed(), None);
        assert!(n
            .title()
            .contains("no longer waits for approval: it is REVOKED"));
        let t = n.text();
        assert!(
            !t.contains("signer-cli approve") && !t.contains("more approval(s)"),
            "{t}"
        );
        assert!(n.json()["commands"].get("approve").is_none());
        assert!(!n.slack().to_string().contains("signer-cli approve"));
    }

    #[test]
    fn each_terminal_change_has_its_own_title_and_no_approve() {
        for (event, status, words) in [
            (NotifyEvent::Revoked, "REVOKED", "was revoked by bob"),
            (
                NotifyEvent::Withdrawn,
                "WITHDRAWN",
                "was withdrawn by the agent",
            ),
            (NotifyEvent::Expired, "EXPIRED", "expired"),
            (
                NotifyEvent::PolicyChanged,
                "POLICY_CHANGED",
                "ended POLICY_CHANGED",
            ),
        ] {
            let mut n = notice("s");
            n.event = event;
            n.status = status.into();
            n.by = Some("bob".into());
            assert!(n.title().contains(words), "{}", n.title());
            assert_eq!(n.json()["event"], event.as_str());
            assert!(n.commands().iter().all(|(c, _)| *c != "approve"));
        }
    }

    #[test]
    fn blank_rendering_characters_are_escaped_in_every_body() {
        let n = notice("a\u{3164}b\u{2800}c \u{430}dmin");
        let (t, j, s) = (n.text(), n.json().to_string(), n.slack().to_string());
        for body in [&t, &j, &s] {
            assert!(
                !body.contains('\u{3164}') && !body.contains('\u{2800}'),
                "{body}"
            );
            assert!(
                body.contains("\\u{3164}") && body.contains("\\u{2800}"),
                "{body}"
            );
            assert!(body.contains("mixes Cyrillic and Latin letters"), "{body}");
        }
    }

    #[test]
    fn payload_only_when_asked() {
        let mut n = notice("s");
        assert!(n.json().get("payload").is_none());
        assert!(!n.text().contains("payload"));
        n.payload = Some(json!({"secret": 1}));
        assert_eq!(n.json()["payload"]["secret"], 1);
    }

    #[test]
    fn channel_checks_name_the_key() {
        let bad = NotifyChannel::Webhook {
            url: "ftp://x".into(),
            format: WebhookFormat::Json,
            secret_from: None,
            include_payload: false,
        };
        assert!(bad.check().unwrap_err().contains("notify.url"));
        let bad = NotifyChannel::Webhook {
            url: "https://x".into(),
            format: WebhookFormat::Json,
            secret_from: Some("hunter2 secret".into()),
            include_payload: false,
        };
        assert!(bad.check().unwrap_err().contains("secret_from"));
        let bad = NotifyChannel::Email {
            to: vec!["a@b\r\nBcc: c@d".into()],
            include_payload: false,
        };
        assert!(bad.check().unwrap_err().contains("notify.to"));
        assert!(NotifyChannel::Email {
            to: vec!["approvers@example.com".into()],
            include_payload: false
        }
        .check()
        .is_ok());
    }
}
