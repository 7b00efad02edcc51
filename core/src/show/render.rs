//! The human view of a checked proposal: what `signer-cli show` prints, what
//! `approve` shows before asking, and what an approver page shows. One text for
//! every reader: untrusted text escaped with [`crate::escape`], the look-alike
//! warning lines after the payload, relative times from the `now` passed in.

use super::text::{highlight, names, relative};
use super::{Checked, ShowError};
use crate::escape::{escape, lookalike_warnings, quote, render_json};
use crate::policy::ExecutorConfig;
use crate::{ServerId, Status};
use serde_json::Value;

/// The proposal `view` (a server's ProposalView JSON) checked with
/// [`Checked::check`] against `server_id` and rendered without ANSI: the text for
/// a web page (the gate's `/approve/<proposal_id>`, issue #34), byte for byte what
/// `signer-cli show` prints when stdout is not a terminal. `now` is Unix seconds.
/// Put it into a page as text (escaped for HTML by the page), never as markup.
pub fn render_plain(view: &Value, server_id: &ServerId, now: i64) -> Result<String, ShowError> {
    Ok(Checked::check(view, None, server_id)?.render(now, false))
}

impl Checked {
    /// Progress, e.g. `1 of 2, waiting for 1 more (and 1 of [carol])` or
    /// `2 of 2, executable until 2026-11-30T00:10:00Z`.
    pub fn progress(&self, now: i64) -> String {
        let q = &self.quorum;
        let mut s = format!("{} of {}", q.have, q.need);
        match self.status {
            Status::Approved => {
                if let Some(from) = self.cooling_until(now) {
                    s.push_str(&format!(
                        ", cooling down until {} (until then any approver can revoke or reject it)",
                        escape(&from.to_string())
                    ));
                }
                if self.preview.on_quorum() {
                    // Nobody executes it: say what happens instead.
                    s.push_str(if self.cooling_until(now).is_some() {
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
    pub fn executor_line(&self) -> String {
        match &self.policy.spec().executor {
            ExecutorConfig::Gate => {
                "the gate applies this configuration change itself, once, on quorum".to_owned()
            }
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
            format!("{}{tail}", highlight(head, color)),
        );
        line(
            "check",
            format!(
                "{}  (first 8 characters; recomputed here from the preview below)",
                highlight(head, color)
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
        if p.kind.as_str() == crate::governance::CONFIG_KIND {
            // The diff first, readable; the whole new configuration follows in the
            // payload, and that (its hash checked here) is what applies.
            match crate::governance::ConfigChange::from_value(&p.payload) {
                Ok(c) => {
                    if let Some(r) = &c.emergency_removal {
                        o.push_str(&highlight(
                            &format!("EMERGENCY REMOVAL of administrator {}", escape(r.as_str())),
                            color,
                        ));
                        o.push('\n');
                    }
                    o.push_str(&format!(
                        "configuration version {} -> {}, changes:\n",
                        c.from_version, c.to_version
                    ));
                    for l in &c.diff {
                        o.push_str(&format!("  {}\n", escape(l)));
                    }
                }
                Err(e) => {
                    o.push_str(&highlight(
                        &format!("NOT A VALID CONFIGURATION CHANGE: {}", escape(&e)),
                        color,
                    ));
                    o.push('\n');
                }
            }
        }
        o.push_str("payload:\n");
        o.push_str(&render_json(&p.payload));
        o.push('\n');
        let requester = p.requested_by.to_string();
        for w in lookalike_warnings(
            &[("summary", &p.summary), ("requester", &requester)],
            &p.payload,
        ) {
            o.push_str(&highlight(&w, color));
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
        o.push_str(&format!("{:<15} {}\n", "quorum", self.progress(now)));
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
}
