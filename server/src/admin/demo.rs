//! `approval-server demo`: the newcomer's start.
//!
//! Makes three demo approvers (alice, bob, carol) whose secret keys it writes to
//! `./demo-keys/`, loads the policies in `./policies` (the repository's examples,
//! reloaded on SIGHUP like `serve`; built-in copies of them when started elsewhere),
//! and prints the one `curl` that makes a first proposal and the exact `signer-cli`
//! commands to approve it. Real keys never live beside the server; the demo says so
//! loudly.

use super::shared::logging;
use crate::config::ConfigSource;
use crate::run::{self, Banner, ServeOptions};
use anyhow::Context;
use approval_core::keyring::SecretKey;
use approval_core::{ApproverName, Keyring};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// The flags of `demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Address to listen on (another port if 4800 is taken, e.g. 127.0.0.1:4801).
    #[arg(long, default_value = "127.0.0.1:4800")]
    listen: SocketAddr,
    /// Folder of policies, reloaded on SIGHUP [default: ./policies if it exists,
    /// else built-in copies of the repository's example policies].
    #[arg(long)]
    policies: Option<PathBuf>,
    /// Agents file (`approval-server agent add NAME --agents FILE`); without it,
    /// only loopback clients, as `local`. Reloaded on SIGHUP.
    #[arg(long)]
    agents: Option<PathBuf>,
    /// Store folder.
    #[arg(long, default_value = "./data")]
    data: PathBuf,
    /// Where the demo keys go.
    #[arg(long, default_value = "./demo-keys")]
    keys_dir: PathBuf,
}

/// `demo`: the demo keys and policies, then the service until a signal stops it.
pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    logging("info");
    let keys = prepare_keys(&args.keys_dir)?;
    let source = policy_source(args.policies, keys, args.agents)?;
    let shown = (args.keys_dir, source.clone(), args.data.clone());
    let opts = ServeOptions {
        data: args.data,
        source,
        listen: args.listen,
        approver_listen: None,
        allowed_hosts: vec![],
        allowed_origins: vec![],
        banner: Some(Banner(Arc::new(move |mcp_url, api_url| {
            banner(mcp_url, api_url, &shown.0, &shown.1, &shown.2)
        }))),
        limits: Default::default(),
        notify: Default::default(),
        database: None,
        claim_lease: crate::store::postgres::DEFAULT_LEASE,
        public_url: None,
        tls: None,
        metrics_listen: None,
    };
    let svc = run::start(&opts).await?;
    run::serve(opts, svc).await?;
    Ok(ExitCode::SUCCESS)
}

/// The example policies, built in so the demo runs from any folder.
pub const EXAMPLE_POLICIES: [(&str, &str); 2] = [
    (
        "note.write.toml",
        include_str!("../../../policies/note.write.toml"),
    ),
    (
        "email.send.toml",
        include_str!("../../../policies/email.send.toml"),
    ),
];

/// Where the demo's policies come from: `--policies DIR` if given (it must exist),
/// else `./policies` if it is a folder, else the built-in copies of the examples.
pub fn policy_source(
    policies: Option<PathBuf>,
    keys: PathBuf,
    agents: Option<PathBuf>,
) -> anyhow::Result<ConfigSource> {
    let default = PathBuf::from("./policies");
    let folder = match policies {
        Some(dir) if dir.is_dir() => Some(dir),
        Some(dir) => anyhow::bail!(
            "--policies {}: no such folder: pass a folder of <kind>.toml policies (the repository's policies/ is an example)",
            dir.display()
        ),
        None if default.is_dir() => Some(default),
        None => None,
    };
    Ok(match folder {
        Some(dir) => ConfigSource {
            policies: dir,
            keys,
            agents,
            root: None,
            embedded_policies: None,
        },
        None => ConfigSource {
            policies: PathBuf::from(BUILT_IN),
            keys,
            agents,
            root: None,
            embedded_policies: Some(
                EXAMPLE_POLICIES
                    .iter()
                    .map(|(n, t)| (n.to_string(), t.to_string()))
                    .collect(),
            ),
        },
    })
}

/// How the banner and errors name the built-in policies.
pub const BUILT_IN: &str = "<built-in copies of the example policies>";

/// The demo approvers.
pub const APPROVERS: [&str; 3] = ["alice", "bob", "carol"];

fn write_new(path: &Path, text: &str, mode: u32) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut f = opts.open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

