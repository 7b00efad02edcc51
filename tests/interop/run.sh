#!/usr/bin/env bash
# Interop test: the official MCP Python SDK (clients nobody on the team wrote) against the real
# approval-server, with approvals signed by real signer-cli processes:
#   * mcp 2.x (requirements.txt, venv .venv-interop/): Streamable HTTP and stdio
#     (`approval-server stdio --connect URL`), each in legacy (initialize), 2026-07-28 and auto
#     mode, plus raw JSON-RPC checks of the HTTP transport;
#   * mcp 1.x (requirements-sdk1.txt, venv .venv-interop-sdk1/): Streamable HTTP and stdio with
#     ClientSession and the initialize handshake.
#   * then, with each SDK, the stdio flows again against the embedded gate: `approval-server stdio
#     --data D ...` with no --connect, on a data folder nobody holds (issue #12);
#   * FastMCP's client with the MCP tasks extension (requirements-fastmcp.txt, venv
#     .venv-interop-fastmcp/, fastmcp_tasks_client.py): a gated tool under its own name, backed by
#     the reference filesystem MCP server from npm, called with a plain `await client.call_tool`
#     that waits on a task while signer-cli approves or rejects (issue #33). It runs its own
#     approval-server on a policy written for it.
#   * the README's client snippets (examples/clients/: the Python SDK 2.x, the TypeScript SDK v2 and
#     FastMCP, each over HTTP and over stdio), run exactly as the README shows them, against the
#     same server; their Python venvs are the two above, their node_modules examples/clients/'s own
#     (npm ci from its package-lock.json).
#
# Needs: Python 3 (with venv), node and npm (for the filesystem server) and the binaries already
# built (this script does not build them):
#   cargo build -p approval-server -p signer-cli
# Env: TARGET_DIR (default target/debug, relative to the checkout); SDKS (default
# "2 1 fastmcp clients": which clients to run; "fastmcp" alone runs only the tasks flow, "clients"
# only the README's snippets); FLOWS (comma-separated subset
# of python_client.py's flows, for one SDK; it does not affect the fastmcp run); KEEP_WORK_DIR=1
# keeps the temp folder (keys, data, server logs).
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
        log "installing $(grep -E '^(mcp|fastmcp-slim)==' "$req" | paste -sd' ' -) into $venv"
        rm -rf "$venv"
        "$PYTHON" -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$req"
        cp "$req" "$venv/.requirements.installed"
    fi
}

