//! Test support: a fresh schema per test on the database of
//! `APPROVAL_TEST_DATABASE_URL`, dropped at the end.
use super::*;

/// The test database, or `None` after one `skipped:` line; a failure under
/// `APPROVAL_TEST_REQUIRE_ALL` (`.ci/run`), where PostgreSQL is always there.
pub fn database_url() -> Option<String> {
    approval_test_require::require_var(
        "APPROVAL_TEST_DATABASE_URL",
        "to run the PostgreSQL store (a fresh schema per test, dropped at the end)",
        "set APPROVAL_TEST_DATABASE_URL=postgres://root@127.0.0.1:5432/test, a database the tests may create schemas in",
    )
}

/// A schema of its own on the test database; dropped on drop.
pub struct Fresh {
    pub url: String,
    base: String,
    schema: String,
}

impl Fresh {
    /// `None` (after the one `skipped:` line of [`database_url`]) when no test
    /// database is configured; panics when one is configured but cannot be reached.
    pub fn new() -> Option<Self> {
        let base = database_url()?;
        let mut b = [0u8; 6];
        getrandom::fill(&mut b).unwrap();
        let schema = format!("t_{}", hex::encode(b));
        psql(&base, &format!("CREATE SCHEMA {schema}"));
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-csearch_path%3D{schema}");
        Some(Self { url, base, schema })
    }
}

impl Drop for Fresh {
    fn drop(&mut self) {
        psql(&self.base, &format!("DROP SCHEMA {} CASCADE", self.schema));
    }
}

/// Runs one statement on its own thread and runtime.
pub fn psql(url: &str, sql: &str) {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (cfg, tls) = parse_url(&url).expect("APPROVAL_TEST_DATABASE_URL parses");
            let c = connect(&cfg, &tls).await.unwrap_or_else(|e| {
                panic!("APPROVAL_TEST_DATABASE_URL={url} is set but cannot be reached: {e}")
            });
            c.batch_execute(&sql).await.unwrap();
        })
    })
    .join()
    .unwrap();
}
