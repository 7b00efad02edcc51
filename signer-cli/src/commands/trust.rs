//! `trust-server`: re-pin a server's identity after an intended change.
//!
//! Every other command pins a server on first use and refuses it when its
//! `server_id` or `server_key` changes. This is the one command that replaces a
//! pin: it shows the old and the new identity and writes the new one. It signs
//! nothing and needs no key.

use super::outln;
use crate::client::Client;
use crate::config::Settings;
use crate::display::to_json;
use crate::known_servers;
use anyhow::Result;
use serde_json::json;

/// `signer-cli --server URL trust-server`.
pub async fn trust_server(settings: &Settings) -> Result<()> {
    let client = Client::with_roots(
        settings.server_url()?,
        settings.timeout,
        None,
        settings.tls_roots()?,
    )?;
    let path = known_servers::path(settings.known_servers.as_deref())?;
    let seen = client.identity().await?;
    let old = known_servers::lookup(&path, client.base())?;
    if old.as_ref() != Some(&seen) {
        known_servers::pin(&path, client.base(), &seen)?;
    }
    if settings.json {
        outln(&to_json(&json!({
            "server": client.base(),
            "known_servers": path.display().to_string(),
            "old": old.as_ref().map(|o| json!({"server_id": o.server_id.as_str(), "server_key": o.server_key.to_base64()})),
            "new": {"server_id": seen.server_id.as_str(), "server_key": seen.server_key.to_base64()},
            "changed": old.as_ref() != Some(&seen),
        })));
        return Ok(());
    }
    let mut o = String::new();
    match &old {
        Some(o_) if o_ == &seen => o.push_str(&format!(
            "server {} is already pinned as {seen}; nothing changed\n",
            client.base()
        )),
        Some(o_) => o.push_str(&format!(
            "server {}\n  old pin: {o_}\n  new pin: {seen}\nre-pinned in {}\n",
            client.base(),
            path.display()
        )),
        None => o.push_str(&format!(
            "server {}\n  old pin: (none)\n  new pin: {seen}\npinned in {}\n",
            client.base(),
            path.display()
        )),
    }
    super::out(&o);
    Ok(())
}
