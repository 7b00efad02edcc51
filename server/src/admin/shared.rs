//! What several commands share: the flags naming the rules' files (serve, stdio,
//! check) and the log set-up of the commands that run the gate. Imports nothing of
//! the crate.

use std::path::PathBuf;

/// The rules' files: the policies and the keyring (serve, stdio and check).
#[derive(clap::Args, Clone)]
pub(super) struct Rules {
    /// Folder of policies, one TOML file per action kind.
    #[arg(long, default_value = "./policies")]
    pub(super) policies: PathBuf,
    /// Keyring: one `<name> ed25519 <base64 key>` line per approver.
    #[arg(long, default_value = "./keys")]
    pub(super) keys: PathBuf,
    /// `root.toml`: the administrators (keyring names) and their threshold. Once a
    /// server has started with it, the configuration changes only through
    /// `approval-server config propose` and the administrators' approval; the store
    /// remembers, so leaving this flag out later changes nothing.
    #[arg(long)]
    pub(super) root: Option<PathBuf>,
}

/// How log lines are written (`serve --log-format`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One readable line per event (colour on a terminal).
    #[default]
    Text,
    /// One JSON object per line, for log collectors: `timestamp`, `level`,
    /// `target`, `message` and the event's own fields at the top level
    /// (PROTOCOL.md, "Metrics and logs").
    Json,
}

/// Logs go to stderr (stdout carries the endpoint lines, or the protocol in stdio mode).
/// rmcp logs every stateless request at info; that is noise here, and costly under load.
pub(super) fn logging(default: &str) {
    logging_as(default, LogFormat::Text)
}

/// [`logging`] in the given format.
pub(super) fn logging_as(default: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{default},rmcp=warn")));
    use std::io::IsTerminal;
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => fmt.with_ansi(std::io::stderr().is_terminal()).init(),
        // Spans are left out: the field names of a line are the event's alone.
        LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }
}
