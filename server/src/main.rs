//! The `approval-server` command line: parses the arguments and hands the
//! subcommand to [`approval_server::admin::dispatch`]; every command lives there.

use approval_server::admin::{self, Cli};
use clap::Parser;
use std::process::ExitCode;

/// mimalloc rather than glibc malloc: see the workspace `Cargo.toml` and BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(admin::dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
