//! `approval-server audit verify|export`: the audit log read from a stopped server's
//! sled store, from PostgreSQL, or from a running server (`audit_remote`); the hash
//! chain is checked here by `crate::audit::verify_chain` whichever it came from.

use super::audit_remote;
use crate::audit::verify_chain;
use crate::run::StoreSpec;
use crate::store::postgres::redact;
use crate::store::{AuditLog, PgStore, SledStore, Store};
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;

/// Where the audit log is read from.
#[derive(clap::Args, Clone)]
pub struct AuditFrom {
    /// Store folder (read directly: the server must be stopped).
    #[arg(long, default_value = "./data", conflicts_with = "server")]
    data: PathBuf,
    /// A PostgreSQL store, read directly (instances may keep running):
    /// postgres://USER[:PASSWORD]@HOST:PORT/DATABASE, or sled:DIR like --data.
    #[arg(long, value_name = "STORE", conflicts_with = "server")]
    store: Option<StoreSpec>,
    /// A running server's approver API, e.g. http://127.0.0.1:4800 (signed read of
    /// /v1/audit; needs --key). The chain is checked here, as offline.
    #[arg(long, value_name = "URL", requires = "key")]
    server: Option<String>,
    /// Secret key file of an approver in the server's keyring (signer-cli keygen).
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
}

/// The `audit` subcommands.
#[derive(clap::Subcommand)]
pub enum AuditAction {
    /// Check the hash chain: any edit, reorder or gap fails.
    Verify {
        #[command(flatten)]
        from: AuditFrom,
    },
    /// Write every entry as one JSON line on stdout.
    Export {
        #[command(flatten)]
        from: AuditFrom,
    },
}

/// `audit verify` or `audit export`.
pub async fn run(action: AuditAction) -> anyhow::Result<ExitCode> {
    let from = match &action {
        AuditAction::Verify { from } | AuditAction::Export { from } => from.clone(),
    };
    let (entries, head) = read(from).await?;
    match action {
        AuditAction::Verify { .. } => match verify_chain(entries, head) {
            Ok(n) => {
                println!(
                    "ok: {n} audit entries, chain intact{}",
                    head.map(|(_, h)| format!(", head {h}")).unwrap_or_default()
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("audit log broken: {e}");
                Ok(ExitCode::FAILURE)
            }
        },
        AuditAction::Export { .. } => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            for e in entries {
                writeln!(out, "{}", serde_json::to_string(&e)?)?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The entries and the head, from wherever `from` says.
async fn read(from: AuditFrom) -> anyhow::Result<AuditLog> {
    Ok(match (&from.server, &from.key, from.store.clone()) {
        (Some(url), Some(key), _) => audit_remote::fetch(url, key).await?,
        (_, _, Some(StoreSpec::Postgres(url))) => {
            let shown = redact(&url);
            tokio::task::spawn_blocking(move || PgStore::open(&url).and_then(|s| s.audit()))
                .await?
                .with_context(|| format!("cannot read the audit log from {shown}"))?
        }
        (_, _, spec) => {
            let data = match spec {
                Some(StoreSpec::Sled(dir)) => dir,
                _ => from.data,
            };
            let store = SledStore::open(&data.join("store")).with_context(|| {
                format!(
                    "cannot open the store in {} (a running server locks it: stop it, or read the running server's log with --server URL --key FILE)",
                    data.display()
                )
            })?;
            store.audit()?
        }
    })
}
