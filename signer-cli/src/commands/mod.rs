//! One file per command; each takes validated settings and returns `anyhow::Result`.

pub mod decide;
pub mod keygen;
pub mod offline;
pub mod pending;
pub mod pick;
pub mod receipt;
pub mod shell;
pub mod show;
pub mod trust;
pub mod ui;
pub mod watch;

use crate::client::Client;
use crate::config::Settings;
use crate::failure::usage;
use anyhow::Result;
use approval_core::ProposalId;
use std::io::Write;

/// Validates a proposal id from the command line.
pub fn parse_id(id: &str) -> Result<ProposalId> {
    ProposalId::parse(id).map_err(|e| usage(crate::display::escape(&e.to_string())))
}

/// A client for the configured server, signing reads with the configured key.
/// The server's identity is pinned in the known-servers file and checked before
/// any signed request.
pub fn connect(settings: &Settings) -> Result<Client> {
    let key = settings.secret_key()?;
    let known = crate::known_servers::path(settings.known_servers.as_deref())?;
    let roots = settings.tls_roots()?;
    let agent = settings
        .ssh_agent
        .as_deref()
        .map(crate::ssh_agent::parse_key_line)
        .transpose()
        .map_err(usage)?;
    Ok(
        Client::with_roots(settings.server_url()?, settings.timeout, Some(key), roots)?
            .with_known_servers(known)
            .with_ssh_agent(agent),
    )
}

/// Writes to stdout; a closed pipe (`| head`) is not an error worth a panic.
pub fn out(text: &str) {
    let mut so = std::io::stdout().lock();
    let _ = so.write_all(text.as_bytes());
    let _ = so.flush();
}

/// Writes a line to stdout.
pub fn outln(text: &str) {
    out(&format!("{text}\n"));
}
