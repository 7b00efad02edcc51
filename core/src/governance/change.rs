//! A configuration change as a proposal: its payload ([`ConfigChange`]), the policy
//! that governs it ([`config_policy`], derived from the root in force), the version
//! the store keeps ([`ConfigHead`]), and the one change that needs fewer approvals:
//! removing a single administrator ([`emergency_removal`]), so that a compromised
//! administrator can neither block nor be needed for their own removal.

use super::bundle::Bundle;
use super::root::Root;
use super::CONFIG_KIND;
use crate::approver_key::SignatureKind;
use crate::ids::{ApproverName, Kind, ProposalId, Sha256Hex};
use crate::policy::{ExecutorConfig, Policy, PolicyError};
use crate::policy::{PolicySpec, MAX_MAX_PAYLOAD_BYTES};
use crate::time::Seconds;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How long a configuration change waits for its administrators.
pub const CONFIG_TTL: Seconds = Seconds::new(24 * 3600);

/// The configuration version a store holds: which bundle is in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigHead {
    /// 1 for the configuration first put under quorum, then one more per change.
    pub version: u64,
    /// [`Bundle::sha256`] of `bundle`.
    pub bundle_sha256: Sha256Hex,
    /// The configuration in force.
    pub bundle: Bundle,
    /// The `gate.config` proposal that made it; none for version 1 (adopted from the
    /// files when `root.toml` first appeared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal_id: Option<ProposalId>,
    /// Set when this version came from an emergency removal of that administrator:
    /// the next change then needs the full threshold (no chain of removals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emergency_removal: Option<ApproverName>,
}

impl ConfigHead {
    /// A head for `bundle` at `version`.
    pub fn new(version: u64, bundle: Bundle, proposal_id: Option<ProposalId>) -> Self {
        Self {
            version,
            bundle_sha256: bundle.sha256(),
            bundle,
            proposal_id,
            emergency_removal: None,
        }
    }

    /// Whether the stored hash is the bundle's (a head read back from a store).
    pub fn is_consistent(&self) -> bool {
        self.bundle.sha256() == self.bundle_sha256
    }
}

/// The payload of a `gate.config` proposal: everything the administrators sign.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigChange {
    /// The version this change replaces: it applies only while that one is in force.
    pub from_version: u64,
    /// The version it becomes (`from_version + 1`).
    pub to_version: u64,
    /// What changes, as lines to read ([`Bundle::diff`]).
    pub diff: Vec<String>,
    /// Set when the change only removes this administrator (and their keys): it then
    /// needs one approval fewer, and never theirs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emergency_removal: Option<ApproverName>,
    /// [`Bundle::sha256`] of `bundle`.
    pub bundle_sha256: Sha256Hex,
    /// The whole new configuration, exactly as it will be applied.
    pub bundle: Bundle,
}

impl ConfigChange {
    /// The change from `current` to `new`.
    pub fn new(current: &ConfigHead, new: Bundle) -> Self {
        Self {
            from_version: current.version,
            to_version: current.version + 1,
            diff: new.diff(&current.bundle),
            emergency_removal: emergency_removal(current, &new),
            bundle_sha256: new.sha256(),
            bundle: new,
        }
    }

    /// The payload as JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// A payload read back, with its own arithmetic checked (the rest is checked
    /// against the version in force when it applies).
    pub fn from_value(v: &Value) -> Result<Self, String> {
        let c: Self = serde_json::from_value(v.clone())
            .map_err(|e| format!("not a configuration change: {e}"))?;
        if c.to_version != c.from_version.saturating_add(1) {
            return Err("to_version must be from_version + 1".into());
        }
        if c.bundle.sha256() != c.bundle_sha256 {
            return Err("bundle_sha256 is not the bundle's hash".into());
        }
        Ok(c)
    }
}

