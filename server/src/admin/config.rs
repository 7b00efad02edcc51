//! `approval-server config pull|propose`: changing a configuration that is under
//! quorum (issue #35). `pull DIR` writes the version in force as files (`root.toml`,
//! `keyring`, `agents`, `policies/*.toml`); an administrator edits them and `propose
//! DIR` sends them whole to the running server, which answers with the diff and the
//! `gate.config` proposal the administrators approve with `signer-cli approve`.
//! Both are signed reads with an approver's key file (the administrator's, to
//! propose); the server checks, this side only carries files.

use super::audit_remote::server_id;
use anyhow::Context;
use approval_core::api::{ConfigProposed, ErrorBody, ProposeConfig};
use approval_core::governance::{Bundle, ConfigHead};
use approval_core::keyring::SecretKey;
use approval_core::message::sign_read;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// `config` subcommands.
#[derive(Subcommand)]
pub enum ConfigAction {
    /// Write the configuration version in force into DIR (root.toml, keyring, agents,
    /// policies/), to edit and propose.
    Pull(Remote),
    /// Propose DIR's files as the next configuration version: prints the diff and the
    /// proposal the administrators approve with `signer-cli approve`.
    Propose(Remote),
}

/// Where the files are, and the running server to talk to.
#[derive(Args)]
pub struct Remote {
    /// Folder of root.toml, keyring, agents (optional) and policies/*.toml.
    dir: PathBuf,
    /// The running server's approver API (the "Approver API:" address it prints).
    #[arg(long, default_value = "http://127.0.0.1:4800")]
    server: String,
    /// Your key file (`signer-cli keygen`); an administrator's, to propose.
    #[arg(long)]
    key: PathBuf,
}

/// Runs a `config` subcommand.
pub async fn run(action: ConfigAction) -> anyhow::Result<ExitCode> {
    match action {
        ConfigAction::Pull(r) => pull(r).await,
        ConfigAction::Propose(r) => propose(r).await,
    }
}

async fn pull(r: Remote) -> anyhow::Result<ExitCode> {
    let body = send(&r, reqwest::Method::GET, "/v1/config", None).await?;
    let head: ConfigHead = serde_json::from_str(&body)
        .context("the server's answer is not a configuration version")?;
    if !head.is_consistent() {
        anyhow::bail!("the server's configuration does not hash to its bundle_sha256: refusing it");
    }
    // File names checked here too: an answer must not write outside DIR.
    head.bundle
        .check()
        .map_err(|e| anyhow::anyhow!("the server's configuration is refused: {e}"))?;
    write_dir(&r.dir, &head.bundle)?;
    println!(
        "configuration version {} ({}) written to {}: edit it, then run `approval-server config propose {} --server {} --key {}`",
        head.version,
        head.bundle_sha256.prefix(8),
        r.dir.display(),
        r.dir.display(),
        r.server,
        r.key.display()
    );
    Ok(ExitCode::SUCCESS)
}

async fn propose(r: Remote) -> anyhow::Result<ExitCode> {
    let bundle = read_dir(&r.dir)?;
    // The hash goes in the signed path: the signature then covers the bundle.
    let path = format!("/v1/config/proposals?bundle_sha256={}", bundle.sha256());
    let req = serde_json::to_string(&ProposeConfig { bundle })?;
    let body = send(&r, reqwest::Method::POST, &path, Some(req)).await?;
    let p: ConfigProposed =
        serde_json::from_str(&body).context("the server's answer is not a proposal")?;
    if let Some(who) = &p.emergency_removal {
        println!(
            "EMERGENCY REMOVAL of administrator {who}: it needs one approval fewer, never theirs"
        );
    }
    println!(
        "proposed configuration version {} (replacing {}) as {}; preview hash starts {}",
        p.to_version,
        p.from_version,
        p.proposal_id,
        p.preview_sha256.prefix(8)
    );
    for line in &p.diff {
        println!("  {}", approval_core::escape::escape(line));
    }
    let names: Vec<String> = p.approvers.iter().map(|a| a.to_string()).collect();
    println!(
        "{} of {} approve it with: signer-cli approve {}",
        p.need,
        names.join(", "),
        p.proposal_id
    );
    Ok(ExitCode::SUCCESS)
}

/// One signed request to the approver API; the answer's body, or its refusal.
async fn send(
    r: &Remote,
    method: reqwest::Method,
    path: &str,
    body: Option<String>,
) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(&r.key)
        .with_context(|| format!("cannot read the key file {}", r.key.display()))?;
    let key = SecretKey::parse(&text).map_err(|e| {
        anyhow::anyhow!(
            "{} is not a key file (signer-cli keygen): {}",
            r.key.display(),
            e.0
        )
    })?;
    let base = r.server.trim_end_matches('/');
    let url = reqwest::Url::parse(&format!("{base}{path}")).with_context(|| {
        format!(
            "--server {} is not a URL like http://127.0.0.1:4800",
            r.server
        )
    })?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .context("cannot set up HTTP")?;
    let sid = server_id(&client, base).await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let signed = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    let auth = sign_read(&key.key, &key.name, &sid, now, method.as_str(), &signed);
    let mut req = client
        .request(method, url.clone())
        .header(reqwest::header::AUTHORIZATION, auth);
    if let Some(b) = body {
        req = req
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(b);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}", crate::stdio::bridge::unreachable(url.as_str(), &e)))?;
    let status = resp.status();
    let text = resp
        .text()
        .await
        .with_context(|| format!("broken answer from {url}"))?;
    if !status.is_success() {
        let why = serde_json::from_str::<ErrorBody>(&text)
            .map(|e| format!("{}: {}", e.code, e.message))
            .unwrap_or_else(|_| format!("HTTP {status}"));
        anyhow::bail!("{url} refused: {why}");
    }
    Ok(text)
}

/// DIR's files as a bundle.
fn read_dir(dir: &Path) -> anyhow::Result<Bundle> {
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .with_context(|| format!("cannot read {}", dir.join(name).display()))
    };
    let agents_path = dir.join("agents");
    let agents = agents_path.exists().then(|| read("agents")).transpose()?;
    let policies = crate::config::read_policies_by_name(&dir.join("policies"))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Bundle {
        root: read("root.toml")?,
        keyring: read("keyring")?,
        agents,
        policies,
    })
}

/// Writes a bundle as DIR's files, replacing the policies folder's `*.toml`.
fn write_dir(dir: &Path, b: &Bundle) -> anyhow::Result<()> {
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies)
        .with_context(|| format!("cannot create {}", policies.display()))?;
    let write = |path: PathBuf, text: &str| {
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    write(dir.join("root.toml"), &b.root)?;
    write(dir.join("keyring"), &b.keyring)?;
    if let Some(a) = &b.agents {
        write(dir.join("agents"), a)?;
    }
    for entry in std::fs::read_dir(&policies)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "toml") {
            std::fs::remove_file(&path)?;
        }
    }
    for (name, text) in &b.policies {
        write(policies.join(name), text)?;
    }
    Ok(())
}
