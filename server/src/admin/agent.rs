//! `approval-server agent add NAME`: a new agent token, printed once; the agents
//! file keeps only its hash (the file's format is `crate::agents`).

use crate::agents;
use anyhow::Context;
use approval_core::ids::AgentName;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// The `agent` subcommands.
#[derive(clap::Subcommand)]
pub enum AgentAction {
    /// Make a token for a new agent: printed once, only its hash is kept.
    Add {
        /// The agent's name (becomes `requested_by`).
        name: String,
        /// Agents file to append to (created with mode 0600).
        #[arg(long, default_value = "./agents")]
        agents: PathBuf,
    },
}

/// `agent add`: appends the new agent's line and prints its token.
pub fn run(action: AgentAction) -> anyhow::Result<ExitCode> {
    let AgentAction::Add { name, agents: path } = action;
    let name = AgentName::parse(&name)?;
    let existing = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let parsed = agents::Agents::parse(&existing)
        .map_err(|(l, why)| anyhow::anyhow!("{}:{l}: {why}", path.display()))?;
    if parsed.contains(&name) {
        anyhow::bail!(
            "agent {name} already exists in {}: pick another name",
            path.display()
        );
    }
    let token = agents::new_token()?;
    let mut opts = std::fs::OpenOptions::new();
    opts.append(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts
        .open(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    if !existing.is_empty() && !existing.ends_with('\n') {
        writeln!(f)?;
    }
    writeln!(f, "{}", agents::line(&name, &token))?;
    f.sync_all()?;
    println!("{token}");
    eprintln!("agent {name} added to {p}. The token above is shown once: give it to the agent (Authorization: Bearer <token> over HTTP, --token or APPROVAL_AGENT_TOKEN for `approval-server stdio`); the file keeps only its hash. Start the server (serve or demo) with --agents {p}, or send SIGHUP to one already started with it, to load it.", p = path.display());
    Ok(ExitCode::SUCCESS)
}
