//! The approval service: every operation the agent side (MCP) and the human side
//! (approver API) can ask for, over the store, the configuration and the clock. It is
//! the one place the rules are applied: the transports above it only translate, the
//! store below it applies none.
//!
//! The transports are thin: they turn requests into calls here and results into
//! their wire formats. Each state change goes through [`Service::transition`]:
//! read the record, compute the next one with `approval-core` (whose state table,
//! [`approval_core::Action::rule`], says what is allowed), compare-and-swap it into
//! the store together with its audit events, flush (grouped), then announce it. No
//! lock is held across I/O and the executor runs outside all of it, in its own task,
//! so a client that hangs up cannot leave a claim unfinished.
//!
//! One file per use case: `propose` (prepare, withdraw), `read` (status, lists,
//! receipts), `decide`, `execute`, `upkeep` (sweeps, leases, recovery, voiding,
//! reload, and which instance leads an `upkeep::Task`), `tools` (resolving downstream
//! tool schemas, the configuration's only I/O). Below them, importing nothing of the
//! service but its error: `error`, `events` (the event bus), `long_poll` (when a wait
//! ends, and each agent's budget of waits) and `policies` (the policy cache). This file holds the service itself, its compare-and-swap loop and
//! what every use case shares.
//!
//! What it may import: the store, the record, the audit events, the configuration,
//! the executors, the leaf utilities (clock, identity, throttle,
//! verify_cache, disabled_kind) and core. Never a transport (listener, http, mcp,
//! approver_api, stdio, bridge), `run` or `notify`.

mod decide;
mod enrol;
mod error;
mod events;
mod execute;
mod governance;
pub mod long_poll;
pub mod on_quorum;
mod page;
mod policies;
mod propose;
mod read;
pub mod tools;
pub mod upkeep;

pub use error::ServiceError;
pub use events::{Event, RECENT_EVENTS};
pub use governance::PROPOSE_COMMAND;
pub use tools::load_config;

use crate::audit::{AuditEvent, AuditKind};
use crate::clock::Clock;
use crate::config::{Config, ConfigSource};
use crate::executor::ExecContext;
use crate::identity::ServerIdentity;
use crate::record::ProposalRecord;
use crate::store::{Cas, GroupCommit, PendingLimits, Store};
use approval_core::ids::AgentName;
use approval_core::policy::Policy;
use approval_core::quorum::{evaluate_with, Tally};
use approval_core::{Code, Kind, ProposalId, Sha256Hex, Timestamp};
use events::EventBus;
use policies::PolicyCache;
use serde_json::Value;
use std::sync::{Arc, RwLock};
use tokio::sync::broadcast;

/// The longest `wait_seconds` honoured.
pub const MAX_WAIT_SECONDS: u64 = 30;
/// The longest summary accepted, in characters.
pub const MAX_SUMMARY_CHARS: usize = 500;
/// The most records one page of a listing returns, and the default page size, for
/// MCP `approval_list` and `GET /v1/proposals` alike.
pub const MAX_LIST: usize = 100;

/// The approval service.
pub struct Service {
    store: Arc<dyn Store>,
    /// Signs execution attestations at the claim.
    identity: ServerIdentity,
    commit: GroupCommit,
    config: RwLock<Arc<Config>>,
    source: Option<ConfigSource>,
    clock: Arc<dyn Clock>,
    /// Announcements to long-polls and event streams.
    events: EventBus,
    exec: ExecContext,
    limits: PendingLimits,
    verified: crate::verify_cache::VerifyCache,
    forgeries: crate::throttle::Forgeries,
    /// Counts successful configuration loads; signed event streams end on each.
    reloads: tokio::sync::watch::Sender<u64>,
    /// The policies records refer to, and which ones this process has stored.
    policies: PolicyCache,
    /// The runtime the service was built on. An effect runs there whatever runtime
    /// the execute came from: the embedded stdio session has a runtime of its own
    /// (see `store::flush_inline_on_this_thread`), and an effect must neither wait
    /// behind that session's flushes nor end with it.
    runtime: Option<tokio::runtime::Handle>,
    /// `approval_status` waits held per agent (issue #31: capped, see `long_poll`).
    long_polls: long_poll::LongPolls,
    /// On-quorum proposals that may have become executable (see `on_quorum`).
    on_quorum: on_quorum::OnQuorumQueue,
    /// Where approvers open the gate's pages (`--public-url`), for links in notices
    /// (see `page`); `None` until known.
    public_url: RwLock<Option<String>>,
    /// Loading a configuration version (issue #35) one at a time (see `governance`).
    adopting: tokio::sync::Mutex<()>,
    /// What `/metrics` shows (issue #36); recorded where each rule is applied.
    metrics: Arc<crate::metrics::Metrics>,
}

