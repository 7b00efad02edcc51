//! The configuration as the files an operator edits, carried whole: `root.toml`, the
//! keyring, the agents file (if any) and each policy file by name. Its hash
//! ([`Bundle::sha256`], over the canonical JSON) is what a version names, and
//! [`Bundle::diff`] is what administrators read before they sign a change.

use super::root::{Root, RootError};
use crate::ids::Sha256Hex;
use crate::keyring::{Keyring, KeyringError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;

/// The largest configuration carried, in bytes of text (policies, keyring, agents
/// and root together): a configuration change is a proposal's payload.
pub const MAX_BUNDLE_BYTES: usize = 2 * 1024 * 1024;

/// The most lines of one file the diff compares line by line; a longer file is shown
/// as removed and added whole.
const MAX_DIFF_LINES: usize = 4000;

/// The configuration's files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// `root.toml`'s text.
    pub root: String,
    /// The keyring's text.
    pub keyring: String,
    /// The agents file's text, when the gate has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<String>,
    /// Each policy file's text, by file name (`deploy.prod.toml`).
    pub policies: BTreeMap<String, String>,
}

/// Why a bundle was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BundleError {
    /// `root.toml` is invalid.
    #[error(transparent)]
    Root(#[from] RootError),
    /// The keyring is invalid.
    #[error("keyring: {0}")]
    Keyring(#[from] KeyringError),
    /// An administrator has no key.
    #[error("root.toml: administrator {0:?} is not in the keyring: add their key line in the same change, or remove them from administrators")]
    AdministratorWithoutKey(String),
    /// A policy file name that could escape its folder or is not a policy.
    #[error("policy file name {0:?}: use a plain file name ending in .toml (letters, digits, '.', '_', '-')")]
    PolicyName(String),
    /// No policies at all.
    #[error("no policy files: a configuration needs at least one <kind>.toml")]
    NoPolicies,
    /// Too large to carry.
    #[error("the configuration is {0} bytes, over the limit of {MAX_BUNDLE_BYTES}")]
    TooLarge(usize),
}

impl Bundle {
    /// SHA-256 of the canonical JSON (RFC 8785): what a configuration version names.
    pub fn sha256(&self) -> Sha256Hex {
        let v = serde_json::to_value(self).unwrap_or_default();
        Sha256Hex::digest(&crate::json::canonical_bytes(&v))
    }

    /// Checks what can be checked without the server: size, file names, `root.toml`,
    /// the keyring, and that every administrator has a key. The policies themselves
    /// are checked when the server loads the bundle, as any policy files are.
    pub fn check(&self) -> Result<(Root, Keyring), BundleError> {
        let size = self.root.len()
            + self.keyring.len()
            + self.agents.as_ref().map_or(0, String::len)
            + self
                .policies
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>();
        if size > MAX_BUNDLE_BYTES {
            return Err(BundleError::TooLarge(size));
        }
        if self.policies.is_empty() {
            return Err(BundleError::NoPolicies);
        }
        for name in self.policies.keys() {
            if !is_policy_file_name(name) {
                return Err(BundleError::PolicyName(name.clone()));
            }
        }
        let root = Root::parse(&self.root)?;
        let keyring = Keyring::parse(&self.keyring)?;
        if let Some(a) = root.administrators().iter().find(|a| !keyring.contains(a)) {
            return Err(BundleError::AdministratorWithoutKey(a.to_string()));
        }
        Ok((root, keyring))
    }

    /// Each file by the name the diff uses: `root.toml`, `keyring`, `agents`,
    /// `policies/<name>`.
    fn files(&self) -> BTreeMap<String, &str> {
        let mut f = BTreeMap::new();
        f.insert("root.toml".to_owned(), self.root.as_str());
        f.insert("keyring".to_owned(), self.keyring.as_str());
        if let Some(a) = &self.agents {
            f.insert("agents".to_owned(), a.as_str());
        }
        for (name, text) in &self.policies {
            f.insert(format!("policies/{name}"), text.as_str());
        }
        f
    }

    /// What changes from `old` to `self`, as lines a human reads: per file that
    /// changed, a header (`added`, `removed`, `changed`) and its lines marked `+`
    /// or `-`. Unchanged lines are left out. Empty when nothing changes.
    pub fn diff(&self, old: &Bundle) -> Vec<String> {
        let (before, after) = (old.files(), self.files());
        let mut names: Vec<&String> = before.keys().chain(after.keys()).collect();
        names.sort();
        names.dedup();
        let mut out = Vec::new();
        for name in names {
            match (before.get(name), after.get(name)) {
                (None, Some(new)) => {
                    out.push(format!("added {name}"));
                    out.extend(new.lines().map(|l| format!("+ {l}")));
                }
                (Some(old), None) => {
                    out.push(format!("removed {name}"));
                    out.extend(old.lines().map(|l| format!("- {l}")));
                }
                (Some(old), Some(new)) if old != new => {
                    out.push(format!("changed {name}"));
                    out.extend(line_diff(old, new));
                }
                _ => {}
            }
        }
        out
    }
}

/// Whether `name` is a plain policy file name: `[A-Za-z0-9._-]+.toml`, not hidden.
fn is_policy_file_name(name: &str) -> bool {
    name.len() <= 200
        && name.ends_with(".toml")
        && name.len() > ".toml".len()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The lines removed (`- `) and added (`+ `) from `old` to `new`, in order, by the
/// longest common subsequence of lines.
fn line_diff(old: &str, new: &str) -> Vec<String> {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    if a.len() > MAX_DIFF_LINES || b.len() > MAX_DIFF_LINES {
        let mut out: Vec<String> = a.iter().map(|l| format!("- {l}")).collect();
        out.extend(b.iter().map(|l| format!("+ {l}")));
        return out;
    }
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] > lcs[i + 1][j]) {
            out.push(format!("+ {}", b[j]));
            j += 1;
        } else {
            out.push(format!("- {}", a[i]));
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(keyring: &str, policies: &[(&str, &str)]) -> Bundle {
        Bundle {
            root: "administrators = [\"alice\"]\nthreshold = 1\n".into(),
            keyring: keyring.into(),
            agents: None,
            policies: policies
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn the_diff_names_each_changed_file_and_only_the_lines_that_changed() {
        let old = bundle("a\nb\nc\n", &[("x.toml", "1\n2\n"), ("gone.toml", "z\n")]);
        let new = bundle("a\nB\nc\nd\n", &[("x.toml", "1\n2\n"), ("new.toml", "n\n")]);
        assert_eq!(
            new.diff(&old),
            vec![
                "changed keyring",
                "- b",
                "+ B",
                "+ d",
                "removed policies/gone.toml",
                "- z",
                "added policies/new.toml",
                "+ n",
            ]
        );
        assert!(new.diff(&new).is_empty());
        assert_ne!(new.sha256(), old.sha256());
        assert_eq!(new.sha256(), new.clone().sha256());
    }

    #[test]
    fn policy_file_names_cannot_leave_their_folder() {
        for bad in [
            "../x.toml",
            "a/b.toml",
            ".toml",
            ".hidden.toml",
            "x.txt",
            "x y.toml",
        ] {
            let b = bundle("alice ed25519 AAAA\n", &[(bad, "")]);
            assert!(
                matches!(
                    b.check(),
                    Err(BundleError::PolicyName(_)) | Err(BundleError::Keyring(_))
                ),
                "{bad}"
            );
            assert!(!is_policy_file_name(bad), "{bad}");
        }
        assert!(is_policy_file_name("deploy.prod.toml"));
    }
}
