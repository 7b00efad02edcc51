//! The policy cache: which policy a record was made under (the one in force, or the
//! store's copy parsed once) and which ones this process has stored. The service
//! holds one [`PolicyCache`] and asks it through `Service::policy_of`.
//!
//! May import the configuration, the store, the service's error and core; not the
//! service itself.

use super::error::ServiceError;
use crate::config::Config;
use crate::store::{Store, StoreError};
use approval_core::policy::Policy;
use approval_core::{Code, Kind, ProposalId, Sha256Hex};
use std::sync::Arc;

/// The policies records refer to, by hash.
#[derive(Default)]
pub(super) struct PolicyCache {
    /// Policies no longer in force that records still refer to, parsed once.
    old: std::sync::Mutex<std::collections::HashMap<Sha256Hex, Arc<Policy>>>,
    /// Policies this process has stored (`Store::put_policy`), so a prepare stores its
    /// policy once rather than asking the store on every prepare (#14, round 10).
    stored: StoredPolicies,
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

impl PolicyCache {
    /// Stores `policy` unless this process already did.
    pub(super) fn ensure_stored(
        &self,
        store: &dyn Store,
        policy: &Policy,
    ) -> Result<(), StoreError> {
        self.stored.ensure(store, policy)
    }

    /// The policy of kind `kind` with hash `hash` (named by record `id`): the one in
    /// force under `config` when it still matches (no re-parsing on the hot path),
    /// else the store's copy, parsed once and kept.
    pub(super) fn by(
        &self,
        config: &Config,
        store: &dyn Store,
        kind: &Kind,
        hash: Sha256Hex,
        id: &ProposalId,
    ) -> Result<Arc<Policy>, ServiceError> {
        if let Some(p) = config.policies.get(kind) {
            if p.sha256() == hash {
                return Ok(p.clone());
            }
        }
        if let Some(p) = self.old.lock().ok().and_then(|m| m.get(&hash).cloned()) {
            return Ok(p);
        }
        let json = store.get_policy(&hash)?.ok_or_else(|| {
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
        if let Ok(mut m) = self.old.lock() {
            m.insert(hash, policy.clone());
        }
        Ok(policy)
    }
}
