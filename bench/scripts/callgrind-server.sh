#!/bin/sh
# Runs approval-server under valgrind's callgrind, for profiling with approval-bench:
#
#   APPROVAL_SERVER=target/release/approval-server \
#     approval-bench --scenario prepare --clients 8 --duration 5s \
#       --server-bin bench/scripts/callgrind-server.sh
#   callgrind_annotate --inclusive=no  /tmp/callgrind.approval-server.<pid> | head -60
#   callgrind_annotate --inclusive=yes /tmp/callgrind.approval-server.<pid> | head -80
#
# The bench stops its server with SIGTERM, so callgrind writes its output on exit.
# Set-up calls (start-up, prefill) are in the profile too; keep the measured phase long
# enough to dominate. Callgrind's own messages go to the server log.
exec valgrind --tool=callgrind \
  --callgrind-out-file="${CALLGRIND_OUT:-/tmp/callgrind.approval-server.%p}" \
  "${APPROVAL_SERVER:-target/release/approval-server}" "$@"
