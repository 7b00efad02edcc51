//! `approval-server demo`: the newcomer's start.
//!
//! Makes three demo approvers (alice, bob, carol) whose secret keys it writes to
//! `./demo-keys/`, loads the example policies built into the binary, and prints the
//! exact `signer-cli` commands to approve what an agent proposes. Real keys never
//! live beside the server; the demo says so loudly.

use anyhow::Context;
use approval_core::keyring::SecretKey;
use approval_core::{ApproverName, Keyring};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The example policies, built in so the demo runs from any folder.
pub const EXAMPLE_POLICIES: [(&str, &str); 2] = [
    (
        "note.write.toml",
        include_str!("../../policies/note.write.toml"),
    ),
    (
        "email.send.toml",
        include_str!("../../policies/email.send.toml"),
    ),
];

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

/// The banner printed once the demo listens.
pub fn banner(mcp_url: &str, api_url: &str, keys: &Path) -> String {
    let k = keys.display();
    [
        String::new(),
        "=====================================================================".into(),
        format!(" DEMO MODE. The approvers' SECRET keys are in {k}/ next to the server."),
        " Real keys never live beside the server: each approver makes their own".into(),
        " with `signer-cli keygen` on their own laptop and sends you the public line.".into(),
        "=====================================================================".into(),
        String::new(),
        "1. Connect an agent (Claude Code):".into(),
        format!("     claude mcp add --transport http approval {mcp_url}"),
        "   and ask it to write a note through the approval gate (kind \"note.write\").".into(),
        String::new(),
        "2. Approve as two humans (carol is required by the note.write policy):".into(),
        format!("     signer-cli --server {api_url} --key {k}/alice.key pending"),
        format!("     signer-cli --server {api_url} --key {k}/alice.key show ID"),
        format!("     signer-cli --server {api_url} --key {k}/alice.key approve ID"),
        format!("     signer-cli --server {api_url} --key {k}/carol.key approve ID"),
        String::new(),
        "3. The agent's approval_status turns executable; approval_execute runs it once.".into(),
    ]
    .join("\n")
}
