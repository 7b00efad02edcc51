#!/bin/bash
# Where a PostgreSQL run's time goes: runs one approval-bench scenario against a fresh schema and
# prints, beside the bench's own report, what the machine and the database did meanwhile: the
# busy CPU seconds of the whole machine (the database's is that less the server's and the
# bench's), the database's commits (pg_stat_database.xact_commit) and its WAL flushes (pg_stat_wal.wal_sync).
# Divided by the run's operations, these say how many transactions and flushes one request costs,
# roughly: the database's backends report their statistics about once a second and when they
# exit, which can be after this script reads them, so the counts can fall short.
#
#   bench/scripts/pg-where.sh [--server-bin BIN] SCENARIO [INSTANCES]
#
# Needs psql and a PostgreSQL on 127.0.0.1:5432 (user root, database test), as the bench does.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=target/release/approval-server
if [ "${1:-}" = --server-bin ]; then BIN=$2; shift 2; fi
SC=${1:?scenario}; N=${2:-1}
PSQL="psql -h 127.0.0.1 -U root test -qAtc"
URL='postgres://root@127.0.0.1:5432/test?options=-csearch_path%3Dwhere'
$PSQL 'DROP SCHEMA IF EXISTS "where" CASCADE; CREATE SCHEMA "where"' >/dev/null
"$BIN" migrate --store "$URL" >/dev/null
busy() { # the machine's busy CPU time (every process, the database's short-lived backends
  # included), in 1/100 s: user + nice + system + irq + softirq of /proc/stat
  awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat
}
stats() { $PSQL "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = 'test'), (SELECT wal_sync FROM pg_stat_wal)"; }
# The server's note files go to tmpfs (NOTES_ROOT, else /dev/shm where there is one): on ext4,
# creating them in a folder where a run before deleted thousands costs the kernel more than the
# database does (round 15: 500 against 731 round trips a second, one build; see final-run.sh).
ROOT=${NOTES_ROOT:-/dev/shm}; [ -d "$ROOT" ] && [ -w "$ROOT" ] || ROOT=${TMPDIR:-/tmp}
NOTES=$(mktemp -d "$ROOT/approval-bench-notes.XXXXXX"); OUT=$(mktemp)
trap 'rm -rf "$NOTES" "$OUT"; $PSQL "DROP SCHEMA IF EXISTS \"where\" CASCADE" >/dev/null' EXIT
c0=$(busy); s0=$(stats)
target/release/approval-bench --server-bin "$BIN" --notes-dir "$NOTES" --scenario "$SC" --clients 32 --duration 10s \
  --instances "$N" --server-arg=--store --server-arg="$URL" --out "$OUT" | tee /dev/stderr | grep -E '^\|' || true
c1=$(busy); s1=$(stats)
ops=$(grep -E "^\| $SC " "$OUT" | head -1 | awk -F'|' '{gsub(/[ ,]/,"",$5); print $5}')
echo "the whole run (start and prefill included): machine busy CPU $(( (c1 - c0) ))/100 s (server and bench: see the table), commits $(( ${s1%|*} - ${s0%|*} )), WAL flushes $(( ${s1#*|} - ${s0#*|} )); measured ops: ${ops:-?}"
