//! Loading policies, the keyring and the agents file from disk.
//!
//! The configuration in force is one immutable snapshot ([`Config`]) swapped as a
//! whole on reload, so a request sees either the old rules or the new ones, never a
//! mix. A broken file on reload keeps the old snapshot (the caller logs why), with
//! one exception that fails closed: a readable keyring always takes effect, over the
//! policies in force, so a removed key stops counting even when another file is broken.
//!
//! A policy that names an approver the keyring lacks does not refuse the snapshot:
//! its kind is disabled (see [`approval_core::DisabledKind`]), loudly, until the
//! policy or the keyring is fixed. Refusing the snapshot instead would keep the old
//! keyring, and so a removed (compromised) key, in force.

use crate::agents::Agents;
use approval_core::policy::PolicyError;
use approval_core::{Keyring, PolicySet};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thiserror::Error;

/// Where the configuration comes from.
#[derive(Debug, Clone)]
pub struct ConfigSource {
    /// Folder of `*.toml` policies.
    pub policies: PathBuf,
    /// Keyring file.
    pub keys: PathBuf,
    /// Optional agents file.
    pub agents: Option<PathBuf>,
    /// Policies given in memory instead of a folder (the demo's embedded examples).
    pub embedded_policies: Option<Vec<(String, String)>>,
}

/// One consistent snapshot of the rules.
#[derive(Debug, Clone)]
pub struct Config {
    /// Policies by kind.
    pub policies: PolicySet,
    /// Approvers' keys.
    pub keyring: Keyring,
    /// Agent tokens; `None` means loopback clients only, as `local`.
    pub agents: Option<Agents>,
    /// What downstream MCP servers say of the tools `tools/list` shows for them
    /// (issue #33: exposed kinds and pass-through tools), by tool name. Filled by the
    /// service's tool step ([`crate::service::tools`]), never by reading files.
    pub downstream_tools: Arc<BTreeMap<String, rmcp::model::Tool>>,
}

/// Why the configuration could not be loaded.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// A file could not be read.
    #[error("{path}: {err}")]
    Io {
        /// Which file.
        path: String,
        /// The error.
        err: std::io::Error,
    },
    /// The keyring is invalid.
    #[error("{}", keyring_message(path, err))]
    Keyring {
        /// Which file.
        path: String,
        /// The error (starts with the line).
        err: approval_core::KeyringError,
    },
    /// One or more policies are invalid.
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
    Policies(Vec<PolicyError>),
    /// No policies at all: nothing could ever be approved.
    #[error("{0}: no *.toml policies found: add one file per action kind (see policies/ in the repository)")]
    NoPolicies(String),
    /// The agents file is invalid.
    #[error("{path}:{line}: {why}")]
    Agents {
        /// Which file.
        path: String,
        /// Line.
        line: usize,
        /// Why.
        why: String,
    },
}

/// `path:LINE: message`, the form editors and `check` users expect.
fn keyring_message(path: &str, err: &approval_core::KeyringError) -> String {
    let text = err.to_string();
    match text.strip_prefix("line ").and_then(|r| r.split_once(": ")) {
        Some((line, rest)) => format!("{path}:{line}: {rest}"),
        None => format!("{path}: {text}"),
    }
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|err| ConfigError::Io {
        path: path.display().to_string(),
        err,
    })
}

/// Reads every `*.toml` in a folder, sorted by name.
pub fn read_policy_dir(dir: &Path) -> Result<Vec<(String, String)>, ConfigError> {
    let io = |err| ConfigError::Io {
        path: dir.display().to_string(),
        err,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.extension().is_some_and(|e| e == "toml") && path.is_file() {
            files.push((path.display().to_string(), read(&path)?));
        }
    }
    files.sort();
    Ok(files)
}

impl ConfigSource {
    /// Loads and validates everything; any error refuses the whole snapshot.
    pub fn load(&self) -> Result<Config, ConfigError> {
        let keys_text = read(&self.keys)?;
        let keyring =
            approval_core::Keyring::parse(&keys_text).map_err(|err| ConfigError::Keyring {
                path: self.keys.display().to_string(),
                err,
            })?;
        let files = match &self.embedded_policies {
            Some(f) => f.clone(),
            None => read_policy_dir(&self.policies)?,
        };
        if files.is_empty() {
            return Err(ConfigError::NoPolicies(self.policies.display().to_string()));
        }
        let policies =
            PolicySet::load_disabling(&files, &keyring).map_err(ConfigError::Policies)?;
        let agents = match &self.agents {
            Some(p) => {
                Some(
                    Agents::parse(&read(p)?).map_err(|(line, why)| ConfigError::Agents {
                        path: p.display().to_string(),
                        line,
                        why,
                    })?,
                )
            }
            None => None,
        };
        Ok(Config {
            policies,
            keyring,
            agents,
            downstream_tools: Default::default(),
        })
    }

    /// Only the keyring, for a reload whose other files are refused: see
    /// [`Config::with_keyring`].
    pub fn load_keyring(&self) -> Result<Keyring, ConfigError> {
        let keys_text = read(&self.keys)?;
        approval_core::Keyring::parse(&keys_text).map_err(|err| ConfigError::Keyring {
            path: self.keys.display().to_string(),
            err,
        })
    }
}

impl Config {
    /// This snapshot with another keyring: the same policies re-checked against it (a
    /// kind whose approver is gone is disabled) and the same agents.
    pub fn with_keyring(&self, keyring: Keyring) -> Config {
        Config {
            policies: self.policies.rechecked(&keyring),
            keyring,
            agents: self.agents.clone(),
            downstream_tools: self.downstream_tools.clone(),
        }
    }

    /// One line per disabled kind, for logs and `check`.
    pub fn disabled_reasons(&self) -> Vec<String> {
        self.policies.disabled().map(|d| d.reason()).collect()
    }
}

impl ConfigSource {
    /// A load error with what to do next when a file or folder is missing
    /// (`check` and `serve` with their default paths, on a fresh checkout).
    pub fn explain(&self, e: &ConfigError) -> String {
        let ConfigError::Io { path, err } = e else {
            return e.to_string();
        };
        if err.kind() != std::io::ErrorKind::NotFound {
            return e.to_string();
        }
        let hint = if *path == self.keys.display().to_string() {
            format!(
                "no keyring at {path}: pass --keys FILE, a file of `<name> ed25519 <base64 key>` lines (keys.example in the repository shows the format; each approver prints their line with `signer-cli keygen --name NAME`; `approval-server demo` writes demo-keys/keyring)"
            )
        } else if *path == self.policies.display().to_string() {
            format!(
                "no policies folder at {path}: pass --policies DIR, a folder of <kind>.toml files (policies/ in the repository is an example)"
            )
        } else if self
            .agents
            .as_ref()
            .is_some_and(|a| *path == a.display().to_string())
        {
            format!(
                "no agents file at {path}: make one with `approval-server agent add NAME --agents {path}`"
            )
        } else {
            return e.to_string();
        };
        hint
    }
}
