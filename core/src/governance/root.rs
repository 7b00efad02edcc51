//! `root.toml`: the administrators (names from the keyring) and how many of them must
//! approve a change of the configuration.
//!
//! ```toml
//! administrators = ["alice", "bob", "carol"]
//! threshold = 2
//! emergency_cooldown = "15m"   # optional; the default
//! ```

use crate::ids::ApproverName;
use crate::time::Seconds;
use serde::Deserialize;
use std::collections::BTreeSet;
use thiserror::Error;

/// Who administers the gate's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    administrators: Vec<ApproverName>,
    threshold: u32,
    emergency_cooldown: Seconds,
}

/// How long an emergency removal waits after its (smaller) quorum before it applies,
/// unless `root.toml` says otherwise: the other administrators' window to revoke it.
pub const DEFAULT_EMERGENCY_COOLDOWN: Seconds = Seconds::new(15 * 60);

/// Why a `root.toml` was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("root.toml: {0}")]
pub struct RootError(pub String);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RootFile {
    administrators: Vec<ApproverName>,
    threshold: u32,
    #[serde(default)]
    emergency_cooldown: Option<Seconds>,
}

impl Root {
    /// Parses and checks `root.toml`'s text.
    pub fn parse(text: &str) -> Result<Self, RootError> {
        let file: RootFile = toml::from_str(text).map_err(|e| {
            RootError(format!(
                "{}; it holds administrators = [\"name\", ...] (keyring names) and threshold = N",
                e.message()
            ))
        })?;
        let mut root = Self::new(file.administrators, file.threshold)?;
        if let Some(c) = file.emergency_cooldown {
            // Shorter than the hour a configuration change stays executable.
            if c.get() == 0 || c.get() >= 3600 {
                return Err(RootError(format!(
                    "emergency_cooldown = {c} must be between 1s and 59m"
                )));
            }
            root.emergency_cooldown = c;
        }
        Ok(root)
    }

    /// A root from its parts, checked: at least one administrator, each once, and
    /// 1 ≤ threshold ≤ their number.
    pub fn new(administrators: Vec<ApproverName>, threshold: u32) -> Result<Self, RootError> {
        if administrators.is_empty() {
            return Err(RootError(
                "administrators is empty: name at least one approver from the keyring".into(),
            ));
        }
        let mut seen = BTreeSet::new();
        for a in &administrators {
            if !seen.insert(a) {
                return Err(RootError(format!(
                    "administrator {a:?} is listed twice: list each once"
                )));
            }
        }
        let n = administrators.len() as u32;
        if threshold < 1 || threshold > n {
            return Err(RootError(format!(
                "threshold = {threshold} cannot be met with {n} administrators: set 1 ≤ threshold ≤ {n}"
            )));
        }
        Ok(Self {
            administrators,
            threshold,
            emergency_cooldown: DEFAULT_EMERGENCY_COOLDOWN,
        })
    }

    /// The administrators, in file order.
    pub fn administrators(&self) -> &[ApproverName] {
        &self.administrators
    }

    /// How many administrators must approve a change.
    pub fn threshold(&self) -> u32 {
        self.threshold
    }

    /// How long an emergency removal waits after quorum, for the others to revoke it.
    pub fn emergency_cooldown(&self) -> Seconds {
        self.emergency_cooldown
    }

    /// Whether `name` is an administrator.
    pub fn is_administrator(&self, name: &ApproverName) -> bool {
        self.administrators.contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_names_its_administrators_and_a_reachable_threshold() {
        let r = Root::parse("administrators = [\"alice\", \"bob\"]\nthreshold = 2\n").unwrap();
        assert_eq!(r.threshold(), 2);
        assert_eq!(r.administrators().len(), 2);
        let err = |t: &str| Root::parse(t).unwrap_err().to_string();
        assert!(err("administrators = []\nthreshold = 1").contains("is empty"));
        assert!(err("administrators = [\"a\", \"a\"]\nthreshold = 1").contains("twice"));
        assert!(err("administrators = [\"a\"]\nthreshold = 2").contains("1 ≤ threshold ≤ 1"));
        assert!(err("administrators = [\"a\"]\nthreshold = 0").contains("threshold = 0"));
        assert!(err("administrators = [\"a\"]").contains("threshold"));
        assert!(err("administrators = [\"a\"]\nthreshold = 1\nquorum = 1").contains("quorum"));
        assert!(
            err("administrators = [\"a\"]\nthreshold = 1\nemergency_cooldown = \"1h\"")
                .contains("59m")
        );
        assert_eq!(r.emergency_cooldown(), DEFAULT_EMERGENCY_COOLDOWN);
    }
}
