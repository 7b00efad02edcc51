//! `approval-server import-tools --tool NAME --pass-through NAME` (issue #36 part 4)
//! against a real third-party MCP server, the reference filesystem server from npm:
//! only the named tools become gated kinds, the pass-through tools are written into
//! one policy, a name the server does not offer or a tool both gated and passed
//! through is refused, and the `check` command it prints runs as printed, from the
//! folder it ran in, once the approvers are filled in.
//!
//! It needs node and npm; without them it prints one line saying it is skipped,
//! unless `APPROVAL_TEST_REQUIRE_ALL` is set (as in CI), where that is a failure.

use anyhow::{Context, Result};
use approval_e2e::{bin, filesystem_server, CliOutput, McpClient, World};
use std::path::Path;
use std::process::{Command, Stdio};

/// `approval-server ARGS...` run in `dir`, as an operator would from a shell there.
fn server_in(dir: &Path, args: &[&str]) -> Result<CliOutput> {
    let out = Command::new(bin("approval-server"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .context("cannot run approval-server")?;
    Ok(out.into())
}

/// The line of `out` that starts with `prefix`, its leading spaces removed.
fn printed<'a>(out: &'a CliOutput, prefix: &str) -> Result<&'a str> {
    out.stdout
        .lines()
        .map(str::trim_start)
        .find(|l| l.starts_with(prefix))
        .with_context(|| format!("no line starting {prefix:?} in:\n{out}"))
}

#[tokio::test]
async fn import_tools_gates_the_named_tools_and_its_printed_check_runs_as_printed() -> Result<()> {
    // Without node and npm, filesystem_server has printed the one `skipped:` line.
    let Some(index) = filesystem_server()? else {
        return Ok(());
    };
    let w = World::new(&["alice", "bob"])?;
    let allowed = w.path().join("allowed");
    std::fs::create_dir_all(&allowed)?;
    let (index, allowed) = (index.display().to_string(), allowed.display().to_string());
    let import = |extra: &[&str]| {
        let mut args = vec!["import-tools", "--out", "policies", "--prefix", "fs"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--keys", "keyring", "--command", "node", &index, &allowed]);
        server_in(w.path(), &args)
    };

    // A name the server does not offer is refused, naming what it offers; nothing is written.
    let unknown = import(&["--tool", "write_fil"])?;
    assert!(!unknown.status.success(), "{unknown}");
    assert!(
        unknown
            .stderr
            .contains("the server offers no such tool: --tool \"write_fil\"; it offers: "),
        "{unknown}"
    );
    assert!(unknown.stderr.contains("write_file"), "{unknown}");
    assert!(unknown.stderr.contains("read_text_file"), "{unknown}");
    // A pass-through tool cannot also be gated.
    let both = import(&["--tool", "write_file", "--pass-through", "write_file"])?;
    assert!(!both.status.success(), "{both}");
    assert!(
        both.stderr
            .contains("\"write_file\" is given both as --tool and as --pass-through"),
        "{both}"
    );
    assert_eq!(
        std::fs::read_dir(&w.policies)?.count(),
        0,
        "a refusal wrote"
    );

    let run = import(&[
        "--tool",
        "write_file",
        "--tool",
        "edit_file",
        "--pass-through",
        "read_text_file",
        "--pass-through",
        "list_directory",
    ])?;
    assert!(run.status.success(), "{run}");
    assert!(
        run.stdout.starts_with(
            "wrote policies/fs.write_file.toml (pass_through: read_text_file, list_directory)\n\
             wrote policies/fs.edit_file.toml\n\
             2 new policies in policies\n"
        ),
        "{run}"
    );
    let mut files: Vec<String> = std::fs::read_dir(&w.policies)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    files.sort();
    assert_eq!(files, ["fs.edit_file.toml", "fs.write_file.toml"]);
    let edit = std::fs::read_to_string(w.policies.join("fs.edit_file.toml"))?;
    assert!(edit.contains("\n# pass_through = "), "{edit}");

    // The human step the output asks for, then its check command exactly as printed.
    for f in &files {
        let path = w.policies.join(f);
        let text = std::fs::read_to_string(&path)?
            .replace("approvers = []", "approvers = [\"alice\", \"bob\"]")
            .replace("quorum = 0", "quorum = 2");
        std::fs::write(&path, text)?;
    }
    let check_line = printed(&run, "approval-server check ")?;
    assert_eq!(
        check_line,
        "approval-server check --policies policies --keys keyring"
    );
    let words: Vec<&str> = check_line.split_whitespace().collect();
    let check = server_in(w.path(), &words[1..])?;
    assert!(check.status.success(), "{check}");
    assert_eq!(
        check.stdout,
        "ok: 2 approver(s) in keyring; 2 polic(ies) in policies: fs.edit_file (2 of 2), fs.write_file (2 of 2)\n",
        "{check}"
    );
    // The serve line names the same folders; started on a free port (the printed
    // default, 4800, may be taken here), agents see the gated and pass-through tools.
    assert_eq!(
        printed(&run, "approval-server serve ")?,
        "approval-server serve --data data --policies policies --keys keyring"
    );
    let server = w.start()?;
    let mcp = server.mcp().await?;
    let mut names: Vec<String> = mcp
        .list_tools()
        .await?
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .filter(|n| !n.starts_with("approval_"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "fs.edit_file",
            "fs.write_file",
            "list_directory",
            "read_text_file"
        ]
    );

    // Run again with one more tool: nothing is overwritten, and a name already passed
    // through is not written into the new policy (one name in two would refuse the load).
    let again = import(&[
        "--tool",
        "write_file",
        "--tool",
        "move_file",
        "--pass-through",
        "read_text_file",
    ])?;
    assert!(again.status.success(), "{again}");
    assert!(
        again.stdout.starts_with(
            "kept policies/fs.write_file.toml (exists; not overwritten)\n\
             wrote policies/fs.move_file.toml\n\
             \"read_text_file\" already passes through in policies/fs.write_file.toml\n\
             1 new policy in policies\n"
        ),
        "{again}"
    );
    let moved = std::fs::read_to_string(w.policies.join("fs.move_file.toml"))?;
    assert!(moved.contains("\n# pass_through = "), "{moved}");

    // A tool an earlier policy passes through cannot be gated beside that list (agents
    // would still call it without approval); the default sweep skips it, saying why.
    let gate_passed = import(&["--tool", "read_text_file"])?;
    assert!(!gate_passed.status.success(), "{gate_passed}");
    assert!(
        gate_passed
            .stderr
            .contains("--tool \"read_text_file\" is passed through (called without approval) by"),
        "{gate_passed}"
    );
    assert!(!w.policies.join("fs.read_text_file.toml").exists());
    let sweep = import(&[])?;
    assert!(
        sweep
            .stdout
            .contains("skipped tool \"read_text_file\": passed through by"),
        "{sweep}"
    );
    assert!(!w.policies.join("fs.read_text_file.toml").exists());
    Ok(())
}
