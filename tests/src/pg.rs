//! PostgreSQL for the end-to-end tests: a fresh schema per test on the database
//! named by `APPROVAL_TEST_DATABASE_URL`, dropped at the end, and instances of the
//! real `approval-server serve --store postgres://…` on it.
//!
//! Without `APPROVAL_TEST_DATABASE_URL` the PostgreSQL tests print one `skipped:`
//! line and pass ([`crate::require_var`]), or fail under `APPROVAL_TEST_REQUIRE_ALL`;
//! with it set, a database that cannot be reached fails them loudly.

use crate::{approval_server, Server, ServerOptions, World};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;

/// The database the PostgreSQL tests use, or `None` after the one `skipped:` line
/// (a failure under `APPROVAL_TEST_REQUIRE_ALL`).
pub fn database_url() -> Option<String> {
    crate::require_var(
        "APPROVAL_TEST_DATABASE_URL",
        "to run the PostgreSQL store (a fresh schema per test, dropped at the end)",
        "set APPROVAL_TEST_DATABASE_URL=postgres://root@127.0.0.1:5432/test, a database the tests may create schemas in",
    )
}

/// A schema of its own on the test database, migrated; dropped on drop.
pub struct FreshDb {
    /// The store URL for `--store` (its `search_path` is the fresh schema).
    pub url: String,
    base: String,
    schema: String,
}

impl FreshDb {
    /// `Ok(None)` (after the one `skipped:` line of [`database_url`]) when no test
    /// database is configured. Makes the schema and runs `approval-server migrate
    /// --store URL` on it.
    pub fn new() -> Result<Option<Self>> {
        let Some(base) = database_url() else {
            return Ok(None);
        };
        let mut b = [0u8; 6];
        getrandom(&mut b);
        let schema = format!(
            "e2e_{}",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        );
        sql(&base, &format!("CREATE SCHEMA {schema}")).with_context(|| {
            format!("APPROVAL_TEST_DATABASE_URL={base} is set but cannot be used")
        })?;
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-csearch_path%3D{schema}");
        let db = Self { url, base, schema };
        let out = approval_server(&["migrate".as_ref(), "--store".as_ref(), db.url.as_ref()])?;
        if !out.status.success() {
            bail!("approval-server migrate failed: {out}");
        }
        Ok(Some(db))
    }

    /// Starts an instance on this database with its own local folder
    /// `<world>/<name>` and extra `serve` flags.
    pub fn start(&self, world: &World, name: &str, extra: &[&str]) -> Result<Server> {
        let data: PathBuf = world.path().join(name);
        let mut args: Vec<std::ffi::OsString> = vec!["--store".into(), self.url.clone().into()];
        args.extend(extra.iter().map(|a| a.into()));
        Server::start_full(
            &ServerOptions {
                data,
                policies: world.policies.clone(),
                keys: world.keys.clone(),
                agents: None,
            },
            &[],
            &args,
            &[],
        )
    }
}

impl Drop for FreshDb {
    fn drop(&mut self) {
        let _ = sql(&self.base, &format!("DROP SCHEMA {} CASCADE", self.schema));
    }
}

/// Runs SQL on `url` (on a thread and runtime of its own, so it works anywhere).
pub fn sql(url: &str, text: &str) -> Result<()> {
    let (url, text) = (url.to_owned(), text.to_owned());
    std::thread::spawn(move || -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
            tokio::spawn(conn);
            client.batch_execute(&text).await?;
            Ok(())
        })
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the SQL thread panicked"))?
}

fn getrandom(b: &mut [u8]) {
    use std::hash::{BuildHasher, Hasher};
    // Unique enough for a schema name: the process id, the time and a hasher's random keys.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    let v = h.finish().to_be_bytes();
    for (i, x) in b.iter_mut().enumerate() {
        *x = v[i % 8];
    }
}
