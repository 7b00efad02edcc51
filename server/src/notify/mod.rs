//! Notifications: a durable outbox in the store and a background deliverer.
//!
//! The contract:
//! - A state change and the notifications it causes are written in one store batch
//!   ([`items_for`] decides which, from the change's audit events): a notification is
//!   queued if and only if its change committed, and a restart delivers what was
//!   queued (at least once: a crash between a delivery and its removal repeats it;
//!   `X-Approval-Delivery` / `Message-ID` let a receiver drop the repeat).
//! - Nothing here runs on a proposal's path: the deliverer ([`deliver`]) is its own
//!   task, so a receiver that is down, slow or failing never blocks, slows or fails
//!   a proposal. Nor does it hold back other notifications: the deliverer reads only
//!   what is due, fairly across kinds ([`due`]), and runs a bounded queue per channel.
//! - A failed delivery is logged with its reason and retried with doubling back-off
//!   (from `retry_base` up to `retry_max`) until `give_up` after the event; then the
//!   entry is dropped, logged, and counted as failed.
//! - The outbox holds at most `cap` entries (on disk, never in memory); past that,
//!   changes still commit and their notifications are dropped, logged and counted.
//!   One proposal causes at most a handful of entries, and proposals are bounded by
//!   the pending limits, so the agent cannot make the gate send unbounded mail.
//! - What a message says is built by `approval_core::notify` (pure).

mod deliver;
pub mod email;
pub mod webhook;

use crate::record::ProposalRecord;
use crate::service::Service;
use approval_core::notify::{Notice, NotifyChannel};
use serde::Deserialize;

// The outbox is the store's (written in the same batch as the change): its entry,
// which changes queue which entries, its cap and its fair pick live in `store::outbox`.
pub use crate::store::outbox::{due, items_for, OutboxItem, DEFAULT_OUTBOX_CAP};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Where and how notifications go: the server's side (never from a policy).
#[derive(Debug, Clone)]
pub struct NotifyOptions {
    /// Channels for kinds whose policy has no `[[notify]]` (`--notify-default FILE`).
    pub default_channels: Vec<NotifyChannel>,
    /// The SMTP relay URL (`--smtp` / `APPROVAL_SMTP_URL`).
    pub smtp: Option<String>,
    /// The sender address (`--smtp-from`).
    pub smtp_from: String,
    /// First retry delay; doubles per failed pass.
    pub retry_base: Duration,
    /// Longest retry delay.
    pub retry_max: Duration,
    /// After this long past the event, a notification is given up.
    pub give_up: Duration,
    /// Time-out of one delivery.
    pub timeout: Duration,
    /// How often the outbox is looked at.
    pub tick: Duration,
    /// Most entries the outbox holds.
    pub cap: u64,
}

impl Default for NotifyOptions {
    fn default() -> Self {
        Self {
            default_channels: Vec::new(),
            smtp: None,
            smtp_from: "approval-gate@localhost".into(),
            retry_base: Duration::from_secs(5),
            retry_max: Duration::from_secs(300),
            give_up: Duration::from_secs(3600),
            timeout: Duration::from_secs(10),
            tick: Duration::from_secs(1),
            cap: DEFAULT_OUTBOX_CAP,
        }
    }
}

/// The `[[notify]]` tables of a defaults file (`--notify-default FILE`), checked.
pub fn read_defaults(path: &std::path::Path) -> anyhow::Result<Vec<NotifyChannel>> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        notify: Vec<NotifyChannel>,
    }
    let src = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let f: File = toml::from_str(&src).map_err(|e| {
        anyhow::anyhow!(
            "{}: {}; write [[notify]] tables as in a policy",
            path.display(),
            e.message()
        )
    })?;
    for c in &f.notify {
        c.check()
            .map_err(|m| anyhow::anyhow!("{}: {m}", path.display()))?;
    }
    Ok(f.notify)
}

static QUEUED_DELIVERED: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);

