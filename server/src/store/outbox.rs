//! The notification outbox as the store keeps it: the entry ([`OutboxItem`]), which
//! entries a committed change queues ([`items_for`]), the cap on entries held
//! ([`OutboxState`]), and the fair pick of due entries ([`due`]).
//!
//! Why it lives in the store: a state change and the notifications it causes are
//! written in one atomic batch, so every backend needs these; the deliverer
//! (`notify`) reads and rewrites entries through the [`Store`](super::api::Store) trait.
//! May import: `audit`, `record`, core. Never `notify`, the service or above.

pub mod due;

use crate::audit::{AuditEvent, AuditKind};
use crate::record::ProposalRecord;
use approval_core::message::Decision;
use approval_core::notify::NotifyEvent;
use approval_core::status::Outcome;
use approval_core::{ProposalId, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Default cap on outbox entries.
pub const DEFAULT_OUTBOX_CAP: u64 = 10_000;

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
    /// The proposal's kind: the deliverer shares its work fairly across kinds, so
    /// one kind's backlog cannot hold back another's (empty in entries queued
    /// before this field existed: they share one turn).
    #[serde(default)]
    pub kind: String,
    /// The approver who revoked or resolved it (`revoked`, `resolved`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// The notifications one committed change causes, from its audit events.
pub fn items_for(rec: &ProposalRecord, events: &[AuditEvent]) -> Vec<OutboxItem> {
    let reached = events
        .iter()
        .any(|e| matches!(e.kind, AuditKind::Approved | AuditKind::Rejected));
    let mut out = Vec::new();
    for e in events {
        // Every end is its own event: a revoked, withdrawn or voided proposal is
        // never announced as waiting (it can no longer be approved).
        let event = match e.kind {
            AuditKind::Proposed => Some(NotifyEvent::Waiting),
            AuditKind::Revoked => Some(NotifyEvent::Revoked),
            AuditKind::Withdrawn => Some(NotifyEvent::Withdrawn),
            AuditKind::PolicyChanged => Some(NotifyEvent::PolicyChanged),
            AuditKind::Resolved => Some(NotifyEvent::Resolved),
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
            // Written by `Store::advance_config`, which queues no notice: the
            // gate.config proposal's own events tell the administrators.
            AuditKind::Decision | AuditKind::Executing | AuditKind::ConfigApplied => None,
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
                kind: rec.preview.kind.to_string(),
                by: e
                    .detail
                    .get("by")
                    .and_then(|b| b.as_str())
                    .map(str::to_owned),
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

/// What one instance keeps about its outbox: whether its writes queue notifications
/// (some channel is configured), the most entries the outbox may hold, and how many
/// notifications were dropped at that cap since start. The entries themselves are
/// the backend's (on disk, never in memory).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OutboxState {
    /// Whether writes queue notifications.
    pub on: bool,
    /// The most entries the outbox holds.
    pub cap: u64,
    /// Notifications not queued because the outbox was full.
    pub dropped: u64,
}

impl Default for OutboxState {
    fn default() -> Self {
        Self {
            on: false,
            cap: DEFAULT_OUTBOX_CAP,
            dropped: 0,
        }
    }
}

impl OutboxState {
    /// The notifications a change causes, if writes queue any now.
    pub fn items(&self, rec: &ProposalRecord, events: &[AuditEvent]) -> Vec<OutboxItem> {
        if self.on {
            items_for(rec, events)
        } else {
            Vec::new()
        }
    }

    /// The cap rule, one copy for every backend: with `held` entries queued, how
    /// many of `wanted` new ones fit (the first ones), and how many are dropped.
    pub fn room(cap: u64, held: u64, wanted: usize) -> (usize, u64) {
        let room = cap.saturating_sub(held) as usize;
        (wanted.min(room), wanted.saturating_sub(room) as u64)
    }

    /// Counts and logs notifications dropped at the cap for a change that committed.
    pub fn count_dropped(&mut self, id: &ProposalId, dropped: u64) {
        if dropped > 0 {
            self.dropped += dropped;
            tracing::warn!(%id, dropped, cap = self.cap, "notification outbox full: notifications for this change were dropped (the change itself committed)");
        }
    }
}
