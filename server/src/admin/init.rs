//! `approval-server init [DIR]`: a deployment folder for a newcomer past the demo.
//!
//! Writes a commented example policy, a keyring with no keys that says how to add
//! approvers, and an agents file with no agents; then says what to run next.
//! Nothing that exists is ever overwritten: an existing file is kept and named.

use anyhow::Context;
use approval_core::ApproverName;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The example policy (`policies/note.write.toml`) naming `approvers`, or, with
/// none, one that says what to fill in and that `check` refuses until it is.
///
/// Why these numbers: the quorum is every approver up to two. One approver is their
/// own quorum; two must both sign; from three on any two, so no one approves alone
/// and one absent approver does not block the others. The comment says so, so the
/// operator can change it knowingly.
pub fn example_policy(approvers: &[ApproverName]) -> String {
    let who = match approvers.len() {
        0 => {
            r#"# Who may approve, and how many must. FILL IN both, then run `approval-server check`
# (it refuses this file until you do):
# - approvers: your approvers' names as in the keyring file `keys` (each approver runs
#   `signer-cli keygen --name NAME` on their own machine and sends you the line),
#   e.g. approvers = ["alice", "bob"];
# - quorum: how many of them must sign, e.g. 2, so that no one approves alone.
# (`approval-server init --approver alice --approver bob` writes both for you.)
approvers = []
quorum = 0
vetoes = 1                      # one rejection ends the proposal"#
                .to_owned()
        }
        n => {
            let names = approvers
                .iter()
                .map(|a| format!("\"{a}\""))
                .collect::<Vec<_>>()
                .join(", ");
            let why = match n {
                1 => "with one approver, their signature is the quorum; add a second\n# approver and set quorum = 2 so that no one approves alone".to_owned(),
                2 => "both must sign, so no one approves alone".to_owned(),
                n => format!("any two of the {n} must sign: no one approves alone, and one\n# absent approver does not hold the others up"),
            };
            format!(
                "# Who may approve (names from the keyring file `keys`: add each one's line from\n\
                 # `signer-cli keygen` there) and how many must. `init` chose the quorum as every\n\
                 # approver up to two: {why}.\n\
                 approvers = [{names}]\n\
                 quorum = {}\n\
                 vetoes = 1                      # one rejection ends the proposal",
                n.min(2)
            )
        }
    };
    format!(
        r#"# One file per action kind. The agent proposes `kind` with a payload; the people in
# `approvers` see the exact payload and sign it; at `quorum` signatures the agent may
# execute it once. Check the whole folder with `approval-server check`.
kind = "note.write"
description = "Write a note into the data folder's sandbox (an example action)"

{who}
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

# What runs once approved. `note` writes one file per proposal, <id>.txt, under
# <data>/{note_dir} (or under `dir = "/some/folder"` set here); see the README for
# `webhook` and `command`.
[executor]
type = "note"
"#,
        note_dir = crate::executor::NOTE_DIR
    )
}

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

/// Scaffolds `dir` with a policy naming `approvers`; returns what happened to each
/// file (the policy first).
pub fn scaffold(dir: &Path, approvers: &[ApproverName]) -> anyhow::Result<Vec<Outcome>> {
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies)
        .with_context(|| format!("cannot create {}", policies.display()))?;
    Ok(vec![
        write_new(
            &policies.join("note.write.toml"),
            &example_policy(approvers),
            false,
        )?,
        write_new(&dir.join("keys"), EMPTY_KEYRING, false)?,
        write_new(&dir.join("agents"), EMPTY_AGENTS, true)?,
    ])
}