/// The result of posting a decision.
#[derive(Debug, Clone)]
pub struct Decided {
    /// The record after the decision.
    pub record: ProposalRecord,
    /// True when this exact signed decision was already recorded.
    pub already_recorded: bool,
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
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let sampled = store.clone();
        metrics.set_sampler(Box::new(move || {
            crate::store::failstop::metrics_sample(sampled.as_ref())
        }));
        Arc::new(Self {
            commit: GroupCommit::new(store.clone()).with_metrics(metrics.clone()),
            store,
            identity,
            config: RwLock::new(Arc::new(config)),
            source,
            clock,
            events: EventBus::new(),
            exec,
            limits,
            verified: Default::default(),
            forgeries: Default::default(),
            reloads: tokio::sync::watch::channel(0).0,
            policies: Default::default(),
            runtime: tokio::runtime::Handle::try_current().ok(),
            long_polls: Default::default(),
            on_quorum: Default::default(),
            public_url: RwLock::new(None),
            adopting: tokio::sync::Mutex::new(()),
            metrics,
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

    /// The metrics `/metrics` shows.
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.metrics
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

    /// Announces a change (numbered, kept for resuming streams, broadcast).
    fn announce(&self, id: ProposalId) {
        self.events.announce(id);
    }

    /// The SSE id of announcement `seq`: `<epoch>-<seq>`.
    pub fn event_id(&self, seq: u64) -> String {
        self.events.event_id(seq)
    }

    /// The announcements after the one a client last saw (its `Last-Event-ID`), or
    /// `None` when they are not all known any more (another process's id, or older
    /// than [`RECENT_EVENTS`] announcements): the client must then re-read its lists.
    pub fn events_after(&self, last_event_id: &str) -> Option<Vec<Event>> {
        self.events.events_after(last_event_id)
    }

    /// The policy a record was made under (see [`PolicyCache`]).
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
        self.policies
            .by(&self.config(), self.store.as_ref(), kind, hash, id)
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

    /// The record as stored now ([`Store::get_latest_async`]): what a change starts
    /// from. Awaited: the runtime thread serves other requests while the store reads.
    async fn get_now(&self, id: &ProposalId) -> Result<ProposalRecord, ServiceError> {
        let found = self.store.get_latest_async(id).await?;
        found.ok_or_else(|| no_proposal(id))
    }

    fn get_for_agent(&self, agent: &AgentName, id: &str) -> Result<ProposalRecord, ServiceError> {
        let pid = agents_id(id)?;
        owned_by(agent, id, self.store.get(&pid)?)
    }

    /// [`Service::get_for_agent`], from the store as it is now (never a cached copy:
    /// [`Store::get_latest_async`]).
    async fn get_for_agent_latest(
        &self,
        agent: &AgentName,
        id: &str,
    ) -> Result<ProposalRecord, ServiceError> {
        let pid = agents_id(id)?;
        owned_by(agent, id, self.store.get_latest_async(&pid).await?)
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
        let cur = self.get_now(id).await?;
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
            match self.store.update_async(&next, events).await? {
                Cas::Applied => {
                    self.commit.flush().await?;
                    if next.status() != cur.status() {
                        self.count_proposal(&next);
                    }
                    self.announce(id);
                    return Ok(next);
                }
                Cas::Conflict(now_stored) => cur = *now_stored,
                Cas::Missing => {
                    return Err(self
                        .get_now(&id)
                        .await
                        .err()
                        .unwrap_or_else(|| ServiceError::new(Code::UnknownProposal, "gone")))
                }
            }
        }
    }

    /// Counts `rec` as having entered its status ([`crate::metrics`]).
    fn count_proposal(&self, rec: &ProposalRecord) {
        let kind = crate::metrics::Metrics::kind_label(&self.config().policies, &rec.preview.kind);
        self.metrics.proposal(kind, rec.status().as_str());
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

    /// Replaces the configuration directly (tests, demo).
    pub fn set_config(&self, config: Config) {
        match self.config.write() {
            Ok(mut c) => *c = Arc::new(config),
            Err(p) => *p.into_inner() = Arc::new(config),
        }
        self.reloaded();
    }
}

fn no_proposal(id: &ProposalId) -> ServiceError {
    ServiceError::new(
        Code::UnknownProposal,
        format!("no proposal {id}: check the id from approval_prepare or approval_list"),
    )
}

/// What an agent is told of an id that is not one of its proposals (malformed,
/// unknown, or another agent's: the same answer, so ids cannot be probed).
fn not_yours(id: &str) -> ServiceError {
    ServiceError::new(
        Code::UnknownProposal,
        format!("no proposal {id:?} of yours: check the id from approval_prepare or approval_list"),
    )
}

fn agents_id(id: &str) -> Result<ProposalId, ServiceError> {
    ProposalId::parse(id).map_err(|_| not_yours(id))
}

/// `found` if it is `agent`'s.
fn owned_by(
    agent: &AgentName,
    id: &str,
    found: Option<ProposalRecord>,
) -> Result<ProposalRecord, ServiceError> {
    match found {
        Some(rec) if &rec.preview.requested_by == agent => Ok(rec),
        _ => Err(not_yours(id)),
    }
}
