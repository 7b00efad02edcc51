//! `approval-server check`: loads the policies, the keyring and the agents file as
//! the server would, and fails with file:line on any error, and while any kind is
//! disabled (CI and operators must notice before the server starts that way).

use super::shared::Rules;
use crate::config::ConfigSource;
use std::path::PathBuf;
use std::process::ExitCode;

/// The flags of `check`.
#[derive(clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    rules: Rules,
    /// Agents file to validate too.
    #[arg(long)]
    agents: Option<PathBuf>,
}

/// `check`: "ok" and the kinds on stdout, or every error on stderr and a failure.
pub async fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let CheckArgs { rules, agents } = args;
    let source = ConfigSource {
        policies: rules.policies.clone(),
        keys: rules.keys.clone(),
        root: rules.root.clone(),
        agents,
        embedded_policies: None,
    };
    let c = match crate::service::load_config(&source).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}", source.explain(&e));
            return Ok(ExitCode::FAILURE);
        }
    };
    // With --root, root.toml and the files as one configuration version (issue #35).
    match source.read_bundle() {
        Ok(None) => {}
        Ok(Some(bundle)) => {
            let head = approval_core::governance::ConfigHead::new(1, bundle, None);
            if let Err(e) = crate::config::load_governed(head) {
                eprintln!("{e}");
                return Ok(ExitCode::FAILURE);
            }
        }
        Err(e) => {
            eprintln!("{}", source.explain(&e));
            return Ok(ExitCode::FAILURE);
        }
    }
    let kinds: Vec<String> = c
        .policies
        .iter()
        .map(|p| {
            format!(
                "{} ({} of {})",
                p.kind(),
                p.spec().quorum,
                p.spec().approvers.len()
            )
        })
        .collect();
    let disabled: Vec<_> = c.policies.disabled().collect();
    if !disabled.is_empty() {
        // The server would start with these kinds disabled; CI and
        // operators must notice, so this is a failure.
        for d in &disabled {
            eprintln!("{}", d.to_error());
            eprintln!("disabled: {}", d.reason());
        }
        eprintln!(
            "{} kind(s) disabled: {}; {} enabled: {}",
            disabled.len(),
            disabled
                .iter()
                .map(|d| d.kind().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            kinds.len(),
            kinds.join(", ")
        );
        return Ok(ExitCode::FAILURE);
    }
    println!(
        "ok: {} approver(s) in {}; {} polic(ies) in {}: {}",
        c.keyring.len(),
        rules.keys.display(),
        kinds.len(),
        rules.policies.display(),
        kinds.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}
