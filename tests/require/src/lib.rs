//! One rule for every test that needs something from outside the workspace: a
//! program (node, Chromium, chromedriver, Prometheus, python3, ssh-agent, …) or a
//! PostgreSQL database.
//!
//! Why: `cargo test --workspace` is the first command a newcomer runs, on a laptop
//! that has only Rust. A test that installs system packages there, or fails because
//! a browser is missing, teaches them nothing about their change. So a test asks
//! [`require`] (or [`require_var`]) first; when the thing is missing it prints exactly
//! one line past the test harness's capture,
//!
//! ```text
//! skipped: ui_flow_in_a_real_browser: chromium not found (apt-get install chromium chromium-driver)
//! ```
//!
//! and returns `None`, and the test returns early. CI must not pass by skipping:
//! with `APPROVAL_TEST_REQUIRE_ALL` set (to anything but empty or `0`, as `.ci/run`
//! does after installing everything) the same call fails the test instead, naming
//! what is missing, why the test needs it and how to install it.
//!
//! No test installs anything on the machine; tools a test fetches into `target/`
//! (npm packages, a Python venv) are its own business, after it has found the
//! program that fetches them here.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The variable that turns a skip into a failure (set by `.ci/run`).
pub const REQUIRE_ALL: &str = "APPROVAL_TEST_REQUIRE_ALL";

/// What happens when something a test needs is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Print one `skipped:` line and let the test return early.
    Skip,
    /// Fail the test (CI, where every tool is installed).
    Require,
}

impl Mode {
    /// The mode this process runs in, from [`REQUIRE_ALL`].
    pub fn from_env() -> Self {
        Self::from_value(std::env::var_os(REQUIRE_ALL).as_deref())
    }

    /// The mode for a value of [`REQUIRE_ALL`]: unset, empty or `0` skip.
    pub fn from_value(v: Option<&OsStr>) -> Self {
        match v {
            Some(v) if !v.is_empty() && v != "0" => Mode::Require,
            _ => Mode::Skip,
        }
    }
}

/// The program `tool` on `PATH` (its full path), or `None` after printing one
/// `skipped:` line; fails the test instead when [`REQUIRE_ALL`] is set.
/// `why` says what the test does with it, `install_hint` how to get it
/// (e.g. `apt-get install prometheus`).
pub fn require(tool: &str, why: &str, install_hint: &str) -> Option<PathBuf> {
    let found = find_on_path(tool, std::env::var_os("PATH").as_deref());
    settle(
        Mode::from_env(),
        found,
        &Missing {
            what: tool,
            state: "not found",
            why,
            hint: install_hint,
        },
    )
}

/// The value of the environment variable `var` (e.g. `APPROVAL_TEST_DATABASE_URL`),
/// or `None` after printing one `skipped:` line; fails the test instead when
/// [`REQUIRE_ALL`] is set. An empty value counts as unset.
pub fn require_var(var: &str, why: &str, hint: &str) -> Option<String> {
    let found = std::env::var(var).ok().filter(|v| !v.is_empty());
    settle(
        Mode::from_env(),
        found,
        &Missing {
            what: var,
            state: "not set",
            why,
            hint,
        },
    )
}

/// What a test is missing, in words.
#[derive(Debug, Clone, Copy)]
pub struct Missing<'a> {
    /// The program or variable.
    pub what: &'a str,
    /// `not found` or `not set`.
    pub state: &'a str,
    /// What the test needs it for.
    pub why: &'a str,
    /// How to get it.
    pub hint: &'a str,
}

impl Missing<'_> {
    /// The one line a skipped test prints.
    pub fn skip_line(&self, test: &str) -> String {
        format!(
            "skipped: {test}: {} {} ({})",
            self.what, self.state, self.hint
        )
    }

    /// The failure under [`REQUIRE_ALL`].
    pub fn failure(&self, test: &str) -> String {
        format!(
            "{test}: {} {}, and {REQUIRE_ALL} is set, so this is a failure, not a skip: the test needs it {}; {}",
            self.what, self.state, self.why, self.hint
        )
    }
}

