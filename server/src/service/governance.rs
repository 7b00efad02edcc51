//! The configuration under quorum (issue #35): the one place its rules are applied.
//!
//! - **Start** ([`Service::govern_at_start`]): a store that holds a configuration
//!   version serves that version, whatever the files say (they are compared, and a
//!   difference is logged as ignored). A store that holds none, started with
//!   `--root`, adopts the files as version 1 and records it in the audit chain.
//! - **Propose** ([`Service::propose_config`]): an administrator's signed request
//!   becomes a `gate.config` proposal: the whole new bundle, its diff against the
//!   version in force and that version's number, under the policy the root in
//!   force derives ([`config_policy`]).
//! - **Apply** ([`Service::apply_config`], from the execute claim of an on-quorum
//!   proposal): the store's compare-and-swap on the version makes it apply once
//!   and in order on any number of instances; a change whose base version is gone
//!   is refused there (rollback, replay) and, before that, voided as POLICY_CHANGED.
//! - **Follow** ([`Service::follow_config`]): every instance polls the version and
//!   loads a newer one another instance applied.
//! - **Reload**: a SIGHUP under quorum never takes files edited by hand
//!   ([`Service::refuse_hand_edits`]).
//!
//! May import the configuration, the store, the record, the audit events and core.

use super::{Service, ServiceError};
use crate::audit::{AuditEvent, AuditKind};
use crate::config::{load_governed, Config, ConfigError};
use crate::executor::ExecReport;
use crate::record::ProposalRecord;
use approval_core::governance::{
    config_policy, emergency_removal, Bundle, ConfigChange, ConfigHead, CONFIG_KIND,
    CONFIG_PROPOSER,
};
use approval_core::ids::AgentName;
use approval_core::policy::Policy;
use approval_core::status::Outcome;
use approval_core::{ApproverName, Code, Execution, ProposalId, Sha256Hex};
use serde_json::json;
use std::sync::Arc;

/// How many of the newest configuration changes a new one is compared with.
const PENDING_CONFIG_SCAN: usize = 100;

/// The command an operator uses instead of editing files, named in every refusal.
pub const PROPOSE_COMMAND: &str =
    "approval-server config pull DIR --server URL --key FILE, edit DIR, then approval-server config propose DIR --server URL --key FILE";

impl Service {
    /// At start-up: serves the version the store holds, or, with `--root` and none
    /// held yet, adopts the files as version 1. Returns the version in force (0: the
    /// configuration is not under quorum).
    pub async fn govern_at_start(&self) -> Result<u64, ServiceError> {
        let files = match &self.source {
            Some(s) => s.read_bundle().map_err(config_error)?,
            None => None,
        };
        let head = match self.store.config_head()? {
            Some(h) => h,
            None => {
                let Some(bundle) = files.clone() else {
                    return Ok(0);
                };
                let first = ConfigHead::new(1, bundle, None);
                load_governed(first.clone()).map_err(config_error)?;
                let ev = config_event(&first, None, self.now(), true);
                if self.store.advance_config(0, &first, vec![ev])? {
                    tracing::warn!(
                        version = 1,
                        bundle_sha256 = %first.bundle_sha256,
                        "the configuration is now under quorum: from here on it changes only through `approval-server config propose` and the administrators' approval"
                    );
                }
                // Another instance may have adopted its files first: the store's wins.
                self.store.config_head()?.ok_or_else(|| {
                    ServiceError::new(
                        Code::Internal,
                        "the configuration version just written is missing",
                    )
                })?
            }
        };
        if let Some(b) = files.filter(|b| b.sha256() != head.bundle_sha256) {
            tracing::error!(
                version = head.version,
                "the configuration files differ from version {} in force and are ignored ({} lines differ): {PROPOSE_COMMAND}",
                head.version,
                b.diff(&head.bundle).len()
            );
        }
        let version = head.version;
        let in_force = self
            .config()
            .governed
            .as_ref()
            .map(|g| g.head.bundle_sha256);
        if in_force != Some(head.bundle_sha256) {
            self.adopt(head).await?;
        }
        Ok(version)
    }

