//! `approval-server migrate --store URL`: creates or upgrades the PostgreSQL store's
//! schema (the embedded store needs none), and says from which version to which.

use crate::store::postgres::{is_postgres_url, redact};
use crate::store::PgStore;
use anyhow::Context;
use std::process::ExitCode;

/// The flags of `migrate`.
#[derive(clap::Args)]
pub struct MigrateArgs {
    /// postgres://USER[:PASSWORD]@HOST:PORT/DATABASE
    #[arg(
        long,
        env = "APPROVAL_STORE",
        hide_env_values = true,
        value_name = "URL"
    )]
    store: String,
}

/// `migrate`: runs the migrations the database lacks.
pub async fn run(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    let store = args.store;
    if !is_postgres_url(&store) {
        anyhow::bail!("migrate is for the PostgreSQL store: give --store postgres://USER@HOST:PORT/DATABASE (the embedded store needs no migration)");
    }
    let shown = redact(&store);
    let (from, to) = tokio::task::spawn_blocking(move || PgStore::migrate(&store))
        .await?
        .with_context(|| format!("cannot migrate {shown}"))?;
    if from == to {
        println!("ok: {shown} is at schema version {to}; nothing to do");
    } else {
        println!("ok: {shown} migrated from schema version {from} to {to}");
    }
    Ok(ExitCode::SUCCESS)
}
