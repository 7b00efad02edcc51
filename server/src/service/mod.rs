//! The approval service: every operation the agent side (MCP) and the human side
//! (approver API) can ask for, over the store, the configuration and the clock.
//!
//! The transports are thin: they turn requests into calls here and results into
//! their wire formats. Each state change goes through [`Service::transition`]:
//! read the record, compute the next one with `approval-core`, compare-and-swap
//! it into the store together with its audit events, flush (grouped), then
//! announce it. No lock is held across I/O and the executor runs outside all of
//! it, in its own task, so a client that hangs up cannot leave a claim unfinished.

use crate::audit::{AuditEvent, AuditKind};
use crate::clock::Clock;
use crate::config::{Config, ConfigError, ConfigSource};
use crate::executor::{self, ExecContext};
use crate::identity::ServerIdentity;
use crate::long_poll;
use crate::record::{ExecResult, ProposalRecord, StoredDecision, SCHEMA_VERSION};
use crate::store::{
    Cas, Cursor, GroupCommit, HeadPage, ListIndex, PendingLimits, Store, StoreError,
};
use approval_core::ids::AgentName;
use approval_core::message::{Decision, SignedDecision};
use approval_core::policy::{PayloadRefusal, Policy};
use approval_core::quorum::{evaluate_with, QuorumOutcome, Tally};
use approval_core::receipt::Receipt;
use approval_core::status::{Lifecycle, Outcome, Status};
use approval_core::{
    ApproverName, Code, Kind, KindState, Preview, ProposalId, Sha256Hex, Timestamp,
};
use serde_json::{json, Value};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::broadcast;

/// The longest `wait_seconds` honoured.
pub const MAX_WAIT_SECONDS: u64 = 30;
/// The longest summary accepted, in characters.
pub const MAX_SUMMARY_CHARS: usize = 500;
/// The most records one page of a listing returns, and the default page size, for
/// MCP `approval_list` and `GET /v1/proposals` alike.
pub const MAX_LIST: usize = 100;

/// Records decoded per batch when start-up or a reload re-checks open proposals.
const VOID_BATCH: usize = 500;

/// Most proposals one expiry sweep ends (a sweep runs every few seconds).
const SWEEP_BATCH: usize = 1000;

/// A refusal with the code a client branches on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceError {
    /// Stable code.
    pub code: Code,
    /// What was wrong and what to do.
    pub message: String,
    /// The proposal's status, where there is one.
    pub status: Option<Status>,
    /// Whether trying again later may succeed.
    pub retry_allowed: bool,
    /// The proposal, where there is one.
    pub proposal_id: Option<ProposalId>,
    /// The store's own words, when the store failed (for callers that must tell
    /// the client more than the generic storage message).
    pub storage_failure: Option<String>,
}

impl ServiceError {
    /// A refusal without a proposal.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            status: None,
            retry_allowed: false,
            proposal_id: None,
            storage_failure: None,
        }
    }

    fn about(mut self, rec: &ProposalRecord, now: Timestamp) -> Self {
        self.status = Some(rec.lifecycle.at(now).status);
        self.proposal_id = Some(rec.id().clone());
        self
    }

    pub(crate) fn retry(mut self, yes: bool) -> Self {
        self.retry_allowed = yes;
        self
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Full(m) => return ServiceError::new(Code::LimitExceeded, m).retry(true),
            StoreError::Stopped(m) => {
                let mut refusal = ServiceError::new(Code::Internal, m.clone()).retry(true);
                refusal.storage_failure = Some(m);
                return refusal;
            }
            StoreError::Unavailable(why) => {
                // A shared database that went away: this instance keeps running and
                // reconnects by itself, so "retry" is the answer, not "restart".
                tracing::warn!(error = %why, "store unreachable");
                let mut refusal = ServiceError::new(
                    Code::Internal,
                    format!(
                        "the store is unreachable: {why}; retry. Nothing was reported done that \
                         was not stored; if this request changed something, check with \
                         approval_status before trying again"
                    ),
                )
                .retry(true);
                refusal.storage_failure = Some(format!("the store is unreachable: {why}"));
                return refusal;
            }
            _ => {}
        }
        tracing::error!(error = %e, "storage failure");
        let mut refusal = ServiceError::new(
            Code::Internal,
            format!(
                "the server could not store this: {e}. It stops so that a restart recovers from \
                 its log, and keeps everything it acknowledged before. Whether this request took \
                 effect is not known: once the server is back, check with approval_status before \
                 trying again"
            ),
        )
        .retry(true);
        refusal.storage_failure = Some(e.to_string());
        refusal
    }
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// Aborts a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A change to a proposal, announced to long-polls and watchers.
#[derive(Debug, Clone)]
pub struct Event {
    /// Which proposal.
    pub id: ProposalId,
    /// Its place in this process's sequence of announcements (from 1), which
    /// `/v1/events` sends as the SSE id so a client can resume with `Last-Event-ID`.
    pub seq: u64,
}

/// Announcements kept for a resuming event stream (`Last-Event-ID`).
pub const RECENT_EVENTS: usize = 4096;

/// The last announcements, in order, and the next sequence number.
#[derive(Default)]
struct Recent {
    next: u64,
    events: std::collections::VecDeque<Event>,
}

/// The result of posting a decision.
#[derive(Debug, Clone)]
pub struct Decided {
    /// The record after the decision.
    pub record: ProposalRecord,
    /// True when this exact signed decision was already recorded.
    pub already_recorded: bool,
}