/// The policy that governs a configuration change under `root`: its administrators,
/// its threshold, any one of them vetoes. For an emergency removal of `removed`: the
/// other administrators, a threshold one lower (at least one), and the root's
/// `emergency_cooldown` after quorum, during which any of them can revoke it.
pub fn config_policy(root: &Root, removed: Option<&ApproverName>) -> Result<Policy, PolicyError> {
    let approvers: Vec<ApproverName> = root
        .administrators()
        .iter()
        .filter(|a| Some(*a) != removed)
        .cloned()
        .collect();
    let (quorum, description) = match removed {
        None => (
            root.threshold(),
            "A change of the gate's configuration (policies, keyring, agents, root.toml)"
                .to_owned(),
        ),
        Some(r) => (
            root.threshold()
                .saturating_sub(1)
                .max(1)
                .min(approvers.len() as u32),
            format!(
                "EMERGENCY: remove administrator {r} and their keys from the gate's configuration"
            ),
        ),
    };
    let kind = Kind::parse(CONFIG_KIND).map_err(|e| PolicyError {
        file: "<root.toml>".into(),
        line: None,
        message: e.to_string(),
    })?;
    Policy::from_spec(PolicySpec {
        kind,
        description,
        quorum,
        approvers,
        vetoes: 1,
        ttl: CONFIG_TTL,
        execute_within: Seconds::new(3600),
        cooldown: removed.map(|_| root.emergency_cooldown()),
        max_payload_bytes: MAX_MAX_PAYLOAD_BYTES,
        require: vec![],
        payload_schema: None,
        executor: ExecutorConfig::Gate,
        notify: vec![],
        expose: false,
        pass_through: vec![],
        accept: vec![SignatureKind::Key, SignatureKind::Passkey],
        require_touch: false,
        require_verify: false,
    })
}