/// What to run next, for a folder at `dir` whose policy names `approvers`.
pub fn next_steps(dir: &Path, approvers: &[ApproverName]) -> String {
    let d = dir.display();
    // A host launches `stdio` from its own working folder: give it absolute paths.
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let a = abs.display();
    let (first, who, name_them) = match approvers.first() {
        Some(f) => (
            f.as_str(),
            format!(
                "Each approver ({}),",
                approvers
                    .iter()
                    .map(ApproverName::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            String::new(),
        ),
        None => (
            "alice",
            "Each approver,".to_owned(),
            format!(" and name them in {d}/policies/note.write.toml (approvers, quorum)"),
        ),
    };
    format!(
        "Next:
  1. {who} on their own machine:  signer-cli keygen --name {first} --out {first}.key
     and sends you the line it prints; append it to {d}/keys{name_them}.
  2. Check the folder:                     approval-server check --policies {d}/policies --keys {d}/keys
  3. Run the gate, either as a service:    approval-server serve --data {d}/data --policies {d}/policies --keys {d}/keys
     or launched by an MCP host over stdio:
       claude mcp add approval -- approval-server stdio --data {a}/data --policies {a}/policies --keys {a}/keys
  4. Approvers sign at the \"Approver API\" address it prints:
       signer-cli --server http://127.0.0.1:4800 --key {first}.key pending"
    )
}

/// The flags of `init`.
#[derive(clap::Args)]
pub struct InitArgs {
    /// Folder to fill (created if missing).
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// An approver the example policy names, as in the keyring (repeat it for each:
    /// --approver alice --approver bob); the quorum is all of them up to two.
    /// Without it, the policy says what to fill in, and `check` refuses it until then.
    #[arg(long = "approver", value_name = "NAME")]
    approvers: Vec<ApproverName>,
}

/// `init`: scaffolds the folder and says what was made, what was kept and what next.
pub fn run(args: InitArgs) -> anyhow::Result<ExitCode> {
    let InitArgs { dir, approvers } = args;
    if let Some(twice) = approvers
        .iter()
        .enumerate()
        .find_map(|(i, a)| approvers[..i].contains(a).then_some(a))
    {
        anyhow::bail!("--approver {twice} is given twice: name each approver once");
    }
    for (i, o) in scaffold(&dir, &approvers)?.into_iter().enumerate() {
        match o {
            Outcome::Created(p) => println!("created {}", p.display()),
            Outcome::Kept(p) if i == 0 && !approvers.is_empty() => println!(
                "kept {} (it exists; not overwritten, so the --approver names are not in it: edit its approvers and quorum yourself)",
                p.display()
            ),
            Outcome::Kept(p) => println!("kept {} (it exists; not overwritten)", p.display()),
        }
    }
    println!("{}", next_steps(&dir, &approvers));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaffold_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keys"), "mine\n").unwrap();
        let out = scaffold(dir.path(), &[]).unwrap();
        assert_eq!(out[1], Outcome::Kept(dir.path().join("keys")));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("keys")).unwrap(),
            "mine\n"
        );
        assert!(matches!(out[0], Outcome::Created(_)));
        let again = scaffold(dir.path(), &[]).unwrap();
        assert!(again.iter().all(|o| matches!(o, Outcome::Kept(_))));
    }

    fn names(n: &[&str]) -> Vec<ApproverName> {
        n.iter().map(|a| ApproverName::parse(a).unwrap()).collect()
    }

    #[test]
    fn the_quorum_is_every_approver_up_to_two() {
        for (given, quorum) in [
            (&["alice"][..], 1),
            (&["alice", "bob"][..], 2),
            (&["alice", "bob", "carol"][..], 2),
        ] {
            let p = approval_core::Policy::parse_toml(
                "note.write.toml",
                &example_policy(&names(given)),
            )
            .unwrap();
            assert_eq!(p.spec().quorum, quorum, "{given:?}");
            assert_eq!(p.spec().approvers, names(given));
        }
    }

    #[test]
    fn without_approvers_the_policy_says_what_to_fill_in_and_is_refused_until_then() {
        let text = example_policy(&[]);
        assert!(text.contains("FILL IN"), "{text}");
        let e = approval_core::Policy::parse_toml("note.write.toml", &text).unwrap_err();
        assert!(e.message.contains("approvers is empty"), "{e}");
        assert_eq!(
            e.line,
            text.lines()
                .position(|l| l == "approvers = []")
                .map(|i| i + 1)
        );
    }

    #[test]
    fn the_scaffolded_files_parse() {
        assert!(approval_core::Keyring::parse(EMPTY_KEYRING)
            .unwrap()
            .is_empty());
        crate::agents::Agents::parse(EMPTY_AGENTS).unwrap();
    }
}
