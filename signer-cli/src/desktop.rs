//! `watch --notify`: one desktop notification per new proposal that needs this
//! approver (notify-rust: freedesktop notifications over D-Bus with zbus on Linux).
//!
//! A notification only points at the proposal: kind, id, requester, the escaped
//! summary, the first 8 characters of the preview hash and the `signer-cli show`
//! command. Approving is still `signer-cli approve` in a terminal. When the desktop
//! has no notification service, watch says so in one line and goes on printing.

use approval_core::Preview;

/// A notification service found at start.
pub struct Desktop {
    /// Whether the service renders markup in bodies (then `&`, `<`, `>` are escaped).
    markup: bool,
}

/// The title and body of the notification for a proposal (text made safe by
/// [`crate::display::escape`]; markup characters escaped when the service renders markup).
pub fn content(p: &Preview, hash8: &str, have: u32, need: u32, markup: bool) -> (String, String) {
    let mark = |e: String| {
        if markup {
            e.replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
        } else {
            e
        }
    };
    let esc = |s: &str| mark(crate::display::escape(s));
    let title = format!("Approval waiting: {}", esc(p.kind.as_str()));
    let body = format!(
        "{} by {}\n\"{}\"\napprovals {have}/{need}, hash {hash8}\nsigner-cli show {}",
        p.proposal_id,
        esc(p.requested_by.as_str()),
        mark(crate::display::truncate(&p.summary, 120)),
        p.proposal_id
    );
    (title, body)
}

impl Desktop {
    /// Looks for the desktop's notification service; `Err` says why there is none.
    pub fn probe() -> Result<Self, String> {
        let info = notify_rust::get_server_information().map_err(|e| e.to_string())?;
        let markup = notify_rust::get_capabilities()
            .map(|c| c.iter().any(|c| c == "body-markup"))
            .unwrap_or(false);
        let _ = info;
        Ok(Self { markup })
    }

    /// Whether bodies are rendered as markup.
    pub fn markup(&self) -> bool {
        self.markup
    }

    /// Shows one notification (on a blocking thread; D-Bus calls block).
    pub async fn show(&self, title: String, body: String) -> Result<(), String> {
        tokio::task::spawn_blocking(move || {
            notify_rust::Notification::new()
                .appname("signer-cli")
                .summary(&title)
                .body(&body)
                .show()
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn preview(summary: &str) -> Preview {
        serde_json::from_value(json!({
            "v": 1, "server_id": "srv-0123456789abcdef", "proposal_id": "p-0123456789abcdef0123456789abcdef",
            "kind": "note.write", "payload": {"secret": "PAYLOAD"}, "summary": summary,
            "requested_by": "local", "created_at": "2026-01-01T00:00:00Z",
            "expires_at": "2026-01-01T00:30:00Z",
            "policy_sha256": "0000000000000000000000000000000000000000000000000000000000000000"
        }))
        .expect("a preview")
    }

    #[test]
    fn hostile_summary_is_escaped_and_markup_neutralised() {
        let p = preview("<a href=\"https://evil\">ok</a> \u{202e}\n& more");
        let (title, body) = content(&p, "d4e470e9", 0, 2, true);
        assert_eq!(title, "Approval waiting: note.write");
        assert!(!body.contains('<') && !body.contains('\u{202e}'), "{body}");
        assert!(
            body.contains("&lt;a href=") && body.contains("\\u{202e}\\n&amp; more"),
            "{body}"
        );
        assert!(
            body.contains("signer-cli show p-0123456789abcdef0123456789abcdef"),
            "{body}"
        );
        assert!(
            body.contains("hash d4e470e9") && !body.contains("PAYLOAD"),
            "{body}"
        );
        let (_, plain) = content(&p, "d4e470e9", 0, 2, false);
        assert!(
            plain.contains("<a href="),
            "no markup: shown as written (escaped only): {plain}"
        );
    }
}