/// Makes (or reuses) the demo keys in `dir` and writes the keyring. Returns its path.
pub fn prepare_keys(dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut keyring =
        String::from("# Demo keyring made by `approval-server demo`. Public keys only.\n");
    for name in APPROVERS {
        let path = dir.join(format!("{name}.key"));
        let key = if path.exists() {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            SecretKey::parse(&text)
                .with_context(|| format!("{} is not a key file", path.display()))?
        } else {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
            let key = SecretKey::from_seed(ApproverName::parse(name)?, seed);
            write_new(&path, &key.to_file_text(), 0o600)
                .with_context(|| format!("cannot write {}", path.display()))?;
            key
        };
        keyring.push_str(&key.keyring_line());
        keyring.push('\n');
    }
    Keyring::parse(&keyring).context("demo keyring")?;
    let path = dir.join("keyring");
    std::fs::write(&path, keyring).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The one command that makes a first proposal, as an agent would.
pub fn propose_command(mcp_url: &str, with_token: bool) -> String {
    let auth = if with_token {
        " -H 'Authorization: Bearer AGENT_TOKEN'"
    } else {
        ""
    };
    format!(
        "curl -s {mcp_url} -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream'{auth} -d '{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"name\":\"approval_prepare\",\"arguments\":{{\"kind\":\"note.write\",\"payload\":{{\"text\":\"Hello from the agent\"}},\"summary\":\"Write a greeting\"}}}}}}'"
    )
}

/// The banner printed once the demo listens.
pub fn banner(
    mcp_url: &str,
    api_url: &str,
    keys: &Path,
    source: &ConfigSource,
    data: &Path,
) -> String {
    let k = keys.display();
    let policies = if source.embedded_policies.is_some() {
        format!(
            "Policies: {BUILT_IN} (no ./policies folder here; start with --policies DIR to use and reload your own)."
        )
    } else {
        format!(
            "Policies: {}/*.toml. Edit one, then `kill -HUP {}` reloads it (open proposals of a changed kind end POLICY_CHANGED).",
            source.policies.display(),
            std::process::id()
        )
    };
    let token_note = if source.agents.is_some() {
        "   (with --agents: replace AGENT_TOKEN by a token from `approval-server agent add NAME`)"
    } else {
        ""
    };
    let mut lines: Vec<String> = vec![
        String::new(),
        "=====================================================================".into(),
        format!(" DEMO MODE. The approvers' SECRET keys are in {k}/ next to the server."),
        " Real keys never live beside the server: each approver makes their own".into(),
        " with `signer-cli keygen` on their own laptop and sends you the public line.".into(),
        "=====================================================================".into(),
        String::new(),
        "1. Propose as an agent would (in a second terminal):".into(),
        format!("     {}", propose_command(mcp_url, source.agents.is_some())),
        "   or connect an agent (Claude Code) and ask it to write a note through the gate:".into(),
        format!("     claude mcp add --transport http approval {mcp_url}"),
        String::new(),
        "2. Approve as two humans (carol is required by the note.write policy); with".into(),
        "   one pending proposal the id may be left out, or given as a unique prefix:".into(),
        format!("     signer-cli --server {api_url} --key {k}/alice.key pending"),
        format!("     signer-cli --server {api_url} --key {k}/alice.key show ID"),
        format!("     signer-cli --server {api_url} --key {k}/alice.key approve ID"),
        format!("     signer-cli --server {api_url} --key {k}/carol.key approve ID"),
        String::new(),
        "3. The agent's approval_status turns executable; approval_execute runs it once.".into(),
        String::new(),
        policies,
        "Port taken? Start with --listen 127.0.0.1:4801 (any free address).".into(),
        // Issue #36: a newcomer who moves on to `serve` at this address with another
        // data folder met SERVER IDENTITY CHANGED without warning. The refusal is right
        // (signer-cli pins the identity per URL); the banner says it will happen.
        format!(
            "Moving on to `serve` at {api_url}? With another --data than {} it has another \
             identity ({}/{}), and signer-cli refuses it (SERVER IDENTITY CHANGED) until you \
             check its key and run `signer-cli --server {api_url} trust-server`.",
            data.display(),
            data.display(),
            crate::identity::KEY_FILE
        ),
    ];
    if !token_note.is_empty() {
        lines.insert(9, token_note.into());
    }
    lines.join("\n")
}
