//! Every policy in force, by kind, and the kinds disabled because the keyring lacks
//! an approver or the downstream tool's schema is missing. Imports `model` and
//! `toml_lines`.

use super::model::{Policy, PolicyError};
use super::toml_lines::line_of_key;
use crate::ids::{ApproverName, Kind};
use crate::keyring::Keyring;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A kind whose policy names approvers the keyring does not hold: it cannot be
/// prepared until its policy or the keyring is fixed.
///
/// Removing a compromised key must take effect at once, so a keyring that lacks one
/// of a policy's approvers does not keep the old keyring in force (failing open, the
/// removed key still approving); it disables that one kind instead (failing closed).
/// The policy itself is kept private: a disabled kind has no [`Policy`] anyone can
/// prepare or count under, so the state "disabled but preparable" cannot be built.
#[derive(Debug, Clone)]
pub struct DisabledKind {
    policy: Arc<Policy>,
    file: String,
    line: Option<usize>,
    missing: Vec<ApproverName>,
    /// Set when the kind waits for its payload schema from a downstream MCP tool
    /// (`payload_schema_from_tool = true`) that could not be fetched: why.
    downstream: Option<String>,
}

impl DisabledKind {
    /// The kind.
    pub fn kind(&self) -> &Kind {
        self.policy.kind()
    }

    /// The policy file that names the missing approvers.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Whether its policy names notification channels (the server keeps its outbox
    /// on for them, so the reload that enables the kind loses no notice).
    pub fn notifies(&self) -> bool {
        !self.policy.spec().notify.is_empty()
    }

    /// The approvers the policy names that are not in the keyring, in policy order.
    pub fn missing(&self) -> &[ApproverName] {
        &self.missing
    }

    /// Why the downstream tool's schema could not be had, when that is what disables
    /// the kind.
    pub fn downstream(&self) -> Option<&str> {
        self.downstream.as_deref()
    }

    /// Why the kind is disabled and how to enable it again, in one sentence.
    pub fn reason(&self) -> String {
        if let (Some(why), true) = (&self.downstream, self.missing.is_empty()) {
            return format!(
                "kind {} is disabled: its policy takes the payload schema from the downstream tool {:?} (payload_schema_from_tool = true), which could not be read: {why}; \
                 make the downstream server reachable (or set payload_schema yourself in {}), then reload",
                self.kind(),
                self.policy.spec().executor.mcp_tool().unwrap_or(""),
                self.file
            );
        }
        let names = self
            .missing
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "kind {} is disabled: its policy names approver(s) {names} who are not in the keyring; \
             remove them from approvers (and require groups) in {} or add their key (or passkey: `approval-server enroll NAME`) back, then reload",
            self.kind(),
            self.file
        )
    }

    /// The same as a policy error with the file and the `approvers` line, for a strict
    /// check (`approval-server check`) that must fail while any kind is disabled.
    pub fn to_error(&self) -> PolicyError {
        if self.missing.is_empty() {
            return PolicyError {
                file: self.file.clone(),
                line: None,
                message: self.reason(),
            };
        }
        let names = self
            .missing
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ");
        PolicyError {
            file: self.file.clone(),
            line: self.line,
            message: format!(
                "approver {names} is not in the keyring: add their line from `signer-cli keygen` or remove them (until then kind {} is disabled)",
                self.kind()
            ),
        }
    }
}

/// Where a policy was loaded from, kept so a later keyring can disable it by name.
#[derive(Debug, Clone)]
struct Source {
    file: String,
    approvers_line: Option<usize>,
}

/// Every policy in force, by kind, and the kinds disabled because their policy names
/// an approver the keyring lacks ([`DisabledKind`]).
#[derive(Debug, Clone, Default)]
pub struct PolicySet {
    by_kind: BTreeMap<Kind, Arc<Policy>>,
    disabled: BTreeMap<Kind, DisabledKind>,
    sources: BTreeMap<Kind, Source>,
}

