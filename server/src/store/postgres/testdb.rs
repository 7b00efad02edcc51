//! Test support: a fresh schema per test on the database of
//! `APPROVAL_TEST_DATABASE_URL`, dropped at the end.
use super::*;

/// The line printed when the PostgreSQL tests are skipped.
pub const NOT_RUN: &str =
    "PostgreSQL tests not run: set APPROVAL_TEST_DATABASE_URL=postgres://root@127.0.0.1:5432/test";

/// Prints [`NOT_RUN`] once per test binary, past the test harness's capture
/// (which would hide a `println!` of a passing test).
pub fn say_not_run() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "{NOT_RUN}");
    });
}

/// A schema of its own on the test database; dropped on drop.
pub struct Fresh {
    pub url: String,
    base: String,
    schema: String,
}

impl Fresh {
    /// `None` (after printing [`NOT_RUN`]) when no test database is configured;
    /// panics when one is configured but cannot be reached.
    pub fn new() -> Option<Self> {
        let Ok(base) = std::env::var("APPROVAL_TEST_DATABASE_URL") else {
            say_not_run();
            return None;
        };
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