/// The approval service.
pub struct Service {
    store: Arc<dyn Store>,
    /// Signs execution attestations at the claim.
    identity: ServerIdentity,
    commit: GroupCommit,
    config: RwLock<Arc<Config>>,
    source: Option<ConfigSource>,
    clock: Arc<dyn Clock>,
    events: broadcast::Sender<Event>,
    recent: std::sync::Mutex<Recent>,
    /// Tells this process's event ids from another's (a restart starts over).
    epoch: String,
    exec: ExecContext,
    limits: PendingLimits,
    verified: crate::verify_cache::VerifyCache,
    forgeries: crate::throttle::Forgeries,
    /// Counts successful configuration loads; signed event streams end on each.
    reloads: tokio::sync::watch::Sender<u64>,
    /// Policies no longer in force that records still refer to, parsed once.
    old_policies: std::sync::Mutex<std::collections::HashMap<Sha256Hex, Arc<Policy>>>,
    /// Policies this process has stored (`Store::put_policy`), so a prepare stores its
    /// policy once rather than asking the store on every prepare (#14, round 10).
    stored_policies: StoredPolicies,
    /// The runtime the service was built on. An effect runs there whatever runtime
    /// the execute came from: the embedded stdio session has a runtime of its own
    /// (see `store::flush_inline_on_this_thread`), and an effect must neither wait
    /// behind that session's flushes nor end with it.
    runtime: Option<tokio::runtime::Handle>,
    /// `approval_status` waits held per agent (issue #31: capped, see `long_poll`).
    long_polls: crate::long_poll::LongPolls,
}

fn transition_refusal(
    rec: &ProposalRecord,
    now: Timestamp,
    e: approval_core::status::TransitionError,
) -> ServiceError {
    let message = match e.code {
        Code::AlreadyExecutedNoReplay => "this proposal was already executed; it is never run again. Do not retry: report the stored result".to_owned(),
        Code::ExecutionInProgress => "another call is executing this proposal right now; poll approval_status for the result, do not execute again".to_owned(),
        Code::PendingQuorum => "not enough approvals yet: ask your human approvers to sign it, then poll approval_status".to_owned(),
        Code::Expired => "the proposal ran out of time; prepare a new one if the action is still wanted".to_owned(),
        Code::Rejected => "approvers rejected this proposal; do not retry it".to_owned(),
        Code::Revoked => "an approver revoked the approval; do not retry it".to_owned(),
        Code::Withdrawn => "the proposal was withdrawn".to_owned(),
        Code::PolicyChanged => "the policy for this kind changed after it was proposed; prepare it again under the new policy".to_owned(),
        Code::OutcomeUnknown => "the outcome of this proposal is unknown and waits for a human to resolve it".to_owned(),
        Code::CoolingDown => format!(
            "quorum was reached but the policy's cooldown has not ended: the proposal becomes executable at {}, and until then any approver can still revoke or veto it. Nothing was consumed: call approval_status with wait_seconds (it answers when the cooldown ends), then approval_execute again",
            rec.lifecycle.executable_from.map_or_else(|| "the end of the cooldown".to_owned(), |t| t.to_string())
        ),
        _ => e.to_string(),
    };
    let retry = matches!(
        e.code,
        Code::PendingQuorum | Code::ExecutionInProgress | Code::CoolingDown
    );
    ServiceError::new(e.code, message)
        .about(rec, now)
        .retry(retry)
}

/// The hashes of the policies this process has stored. A record names its policy by
/// hash, and the policy must be in the store before the record is; policies are
/// content-addressed and never removed, so once `put_policy` has returned for a hash
/// it need not be asked again. Before, every prepare asked: a store read under the
/// store's locks (sled), or a round trip to the database (PostgreSQL).
///
/// Why this is as durable as before: on sled the policy's insert comes before the
/// record's batch in the same log, so the record's flush covers it; a prepare that
/// skips the call only ever writes a record after the one that stored the policy
/// returned. PostgreSQL commits the insert before `put_policy` returns.
///
/// Bounded: only policies the operator loads reach it (an agent names a kind, never a
/// policy), and it is emptied if it ever holds [`StoredPolicies::MAX`] hashes, after
/// which each is simply stored again.
#[derive(Default)]
struct StoredPolicies(std::sync::Mutex<std::collections::HashSet<Sha256Hex>>);

impl StoredPolicies {
    const MAX: usize = 1024;

    fn known(&self, hash: &Sha256Hex) -> bool {
        self.0.lock().map(|s| s.contains(hash)).unwrap_or(false)
    }

    /// Stores `policy` unless this process already did.
    fn ensure(&self, store: &dyn Store, policy: &Policy) -> Result<(), StoreError> {
        let hash = policy.sha256();
        if self.known(&hash) {
            return Ok(());
        }
        store.put_policy(&hash, policy.canonical_json())?;
        if let Ok(mut s) = self.0.lock() {
            if s.len() >= Self::MAX {
                s.clear();
            }
            s.insert(hash);
        }
        Ok(())
    }
}

impl Service {
    /// Builds the service over a store and a loaded configuration, with the default
    /// pending-proposal limits.
    pub fn new(
        store: Arc<dyn Store>,
        identity: ServerIdentity,
        config: Config,
        source: Option<ConfigSource>,
        clock: Arc<dyn Clock>,
        exec: ExecContext,
    ) -> Arc<Self> {
        Self::with_limits(
            store,
            identity,
            config,
            source,
            clock,
            exec,
            PendingLimits::default(),
        )
    }

