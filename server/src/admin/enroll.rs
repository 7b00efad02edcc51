//! `approval-server enroll NAME`: a single-use link with which an approver creates a
//! passkey and gets the keyring line to send to the operator (issue #34).
//!
//! The link's token is signed with the server's identity key (see
//! `approval_core::enrolment`), read from `<data>/server.key` (a running sled server
//! keeps its store locked, so its `server_id` comes from `endpoint.json`) or from a
//! shared PostgreSQL store. Nothing is written: the link is spent by the server when
//! a registration succeeds, and the keyring changes only when the operator adds the
//! line.

use crate::endpoint::Endpoint;
use crate::identity::{self, ServerIdentity};
use crate::run::StoreSpec;
use crate::store::{PgStore, SledStore, Store};
use anyhow::{bail, Context};
use approval_core::enrolment::EnrolmentClaim;
use approval_core::passkey::b64url;
use approval_core::time::Seconds;
use approval_core::{ApproverName, ServerId, Timestamp};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The flags of `enroll`.
#[derive(clap::Args)]
pub struct EnrollArgs {
    /// The approver's name, as the keyring line will carry it.
    name: String,
    /// Where approvers open the gate's pages: scheme, host and port, e.g.
    /// https://approvals.example.com (http only for localhost). Default: the running
    /// server's approver address with its host as `localhost`.
    #[arg(long, value_name = "URL", env = "APPROVAL_PUBLIC_URL")]
    public_url: Option<String>,
    /// The relying party id (a domain): default, the host of --public-url. A passkey
    /// made for `example.com` also works on its subdomains.
    #[arg(long, value_name = "DOMAIN")]
    rp: Option<String>,
    /// How long the link stays valid (e.g. 15m, 1h; at most 24h).
    #[arg(long, default_value = "15m", value_name = "DURATION")]
    ttl: String,
    /// Store folder of the server (its server.key signs the link).
    #[arg(long, default_value = "./data")]
    data: PathBuf,
    /// A shared store (postgres://...), whose identity secret signs the link.
    #[arg(
        long,
        value_name = "STORE",
        env = "APPROVAL_STORE",
        hide_env_values = true
    )]
    store: Option<StoreSpec>,
}

/// Prints the enrolment link on stdout (and what it is for on stderr).
pub async fn run(args: EnrollArgs) -> anyhow::Result<ExitCode> {
    let name = ApproverName::parse(&args.name)
        .map_err(|e| anyhow::anyhow!("approver name {:?}: {e}", args.name))?;
    let ttl =
        Seconds::parse(&args.ttl).map_err(|e| anyhow::anyhow!("--ttl {:?}: {e}", args.ttl))?;
    if ttl.get() < 60 || ttl.get() > 24 * 3600 {
        bail!(
            "--ttl {}: give between 1m and 24h (a link is single-use and short-lived by design)",
            args.ttl
        );
    }
    let data = match &args.store {
        Some(StoreSpec::Sled(dir)) => dir.clone(),
        _ => args.data.clone(),
    };
    let endpoint = Endpoint::read(&data).ok().flatten();
    let public_url = match (&args.public_url, &endpoint) {
        (Some(u), _) => u.trim_end_matches('/').to_owned(),
        (None, Some(e)) => localhost_url(&e.approver),
        (None, None) => bail!(
            "give --public-url (the scheme, host and port approvers open the gate's pages on, e.g. https://approvals.example.com): no running server was found in {}",
            data.display()
        ),
    };
    let host = origin_host(&public_url).with_context(|| {
        format!("--public-url {public_url:?}: give scheme://host[:port] and nothing after it")
    })?;
    let rp = args.rp.clone().unwrap_or_else(|| host.to_owned());
    let identity = load_identity(&args.store, &data, endpoint.as_ref()).await?;
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let exp = crate::clock::Clock::now(&crate::clock::SystemClock).unix() + ttl.get() as i64;
    let claim = EnrolmentClaim {
        name: name.clone(),
        rp: rp.clone(),
        origin: public_url.clone(),
        exp,
        nonce: b64url(&nonce),
    };
    // The same checks the keyring applies to the line this link will produce.
    approval_core::keyring::PasskeyEntry::check_place(&rp, &public_url)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let token = identity.sign_enrolment(&claim);
    println!("{public_url}/enroll/{token}");
    eprintln!(
        "Send this link to {name} only. It works once, until {}: opening it creates a passkey for rp {rp} and shows the keyring line to add to the keyring file (then reload the server: SIGHUP).",
        Timestamp::from_unix(exp)
    );
    Ok(ExitCode::SUCCESS)
}

/// `http://127.0.0.1:4800` → `http://localhost:4800` (and `https://` stays
/// `https://`): browsers treat localhost as a secure context, and WebAuthn refuses IP
/// addresses as a relying party.
fn localhost_url(approver: &str) -> String {
    let (scheme, rest) = approver.split_once("://").unwrap_or(("http", approver));
    let port = rest.rsplit_once(':').map(|(_, p)| p).unwrap_or("80");
    format!("{scheme}://localhost:{port}")
}

/// The host of `scheme://host[:port]`.
fn origin_host(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    if rest.contains('/') || rest.is_empty() {
        return None;
    }
    Some(rest.rsplit_once(':').map(|(h, _)| h).unwrap_or(rest))
}

/// The identity that signs the link: the shared store's, or the data folder's key
/// with the server id from the running server's endpoint file or the stopped store.
async fn load_identity(
    store: &Option<StoreSpec>,
    data: &Path,
    endpoint: Option<&Endpoint>,
) -> anyhow::Result<ServerIdentity> {
    if let Some(StoreSpec::Postgres(url)) = store {
        let url = url.clone();
        return tokio::task::spawn_blocking(move || -> anyhow::Result<ServerIdentity> {
            let pg = PgStore::open(&url).map_err(|e| anyhow::anyhow!("{e}"))?;
            ServerIdentity::open_shared(&pg)?.context(
                "this store keeps no shared identity: give the --data folder of the server instead",
            )
        })
        .await?;
    }
    let key = identity::read_key_file(data)?;
    let server_id = match endpoint {
        Some(e) => ServerId::parse(&e.server_id).map_err(|e| anyhow::anyhow!("{e}"))?,
        None => {
            let dir = data.join("store");
            let s = SledStore::open(&dir).with_context(|| {
                format!("cannot read the server id from {} (is the server running without an endpoint.json?)", dir.display())
            })?;
            s.server_id().clone()
        }
    };
    Ok(identity::from_parts(server_id, key))
}

#[cfg(test)]
mod tests {
    use super::localhost_url;

    #[test]
    fn the_running_servers_scheme_and_port_are_kept() {
        assert_eq!(
            localhost_url("http://127.0.0.1:4800"),
            "http://localhost:4800"
        );
        assert_eq!(
            localhost_url("https://127.0.0.1:4443"),
            "https://localhost:4443"
        );
        assert_eq!(
            localhost_url("https://[::1]:4443"),
            "https://localhost:4443"
        );
    }
}