/// `/healthz`'s `notifications` member: entries queued now; notifications delivered
/// to every channel, given up, and dropped at the cap since the process started.
pub fn counts(svc: &Service) -> serde_json::Value {
    let (queued, dropped) = svc.store().outbox_counts();
    serde_json::json!({
        "queued": queued,
        "delivered": QUEUED_DELIVERED.load(Ordering::Relaxed),
        "failed": FAILED.load(Ordering::Relaxed),
        "dropped": dropped,
    })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The channels that apply to `rec`: its policy's, else the server's defaults.
fn channels_of(svc: &Service, opts: &NotifyOptions, rec: &ProposalRecord) -> Vec<NotifyChannel> {
    match svc.policy_of(rec) {
        Ok(p) if !p.spec().notify.is_empty() => p.spec().notify.clone(),
        _ => opts.default_channels.clone(),
    }
}

/// Whether any kind may notify: disabled kinds count too, so that the reload that
/// enables one (a passkey line added, an approver's key restored) finds the outbox
/// already on, and its first proposal's notice is not lost to the deliverer's tick.
fn any_channel(svc: &Service, opts: &NotifyOptions) -> bool {
    let config = svc.config();
    !opts.default_channels.is_empty()
        || config.policies.iter().any(|p| !p.spec().notify.is_empty())
        || config.policies.disabled().any(|d| d.notifies())
}

/// Where a channel sends, for logs (a webhook's scheme and host only: its path may
/// hold the receiver's token).
pub fn describe(c: &NotifyChannel) -> String {
    match c {
        NotifyChannel::Webhook { url, .. } => {
            let host = url
                .split("://")
                .nth(1)
                .and_then(|r| r.split('/').next())
                // Never a password from `user:pass@host` in a log line.
                .and_then(|a| a.rsplit('@').next())
                .unwrap_or("");
            format!("webhook {host}")
        }
        NotifyChannel::Email { to, .. } => format!("email to {}", to.join(", ")),
    }
}

fn notice(svc: &Service, rec: &ProposalRecord, item: &OutboxItem, with_payload: bool) -> Notice {
    let (quorum, approvers, passkeys) = match svc.policy_of(rec) {
        Ok(p) => (
            p.spec().quorum,
            p.spec().approvers.clone(),
            p.accepts(approval_core::keyring::SignatureKind::Passkey),
        ),
        Err(_) => (0, Vec::new(), false),
    };
    // As it was when the event happened, like the approvals.
    let decided = &item.decided;
    Notice {
        event: item.event,
        server_id: svc.store().server_id().to_string(),
        proposal_id: rec.id().to_string(),
        kind: rec.preview.kind.to_string(),
        summary: rec.preview.summary.clone(),
        requested_by: rec.preview.requested_by.to_string(),
        preview_sha256: rec.preview_sha256.to_string(),
        approvals: item.approvals.clone(),
        quorum,
        undecided: approvers
            .iter()
            .map(|a| a.to_string())
            .filter(|a| !decided.contains(a))
            .collect(),
        outcome: item.outcome.map(|o| {
            serde_json::to_value(o)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        }),
        at: item.at.to_string(),
        payload: with_payload.then(|| rec.preview.payload.clone()),
        // As it is now, expiry applied (the sweep may not have stored it yet): a
        // `waiting` sent after the proposal ended offers no approve.
        status: rec.lifecycle.at(svc.now()).status.to_string(),
        by: item.by.clone(),
        approve_url: if passkeys {
            svc.page_link(rec.id())
        } else {
            None
        },
    }
}

/// The deliverer: spawned once per server, before it accepts requests. Whether
/// writes queue notifications is set here at once, then re-checked every poll (a
/// reload may add or remove channels).
pub fn spawn(svc: Arc<Service>, opts: NotifyOptions) {
    svc.store().set_outbox(any_channel(&svc, &opts), opts.cap);
    tokio::spawn(deliver::Deliverer::new(svc, opts).run());
}
