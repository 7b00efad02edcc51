//! A proposal as the server describes it, checked before anything is shown or signed.
//!
//! The server is not trusted with what the approver signs. [`check`] recomputes
//! `preview_sha256` from the preview with `approval-core`, and refuses the proposal
//! when the server's claim differs, when the preview is for another proposal or was
//! made by another server, or when the policy sent along does not hash to the
//! preview's `policy_sha256`. Only a [`Checked`] proposal is rendered or signed, and
//! signatures always cover the locally computed hash.

use crate::display::{escape, quote, relative, render_json};
use crate::failure::refused;
use anyhow::Result;
use approval_core::api::{DecisionView, QuorumView};
use approval_core::json::canonical_bytes;
use approval_core::policy::ExecutorConfig;
use approval_core::{ApproverName, Policy, Preview, ProposalId, ServerId, Sha256Hex, Status};
use serde_json::Value;

/// A proposal whose preview hash, id, server and policy were checked locally.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The server's ProposalView, as received.
    pub view: Value,
    /// The preview.
    pub preview: Preview,
    /// `preview_sha256`, recomputed here (equal to the server's claim).
    pub hash: Sha256Hex,
    /// The policy that governs it (its hash equals the preview's `policy_sha256`).
    pub policy: Policy,
    /// The status the server reports.
    pub status: Status,
    /// The server's count.
    pub quorum: QuorumView,
    /// The decisions so far.
    pub decisions: Vec<DecisionView>,
    /// Until when an approved proposal may run.
    pub executable_until: Option<String>,
    /// From when an approved proposal may run (quorum plus the policy's cooldown),
    /// as the server reports it; absent without a cooldown.
    pub executable_from: Option<String>,
}

fn field<'a>(v: &'a Value, name: &str) -> Result<&'a Value> {
    v.get(name).ok_or_else(|| {
        refused(format!(
            "the server's proposal has no `{name}` field: refused, nothing signed"
        ))
    })
}

/// Checks a ProposalView against the proposal id asked for and the server's id.
pub fn check(view: &Value, expected: Option<&ProposalId>, server_id: &ServerId) -> Result<Checked> {
    if !view.is_object() {
        return Err(refused(
            "the server's answer is not a proposal object: refused, nothing signed",
        ));
    }
    let preview = Preview::from_value(field(view, "preview")?).map_err(|e| {
        refused(format!(
            "the server sent an invalid preview ({}): refused, nothing signed",
            escape(&e.to_string())
        ))
    })?;
    let claimed = field(view, "preview_sha256")?
        .as_str()
        .and_then(|s| Sha256Hex::parse(s).ok())
        .ok_or_else(|| {
            refused("the server's preview_sha256 is not 64 lowercase hex characters: refused, nothing signed")
        })?;
    let hash = preview.sha256();
    if hash != claimed {
        return Err(refused(format!(
            "PREVIEW HASH MISMATCH: the server claims preview_sha256 {claimed} but the preview it sent hashes to {hash}. \
             What you would sign is not what you were shown: refused, nothing signed. Tell whoever runs the server."
        )));
    }
    let view_id = field(view, "proposal_id")?.as_str().unwrap_or("");
    if view_id != preview.proposal_id.as_str() {
        return Err(refused(format!(
            "the server's proposal_id {} differs from its preview's {}: refused, nothing signed",
            quote(view_id),
            preview.proposal_id
        )));
    }
    if let Some(id) = expected {
        if &preview.proposal_id != id {
            return Err(refused(format!(
                "asked for proposal {id} but the server sent the preview of {}: refused, nothing signed",
                preview.proposal_id
            )));
        }
    }
    if &preview.server_id != server_id {
        return Err(refused(format!(
            "SERVER MISMATCH: this preview was made by server {} but the server you are talking to is {server_id}: refused, nothing signed",
            preview.server_id
        )));
    }
    let policy_value = field(view, "policy")?;
    let policy = Policy::from_canonical_json(policy_value).map_err(|e| {
        refused(format!(
            "the server sent an invalid policy ({}): refused, nothing signed",
            escape(&e.to_string())
        ))
    })?;
    let policy_hash = Sha256Hex::digest(&canonical_bytes(policy_value));
    if policy_hash != preview.policy_sha256 || policy.sha256() != preview.policy_sha256 {
        return Err(refused(format!(
            "POLICY MISMATCH: the preview names policy_sha256 {} but the policy the server sent hashes to {policy_hash}: refused, nothing signed",
            preview.policy_sha256
        )));
    }
    if policy.kind() != &preview.kind {
        return Err(refused(format!(
            "the policy sent governs kind {} but the preview is of kind {}: refused, nothing signed",
            policy.kind(),
            preview.kind
        )));
    }
    let status_text = field(view, "status")?.as_str().unwrap_or("");
    let status = Status::parse(status_text).ok_or_else(|| {
        refused(format!(
            "the server reports an unknown status {}",
            quote(status_text)
        ))
    })?;
    // Shown, never used to decide what is signed; but a list that does not parse is
    // refused rather than shown as "none yet" (which would also hide that this
    // approver already decided).
    let quorum = match view.get("quorum") {
        None => QuorumView {
            need: policy.spec().quorum,
            ..QuorumView::default()
        },
        Some(q) => serde_json::from_value::<QuorumView>(q.clone())
            .map_err(|e| not_understood("quorum", &e))?,
    };
    let decisions = match view.get("decisions") {
        None => Vec::new(),
        Some(d) => serde_json::from_value::<Vec<DecisionView>>(d.clone())
            .map_err(|e| not_understood("decisions", &e))?,
    };
    let executable_until = view
        .get("executable_until")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let executable_from = view
        .get("executable_from")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(Checked {
        view: view.clone(),
        preview,
        hash,
        policy,
        status,
        quorum,
        decisions,
        executable_until,
        executable_from,
    })
}

