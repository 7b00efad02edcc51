//! Upkeep: what the server does by itself. The expiry sweep and the lease sweep (led
//! by one instance at a time on a shared store: [`Task`]), recovery at start-up,
//! voiding proposals whose rules changed, and the reload that leads to it.
//!
//! May import the store, the record, the configuration, `disabled_kind`, the tool
//! schema step ([`super::tools`]) and core.

use super::{Service, ServiceError};
use crate::audit::AuditKind;
use crate::config::{Config, ConfigError};
use crate::record::{ExecResult, ProposalRecord};
use crate::store::{Cas, Cursor, ListIndex};
use approval_core::quorum::QuorumOutcome;
use approval_core::status::{Outcome, Status};
use approval_core::{KindState, ProposalId};
use serde_json::json;

/// Records decoded per batch when start-up or a reload re-checks open proposals.
const VOID_BATCH: usize = 500;

/// Most proposals one expiry sweep ends (a sweep runs every few seconds).
const SWEEP_BATCH: usize = 1000;

/// A background task that one instance at a time leads on a store shared by several
/// (on the embedded store this instance always leads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// The expiry and lease sweeps.
    Sweep,
    /// Delivering the notification outbox.
    Outbox,
}

impl Task {
    /// The name the store keeps the lead under.
    pub fn as_str(self) -> &'static str {
        match self {
            Task::Sweep => "sweep",
            Task::Outbox => "outbox",
        }
    }
}

impl Service {
    /// Whether this instance leads `task` now (always, on the embedded store).
    pub async fn leads(&self, task: Task) -> bool {
        let store = self.store.clone();
        let leads = tokio::task::spawn_blocking(move || store.try_lead(task.as_str()))
            .await
            .unwrap_or(false);
        if self.store.leases().is_some() {
            self.metrics.leads(task.as_str(), leads);
        }
        leads
    }

    /// Whether this instance still leads `task`, checked right before each act of a
    /// batch (it may have been frozen mid-batch and replaced).
    pub fn still_leads(&self, task: Task) -> bool {
        self.store.still_leads(task.as_str())
    }

    /// Moves every record past its deadline to EXPIRED. Returns how many.
    pub async fn sweep(&self) -> Result<usize, ServiceError> {
        let now = self.now();
        let mut n = 0;
        // The store's deadline index hands over only what is due; a backlog larger
        // than one batch is finished by the next ticks.
        for head in self.store.due(now, SWEEP_BATCH)? {
            // Only while this instance still leads the sweep (it may have been frozen
            // mid-batch and replaced): a leader never acts on an old belief.
            if !self.still_leads(Task::Sweep) {
                break;
            }
            self.transition(&head.preview.proposal_id, |cur, now| {
                let Ok(life) = cur.lifecycle.expire(now) else {
                    return Ok(None);
                };
                let next = cur.with_lifecycle(life, now);
                Ok(Some((
                    next.clone(),
                    vec![Self::event(
                        AuditKind::Expired,
                        &next,
                        now,
                        json!({"was": cur.status()}),
                    )],
                )))
            })
            .await?;
            n += 1;
        }
        Ok(n)
    }

    /// On a store shared by several instances: every EXECUTING record whose lease ran
    /// out (the instance running it died) becomes OUTCOME_UNKNOWN, never re-run.
    /// Returns how many.
    pub async fn sweep_leases(&self) -> Result<usize, ServiceError> {
        let r = self.sweep_leases_once().await;
        if self.store.leases().is_some() {
            self.metrics
                .lease_sweep(r.as_ref().map(|n| *n).map_err(|_| ()));
        }
        r
    }

