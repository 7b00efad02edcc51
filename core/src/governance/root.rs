//! `root.toml`: the administrators (names from the keyring) and how many of them must
//! approve a change of the configuration.
//!
//! ```toml
//! administrators = ["alice", "bob", "carol"]
//! threshold = 2
//! ```

use crate::ids::ApproverName;
use serde::Deserialize;
use std::collections::BTreeSet;
use thiserror::Error;

/// Who administers the gate's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    administrators: Vec<ApproverName>,
    threshold: u32,
}

/// Why a `root.toml` was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("root.toml: {0}")]
pub struct RootError(pub String);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RootFile {
    administrators: Vec<ApproverName>,
    threshold: u32,
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
        Self::new(file.administrators, file.threshold)
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
    }
}
