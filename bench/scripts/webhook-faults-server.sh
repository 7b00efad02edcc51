#!/bin/bash
# approval-bench --server-bin wrapper for measuring load beside hanging webhooks (issue #7).
#
# Adds a policy `fault.hook` (quorum 2 of the bench's alice, bob, carol; `webhook` executor
# posting to $HOOK_URL with a time-out of $HOOK_TIMEOUT seconds) to the bench's policies
# folder, then execs the real server ($REAL_SERVER), so the pid is still the server's and
# the bench's RSS and CPU probes still measure it; its stdout is copied to
# $FAULT_DIR/endpoints, where webhook-faults-driver.py finds the server. Example:
#
#   export FAULT_DIR=$(mktemp -d) REAL_SERVER=target/release/approval-server \
#          HOOK_URL=http://127.0.0.1:47999/hook HOOK_TIMEOUT=10 HOOK_MODE=hang SLOTS=16 DURATION=19
#   python3 bench/scripts/webhook-faults-driver.py & sleep 0.5
#   target/release/approval-bench --scenario round-trip --clients 32 --duration 30s \
#     --server-bin bench/scripts/webhook-faults-server.sh
#   wait   # the driver prints what every webhook execute ended as
set -eu
pol=""; prev=""
for a in "$@"; do [ "$prev" = "--policies" ] && pol="$a"; prev="$a"; done
[ -n "$pol" ] || { echo "webhook-faults-server.sh: no --policies argument" >&2; exit 2; }
cat > "$pol/fault.hook.toml" <<TOML
kind = "fault.hook"
description = "a webhook whose receiver misbehaves (issue #7 load with faults)"
quorum = 2
approvers = ["alice", "bob", "carol"]
ttl = "1h"
execute_within = "1h"
[executor]
type = "webhook"
url = "$HOOK_URL"
timeout = "${HOOK_TIMEOUT}s"
TOML
: > "$FAULT_DIR/endpoints"
exec "$REAL_SERVER" "$@" > >(tee -a "$FAULT_DIR/endpoints")
