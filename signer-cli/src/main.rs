//! `signer-cli`: the command line, and the one place where errors become exit codes.

use approval_core::Decision;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use signer_cli::commands::{
    decide, keygen, offline, pending, receipt, shell, show, trust, ui, watch,
};
use signer_cli::config::Settings;
use signer_cli::failure::{kind_of, usage};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const AFTER_HELP: &str = "\
Configuration, first found wins: --server/--key, SIGNER_SERVER/SIGNER_KEY, then
$XDG_CONFIG_HOME/approval-signer/config.toml (default ~/.config/approval-signer/)
with `server = \"http://...\"` and `key = \"path\"`; without a key setting, the only
*.key file in that folder. An https:// server is checked against the system's
roots plus --tls-ca FILE / SIGNER_TLS_CA / `tls_ca = \"path\"` (PEM).

Each server's id and key are pinned on first use in <config dir>/known_servers
(or --known-servers FILE / SIGNER_KNOWN_SERVERS); a server whose id or key changed
is refused with nothing signed. After an intended change: `trust-server`.

Exit codes:
  0  ok
  1  refused: the server refused (shown as `CODE: message`), a preview hash or
     server id or policy did not match, a receipt failed verification, the
     confirmation was not typed, or a key file is unsafe or would be overwritten
  2  usage: bad flags or arguments, missing or unreadable key/server configuration
  3  network: server down, time-out, or an answer that is not the API's JSON";

/// Approvers read the exact preview of what an AI agent proposes and sign it with
/// their own Ed25519 key, on their own machine.
#[derive(Parser)]
#[command(name = "signer-cli", version, after_help = AFTER_HELP)]
struct Cli {
    /// Base URL of the approver API (what `approval-server serve` prints as "Approver API").
    #[arg(long, global = true, env = "SIGNER_SERVER", value_name = "URL")]
    server: Option<String>,
    /// Your secret key file (made by `keygen`, mode 0600).
    #[arg(long, global = true, env = "SIGNER_KEY", value_name = "FILE")]
    key: Option<PathBuf>,
    /// Sign decisions with this OpenSSH key in ssh-agent ($SSH_AUTH_SOCK) instead of
    /// the key file: its public key line (`ssh-add -L`), `ssh-ed25519 AAAA...` or
    /// `sk-ssh-ed25519@openssh.com AAAA...` (a FIDO token: touch it when it blinks).
    /// The key file still names you and signs reads.
    #[arg(
        long,
        global = true,
        env = "SIGNER_SSH_AGENT",
        value_name = "PUBLIC KEY LINE"
    )]
    ssh_agent: Option<String>,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Where servers' ids and keys are pinned on first use [default: <config dir>/known_servers].
    #[arg(long, global = true, env = "SIGNER_KNOWN_SERVERS", value_name = "FILE")]
    known_servers: Option<PathBuf>,
    /// Extra certificates to trust for an https:// server (PEM: a private CA, or the
    /// server's self-signed certificate), besides the system's. The server's pinned
    /// identity key stays the real check.
    #[arg(long, global = true, env = "SIGNER_TLS_CA", value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Time-out of each network call, in seconds.
    #[arg(long, global = true, value_name = "SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=600))]
    timeout: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Outcome {
    Succeeded,
    Failed,
}

