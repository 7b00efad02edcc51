#!/usr/bin/env bash
# Interop test: the official MCP Python SDK (clients nobody on the team wrote) against the real
# approval-server, with approvals signed by real signer-cli processes:
#   * mcp 2.x (requirements.txt, venv .venv-interop/): Streamable HTTP and stdio
#     (`approval-server stdio --connect URL`), each in legacy (initialize), 2026-07-28 and auto
#     mode, plus raw JSON-RPC checks of the HTTP transport;
#   * mcp 1.x (requirements-sdk1.txt, venv .venv-interop-sdk1/): Streamable HTTP and stdio with
#     ClientSession and the initialize handshake.
#   * then, with each SDK, the stdio flows again against the embedded gate: `approval-server stdio
#     --data D ...` with no --connect, on a data folder nobody holds (issue #12).
#
# Needs: Python 3 (with venv) and the binaries already built (this script does not build them):
#   cargo build -p approval-server -p signer-cli
# Env: TARGET_DIR (default target/debug, relative to the checkout); SDKS (default "2 1": which
# SDK lines to run); FLOWS (comma-separated subset of python_client.py's flows, for one SDK);
# KEEP_WORK_DIR=1 keeps the temp folder (keys, data, server logs).
# Exit status is non-zero on any failure; the last line is `N passed, N failed`.
set -euo pipefail
# shellcheck source=tests/interop/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
PYTHON="${PYTHON:-python3}"

# ensure_venv DIR REQUIREMENTS: a venv in the checkout (gitignored), reinstalled only when the
# requirements file changes.
ensure_venv() {
    local venv="$1" req="$2"
    if [ ! -x "$venv/bin/python" ] || ! cmp -s "$req" "$venv/.requirements.installed"; then
        log "installing $(grep -E '^mcp==' "$req") into $venv"
        rm -rf "$venv"
        "$PYTHON" -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$req"
        cp "$req" "$venv/.requirements.installed"
    fi
}

declare -a RUNS=()
for sdk in ${SDKS:-2 1}; do
    case "$sdk" in
        2) ensure_venv "$REPO_ROOT/.venv-interop" "$REPO_ROOT/tests/interop/requirements.txt"
           RUNS+=("$REPO_ROOT/.venv-interop/bin/python") ;;
        1) ensure_venv "$REPO_ROOT/.venv-interop-sdk1" "$REPO_ROOT/tests/interop/requirements-sdk1.txt"
           RUNS+=("$REPO_ROOT/.venv-interop-sdk1/bin/python") ;;
        *) die "SDKS: unknown SDK line '$sdk' (use 2 and/or 1)" ;;
    esac
done

start_server

total_passed=0; total_failed=0; status=0
for py in "${RUNS[@]}"; do
    rc=0
    set +e
    "$py" "$REPO_ROOT/tests/interop/python_client.py" \
        --mcp-url "$MCP_URL" --approver-url "$APPROVER_URL" \
        --server-bin "$SERVER_BIN" --signer-bin "$SIGNER_BIN" --keys-dir "$KEYS_DIR" \
        --sandbox-dir "$WORK_DIR/data/sandbox" \
        ${FLOWS:+--flows "$FLOWS"} | tee "$WORK_DIR/report.txt"
    rc="${PIPESTATUS[0]}"
    set -e
    summary="$(tail -n 1 "$WORK_DIR/report.txt")"
    if [[ "$summary" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
        total_passed=$((total_passed + BASH_REMATCH[1])); total_failed=$((total_failed + BASH_REMATCH[2]))
    else
        total_failed=$((total_failed + 1))   # the client died before its summary
    fi
    [ "$rc" -eq 0 ] || status=1
done

# The embedded gate (issue #12): each stdio flow launches `approval-server stdio` on a data folder
# nobody holds, so the whole service runs in the SDK's subprocess; approvers sign on the port
# given with --listen. Each session ends when the SDK closes its stdin, before the next starts.
EMBED_PORT="$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
EMBED_DATA="$WORK_DIR/embedded-data"
EMBED_ARGS="[\"stdio\", \"--data\", \"$EMBED_DATA\", \"--policies\", \"$WORK_DIR/policies\", \"--keys\", \"$WORK_DIR/keyring\", \"--listen\", \"127.0.0.1:$EMBED_PORT\"]"
for py in "${RUNS[@]}"; do
    if [ "$("$py" -c 'import importlib.metadata as m; print(m.version("mcp").split(".")[0])')" = "1" ]; then
        flows="stdio-legacy"
    else
        flows="stdio-legacy,stdio-2026-07-28,stdio-auto"
    fi
    [ -z "${FLOWS:-}" ] || flows="$(printf '%s' "$FLOWS" | tr ',' '\n' | grep '^stdio-' | paste -sd, -)" || true
    [ -n "$flows" ] || continue
    log "embedded stdio: $flows (approver API on 127.0.0.1:$EMBED_PORT)"
    rc=0
    set +e
    "$py" "$REPO_ROOT/tests/interop/python_client.py" \
        --mcp-url "http://127.0.0.1:$EMBED_PORT/mcp" --approver-url "http://127.0.0.1:$EMBED_PORT" \
        --server-bin "$SERVER_BIN" --signer-bin "$SIGNER_BIN" --keys-dir "$KEYS_DIR" \
        --sandbox-dir "$EMBED_DATA/sandbox" --stdio-args "$EMBED_ARGS" --flows "$flows" | tee "$WORK_DIR/report.txt"
    rc="${PIPESTATUS[0]}"
    set -e
    summary="$(tail -n 1 "$WORK_DIR/report.txt")"
    if [[ "$summary" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
        total_passed=$((total_passed + BASH_REMATCH[1])); total_failed=$((total_failed + BASH_REMATCH[2]))
    else
        total_failed=$((total_failed + 1))
    fi
    [ "$rc" -eq 0 ] || status=1
done

if [ "$status" -ne 0 ] || [ "$total_failed" -ne 0 ]; then
    status=1
    show_server_log
    [ "$total_failed" -ne 0 ] || total_failed=1
fi
echo "interop: ${#RUNS[@]} SDK run(s) against approval-server"
echo "$total_passed passed, $total_failed failed"
exit "$status"