    async fn sweep_leases_once(&self) -> Result<usize, ServiceError> {
        let expired = self.store.expired_claims(SWEEP_BATCH)?;
        let mut ended = 0;
        for id in &expired {
            // Only while this instance still leads the sweep; the store checks the
            // lead again inside the write that ends the claim.
            if !self.still_leads(Task::Sweep) {
                break;
            }
            // One attempt, through the store's lease check: a claim renewed since
            // `expired_claims` read it (its instance is alive, only slow) is left
            // alone, and the next sweep looks again.
            let cur = self.get_now(id).await?;
            let now = self.now();
            let Ok(life) = cur.lifecycle.crash_recovered() else {
                continue;
            };
            let mut next = cur.with_lifecycle(life, now);
            next.result = Some(ExecResult {
                outcome: Outcome::Unknown,
                detail: "the instance running this stopped renewing its claim (its lease expired); a human must check and resolve it (signer-cli resolve)".into(),
                readback_sha256: None,
                output: None,
                finished_at: now,
            });
            let events = vec![Self::event(
                AuditKind::Finished,
                &cur,
                now,
                json!({"outcome": Outcome::Unknown, "why": "execution lease expired"}),
            )];
            let _writing = self.commit.begin();
            match self.store.end_expired_claim(&next, events)? {
                Cas::Applied => {
                    self.commit.flush().await?;
                    self.count_proposal(&next);
                    self.announce(id.clone());
                    ended += 1;
                    tracing::warn!(%id, "execution lease expired: now OUTCOME_UNKNOWN, not re-run");
                }
                Cas::Conflict(_) | Cas::Missing => {
                    tracing::info!(%id, "execution lease renewed or record changed since the sweep read it: left alone");
                }
            }
        }
        Ok(ended)
    }

    /// A change another instance made (`None`: changes may have been missed): wakes
    /// this process's long-polls and event streams as a local change does.
    pub fn announce_remote(&self, id: Option<ProposalId>) {
        match id {
            Some(id) => self.announce(id),
            None => {
                // Lagged receivers re-read: make every waiter see a change.
                let ids: Vec<ProposalId> = [Status::Pending, Status::Approved, Status::Executing]
                    .into_iter()
                    .filter_map(|st| self.store.list_status(st, 10_000).ok())
                    .flatten()
                    .map(|r| r.id().clone())
                    .collect();
                for id in ids {
                    self.announce(id);
                }
            }
        }
    }

    /// At start-up: every EXECUTING record becomes OUTCOME_UNKNOWN, never re-run.
    /// On a store shared by several instances, none is touched here: another
    /// instance may be running it; [`Service::sweep_leases`] ends those whose lease
    /// ran out.
    pub async fn recover(&self) -> Result<usize, ServiceError> {
        if self.store.leases().is_some() {
            return Ok(0);
        }
        let stuck = self.store.list_status(Status::Executing, usize::MAX)?;
        for rec in &stuck {
            self.transition(rec.id(), |cur, now| {
                let Ok(life) = cur.lifecycle.crash_recovered() else { return Ok(None) };
                let mut next = cur.with_lifecycle(life, now);
                next.result = Some(ExecResult {
                    outcome: Outcome::Unknown,
                    detail: "the server stopped while this ran; a human must check and resolve it (signer-cli resolve)".into(),
                    readback_sha256: None,
                    output: None,
                    finished_at: now,
                });
                Ok(Some((next, vec![Self::event(AuditKind::Finished, cur, now, json!({"outcome": Outcome::Unknown, "why": "found EXECUTING at start-up"}))])))
            })
            .await?;
            tracing::warn!(id = %rec.id(), "found EXECUTING at start-up: now OUTCOME_UNKNOWN, not re-run");
        }
        Ok(stuck.len())
    }

    /// Whether a record's rules still hold: its kind's policy in force is the one it was
    /// made under, and, once APPROVED, its approvals still reach quorum under the keyring
    /// in force (a removed or replaced key stops counting at once).
    pub(super) fn rules_hold(
        &self,
        config: &Config,
        rec: &ProposalRecord,
    ) -> Result<bool, ServiceError> {
        let same = self.policy_in_force(config, rec) == Some(rec.preview.policy_sha256);
        if !same {
            return Ok(false);
        }
        if rec.status() == Status::Approved {
            let (tally, _) = self.tally(rec)?;
            return Ok(tally.outcome == QuorumOutcome::Reached);
        }
        Ok(true)
    }