/// The administrator `new` removes from the version in force, when that is all it
/// does: one name leaves `administrators` (none joins), the threshold stays as it was
/// (lowered only as far as the administrators left require), the keyring loses
/// exactly that name's lines, and nothing else changes. Never right after another
/// emergency removal: a chain of them would let one administrator remove all others.
pub fn emergency_removal(current: &ConfigHead, new: &Bundle) -> Option<ApproverName> {
    if current.emergency_removal.is_some() {
        return None;
    }
    let old = &current.bundle;
    let (Ok(before), Ok(after)) = (Root::parse(&old.root), Root::parse(&new.root)) else {
        return None;
    };
    let mut gone = before
        .administrators()
        .iter()
        .filter(|a| !after.is_administrator(a));
    let removed = gone.next()?.clone();
    let kept: Vec<&ApproverName> = before
        .administrators()
        .iter()
        .filter(|a| **a != removed)
        .collect();
    let unchanged_otherwise = gone.next().is_none()
        && after.administrators().iter().collect::<Vec<_>>() == kept
        && after.threshold() == before.threshold().min(kept.len() as u32)
        && after.emergency_cooldown() == before.emergency_cooldown()
        && old.policies == new.policies
        && old.agents == new.agents;
    let entries = |t: &str| -> Vec<String> {
        t.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_owned)
            .collect()
    };
    let names_removed = |l: &String| l.split_whitespace().next() == Some(removed.as_str());
    let expected: Vec<String> = entries(&old.keyring)
        .into_iter()
        .filter(|l| !names_removed(l))
        .collect();
    (unchanged_otherwise && entries(&new.keyring) == expected).then_some(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const K: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIO";

    fn bundle(admins: &[&str], threshold: u32, keyring: &str) -> Bundle {
        let names: Vec<String> = admins.iter().map(|a| format!("{a:?}")).collect();
        Bundle {
            root: format!(
                "administrators = [{}]\nthreshold = {threshold}\n",
                names.join(", ")
            ),
            keyring: keyring.into(),
            agents: None,
            policies: BTreeMap::from([("x.toml".to_owned(), "kind = \"x\"\n".to_owned())]),
        }
    }

    #[test]
    fn an_emergency_removal_is_one_administrator_and_their_keys_and_nothing_else() {
        let keys = format!("alice ed25519 {K}a\nbob ed25519 {K}b\ncarol ed25519 {K}c\n");
        let old_bundle = bundle(&["alice", "bob", "carol"], 2, &keys);
        let old = ConfigHead::new(1, old_bundle.clone(), None);
        let without_bob = format!("alice ed25519 {K}a\ncarol ed25519 {K}c\n");
        let new = bundle(&["alice", "carol"], 2, &without_bob);
        let removed = |h: &ConfigHead, b: &Bundle| emergency_removal(h, b).map(|n| n.to_string());
        assert_eq!(removed(&old, &new), Some("bob".into()));
        // Keeping bob's key, adding someone, raising or lowering the threshold,
        // touching a policy: an ordinary change, under the full threshold.
        assert_eq!(removed(&old, &bundle(&["alice", "carol"], 2, &keys)), None);
        let dave = bundle(&["alice", "carol", "dave"], 2, &without_bob);
        assert_eq!(removed(&old, &dave), None);
        assert_eq!(
            removed(&old, &bundle(&["alice", "carol"], 3, &without_bob)),
            None
        );
        assert_eq!(
            removed(&old, &bundle(&["alice", "carol"], 1, &without_bob)),
            None
        );
        let mut touched = new.clone();
        touched.policies.insert("y.toml".into(), String::new());
        assert_eq!(removed(&old, &touched), None);
        let alone = bundle(&["alice"], 1, &format!("alice ed25519 {K}a\n"));
        assert_eq!(removed(&old, &alone), None, "two at once");
        assert_eq!(removed(&old, &old_bundle), None);
        // Never two in a row: alice, left with carol, cannot remove her alone next.
        let mut after_one = ConfigHead::new(2, new.clone(), None);
        after_one.emergency_removal = ApproverName::parse("bob").ok();
        assert_eq!(removed(&after_one, &alone), None);
        // After an ordinary change, a removal lowers the threshold only as far as the
        // administrators left require (2 of 2 becomes 1 of 1).
        let ordinary = ConfigHead::new(2, new.clone(), None);
        assert_eq!(removed(&ordinary, &alone), Some("carol".into()));
    }

    #[test]
    fn the_policy_is_the_roots_and_an_emergency_leaves_out_the_removed_one() {
        let root =
            Root::parse("administrators = [\"alice\", \"bob\", \"carol\"]\nthreshold = 2").unwrap();
        let p = config_policy(&root, None).unwrap();
        assert_eq!(p.kind().as_str(), CONFIG_KIND);
        assert_eq!(p.spec().quorum, 2);
        assert_eq!(p.spec().approvers.len(), 3);
        assert_eq!(p.spec().executor, ExecutorConfig::Gate);
        let bob = ApproverName::parse("bob").unwrap();
        let e = config_policy(&root, Some(&bob)).unwrap();
        assert_eq!(e.spec().quorum, 1);
        assert!(!e.is_approver(&bob));
        assert_eq!(e.spec().cooldown, Some(root.emergency_cooldown()));
        assert_eq!(p.spec().cooldown, None);
        assert_ne!(e.sha256(), p.sha256());
        // Deterministic: every instance derives the same hash from the same root.
        assert_eq!(config_policy(&root, None).unwrap().sha256(), p.sha256());
        let solo = Root::parse("administrators = [\"alice\", \"bob\"]\nthreshold = 1").unwrap();
        assert_eq!(config_policy(&solo, Some(&bob)).unwrap().spec().quorum, 1);
    }

    #[test]
    fn a_payload_must_hash_to_its_bundle_and_step_one_version() {
        let b = bundle(&["alice"], 1, &format!("alice ed25519 {K}a\n"));
        let head = ConfigHead::new(3, b.clone(), None);
        let mut next = b.clone();
        next.agents = Some("bot 00".into());
        let c = ConfigChange::new(&head, next);
        assert_eq!((c.from_version, c.to_version), (3, 4));
        assert_eq!(c.diff, vec!["added agents", "+ bot 00"]);
        assert_eq!(ConfigChange::from_value(&c.to_value()).unwrap(), c);
        let mut forged = c.to_value();
        forged["bundle"]["keyring"] = "mallory ed25519 x".into();
        assert!(ConfigChange::from_value(&forged)
            .unwrap_err()
            .contains("hash"));
        let mut skip = c.to_value();
        skip["to_version"] = 9.into();
        assert!(ConfigChange::from_value(&skip).is_err());
    }
}