    /// Builds the service with other pending-proposal limits.
    pub fn with_limits(
        store: Arc<dyn Store>,
        identity: ServerIdentity,
        config: Config,
        source: Option<ConfigSource>,
        clock: Arc<dyn Clock>,
        exec: ExecContext,
        limits: PendingLimits,
    ) -> Arc<Self> {
        Arc::new(Self {
            commit: GroupCommit::new(store.clone()),
            store,
            identity,
            config: RwLock::new(Arc::new(config)),
            source,
            clock,
            events: broadcast::channel(4096).0,
            recent: Default::default(),
            epoch: {
                let mut b = [0u8; 4];
                let _ = getrandom::fill(&mut b);
                hex::encode(b)
            },
            exec,
            limits,
            verified: Default::default(),
            forgeries: Default::default(),
            reloads: tokio::sync::watch::channel(0).0,
            old_policies: Default::default(),
            stored_policies: Default::default(),
            runtime: tokio::runtime::Handle::try_current().ok(),
            long_polls: Default::default(),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        match self.config.read() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Now, by the injected clock.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The server's id and identity key.
    pub fn identity(&self) -> &ServerIdentity {
        &self.identity
    }

    /// Group-commit statistics.
    pub fn fsync_count(&self) -> u64 {
        self.commit.fsync_count()
    }

    /// Waits until nothing a read may have seen is still waiting for its fsync. Every
    /// transport calls it after reading and before answering.
    pub async fn settle(&self) -> Result<(), ServiceError> {
        Ok(self.commit.settle().await?)
    }

    /// Subscribes to proposal changes.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Numbers a change, keeps it for resuming streams, and broadcasts it (under one
    /// lock, so receivers see the numbers in order).
    fn announce(&self, id: ProposalId) {
        let mut r = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        r.next += 1;
        let ev = Event { id, seq: r.next };
        r.events.push_back(ev.clone());
        if r.events.len() > RECENT_EVENTS {
            r.events.pop_front();
        }
        let _ = self.events.send(ev);
    }

    /// The SSE id of announcement `seq`: `<epoch>-<seq>`.
    pub fn event_id(&self, seq: u64) -> String {
        format!("{}-{seq}", self.epoch)
    }

    /// The announcements after the one a client last saw (its `Last-Event-ID`), or
    /// `None` when they are not all known any more (another process's id, or older
    /// than [`RECENT_EVENTS`] announcements): the client must then re-read its lists.
    pub fn events_after(&self, last_event_id: &str) -> Option<Vec<Event>> {
        let (epoch, seq) = last_event_id.split_once('-')?;
        let seq: u64 = seq.parse().ok()?;
        let r = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if epoch != self.epoch || seq > r.next {
            return None;
        }
        let oldest = r.events.front().map_or(r.next + 1, |e| e.seq);
        if seq + 1 < oldest {
            return None;
        }
        Some(r.events.iter().filter(|e| e.seq > seq).cloned().collect())
    }

    /// The policy a record was made under: the one in force when it still matches
    /// (no re-parsing on the hot path), else the store's copy, parsed once and kept.
    pub fn policy_of(&self, rec: &ProposalRecord) -> Result<Arc<Policy>, ServiceError> {
        self.policy_by(&rec.preview.kind, rec.preview.policy_sha256, rec.id())
    }

    /// [`Service::policy_of`] by kind and policy hash (for a record's head).
    fn policy_by(
        &self,
        kind: &Kind,
        hash: Sha256Hex,
        id: &ProposalId,
    ) -> Result<Arc<Policy>, ServiceError> {
        if let Some(p) = self.config().policies.get(kind) {
            if p.sha256() == hash {
                return Ok(p.clone());
            }
        }
        if let Some(p) = self
            .old_policies
            .lock()
            .ok()
            .and_then(|m| m.get(&hash).cloned())
        {
            return Ok(p);
        }
        let json = self.store.get_policy(&hash)?.ok_or_else(|| {
            ServiceError::new(
                Code::Internal,
                format!("policy {hash} of proposal {id} is missing from the store"),
            )
        })?;
        let policy = Policy::from_canonical_json(&json)
            .map(Arc::new)
            .map_err(|e| {
                ServiceError::new(Code::Internal, format!("stored policy unreadable: {e}"))
            })?;
        if policy.sha256() != hash {
            return Err(ServiceError::new(
                Code::Internal,
                format!("stored policy {hash} does not hash to its key"),
            ));
        }
        if let Ok(mut m) = self.old_policies.lock() {
            m.insert(hash, policy.clone());
        }
        Ok(policy)
    }

    /// Counts the record's decisions under its policy and the keyring in force.
    pub fn tally(&self, rec: &ProposalRecord) -> Result<(Tally, Arc<Policy>), ServiceError> {
        let policy = self.policy_of(rec)?;
        let keyring = &self.config().keyring;
        let tally = evaluate_with(
            &policy,
            keyring,
            &rec.preview_sha256,
            &rec.signed_decisions(),
            |k, d, h| self.verified.verify(k, d, h),
        );
        Ok((tally, policy))
    }

    fn get(&self, id: &ProposalId) -> Result<ProposalRecord, ServiceError> {
        self.store.get(id)?.ok_or_else(|| {
            ServiceError::new(
                Code::UnknownProposal,
                format!("no proposal {id}: check the id from approval_prepare or approval_list"),
            )
        })
    }

    fn get_for_agent(&self, agent: &AgentName, id: &str) -> Result<ProposalRecord, ServiceError> {
        let unknown = || {
            ServiceError::new(Code::UnknownProposal, format!("no proposal {id:?} of yours: check the id from approval_prepare or approval_list"))
        };
        let id = ProposalId::parse(id).map_err(|_| unknown())?;
        match self.store.get(&id)? {
            Some(rec) if &rec.preview.requested_by == agent => Ok(rec),
            _ => Err(unknown()),
        }
    }

    /// Applies a change with compare-and-swap, retrying on conflict; flushes and
    /// announces it. `f` returns `None` for "nothing to change".
    async fn transition<F>(&self, id: &ProposalId, f: F) -> Result<ProposalRecord, ServiceError>
    where
        F: Fn(
            &ProposalRecord,
            Timestamp,
        ) -> Result<Option<(ProposalRecord, Vec<AuditEvent>)>, ServiceError>,
    {
        let cur = self.get(id)?;
        self.transition_from(cur, f).await
    }

    /// [`Service::transition`] from a record the caller has just read, which saves
    /// reading and decoding it again. It may be stale by now: the compare-and-swap on
    /// its revision refuses a stale base, and a conflict hands back what is stored,
    /// which the next try starts from.
    async fn transition_from<F>(
        &self,
        mut cur: ProposalRecord,
        f: F,
    ) -> Result<ProposalRecord, ServiceError>
    where
        F: Fn(
            &ProposalRecord,
            Timestamp,
        ) -> Result<Option<(ProposalRecord, Vec<AuditEvent>)>, ServiceError>,
    {
        let id = cur.id().clone();
        loop {
            let now = self.now();
            let Some((next, events)) = f(&cur, now)? else {
                return Ok(cur);
            };
            let _writing = self.commit.begin();
            match self.store.update(&next, events)? {
                Cas::Applied => {
                    self.commit.flush().await?;
                    self.announce(id);
                    return Ok(next);
                }
                Cas::Conflict(now_stored) => cur = *now_stored,
                Cas::Missing => {
                    return Err(self
                        .get(&id)
                        .err()
                        .unwrap_or_else(|| ServiceError::new(Code::UnknownProposal, "gone")))
                }
            }
        }
    }

    fn event(kind: AuditKind, rec: &ProposalRecord, now: Timestamp, detail: Value) -> AuditEvent {
        AuditEvent {
            kind,
            proposal_id: rec.id().clone(),
            at: now,
            detail,
        }
    }

    /// Failed signatures charged to their source, shared by signed reads and decisions.
    pub fn forgeries(&self) -> &crate::throttle::Forgeries {
        &self.forgeries
    }

    /// Changes with every configuration (keyring) load that took effect: a signed
    /// event stream ends when it changes, so its reader signs again under the new keyring.
    pub fn reloads(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reloads.subscribe()
    }

    fn reloaded(&self) {
        self.reloads.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// `approval_prepare`.
    pub async fn prepare(
        &self,
        agent: &AgentName,
        kind: &str,
        payload: Value,
        summary: Option<String>,
    ) -> Result<(ProposalRecord, Arc<Policy>), ServiceError> {
        let config = self.config();
        let kinds = || {
            config
                .policies
                .iter()
                .map(|p| p.kind().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let unknown = || {
            ServiceError::new(
                Code::UnknownKind,
                format!("no policy for kind {kind:?}: use one of: {}", kinds()),
            )
        };
        let policy = match Kind::parse(kind).ok() {
            None => return Err(unknown()),
            Some(k) => match config.policies.state(&k) {
                KindState::Enabled(p) => p.clone(),
                KindState::Disabled(d) => {
                    // The specifics (file, command line, URL) are the operator's: logged.
                    tracing::warn!(kind = %k, reason = %d.reason(), "prepare refused: kind disabled");
                    return Err(ServiceError::new(
                        Code::KindDisabled,
                        format!(
                            "{}. Nothing of this kind can be proposed until an operator fixes it: tell your human; do not retry",
                            crate::disabled_kind::public_reason(d)
                        ),
                    ));
                }
                KindState::Unknown => return Err(unknown()),
            },
        };
        policy.check_payload(&payload).map_err(|e| {
            let hint = match &e {
                PayloadRefusal::Schema { .. } => format!(
                    "; the schema is: {}",
                    policy.spec().payload_schema.clone().unwrap_or(Value::Null)
                ),
                _ => String::new(),
            };
            ServiceError::new(Code::InvalidPayload, format!("{e}{hint}"))
        })?;
        let summary = summary.unwrap_or_default();
        let n = summary.chars().count();
        if n > MAX_SUMMARY_CHARS {
            return Err(ServiceError::new(
                Code::InvalidPayload,
                format!(
                    "summary is {n} characters: keep it to one line of at most {MAX_SUMMARY_CHARS}"
                ),
            ));
        }
        let mut rnd = [0u8; 16];
        getrandom::fill(&mut rnd)
            .map_err(|e| ServiceError::new(Code::Internal, format!("no randomness: {e}")))?;
        // Wall-clock milliseconds, not the service's clock: the time in an id only
        // orders records in the store (`ProposalId::mint`), it is never read back.
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let id = ProposalId::mint(rnd, millis);
        let now = self.now();
        let preview = Preview {
            v: 1,
            server_id: self.store.server_id().clone(),
            proposal_id: id,
            kind: policy.kind().clone(),
            payload,
            summary,
            requested_by: agent.clone(),
            created_at: now,
            expires_at: now.plus(policy.spec().ttl),
            policy_sha256: policy.sha256(),
            cooldown: policy.spec().cooldown,
        };
        let rec = ProposalRecord {
            schema: SCHEMA_VERSION,
            revision: 0,
            preview_sha256: preview.sha256(),
            lifecycle: Lifecycle::new(preview.expires_at),
            preview,
            decisions: vec![],
            result: None,
            attestation: None,
            updated_at: now,
        };
        let ev = Self::event(
            AuditKind::Proposed,
            &rec,
            now,
            json!({"agent": agent, "kind": rec.preview.kind, "preview_sha256": rec.preview_sha256}),
        );
        self.stored_policies.ensure(self.store.as_ref(), &policy)?;
        let writing = self.commit.begin();
        self.store.create(&rec, vec![ev], self.limits)?;
        self.commit.flush().await?;
        drop(writing);
        self.announce(rec.id().clone());
        tracing::info!(id = %rec.id(), kind = %rec.preview.kind, agent = %agent, "proposed");
        Ok((rec, policy))
    }

    /// `approval_status`, long-polling up to `wait_seconds` for a change.
    pub async fn status(
        &self,
        agent: &AgentName,
        id: &str,
        wait_seconds: u64,
    ) -> Result<ProposalRecord, ServiceError> {
        Ok(self.status_waiting(agent, id, wait_seconds).await?.0)
    }

    /// [`Service::status`], also saying what became of the wait. A wait answers at
    /// once when the agent can act or nothing will change, otherwise at the first
    /// change, the deadline or the cooldown's end ([`long_poll::until`]); an agent
    /// already holding [`long_poll::MAX_LONG_POLLS_PER_AGENT`] waits is answered at once.
    pub async fn status_waiting(
        &self,
        agent: &AgentName,
        id: &str,
        wait_seconds: u64,
    ) -> Result<(ProposalRecord, long_poll::Waited), ServiceError> {
        let wait = wait_seconds.min(MAX_WAIT_SECONDS);
        if wait == 0 {
            // No wait: no subscription to make and drop (two locks on the hot path).
            return Ok((self.get_for_agent(agent, id)?, long_poll::Waited::NotAsked));
        }
        // Subscribed before the read, so a change right after it still wakes us.
        let mut rx = self.subscribe();
        let rec = self.get_for_agent(agent, id)?;
        let now = self.now();
        let most = Duration::from_secs(wait);
        let limit = match long_poll::until(&rec.lifecycle, now) {
            long_poll::Until::Now => return Ok((rec, long_poll::Waited::NotNeeded)),
            long_poll::Until::Change => most,
            long_poll::Until::ChangeOr(at) => most.min(long_poll::time_to(at, now)),
        };
        let Some(_slot) = self.long_polls.try_hold(agent) else {
            return Ok((rec, long_poll::Waited::Busy));
        };
        long_poll::first_change(&mut rx, rec.id(), limit).await;
        Ok((self.get_for_agent(agent, id)?, long_poll::Waited::Waited))
    }

    /// How many `approval_status` waits `agent` holds now.
    pub fn long_polls_held(&self, agent: &AgentName) -> usize {
        self.long_polls.held(agent)
    }

    /// `approval_list`: one page of the caller's proposals, newest first, after
    /// `cursor`. Reads the agent's index and decodes only each record's head (never a
    /// payload), so its cost is bounded by the page, not by the store.
    pub fn list_for_agent(
        &self,
        agent: &AgentName,
        status: Option<Status>,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<HeadPage, ServiceError> {
        let now = self.now();
        Ok(self.store.page(
            &ListIndex::Agent(agent.clone()),
            cursor,
            limit.clamp(1, MAX_LIST),
            &mut |h| status.is_none_or(|s| h.lifecycle.at(now).status == s),
        )?)
    }

    /// `approval_withdraw`: PENDING only.
    pub async fn withdraw(
        &self,
        agent: &AgentName,
        id: &str,
    ) -> Result<ProposalRecord, ServiceError> {
        let rec = self.get_for_agent(agent, id)?;
        self.transition(rec.id(), |cur, now| {
            let life = cur
                .lifecycle
                .withdraw(now)
                .map_err(|e| transition_refusal(cur, now, e))?;
            let next = cur.with_lifecycle(life, now);
            Ok(Some((
                next.clone(),
                vec![Self::event(AuditKind::Withdrawn, &next, now, json!({}))],
            )))
        })
        .await
    }

    /// `approval_execute`: checks the hash, re-checks policy and quorum, claims,
    /// runs the executor once and stores the outcome.
    pub async fn execute(
        self: &Arc<Self>,
        agent: &AgentName,
        id: &str,
        preview_sha256: &str,
    ) -> Result<ProposalRecord, ServiceError> {
        let rec = self.get_for_agent(agent, id)?;
        let now = self.now();
        if Sha256Hex::parse(preview_sha256).ok() != Some(rec.preview_sha256) {
            return Err(ServiceError::new(
                Code::PreviewMismatch,
                format!("preview_sha256 does not match this proposal (its hash starts {}): execute exactly what was approved, using the hash from approval_prepare", rec.preview_sha256.prefix(8)),
            )
            .about(&rec, now)
            .retry(true));
        }
        // The rules must be the ones the approvers signed under (policy and keys); if
        // they changed, the proposal ends as POLICY_CHANGED and the claim below refuses.
        // Otherwise the claim starts from the record just read, not a second read: its
        // compare-and-swap refuses it if anything changed it since, and the retry starts
        // from what is stored. After a voiding it starts from what is stored, so that its
        // refusal names the status the proposal now has.
        if let Some(e) = crate::disabled_kind::execute_refusal(&self.config(), &rec.preview.kind) {
            return Err(e.about(&rec, now));
        }
        let base = if self.rules_hold(&self.config(), &rec)? {
            rec
        } else {
            self.void_one(rec.id()).await?;
            self.get(rec.id())?
        };
        let claimed = self
            .transition_from(base, |cur, now| {
                let life = cur.lifecycle.claim(now).map_err(|e| transition_refusal(cur, now, e))?;
                let in_force = self.config().policies.get(&cur.preview.kind).map(|p| p.sha256());
                if in_force != Some(cur.preview.policy_sha256) {
                    return Err(ServiceError::new(
                        Code::PolicyChanged,
                        "the policy for this kind changed after it was proposed; prepare it again under the new policy",
                    )
                    .about(cur, now));
                }
                let (tally, _) = self.tally(cur)?;
                if tally.outcome != QuorumOutcome::Reached {
                    return Err(ServiceError::new(
                        Code::PolicyChanged,
                        "the approvals no longer reach quorum under the keyring in force (an approver's key was removed or replaced); prepare the action again",
                    )
                    .about(cur, now));
                }
                let approved_at = cur.lifecycle.approved_at.ok_or_else(|| {
                    ServiceError::new(Code::Internal, "an APPROVED proposal without approved_at: cannot attest its execution").about(cur, now)
                })?;
                let mut next = cur.with_lifecycle(life, now);
                // Signed and stored in the same compare-and-swap as the claim, before the
                // effect runs: the receipt the executor sees and the one read later agree.
                next.attestation = Some(self.identity.attest(cur.id(), &cur.preview_sha256, approved_at, now));
                Ok(Some((next.clone(), vec![Self::event(AuditKind::Executing, &next, now, json!({"agent": agent}))])))
            })
            .await?;
        // Run the effect in its own task: if the caller goes away, the outcome is still recorded.
        let svc = self.clone();
        let run = async move { svc.run_claimed(claimed).await };
        let handle = match &self.runtime {
            Some(rt) => rt.spawn(run),
            None => tokio::spawn(run),
        };
        match handle.await {
            Ok(r) => r,
            Err(e) => Err(ServiceError::new(
                Code::Internal,
                format!("executor task failed: {e}"),
            )),
        }
    }

    async fn run_claimed(&self, claimed: ProposalRecord) -> Result<ProposalRecord, ServiceError> {
        let policy = self.policy_of(&claimed)?;
        let receipt = Receipt::build_with(
            &claimed.preview,
            &policy,
            &self.config().keyring,
            &claimed.signed_decisions(),
            |k, d, h| self.verified.verify(k, d, h),
        )
        .with_attestation(claimed.attestation.clone());
        let cfg = policy.spec().executor.clone();
        let exec = self.exec.clone();
        let _renewing = self.keep_lease(claimed.id());
        let (id, payload) = (claimed.id().clone(), claimed.preview.payload.clone());
        let report =
            match tokio::spawn(
                async move { executor::run(&cfg, &exec, &id, &payload, &receipt).await },
            )
            .await
            {
                Ok(r) => r,
                Err(e) => executor::ExecReport {
                    outcome: Outcome::Unknown,
                    detail: format!("executor crashed: {e}"),
                    readback_sha256: None,
                    output: None,
                },
            };
        tracing::info!(id = %claimed.id(), outcome = ?report.outcome, "executed");
        let (outcome, detail) = (report.outcome, executor::excerpt(&report.detail));
        // From the claimed record as stored by the claim, not a fresh read: a change made
        // since (a sweep on a shared store) fails the compare-and-swap, and the retry
        // starts from what is stored, whose lifecycle then refuses or allows the finish.
        self.transition_from(claimed.clone(), |cur, now| {
            let life = cur
                .lifecycle
                .finish(report.outcome)
                .map_err(|e| transition_refusal(cur, now, e))?;
            let mut next = cur.with_lifecycle(life, now);
            next.result = Some(ExecResult {
                outcome: report.outcome,
                detail: report.detail.clone(),
                readback_sha256: report.readback_sha256,
                output: report.output.clone(),
                finished_at: now,
            });
            let ev = Self::event(
                AuditKind::Finished,
                &next,
                now,
                json!({"outcome": report.outcome, "readback_sha256": report.readback_sha256}),
            );
            Ok(Some((next, vec![ev])))
        })
        .await
        .map_err(|e| {
            let Some(cause) = &e.storage_failure else {
                return e;
            };
            // The effect happened; only its record is missing. Saying "try again" here
            // would invite a second run, which the claim refuses anyway.
            // On a shared store the instance keeps running: the claim's lease, no
            // longer renewed, runs out and a sweep ends it OUTCOME_UNKNOWN.
            let (recovers, back) = match self.store.leases() {
                None => (
                    "it stops so that a restart recovers",
                    "once the server is back",
                ),
                Some(_) => (
                    "its claim is no longer renewed",
                    "once the store is reachable and the claim's lease has run out",
                ),
            };
            ServiceError::new(
                Code::OutcomeUnknown,
                format!(
                    "the action ran (the executor reported {outcome:?}: {detail}) but the server \
                     could not record the outcome ({cause}); {recovers}. \
                     Do not execute it again: {back} the proposal shows \
                     OUTCOME_UNKNOWN for a human to resolve"
                ),
            )
            .about(&claimed, self.now())
        })
    }

    /// Whether an approver may see (and sign) a record.
    fn visible(&self, approver: &ApproverName, rec: &ProposalRecord) -> bool {
        self.policy_of(rec).is_ok_and(|p| p.is_approver(approver))
    }

    /// A proposal for an approver.
    pub fn get_for_approver(
        &self,
        approver: &ApproverName,
        id: &str,
    ) -> Result<ProposalRecord, ServiceError> {
        let unknown = || {
            ServiceError::new(
                Code::UnknownProposal,
                format!("no proposal {id:?} that you may decide on"),
            )
        };
        let id = ProposalId::parse(id).map_err(|_| unknown())?;
        match self.store.get(&id)? {
            Some(rec) if self.visible(approver, &rec) => Ok(rec),
            _ => Err(unknown()),
        }
    }

    /// One page of the proposals an approver may decide on, newest first, after
    /// `cursor`, by status (expiry applied). Walks the status indexes reading each
    /// record once ([`Store::page_records`]): a second lookup per record would cost
    /// more the larger the store grows.
    pub fn list_for_approver(
        &self,
        approver: &ApproverName,
        status: Option<Status>,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<(Vec<ProposalRecord>, Option<Cursor>), ServiceError> {
        let now = self.now();
        // An effectively expired record is still stored as PENDING/APPROVED until swept.
        let stored = match status {
            Some(Status::Expired) => vec![Status::Expired, Status::Pending, Status::Approved],
            Some(s) => vec![s],
            None => Status::ALL.to_vec(),
        };
        let page = self.store.page_records(
            &ListIndex::Statuses(stored),
            cursor,
            limit.clamp(1, MAX_LIST),
            &mut |h| {
                status.is_none_or(|s| h.lifecycle.at(now).status == s)
                    && self
                        .policy_by(
                            &h.preview.kind,
                            h.preview.policy_sha256,
                            &h.preview.proposal_id,
                        )
                        .is_ok_and(|p| p.is_approver(approver))
            },
        )?;
        Ok((page.records, page.next))
    }

    /// Records a signed decision (idempotently) and applies what it causes. A failed
    /// signature is charged to `source` (the client's connection), never to the approver
    /// named: a decision that verifies is always heard (see [`crate::throttle`]).
    pub async fn decide(
        &self,
        id: &str,
        d: SignedDecision,
        source: Option<crate::throttle::ConnectionId>,
    ) -> Result<Decided, ServiceError> {
        let config = self.config();
        let forbidden = |m: String| ServiceError::new(Code::InvalidSignature, m);
        let key = *config.keyring.get(&d.approver).ok_or_else(|| {
            forbidden(format!(
                "approver {} is not in the server's keyring",
                d.approver
            ))
        })?;
        let rec = match ProposalId::parse(id)
            .ok()
            .map(|pid| self.store.get(&pid))
            .transpose()?
        {
            Some(Some(rec)) => rec,
            _ => {
                return Err(ServiceError::new(
                    Code::UnknownProposal,
                    format!("no proposal {id:?}"),
                ))
            }
        };
        if !self.visible(&d.approver, &rec) {
            return Err(forbidden(format!(
                "{} is not an approver of kind {} under the policy of this proposal: only the policy's approvers may decide",
                d.approver, rec.preview.kind
            )));
        }
        self.forgeries.admit(source, self.now()).await;
        // Memoised: the quorum count inside the transition and the answer's view
        // check this same signature again, and should not redo the Ed25519 math.
        if !self.verified.verify(&key, &d, &rec.preview_sha256) {
            self.forgeries.failed(source, self.now());
            return Err(forbidden(format!(
                "signature does not verify for {} {} on preview {}: sign exactly `approval-v1\\n{}\\n<preview_sha256>\\n<reason>` for this proposal with the key in the keyring; {}",
                d.approver, d.decision, rec.preview_sha256.prefix(8), d.decision,
                approval_core::fingerprint::held_key_note(&d.approver, &key)
            )));
        }
        // A connection in the listener's approver reserve is served once this is set.
        self.forgeries.passed(source, self.now());
        if let Some(prev) = rec
            .decisions
            .iter()
            .find(|x| x.signed.approver == d.approver && x.signed.decision == d.decision)
        {
            if prev.signed == d {
                // The first copy may still be waiting for its fsync: acknowledge this
                // one only once that write is durable too.
                self.commit.flush().await?;
                return Ok(Decided {
                    record: rec,
                    already_recorded: true,
                });
            }
            return Err(ServiceError::new(
                Code::AlreadyRecorded,
                format!(
                    "{} already recorded a {} on this proposal",
                    d.approver, d.decision
                ),
            )
            .about(&rec, self.now()));
        }
        let already = std::sync::atomic::AtomicBool::new(false);
        let record = self
            .transition_from(rec, |cur, now| {
                if cur.decisions.iter().any(|x| x.signed == d) {
                    // The same signed decision arrived concurrently and won.
                    already.store(true, std::sync::atomic::Ordering::SeqCst);
                    return Ok(None);
                }
                let life = cur.lifecycle.at(now);
                if !life.accepts(d.decision, now) {
                    return Err(ServiceError::new(
                        Code::InvalidTransition,
                        format!("cannot {} a proposal that is {}", d.decision, life.status),
                    )
                    .about(cur, now));
                }
                let mut next = cur.clone();
                next.revision += 1;
                next.updated_at = now;
                next.decisions.push(StoredDecision {
                    signed: d.clone(),
                    at: now,
                });
                let mut events = vec![Self::event(
                    AuditKind::Decision,
                    cur,
                    now,
                    json!({"approver": d.approver, "decision": d.decision, "reason": d.reason}),
                )];
                let (tally, policy) = self.tally(&next)?;
                let spec = policy.spec();
                let changed = match (life.status, &tally.outcome, d.decision) {
                    // The cooldown is the signed preview's (the policy's, by its hash).
                    (Status::Pending, QuorumOutcome::Reached, _) => Some((
                        life.approve_with_cooldown(now, cur.preview.cooldown, spec.execute_within),
                        AuditKind::Approved,
                    )),
                    (Status::Pending, QuorumOutcome::Vetoed, _) => {
                        Some((life.reject(now), AuditKind::Rejected))
                    }
                    (Status::Approved, QuorumOutcome::Revoked, _) => {
                        Some((life.revoke(now), AuditKind::Revoked))
                    }
                    // A counted reject during the cooldown is a veto: it ends it.
                    (Status::Approved, _, Decision::Reject)
                        if tally.rejections.contains(&d.approver) =>
                    {
                        Some((life.reject(now), AuditKind::Rejected))
                    }
                    (Status::OutcomeUnknown, _, Decision::ResolveSucceeded) => {
                        Some((life.resolve(true), AuditKind::Resolved))
                    }
                    (Status::OutcomeUnknown, _, Decision::ResolveFailed) => {
                        Some((life.resolve(false), AuditKind::Resolved))
                    }
                    _ => None,
                };
                next.lifecycle = life;
                if let Some((l, kind)) = changed {
                    next.lifecycle = l.map_err(|e| transition_refusal(cur, now, e))?;
                    events.push(Self::event(
                        kind,
                        cur,
                        now,
                        json!({"status": next.lifecycle.status, "by": d.approver}),
                    ));
                }
                Ok(Some((next, events)))
            })
            .await?;
        let already = already.load(std::sync::atomic::Ordering::SeqCst);
        if already {
            // Found applied by a concurrent identical post: wait until it is durable.
            self.commit.flush().await?;
        }
        tracing::info!(id = %record.id(), approver = %d.approver, decision = %d.decision, status = %record.status(), "decision");
        Ok(Decided {
            record,
            already_recorded: already,
        })
    }

    /// A receipt, once quorum was reached.
    pub fn receipt(&self, approver: &ApproverName, id: &str) -> Result<Receipt, ServiceError> {
        let rec = self.get_for_approver(approver, id)?;
        let now = self.now();
        let st = rec.lifecycle.at(now).status;
        let reached = matches!(
            st,
            Status::Approved
                | Status::Executing
                | Status::Succeeded
                | Status::Failed
                | Status::OutcomeUnknown
        ) || rec.lifecycle.approved_at.is_some();
        if !reached {
            return Err(ServiceError::new(
                Code::InvalidTransition,
                format!("no receipt: the proposal is {st} and never reached quorum"),
            )
            .about(&rec, now));
        }
        let policy = self.policy_of(&rec)?;
        Ok(Receipt::build_with(
            &rec.preview,
            &policy,
            &self.config().keyring,
            &rec.signed_decisions(),
            |k, d, h| self.verified.verify(k, d, h),
        )
        .with_attestation(rec.attestation.clone()))
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
            if !self.store.still_leads("sweep") {
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

    /// While a claimed record's executor runs on a store shared by several instances,
    /// renews its lease every third of the lease time, so that other instances know
    /// this one is alive. Stops when the returned guard drops.
    fn keep_lease(&self, id: &ProposalId) -> Option<AbortOnDrop> {
        let lease = self.store.leases()?;
        let (store, id) = (self.store.clone(), id.clone());
        Some(AbortOnDrop(tokio::spawn(async move {
            let mut tick = tokio::time::interval(lease / 3);
            tick.tick().await;
            loop {
                tick.tick().await;
                let (store, id) = (store.clone(), id.clone());
                match tokio::task::spawn_blocking(move || store.renew_lease(&id)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!(error = %e, "cannot renew an execution lease"),
                    Err(e) => tracing::warn!(error = %e, "lease renewal task failed"),
                }
            }
        })))
    }

    /// On a store shared by several instances: every EXECUTING record whose lease ran
    /// out (the instance running it died) becomes OUTCOME_UNKNOWN, never re-run.
    /// Returns how many.
    pub async fn sweep_leases(&self) -> Result<usize, ServiceError> {
        let expired = self.store.expired_claims(SWEEP_BATCH)?;
        let mut ended = 0;
        for id in &expired {
            // Only while this instance still leads the sweep; the store checks the
            // lead again inside the write that ends the claim.
            if !self.store.still_leads("sweep") {
                break;
            }
            // One attempt, through the store's lease check: a claim renewed since
            // `expired_claims` read it (its instance is alive, only slow) is left
            // alone, and the next sweep looks again.
            let cur = self.get(id)?;
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
    fn rules_hold(&self, config: &Config, rec: &ProposalRecord) -> Result<bool, ServiceError> {
        let same = config.policies.get(&rec.preview.kind).map(|p| p.sha256())
            == Some(rec.preview.policy_sha256);
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
    async fn void_one(&self, id: &ProposalId) -> Result<bool, ServiceError> {
        let config = self.config();
        let voided = std::sync::atomic::AtomicBool::new(false);
        self.transition(id, |cur, now| {
            // A kind waiting for its downstream schema has an unknown policy, not a
            // changed one: its proposals stay as they are.
            if crate::disabled_kind::kind_awaits_schema(&config, &cur.preview.kind)
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
        let (fresh, refused) = match source.load_resolved().await {
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

    /// Replaces the configuration directly (tests, demo).
    pub fn set_config(&self, config: Config) {
        match self.config.write() {
            Ok(mut c) => *c = Arc::new(config),
            Err(p) => *p.into_inner() = Arc::new(config),
        }
        self.reloaded();
    }
}