    /// Ends a PENDING or APPROVED proposal as POLICY_CHANGED when its rules no longer hold.
    /// Returns whether it did.
    pub(super) async fn void_one(&self, id: &ProposalId) -> Result<bool, ServiceError> {
        let config = self.config();
        let voided = std::sync::atomic::AtomicBool::new(false);
        self.transition(id, |cur, now| {
            // A kind waiting for its downstream schema has an unknown policy, not a
            // changed one: its proposals stay as they are.
            if crate::disabled_kind::kind_awaits_schema(&config, &cur.preview.kind)
                || self.change_ahead_of(&config, cur)
                || self.rules_hold(&config, cur)?
            {
                return Ok(None);
            }
            let Ok(life) = cur.lifecycle.policy_changed(now) else {
                return Ok(None);
            };
            let next = cur.with_lifecycle(life, now);
            voided.store(true, std::sync::atomic::Ordering::SeqCst);
            let why = match config.policies.state(&cur.preview.kind) {
                KindState::Disabled(d) => d.reason(),
                _ => "the kind's policy, or the keys its approvals were made with, changed".into(),
            };
            let detail = json!({
                "old_policy_sha256": cur.preview.policy_sha256,
                "why": why,
            });
            Ok(Some((
                next.clone(),
                vec![Self::event(AuditKind::PolicyChanged, &next, now, detail)],
            )))
        })
        .await?;
        Ok(voided.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Ends, as POLICY_CHANGED, every open proposal whose rules changed: its kind's policy
    /// is no longer the one it was made under, or (once approved) the keyring in force no
    /// longer gives it quorum. Runs at start-up and after every reload.
    ///
    /// Walks the PENDING and APPROVED indexes in batches, decoding only each record's
    /// head, and reads a whole record only when its head cannot settle it (an APPROVED
    /// record under an unchanged policy, whose approvals must be counted again): its
    /// memory is bounded by a batch, not by the number of open proposals.
    ///
    /// "Open proposals that counted on a removed key": every PENDING or APPROVED
    /// proposal of a kind whose policy now names an approver missing from the keyring
    /// (the kind is disabled, so it has no policy in force), whether or not that
    /// approver had decided yet, since its quorum arithmetic changed; and every
    /// APPROVED proposal whose approvals no longer reach quorum under the keyring.
    pub async fn void_changed_policies(&self) -> Result<usize, ServiceError> {
        let config = self.config();
        let index = ListIndex::Statuses(vec![Status::Pending, Status::Approved]);
        let mut n = 0;
        let mut cursor: Option<Cursor> = None;
        loop {
            let page = self
                .store
                .page(&index, cursor.as_ref(), VOID_BATCH, &mut |h| {
                    if crate::disabled_kind::kind_awaits_schema(&config, &h.preview.kind) {
                        return false;
                    }
                    let same = config.policies.get(&h.preview.kind).map(|p| p.sha256())
                        == Some(h.preview.policy_sha256);
                    !same || h.lifecycle.status == Status::Approved
                })?;
            for h in &page.heads {
                if self.void_one(&h.preview.proposal_id).await? {
                    n += 1;
                }
            }
            match page.next {
                Some(c) => cursor = Some(c),
                None => return Ok(n),
            }
        }
    }

    /// Reloads policies, keys and agents, and ends as POLICY_CHANGED every open
    /// proposal whose rules no longer hold.
    ///
    /// Fails closed on keys: a kind whose policy names an approver missing from the new
    /// keyring is disabled rather than the reload refused, and when another file is
    /// broken (the reload is refused and its error returned) a keyring that parses is
    /// still applied over the policies in force. Only an unreadable or invalid keyring
    /// keeps the old one, since there is then no list of keys to apply.
    pub async fn reload(&self) -> Result<usize, ConfigError> {
        let Some(source) = &self.source else {
            return Ok(0);
        };
        if let Some(under_quorum) = self.refuse_hand_edits().await {
            return under_quorum;
        }
        let (fresh, refused) = match super::tools::load_config(source).await {
            Ok(c) => (c, None),
            Err(e) => match source.load_keyring() {
                Ok(keyring) => {
                    tracing::error!(
                        "reload refused: {e}\nthe new keyring is applied anyway over the policies in force, so that removed keys stop counting"
                    );
                    (self.config().with_keyring(keyring), Some(e))
                }
                Err(_) => return Err(e),
            },
        };
        for why in fresh.disabled_reasons() {
            tracing::error!("{why}");
        }
        self.set_config(fresh);
        let voided = match self.void_changed_policies().await {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(error = %e, "could not void proposals under changed policies");
                0
            }
        };
        match refused {
            None => Ok(voided),
            Some(e) => Err(e),
        }
    }
}