/// `found`, or the skip or failure `mode` says for what is missing. Public so a
/// test of this crate can exercise both modes without touching the environment.
pub fn settle<T>(mode: Mode, found: Option<T>, missing: &Missing<'_>) -> Option<T> {
    if found.is_some() {
        return found;
    }
    let test = current_test();
    match mode {
        Mode::Require => panic!("{}", missing.failure(&test)),
        Mode::Skip => {
            // Straight to the process's stderr: the harness captures `eprintln!`
            // of a passing test, which would hide the skip.
            let _ = writeln!(std::io::stderr(), "{}", missing.skip_line(&test));
            None
        }
    }
}

/// The running test's name: libtest names each test's thread after it.
fn current_test() -> String {
    match std::thread::current().name() {
        Some(n) if n != "main" => n.to_owned(),
        _ => "this test".to_owned(),
    }
}

/// The first `dir/tool` in `path` that is an executable file; a `tool` with a
/// slash is taken as a path.
pub fn find_on_path(tool: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    if tool.contains('/') {
        return Some(PathBuf::from(tool)).filter(|p| executable(p));
    }
    let path: OsString = path?.to_owned();
    std::env::split_paths(&path)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(tool))
        .find(|p| executable(p))
}

fn executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MISSING: Missing<'static> = Missing {
        what: "no-such-tool",
        state: "not found",
        why: "to be missing",
        hint: "apt-get install no-such-tool",
    };

    #[test]
    fn the_mode_comes_from_the_variable() {
        assert_eq!(Mode::from_value(None), Mode::Skip);
        assert_eq!(Mode::from_value(Some("".as_ref())), Mode::Skip);
        assert_eq!(Mode::from_value(Some("0".as_ref())), Mode::Skip);
        assert_eq!(Mode::from_value(Some("1".as_ref())), Mode::Require);
        assert_eq!(Mode::from_value(Some("yes".as_ref())), Mode::Require);
    }

    #[test]
    fn skip_mode_returns_none_and_says_so_in_one_line() {
        assert_eq!(settle::<PathBuf>(Mode::Skip, None, &MISSING), None);
        let line = MISSING.skip_line("t::x");
        assert_eq!(
            line,
            "skipped: t::x: no-such-tool not found (apt-get install no-such-tool)"
        );
        assert!(!line.contains('\n'));
    }

    #[test]
    fn require_mode_fails_the_test_and_names_the_tool_why_and_how() {
        let e = std::panic::catch_unwind(|| settle::<PathBuf>(Mode::Require, None, &MISSING))
            .expect_err("a missing tool fails under APPROVAL_TEST_REQUIRE_ALL");
        let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("no-such-tool not found"), "{msg}");
        assert!(msg.contains(REQUIRE_ALL), "{msg}");
        assert!(msg.contains("to be missing"), "{msg}");
        assert!(msg.contains("apt-get install no-such-tool"), "{msg}");
    }

    #[test]
    fn what_is_there_is_returned_in_both_modes() {
        for mode in [Mode::Skip, Mode::Require] {
            assert_eq!(settle(mode, Some(7), &MISSING), Some(7));
        }
    }

    #[test]
    fn a_program_is_found_on_the_path_given_and_only_there() {
        let dir = std::env::temp_dir().join(format!("require-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tool = dir.join("my-tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        let plain = dir.join("not-executable");
        std::fs::write(&plain, "").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = std::env::join_paths(["/nonexistent".as_ref(), dir.as_path()]).unwrap();
        assert_eq!(find_on_path("my-tool", Some(&path)), Some(tool.clone()));
        assert_eq!(find_on_path("not-executable", Some(&path)), None);
        assert_eq!(find_on_path("my-tool", Some("/nonexistent".as_ref())), None);
        assert_eq!(find_on_path("my-tool", None), None);
        assert_eq!(
            find_on_path(tool.to_str().unwrap(), None),
            Some(tool.clone())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
