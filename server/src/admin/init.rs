//! `approval-server init [DIR]`: a deployment folder for a newcomer past the demo.
//!
//! Writes a commented example policy, a keyring with no keys that says how to add
//! approvers, and an agents file with no agents; then says what to run next.
//! Nothing that exists is ever overwritten: an existing file is kept and named.

use anyhow::Context;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The example policy (`policies/note.write.toml`).
pub const EXAMPLE_POLICY: &str = r#"# One file per action kind. The agent proposes `kind` with a payload; the people in
# `approvers` see the exact payload and sign it; at `quorum` signatures the agent may
# execute it once. Check the whole folder with `approval-server check`.
kind = "note.write"
description = "Write a note into the data folder's sandbox (an example action)"

# Who may approve (names from the keyring file `keys`) and how many must.
# Replace alice and bob with your approvers once they are in `keys`.
approvers = ["alice", "bob"]
quorum = 2
vetoes = 1                      # one rejection ends the proposal
ttl = "30m"                     # how long a proposal may wait for its quorum
execute_within = "10m"          # how long an approval stays executable
max_payload_bytes = 65536

# The payload the agent must send, as JSON Schema: anything else is refused before
# anyone is asked to sign it.
[payload_schema]
type = "object"
required = ["text"]
additionalProperties = false
[payload_schema.properties.text]
type = "string"
maxLength = 10000

# What runs once approved. `note` writes a file under <data>/notes; see the README
# for `webhook` and `command`.
[executor]
type = "note"
"#;

/// The keyring with no approvers yet.
pub const EMPTY_KEYRING: &str = r#"# Approvers' public keys: one `<name> ed25519 <base64 public key>` line each.
# Each approver makes a key on their own machine (the secret never leaves it):
#   signer-cli keygen --name alice --out alice.key
# and sends you the line it prints; append it here, then run `approval-server check`.
# A running server reads this file again on SIGHUP.
"#;

/// The agents file with no agents yet.
pub const EMPTY_AGENTS: &str = r#"# Agents allowed on /mcp: one `<name> <sha256 of token>` line each, never the token.
# Add one with `approval-server agent add NAME --agents agents` (it prints the token once)
# and start the server with `--agents agents`. Without --agents, only clients on this
# machine are served, as the agent `local`.
"#;

/// What `init` did with one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Written.
    Created(PathBuf),
    /// Already there: left as it was.
    Kept(PathBuf),
}

fn write_new(path: &Path, text: &str, private: bool) -> anyhow::Result<Outcome> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    match opts.open(path) {
        Ok(mut f) => {
            f.write_all(text.as_bytes())
                .and_then(|_| f.sync_all())
                .with_context(|| format!("cannot write {}", path.display()))?;
            Ok(Outcome::Created(path.to_path_buf()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok(Outcome::Kept(path.to_path_buf()))
        }
        Err(e) => Err(e).with_context(|| format!("cannot create {}", path.display())),
    }
}

/// Scaffolds `dir`; returns what happened to each file.
pub fn scaffold(dir: &Path) -> anyhow::Result<Vec<Outcome>> {
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies)
        .with_context(|| format!("cannot create {}", policies.display()))?;
    Ok(vec![
        write_new(&policies.join("note.write.toml"), EXAMPLE_POLICY, false)?,
        write_new(&dir.join("keys"), EMPTY_KEYRING, false)?,
        write_new(&dir.join("agents"), EMPTY_AGENTS, true)?,
    ])
}

/// What to run next, for a folder at `dir`.
pub fn next_steps(dir: &Path) -> String {
    let d = dir.display();
    // A host launches `stdio` from its own working folder: give it absolute paths.
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let a = abs.display();
    format!(
        "Next:
  1. Each approver, on their own machine:  signer-cli keygen --name alice --out alice.key
     and sends you the line it prints; append it to {d}/keys (and name them in the policy).
  2. Check the folder:                     approval-server check --policies {d}/policies --keys {d}/keys
  3. Run the gate, either as a service:    approval-server serve --data {d}/data --policies {d}/policies --keys {d}/keys
     or launched by an MCP host over stdio:
       claude mcp add approval -- approval-server stdio --data {a}/data --policies {a}/policies --keys {a}/keys
  4. Approvers sign at the \"Approver API\" address it prints:
       signer-cli --server http://127.0.0.1:4800 --key alice.key pending"
    )
}

/// The flags of `init`.
#[derive(clap::Args)]
pub struct InitArgs {
    /// Folder to fill (created if missing).
    #[arg(default_value = ".")]
    dir: PathBuf,
}

/// `init`: scaffolds the folder and says what was made, what was kept and what next.
pub fn run(args: InitArgs) -> anyhow::Result<ExitCode> {
    for o in scaffold(&args.dir)? {
        match o {
            Outcome::Created(p) => println!("created {}", p.display()),
            Outcome::Kept(p) => println!("kept {} (it exists; not overwritten)", p.display()),
        }
    }
    println!("{}", next_steps(&args.dir));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaffold_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keys"), "mine\n").unwrap();
        let out = scaffold(dir.path()).unwrap();
        assert_eq!(out[1], Outcome::Kept(dir.path().join("keys")));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("keys")).unwrap(),
            "mine\n"
        );
        assert!(matches!(out[0], Outcome::Created(_)));
        let again = scaffold(dir.path()).unwrap();
        assert!(again.iter().all(|o| matches!(o, Outcome::Kept(_))));
    }

    #[test]
    fn the_scaffolded_files_parse() {
        assert!(approval_core::Keyring::parse(EMPTY_KEYRING)
            .unwrap()
            .is_empty());
        crate::agents::Agents::parse(EMPTY_AGENTS).unwrap();
    }
}
