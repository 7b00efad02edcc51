//! Notifications: a durable outbox in the store and a background deliverer.
//!
//! The contract:
//! - A state change and the notifications it causes are written in one store batch
//!   ([`items_for`] decides which, from the change's audit events): a notification is
//!   queued if and only if its change committed, and a restart delivers what was
//!   queued (at least once: a crash between a delivery and its removal repeats it;
//!   `X-Approval-Delivery` / `Message-ID` let a receiver drop the repeat).
//! - Nothing here runs on a proposal's path: the deliverer is its own task, reading
//!   the outbox in batches of [`BATCH`], so a receiver that is down, slow or failing
//!   never blocks, slows or fails a proposal.
//! - A failed delivery is logged with its reason and retried with doubling back-off
//!   (from `retry_base` up to `retry_max`) until `give_up` after the event; then the
//!   entry is dropped, logged, and counted as failed.
//! - The outbox holds at most `cap` entries (on disk, never in memory); past that,
//!   changes still commit and their notifications are dropped, logged and counted.
//!   One proposal causes at most a handful of entries, and proposals are bounded by
//!   the pending limits, so the agent cannot make the gate send unbounded mail.
//! - What a message says is built by `approval_core::notify` (pure).

pub mod email;
pub mod webhook;

use crate::audit::{AuditEvent, AuditKind};
use crate::record::ProposalRecord;
use crate::service::Service;
use approval_core::message::Decision;
use approval_core::notify::{Notice, NotifyChannel, NotifyEvent};
use approval_core::status::Outcome;
use approval_core::{ProposalId, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Default cap on outbox entries.
pub const DEFAULT_OUTBOX_CAP: u64 = 10_000;
/// Outbox entries read per pass.
pub const BATCH: usize = 64;

/// One queued notification, as stored under `o:<seq>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxItem {
    /// What happened.
    pub event: NotifyEvent,
    /// To which proposal.
    pub proposal_id: ProposalId,
    /// Approvers who had approved when it happened.
    pub approvals: Vec<String>,
    /// Approvers who had decided (any way) when it happened.
    #[serde(default)]
    pub decided: Vec<String>,
    /// The executor's outcome (`executed`).
    #[serde(default)]
    pub outcome: Option<Outcome>,
    /// When it happened.
    pub at: Timestamp,
    /// Failed delivery passes so far.
    #[serde(default)]
    pub attempts: u32,
    /// Not before this (unix milliseconds).
    #[serde(default)]
    pub next_try_ms: u64,
    /// Channels (by index) already delivered.
    #[serde(default)]
    pub done: Vec<usize>,
}

/// The notifications one committed change causes, from its audit events.
pub fn items_for(rec: &ProposalRecord, events: &[AuditEvent]) -> Vec<OutboxItem> {
    let reached = events
        .iter()
        .any(|e| matches!(e.kind, AuditKind::Approved | AuditKind::Rejected));
    let mut out = Vec::new();
    for e in events {
        let event = match e.kind {
            AuditKind::Proposed | AuditKind::Revoked => Some(NotifyEvent::Waiting),
            // An approval that did not end the wait: who is still needed changed.
            AuditKind::Decision
                if !reached
                    && e.detail.get("decision").and_then(|d| d.as_str()) == Some("approve") =>
            {
                Some(NotifyEvent::Waiting)
            }
            AuditKind::Approved => Some(NotifyEvent::QuorumReached),
            AuditKind::Rejected => Some(NotifyEvent::Rejected),
            AuditKind::Expired => Some(NotifyEvent::Expired),
            AuditKind::Finished => match rec.result.as_ref().map(|r| r.outcome) {
                Some(Outcome::Unknown) | None => Some(NotifyEvent::OutcomeUnknown),
                Some(_) => Some(NotifyEvent::Executed),
            },
            _ => None,
        };
        if let Some(event) = event {
            out.push(OutboxItem {
                event,
                proposal_id: rec.id().clone(),
                approvals: approvals(rec),
                decided: rec
                    .decisions
                    .iter()
                    .map(|d| d.signed.approver.to_string())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect(),
                outcome: rec.result.as_ref().map(|r| r.outcome),
                at: e.at,
                attempts: 0,
                next_try_ms: 0,
                done: Vec::new(),
            });
        }
    }
    out
}

fn approvals(rec: &ProposalRecord) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    for d in &rec.decisions {
        let name = d.signed.approver.to_string();
        match d.signed.decision {
            Decision::Approve if !a.contains(&name) => a.push(name),
            Decision::Revoke => a.retain(|n| n != &name),
            _ => {}
        }
    }
    a
}

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