# ensure_filesystem_server: sets FS_SERVER_INDEX to the dist/index.js of the reference filesystem
# MCP server, at the version the cargo tests pin (FILESYSTEM_SERVER_VERSION in tests/src/lib.rs),
# installed as they install it and into the same folder, <checkout>/target/npm-downstream (so a
# `cargo test` run before this one already put it there): npm into a private folder, then renamed
# into place. Run as `node index.js <allowed dir>`: no npx and no network at run time.
ensure_filesystem_server() {
    local pkg="@modelcontextprotocol/server-filesystem" version prefix private
    version="$(sed -n 's/^pub const FILESYSTEM_SERVER_VERSION: &str = "\([^"]*\)";$/\1/p' "$REPO_ROOT/tests/src/lib.rs")"
    [ -n "$version" ] || die "no FILESYSTEM_SERVER_VERSION in tests/src/lib.rs"
    command -v node >/dev/null || die "node not found: the FastMCP flow runs $pkg with node (or leave fastmcp out of SDKS)"
    prefix="$REPO_ROOT/target/npm-downstream"
    FS_SERVER_INDEX="$prefix/node_modules/$pkg/dist/index.js"
    fs_installed() {
        [ -f "$1/node_modules/$pkg/dist/index.js" ] &&
            [ "$(node -p 'require(process.argv[1]).version' "$1/node_modules/$pkg/package.json" 2>/dev/null)" = "$version" ]
    }
    fs_installed "$prefix" && return 0
    command -v npm >/dev/null || die "npm not found: the FastMCP flow installs $pkg@$version with it"
    private="$prefix.$$"
    rm -rf "$private"
    mkdir -p "$private"
    log "installing $pkg@$version into $prefix"
    if ! npm install --no-audit --no-fund --prefix "$private" "$pkg@$version" >"$WORK_DIR/npm.log" 2>&1 \
        || ! fs_installed "$private"; then
        cat "$WORK_DIR/npm.log" >&2
        rm -rf "$private"
        die "npm install --no-audit --no-fund --prefix $private $pkg@$version failed"
    fi
    # A stale, incomplete install is replaced; a complete one put there meanwhile wins.
    if [ -e "$prefix" ] && ! fs_installed "$prefix"; then rm -rf "$prefix"; fi
    [ -e "$prefix" ] || mv "$private" "$prefix"
    rm -rf "$private"
    fs_installed "$prefix" || die "$prefix holds no $pkg@$version after the install"
}

# ensure_node_clients: examples/clients/node_modules from its package-lock.json (npm ci), redone
# only when the lock file changes.
ensure_node_clients() {
    local dir="$REPO_ROOT/examples/clients"
    command -v node >/dev/null || die "node not found: the TypeScript snippets need it (or leave clients out of SDKS)"
    if ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.lock.installed"; then
        command -v npm >/dev/null || die "npm not found: the TypeScript snippets install their SDK with it"
        log "installing the TypeScript SDK into $dir/node_modules (npm ci)"
        (cd "$dir" && npm ci --no-audit --no-fund >/dev/null) || die "npm ci in $dir failed"
        cp "$dir/package-lock.json" "$dir/node_modules/.lock.installed"
    fi
}

# check_snippets: runs each README client snippet (examples/clients/) as the README says, with the
# server's URL as its argument and target/debug on PATH (the stdio ones launch `approval-server`),
# then checks what it printed: the five tools, a proposal PENDING_QUORUM, its status PENDING, and
# that an approver's `signer-cli show` finds that proposal. One pass or failure per snippet; the
# last line is `N passed, N failed`.
check_snippets() {
    local dir="$REPO_ROOT/examples/clients" passed=0 failed=0 name out id why
    local tools="tools: approval_prepare, approval_status, approval_execute, approval_list, approval_withdraw"
    for name in python_sdk_http.py python_sdk_stdio.py fastmcp_http.py fastmcp_stdio.py \
                typescript_http.mjs typescript_stdio.mjs; do
        local -a run=()
        case "$name" in
            python_sdk_*) run=("$REPO_ROOT/.venv-interop/bin/python" "$dir/$name") ;;
            fastmcp_*) run=("$REPO_ROOT/.venv-interop-fastmcp/bin/python" "$dir/$name") ;;
            *.mjs) run=(node "$dir/$name") ;;
        esac
        why=""
        if ! out="$(PATH="$(dirname "$SERVER_BIN"):$PATH" timeout 60 "${run[@]}" "$MCP_URL" 2>"$WORK_DIR/$name.err")"; then
            why="exited non-zero: $(tail -n 5 "$WORK_DIR/$name.err")"
        elif ! grep -qxF "$tools" <<<"$out"; then
            why="no line '$tools'"
        elif ! id="$(sed -n 's/^prepare: PENDING_QUORUM \(p-[0-9a-f]*\)$/\1/p' <<<"$out")" || [ -z "$id" ]; then
            why="no line 'prepare: PENDING_QUORUM p-...'"
        elif ! grep -qxF "status: PENDING_QUORUM PENDING" <<<"$out"; then
            why="no line 'status: PENDING_QUORUM PENDING'"
        elif ! "$SIGNER_BIN" --server "$APPROVER_URL" --key "$KEYS_DIR/alice.key" show "$id" \
                </dev/null >"$WORK_DIR/$name.show" 2>&1; then
            why="signer-cli show $id failed: $(tail -n 3 "$WORK_DIR/$name.show")"
        fi
        if [ -z "$why" ]; then
            passed=$((passed + 1)); echo "PASS  snippet $name: $(grep '^prepare: ' <<<"$out")"
        else
            failed=$((failed + 1)); echo "FAIL  snippet $name: $why"; printf '%s\n' "$out" | sed 's/^/      /'
        fi
    done
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}