fn not_understood(name: &str, e: &serde_json::Error) -> anyhow::Error {
    refused(format!(
        "the server's `{name}` is not understood ({}): refused, nothing signed. \
         A newer server may need a newer signer-cli; otherwise tell whoever runs the server.",
        escape(&e.to_string())
    ))
}

fn names(list: &[impl std::fmt::Display]) -> String {
    let v: Vec<String> = list.iter().map(|s| escape(&s.to_string())).collect();
    format!("[{}]", v.join(", "))
}

impl Checked {
    /// Whether `me` is named by the policy.
    pub fn may_decide(&self, me: &ApproverName) -> bool {
        self.policy.is_approver(me)
    }

    /// When the proposal is APPROVED and still in its cooldown (by this machine's
    /// clock), the moment it becomes executable.
    pub fn cooling_until(&self) -> Option<approval_core::Timestamp> {
        let from = approval_core::Timestamp::parse(self.executable_from.as_deref()?).ok()?;
        (self.status == Status::Approved && from.unix() > crate::client::now_unix()).then_some(from)
    }

    /// Whether `me` already has a decision of this word on record.
    pub fn has_decided(&self, me: &ApproverName, decision: &str) -> bool {
        self.decisions
            .iter()
            .any(|d| &d.signed.approver == me && d.signed.decision.as_str() == decision)
    }

