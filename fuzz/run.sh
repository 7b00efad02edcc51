#!/bin/sh
# Runs each fuzz target for SECONDS (default 600), one after the other, in
# libFuzzer's fork mode so that a crash is saved and counted and fuzzing goes on.
# Usage: fuzz/run.sh [SECONDS] [TARGET...]   (FUZZ_NO_BUILD=1 skips the build)
set -eu
cd "$(dirname "$0")/.."
secs=${1:-600}
[ $# -gt 0 ] && shift
targets=${*:-"preview_hash keyring_parse policy_parse message_parse receipt_verify mcp_request"}
[ "${FUZZ_NO_BUILD:-}" = 1 ] || RUSTC_BOOTSTRAP=1 cargo fuzz build -s none -a
bin=fuzz/target/x86_64-unknown-linux-gnu/release
for t in $targets; do
    mkdir -p "fuzz/work/$t" "fuzz/artifacts/$t"
    log="fuzz/work/$t.log"
    echo "== $t for ${secs}s (log: $log)"
    "$bin/$t" "fuzz/work/$t" "fuzz/corpus/$t" -max_total_time="$secs" -fork=1 \
        -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
        -artifact_prefix="fuzz/artifacts/$t/" >"$log" 2>&1 || true
    # The last status line: executions (#N), coverage, corpus, crash/timeout/oom counts.
    grep -E '^#[0-9]+: ' "$log" | tail -1
    grep -E 'panicked at' "$log" | sort | uniq -c | head -5
    ls "fuzz/artifacts/$t" | head -10
done
