//! The agent's proposals: `approval_prepare` (checks the kind, the payload and the
//! summary, mints the id, stores the record with its policy) and `approval_withdraw`.
//!
//! May import the store, the record, the audit events, `disabled_kind` and core.

use super::error::transition_refusal;
use super::{Service, ServiceError, MAX_SUMMARY_CHARS};
use crate::audit::AuditKind;
use crate::record::{ProposalRecord, SCHEMA_VERSION};
use approval_core::ids::AgentName;
use approval_core::policy::{PayloadRefusal, Policy};
use approval_core::status::Lifecycle;
use approval_core::{Code, Execution, Kind, KindState, Preview, ProposalId};
use serde_json::{json, Value};
use std::sync::Arc;

impl Service {
    /// `approval_prepare`: a proposal the agent executes once approved.
    pub async fn prepare(
        &self,
        agent: &AgentName,
        kind: &str,
        payload: Value,
        summary: Option<String>,
    ) -> Result<(ProposalRecord, Arc<Policy>), ServiceError> {
        self.propose(agent, kind, payload, summary, None).await
    }

    /// A call to an exposed kind (issue #33): the arguments are the payload, and the
    /// preview says the gate runs it on quorum (see `on_quorum`). Only a kind whose
    /// policy sets `expose = true` may be proposed so.
    pub async fn propose_on_quorum(
        &self,
        agent: &AgentName,
        kind: &str,
        payload: Value,
    ) -> Result<(ProposalRecord, Arc<Policy>), ServiceError> {
        self.propose(agent, kind, payload, None, Some(Execution::OnQuorum))
            .await
    }

    async fn propose(
        &self,
        agent: &AgentName,
        kind: &str,
        payload: Value,
        summary: Option<String>,
        execution: Option<Execution>,
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
        if execution.is_some() && !policy.spec().expose {
            return Err(ServiceError::new(
                Code::UnknownKind,
                format!(
                    "kind {kind:?} is not exposed as a tool of its own (its policy does not set expose = true): propose it with approval_prepare"
                ),
            ));
        }
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
        self.create_proposal(agent, policy, payload, summary, execution)
            .await
    }

    /// Stores a new proposal under `policy`, whose payload the caller has checked:
    /// mints the id, writes the record with its policy, flushes, announces.
    pub(super) async fn create_proposal(
        &self,
        agent: &AgentName,
        policy: Arc<Policy>,
        payload: Value,
        summary: Option<String>,
        execution: Option<Execution>,
    ) -> Result<(ProposalRecord, Arc<Policy>), ServiceError> {
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
            execution,
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
        self.policies.ensure_stored(self.store.as_ref(), &policy)?;
        let writing = self.commit.begin();
        self.store.create_async(&rec, vec![ev], self.limits).await?;
        self.commit.flush().await?;
        drop(writing);
        self.count_proposal(&rec);
        self.announce(rec.id().clone());
        tracing::info!(id = %rec.id(), kind = %rec.preview.kind, agent = %agent, "proposed");
        Ok((rec, policy))
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
}
