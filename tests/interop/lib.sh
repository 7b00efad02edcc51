# shellcheck shell=bash
# Shared by tests/interop/run.sh and tests/conformance/run.sh (sourced, not run).
#
# Starts a real approval-server on a free loopback port with freshly generated approver keys
# (signer-cli keygen for alice, bob and carol), a keyring of their public keys and a copy of
# the checkout's policies/, in a temporary folder that is removed on exit.
#
# After `start_server`: SERVER_PID, MCP_URL, APPROVER_URL, WORK_DIR, KEYS_DIR, SERVER_BIN,
# SIGNER_BIN are set, and an EXIT trap stops the server (by its pid) and removes WORK_DIR.

# The checkout root: two levels above this file.
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# The binaries are built once by CI before this runs; this script never builds them.
find_binaries() {
    local target="${TARGET_DIR:-target/debug}"
    case "$target" in /*) ;; *) target="$REPO_ROOT/$target" ;; esac
    SERVER_BIN="$target/approval-server"
    SIGNER_BIN="$target/signer-cli"
    [ -x "$SERVER_BIN" ] || die "$SERVER_BIN not found: build first (cargo build -p approval-server -p signer-cli) or set TARGET_DIR"
    [ -x "$SIGNER_BIN" ] || die "$SIGNER_BIN not found: build first (cargo build -p approval-server -p signer-cli) or set TARGET_DIR"
}

SERVER_PID=""
WORK_DIR=""
SERVER_LOG_SHOWN=""

show_server_log() {
    SERVER_LOG_SHOWN=1
    [ -s "$WORK_DIR/server.err" ] || return 0
    local plain="$WORK_DIR/server.err.txt"
    sed 's/\x1b\[[0-9;]*m//g' "$WORK_DIR/server.err" > "$plain" || true
    if grep -qE ' (WARN|ERROR) ' "$plain"; then
        log "approval-server warnings and errors (last 30; KEEP_WORK_DIR=1 keeps the whole log):"
        grep -E ' (WARN|ERROR) ' "$plain" | tail -n 30 >&2 || true
    else
        log "approval-server stderr (last 30 lines; KEEP_WORK_DIR=1 keeps the whole log):"
        tail -n 30 "$plain" >&2 || true
    fi
}

# run_reporting CMD...: runs a test command whose last output line is its `N passed, N failed`
# summary; on failure shows the server's log first and then repeats that summary, so the
# summary stays the last line of the whole run. Returns the command's status.
run_reporting() {
    local rc
    set +e
    "$@" | tee "$WORK_DIR/report.txt"
    rc="${PIPESTATUS[0]}"
    set -e
    if [ "$rc" -ne 0 ]; then
        show_server_log
        tail -n 1 "$WORK_DIR/report.txt"
    fi
    return "$rc"
}

cleanup() {
    local rc=$?
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [ -n "$WORK_DIR" ] && [ -d "$WORK_DIR" ]; then
        if [ "$rc" -ne 0 ] && [ -z "$SERVER_LOG_SHOWN" ]; then show_server_log; fi
        if [ -n "${KEEP_WORK_DIR:-}" ]; then log "kept $WORK_DIR"; else rm -rf "$WORK_DIR"; fi
    fi
    exit "$rc"
}

# keygen NAME: writes $KEYS_DIR/NAME.key and appends NAME's keyring line to $WORK_DIR/keyring.
keygen() {
    local name="$1" out line
    out="$("$SIGNER_BIN" keygen --name "$name" --out "$KEYS_DIR/$name.key" </dev/null 2>>"$WORK_DIR/keygen.log")" \
        || die "signer-cli keygen --name $name failed"
    line="$(printf '%s\n' "$out" | grep -E "^$name ed25519 [A-Za-z0-9+/]+=*\$" | head -n 1)" || true
    [ -n "$line" ] || die "signer-cli keygen printed no keyring line for $name: $out"
    printf '%s\n' "$line" >> "$WORK_DIR/keyring"
}

start_server() {
    find_binaries
    WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/approval-interop.XXXXXX")"
    trap cleanup EXIT
    trap 'exit 130' INT TERM
    KEYS_DIR="$WORK_DIR/approvers"
    mkdir -p "$KEYS_DIR" "$WORK_DIR/data"
    : > "$WORK_DIR/keyring"
    for n in alice bob carol; do keygen "$n"; done
    cp -R "$REPO_ROOT/policies" "$WORK_DIR/policies"

    : > "$WORK_DIR/server.out"   # exists before the background job opens it (no race with sed)
    : > "$WORK_DIR/server.err"
    "$SERVER_BIN" serve --data "$WORK_DIR/data" --policies "$WORK_DIR/policies" --keys "$WORK_DIR/keyring" \
        --listen 127.0.0.1:0 </dev/null >"$WORK_DIR/server.out" 2>"$WORK_DIR/server.err" &
    SERVER_PID=$!

    MCP_URL=""; APPROVER_URL=""
    for _ in $(seq 1 300); do
        MCP_URL="$(sed -n 's/^MCP endpoint: \(http[^ ]*\)$/\1/p' "$WORK_DIR/server.out" | head -n 1)" || true
        APPROVER_URL="$(sed -n 's/^Approver API: \(http[^ ]*\)$/\1/p' "$WORK_DIR/server.out" | head -n 1)" || true
        [ -n "$MCP_URL" ] && [ -n "$APPROVER_URL" ] && break
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK_DIR/server.out" >&2; die "approval-server exited before listening"; }
        sleep 0.1
    done
    if [ -z "$MCP_URL" ] || [ -z "$APPROVER_URL" ]; then
        cat "$WORK_DIR/server.out" >&2
        die "approval-server printed no URLs within 30 s"
    fi
    log "approval-server pid $SERVER_PID: MCP $MCP_URL, approver API $APPROVER_URL"
}
