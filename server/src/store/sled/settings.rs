//! sled's settings for the embedded store: one place for what every open of a data
//! folder passes to sled (the server's, a restore's, the admin commands').

use std::path::Path;

/// sled's page cache size. 160 MiB keeps the server's peak RSS under 512 MiB through a fill of
/// 1,000,000 proposals with checkpoints running (467 MiB, against 597 MiB at 256 MiB), with the
/// same throughput and large-store latencies (BENCHMARKS.md, round 14).
pub const CACHE_BYTES: u64 = 160 * 1024 * 1024;

/// How much log may become durable before sled writes a new recovery snapshot
/// (vendor/sled/PATCHES.md §7), which bounds a start's replay after a crash: about
/// 0.5 s on the 2-core machines of BENCHMARKS.md, against 8 s for the 4 GiB a fill of
/// 1,000,000 proposals leaves when sled snapshots only at open. Each checkpoint reads
/// that log back once, on sled's flusher thread.
pub const CHECKPOINT_BYTES: u64 = 256 * 1024 * 1024;

/// Overrides [`CHECKPOINT_BYTES`], for tests that must see checkpoints happen
/// often (the crash harness SIGKILLs the server in the middle of them).
pub const CHECKPOINT_BYTES_ENV: &str = "APPROVAL_SLED_CHECKPOINT_BYTES";

fn checkpoint_bytes() -> u64 {
    std::env::var(CHECKPOINT_BYTES_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(CHECKPOINT_BYTES)
}

/// The sled configuration every open of the store in `dir` uses.
pub(super) fn config(dir: &Path) -> sled::Config {
    sled::Config::new()
        .path(dir)
        .mode(sled::Mode::HighThroughput)
        // sled's default page cache is 1 GiB; a bounded cache keeps the server's
        // memory bounded however many proposals the store holds.
        .cache_capacity(CACHE_BYTES)
        .checkpoint_every_bytes(Some(checkpoint_bytes()))
}
