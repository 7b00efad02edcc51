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
use approval_core::governance::{config_policy, Bundle, ConfigHead, Root};
use approval_core::policy::PolicyError;
use approval_core::{Keyring, Policy, PolicySet};
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
    /// `root.toml` (`--root`): once given, the configuration changes only through
    /// `gate.config` proposals (issue #35; `service/governance.rs`).
    pub root: Option<PathBuf>,
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
    /// Set once the configuration is under quorum (issue #35): the version in force,
    /// its root, and the policy configuration changes are approved under.
    pub governed: Option<Arc<Governed>>,
}

/// The configuration version in force under quorum.
#[derive(Debug)]
pub struct Governed {
    /// The version, its bundle and the proposal that made it.
    pub head: ConfigHead,
    /// Its `root.toml`.
    pub root: Root,
    /// The `gate.config` policy derived from `root` (an emergency removal's is
    /// derived per proposal: [`approval_core::governance::config_policy`]).
    pub policy: Arc<Policy>,
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
    /// The configuration under quorum is refused (issue #35).
    #[error("{0}")]
    Governance(String),
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

/// Replaces `path` with `text`: written to a file beside it, synced, then renamed
/// over it, so a reader sees the old file or the new one, never half of one.
fn replace_file(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".approval-tmp");
    let tmp = PathBuf::from(tmp);
    // Never through a link planted at the temporary name: removed, then made anew.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
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

/// Every `*.toml` in a folder by file name (`deploy.toml`), as a bundle holds them.
pub fn read_policies_by_name(dir: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    Ok(read_policy_dir(dir)?
        .into_iter()
        .map(|(path, text)| {
            let name = Path::new(&path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or(path);
            (name, text)
        })
        .collect())
}

impl ConfigSource {
    /// Loads and validates everything; any error refuses the whole snapshot.
    pub fn load(&self) -> Result<Config, ConfigError> {
        let keys_text = read(&self.keys)?;
        let files = match &self.embedded_policies {
            Some(f) => f.clone(),
            None => read_policy_dir(&self.policies)?,
        };
        let agents = match &self.agents {
            Some(p) => Some((p.display().to_string(), read(p)?)),
            None => None,
        };
        let texts = Texts {
            keys: (self.keys.display().to_string(), keys_text),
            policies_dir: self.policies.display().to_string(),
            policies: files,
            agents,
        };
        texts.load()
    }

    /// The files as one [`Bundle`] (issue #35): `root.toml` (`--root`), the keyring,
    /// the agents file and each policy by file name. `None` without `--root`.
    pub fn read_bundle(&self) -> Result<Option<Bundle>, ConfigError> {
        let Some(root) = &self.root else {
            return Ok(None);
        };
        let policies = read_policies_by_name(&self.policies)?;
        Ok(Some(Bundle {
            root: read(root)?,
            keyring: read(&self.keys)?,
            agents: self.agents.as_deref().map(read).transpose()?,
            policies,
        }))
    }

    /// Writes the configuration in force to the files this instance reads (issue
    /// #35), so that what an operator opens is what the gate obeys: each file
    /// replaced whole (written beside it, then renamed), and policy files the bundle
    /// no longer has removed. Only with `--root`: without it the files are not this
    /// instance's to rewrite.
    pub fn write_bundle(&self, bundle: &Bundle) -> std::io::Result<()> {
        let Some(root) = &self.root else {
            return Ok(());
        };
        if self.read_bundle().ok().flatten().as_ref() == Some(bundle) {
            return Ok(());
        }
        replace_file(root, &bundle.root)?;
        replace_file(&self.keys, &bundle.keyring)?;
        if let (Some(path), Some(text)) = (&self.agents, &bundle.agents) {
            replace_file(path, text)?;
        }
        std::fs::create_dir_all(&self.policies)?;
        for (name, text) in &bundle.policies {
            replace_file(&self.policies.join(name), text)?;
        }
        for entry in std::fs::read_dir(&self.policies)? {
            let path = entry?.path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if path.extension().is_some_and(|e| e == "toml")
                && name.is_some_and(|n| !bundle.policies.contains_key(&n))
            {
                std::fs::remove_file(&path)?;
            }
        }
        Ok(())
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

/// The configuration's texts, each with the name errors give it.
struct Texts {
    keys: (String, String),
    policies_dir: String,
    policies: Vec<(String, String)>,
    agents: Option<(String, String)>,
}

impl Texts {
    fn load(self) -> Result<Config, ConfigError> {
        let (keys_path, keys_text) = self.keys;
        let keyring =
            approval_core::Keyring::parse(&keys_text).map_err(|err| ConfigError::Keyring {
                path: keys_path,
                err,
            })?;
        if self.policies.is_empty() {
            return Err(ConfigError::NoPolicies(self.policies_dir));
        }
        let policies =
            PolicySet::load_disabling(&self.policies, &keyring).map_err(ConfigError::Policies)?;
        let agents = match self.agents {
            Some((path, text)) => Some(
                Agents::parse(&text).map_err(|(line, why)| ConfigError::Agents {
                    path,
                    line,
                    why,
                })?,
            ),
            None => None,
        };
        Ok(Config {
            policies,
            keyring,
            agents,
            downstream_tools: Default::default(),
            governed: None,
        })
    }
}

/// The configuration of version `head` (issue #35): its bundle checked and loaded
/// as files would be, with the `gate.config` policy its root derives.
pub fn load_governed(head: ConfigHead) -> Result<Config, ConfigError> {
    let governance =
        |e: String| ConfigError::Governance(format!("configuration version {}: {e}", head.version));
    if !head.is_consistent() {
        return Err(governance(
            "the stored bundle does not hash to its bundle_sha256".into(),
        ));
    }
    let (root, _) = head.bundle.check().map_err(|e| governance(e.to_string()))?;
    let policy = config_policy(&root, None).map_err(|e| governance(e.to_string()))?;
    let b = &head.bundle;
    let texts = Texts {
        keys: ("keyring".into(), b.keyring.clone()),
        policies_dir: "policies".into(),
        policies: b
            .policies
            .iter()
            .map(|(name, text)| (format!("policies/{name}"), text.clone()))
            .collect(),
        agents: b.agents.clone().map(|a| ("agents".into(), a)),
    };
    let mut config = texts.load()?;
    config.governed = Some(Arc::new(Governed {
        head,
        root,
        policy: Arc::new(policy),
    }));
    Ok(config)
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
            governed: self.governed.clone(),
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