    /// Progress, e.g. `1 of 2, waiting for 1 more (and 1 of [carol])` or
    /// `2 of 2, executable until 2026-11-30T00:10:00Z`.
    pub fn progress(&self) -> String {
        let q = &self.quorum;
        let mut s = format!("{} of {}", q.have, q.need);
        match self.status {
            Status::Approved => {
                if let Some(from) = self.cooling_until() {
                    s.push_str(&format!(
                        ", cooling down until {} (until then any approver can revoke or reject it)",
                        escape(&from.to_string())
                    ));
                }
                if self.preview.on_quorum() {
                    // Nobody executes it: say what happens instead.
                    s.push_str(if self.cooling_until().is_some() {
                        ", then the gate runs it"
                    } else {
                        ", the gate runs it now"
                    });
                } else if let Some(t) = &self.executable_until {
                    s.push_str(&format!(", executable until {}", escape(t)));
                }
            }
            Status::Pending => {
                let more = q.need.saturating_sub(q.have);
                let groups: Vec<String> = q
                    .missing_groups
                    .iter()
                    .map(|g| format!("{} of {}", g.need.saturating_sub(g.have), names(&g.group)))
                    .collect();
                if more > 0 {
                    s.push_str(&format!(", waiting for {more} more"));
                    if !groups.is_empty() {
                        s.push_str(&format!(" (and {})", groups.join(", ")));
                    }
                } else if !groups.is_empty() {
                    s.push_str(&format!(", waiting for {}", groups.join(", ")));
                }
            }
            other => s.push_str(&format!(", proposal is {}", other.as_str())),
        }
        s
    }

    /// A one-line description of the executor: what will actually happen.
    fn executor_line(&self) -> String {
        match &self.policy.spec().executor {
            ExecutorConfig::Note { dir } => match dir {
                Some(d) => format!("note (writes a file in {})", escape(d)),
                None => "note (writes a file in the server's sandbox)".to_owned(),
            },
            ExecutorConfig::Webhook {
                url,
                timeout,
                headers,
            } => {
                let mut s = format!(
                    "webhook POST {} (timeout {})",
                    escape(url),
                    timeout.to_spec()
                );
                if !headers.is_empty() {
                    let names: Vec<String> = headers.keys().map(|k| escape(k)).collect();
                    s.push_str(&format!(", headers {}", names.join(", ")));
                }
                s
            }
            ExecutorConfig::Command {
                program,
                args,
                timeout,
            } => {
                let mut s = format!("command {}", quote(program));
                for a in args {
                    s.push(' ');
                    s.push_str(&quote(a));
                }
                s.push_str(&format!(" (timeout {})", timeout.to_spec()));
                s
            }
            ExecutorConfig::Mcp {
                command,
                url,
                tool,
                timeout,
                env_from,
                headers_from,
                payload_schema_from_tool: _,
            } => {
                // The approver sees which tool of which server receives the payload
                // as its arguments, and the names (never values) of what the gate adds.
                let mut s = format!("mcp tool {} of ", quote(tool));
                match (command, url) {
                    (Some(argv), _) => {
                        s.push_str("the stdio server");
                        for a in argv {
                            s.push(' ');
                            s.push_str(&quote(a));
                        }
                    }
                    (None, Some(u)) => s.push_str(&format!("the server at {}", escape(u))),
                    (None, None) => s.push_str("no server"),
                }
                s.push_str(&format!(
                    ", payload sent as its arguments (timeout {})",
                    timeout.to_spec()
                ));
                if !env_from.is_empty() {
                    let names: Vec<String> = env_from.keys().map(|k| escape(k)).collect();
                    s.push_str(&format!(", environment {}", names.join(", ")));
                }
                if !headers_from.is_empty() {
                    let names: Vec<String> = headers_from.keys().map(|k| escape(k)).collect();
                    s.push_str(&format!(", headers {}", names.join(", ")));
                }
                s
            }
        }
    }