    /// Loads the version the store holds when it is newer than the one in force
    /// (another instance applied it). Every instance runs this every second.
    /// Returns whether it changed anything.
    pub async fn follow_config(&self) -> Result<bool, ServiceError> {
        let held = self.store.config_version()?;
        let ours = self
            .config()
            .governed
            .as_ref()
            .map_or(0, |g| g.head.version);
        if held <= ours {
            return Ok(false);
        }
        let Some(head) = self.store.config_head()? else {
            return Ok(false);
        };
        tracing::info!(
            version = head.version,
            "configuration version applied by another instance: loading it"
        );
        self.adopt(head).await?;
        Ok(true)
    }

    /// Puts `head` in force: loads it (tool schemas included), swaps it in, voids
    /// what no longer holds, and writes its files where this instance reads them.
    async fn adopt(&self, head: ConfigHead) -> Result<(), ServiceError> {
        // One at a time, and never back: a slow load of version N (its downstream tool
        // schemas) must not land over N+1 loaded meanwhile.
        // Released before the voiding, which may look for a newer version itself.
        let bundle = {
            let _one = self.adopting.lock().await;
            let in_force = self
                .config()
                .governed
                .as_ref()
                .map_or(0, |g| g.head.version);
            if in_force >= head.version {
                return Ok(());
            }
            let bundle = head.bundle.clone();
            let config = load_governed(head).map_err(config_error)?;
            let config = super::tools::resolve(config).await;
            for why in config.disabled_reasons() {
                tracing::error!("{why}");
            }
            self.set_config(config);
            bundle
        };
        if let Err(e) = self.void_changed_policies().await {
            tracing::error!(error = %e, "could not void proposals under changed rules");
        }
        if let Some(source) = &self.source {
            if let Err(e) = source.write_bundle(&bundle) {
                tracing::error!("the configuration in force could not be written to its files (they are ignored under quorum anyway): {e}");
            }
        }
        Ok(())
    }

    /// Under quorum, a reload takes nothing from the files: it loads a newer version
    /// from the store if there is one, and refuses files edited by hand. `None` when
    /// the configuration is not under quorum (an ordinary reload).
    pub(super) async fn refuse_hand_edits(&self) -> Option<Result<usize, ConfigError>> {
        let stored = match self.store.config_version() {
            Ok(v) => v,
            Err(e) => return Some(Err(ConfigError::Governance(e.to_string()))),
        };
        if stored == 0 {
            return None;
        }
        if let Err(e) = self.follow_config().await {
            return Some(Err(ConfigError::Governance(e.message)));
        }
        // Fail closed: under quorum a reload never reads the files for the rules.
        let in_force = self.config().governed.clone();
        let files = self.source.as_ref().map(|s| s.read_bundle());
        let version = in_force.as_ref().map_or(stored, |g| g.head.version);
        match (files, in_force) {
            (Some(Ok(Some(b))), Some(g)) if b.sha256() == g.head.bundle_sha256 => Some(Ok(0)),
            _ => Some(Err(ConfigError::Governance(format!(
                "reload refused: the configuration is under quorum (version {version} in force) and files edited by hand change nothing; nothing changed. To change it: {PROPOSE_COMMAND}"
            )))),
        }
    }