/// What a kind is under a [`PolicySet`].
#[derive(Debug, Clone, Copy)]
pub enum KindState<'a> {
    /// Its policy is in force.
    Enabled(&'a Arc<Policy>),
    /// It has a policy, but the keyring lacks some of its approvers.
    Disabled(&'a DisabledKind),
    /// No policy names it.
    Unknown,
}

impl PolicySet {
    /// Loads policies from `(file name, text)` pairs and checks them against the
    /// keyring. Every error is returned, so `approval-server check` can list them all.
    /// Strict: a policy naming an approver the keyring lacks is an error here (see
    /// [`PolicySet::load_disabling`] for what the server does instead).
    pub fn load(files: &[(String, String)], keyring: &Keyring) -> Result<Self, Vec<PolicyError>> {
        let (set, errors) = Self::load_inner(files, keyring);
        if errors.is_empty() {
            Ok(set)
        } else {
            Err(errors.into_iter().map(|(e, _)| e).collect())
        }
    }

    /// Loads what it can: a policy that does not parse or validate, or a second file
    /// for one kind, is still an error (the whole load is refused, as with
    /// [`PolicySet::load`]), but a policy whose approvers are not all in the keyring
    /// loads as a [`DisabledKind`] instead of failing the load. This is what the server
    /// runs at start and on reload, so that a key removed from the keyring stops
    /// counting at once even while a policy still names it.
    pub fn load_disabling(
        files: &[(String, String)],
        keyring: &Keyring,
    ) -> Result<Self, Vec<PolicyError>> {
        let (set, errors) = Self::load_inner(files, keyring);
        let fatal: Vec<PolicyError> = errors
            .into_iter()
            .filter(|(_, fatal)| *fatal)
            .map(|(e, _)| e)
            .collect();
        if fatal.is_empty() {
            Ok(set)
        } else {
            Err(fatal)
        }
    }

    /// The set, and every error in file order, each marked fatal (the file is refused)
    /// or not (its kind is only disabled for lack of keys).
    fn load_inner(
        files: &[(String, String)],
        keyring: &Keyring,
    ) -> (Self, Vec<(PolicyError, bool)>) {
        let mut all: BTreeMap<Kind, (Arc<Policy>, Source)> = BTreeMap::new();
        let mut errors = Vec::new();
        for (file, src) in files {
            let p = match Policy::parse_toml(file, src) {
                Ok(p) => p,
                Err(e) => {
                    errors.push((e, true));
                    continue;
                }
            };
            if let Err(e) = p.check_keyring(keyring, file, Some(src)) {
                errors.push((e, false));
            }
            if let Some((_, first)) = all.get(p.kind()) {
                errors.push((
                    PolicyError {
                        file: file.clone(),
                        line: line_of_key(src, "kind"),
                        message: format!(
                            "kind {:?} is already defined in {}: one file per kind",
                            p.kind().as_str(),
                            first.file
                        ),
                    },
                    true,
                ));
                continue;
            }
            let source = Source {
                file: file.clone(),
                approvers_line: line_of_key(src, "approvers"),
            };
            all.insert(p.kind().clone(), (Arc::new(p), source));
        }
        errors.extend(
            tool_name_clashes(&all, files)
                .into_iter()
                .map(|e| (e, true)),
        );
        (Self::partition(all, keyring), errors)
    }

    /// The policies that list the kind as a tool of its own (`expose = true`).
    pub fn exposed(&self) -> impl Iterator<Item = &Arc<Policy>> {
        self.by_kind.values().filter(|p| p.spec().expose)
    }

    /// The policy whose `pass_through` lists `tool`, if any (at most one: a clash
    /// refuses the load).
    pub fn passing_through(&self, tool: &str) -> Option<&Arc<Policy>> {
        self.by_kind
            .values()
            .find(|p| p.spec().pass_through.iter().any(|t| t == tool))
    }

    /// Splits policies into enabled and disabled under `keyring`.
    fn partition(all: BTreeMap<Kind, (Arc<Policy>, Source)>, keyring: &Keyring) -> Self {
        let mut set = Self::default();
        for (kind, (policy, source)) in all {
            let missing: Vec<ApproverName> = policy
                .spec()
                .approvers
                .iter()
                .filter(|a| !keyring.contains(a))
                .cloned()
                .collect();
            if missing.is_empty() && policy.needs_tool_schema() {
                // Never enabled without the schema it was written to enforce.
                set.disabled.insert(
                    kind.clone(),
                    DisabledKind {
                        policy,
                        file: source.file.clone(),
                        line: source.approvers_line,
                        missing,
                        downstream: Some("its inputSchema has not been fetched yet".into()),
                    },
                );
            } else if missing.is_empty() {
                set.by_kind.insert(kind.clone(), policy);
            } else {
                set.disabled.insert(
                    kind.clone(),
                    DisabledKind {
                        policy,
                        file: source.file.clone(),
                        line: source.approvers_line,
                        missing,
                        downstream: None,
                    },
                );
            }
            set.sources.insert(kind, source);
        }
        set
    }

    /// The same policies checked against another keyring: kinds whose approvers are
    /// now missing become disabled, disabled kinds whose approvers are all back become
    /// enabled. For a reload whose keyring is readable but whose policies are not: the
    /// new keyring still takes effect, over the policies already in force.
    pub fn rechecked(&self, keyring: &Keyring) -> Self {
        let mut all = BTreeMap::new();
        for (kind, p) in &self.by_kind {
            if let Some(src) = self.sources.get(kind) {
                all.insert(kind.clone(), (p.clone(), src.clone()));
            }
        }
        for (kind, d) in &self.disabled {
            if let Some(src) = self.sources.get(kind) {
                all.insert(kind.clone(), (d.policy.clone(), src.clone()));
            }
        }
        Self::partition(all, keyring)
    }

    /// The policies that wait for their payload schema from a downstream MCP tool
    /// (`payload_schema_from_tool = true`) and have all their approvers: the server
    /// fetches each tool's `inputSchema` and passes the answers to
    /// [`PolicySet::with_tool_schemas`].
    pub fn awaiting_tool_schema(&self) -> impl Iterator<Item = &Policy> {
        self.disabled
            .values()
            .filter(|d| d.missing.is_empty() && d.policy.needs_tool_schema())
            .map(|d| d.policy.as_ref())
    }

    /// This set with the downstream tools' input schemas: a kind whose schema arrived
    /// (and compiles) is enabled under a policy whose `payload_schema` is that schema;
    /// one whose fetch failed stays disabled with the reason. Kinds not named are
    /// unchanged.
    pub fn with_tool_schemas(&self, fetched: BTreeMap<Kind, Result<Value, String>>) -> Self {
        let mut set = self.clone();
        for (kind, answer) in fetched {
            let Some(d) = set.disabled.get_mut(&kind) else {
                continue;
            };
            if !d.missing.is_empty() || !d.policy.needs_tool_schema() {
                continue;
            }
            match answer.and_then(|schema| {
                d.policy.with_tool_schema(schema).map_err(|e| {
                    format!(
                        "the tool's inputSchema is not a usable JSON Schema: {}",
                        e.message
                    )
                })
            }) {
                Ok(p) => {
                    set.disabled.remove(&kind);
                    set.by_kind.insert(kind, Arc::new(p));
                }
                Err(why) => d.downstream = Some(why),
            }
        }
        set
    }

    /// The policy for a kind, if it is enabled. A disabled kind has none.
    pub fn get(&self, kind: &Kind) -> Option<&Arc<Policy>> {
        self.by_kind.get(kind)
    }

    /// Whether a kind is enabled, disabled (and why) or unknown.
    pub fn state(&self, kind: &Kind) -> KindState<'_> {
        match (self.by_kind.get(kind), self.disabled.get(kind)) {
            (Some(p), _) => KindState::Enabled(p),
            (None, Some(d)) => KindState::Disabled(d),
            (None, None) => KindState::Unknown,
        }
    }

    /// All enabled policies, sorted by kind.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Policy>> {
        self.by_kind.values()
    }

    /// The disabled kinds, sorted by kind.
    pub fn disabled(&self) -> impl Iterator<Item = &DisabledKind> {
        self.disabled.values()
    }

    /// Number of enabled kinds.
    pub fn len(&self) -> usize {
        self.by_kind.len()
    }

    /// Whether no kind is enabled.
    pub fn is_empty(&self) -> bool {
        self.by_kind.is_empty()
    }
}

/// Every tool name that two policies would both put in `tools/list`: a
/// pass-through tool listed twice, or named like an exposed kind. One name must mean
/// one thing, so such a load is refused; the error is on the second file.
fn tool_name_clashes(
    all: &BTreeMap<Kind, (Arc<Policy>, Source)>,
    files: &[(String, String)],
) -> Vec<PolicyError> {
    let mut owner: BTreeMap<&str, &str> = all
        .values()
        .filter(|(p, _)| p.spec().expose)
        .map(|(p, s)| (p.kind().as_str(), s.file.as_str()))
        .collect();
    let mut errors = Vec::new();
    for (p, s) in all.values() {
        for t in &p.spec().pass_through {
            if let Some(first) = owner.insert(t, &s.file) {
                let src = files
                    .iter()
                    .find(|(f, _)| f == &s.file)
                    .map(|(_, src)| src.as_str());
                errors.push(PolicyError {
                    file: s.file.clone(),
                    line: src.and_then(|src| line_of_key(src, "pass_through")),
                    message: format!(
                        "pass_through lists {t:?}, which {first} already puts in tools/list (as an exposed kind or a pass-through tool): one tool name must mean one thing; remove it from one of them"
                    ),
                });
            }
        }
    }
    errors
}