    /// The full human view: what `show` prints and what `approve` shows before asking.
    pub fn render(&self, now: i64, color: bool) -> String {
        let p = &self.preview;
        let spec = self.policy.spec();
        let hex = self.hash.to_hex();
        let (head, tail) = hex.split_at(8);
        let mut o = String::new();
        let mut line = |k: &str, v: String| o.push_str(&format!("{k:<15} {v}\n"));
        line(
            "proposal",
            format!("{}  ({})", p.proposal_id, self.status.as_str()),
        );
        line(
            "preview_sha256",
            format!("{}{tail}", crate::display::highlight(head, color)),
        );
        line(
            "check",
            format!(
                "{}  (first 8 characters; recomputed here from the preview below)",
                crate::display::highlight(head, color)
            ),
        );
        line("kind", p.kind.to_string());
        line("summary", quote(&p.summary));
        line("requested by", p.requested_by.to_string());
        line(
            "created",
            format!("{} ({})", p.created_at, relative(p.created_at.unix() - now)),
        );
        line(
            "expires",
            format!("{} ({})", p.expires_at, relative(p.expires_at.unix() - now)),
        );
        if let Some(c) = p.cooldown {
            // Signed with the rest of the preview: the approver agrees to it.
            line(
                "cooldown",
                format!(
                    "{} after quorum before it can run; until then any approver can revoke or reject it",
                    c.to_spec()
                ),
            );
        }
        if p.on_quorum() {
            // Signed with the rest of the preview: no second step follows the approval.
            line(
                "runs",
                "ON QUORUM: the gate runs it itself as soon as quorum is reached (after any cooldown); nobody confirms it again".into(),
            );
        }
        line("server", p.server_id.to_string());
        let mut pol = format!(
            "quorum {} of {}, vetoes {}",
            spec.quorum,
            names(&spec.approvers),
            spec.vetoes
        );
        for r in &spec.require {
            pol.push_str(&format!(", and {} of {}", r.count, names(&r.group)));
        }
        pol.push_str(&format!(
            ", executable for {} after approval",
            spec.execute_within.to_spec()
        ));
        line("policy", pol);
        if !spec.description.is_empty() {
            line("", quote(&spec.description));
        }
        line("executes", self.executor_line());
        if !spec.pass_through.is_empty() {
            // Part of the policy approvers sign under: these need nobody's approval.
            line(
                "passes through",
                format!(
                    "{} (the same server's tools agents call without approval)",
                    spec.pass_through
                        .iter()
                        .map(|t| escape(t))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        line("policy_sha256", p.policy_sha256.to_string());
        o.push_str("payload:\n");
        o.push_str(&render_json(&p.payload));
        o.push('\n');
        let requester = p.requested_by.to_string();
        for w in crate::display::lookalike_warnings(
            &[("summary", &p.summary), ("requester", &requester)],
            &p.payload,
        ) {
            o.push_str(&crate::display::highlight(&w, color));
            o.push('\n');
        }
        if self.decisions.is_empty() {
            o.push_str("decisions:      none yet\n");
        } else {
            o.push_str("decisions:\n");
            for d in &self.decisions {
                o.push_str(&format!(
                    "  {}  {}  {}  {}\n",
                    escape(d.signed.approver.as_str()),
                    escape(d.signed.decision.as_str()),
                    escape(&d.at.to_string()),
                    quote(&d.signed.reason)
                ));
            }
        }
        let q = &self.quorum;
        o.push_str(&format!("{:<15} {}\n", "quorum", self.progress()));
        if !q.approvers.is_empty() {
            o.push_str(&format!("{:<15} {}\n", "approved by", names(&q.approvers)));
        }
        if !q.rejections.is_empty() {
            o.push_str(&format!("{:<15} {}\n", "rejected by", names(&q.rejections)));
        }
        if let Some(r) = self.view.get("result").filter(|r| !r.is_null()) {
            o.push_str("result:\n");
            o.push_str(&render_json(r));
            o.push('\n');
        }
        o
    }

    /// The `--json` form: the server's view plus what was checked here.
    pub fn to_json(&self) -> Value {
        let mut v = self.view.clone();
        if let Some(o) = v.as_object_mut() {
            o.insert(
                "checked".into(),
                serde_json::json!({
                    "preview_sha256": self.hash.to_hex(),
                    "server_id": self.preview.server_id.as_str(),
                    "policy_sha256": self.preview.policy_sha256.to_hex(),
                }),
            );
        }
        v
    }
}

/// The preview's `expires_at` relative to now, for tables.
pub fn expires_in(p: &Preview, now: i64) -> String {
    let d = p.expires_at.unix() - now;
    if d <= 0 {
        "expired".to_owned()
    } else {
        crate::display::duration(d)
    }
}