fn any_channel(svc: &Service, opts: &NotifyOptions) -> bool {
    !opts.default_channels.is_empty()
        || svc
            .config()
            .policies
            .iter()
            .any(|p| !p.spec().notify.is_empty())
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
                .unwrap_or("");
            format!("webhook {host}")
        }
        NotifyChannel::Email { to, .. } => format!("email to {}", to.join(", ")),
    }
}

fn notice(svc: &Service, rec: &ProposalRecord, item: &OutboxItem, with_payload: bool) -> Notice {
    let (quorum, approvers) = match svc.policy_of(rec) {
        Ok(p) => (p.spec().quorum, p.spec().approvers.clone()),
        Err(_) => (0, Vec::new()),
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
    }
}

/// The deliverer: spawned once per server, before it accepts requests. Whether
/// writes queue notifications is set here at once, then re-checked every poll (a
/// reload may add or remove channels).
pub fn spawn(svc: Arc<Service>, opts: NotifyOptions) {
    svc.store().set_outbox(any_channel(&svc, &opts), opts.cap);
    tokio::spawn(async move {
        let http = webhook::client(opts.timeout);
        let mail = email::Mailer::new(&opts);
        let mut warned_on = None;
        loop {
            // Queue only when some channel exists (a reload may add or remove them).
            let on = any_channel(&svc, &opts);
            svc.store().set_outbox(on, opts.cap);
            if warned_on != Some(on) {
                tracing::info!(on, "notifications");
                warned_on = Some(on);
            }
            // Several instances on one database: one delivers at a time.
            if !crate::run::leads(&svc, "outbox").await {
                tokio::time::sleep(opts.tick).await;
                continue;
            }
            if let Err(e) = pass(&svc, &opts, &http, &mail).await {
                tracing::error!(error = %e, "notification outbox cannot be read");
            }
            tokio::time::sleep(opts.tick).await;
        }
    });
}

/// One pass over the oldest [`BATCH`] entries.
async fn pass(
    svc: &Arc<Service>,
    opts: &NotifyOptions,
    http: &reqwest::Client,
    mail: &email::Mailer,
) -> Result<(), crate::store::StoreError> {
    let store = svc.store().clone();
    let page = tokio::task::spawn_blocking(move || store.outbox_page(BATCH))
        .await
        .map_err(|e| crate::store::StoreError::Backend(e.to_string()))??;
    for (seq, mut item) in page {
        let now = now_ms();
        if item.next_try_ms > now {
            continue;
        }
        let Some(rec) = svc.store().get(&item.proposal_id)? else {
            svc.store().outbox_remove(seq)?;
            continue;
        };
        let channels = channels_of(svc, opts, &rec);
        let delivery = format!("{}-{seq}", svc.store().server_id());
        let mut last_error = None;
        for (i, ch) in channels.iter().enumerate() {
            if item.done.contains(&i) {
                continue;
            }
            // Right before each send: a leader frozen mid-pass and replaced must not
            // send what the new leader delivers (store/postgres/lease.rs).
            if !svc.store().still_leads("outbox") {
                return Ok(());
            }
            let n = notice(svc, &rec, &item, ch.include_payload());
            let r = match ch {
                NotifyChannel::Webhook { .. } => webhook::send(http, ch, &n, &delivery).await,
                NotifyChannel::Email { .. } => mail.send(ch, &n, &delivery).await,
            };
            match r {
                Ok(()) => {
                    tracing::info!(id = %rec.id(), event = item.event.as_str(), channel = %describe(ch), "notification delivered");
                    item.done.push(i);
                }
                Err(why) => {
                    tracing::warn!(id = %rec.id(), event = item.event.as_str(), channel = %describe(ch), attempt = item.attempts + 1, "notification not delivered: {why}");
                    last_error = Some(why);
                }
            }
        }
        if last_error.is_none() {
            svc.store().outbox_remove(seq)?;
            if !channels.is_empty() {
                QUEUED_DELIVERED.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        item.attempts += 1;
        let age_ms = now.saturating_sub((item.at.unix().max(0) as u64) * 1000);
        if age_ms >= opts.give_up.as_millis() as u64 {
            tracing::error!(id = %rec.id(), event = item.event.as_str(), attempts = item.attempts, "notification given up after {:?}: {}", opts.give_up, last_error.unwrap_or_default());
            svc.store().outbox_remove(seq)?;
            FAILED.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let shift = item.attempts.saturating_sub(1).min(20);
        let delay = opts
            .retry_base
            .saturating_mul(1u32 << shift)
            .min(opts.retry_max);
        item.next_try_ms = now + delay.as_millis() as u64;
        svc.store().outbox_put(seq, &item)?;
    }
    Ok(())
}
