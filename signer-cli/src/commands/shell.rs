//! `signer-cli completions SHELL` and `signer-cli man --out DIR`: shell completions
//! and man pages made from the same clap definition `--help` reads, so they name
//! every command and flag of this build. Written with `clap_complete` and
//! `clap_mangen`, both kept in clap's own repository and released with it.

use anyhow::{Context, Result};
use std::path::Path;

/// Prints the completion script for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell, mut cmd: clap::Command) -> Result<()> {
    let name = cmd.get_name().to_owned();
    // Made in memory: the generator panics on a failed write (`| head`).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    use std::io::Write;
    match std::io::stdout().lock().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Writes one page per command (`signer-cli-approve.1`) into `out` (made if missing).
pub fn man(out: &Path, cmd: clap::Command) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot make {}", out.display()))?;
    clap_mangen::generate_to(cmd, out)
        .with_context(|| format!("cannot write the man pages into {}", out.display()))?;
    let n = std::fs::read_dir(out)?
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("signer-cli") && n.ends_with(".1")
        })
        .count();
    println!(
        "ok: {n} man pages in {} (read one with man -l {}/signer-cli.1)",
        out.display(),
        out.display()
    );
    Ok(())
}
