//! Shell completions and man pages for both binaries (issue #36 part 3), on the
//! real binaries: every subcommand `--help` lists is named by the bash, zsh and
//! fish scripts, `man --out DIR` writes one page per (sub)command, and each page,
//! read by `man -l` where man is installed (else by its roff text), shows the
//! subcommand's flags.

use anyhow::{bail, ensure, Context, Result};
use approval_e2e::{bin, CliOutput};
use std::path::Path;
use std::process::Command;

fn out(program: &str, args: &[&str]) -> Result<CliOutput> {
    Ok(Command::new(bin(program)).args(args).output()?.into())
}

/// The subcommands `--help` lists (the lines under `Commands:`), without `help`.
fn subcommands(program: &str, path: &[&str]) -> Result<Vec<String>> {
    let mut args: Vec<&str> = path.to_vec();
    args.push("--help");
    let help = out(program, &args)?;
    ensure!(help.status.success(), "{help}");
    let mut names = Vec::new();
    let mut inside = false;
    for line in help.stdout.lines() {
        if line.starts_with("Commands:") {
            inside = true;
            continue;
        }
        if inside {
            if !line.starts_with("  ") {
                break;
            }
            if let Some(name) = line.split_whitespace().next() {
                if name != "help" && line.starts_with("  ") && !line.starts_with("   ") {
                    names.push(name.to_owned());
                }
            }
        }
    }
    ensure!(!names.is_empty(), "no commands in {program} --help");
    Ok(names)
}

fn every_subcommand_is_completed(program: &str) -> Result<()> {
    let subs = subcommands(program, &[])?;
    for shell in ["bash", "zsh", "fish"] {
        let script = out(program, &["completions", shell])?;
        ensure!(
            script.status.success(),
            "{program} completions {shell}: {script}"
        );
        for s in &subs {
            ensure!(
                script.stdout.contains(s.as_str()),
                "{program}'s {shell} completion does not name {s}"
            );
        }
    }
    // bash reads the script without a syntax error.
    let script = out(program, &["completions", "bash"])?;
    let bash = Command::new("bash")
        .args(["-n", "-c", &script.stdout])
        .output()
        .context("bash")?;
    ensure!(
        bash.status.success(),
        "{}",
        String::from_utf8_lossy(&bash.stderr)
    );
    Ok(())
}

/// What `man -l` shows of a page, or its roff source where man is not installed.
fn read_page(page: &Path) -> Result<String> {
    match Command::new("man")
        .arg("-l")
        .arg(page)
        .env("MANPAGER", "cat")
        .env("COLUMNS", "200")
        .output()
    {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => bail!(
            "man -l {} failed: {}",
            page.display(),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(_) => {
            if std::env::var_os("APPROVAL_TEST_REQUIRE_ALL").is_some() {
                bail!("man is not installed (install man-db)");
            }
            eprintln!("skipped: reading pages with man -l (install man-db); read as roff");
            Ok(std::fs::read_to_string(page)?.replace("\\-", "-"))
        }
    }
}

fn every_subcommand_has_a_page_with_its_flags(
    program: &str,
    cases: &[(&[&str], &str)],
) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let pages = dir.path().join("man1");
    let made = out(program, &["man", "--out", pages.to_str().context("path")?])?;
    ensure!(made.status.success(), "{made}");
    println!("{}", made.stdout.trim());
    for s in subcommands(program, &[])? {
        let page = pages.join(format!("{program}-{s}.1"));
        ensure!(page.is_file(), "no page {}", page.display());
    }
    let top = read_page(&pages.join(format!("{program}.1")))?;
    ensure!(
        top.contains(program),
        "the top page does not name {program}"
    );
    for (path, flag) in cases {
        let page = pages.join(format!("{program}-{}.1", path.join("-")));
        let text = read_page(&page)?;
        ensure!(
            text.contains(flag),
            "{} does not show {flag}:\n{text}",
            page.display()
        );
    }
    Ok(())
}

#[test]
fn approval_server_completions_name_every_subcommand() -> Result<()> {
    every_subcommand_is_completed("approval-server")
}

#[test]
fn signer_cli_completions_name_every_subcommand() -> Result<()> {
    every_subcommand_is_completed("signer-cli")
}

#[test]
fn approval_server_has_a_man_page_per_subcommand_with_its_flags() -> Result<()> {
    every_subcommand_has_a_page_with_its_flags(
        "approval-server",
        &[
            (&["serve"], "--metrics-listen"),
            (&["backup"], "--out"),
            (&["restore"], "--data"),
            (&["audit", "verify"], "--store"),
        ],
    )?;
    // Nested subcommands have pages too.
    for s in subcommands("approval-server", &["audit"])? {
        ensure!(
            ["verify", "export"].contains(&s.as_str()),
            "unexpected audit {s}"
        );
    }
    Ok(())
}

#[test]
fn signer_cli_has_a_man_page_per_subcommand_with_its_flags() -> Result<()> {
    every_subcommand_has_a_page_with_its_flags(
        "signer-cli",
        &[
            (&["approve"], "--reason"),
            (&["keygen"], "--out"),
            (&["ui"], "--listen"),
        ],
    )
}
