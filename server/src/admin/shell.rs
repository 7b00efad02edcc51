//! `approval-server completions SHELL` and `approval-server man --out DIR`: shell
//! completions and man pages made from the same clap definition `--help` reads, so
//! they name every subcommand and flag of this build and cannot drift from it.
//!
//! Written with `clap_complete` and `clap_mangen`, both kept in clap's own
//! repository and released with it.

use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The flags of `completions`.
#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// The flags of `man`.
#[derive(clap::Args)]
pub struct ManArgs {
    /// Folder to write the pages into (made if missing), e.g.
    /// ~/.local/share/man/man1; a page of the same name is replaced.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// Prints the completion script for `args.shell` on stdout.
pub fn completions(args: CompletionsArgs, mut cmd: clap::Command) -> anyhow::Result<ExitCode> {
    let name = cmd.get_name().to_owned();
    // Made in memory: the generator panics on a failed write (`| head`).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, name, &mut script);
    use std::io::Write;
    match std::io::stdout().lock().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// Writes one page per command and subcommand (`approval-server-audit-verify.1`).
pub fn man(args: ManArgs, cmd: clap::Command) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot make {}", args.out.display()))?;
    clap_mangen::generate_to(cmd, &args.out)
        .with_context(|| format!("cannot write the man pages into {}", args.out.display()))?;
    let n = pages(&args.out)?;
    println!(
        "ok: {n} man pages in {} (read one with man -l {}/approval-server.1)",
        args.out.display(),
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn pages(dir: &Path) -> anyhow::Result<usize> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("approval-server") && n.ends_with(".1")
        })
        .count())
}