#[derive(Subcommand)]
enum Command {
    /// Make a new Ed25519 key (file mode 0600, never overwritten); prints your keyring line.
    Keygen {
        /// Your approver name, as the server's keyring and policies will know you.
        #[arg(long)]
        name: String,
        /// Where to write the secret key [default: <config dir>/<name>.key].
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Print the keyring line of your key again.
    Pubkey,
    /// List the proposals waiting for decisions.
    Pending,
    /// Show a proposal's full preview, checked locally, hidden characters made visible.
    Show {
        /// The proposal id, or a unique prefix of it (none: the one pending proposal waiting for you).
        id: Option<String>,
    },
    /// Approve a proposal: shows it, asks for the hash prefix, signs, sends.
    Approve {
        /// The proposal id, or a unique prefix of it (none: the one pending proposal waiting for you).
        id: Option<String>,
        /// Why (signed along with the decision).
        #[arg(long, default_value = "")]
        reason: String,
        /// Do not ask for the hash prefix (for scripts).
        #[arg(long)]
        yes: bool,
    },
    /// Reject (veto) a pending proposal.
    Reject {
        /// The proposal id, or a unique prefix of it (none: the one pending proposal waiting for you).
        id: Option<String>,
        /// Why (signed along with the decision).
        #[arg(long, default_value = "")]
        reason: String,
        /// Do not ask for the hash prefix (for scripts).
        #[arg(long)]
        yes: bool,
    },
    /// Revoke an approval before the action runs.
    Revoke {
        /// The proposal id, or a unique prefix of it.
        id: String,
        /// Why (signed along with the decision).
        #[arg(long, default_value = "")]
        reason: String,
        /// Do not ask for the hash prefix (for scripts).
        #[arg(long)]
        yes: bool,
    },
    /// Settle a proposal whose outcome is unknown (the server died while it ran).
    Resolve {
        /// The proposal id, or a unique prefix of it.
        id: String,
        /// What really happened.
        #[arg(long)]
        outcome: Outcome,
        /// Why (signed along with the decision).
        #[arg(long, default_value = "")]
        reason: String,
        /// Do not ask for the hash prefix (for scripts).
        #[arg(long)]
        yes: bool,
    },
    /// Fetch a proposal's receipt (printed, or written byte for byte to --out).
    Receipt {
        /// The proposal id.
        id: String,
        /// Write the receipt to this file.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Verify a receipt offline against a keyring (and the server's key, to check
    /// that it executed while still approved).
    Verify {
        /// The receipt file.
        receipt: PathBuf,
        /// The keyring file (`<name> ed25519 <base64>` lines).
        #[arg(long, value_name = "FILE")]
        keys: PathBuf,
        /// The server's identity key, exactly as its /healthz publishes `server_key`:
        /// requires the server's execution attestation (not revoked or vetoed when it
        /// ran). Without it only the quorum is verified.
        #[arg(long, value_name = "KEY")]
        server_key: Option<String>,
        /// Also refuse a receipt whose approval window has closed.
        #[arg(long)]
        check_expiry: bool,
    },
    /// Print the preview_sha256 of a preview file (or a ProposalView or receipt).
    Hash {
        /// The file.
        preview_file: PathBuf,
    },
    /// Follow new proposals you may sign, reconnecting when the stream drops.
    Watch {
        /// Also show a desktop notification for each new proposal that needs you.
        #[arg(long)]
        notify: bool,
    },
    /// Re-pin the server's id and key after an intended change (shows old and new).
    TrustServer,
    /// Serve a page to decide from a browser (on this machine only); signing stays here.
    Ui {
        /// Where to listen: a loopback address only (port 0: any free port).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
        listen: String,
        /// Only print the URL; do not open a browser.
        #[arg(long)]
        no_open: bool,
    },
    /// Print a shell completion script on stdout (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages, one per command, into a folder (e.g. ~/.local/share/man/man1).
    Man {
        /// Folder to write the pages into (made if missing); a page of the same name is replaced.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let s = Settings {
        server: cli.server,
        key: cli.key,
        json: cli.json,
        known_servers: cli.known_servers,
        timeout: Duration::from_secs(cli.timeout),
        tls_ca: cli.tls_ca,
        ssh_agent: cli.ssh_agent,
    };
    let s = &s;
    let d = |id: Option<String>, decision, reason: String, yes| async move {
        decide::decide(s, id.as_deref(), decision, &reason, yes).await
    };
    match cli.command {
        Command::Keygen { name, out } => keygen::keygen(s, &name, out.as_deref()),
        Command::Pubkey => keygen::pubkey(s),
        Command::Pending => pending::pending(s).await,
        Command::Show { id } => show::show(s, id.as_deref()).await,
        Command::Approve { id, reason, yes } => d(id, Decision::Approve, reason, yes).await,
        Command::Reject { id, reason, yes } => d(id, Decision::Reject, reason, yes).await,
        Command::Revoke { id, reason, yes } => d(Some(id), Decision::Revoke, reason, yes).await,
        Command::Resolve {
            id,
            outcome,
            reason,
            yes,
        } => {
            let decision = match outcome {
                Outcome::Succeeded => Decision::ResolveSucceeded,
                Outcome::Failed => Decision::ResolveFailed,
            };
            d(Some(id), decision, reason, yes).await
        }
        Command::Receipt { id, out } => receipt::receipt(s, &id, out.as_deref()).await,
        Command::Verify {
            receipt,
            keys,
            server_key,
            check_expiry,
        } => offline::verify(s, &receipt, &keys, server_key.as_deref(), check_expiry),
        Command::Hash { preview_file } => offline::hash(s, &preview_file),
        Command::Watch { notify } => watch::watch(s, notify).await,
        Command::TrustServer => trust::trust_server(s).await,
        Command::Ui { listen, no_open } => ui::ui(s, &listen, !no_open).await,
        Command::Completions { shell } => shell::completions(shell, Cli::command()),
        Command::Man { out } => shell::man(&out, Cli::command()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| usage(format!("cannot start the async runtime: {e}")))
        .and_then(|rt| rt.block_on(run(cli)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("signer-cli: {e:#}");
            ExitCode::from(kind_of(&e).code())
        }
    }
}
