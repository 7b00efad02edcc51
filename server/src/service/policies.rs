//! The policy cache: which policy a record was made under (the one in force, or the
//! store's copy parsed once), which ones this process has stored, and the quorum
//! count under the keyring in force.
//!
//! May import the store, the record and core.

use super::{Service, ServiceError};
use crate::record::ProposalRecord;
use crate::store::{Store, StoreError};
use approval_core::policy::Policy;
use approval_core::quorum::{evaluate_with, Tally};
use approval_core::{Code, Kind, ProposalId, Sha256Hex};
use std::sync::Arc;

/// Policies no longer in force that records still refer to, parsed once.
pub(super) type OldPolicies = std::sync::Mutex<std::collections::HashMap<Sha256Hex, Arc<Policy>>>;

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
pub(super) struct StoredPolicies(std::sync::Mutex<std::collections::HashSet<Sha256Hex>>);

impl StoredPolicies {
    const MAX: usize = 1024;

    fn known(&self, hash: &Sha256Hex) -> bool {
        self.0.lock().map(|s| s.contains(hash)).unwrap_or(false)
    }

    /// Stores `policy` unless this process already did.
    pub(super) fn ensure(&self, store: &dyn Store, policy: &Policy) -> Result<(), StoreError> {
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
    /// The policy a record was made under: the one in force when it still matches
    /// (no re-parsing on the hot path), else the store's copy, parsed once and kept.
    pub fn policy_of(&self, rec: &ProposalRecord) -> Result<Arc<Policy>, ServiceError> {
        self.policy_by(&rec.preview.kind, rec.preview.policy_sha256, rec.id())
    }

    /// [`Service::policy_of`] by kind and policy hash (for a record's head).
    pub(super) fn policy_by(
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
}
