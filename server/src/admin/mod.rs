//! The operator's commands: every `approval-server` subcommand, apart from the
//! request path they start.
//!
//! `main.rs` parses the command line into a [`Command`] and hands it to [`dispatch`];
//! each subcommand is one file here with its flags and its run: `serve` (serve and
//! stdio, which start the gate), `demo`, `init`, `migrate`, `check`, `audit` (with
//! `audit_remote`, the read from a running server), `backup` (backup and restore),
//! `agent`, `import_tools`; what
//! several of them share is `shared`.
//!
//! This is the top layer: it may import anything of the crate (the wiring in `run`,
//! the store, the configuration), and nothing of the crate imports it.

pub mod agent;
pub mod audit;
pub mod audit_remote;
pub mod backup;
pub mod check;
pub mod config;
pub mod demo;
pub mod enroll;
pub mod import_tools;
pub mod init;
pub mod migrate;
pub mod serve;
mod shared;
pub mod shell;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

/// The command line: `main.rs` parses it; `completions` and `man` read its definition.
#[derive(Parser)]
#[command(
    name = "approval-server",
    version,
    about = "An MCP approval gate: agents propose, a quorum of humans signs, the action runs once."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands, in the order `--help` lists them.
// Parsed once per process and moved straight into its command: the size of the
// largest variant (serve's flags) costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Command {
    /// Run the service.
    Serve(serve::ServeArgs),
    /// Start with the example policies and three demo approvers (keys in ./demo-keys).
    Demo(demo::DemoArgs),
    /// MCP over stdin/stdout for a host that launches its servers: runs the gate in this
    /// process (approver API on --listen, endpoint lines on stderr), or joins the server
    /// that already holds --data, or, with --connect, bridges to that service.
    Stdio(serve::StdioArgs),
    /// Scaffold a deployment folder: example policy, keyring, agents file. Never overwrites.
    Init(init::InitArgs),
    /// Create or upgrade the PostgreSQL store's schema (versioned migrations, each in
    /// one transaction; safe to run from several places at once). `serve` refuses a
    /// database whose schema is older or newer than it knows.
    Migrate(migrate::MigrateArgs),
    /// Validate policies and keyring; exits non-zero with file:line on any error, and
    /// while any kind is disabled by an approver missing from the keyring.
    Check(check::CheckArgs),
    /// The audit log: from the store (server stopped) or from a running server (--server).
    Audit {
        #[command(subcommand)]
        action: audit::AuditAction,
    },
    /// A single-use link with which an approver creates a passkey on a phone or a
    /// hardware token and gets the keyring line to send you (nothing is added to the
    /// keyring by the server).
    Enroll(enroll::EnrollArgs),
    /// A configuration under quorum (root.toml): pull the version in force, propose the
    /// next one for the administrators to approve.
    Config {
        #[command(subcommand)]
        action: config::ConfigAction,
    },
    /// Copy the embedded store (with the identity key) into one checked file, while
    /// the server runs (over <data>/admin.sock) or not. Never overwrites a file.
    Backup(backup::BackupArgs),
    /// Make a new data folder from a backup file: refuses a non-empty folder, checks
    /// the file's checksum and the audit chain, writes nothing half.
    Restore(backup::RestoreArgs),
    /// Agent tokens.
    Agent {
        #[command(subcommand)]
        action: agent::AgentAction,
    },
    /// Write one commented policy per tool of a downstream MCP server, or per --tool
    /// (kind `<prefix>.<tool>`, an `mcp` executor; approvers and quorum to fill in);
    /// --pass-through names tools called without approval. Never overwrites a file.
    ImportTools(import_tools::ImportToolsArgs),
    /// Print a shell completion script on stdout (bash, zsh, fish, elvish, powershell).
    Completions(shell::CompletionsArgs),
    /// Write the man pages, one per command and subcommand, into a folder.
    Man(shell::ManArgs),
}

/// Runs one subcommand. An error is the command's failure (main prints it); a
/// failure the command reports itself (a broken audit chain, a policy error) is
/// `Ok(ExitCode::FAILURE)`.
pub async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve(args) => serve::serve(args).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Stdio(args) => serve::stdio(args).await,
        Command::Init(args) => init::run(args),
        Command::Migrate(args) => migrate::run(args).await,
        Command::Check(args) => check::run(args).await,
        Command::Audit { action } => audit::run(action).await,
        Command::Agent { action } => agent::run(action),
        Command::Backup(args) => backup::backup(args).await,
        Command::Restore(args) => backup::restore(args).await,
        Command::Config { action } => config::run(action).await,
        Command::Enroll(args) => enroll::run(args).await,
        Command::ImportTools(args) => import_tools::run(args).await,
        Command::Completions(args) => shell::completions(args, Cli::command()),
        Command::Man(args) => shell::man(args, Cli::command()),
    }
}