    /// `POST /v1/config/proposals`: administrator `by` proposes `bundle` as the next
    /// configuration version.
    pub async fn propose_config(
        &self,
        by: &ApproverName,
        bundle: Bundle,
    ) -> Result<(ProposalRecord, ConfigChange, Arc<Policy>), ServiceError> {
        let config = self.config();
        let Some(governed) = config.governed.clone() else {
            return Err(ServiceError::new(
                Code::BadRequest,
                "the configuration is not under quorum: start the server once with --root root.toml to put it under quorum",
            ));
        };
        if !governed.root.is_administrator(by) {
            return Err(ServiceError::new(
                Code::Unauthorized,
                format!("{by} is not an administrator in root.toml: only administrators propose configuration changes"),
            ));
        }
        let next = ConfigHead::new(governed.head.version + 1, bundle.clone(), None);
        if next.bundle_sha256 == governed.head.bundle_sha256 {
            return Err(ServiceError::new(
                Code::InvalidPayload,
                format!(
                    "this is configuration version {} exactly: nothing would change",
                    governed.head.version
                ),
            ));
        }
        // Loaded as it would be applied: a change that could not load is refused now.
        load_governed(next).map_err(|e| ServiceError::new(Code::InvalidPayload, e.to_string()))?;
        let change = ConfigChange::new(&governed.head, bundle);
        let policy = config_policy(&governed.root, change.emergency_removal.as_ref())
            .map(Arc::new)
            .map_err(|e| ServiceError::new(Code::Internal, e.to_string()))?;
        policy
            .check_payload(&change.to_value())
            .map_err(|e| ServiceError::new(Code::InvalidPayload, e.to_string()))?;
        if let Some(same) = self.pending_config_change(&change)? {
            return Err(ServiceError::new(
                Code::InvalidPayload,
                format!("this change is already proposed as {same}: approve that one (signer-cli approve {same})"),
            ));
        }
        let summary = match &change.emergency_removal {
            Some(r) => format!(
                "EMERGENCY: remove administrator {r} (configuration version {} to {}), proposed by {by}",
                change.from_version, change.to_version
            ),
            None => format!(
                "configuration version {} to {}: {} changed lines, proposed by {by}",
                change.from_version,
                change.to_version,
                change.diff.iter().filter(|l| l.starts_with(['+', '-'])).count()
            ),
        };
        if let Some(r) = &change.emergency_removal {
            tracing::error!(administrator = %r, proposed_by = %by, "EMERGENCY REMOVAL of an administrator proposed: it needs one approval fewer, never theirs");
        }
        let agent = proposer();
        let (rec, policy) = self
            .create_proposal(
                &agent,
                policy,
                change.to_value(),
                Some(summary),
                Some(Execution::OnQuorum),
            )
            .await?;
        Ok((rec, change, policy))
    }

    /// A PENDING `gate.config` proposal of the same bundle over the same version: a
    /// replayed or repeated request makes no second one.
    fn pending_config_change(
        &self,
        change: &ConfigChange,
    ) -> Result<Option<ProposalId>, ServiceError> {
        let pending = self.store.list_agent(&proposer(), PENDING_CONFIG_SCAN)?;
        Ok(pending
            .into_iter()
            .filter(|r| r.status() == approval_core::status::Status::Pending)
            .find(|r| {
                ConfigChange::from_value(&r.preview.payload).is_ok_and(|c| {
                    c.from_version == change.from_version && c.bundle_sha256 == change.bundle_sha256
                })
            })
            .map(|r| r.id().clone()))
    }

    /// Loads a newer version first when the store has one, before a configuration
    /// change is claimed: an instance that is behind judges it by the version in force.
    pub(super) async fn catch_up_for(&self, rec: &ProposalRecord) {
        if rec.preview.kind.as_str() == CONFIG_KIND {
            if let Err(e) = self.follow_config().await {
                tracing::warn!(error = %e.message, "could not read the configuration version");
            }
        }
    }

    /// Whether `rec` is a configuration change over a version newer than the one this
    /// instance has loaded: not this instance's to void (it follows within a second).
    pub(super) fn change_ahead_of(&self, config: &Config, rec: &ProposalRecord) -> bool {
        rec.preview.kind.as_str() == CONFIG_KIND
            && ConfigChange::from_value(&rec.preview.payload).is_ok_and(|c| {
                c.from_version > config.governed.as_ref().map_or(0, |g| g.head.version)
            })
    }

