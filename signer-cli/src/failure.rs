//! The three ways a command can fail, so that `main` maps errors to exit codes in one place.
//!
//! Commands return `anyhow::Result`; an error that should not exit with the default
//! code 1 carries a [`Failure`] saying which code it means. The codes are an interface
//! (scripts branch on them), documented in `--help` and the README:
//! 0 ok, 1 refused, 2 usage, 3 network.

use std::fmt;

/// Which exit code an error means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// 1: the server refused, a hash did not match, a verification failed, or the
    /// human did not confirm. Nothing was signed or sent that should not have been.
    Refused,
    /// 2: bad flags, a missing or unreadable key/server configuration.
    Usage,
    /// 3: the server could not be reached, timed out, or answered something that is
    /// not the API's JSON.
    Network,
}

impl ExitKind {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitKind::Refused => 1,
            ExitKind::Usage => 2,
            ExitKind::Network => 3,
        }
    }
}

/// An error with the exit code it means and a one-line, terminal-safe message.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The exit code.
    pub kind: ExitKind,
    /// What happened and, where possible, what to do.
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

fn make(kind: ExitKind, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Failure {
        kind,
        message: message.into(),
    })
}

/// A refusal (exit 1).
pub fn refused(message: impl Into<String>) -> anyhow::Error {
    make(ExitKind::Refused, message)
}

/// A usage or configuration error (exit 2).
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    make(ExitKind::Usage, message)
}

/// A network failure or an answer that is not the API's (exit 3).
pub fn network(message: impl Into<String>) -> anyhow::Error {
    make(ExitKind::Network, message)
}

/// The exit kind an error means: the first [`Failure`] in its chain, else refused.
pub fn kind_of(err: &anyhow::Error) -> ExitKind {
    err.chain()
        .find_map(|e| e.downcast_ref::<Failure>())
        .map(|f| f.kind)
        .unwrap_or(ExitKind::Refused)
}
