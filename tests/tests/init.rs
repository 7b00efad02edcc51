//! `approval-server init` on the real binary (issue #36 part 4): a folder a newcomer
//! can fill in. With `--approver NAME` (repeated) the example policy names those
//! approvers, so adding their keyring lines is all `check` waits for; without it the
//! policy says what to fill in, and `check` refuses it saying so. Nothing that exists
//! is ever overwritten, and the gate runs on the folder.

use anyhow::Result;
use approval_e2e::{approval_server, CliOutput, McpClient, Stdio, World};
use serde_json::json;
use std::ffi::OsStr;
use std::path::Path;

/// `approval-server check --policies DIR/policies --keys DIR/keys`.
fn check(dir: &Path) -> Result<CliOutput> {
    approval_server(&[
        "check".as_ref(),
        "--policies".as_ref(),
        dir.join("policies").as_os_str(),
        "--keys".as_ref(),
        dir.join("keys").as_os_str(),
    ])
}

/// Appends the lines of `w`'s keyring (made by `signer-cli keygen`) to `DIR/keys`.
fn add_keys(dir: &Path, w: &World) -> Result<()> {
    let kf = dir.join("keys");
    let mut text = std::fs::read_to_string(&kf)?;
    text.push_str(&std::fs::read_to_string(&w.keys)?);
    std::fs::write(&kf, text)?;
    Ok(())
}

#[tokio::test]
async fn init_with_approvers_then_their_keys_makes_check_pass_and_the_gate_runs() -> Result<()> {
    let w = World::new(&["alice", "bob"])?;
    let dir = w.path().join("gate");
    let d: &OsStr = dir.as_ref();
    let out = approval_server(&[
        "init".as_ref(),
        d,
        "--approver".as_ref(),
        "alice".as_ref(),
        "--approver".as_ref(),
        "bob".as_ref(),
    ])?;
    assert!(out.status.success(), "{out}");
    assert!(out.stdout.contains("Each approver (alice, bob)"), "{out}");
    let policy = std::fs::read_to_string(dir.join("policies/note.write.toml"))?;
    assert!(
        policy.contains(r#"approvers = ["alice", "bob"]"#),
        "{policy}"
    );
    assert!(policy.contains("quorum = 2"), "{policy}");
    assert!(policy.contains("<data>/sandbox"), "{policy}");

    // Before the keys are added, `check` names the missing approvers.
    let first = check(&dir)?;
    assert!(!first.status.success(), "{first}");
    assert!(
        first
            .stderr
            .contains("approver \"alice\", \"bob\" is not in the keyring")
            && first.stderr.contains("signer-cli keygen"),
        "{first}"
    );

    // With the approvers' lines added, nothing else to edit: it passes.
    add_keys(&dir, &w)?;
    let ok = check(&dir)?;
    assert!(ok.status.success(), "{ok}");
    assert!(ok.stdout.contains("note.write (2 of 2)"), "{ok}");

    // And the gate runs on the folder.
    let s = Stdio::spawn_args(
        &[
            "--data".into(),
            dir.join("data").into(),
            "--policies".into(),
            dir.join("policies").into(),
            "--keys".into(),
            dir.join("keys").into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ],
        &[],
    )?;
    s.initialize().await?;
    s.prepare("note.write", json!({"text": "from init"}), "")
        .await?
        .expect("PENDING_QUORUM", false);
    assert!(s.close().await?.success());
    Ok(())
}

#[test]
fn init_without_approvers_writes_a_policy_that_check_refuses_saying_what_to_fill_in() -> Result<()>
{
    let w = World::new(&["alice"])?;
    let dir = w.path().join("gate");
    let out = approval_server(&["init".as_ref(), dir.as_os_str()])?;
    assert!(out.status.success(), "{out}");
    let policy = std::fs::read_to_string(dir.join("policies/note.write.toml"))?;
    assert!(
        policy.contains("FILL IN") && policy.contains("approvers = []"),
        "{policy}"
    );
    // Keys alone do not make a policy: `check` says what is missing, and where.
    add_keys(&dir, &w)?;
    let e = check(&dir)?;
    assert!(!e.status.success(), "{e}");
    assert!(
        e.stderr.contains("note.write.toml:") && e.stderr.contains("approvers is empty"),
        "{e}"
    );
    assert!(e.stderr.contains("signer-cli keygen"), "{e}");
    // Filled in as the comment says, it passes.
    let pf = dir.join("policies/note.write.toml");
    std::fs::write(
        &pf,
        policy
            .replace("approvers = []", r#"approvers = ["alice"]"#)
            .replace("quorum = 0", "quorum = 1"),
    )?;
    let ok = check(&dir)?;
    assert!(ok.status.success(), "{ok}");
    assert!(ok.stdout.contains("note.write (1 of 1)"), "{ok}");
    Ok(())
}

#[test]
fn init_never_overwrites_and_refuses_a_bad_or_repeated_approver() -> Result<()> {
    let w = World::new(&[])?;
    let dir = w.path().join("gate");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("agents"), "# mine\n")?;
    let d: &OsStr = dir.as_ref();
    let out = approval_server(&["init".as_ref(), d, "--approver".as_ref(), "carol".as_ref()])?;
    assert!(out.status.success(), "{out}");
    assert!(out.stdout.contains("kept"), "{out}");
    assert!(out.stdout.contains("approval-server stdio --data"), "{out}");
    assert_eq!(std::fs::read_to_string(dir.join("agents"))?, "# mine\n");
    let policy = std::fs::read_to_string(dir.join("policies/note.write.toml"))?;
    let keys = std::fs::read_to_string(dir.join("keys"))?;
    assert!(keys.contains("signer-cli keygen"), "{keys}");

    // A second init keeps every file, edited or not, and says the names were not written.
    std::fs::write(dir.join("keys"), format!("{keys}# edited\n"))?;
    let again = approval_server(&["init".as_ref(), d, "--approver".as_ref(), "dave".as_ref()])?;
    assert!(again.status.success(), "{again}");
    assert!(!again.stdout.contains("created"), "{again}");
    assert!(
        again.stdout.contains("the --approver names are not in it"),
        "{again}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("policies/note.write.toml"))?,
        policy
    );
    assert!(std::fs::read_to_string(dir.join("keys"))?.ends_with("# edited\n"));

    // Names are checked before anything is written.
    let fresh = w.path().join("fresh");
    for bad in [
        &["--approver", "a b"][..],
        &["--approver", "eve", "--approver", "eve"][..],
    ] {
        let mut args: Vec<&OsStr> = vec!["init".as_ref(), fresh.as_os_str()];
        args.extend(bad.iter().map(OsStr::new));
        let e = approval_server(&args)?;
        assert!(!e.status.success(), "{bad:?}: {e}");
        assert!(e.stderr.contains("approver"), "{bad:?}: {e}");
        assert!(!fresh.exists(), "{bad:?}: {e}");
    }
    Ok(())
}