    /// The hash of the policy a record must still be under for its rules to hold:
    /// the kind's policy in force, or for a configuration change the one the root in
    /// force derives for it, while the version it replaces is still in force.
    pub(super) fn policy_in_force(
        &self,
        config: &Config,
        rec: &ProposalRecord,
    ) -> Option<Sha256Hex> {
        if rec.preview.kind.as_str() != CONFIG_KIND {
            return config.policies.get(&rec.preview.kind).map(|p| p.sha256());
        }
        let governed = config.governed.as_ref()?;
        let change = ConfigChange::from_value(&rec.preview.payload).ok()?;
        let emergency = emergency_removal(&governed.head, &change.bundle);
        if change.from_version != governed.head.version || emergency != change.emergency_removal {
            return None;
        }
        config_policy(&governed.root, emergency.as_ref())
            .ok()
            .map(|p| p.sha256())
    }

    /// Applies an approved, claimed configuration change: the store's compare-and-swap
    /// on the version, then this instance loads it (the others follow).
    pub(super) async fn apply_config(&self, rec: &ProposalRecord) -> ExecReport {
        let change = match ConfigChange::from_value(&rec.preview.payload) {
            Ok(c) => c,
            Err(e) => return ExecReport::new(Outcome::Failed, format!("nothing applied: {e}")),
        };
        let mut head = ConfigHead::new(
            change.to_version,
            change.bundle.clone(),
            Some(rec.id().clone()),
        );
        head.emergency_removal = change.emergency_removal.clone();
        if let Err(e) = load_governed(head.clone()) {
            return ExecReport::new(Outcome::Failed, format!("nothing applied: {e}"));
        }
        let ev = config_event(&head, change.emergency_removal.as_ref(), self.now(), false);
        let store = self.store.clone();
        let (from, to) = (change.from_version, head.clone());
        let applied =
            tokio::task::spawn_blocking(move || store.advance_config(from, &to, vec![ev])).await;
        match applied {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => {
                let now = self.store.config_version().unwrap_or(0);
                return ExecReport::new(
                    Outcome::Failed,
                    format!("nothing applied: this change replaces version {from}, and version {now} is in force; propose it again"),
                );
            }
            Ok(Err(e)) => {
                return ExecReport::new(
                    Outcome::Unknown,
                    format!("the store failed while applying: {e}"),
                )
            }
            Err(e) => {
                return ExecReport::new(Outcome::Unknown, format!("the apply task stopped: {e}"))
            }
        }
        if let Some(r) = &change.emergency_removal {
            tracing::error!(administrator = %r, version = head.version, "EMERGENCY REMOVAL APPLIED: administrator {r} and their keys are gone from the configuration");
        }
        tracing::warn!(version = head.version, proposal = %rec.id(), "configuration version {} applied on quorum", head.version);
        let version = head.version;
        if let Err(e) = self.adopt(head).await {
            tracing::error!(error = %e.message, "applied, but this instance could not load it yet: it retries every second");
        }
        ExecReport::new(
            Outcome::Succeeded,
            format!("configuration version {version} is in force"),
        )
    }
}

/// The audit event of a version coming into force.
fn config_event(
    head: &ConfigHead,
    emergency: Option<&ApproverName>,
    at: approval_core::Timestamp,
    first: bool,
) -> AuditEvent {
    let proposal_id = head.proposal_id.clone().unwrap_or_else(|| {
        ProposalId::parse(&format!("config-v{}", head.version))
            .unwrap_or_else(|_| ProposalId::mint([0; 16], 0))
    });
    AuditEvent {
        kind: AuditKind::ConfigApplied,
        proposal_id,
        at,
        detail: json!({
            "version": head.version,
            "bundle_sha256": head.bundle_sha256,
            "adopted_from_files": first,
            "emergency_removal": emergency,
        }),
    }
}

/// The agent name configuration changes are requested under.
fn proposer() -> AgentName {
    AgentName::parse(CONFIG_PROPOSER).unwrap_or_else(|_| unreachable!("a valid constant"))
}

fn config_error(e: ConfigError) -> ServiceError {
    ServiceError::new(Code::Internal, e.to_string())
}
