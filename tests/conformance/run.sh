#!/usr/bin/env bash
# The MCP conformance suite (@modelcontextprotocol/conformance, pinned in package.json with
# the Node 22 it needs) against a real approval-server's /mcp, at each wire revision:
#   * --requirements 2025-11-25  (initialize handshake; what that revision requires, plus the
#                                 suite's not-scored extras for it)
#   * --requirements 2026-07-28  (stateless: server/discover, per-request _meta, HTTP headers)
#   * 2025-06-18 and 2025-03-26  (server-initialize, ping, tools-list; forced where the suite
#                                 dates a scenario later than the revision)
# The outcome is compared with expected-failures.txt (see compare.py): a failure not baselined,
# or a baselined scenario that passes, fails this script.
#
# Needs: Node and npm (any version: Node 22 is installed into tests/conformance/node_modules),
# Python 3, and the binaries already built (this script does not build them):
#   cargo build -p approval-server -p signer-cli
# Env: TARGET_DIR (default target/debug), KEEP_WORK_DIR=1 keeps the server's temp folder.
# Results (checks.json per scenario) are left in tests/conformance/results/ (gitignored).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/interop/lib.sh
source "$HERE/../interop/lib.sh"
cd "$REPO_ROOT"

# Pinned tools in the checkout (gitignored), reinstalled only when package-lock.json changes.
if [ ! -x "$HERE/node_modules/.bin/node" ] || [ ! -f "$HERE/node_modules/@modelcontextprotocol/conformance/dist/index.js" ] \
    || ! cmp -s "$HERE/package-lock.json" "$HERE/node_modules/.package-lock.installed"; then
    log "installing the conformance suite and Node 22 into $HERE/node_modules"
    (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$HERE/package-lock.json" "$HERE/node_modules/.package-lock.installed"
fi
NODE="$HERE/node_modules/.bin/node"
SUITE="$HERE/node_modules/@modelcontextprotocol/conformance/dist/index.js"
log "conformance $("$NODE" "$SUITE" --version) on node $("$NODE" --version)"

start_server

RESULTS="$HERE/results"
rm -rf "$RESULTS"
mkdir -p "$RESULTS"

# Server scenarios a `list` output names (the requirement set's own and its not-scored ones).
listed_server_scenarios() {
    awk '/^Server scenarios/ {s=1; next} /^Client scenarios/ {s=0} /^Run and reported/ {n=1; next}
         s && /^  - / {print $2}
         n && /^    - .*\[server\]/ {print $2}'
}

for rev in 2025-11-25 2026-07-28; do
    mkdir -p "$RESULTS/$rev"
    "$NODE" "$SUITE" list --requirements "$rev" | listed_server_scenarios > "$RESULTS/$rev/expected-scenarios.txt"
    log "conformance: --requirements $rev ($(wc -l < "$RESULTS/$rev/expected-scenarios.txt") server scenarios)"
    # The suite exits non-zero when anything fails; compare.py decides against the baseline.
    "$NODE" "$SUITE" server --url "$MCP_URL" --requirements "$rev" -o "$RESULTS/$rev" \
        > "$RESULTS/$rev/suite.log" 2>&1 || true
    sed -n '/=== SUMMARY ===/,$p' "$RESULTS/$rev/suite.log"
done

for rev in 2025-06-18 2025-03-26; do
    mkdir -p "$RESULTS/$rev"
    : > "$RESULTS/$rev/expected-scenarios.txt"
    for scenario in server-initialize ping tools-list; do
        echo "$scenario" >> "$RESULTS/$rev/expected-scenarios.txt"
        log "conformance: $scenario at $rev"
        "$NODE" "$SUITE" server --url "$MCP_URL" --scenario "$scenario" --spec-version "$rev" --force \
            -o "$RESULTS/$rev" >> "$RESULTS/$rev/suite.log" 2>&1 || true
    done
done

run_reporting python3 "$HERE/compare.py" "$RESULTS" "$HERE/expected-failures.txt"
