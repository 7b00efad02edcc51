//! `--ssh-agent` against a real OpenSSH agent (issue #35): `ssh-agent -D -a <socket>`,
//! a key made by `ssh-keygen` and added with `ssh-add`, a decision signed through
//! the agent and verified by core; then the key removed with `ssh-add -d`, and
//! signing refused with an error naming the agent and the key.
//!
//! Without OpenSSH's client tools on the PATH the test says so in one line and
//! passes, or fails under `APPROVAL_TEST_REQUIRE_ALL` (`.ci/run` installs them).

use approval_core::keyring::{ApproverKey, Keyring};
use approval_core::{ApproverName, Decision, Sha256Hex};
use signer_cli::ssh_agent::{parse_key_line, sign_decision};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The agent process, ended when the test ends however it ends.
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("the OpenSSH tools are installed");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// OpenSSH's three programs, or `None` after the one `skipped:` line.
fn openssh() -> Option<[PathBuf; 3]> {
    let why = "to sign a decision through a real OpenSSH agent";
    let hint = "apt-get install openssh-client";
    Some([
        approval_test_require::require("ssh-agent", why, hint)?,
        approval_test_require::require("ssh-keygen", why, hint)?,
        approval_test_require::require("ssh-add", why, hint)?,
    ])
}

fn start_agent(ssh_agent: &Path, sock: &Path) -> Agent {
    let child = Command::new(ssh_agent)
        .arg("-D")
        .arg("-a")
        .arg(sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ssh-agent is installed");
    let agent = Agent(child);
    let start = Instant::now();
    while !sock.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "ssh-agent did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    agent
}

#[test]
fn a_decision_signed_through_a_real_ssh_agent_verifies_and_a_removed_key_is_named() {
    let Some([ssh_agent, ssh_keygen, ssh_add]) = openssh() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("agent.sock");
    let key = dir.path().join("id_ed25519");
    let _agent = start_agent(&ssh_agent, &sock);
    run(Command::new(&ssh_keygen)
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "alice@laptop", "-f"])
        .arg(&key));
    run(Command::new(&ssh_add).env("SSH_AUTH_SOCK", &sock).arg(&key));
    let pub_line = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let ssh_key = parse_key_line(&pub_line).unwrap();
    // The keyring line takes the key without its comment.
    let kr = Keyring::parse(&format!("alice {}\n", ssh_key.to_fields())).unwrap();
    let alice = ApproverName::parse("alice").unwrap();
    let cred = kr.credentials(&alice)[0].clone();
    assert_eq!(cred, ApproverKey::Ssh(ssh_key.clone()));

    let h = Sha256Hex::digest(b"preview");
    let d = sign_decision(
        &sock,
        &ssh_key,
        alice.clone(),
        Decision::Approve,
        &h,
        "looks right",
    )
    .unwrap();
    assert_eq!(d.verify(&cred, &h).unwrap().sign_count, None);
    let wire = serde_json::to_value(&d).unwrap();
    assert!(wire["sshsig"].is_string() && wire.get("signature").is_none());
    let mut other = d.clone();
    other.decision = Decision::Reject;
    assert!(other.verify(&cred, &h).is_err());

    run(Command::new(&ssh_add)
        .env("SSH_AUTH_SOCK", &sock)
        .arg("-d")
        .arg(&key));
    let e = sign_decision(&sock, &ssh_key, alice, Decision::Approve, &h, "").unwrap_err();
    assert!(
        e.contains("ssh-agent at") && e.contains(&sock.display().to_string()),
        "{e}"
    );
    assert!(
        e.contains(&ssh_key.fingerprint()) && e.contains("ssh-add"),
        "{e}"
    );

    // No agent at all: named too.
    let gone = dir.path().join("none.sock");
    let e = sign_decision(
        &gone,
        &ssh_key,
        ApproverName::parse("alice").unwrap(),
        Decision::Approve,
        &h,
        "",
    )
    .unwrap_err();
    assert!(e.contains("cannot reach the ssh-agent"), "{e}");
}