declare -a RUNS=()
FASTMCP_PY=""
SNIPPETS=""
for sdk in ${SDKS:-2 1 fastmcp clients}; do
    case "$sdk" in
        2) ensure_venv "$REPO_ROOT/.venv-interop" "$REPO_ROOT/tests/interop/requirements.txt"
           RUNS+=("$REPO_ROOT/.venv-interop/bin/python") ;;
        1) ensure_venv "$REPO_ROOT/.venv-interop-sdk1" "$REPO_ROOT/tests/interop/requirements-sdk1.txt"
           RUNS+=("$REPO_ROOT/.venv-interop-sdk1/bin/python") ;;
        fastmcp) ensure_venv "$REPO_ROOT/.venv-interop-fastmcp" "$REPO_ROOT/tests/interop/requirements-fastmcp.txt"
           FASTMCP_PY="$REPO_ROOT/.venv-interop-fastmcp/bin/python" ;;
        clients) ensure_venv "$REPO_ROOT/.venv-interop" "$REPO_ROOT/tests/interop/requirements.txt"
           ensure_venv "$REPO_ROOT/.venv-interop-fastmcp" "$REPO_ROOT/tests/interop/requirements-fastmcp.txt"
           ensure_node_clients
           SNIPPETS=1 ;;
        *) die "SDKS: unknown client '$sdk' (use 2, 1, fastmcp and/or clients)" ;;
    esac
done

start_server

total_passed=0; total_failed=0; status=0
# counted CMD...: runs a test client whose last output line is `N passed, N failed` and adds it to
# the totals (a client that died before its summary counts as one failure).
counted() {
    local rc summary
    set +e
    "$@" | tee "$WORK_DIR/report.txt"
    rc="${PIPESTATUS[0]}"
    set -e
    summary="$(tail -n 1 "$WORK_DIR/report.txt")"
    if [[ "$summary" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
        total_passed=$((total_passed + BASH_REMATCH[1])); total_failed=$((total_failed + BASH_REMATCH[2]))
    else
        total_failed=$((total_failed + 1))   # the client died before its summary
    fi
    [ "$rc" -eq 0 ] || status=1
}

for py in "${RUNS[@]}"; do
    counted "$py" "$REPO_ROOT/tests/interop/python_client.py" \
        --mcp-url "$MCP_URL" --approver-url "$APPROVER_URL" \
        --server-bin "$SERVER_BIN" --signer-bin "$SIGNER_BIN" --keys-dir "$KEYS_DIR" \
        --sandbox-dir "$WORK_DIR/data/sandbox" \
        ${FLOWS:+--flows "$FLOWS"}
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
    counted "$py" "$REPO_ROOT/tests/interop/python_client.py" \
        --mcp-url "http://127.0.0.1:$EMBED_PORT/mcp" --approver-url "http://127.0.0.1:$EMBED_PORT" \
        --server-bin "$SERVER_BIN" --signer-bin "$SIGNER_BIN" --keys-dir "$KEYS_DIR" \
        --sandbox-dir "$EMBED_DATA/sandbox" --stdio-args "$EMBED_ARGS" --flows "$flows"
done

# FastMCP + the tasks extension (issue #33): its own approval-server (started and stopped by the
# script, in $WORK_DIR/fastmcp) with the same approver keys, gating the filesystem server.
n_clients=${#RUNS[@]}
if [ -n "$FASTMCP_PY" ]; then
    n_clients=$((n_clients + 1))
    ensure_filesystem_server
    log "FastMCP tasks client: exposed kind fs.write_file over $FS_SERVER_INDEX"
    fastmcp_started=$SECONDS
    counted "$FASTMCP_PY" "$REPO_ROOT/tests/interop/fastmcp_tasks_client.py" \
        --server-bin "$SERVER_BIN" --signer-bin "$SIGNER_BIN" --keys-dir "$KEYS_DIR" \
        --keyring "$WORK_DIR/keyring" --work-dir "$WORK_DIR" --filesystem-server "$FS_SERVER_INDEX"
    log "FastMCP tasks flow: $((SECONDS - fastmcp_started)) s"
fi

# The README's client snippets (issue #36 part 4), against the first server.
if [ -n "$SNIPPETS" ]; then
    n_clients=$((n_clients + 6))
    log "README client snippets: examples/clients/"
    counted check_snippets
fi

if [ "$status" -ne 0 ] || [ "$total_failed" -ne 0 ]; then
    status=1
    show_server_log
    [ "$total_failed" -ne 0 ] || total_failed=1
fi
echo "interop: $n_clients client run(s) against approval-server"
echo "$total_passed passed, $total_failed failed"
exit "$status"
